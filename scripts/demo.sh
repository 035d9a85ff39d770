#!/usr/bin/env bash
# The demo on the embedded models: AR vs MuLo-SD side by side. Sets up its own environment.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$(bash "$here/scripts/setup_env.sh")"
cd "$here"
exec "$VENV/bin/python" -m mulosd_core.demo "$@"
