#!/usr/bin/env bash
# Install the OCR engine of kohaku/ingest/text/ocr.py: Tesseract 5 and its language data from Debian
# (tesseract-ocr, tesseract-ocr-<lang>; English by default). No Python package and no model
# download: the engine runs as a command, its models come inside the Debian packages.
# Idempotent: nothing is installed when `tesseract --list-langs` already has every language.
#   bash scripts/setup_ocr.sh              # tesseract + English
#   bash scripts/setup_ocr.sh eng chi_sim  # + Simplified Chinese (tesseract-ocr-chi-sim)
#   KOHAKU_OCR_LANGS="eng deu" bash scripts/setup_ocr.sh
# Where apt-get cannot be used (not root, no apt), it prints the one line naming the packages and
# exits 0: kohaku then keeps today's behaviour (pages without a text layer are named, not read),
# and the OCR tests skip saying so. KOHAKU_OCR_REQUIRED=1 makes that an error (exit 1).
set -euo pipefail

langs=("$@")
if [ ${#langs[@]} -eq 0 ]; then
  read -r -a langs <<< "${KOHAKU_OCR_LANGS:-eng}"
fi
pkgs=(tesseract-ocr)
for l in "${langs[@]}"; do
  case "$l" in
    *[!A-Za-z0-9_]*|"") echo "setup_ocr: bad language code '$l' (tesseract codes: eng, deu, chi_sim)" >&2; exit 2 ;;
  esac
  pkgs+=("tesseract-ocr-$(echo "$l" | tr '[:upper:]_' '[:lower:]-')")
done

have_all() {
  command -v tesseract >/dev/null 2>&1 || return 1
  local have
  have=$(tesseract --list-langs 2>/dev/null | tail -n +2) || return 1
  for l in "${langs[@]}"; do
    grep -qx "$l" <<< "$have" || return 1
  done
}

if have_all; then
  echo "setup_ocr: $(tesseract --version 2>/dev/null | head -n 1) with ${langs[*]} already installed"
  exit 0
fi

unavailable() {
  echo "setup_ocr: OCR engine not installed ($1): install the Debian packages ${pkgs[*]}; pages without a text layer stay unread" >&2
  if [ "${KOHAKU_OCR_REQUIRED:-0}" = "1" ]; then exit 1; fi
  exit 0
}

command -v apt-get >/dev/null 2>&1 || unavailable "no apt-get"
SUDO=()
if [ "$(id -u)" != "0" ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO=(sudo -n); else unavailable "not root"; fi
fi
export DEBIAN_FRONTEND=noninteractive
# the package lists may be old or empty on a fresh machine: update once, then install
if ! "${SUDO[@]}" apt-get install -y -q --no-install-recommends "${pkgs[@]}" >/dev/null 2>&1; then
  "${SUDO[@]}" apt-get update -q >/dev/null 2>&1 || unavailable "apt-get update failed"
  "${SUDO[@]}" apt-get install -y -q --no-install-recommends "${pkgs[@]}" >/dev/null \
    || unavailable "apt-get install failed"
fi
have_all || unavailable "installed, but tesseract --list-langs lacks ${langs[*]}"
echo "setup_ocr: $(tesseract --version 2>/dev/null | head -n 1) with ${langs[*]} installed"
