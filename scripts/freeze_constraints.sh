#!/usr/bin/env bash
# Write constraints.txt from a venv that just passed the whole suite (the pins of the pinned mode).
#
#   MULOSD_LATEST_DEPS=1 bash scripts/test.sh                  # newest versions, all green?
#   MULOSD_LATEST_DEPS=1 bash scripts/freeze_constraints.sh    # then they become the pins
#
# Freezes the venv of the current mode (or MULOSD_VENV) after ComfyUI's requirements are in it, so
# the pins cover the integration tests' packages too; the editable mulosd_core is left out.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$here/scripts/common.sh"
if [ "$(mulosd_mode)" = latest ]; then
  VENV="${MULOSD_VENV:-$(mulosd_cache)/venv-latest}"
else
  VENV="${MULOSD_VENV:-$(mulosd_cache)/venv}"
fi
[ -f "$VENV/.mulosd-comfyui-deps-stamp" ] || { echo "[freeze] ERROR: $VENV lacks ComfyUI's requirements; run bash scripts/test.sh first" >&2; exit 1; }
out="$here/constraints.txt"
# The pinned mode runs ComfyUI's own frontend pin (setup_comfyui.sh), whichever frontend this venv holds:
# the latest mode's newer one would contradict it in pip's resolver.
frontend="$(MULOSD_LATEST_DEPS=0 bash "$here/scripts/setup_comfyui.sh" --requirements | grep -E '^comfyui-frontend-package==')"
{
  echo "# Known-good versions: the venv of a green \`bash scripts/test.sh\` run, frozen by scripts/freeze_constraints.sh"
  echo "# on $(date -u +%F) (Python $("$VENV/bin/python" -c 'import platform; print(platform.python_version())'), $(uname -m))."
  echo "# scripts/setup_env.sh installs these for the tests and CI (pinned mode). Users install the unpinned"
  echo "# requirements.txt; MULOSD_LATEST_DEPS=1 bash scripts/test.sh runs the suite on the newest versions."
  "$VENV/bin/python" -m pip freeze --exclude-editable 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2) \
    | grep -vE '^(comfyui-mulosd|comfyui_mulosd)[=@ ]' \
    | sed -E "s/^comfyui[-_]frontend[-_]package==.*/comfyui_frontend_package==${frontend#*==}/" | LC_ALL=C sort -f
} > "$out.tmp"
mv "$out.tmp" "$out"
echo "[freeze] wrote $out ($(grep -c '==' "$out") pins from $VENV)" >&2
