# Shared by the set-up scripts (sourced, not run).

# Which dependency set: "pinned" (constraints.txt, the default; CI) or "latest" (MULOSD_LATEST_DEPS=1).
mulosd_mode() {
  case "${MULOSD_LATEST_DEPS:-0}" in
    0|"") echo pinned ;;
    1) echo latest ;;
    *) echo "MULOSD_LATEST_DEPS must be 0 or 1, got '${MULOSD_LATEST_DEPS}'" >&2; return 1 ;;
  esac
}

# pip_quiet TAG PYTHON ARGS...: pip with this machine's noise filtered out (its pip configuration names
# index folders that do not exist, and pip warns once per package: "Location ... is ignored: it is
# neither a file nor a directory"), retried: PyPI connections do get reset. Output goes to stderr.
pip_quiet() {
  local tag="$1" py="$2" i
  shift 2
  for i in 1 2 3; do
    if "$py" -m pip "$@" >&2 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); then
      return 0
    fi
    echo "[$tag] pip $1 failed (attempt $i of 3)" >&2
    [ "$i" = 3 ] || sleep 15
  done
  return 1
}

# Where the set-up scripts keep the venvs and ComfyUI: $XDG_CACHE_HOME/mulosd when XDG_CACHE_HOME is an
# absolute path (the XDG base directory rule: a relative one is ignored), else ~/.cache/mulosd.
# mulosd_core/devenv.py says the same in Python.
mulosd_cache() {
  case "${XDG_CACHE_HOME:-}" in
    /*) echo "$XDG_CACHE_HOME/mulosd" ;;
    *) echo "$HOME/.cache/mulosd" ;;
  esac
}

# Progress on stderr, so that a script's stdout stays its result: one line when a long step starts and
# one when it ends, with its time and, given a folder, how much the folder grew.
#   step_begin TAG WHAT [FOLDER [HINT]]   ... the step ...   step_end
step_mb() { [ -e "$1" ] && du -sm "$1" 2>/dev/null | cut -f1 || echo 0; }
step_size() { if [ "$1" -ge 1024 ]; then awk -v m="$1" 'BEGIN { printf "%.1f GB\n", m / 1024 }'; else echo "$1 MB"; fi; }
step_begin() {
  _step_tag="$1" _step_what="$2" _step_dir="${3:-}" _step_t0=$(date +%s) _step_mb0=0
  [ -z "$_step_dir" ] || _step_mb0=$(step_mb "$_step_dir")
  echo "[$_step_tag] $_step_what${4:+ ($4)} ..." >&2
}
step_end() {
  local line="[$_step_tag] $_step_what took $(( $(date +%s) - _step_t0 ))s" now
  if [ -n "$_step_dir" ]; then
    now=$(step_mb "$_step_dir")
    line="$line; $_step_dir +$(step_size $(( now > _step_mb0 ? now - _step_mb0 : 0 ))), now $(step_size "$now")"
  fi
  echo "$line" >&2
}
