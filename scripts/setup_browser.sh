#!/usr/bin/env bash
# Install Debian's chromium and chromium-driver for the report tests (tests/test_report_html.py
# opens report.html in headless Chromium through /usr/bin/chromedriver; no browser is ever
# downloaded by a test tool). Idempotent: nothing happens when both are installed. Where apt is
# not usable (not root, no apt-get, no package registry) it says so in one line and exits 0: the
# browser tests then skip with that reason, every other test runs.
set -uo pipefail
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "setup_browser: no apt-get here; install chromium and its driver at /usr/bin/chromium and /usr/bin/chromedriver, or the browser tests skip"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
    echo "setup_browser: not root and no password-less sudo; run 'apt-get install -y chromium chromium-driver' as root, or the browser tests skip"
    exit 0
  fi
fi
export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get install -y -q chromium chromium-driver >/tmp/kohaku-setup-browser.log 2>&1; then
  $SUDO apt-get update -q >>/tmp/kohaku-setup-browser.log 2>&1
  if ! $SUDO apt-get install -y -q chromium chromium-driver >>/tmp/kohaku-setup-browser.log 2>&1; then
    echo "setup_browser: apt-get could not install chromium chromium-driver (see /tmp/kohaku-setup-browser.log); the browser tests skip"
    exit 0
  fi
fi
echo "setup_browser: installed $(/usr/bin/chromium --version 2>/dev/null | head -n1)"
