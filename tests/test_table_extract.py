"""kohaku.ingest.text.table_cells.extract gives exactly pdfplumber's Table.extract(): on every table of
the committed real PDFs (PdfiumPage.find_tables, its word "chars"), on pinned small tables and on
random word boxes in random grids (hypothesis)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from pdfplumber.table import Table

from kohaku.ingest.text.pdfium_page import PdfiumDocument
from kohaku.ingest.text.table_cells import extract

ROOT = Path(__file__).parent.parent
REAL = [*sorted((ROOT / "tests" / "data" / "real_pdfs").glob("*.pdf")),
        ROOT / "data" / "sample" / "chen2024.pdf", ROOT / "data" / "sample" / "pdfs" / "okafor2023.pdf"]


class View:
    """What Table.extract reads of a page (as pdfium_page's _TableView)."""

    def __init__(self, chars: list[dict[str, Any]],
                 bbox: tuple[float, float, float, float] = (0.0, 0.0, 612.0, 792.0)):
        self.chars = chars
        self.bbox = bbox


def char(text: str, x0: float, top: float, x1: float, bottom: float, upright: bool = True) -> dict[str, Any]:
    """A word "char" as pdfium_page's _char_dict makes it."""
    return {"text": text, "x0": x0, "top": top, "x1": x1, "bottom": bottom, "doctop": top,
            "width": x1 - x0, "height": bottom - top, "size": bottom - top, "fontname": "F",
            "upright": upright, "object_type": "char"}


def line(words: list[tuple[str, float, float]], top: float, bottom: float) -> list[dict[str, Any]]:
    """The chars of one line of words (text, x0, x1), a " " char between two words (as
    PdfiumPage._char_items puts one)."""
    out: list[dict[str, Any]] = []
    for text, x0, x1 in words:
        if out:
            out.append(char(" ", out[-1]["x1"], top, x0, bottom))
        out.append(char(text, x0, top, x1, bottom))
    return out


def grid(xs: list[float], ys: list[float]) -> list[tuple[float, float, float, float]]:
    return [(x0, t, x1, b) for t, b in zip(ys, ys[1:]) for x0, x1 in zip(xs, xs[1:])]


def same(chars: list[dict[str, Any]], cells: list[tuple[Any, ...]], **kwargs: Any) -> list[list[str | None]]:
    table = Table(View(chars), cells)
    got = extract(table, **kwargs)
    assert got == table.extract(**kwargs)
    return got


# ------------------------------------------------------------------------------- real pages


@pytest.fixture(scope="module")
def real_tables() -> dict[str, list[tuple[list[list[str | None]], list[list[str | None]]]]]:
    out: dict[str, list[tuple[list[list[str | None]], list[list[str | None]]]]] = {}
    for path in REAL:
        doc = PdfiumDocument(path)
        found = out.setdefault(path.name, [])
        for i in range(len(doc)):
            page = doc.page(i)
            found += [(extract(t), t.extract()) for t in page.find_tables()]
            page.close()
    return out


def test_every_real_table_matches_pdfplumber(real_tables: dict[str, list[Any]]) -> None:
    counts = {name: len(tables) for name, tables in real_tables.items()}
    assert counts == {"2023.eacl-main.121.pdf": 12, "federal-register-2020-17221.pdf": 2,
                      "chen2024.pdf": 0, "okafor2023.pdf": 1}
    for name, tables in real_tables.items():
        for ours, theirs in tables:
            assert ours == theirs, name


def test_real_tables_text(real_tables: dict[str, list[Any]]) -> None:
    okafor = real_tables["okafor2023.pdf"][0][0]
    assert okafor[0] == ["Configuration", "PUE", "Cooling power (kW)", "Mean GPU temperature\n(C)"]
    assert okafor[1] == ["Air cooling (baseline)", "1.48", "212", "78"]
    fedreg = real_tables["federal-register-2020-17221.pdf"][0][0]
    assert fedreg[0] == ["Labor cost", "Parts cost", "Cost per product"]
    longeval = real_tables["2023.eacl-main.121.pdf"][0][0]
    assert longeval[1][0] is None and longeval[2] == [None, "Summary (270 words)"]


# ----------------------------------------------------------------------------- pinned cases


def test_cell_with_two_lines() -> None:
    chars = line([("Total", 12, 40), ("net", 43, 60)], 10, 20) + line([("revenue", 12, 50)], 22, 32)
    assert same(chars, grid([10, 100, 200], [5, 40])) == [["Total net\nrevenue", ""]]


def test_lines_within_three_points_are_one_line() -> None:
    # tops 10 and 12.5 are one line: sorted by x0, "b" (drawn first) after "a"
    chars = [char("b", 50, 10, 60, 20), char("a", 12, 12.5, 30, 22.5)]
    assert same(chars, grid([10, 100], [5, 40])) == [["a b"]]
    # the words' tops cluster again: 10, 12.5, 15 chain into one line of chars, but the
    # word "ab" (top 10) and "c" (top 15) are 5 apart: two lines of words
    chars = [char("a", 12, 10, 20, 20), char("b", 21, 12.5, 30, 22.5), char("c", 40, 15, 50, 25)]
    assert same(chars, grid([10, 100], [5, 40])) == [["ab\nc"]]


def test_words_close_together() -> None:
    # no space char between them: a gap up to 3 joins the two into one word, more splits them
    close = [char("Net", 12, 10, 30, 20), char("income", 33, 10, 60, 20)]
    apart = [char("Net", 12, 10, 30, 20), char("income", 33.5, 10, 60, 20)]
    # drawn second but sorted first (x0 11): "Net" starts inside "income", so joins it
    overlap = [char("Net", 12, 10, 30, 20), char("income", 11, 10, 60, 20)]
    cells = grid([10, 100], [5, 40])
    assert same(close, cells) == [["Netincome"]]
    assert same(apart, cells) == [["Net income"]]
    assert same(overlap, cells) == [["incomeNet"]]


def test_empty_cells_and_missing_slots() -> None:
    # row 1: a cell spanning both columns (its second slot has no cell: None); row 2: an
    # empty cell (""), a cell holding only a space ("") and a ligature
    cells = [(10, 5, 200, 20), (10, 20, 100, 40), (100, 20, 200, 40), (200, 20, 300, 40)]
    chars = [char("Heading", 20, 8, 60, 18), char(" ", 120, 25, 124, 35), char("\ufb01", 210, 25, 216, 35)]
    assert same(chars, cells) == [["Heading", None, None], ["", "", "fi"]]
    assert same([], cells) == [["", None, None], ["", "", ""]]


def test_centre_on_a_cell_edge() -> None:
    # a char belongs to the cell holding its centre: x0 <= centre < x1, top <= centre < bottom
    cells = grid([0, 10, 20], [0, 10, 20])
    # a: centre (10, 5), b: (10, 10); c: (20, 5) is on the table's right edge, in no cell
    chars = [char("a", 8, 2, 12, 8), char("b", 8, 8, 12, 12), char("c", 18, 2, 22, 8)]
    assert same(chars, cells) == [["", "a"], ["", "b"]]


def test_not_a_number(monkeypatch) -> None:
    nan = float("nan")
    cells = grid([10, 100, 200], [5, 40])
    # a char whose centre is NaN is in no cell
    chars = [char("a", nan, 10, 30, 20), char("b", 12, 10, 30, 20), char("c", 110, nan, 130, 20)]
    assert same(chars, cells) == [["b", ""]]
    # a cell with a NaN corner: the table goes to pdfplumber. What pdfplumber then gives is not
    # fixed: it sorts a set holding the NaN, and a NaN's hash is its id (Python 3.10+), so the
    # columns come out in another order from one process to the next (a literal here failed
    # 8 runs in 40). Pinned instead: equal to pdfplumber's (same()) and made by pdfplumber.
    with_nan = [*cells, (nan, 5, 300, 40)]
    got = same(chars, with_nan)
    assert len(got) == 1 and len(got[0]) == 3
    monkeypatch.setattr(Table, "extract", lambda self, **kwargs: [["pdfplumber's"]])
    assert extract(Table(View(chars), with_nan)) == [["pdfplumber's"]]
    assert extract(Table(View(chars), cells)) == [["b", ""]]   # a table without NaN is not handed over


def test_not_upright_and_other_arguments_go_to_pdfplumber() -> None:
    chars = [char("up", 12, 10, 30, 20), char("r", 40, 10, 45, 20, upright=False),
             char("o", 40, 21, 45, 26, upright=False)]
    cells = grid([10, 100], [5, 40])
    assert same(chars, cells) == [["up ro"]]
    assert same(chars, cells, x_tolerance=1) == [["up ro"]]
    assert same(chars, cells, layout=True)[0][0].startswith("up")


# ------------------------------------------------------------------------------ random cases

TEXTS = ["a", "Net", "12.5", "(3)", " ", "\u00a0", "", "\ufb01", "\ufb01rm", "$"]


@st.composite
def tables(draw: Any) -> tuple[list[dict[str, Any]], list[tuple[float, float, float, float]]]:
    """Cells between random grid lines (some spanning, overlapping or repeated) and word chars
    on a quarter-point lattice around them, so that ties and boundary centres are common."""
    q = st.integers(0, 240).map(lambda v: v / 4)
    xs = sorted(set(draw(st.lists(q, min_size=2, max_size=6))))
    ys = sorted(set(draw(st.lists(q, min_size=2, max_size=6))))
    if len(xs) < 2 or len(ys) < 2:
        xs, ys = [0.0, 30.0], [0.0, 30.0]
    line_ids = st.tuples(st.integers(0, len(xs) - 2), st.integers(1, len(xs) - 1),
                         st.integers(0, len(ys) - 2), st.integers(1, len(ys) - 1))
    cells = []
    for a, b, c, d in draw(st.lists(line_ids, min_size=1, max_size=12)):
        x0, x1 = xs[min(a, b)], xs[max(a, b)]
        t, bt = ys[min(c, d)], ys[max(c, d)]
        cells.append((x0, t, x1 if x1 > x0 else x0 + 1, bt if bt > t else t + 1))
    if draw(st.booleans()):
        cells += grid(xs, ys)
    chars = []
    for _ in range(draw(st.integers(0, 30))):
        x0 = draw(q)
        top = draw(q)
        w = draw(st.integers(0, 40)) / 4
        h = draw(st.integers(0, 40)) / 4
        chars.append(char(draw(st.sampled_from(TEXTS)), x0, top, x0 + w, top + h,
                          draw(st.sampled_from([True] * 9 + [False]))))
    return chars, draw(st.permutations(cells))


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables())
def test_random_tables_match_pdfplumber(table: tuple[list[dict[str, Any]], list[Any]]) -> None:
    chars, cells = table
    same(chars, cells)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3), st.sampled_from(["Net", "12", " ", "x"]),
                          st.integers(0, 12), st.integers(0, 4)), max_size=40))
def test_random_rows_of_words_match_pdfplumber(words: list[tuple[int, int, str, int, int]]) -> None:
    """Words in a fixed 3x2 grid, each put at a cell's corner plus small offsets (a few words
    a cell, lines a point or two apart, gaps around the 3 point tolerance)."""
    cells = grid([0, 40, 80, 120], [0, 20, 40])
    chars = []
    for col, row, text, dx, dy in words:
        x0 = 40 * (col % 3) + 2 + dx * 2.5
        top = 20 * (row % 2) + 2 + dy * 1.5
        chars.append(char(text, x0, top, x0 + 2 * len(text) + 1, top + 8))
    same(chars, cells)
