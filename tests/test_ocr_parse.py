"""OCR inside the parse stage (issue 33): pages without a usable text layer are recognised and
read by kohaku's layout like any page; blocks say ``source: ocr`` and the page's confidence; a
page that has a text layer (even an invisible one over a scan) is not recognised again; without
the engine, one warning and today's behaviour; the engine's identity is in the parse key; a
question whose answer is only on an image-only page retrieves that page.

The engine is Tesseract (``bash scripts/setup_ocr.sh``); these tests skip without it.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import polars as pl
import pytest

from conftest import compose
from kohaku.ingest.corpus import read_metadata
from kohaku.ingest.parsing import ParseConfig, ocr_key, read_corpus
from kohaku.runner.pipeline import run_pipeline
from kohaku.ingest.text.ocr import OcrOptions, OcrUnavailable, engine_identity, word_accuracy
from kohaku.ingest.tree import TreeConfig, build_tree

REPO = Path(__file__).resolve().parents[1]
OCR_DATA = REPO / "tests/data/ocr"
SCAN = OCR_DATA / "rendered_scan.pdf"            # page 1 image only; page 2 a scan with a text layer
CUSTOMS = OCR_DATA / "pdfplumber-issue-203-decimalize.pdf"   # pdfplumber's image-only test file

try:
    engine_identity(OcrOptions())
    NO_ENGINE = ""
except OcrUnavailable as exc:  # pragma: no cover - depends on the machine
    NO_ENGINE = str(exc)
needs_engine = pytest.mark.skipif(bool(NO_ENGINE), reason=NO_ENGINE or "-")


def _corpus(tmp_path: Path, docs: dict[str, Path], with_sample: bool = False) -> Path:
    root = tmp_path / "corpus"
    if with_sample:
        shutil.copytree(REPO / "data/sample", root)
        rows = (root / "metadata.csv").read_text().rstrip("\n").split("\n")
    else:
        root.mkdir(parents=True)
        rows = ["id,type,title,year,citation,url"]
    (root / "pdfs").mkdir(exist_ok=True)
    for doc_id, pdf in docs.items():
        shutil.copy(pdf, root / "pdfs" / f"{doc_id}.pdf")
        rows.append(f"{doc_id},report,{doc_id} report,2025,{doc_id},")
    (root / "metadata.csv").write_text("\n".join(rows) + "\n")
    return root


def _parse(root: Path, **cfg) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    return read_corpus(root, read_metadata(root / "metadata.csv"), ParseConfig(workers=1, **cfg))


@needs_engine
def test_image_only_pages_become_blocks_and_tree_nodes(tmp_path):
    root = _corpus(tmp_path, {"scan": SCAN, "customs": CUSTOMS})
    documents, blocks, _ = _parse(root)
    status = dict(zip(documents["doc_id"], documents["status"]))
    assert status == {"customs": "warning", "scan": "warning"}   # warning: the pages read by OCR are named
    scan = blocks.filter(pl.col("doc_id") == "scan")
    page1 = scan.filter(pl.col("page") == 1)
    assert set(page1["source"]) == {"ocr"} and page1["confidence"].min() > 80
    assert page1.filter(pl.col("kind") == "heading")["text"].to_list() == ["Halvorsen Wind Cooperative: Annual Review"]
    # page 2 carries a text layer over its picture: read from it, not recognised (auto)
    page2 = scan.filter(pl.col("page") == 2)
    assert page2.height > 0 and set(page2["source"]) == {"text"} and page2["confidence"].is_null().all()
    truth = (OCR_DATA / "rendered_scan.truth.txt").read_text()
    assert word_accuracy(" ".join(page1["text"]), truth) >= 0.95
    # pdfplumber's image-only file: every page recognised (English data reads its numbers)
    customs = blocks.filter(pl.col("doc_id") == "customs")
    assert customs.height > 0 and set(customs["source"]) == {"ocr"}
    assert any("2301914001" in t for t in customs["text"])
    nodes = build_tree(documents, blocks, TreeConfig())
    sentences = nodes.filter((pl.col("doc_id") == "scan") & (pl.col("kind") == "sentence"))
    assert any("7,340 megawatt-hours" in t for t in sentences["text"])
    warnings = dict(zip(documents["doc_id"].to_list(), documents["warnings"].to_list()))
    assert warnings["scan"] == ["1 of 2 pages read by OCR (page 1; mean word confidence "
                                f"{page1['confidence'][0]:.0f})"]


@needs_engine
def test_ocr_off_and_always(tmp_path):
    root = _corpus(tmp_path, {"scan": SCAN, "customs": CUSTOMS})
    documents, blocks, _ = _parse(root, ocr=OcrOptions(mode="off"))
    row = documents.filter(pl.col("doc_id") == "customs").row(0, named=True)
    assert row["status"] == "error" and "no text layer" in row["error"] and "parse.ocr.mode" in row["error"]
    assert documents.filter(pl.col("doc_id") == "scan")["warnings"].to_list() == [["1 of 2 pages have no text layer: page 1"]]
    _, always, _ = _parse(root, ocr=OcrOptions(mode="always"))
    assert set(always.filter(pl.col("doc_id") == "scan")["source"]) == {"ocr"}   # page 2 recognised too


def test_a_missing_engine_is_one_warning_and_todays_behaviour(tmp_path, caplog):
    root = _corpus(tmp_path, {"scan": SCAN})
    with caplog.at_level(logging.WARNING, logger="kohaku.parse"):
        documents, blocks, _ = _parse(root, ocr=OcrOptions(command="/nonexistent/tesseract"))
    lines = [r.getMessage() for r in caplog.records if "OCR" in r.getMessage() or "tesseract" in r.getMessage()]
    assert len(lines) == 1 and "tesseract-ocr" in lines[0], lines
    assert documents["warnings"].to_list() == [["1 of 2 pages have no text layer: page 1"]]
    assert set(blocks["source"]) == {"text"}


def test_the_engine_identity_is_in_the_parse_key(monkeypatch):
    import kohaku.ingest.parsing as parsing

    values = {k: getattr(OcrOptions(), k) for k in ("mode", "engine", "lang", "dpi")}
    monkeypatch.setattr(parsing, "engine_identity", lambda opts: {"engine": "tesseract", "version": "5.3.0",
                                                                 "lang": opts.lang})
    one = ocr_key(dict(values))
    monkeypatch.setattr(parsing, "engine_identity", lambda opts: {"engine": "tesseract", "version": "5.4.1",
                                                                 "lang": opts.lang})
    assert ocr_key(dict(values)) != one
    assert ocr_key({**values, "mode": "off"}) == {**values, "mode": "off"}   # off: no engine asked

    def missing(opts):
        raise OcrUnavailable("no tesseract")

    monkeypatch.setattr(parsing, "engine_identity", missing)
    assert ocr_key(dict(values))["identity"] == "unavailable"


@needs_engine
@pytest.mark.slow
def test_an_answer_only_on_an_image_only_page_is_retrieved(tmp_path):
    """The sample corpus plus the rendered scan; the question's answer (7,340 megawatt-hours in
    2025) is only on the scan's image-only page 1: the retrieve stage's context at 2,000 tokens
    holds that page's text."""
    root = _corpus(tmp_path, {"halvorsen": SCAN}, with_sample=True)
    (root / "questions_ocr.csv").write_text(
        "id,question,answer_unit\nq1,How many megawatt-hours did the wind cooperative's turbines deliver to the regional grid in 2025?,MWh\n")
    cfg = compose([f"cache.dir={tmp_path / 'cache'}", "llm=fake", "embed.dtype=float32", f"corpus.root={root}",
                   "corpus.questions=questions_ocr.csv", "corpus.solutions=null", "stages=[retrieve]",
                   "retrieve.max_context_tokens=2000"])
    result = run_pipeline(cfg, tmp_path / "run")
    contexts = pl.read_parquet(Path(result.stages["retrieve"].path) / "contexts.parquet")
    first = contexts.filter((pl.col("qid") == "q1") & (pl.col("attempt") == 0)).row(0, named=True)
    assert first["n_tokens"] <= 2000
    assert "halvorsen" in first["doc_ids"]
    assert "7,340 megawatt-hours" in first["context"]
