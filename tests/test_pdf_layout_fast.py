"""The fast page layout and text-layer check give exactly what the plain code they replaced gave.

kohaku/ingest/text/ocr.py ``layer_stats`` (run on every page with parse.ocr.mode=auto) counts per
distinct character and letter run instead of per character, and kohaku/ingest/text/pdf.py's row,
gutter and table-box helpers avoid per-word and per-x Python steps. The straightforward versions
they replaced are kept here as the reference (``_ref_*``, as they were at fe6e252) and compared
with the fast ones on random input (hypothesis): the same dicts, rows, texts, sizes and
decisions, floats bit-identical.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kohaku.ingest.text import clean
from kohaku.ingest.text import ocr as ocr_mod
from kohaku.ingest.text import pdf as pdf_mod
from kohaku.ingest.text.clean import normalize_line

MANY = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PAGES = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])  # ~100 words each


# --- reference: layer_stats as it was ----------------------------------------------------------

_CID = re.compile(r"\(cid:\d+\)")
_LEADER = re.compile(r"([.\-_·…=*~ ])\1{2,}")
_MOJIBAKE = re.compile("[\u00c2\u00c3][\u0080-\u00bf]|\u00e2\u20ac")
_RUN = re.compile(r"[^\W\d_]+|\d+")
_LATIN_VOWELS = set("aeiouyAEIOUYàáâäæèéêëìíîïòóôöøùúûüýÿœÀÁÂÄÆÈÉÊËÌÍÎÏÒÓÔÖØÙÚÛÜÝŒ")
_CONSONANTS6 = re.compile(r"[b-df-hj-np-tv-xzB-DF-HJ-NP-TV-XZ]{7,}")


def _ref_latin(ch: str) -> bool:
    return ch.isascii() or unicodedata.name(ch, "").startswith("LATIN")


def _ref_printable(ch: str) -> bool:
    if ch == "\ufffd":
        return False
    cat = unicodedata.category(ch)
    return cat[0] in "LNPS" or cat == "Mn"


def _ref_letters_ok(run: str) -> bool:
    if not all(_ref_latin(c) for c in run):
        return True
    if len(run) <= 3:
        return True
    vowels = sum(1 for c in run if c in _LATIN_VOWELS)
    if vowels < 0.15 * len(run):
        return False
    if _CONSONANTS6.search(run):
        return False
    flips = sum(1 for a, b in zip(run, run[1:]) if a.islower() and b.isupper())
    if flips >= 3 and flips > 0.2 * len(run):
        return False
    if sum(1 for c in run if not c.isascii()) > 0.5 * len(run):
        return False
    return True


def _ref_layer_stats(text: str) -> dict[str, float]:
    n_cid = len(_CID.findall(text))
    rest = _LEADER.sub(" ", _CID.sub(" ", text))
    rest = _MOJIBAKE.sub(lambda m: "\ufffd" * len(m.group()), rest)
    chars = [c for c in rest if not c.isspace()]
    n = len(chars) + n_cid
    if n == 0:
        return {"chars": 0.0, "printable": 0.0, "wordlike": 0.0}
    printable = sum(1 for c in chars if _ref_printable(c))
    good = 0
    for m in _RUN.finditer(rest):
        run = m.group()
        if run[0].isdigit() or _ref_letters_ok(run):
            good += len(run)
    return {"chars": float(n), "printable": printable / n, "wordlike": good / n}


def _bits(d: dict[str, float]) -> dict[str, str]:
    return {k: float(v).hex() for k, v in d.items()}


# text-layer-like strings: words, numbers, (cid:N), leaders, mojibake, accents, other scripts,
# control and private-use characters, surrogates, Unicode spaces
_PIECES = st.one_of(
    st.sampled_from(["the", "Revenue", "million", "2023", "$1,234.5", "(cid:12)", "(cid:3", ".....", "---",
                     "___", "· · ·", "·········", "………", "===", "***", "~~~~", "     ", "\t", "\n", "Ã©", "Ã",
                     "â€™", "â€", "Â ", "Â\u0080", "café", "naïve", "ÉÉÉÉÉ", "Straße", "Ωμέγα", "Привет", "行政处罚",
                     "bcdfghjk", "rAnDoMtExT", "xqzvbnmw", "Thecurrentissueandfulltext", "\ufffd", "\ue000",
                     "\x00\x07", "\u00a0", "\u2009", "\u3000", "\u200b", "\ufb01", "²³", "x²y", "٣٤٥", "__init__",
                     "a_b", "Ⅻ", "ǅungla", "\ud800", "ſtraße"]),
    st.text(st.characters(min_codepoint=0, max_codepoint=0x7F), max_size=12),
    st.text(st.characters(min_codepoint=0x80, max_codepoint=0x2FF), max_size=8),
    st.text(st.characters(codec=None, categories=None), max_size=8),
    st.text(st.sampled_from("aeiouybcdfgklmnprstxzAEBCXZ0123456789éÉàç _-.·ÃÂâ€©\u0080\u00bf"), max_size=16),
)
_LAYER_TEXT = st.lists(_PIECES, max_size=30).map(" ".join) | st.lists(_PIECES, max_size=30).map("".join)


@MANY
@given(_LAYER_TEXT)
def test_layer_stats_same_as_the_reference(text):
    assert _bits(ocr_mod.layer_stats(text)) == _bits(_ref_layer_stats(text))


@MANY
@given(st.text(max_size=200))
def test_layer_stats_same_on_any_unicode(text):
    assert _bits(ocr_mod.layer_stats(text)) == _bits(_ref_layer_stats(text))


@MANY
@given(st.text(st.characters(max_codepoint=0x7F), max_size=300))
def test_layer_stats_same_on_ascii(text):
    assert _bits(ocr_mod.layer_stats(text)) == _bits(_ref_layer_stats(text))


@MANY
@given(st.text(max_size=12))
def test_letters_ok_same_as_the_reference(run):
    assert ocr_mod._letters_ok(run) == _ref_letters_ok(run)


def test_layer_stats_on_each_character_alone_and_in_words():
    """Every code point, alone and inside letters and digits: the per-character kinds (space,
    printable, in a run) and the run boundaries agree with the reference."""
    # the first planes' scripts whole, then a stride through the rest (keeps it to a few seconds)
    for cp in list(range(0, 0x3100)) + list(range(0x3100, sys.maxunicode + 1, 61)):
        ch = chr(cp)
        for text in (ch, f"ab{ch}cdef 12{ch}3", f"{ch}{ch}{ch}{ch}xyz"):
            assert ocr_mod.layer_stats(text) == _ref_layer_stats(text), (hex(cp), text)


# --- normalize_line's fast path ----------------------------------------------------------------

def test_not_plain_covers_what_normalize_line_changes():
    """Each character that normalize_line's passes replace, drop, strip or match as a space is in
    clean._NOT_PLAIN (a change to kohaku/ingest/text/clean.py that adds one fails here)."""
    special = set(clean._LIGATURES) | {chr(c) for c in clean._INVISIBLE}
    for cp in range(sys.maxunicode + 1):
        ch = chr(cp)
        if ch == " ":
            continue
        risky = (ch in special or ch.isspace() or re.match(r"\s", ch) is not None
                 or clean._SPACES.match(ch) is not None or clean._normalize_passes("a" + ch + "b") != "a" + ch + "b")
        if risky:
            assert clean._NOT_PLAIN.match(ch) is not None, hex(cp)


_ROW_PIECE = st.sampled_from([" ", "  ", ",", ".", ";", ":", "!", "?", "(", ")", "[", "]", "%", "a", "Net", "sales",
                              "1.5", "’", "—", "\u00a0", "\u00ad", "\ufb01", "\u200b", "\t", "\n", "\x0c",
                              "\u2009", "\u3000", "\ufeff", "\x85", "é", "行政"])
_ROW_TEXT = (st.lists(st.one_of(_ROW_PIECE, _ROW_PIECE, _ROW_PIECE, st.text(max_size=4)), max_size=14).map("".join)
             | st.lists(st.one_of(_ROW_PIECE, st.text(max_size=3)), max_size=10).map(" ".join)
             | st.lists(st.sampled_from(["(", ")", "[", "]", ",", ".", ";", "?", "a", "Net", "1.5", "%", "’"]),
                        max_size=10).map(" ".join))


@MANY
@given(_ROW_TEXT)
def test_normalize_line_is_its_passes(raw):
    assert normalize_line(raw) == clean._normalize_passes(raw)


@pytest.mark.parametrize("raw", ["", " ", "a", "Net sales", "( a", "a ( b", "[ b", "a )", "a ]", "a ,", "a .", "a ;",
                                 "a :", "a !", "a ?", "x  y", " a", "a ", "a\tb", "a\nb", "\ufb01nance", "a\u00adb",
                                 "a\u00a0b", "a\u2009b", "a\u200bb", "a\ufeff", "a\x85b", "Net sales ’23 — 1.5 %",
                                 "(a) [b] 1.5, 2; x: y! z? 3%", "a . b", "e.g. ,", "(1,234)"])
def test_normalize_line_cases(raw):
    assert normalize_line(raw) == clean._normalize_passes(raw)


@MANY
@given(st.lists(st.text(max_size=6), max_size=10))
def test_normalize_line_of_joined_words(texts):
    raw = " ".join(texts)
    assert normalize_line(raw) == clean._normalize_passes(raw)


# --- reference: the layout helpers as they were -----------------------------------------------

def _ref_is_bold(fontname: str) -> bool:
    name = (fontname or "").lower()
    return any(k in name for k in ("bold", "black", "heavy", "semibold", ",b", "-b", "cmbx"))


def _ref_rows_from_words(words: list[dict[str, Any]], tol: float = 2.5) -> list[pdf_mod._Row]:
    words = sorted(words, key=lambda w: (round(w["top"], 1), w["x0"]))
    rows: list[pdf_mod._Row] = []
    for w in words:
        if rows and abs(w["top"] - rows[-1].top) <= tol:
            r = rows[-1]
            r.words.append(w)
            r.bottom = max(r.bottom, w["bottom"])
            r.x0 = min(r.x0, w["x0"])
            r.x1 = max(r.x1, w["x1"])
        else:
            rows.append(pdf_mod._Row([w], w["top"], w["bottom"], w["x0"], w["x1"]))
    for r in rows:
        r.words.sort(key=lambda w: w["x0"])
    return rows


def _ref_find_gutter(rows: list[pdf_mod._Row], width: float, min_gutter: float) -> tuple[float, float] | None:
    if len(rows) < 6:
        return None
    x_lo = min(r.x0 for r in rows)
    x_hi = max(r.x1 for r in rows)
    span = x_hi - x_lo
    if span < 200:
        return None
    n = int(span) + 1
    cover = [0] * n
    for r in rows:
        for w in r.words:
            a = max(0, int(w["x0"] - x_lo))
            b = min(n, int(w["x1"] - x_lo) + 1)
            for x in range(a, b):
                cover[x] += 1
    lo, hi = int(0.3 * span), int(0.7 * span)
    limit = max(1, int(0.2 * len(rows)))
    best: tuple[int, int] | None = None
    start = None
    for x in range(lo, hi + 1):
        if cover[x] <= limit:
            if start is None:
                start = x
        else:
            if start is not None and (best is None or x - start > best[1] - best[0]):
                best = (start, x)
            start = None
    if start is not None and (best is None or hi + 1 - start > best[1] - best[0]):
        best = (start, hi + 1)
    if best is None or best[1] - best[0] < min_gutter:
        return None
    band = (best[0] + x_lo, best[1] + x_lo)
    sides = [pdf_mod._row_side(r, band, min_gutter) for r in rows]
    left = sum(1 for s in sides if s in (1, 3))
    right = sum(1 for s in sides if s in (2, 3))
    if left < 3 or right < 3:
        return None
    return band


def _ref_finish_row(r: pdf_mod._Row) -> None:
    parts: list[str] = []
    sizes: Counter[float] = Counter()
    bold = 0
    n = 0
    for w in r.words:
        parts.append(w["text"])
        k = len(w["text"])
        n += k
        sizes[round(float(w.get("size") or 0.0), 1)] += k
        if _ref_is_bold(w.get("fontname", "")):
            bold += k
    r.text = normalize_line(" ".join(parts))
    r.n_chars = n
    r.size = sizes.most_common(1)[0][0] if sizes else 0.0
    r.bold = n > 0 and bold >= 0.6 * n


def _ref_inside(w: dict[str, Any], bbox: tuple[float, float, float, float]) -> bool:
    x0, top, x1, bottom = bbox
    cx = (w["x0"] + w["x1"]) / 2
    cy = (w["top"] + w["bottom"]) / 2
    return x0 - 1 <= cx <= x1 + 1 and top - 1 <= cy <= bottom + 1


def _ref_outside(words: list[dict[str, Any]], tables: list[pdf_mod._Table]) -> list[dict[str, Any]]:
    return [w for w in words if not any(_ref_inside(w, pdf_mod._box(t)) for t in tables)]


def _row_state(r: pdf_mod._Row) -> tuple:
    return (float(r.top).hex(), float(r.bottom).hex(), float(r.x0).hex(), float(r.x1).hex(), r.column, r.text,
            float(r.size).hex(), r.bold, r.n_chars, [id(w) for w in r.words])


_FONTS = ["Arial", "Arial-BoldMT", "Times,Bold", "CMBX10", "Helvetica-Black", "", None, "Calibri"]
_TEXTS = ["Net", "sales", "(", ")", ",", ".", "1,234", "’", "—", "", "ﬁnance", "Total", "2023", "[", "]", "x"]


@st.composite
def _page_words(draw, lines: bool = True) -> list[dict[str, Any]]:
    """Words as extract_words gives them: many on shared line tops (columns, a gutter), some
    anywhere; sizes and fonts from small sets so that rows have ties and mixes."""
    tops = draw(st.lists(st.floats(0, 800, allow_nan=False), min_size=1, max_size=25)) if lines else []
    n = draw(st.integers(0, 100))
    words = []
    for _ in range(n):
        if tops and draw(st.booleans()):
            top = draw(st.sampled_from(tops)) + draw(st.sampled_from([0.0, 0.04, 0.05, 0.06, 1.3, 2.5, 2.6, -2.5]))
        else:
            top = draw(st.one_of(st.sampled_from([0.0, -0.0]), st.floats(-20, 820, allow_nan=False)))
        x0 = draw(st.one_of(st.sampled_from([0.0, -0.0, 50.0, 72.0, 300.0, 310.5, 320.0]),
                            st.floats(-30, 620, allow_nan=False)))
        width = draw(st.one_of(st.floats(0, 260, allow_nan=False), st.floats(-5, 0, allow_nan=False)))
        height = draw(st.sampled_from([8.0, 9.96, 10.0, 12.0, 18.5]))
        words.append({
            "text": draw(st.one_of(st.sampled_from(_TEXTS), st.text(max_size=5))),
            "x0": x0, "x1": x0 + width, "top": top, "bottom": top + height,
            "size": draw(st.sampled_from([10.0, 10.04, 9.96, 10.06, 12.0, 0.0, None, 18.5, 10])),
            "fontname": draw(st.sampled_from(_FONTS)),
        })
    return words


@PAGES
@given(_page_words())
def test_rows_gutter_columns_and_row_text_same_as_the_reference(words):
    new_rows = pdf_mod._rows_from_words(list(words))
    ref_rows = _ref_rows_from_words(list(words))
    assert [_row_state(r) for r in new_rows] == [_row_state(r) for r in ref_rows]
    gutter = pdf_mod._find_gutter(new_rows, 612.0, 8.0)
    assert gutter == _ref_find_gutter(ref_rows, 612.0, 8.0)
    new_rows = pdf_mod._split_columns(new_rows, gutter, 8.0)
    ref_rows = pdf_mod._split_columns(ref_rows, gutter, 8.0)
    for r in new_rows:
        pdf_mod._finish_row(r)
    for r in ref_rows:
        _ref_finish_row(r)
    assert [_row_state(r) for r in new_rows] == [_row_state(r) for r in ref_rows]


def _columns(words: list[dict[str, Any]], gap: tuple[float, float]) -> list[dict[str, Any]]:
    """The words pushed out of a band, so a gutter is there to find."""
    g0, g1 = gap
    out = []
    for w in words:
        w = dict(w)
        if w["x1"] > g0 and w["x0"] < g1:
            w["x0"], w["x1"] = (w["x0"] - 120, g0 - 1) if w["x0"] < (g0 + g1) / 2 else (g1 + 1, w["x1"] + 120)
        out.append(w)
    return out


@PAGES
@given(_page_words(), st.floats(250, 320), st.floats(8, 30))
def test_two_column_pages_same_as_the_reference(words, g0, width):
    words = _columns(words, (g0, g0 + width))
    new_rows = pdf_mod._rows_from_words(words)
    ref_rows = _ref_rows_from_words(words)
    assert pdf_mod._find_gutter(new_rows, 612.0, 8.0) == _ref_find_gutter(ref_rows, 612.0, 8.0)


def test_a_two_column_page_has_its_gutter():
    words = []
    for k in range(12):
        top = 100.0 + 14 * k
        words += [{"text": "left", "x0": 72.0, "x1": 290.0, "top": top, "bottom": top + 10, "size": 10.0,
                   "fontname": "Times"},
                  {"text": "right", "x0": 320.0, "x1": 540.0, "top": top, "bottom": top + 10, "size": 10.0,
                   "fontname": "Times"}]
    rows = pdf_mod._rows_from_words(words)
    assert pdf_mod._find_gutter(rows, 612.0, 8.0) == _ref_find_gutter(_ref_rows_from_words(words), 612.0, 8.0)
    assert pdf_mod._find_gutter(rows, 612.0, 8.0) is not None


@PAGES
@given(_page_words(), st.lists(st.tuples(st.floats(-10, 600), st.floats(0, 400), st.floats(-10, 800),
                                         st.floats(0, 300)), max_size=4))
def test_words_outside_tables_same_as_the_reference(words, boxes):
    tables = [pdf_mod._Table(top, top + h, x0, x0 + w, ["a | b"]) for x0, w, top, h in boxes]
    assert [id(w) for w in pdf_mod._outside(words, tables)] == [id(w) for w in _ref_outside(words, tables)]


@st.composite
def _words_and_edge_boxes(draw) -> tuple[list[dict[str, Any]], list[pdf_mod._Table]]:
    """Words and table boxes whose edges lie 1 pt (the reference's margin) from a word's centre, or
    a hair either side of that."""
    words = draw(_page_words())
    tables = []
    for _ in range(draw(st.integers(0, 3))):
        if not words:
            break
        w = draw(st.sampled_from(words))
        cx, cy = (w["x0"] + w["x1"]) / 2, (w["top"] + w["bottom"]) / 2
        d = st.sampled_from([1.0, 1.0 + 1e-9, 1.0 - 1e-9, 0.0, 5.0])
        x0, x1 = cx + draw(d) * draw(st.sampled_from([1, -1])), cx + draw(d) * draw(st.sampled_from([1, -1]))
        top, bottom = cy + draw(d) * draw(st.sampled_from([1, -1])), cy + draw(d) * draw(st.sampled_from([1, -1]))
        tables.append(pdf_mod._Table(top, bottom, x0, x1, ["a | b"]))
    return words, tables


@PAGES
@given(_words_and_edge_boxes())
def test_words_at_table_edges_same_as_the_reference(case):
    words, tables = case
    assert [id(w) for w in pdf_mod._outside(words, tables)] == [id(w) for w in _ref_outside(words, tables)]


@given(st.one_of(st.sampled_from(_FONTS), st.text(max_size=12)))
def test_is_bold_same_as_the_reference(name):
    assert pdf_mod._is_bold(name) == _ref_is_bold(name)
