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
