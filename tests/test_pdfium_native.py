"""The C loops of the pdfium engine (kohaku/ingest/text/pdfium_scan.c, built by kohaku/ingest/text/native.py)
give exactly what the Python loops give, page by page, on every real PDF the tests carry; the
numpy helpers beside them equal the plain Python they replace; without a compiler the parse
still runs (one warning) with the same output."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kohaku.ingest.text import native
from kohaku.ingest.text import pdfium_page
from kohaku.ingest.text.pdf import PdfOptions, read_pdf

ROOT = Path(__file__).resolve().parent.parent
REAL = sorted([*(ROOT / "tests/data/real_pdfs").glob("*.pdf"), *(ROOT / "tests/data/ocr").glob("*.pdf"),
               ROOT / "tests/data/astral/astral.pdf",
               ROOT / "data/sample/chen2024.pdf", ROOT / "data/sample/pdfs/okafor2023.pdf"])

needs_cc = pytest.mark.skipif(native.library() is None, reason="no C compiler: the compiled loops are not built")


def _page_figures(path: Path) -> list[dict]:
    """Everything the layout reads of each page through the engine's loops."""
    doc = pdfium_page.PdfiumDocument(path)
    out = []
    try:
        for i in range(len(doc)):
            page = doc.page(i)
            try:
                tables = page.find_tables()
                out.append({"words": page.word_items(), "objects": [(kind, matrix) for kind, _, matrix in page._objects], "images": page.images,
                            "edges": page.edges(), "chars": page.char_dicts(),
                            "tables": [(t.bbox, t.cells, t.extract()) for t in tables]})
            finally:
                page.close()
    finally:
        doc.close()
    return out


@needs_cc
@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_native_loops_equal_python_loops(path, monkeypatch):
    compiled = _page_figures(path)
    monkeypatch.setattr(native, "library", lambda: None)
    python = _page_figures(path)
    assert len(compiled) == len(python) > 0
    for page_no, (c, p) in enumerate(zip(compiled, python), start=1):
        for key in p:
            assert c[key] == p[key], f"{path.name} page {page_no}: {key} differs"
    # the pages are not empty (a scan has its image): the comparison compared something
    assert sum(len(p["words"]) + len(p["images"]) for p in python) > 0


def test_real_pdfs_cover_what_the_loops_do():
    """The comparison above sees words, edges, tables and images (else it could pass on nothing)."""
    seen = {"words": 0, "edges": 0, "tables": 0, "images": 0}
    for path in REAL:
        for page in _page_figures(path):
            for key in seen:
                seen[key] += len(page[key])
    assert seen["words"] > 5000 and seen["edges"] > 50 and seen["tables"] >= 1 and seen["images"] >= 1, seen


@needs_cc
def test_parse_blocks_equal_with_and_without_the_compiled_loops(monkeypatch):
    path = ROOT / "tests/data/real_pdfs/federal-register-2020-17221.pdf"
    compiled = read_pdf(path, PdfOptions())
    monkeypatch.setattr(native, "library", lambda: None)
    python = read_pdf(path, PdfOptions())
    assert compiled == python
    assert len(python[0]) == 236 and python[1] == 15


def test_build_without_a_compiler_names_it(tmp_path, monkeypatch):
    monkeypatch.setenv("KOHAKU_NATIVE_DIR", str(tmp_path))
    with pytest.raises(RuntimeError, match="no-such-cc"):
        native.build(compiler="no-such-cc")


