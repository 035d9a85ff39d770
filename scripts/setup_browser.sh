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
  $SUDO apt-get -o DPkg::Lock::Timeout=600 update -q >&2
  $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -q chromium fonts-dejavu-core >&2
  [ -x "$CHROMIUM" ] || { echo "[setup_browser] ERROR: $CHROMIUM missing after install" >&2; exit 1; }
fi
echo "$CHROMIUM"
