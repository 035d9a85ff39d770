#!/usr/bin/env bash
# Install (once) Debian's Chromium for the frontend tests; Playwright drives it
# through executable_path, so no browser build is downloaded (none could be).
# Needs root for apt-get (CI runs as root); does nothing when Chromium is present.
set -euo pipefail
CHROMIUM=/usr/bin/chromium
if [ -x "$CHROMIUM" ]; then
  echo "[setup_browser] reusing $CHROMIUM" >&2
else
  echo "[setup_browser] installing chromium and fonts-dejavu-core with apt-get" >&2
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  # apt's progress (about 120 packages) goes to a log, shown only when a step fails.
  apt_log="$(mktemp)"
  trap 'rm -f "$apt_log"' EXIT
  if ! { $SUDO apt-get -o DPkg::Lock::Timeout=600 update -q &&
         $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -q chromium fonts-dejavu-core; } >"$apt_log" 2>&1; then
    tail -n 40 "$apt_log" >&2
    echo "[setup_browser] ERROR: apt-get failed (last lines above)" >&2
    exit 1
  fi
  echo "[setup_browser] $(grep -E '^[0-9]+ upgraded, [0-9]+ newly installed' "$apt_log" || echo 'installed')" >&2
  [ -x "$CHROMIUM" ] || { echo "[setup_browser] ERROR: $CHROMIUM missing after install" >&2; exit 1; }
fi
echo "$CHROMIUM"
