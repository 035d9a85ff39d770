#!/usr/bin/env bash
# Create (once) and print the path of the project's Python environment: the library, the tests, the
# demo and a real ComfyUI server all run on its python.
#
# Two dependency sets (docs/RUNTIME.md):
#   pinned (default, CI)   every package at the version constraints.txt pins (the versions of a green
#                          test run), so a run is reproducible. Venv: CACHE/venv
#   MULOSD_LATEST_DEPS=1   the newest releases requirements*.txt admit, i.e. what a user installing the
#                          pack today gets; re-resolved once a day, so upstream drift shows here first.
#                          Venv: CACHE/venv-latest
# CACHE is $XDG_CACHE_HOME/mulosd, or ~/.cache/mulosd without XDG_CACHE_HOME (common.sh: mulosd_cache).
# Both take torch 2.14.1 / torchvision 0.29.1, the pair that works beside PyPI's torchvision (a CUDA
# build, even on a CPU machine: about 6.6 GB in all). `mulosd_core` is installed editable (pyproject's
# [tool.setuptools] lists that package alone), so `import mulosd_core` works from any folder.
#
# Reused when its stamp matches the recipe (python version, torch pair, requirements*.txt,
# constraints.txt, pyproject.toml, mode); a changed recipe reinstalls into it. It refuses, saying what
# to do, a folder it did not make, a venv of the other mode, and a pinned venv whose packages no longer
# match constraints.txt. MULOSD_VENV places the venv elsewhere. `--recipe` prints the stamp it wants.
# Stdout is the venv's path and nothing else; progress (a line per step, its time and size) goes to stderr.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$here/scripts/common.sh"

MODE="$(mulosd_mode)"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null || PY=python3
TORCH_PINS="torch==2.14.1
torchvision==0.29.1"
CONSTRAINTS="$here/constraints.txt"
if [ "$MODE" = latest ]; then
  VENV="${MULOSD_VENV:-$(mulosd_cache)/venv-latest}"
  pins_text="$(date -u +%F)"   # re-resolve the newest versions once a day
else
  VENV="${MULOSD_VENV:-$(mulosd_cache)/venv}"
  [ -f "$CONSTRAINTS" ] || { echo "[setup_env] ERROR: $CONSTRAINTS is missing" >&2; exit 1; }
  pins_text="$(cat "$CONSTRAINTS")"
fi
py_version="$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
recipe="v2|$MODE|$py_version|$TORCH_PINS|$(cat "$here/requirements.txt" "$here/requirements-test.txt" "$here/pyproject.toml")|$pins_text"
stamp_hash="$(printf '%s' "$recipe" | sha256sum | cut -c1-12) $MODE"
stamp="$VENV/.mulosd-stamp"   # "<recipe hash> <mode>", written when an install completes
made="$VENV/.mulosd-made"     # "<mode>", written when this script creates the venv

if [ "${1:-}" = --recipe ]; then echo "$stamp_hash"; exit 0; fi

log() { echo "[setup_env] $*" >&2; }
refuse() { log "ERROR: $*"; exit 1; }

# The venv's packages as the recipe left them, and mulosd_core from this clone: check_venv.py.
# Returns 0 when ready; refuses a pinned venv whose versions drifted; fixes the editable install.
check_ready() {
  local args=(--repo "$here") out rc
  [ "$MODE" = pinned ] && args+=(--constraints "$CONSTRAINTS")
  set +e
  out="$(cd / && "$VENV/bin/python" -I "$here/scripts/check_venv.py" "${args[@]}")"
  rc=$?
  set -e
  case "$rc" in
    0) return 0 ;;
    3) log "$out: installing it from $here (editable)"
       install_library ;;
    1) refuse "$VENV no longer matches $CONSTRAINTS (changed after set-up?):
$(printf '%s\n' "$out" | sed 's/^/    /')
  Remove $stamp to reinstall the pinned versions into it, or remove the venv, then run this again." ;;
    *) refuse "checking $VENV failed (exit $rc): $out" ;;
  esac
}

