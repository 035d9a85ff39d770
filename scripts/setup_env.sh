#!/usr/bin/env bash
# Create (once) and print the path of the project's Python environment.
# One venv serves the library, the tests and a real ComfyUI server, so torch is
# the build that works beside PyPI's torchvision (see shared/comfyui-runtime.md).
# Reused when its stamp matches this recipe; set MULOSD_VENV to place it elsewhere.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null || PY=python3
TORCH_SPEC="torch==2.14.1 torchvision==0.29.1"
recipe="$TORCH_SPEC|$(cat "$here/requirements.txt" "$here/requirements-test.txt" 2>/dev/null)"
stamp_hash=$(printf '%s' "$recipe" | sha256sum | cut -c1-12)
VENV="${MULOSD_VENV:-$HOME/.cache/mulosd/venv}"
stamp="$VENV/.mulosd-stamp"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$stamp_hash" ]; then
  echo "$VENV"; exit 0
fi
mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"; flock 9   # one installer at a time; re-check after waiting
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$stamp_hash" ]; then
  echo "$VENV"; exit 0
fi
echo "[setup_env] creating $VENV (first run takes a few minutes)" >&2
mkdir -p "$(dirname "$VENV")"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip >&2
"$VENV/bin/python" -m pip install -q $TORCH_SPEC >&2
"$VENV/bin/python" -m pip install -q -r "$here/requirements.txt" -r "$here/requirements-test.txt" >&2
echo "$stamp_hash" > "$stamp"
echo "$VENV"
