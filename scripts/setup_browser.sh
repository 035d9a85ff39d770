#!/usr/bin/env bash
# Install (once) Debian's Chromium for the frontend tests; Playwright drives it
# through executable_path, so no browser build is downloaded (none could be).
# Needs root for apt-get (CI runs as root); does nothing when Chromium is present.
# Stdout is the browser's path; progress (a line per apt-get step, its time and size) goes to stderr.
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/common.sh"
CHROMIUM=/usr/bin/chromium
if [ -x "$CHROMIUM" ]; then
  echo "[setup_browser] reusing $CHROMIUM" >&2
else
  echo "[setup_browser] installing chromium and fonts-dejavu-core with apt-get" >&2
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  # apt's progress (about 120 packages) goes to a log, shown only when a step fails; each step prints
  # its time, and the install what apt fetched and unpacked (its own counts and sizes).
  apt_log="$(mktemp)"
  trap 'rm -f "$apt_log"' EXIT
  apt_() {
    if ! $SUDO apt-get -o DPkg::Lock::Timeout=600 "$@" >"$apt_log" 2>&1; then
      tail -n 40 "$apt_log" >&2
      echo "[setup_browser] ERROR: apt-get $1 failed (last lines above)" >&2
      exit 1
    fi
  }
  step_begin setup_browser "apt-get update"
  apt_ update -q
  step_end
  step_begin setup_browser "apt-get install chromium fonts-dejavu-core" "" "fresh machine: about 2 minutes, 120 packages"
  apt_ install -y -q chromium fonts-dejavu-core
  step_end
  grep -E '^[0-9]+ upgraded, [0-9]+ newly installed|^Need to get |^After this operation' "$apt_log" \
    | sed 's/^/[setup_browser]   /' >&2 || true
  [ -x "$CHROMIUM" ] || { echo "[setup_browser] ERROR: $CHROMIUM missing after install" >&2; exit 1; }
fi
echo "$CHROMIUM"