install_library() {
  local out
  step_begin setup_env "mulosd_core from $here (editable)"
  # The build's own chatter (setuptools' licence and editable-mode notices) only when it fails.
  if ! out="$(cd "$here" && "$VENV/bin/python" -m pip install -q --no-deps -e . 2>&1)"; then
    printf '%s\n' "$out" | grep -v "is ignored: it is neither a file nor a directory" >&2
    refuse "the editable install of $here failed"
  fi
  step_end
}

# The folder is ours, of this mode, on this python: or say why not.
check_owner() {
  [ -e "$VENV" ] || return 0
  if [ -f "$made" ]; then
    local had; had="$(cat "$made")"
    [ "$had" = "$MODE" ] || refuse "$VENV holds the $had dependency set, this run wants $MODE$( [ "$MODE" = latest ] \
      && echo " (MULOSD_LATEST_DEPS=1)"). Point MULOSD_VENV at another folder (or unset it: each mode has its own default)."
  elif [ -f "$stamp" ]; then   # made before the two modes existed: its set was the pinned venv's
    [ "$MODE" = pinned ] || refuse "$VENV is an older pinned venv, this run wants latest (MULOSD_LATEST_DEPS=1). \
Point MULOSD_VENV at another folder (or unset it: each mode has its own default)."
  elif [ -n "$(ls -A "$VENV" 2>/dev/null)" ]; then
    refuse "$VENV exists but was not made by this script; move it away or set MULOSD_VENV"
  fi
  if [ -x "$VENV/bin/python" ]; then
    local have; have="$("$VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    [ "$have" = "$py_version" ] || refuse "$VENV runs Python $have, this run wants $py_version ($PY); remove the venv or set MULOSD_VENV"
  fi
}

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$stamp_hash" ]; then
  check_ready
  echo "$VENV"; exit 0
fi
check_owner
mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"; flock 9   # one installer at a time; re-check after waiting
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$stamp_hash" ]; then
  check_ready
  echo "$VENV"; exit 0
fi
t0=$(date +%s)
if [ -x "$VENV/bin/python" ]; then
  log "updating $VENV to this recipe ($MODE dependencies)"
else
  log "creating $VENV ($MODE dependencies; first run: a few minutes and about 6.6 GB, CUDA torch even on a CPU)"
  step_begin setup_env "venv with $PY (Python $py_version)" "$VENV"
  "$PY" -m venv "$VENV"
  step_end
fi
echo "$MODE" > "$made"
rm -f "$stamp"
pin_file="$(mktemp)"
trap 'rm -f "$pin_file"' EXIT
if [ "$MODE" = pinned ]; then
  cat "$CONSTRAINTS" > "$pin_file"
  upgrade=()
else
  printf '%s\n' "$TORCH_PINS" > "$pin_file"   # newest of everything else; torch stays the working pair
  upgrade=(--upgrade --upgrade-strategy eager)
fi
# pip runs quietly (its full log is hundreds of lines): each step says when it starts, and when it ends
# how long it took and how much the venv grew. The hints are first-install figures on a 2-core machine.
step_begin setup_env "pip" "$VENV"
pip_quiet setup_env "$VENV/bin/python" install -q --upgrade pip
step_end
step_begin setup_env "$(echo $TORCH_PINS)" "$VENV" "first install: about 2 minutes, 5.5 GB"
pip_quiet setup_env "$VENV/bin/python" install -q $TORCH_PINS -c "$pin_file"
step_end
step_begin setup_env "requirements.txt + requirements-test.txt, $MODE" "$VENV" "first install: about 1 minute"
pip_quiet setup_env "$VENV/bin/python" install -q "${upgrade[@]}" -c "$pin_file" \
  -r "$here/requirements.txt" -r "$here/requirements-test.txt"
step_end
install_library
echo "$stamp_hash" > "$stamp"
check_ready
log "ready in $(( $(date +%s) - t0 ))s: $VENV ($MODE)"
echo "$VENV"
