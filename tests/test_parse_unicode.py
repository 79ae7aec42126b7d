"""Every PDF parses, whatever its characters (issue 38).

A character outside the Basic Multilingual Plane is two of PDFium's characters (a UTF-16
surrogate pair); read one by one they were two lone surrogates, which UTF-8 and Parquet refuse,
and the whole corpus failed when its blocks table was built. Here: the committed fixture
(tests/data/astral/, made by scripts/make_astral_fixture.py from DejaVu Sans and Symbola) reads
as written with both engines and both of PDFium's loops; text normalisation never emits a lone
surrogate; one document's bad value fails that document alone; and a fuzz test over generated
PDFs (astral characters, combining marks, right-to-left text, CJK in a Type3 font, ligatures,
zero-width characters, empty and turned pages) finds the same words with both engines.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers_pdfgen import truetype_pdf, type3_pdf
from kohaku.ingest import parsing
from kohaku.ingest.corpus import read_metadata
from kohaku.ingest.parsing import ParseConfig, document_table, read_corpus
from kohaku.ingest.text import clean, native
from kohaku.ingest.text.pdf import PdfOptions, _word_settings, read_pdf
from kohaku.ingest.text.pdfium_page import LIGATURES, PdfiumDocument

REPO = Path(__file__).resolve().parents[1]
ASTRAL = REPO / "tests/data/astral/astral.pdf"
TRUTH = json.loads((REPO / "tests/data/astral/astral.truth.json").read_text(encoding="utf-8"))["pages"]


def _block_texts(path: Path, engine: str) -> list[str]:
    blocks, _, _ = read_pdf(path, PdfOptions(engine=engine))
    return [b["text"] for b in blocks]


def _block_words(path: Path, engine: str) -> list[list[str]]:
    """Each page's words in the blocks (table cells split at their ' | ')."""
    blocks, n_pages, _ = read_pdf(path, PdfOptions(engine=engine))
    pages: list[list[str]] = [[] for _ in range(n_pages)]
    for b in blocks:
        pages[b["page"] - 1].extend(w for w in b["text"].replace(" | ", " ").split() if w != "|")
    return pages


# --- the fixture -------------------------------------------------------------------------------

def test_the_fixture_reads_as_written_with_the_default_engine():
    assert _block_words(ASTRAL, "pdfium") == TRUTH
    astral = {ch for page in TRUTH for w in page for ch in w if ord(ch) > 0xFFFF}
    assert {"\U0001F5F8", "\U0001F600", "\U0001D538", "\U00010300"} <= astral   # the fixture has them


def test_the_fixture_reads_the_same_with_pdfplumber():
    assert _block_texts(ASTRAL, "pdfium") == _block_texts(ASTRAL, "pdfplumber")


def test_the_python_loops_read_it_the_same(monkeypatch):
    compiled = _block_texts(ASTRAL, "pdfium")
    monkeypatch.setattr(native, "library", lambda: None)
    assert _block_texts(ASTRAL, "pdfium") == compiled


def test_a_corpus_with_the_fixture_writes_parquet(tmp_path):
    root = tmp_path / "corpus"
    (root / "pdfs").mkdir(parents=True)
    (root / "pdfs" / "astral.pdf").write_bytes(ASTRAL.read_bytes())
    (root / "metadata.csv").write_text("id,type,title,year,citation,url\nastral,report,Scorecard \U0001F5F8,2025,,\n",
                                       encoding="utf-8")
    documents, blocks, _ = read_corpus(root, read_metadata(root / "metadata.csv"), ParseConfig(workers=1))
    assert documents["status"].to_list() == ["ok"]
    blocks.write_parquet(tmp_path / "blocks.parquet")
    documents.write_parquet(tmp_path / "documents.parquet")
    table = pl.read_parquet(tmp_path / "blocks.parquet")
    assert table.filter(pl.col("kind") == "table")["text"].str.count_matches("\U0001F5F8").to_list() == [4]
    assert pl.read_parquet(tmp_path / "documents.parquet")["title"].to_list() == ["Scorecard \U0001F5F8"]


# --- normalisation -----------------------------------------------------------------------------

@pytest.mark.parametrize("raw, expected", [
    ("a\ud83d\ude00b", "a\U0001F600b"),            # a pair left as two code points: joined
    ("a\ud83db", "a\ufffdb"),                       # a lone high half
    ("\ude00 x", "\ufffd x"),                       # a lone low half
    ("\ude00\ud83d", "\ufffd\ufffd"),               # halves in the wrong order are no pair
    ("ok \U0001F600", "ok \U0001F600"),             # a real astral character is left alone
])
def test_normalisation_never_emits_a_lone_surrogate(raw, expected):
    assert clean.normalize_line(raw) == expected
    assert clean.normalize_chars(raw) == expected
    clean.normalize_line(raw).encode("utf-8")     # UTF-8 takes it