def test_library_off_or_unbuildable_is_none_with_one_warning(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("KOHAKU_NATIVE_DIR", str(tmp_path))
    native.library.cache_clear()
    try:
        monkeypatch.setenv("KOHAKU_NATIVE", "0")
        assert native.library() is None
        native.library.cache_clear()
        monkeypatch.setenv("KOHAKU_NATIVE", "1")
        monkeypatch.setenv("CC", "no-such-cc")
        with caplog.at_level(logging.WARNING, logger="kohaku.text.native"):
            assert native.library() is None
            assert native.library() is None   # cached: one warning
        warnings = [r for r in caplog.records if r.name == "kohaku.ingest.text.native"]
        assert len(warnings) == 1 and "no-such-cc" in warnings[0].getMessage()
        assert list(tmp_path.iterdir()) == []   # nothing half-built left behind
    finally:
        native.library.cache_clear()


@pytest.mark.skipif(native.library() is None, reason="no C compiler")
def test_build_is_cached_by_source(tmp_path, monkeypatch):
    monkeypatch.setenv("KOHAKU_NATIVE_DIR", str(tmp_path))
    first = native.build()
    stamp = first.stat().st_mtime_ns
    assert native.build() == first and first.stat().st_mtime_ns == stamp
    assert first.parent == tmp_path and first.name.startswith("pdfium_scan-") and first.suffix == ".so"
    assert [p.name for p in tmp_path.iterdir()] == [first.name]


_WORD = re.compile(r"[^\s\x00]+")
_SPACES = [chr(c) for c in range(0x3001) if chr(c).isspace()] + ["\x00", "\u2028", "\u3000"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_SPACES), st.characters(max_codepoint=0xFFFF, exclude_categories=["Cs"]),
                          st.text(alphabet="ab1.", min_size=1, max_size=4)), max_size=40))
def test_word_spans_equal_the_regex(parts):
    text = "".join(parts)
    spans = pdfium_page._word_spans(text)
    assert spans is not None
    assert list(zip(spans[0].tolist(), spans[1].tolist())) == [m.span() for m in _WORD.finditer(text)]


def test_word_spans_leave_text_outside_the_bmp_to_the_regex():
    assert pdfium_page._word_spans("a \U0001F600 b") is None
    starts, ends = pdfium_page._word_spans("\u00a0ab\u2003 c\x00d\u3000")
    assert starts.tolist() == [1, 5, 7] and ends.tolist() == [3, 6, 8]


def _unique_reference(rows):
    keep = {}
    for k, r in enumerate(rows):
        keep[(r[4], round(r[0], 2), round(r[1], 2), round(r[2], 2), round(r[3], 2))] = k
    return list(keep.values())


_COORD = st.one_of(st.sampled_from([0.0, -0.0, 0.125, 1.005, 2.675, 35.125, 99.995, 100.0, 100.004, 100.005,
                                    612.345]),
                   st.floats(min_value=-50, max_value=800, allow_nan=False))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0, 100.005, 2.675, 35.125]), _COORD, _COORD, _COORD, _COORD,
                          st.sampled_from("hv")), max_size=30),
       st.lists(st.sampled_from([0.0, 1e-9, -1e-9, 0.001, 0.004, 0.005]), min_size=4, max_size=4))
def test_unique_edges_equal_the_dict_they_replace(rows, jitter):
    # near-duplicates: each row again, moved by a little (within and across the rounding)
    rows = [r[1:5] + (r[5],) for r in rows]
    rows = rows + [tuple(v + j for v, j in zip(r[:4], jitter)) + (r[4],) for r in rows[::2]]
    assert pdfium_page._unique_edges(rows) == _unique_reference(rows)


def test_unique_edges_keep_first_place_and_last_row():
    rows = [(1.0, 2.0, 3.0, 2.0, "h"), (5.0, 0.0, 5.0, 9.0, "v"), (1.001, 2.0, 3.0, 2.0, "h"),
            (1.006, 2.0, 3.0, 2.0, "h"), (0.125, 0, 0.125, 1, "v"), (0.12, 0, 0.12, 1, "v")]
    # 1.0 and 1.001 round together (row 2 replaces row 0 in place), 1.006 does not;
    # round(0.125, 2) is 0.12 (half to even): rows 4 and 5 are one edge
    assert pdfium_page._unique_edges(rows) == [2, 1, 3, 5]
