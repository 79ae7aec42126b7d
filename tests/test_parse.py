"""The parse stage: document discovery, PDF layout (columns, headings, tables), other formats and
bad documents, which become error rows while the good ones are parsed."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import polars as pl
import pytest

from helpers_corpus import LEFT, RIGHT, TABLE, make_ctx, write_two_column_pdf
from kohaku.ingest.corpus import read_metadata
from kohaku.stages import parse as parse_stage
from kohaku.ingest.corpus import CorpusConfig
from kohaku.ingest.parsing import ParseConfig, corpus_files, parse_corpus
from kohaku.ingest.text.formats import DocumentError, parse_markdown, read_text
from kohaku.ingest.text.pdf import read_pdf

pytest.importorskip("fpdf")

META_HEADER = "id,type,title,year,citation,url\n"


def _meta(root: Path, ids: list[str]) -> None:
    rows = "".join(f"{i},paper,Title of {i},2024,Cite {i},https://example.org/{i}.pdf\n" for i in ids)
    (root / "metadata.csv").write_text(META_HEADER + rows, encoding="utf-8")


def test_two_column_pdf_reading_order_headings_and_table(tmp_path):
    pdf = write_two_column_pdf(tmp_path / "cool.pdf", "Cooling Set Points in Practice", LEFT, RIGHT, TABLE,
                               "Table 1: Chiller power by set point.")
    blocks, n_pages, warnings = read_pdf(pdf)
    assert n_pages == 1 and warnings == []
    headings = [b["text"] for b in blocks if b["kind"] == "heading"]
    # the title, then the left column's headings before the right column's
    assert headings == ["Cooling Set Points in Practice", "1 Introduction", "2 Method", "3 Results", "4 Conclusion"]
    levels = {b["text"]: b["level"] for b in blocks if b["kind"] == "heading"}
    assert levels["2 Method"] == 1
    text = "\n".join(b["text"] for b in blocks if b["kind"] == "text")
    assert text.index("Left column text comes first") < text.index("Right column text comes second")
    # lines of one column are not mixed with the other column
    assert "first. Cooling systems" in text.replace("\n", " ")
    tables = [b for b in blocks if b["kind"] == "table"]
    assert len(tables) == 1
    assert tables[0]["text"].split("\n") == [
        "Set point (C) | Chiller power (kW) | PUE",
        "18 | 140 | 1.45",
        "20 | 121 | 1.38",
        "22 | 104 | 1.31",
    ]
    # table cells are not repeated as text blocks
    assert "1.38" not in text
    captions = [b["text"] for b in blocks if b["kind"] == "caption"]
    assert captions == ["Table 1: Chiller power by set point."]
    body = [b for b in blocks if b["kind"] == "text"]
    assert all(b["font_size"] is not None for b in body)


def test_bad_pdfs_raise_document_errors(tmp_path):
    empty = tmp_path / "empty.pdf"
    empty.write_bytes(b"")
    with pytest.raises(DocumentError, match="0 bytes"):
        read_pdf(empty)
    corrupt = tmp_path / "corrupt.pdf"
    corrupt.write_bytes(b"%PDF-1.4\nthis is not a pdf body")
    with pytest.raises(DocumentError, match="not a readable PDF"):
        read_pdf(corrupt)
    locked = write_two_column_pdf(tmp_path / "locked.pdf", "Locked", LEFT, RIGHT, user_password="secret")
    with pytest.raises(DocumentError, match="encrypted"):
        read_pdf(locked)


def test_pdf_without_text_layer(tmp_path):
    from fpdf import FPDF

    pdf = FPDF()
    pdf.add_page()
    pdf.rect(20, 20, 100, 60, style="F")  # a "scan": drawing only, no text
    path = tmp_path / "scan.pdf"
    pdf.output(str(path))
    with pytest.raises(DocumentError, match="no text layer"):
        read_pdf(path)


def test_markdown_blocks():
    md = (
        "# Water Guide\n\nIntro *text* with a [link](http://x).\n\n## 1 Sites\n\n"
        "| Site | WUE |\n|---|---:|\n| A | 0.2 |\n| B | 1.9 |\n\nAfter the table.\n"
        "Second line.\n\nSetext Heading\n--------------\nBody.\n"
    )
    blocks = parse_markdown(md)
    assert [(b["kind"], b["level"]) for b in blocks] == [
        ("heading", 1), ("text", None), ("heading", 2), ("table", None), ("text", None), ("heading", 2), ("text", None),
    ]
    assert blocks[1]["text"] == "Intro text with a link."
    assert blocks[3]["text"] == "Site | WUE\nA | 0.2\nB | 1.9"
    assert blocks[4]["text"] == "After the table.\nSecond line."


def test_text_encodings(tmp_path):
    utf8 = tmp_path / "a.txt"
    utf8.write_text("Caf\u00e9 cooling \u2013 page one\n\nsecond block\fpage two", encoding="utf-8")
    blocks, n_pages, warnings = read_text(utf8)
    assert warnings == [] and n_pages == 2
    assert [b["page"] for b in blocks] == [1, 1, 2]
    assert blocks[0]["text"] == "Caf\u00e9 cooling \u2013 page one"
    legacy = tmp_path / "b.txt"
    legacy.write_bytes("Caf\u00e9 cooling \u2013 50 \u00b0C".encode("cp1252"))
    blocks, _, warnings = read_text(legacy)
    assert blocks[0]["text"] == "Caf\u00e9 cooling \u2013 50 \u00b0C"
    assert len(warnings) == 1 and "cp1252" in warnings[0]


def _bad_corpus(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    (root / "pdfs").mkdir(parents=True)
    (root / "docs").mkdir()
    (root / "corpus").mkdir()
    write_two_column_pdf(root / "pdfs" / "good.pdf", "A Good Paper", LEFT, RIGHT, TABLE)
    (root / "pdfs" / "zero.pdf").write_bytes(b"")
    write_two_column_pdf(root / "pdfs" / "locked.pdf", "Locked", LEFT, RIGHT, user_password="pw")
    (root / "docs" / "legacy.txt").write_bytes(
        "1 Introduction\n\nThe chiller\u2019s power fell by 12 % at 22 \u00b0C.".encode("cp1252"))
    (root / "docs" / "notes.md").write_text("# Notes\n\nSome notes on cooling towers.\n", encoding="utf-8")
    page = {"title": "Page 1", "metadata": {"page": 1}, "paragraphs": [
        {"text": "A raw page of text\nwith wrapped lines.", "sentences": [], "metadata": {"page": 1}},
        {"text": "[Image page=1 idx=1]", "sentences": [], "metadata": {"page": 1, "attachment_type": "image"}},
    ]}
    (root / "corpus" / "raw.json").write_text(json.dumps({"document_id": "raw", "sections": [page]}))
    (root / "corpus" / "stray.json").write_text(json.dumps({"sections": [page]}))  # no metadata row
    _meta(root, ["good", "zero", "locked", "legacy", "notes", "raw", "missing"])
    return root


def test_parse_corpus_keeps_going_past_bad_documents(tmp_path):
    root = _bad_corpus(tmp_path)
    documents, blocks = parse_corpus(root, read_metadata(root / "metadata.csv"), ParseConfig(workers=2))
    status = dict(zip(documents["doc_id"], documents["status"]))
    assert status == {
        "good": "ok", "legacy": "warning", "locked": "error", "missing": "error", "notes": "ok",
        "raw": "ok", "stray": "error", "zero": "error",
    }
    errors = dict(zip(documents["doc_id"], documents["error"]))
    assert "0 bytes" in errors["zero"]
    assert "encrypted" in errors["locked"]
    assert "no document file found" in errors["missing"] and "pdfs/missing.pdf" in errors["missing"]
    assert "no row in metadata.csv" in errors["stray"]
    assert errors["good"] == ""
    row = documents.filter(pl.col("doc_id") == "legacy").row(0, named=True)
    assert row["format"] == "txt" and row["source"] == "docs/legacy.txt"
    assert any("cp1252" in w for w in row["warnings"])
    # good documents have blocks; bad ones none
    n_blocks = blocks.group_by("doc_id").len()
    assert set(n_blocks["doc_id"]) == {"good", "legacy", "notes", "raw"}
    assert documents.filter(pl.col("doc_id") == "good")["n_pages"].item() == 1
    raw = blocks.filter(pl.col("doc_id") == "raw")
    assert raw["text"].to_list() == ["A raw page of text\nwith wrapped lines."]  # image placeholder dropped
    legacy = blocks.filter(pl.col("doc_id") == "legacy")["text"].to_list()
    assert "The chiller\u2019s power fell by 12 % at 22 \u00b0C." in legacy
    # schema per docs/design.md
    assert documents.schema["warnings"] == pl.List(pl.String)
    assert blocks.schema["font_size"] == pl.Float64 and blocks.schema["level"] == pl.Int64
    for doc_id, group in blocks.group_by("doc_id"):
        assert group["order"].to_list() == list(range(group.height))


def test_priority_and_file_inputs(tmp_path):
    root = tmp_path / "c"
    (root / "corpus").mkdir(parents=True)
    (root / "docs").mkdir()
    (root / "corpus" / "d1.json").write_text(json.dumps({"text": "JSON version of the text."}))
    (root / "docs" / "d1.txt").write_text("Text version of the text.")
    _meta(root, ["d1"])
    meta = read_metadata(root / "metadata.csv")
    docs, blocks = parse_corpus(root, meta, ParseConfig(priority=["txt", "json"]))
    assert docs["format"].to_list() == ["txt"] and blocks["text"].to_list() == ["Text version of the text."]
    assert any("also found corpus/d1.json" in w for w in docs["warnings"][0])
    docs, blocks = parse_corpus(root, meta, ParseConfig())
    assert docs["format"].to_list() == ["json"]
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"corpus": {"root": str(root)}, "parse": {}})
    files = parse_stage.STAGE.file_inputs(cfg)
    assert files == corpus_files(CorpusConfig(root=str(root)), ParseConfig())
    assert [f.name for f in files] == ["d1.json", "d1.txt", "metadata.csv"]


def test_parse_stage_compute(tmp_path, caplog):
    root = _bad_corpus(tmp_path)
    cfg = {"corpus": {"root": str(root), "metadata": "metadata.csv"}, "parse": {"workers": 1}}
    ctx = make_ctx(parse_stage.STAGE, cfg, tmp_path / "out")
    with caplog.at_level(logging.WARNING):
        out = parse_stage.STAGE.compute(ctx)
    assert set(out) == {"documents", "blocks", "figures"}
    assert out["figures"].height == 0   # the sample's PDF has a ruled table and no figure
    assert ctx.summary["n_documents"] == 8 and ctx.summary["n_error"] == 4 and ctx.summary["n_warning"] == 1
    assert "document zero" in caplog.text and "0 bytes" in caplog.text


def test_parse_config_errors():
    from kohaku.core.config import ConfigError, build

    with pytest.raises(ConfigError, match="parse.nope"):
        build(ParseConfig, {"nope": 1}, "parse")
    with pytest.raises(ConfigError, match="priority"):
        build(ParseConfig, {"priority": ["docx"]}, "parse")


def test_sample_corpus_parses(sample_root):
    documents, blocks = parse_corpus(sample_root, read_metadata(sample_root / "metadata.csv"), ParseConfig(workers=1))
    assert documents["status"].to_list() == ["ok"] * 4
    assert sorted(documents["format"].to_list()) == ["json", "md", "pdf", "txt"]
    kinds = set(blocks["kind"].to_list())
    assert {"heading", "text", "table"} <= kinds