# --- one bad document fails alone --------------------------------------------------------------

def _three_documents(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    root.mkdir()
    rows = ["id,type,title,year,citation,url"]
    for doc_id in ("alpha", "bravo", "charlie"):
        (root / f"{doc_id}.txt").write_text(f"# {doc_id.title()}\n\nThe {doc_id} report says 42.\n", encoding="utf-8")
        rows.append(f"{doc_id},report,{doc_id.title()},2024,,")
    (root / "metadata.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return root


@pytest.mark.parametrize("bad, where", [
    ({"text": "half a pair \ud83d here", "page": 3}, "block 2 (page 3), column text: UnicodeEncodeError"),
    ({"text": "a page that is no number", "page": "seven"}, "block 2 (page seven), column page"),
])
def test_a_bad_block_fails_its_document_alone(tmp_path, monkeypatch, bad, where):
    root = _three_documents(tmp_path)
    real = parsing.parse_file

    def parse_file(fmt, path, cfg, figures=None):
        blocks, n_pages, warnings = real(fmt, path, cfg, figures)
        if Path(path).stem == "bravo":   # the injected value bypasses the readers' clean-up
            blocks = [*blocks, {"kind": "text", **bad}]
        return blocks, n_pages, warnings

    monkeypatch.setattr(parsing, "parse_file", parse_file)
    documents, blocks, _ = read_corpus(root, read_metadata(root / "metadata.csv"), ParseConfig(workers=1))
    status = dict(zip(documents["doc_id"], documents["status"]))
    assert status == {"alpha": "ok", "bravo": "error", "charlie": "ok"}
    error = documents.filter(pl.col("doc_id") == "bravo")["error"].item()
    assert where in error and "the rest of the corpus is parsed" in error, error
    assert sorted(set(blocks["doc_id"])) == ["alpha", "charlie"]
    assert blocks.filter(pl.col("doc_id") == "alpha")["text"].to_list() == ["# Alpha", "The alpha report says 42."]
    blocks.write_parquet(tmp_path / "blocks.parquet")          # the rest is written
    documents.write_parquet(tmp_path / "documents.parquet")


def test_document_table_names_row_page_and_column():
    rows = [{"doc_id": "d", "page": 1, "text": "fine"}, {"doc_id": "d", "page": 4, "text": "bad \udc00"}]
    schema = {"doc_id": pl.String, "page": pl.Int64, "text": pl.String}
    with pytest.raises(parsing.BadValue, match=r"^block 1 \(page 4\), column text: UnicodeEncodeError"):
        document_table(rows, schema, "block")
    assert document_table(rows[:1], schema, "block").height == 1


def test_a_warning_quoting_bad_text_does_not_fail_the_documents_table(tmp_path, monkeypatch):
    root = _three_documents(tmp_path)
    real = parsing.parse_file

    def parse_file(fmt, path, cfg, figures=None):
        blocks, n_pages, warnings = real(fmt, path, cfg, figures)
        return blocks, n_pages, [*warnings, "page 2: cannot read '\ud83d'"] if Path(path).stem == "alpha" else warnings

    monkeypatch.setattr(parsing, "parse_file", parse_file)
    documents, _, _ = read_corpus(root, read_metadata(root / "metadata.csv"), ParseConfig(workers=1))
    assert documents.filter(pl.col("doc_id") == "alpha")["warnings"].item().to_list() == ["page 2: cannot read '\ufffd'"]


# --- fuzz: generated PDFs, the two engines -----------------------------------------------------

_ASCII = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,%$()", min_size=1,
                 max_size=7)
_ASTRAL = st.sampled_from(["\U0001F600", "\U0001F601", "\U0001F60D", "\U0001D538", "\U0001D539", "\U0001D552",
                           "\U00010300", "\U00010301", "\U0001D7D8"])
_COMBINING = st.tuples(st.sampled_from("aeiouAEn"), st.sampled_from("\u0301\u0300\u0308\u0302\u0303")).map("".join)
_HEBREW = st.text(alphabet="\u05d0\u05d1\u05d2\u05d3\u05d4\u05d5\u05d6\u05dc\u05dd\u05e9", min_size=1, max_size=5)
_ARABIC = st.text(alphabet="\u0627\u0628\u062a\u062d\u0631\u0645\u0646", min_size=1, max_size=5)
_SPECIAL = st.sampled_from(["\ufb01", "\ufb02", "\u200b", "\u200d", "\u00ad"])
_PIECE = st.one_of(_ASCII, _ASCII, _ASTRAL, _COMBINING, _HEBREW, _ARABIC,
                   st.tuples(_ASCII, _SPECIAL, _ASCII).map("".join),
                   st.tuples(_ASCII, _ASTRAL).map("".join))
_TOKEN = st.lists(_PIECE, min_size=1, max_size=2).map("".join)
_LINE = st.lists(_TOKEN, min_size=1, max_size=6).map(" ".join)
# a page's lines differ: PDFium drops a text object that repeats the one before it (a bold
# face faked by drawing twice), and on a turned page two equal lines one above the other count
_PAGE = st.lists(_LINE, min_size=0, max_size=4, unique=True)
FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                       HealthCheck.function_scoped_fixture])


