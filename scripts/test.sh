#!/usr/bin/env bash
# THE test command (README, CI): bash scripts/test.sh [pytest args...]
#
# Sets up what the tests need (project venv, a real ComfyUI 0.3.75, Debian's
# Chromium; each reused once installed), then runs pytest from the repo root with
# the venv's python. Without arguments it runs `tests`; arguments replace that
# (paths, -k, -x ...; with options only, pyproject's testpaths = tests applies).
# MULOSD_SKIP_INTEGRATION=1 skips the ComfyUI/Chromium setup and tests/integration
# (a quick local loop; CI never sets it). pytest's "no tests ran" (exit 5) fails.
# Dependencies: the versions constraints.txt pins (default; CI), or with MULOSD_LATEST_DEPS=1 the
# newest releases, in a venv of their own (scripts/setup_env.sh), to find upstream drift first.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
source scripts/common.sh
echo "[test.sh] dependencies: $(mulosd_mode) ($( [ "$(mulosd_mode)" = latest ] && echo 'newest releases, MULOSD_LATEST_DEPS=1' || echo 'constraints.txt'))" >&2

step_begin test.sh setup_env
VENV="$(bash scripts/setup_env.sh)"
step_end

skip_integration="${MULOSD_SKIP_INTEGRATION:-0}"
extra=()
if [ "$skip_integration" = 1 ]; then
  echo "[test.sh] MULOSD_SKIP_INTEGRATION=1: no ComfyUI/Chromium setup, tests/integration ignored" >&2
  extra+=(--ignore=tests/integration)
else
  step_begin test.sh setup_comfyui
  MULOSD_COMFYUI="$(bash scripts/setup_comfyui.sh)"
  export MULOSD_COMFYUI
  step_end
  step_begin test.sh setup_browser
  bash scripts/setup_browser.sh >/dev/null
  step_end
fi

if [ "$#" -eq 0 ]; then set -- tests; fi
step_begin test.sh pytest
set +e
"$VENV/bin/python" -m pytest -q "${extra[@]}" "$@"
rc=$?
set -e
step_end
if [ "$rc" -eq 5 ]; then
  echo "[test.sh] ERROR: pytest collected no tests (exit 5); a run that tests nothing is a failure" >&2
  exit 1
fi
exit "$rc"
