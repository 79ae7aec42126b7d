"""scripts/bench_parse.py runs end to end on a small corpus: rounds, the parallel raw rate beside
two workers, the median row, and the tree (a benchmark script, so only its shape is checked
here, never a timing)."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _bench():
    # imported by name (scripts/ on the path), so the spawned raw-rate processes can import it too
    if str(ROOT / "scripts") not in sys.path:
        sys.path.insert(0, str(ROOT / "scripts"))
    return importlib.import_module("kohaku.tools.bench_parse")


def test_bench_parse_rounds_and_workers(capsys):
    bench = _bench()
    assert bench.main([str(ROOT / "data/sample"), "--rounds", "2", "--workers", "1", "2", "--no-figures"]) == 0
    out = capsys.readouterr().out
    assert len(re.findall(r"round \d: raw text layer \(PDFium text only, one process\)", out)) == 2
    assert len(re.findall(r"round \d: raw text layer in 2 processes at once: [\d.]+ pages/s, [\d.]+ per process",
                          out)) == 2
    assert "raw per process / kohaku per worker" in out and "(round 0: the median over the rounds)" in out
    # 2 runs x 2 rounds + a median row per run
    assert len(re.findall(r"│ pdfium-w[12] ┆ [0-2] ", out)) == 6


def test_parallel_raw_rate_reads_every_page():
    bench = _bench()
    pdfs = sorted((ROOT / "tests/data/real_pdfs").glob("*.pdf"))
    pages, seconds = bench.raw_text_rate_parallel(pdfs, 2)
    assert pages == bench.raw_text_rate(pdfs)[0] == 35 and seconds > 0