def _words_by_page(path: Path) -> tuple[list[list[str]], list[list[str]]]:
    import pdfplumber

    kw = _word_settings(PdfOptions())
    doc = PdfiumDocument(path)
    ours, theirs = [], []
    try:
        with pdfplumber.open(path) as plumber:
            for index in range(len(doc)):
                page = doc.page(index)
                ours.append([w["text"] for w in page.extract_words(**kw)])
                page.close()
                theirs.append([w["text"] for w in plumber.pages[index].extract_words(**kw)])
    finally:
        doc.close()
    return ours, theirs


def _expand(text: str) -> str:
    """Text as both engines give it: ligature characters expanded (``ﬁ`` -> ``fi``)."""
    return "".join(LIGATURES.get(ch, ch) for ch in text)


def _blocks_or_error(path: Path, engine: str) -> list[str] | str:
    """The blocks' texts (each UTF-8 encodable), or the error of a PDF without any text."""
    from kohaku.ingest.text.formats import DocumentError

    try:
        texts = _block_texts(path, engine)
    except DocumentError as exc:
        return str(exc)
    for text in texts:
        text.encode("utf-8")
    return texts


@FUZZ
@given(pages=st.lists(_PAGE, min_size=1, max_size=3), turns=st.lists(st.sampled_from([0, 0, 90, 180, 270]),
                                                                     min_size=3, max_size=3))
def test_fuzz_truetype_pdfs_the_engines_find_the_same_words(tmp_path, pages, turns):
    """Upright pages: the same words with both engines, the words as written (in PDFium's order,
    which puts a right-to-left run's words right to left; the layout orders them), the same
    blocks. A turned page (/Rotate): PDFium reads its text in the page's own frame, lines as
    written; pdfplumber reads it in the turned frame as vertical text, which it cuts where a
    glyph's height leaves a gap (``0😀`` is two words there): the same characters, and the
    same words where it does not cut."""
    path = truetype_pdf(tmp_path / "fuzz.pdf", pages, rotate={k: turns[k] for k in range(len(pages)) if turns[k]})
    ours, theirs = _words_by_page(path)
    for index, (lines, a, b) in enumerate(zip(pages, ours, theirs)):
        written = [w for line in lines for w in _expand(line).split()]
        assert Counter(a) == Counter(written), f"page {index + 1}: {a} != {written}"
        if turns[index]:
            assert Counter("".join(a)) == Counter("".join(b)), f"page {index + 1}: {a} != {b}"
        else:
            assert Counter(a) == Counter(b), f"page {index + 1}: {a} != {b}"
    pdfium_blocks = _blocks_or_error(path, "pdfium")
    if not any(turns[: len(pages)]):   # a turned page: pdfplumber's layout reads its lines sideways
        assert pdfium_blocks == _blocks_or_error(path, "pdfplumber")


_CJK = st.sampled_from(list("中文字年度报告收入利润资产负债表现金流量日本語한국어"))
_T3_CHAR = st.one_of(_CJK, _CJK, _ASTRAL, st.sampled_from(list("abcXYZ019")), _COMBINING)


@FUZZ
@given(lines=st.lists(st.lists(st.lists(_T3_CHAR, min_size=1, max_size=5), min_size=1, max_size=5),
                      min_size=1, max_size=5))
def test_fuzz_type3_pdfs_the_engines_find_the_same_words(tmp_path, lines):
    path = type3_pdf(tmp_path / "t3.pdf", lines)
    ours, theirs = _words_by_page(path)
    assert ours == theirs
    assert ours == [["".join(word) for line in lines for word in line]]
    assert _blocks_or_error(path, "pdfium") == _blocks_or_error(path, "pdfplumber")
