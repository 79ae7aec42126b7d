"""kohaku.ingest.text.table_cells.find_tables gives exactly pdfplumber's TableFinder tables: on the
committed real PDFs (PDFium edges, as PdfiumPage.find_tables builds them), on pinned grids and
on random edge sets (hypothesis)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from pdfplumber.table import TableFinder, TableSettings

from kohaku.ingest.text.pdfium_page import PdfiumDocument
from kohaku.ingest.text.table_cells import _cells, _intersections, _merged_edges, find_tables

REAL = Path(__file__).parent / "data" / "real_pdfs"
LONGEVAL = REAL / "2023.eacl-main.121.pdf"
FEDREG = REAL / "federal-register-2020-17221.pdf"


class View:
    """What TableFinder and Table.extract read of a page (as pdfium_page's _TableView)."""

    def __init__(self, edges: list[dict[str, Any]], chars: list[dict[str, Any]] | None = None,
                 bbox: tuple[float, float, float, float] = (0.0, 0.0, 612.0, 792.0)):
        self.edges = edges
        self.chars = chars or []
        self.bbox = bbox


def page_edges(page: Any) -> list[dict[str, Any]]:
    """The page's edges deduplicated as PdfiumPage.find_tables does."""
    return list({(e["orientation"], round(e["x0"], 2), round(e["top"], 2), round(e["x1"], 2),
                  round(e["bottom"], 2)): e for e in page.edges()}.values())


def summary(tables: list[Any]) -> list[tuple[Any, Any]]:
    return [(t.bbox, t.cells) for t in tables]


def assert_same(view: View, table_settings: Any = None) -> list[Any]:
    """find_tables equals TableFinder on ``view``: tables (bbox, cells in order, page) and the
    intermediate steps (merged edges, intersection points and their edges, cells in order)."""
    finder = TableFinder(view, table_settings)
    ours = find_tables(view, table_settings)
    assert summary(ours) == summary(finder.tables)
    assert all(t.page is view for t in ours)
    s = TableSettings.resolve(table_settings)
    if s.vertical_strategy in ("lines", "lines_strict") and s.horizontal_strategy in ("lines", "lines_strict"):
        v, h = _merged_edges(view.edges, s)
        theirs = [(e["x0"], e["top"], e["x1"], e["bottom"], e["height" if e["orientation"] == "v" else "width"])
                  for e in finder.edges]
        assert h + v == theirs
        points = _intersections(v, h, s.intersection_x_tolerance, s.intersection_y_tolerance)
        assert list(points) == list(finder.intersections)
        for p, (vs, hs) in points.items():
            want = finder.intersections[p]
            assert len(vs) == len({(e["x0"], e["top"], e["x1"], e["bottom"]) for e in want["v"]})
            assert len(hs) == len({(e["x0"], e["top"], e["x1"], e["bottom"]) for e in want["h"]})
        assert _cells(points) == finder.cells
    return ours


# ---------------------------------------------------------------------------- real pages


@pytest.fixture(scope="module")
def real_pages() -> dict[tuple[str, int], View]:
    out = {}
    for path in (LONGEVAL, FEDREG):
        doc = PdfiumDocument(path)
        try:
            for i in range(len(doc)):
                page = doc.page(i)
                out[(path.name, i)] = View(page_edges(page), page.char_dicts(), page.bbox)
                page.close()
        finally:
            doc.close()
    return out


def test_every_real_page_matches_pdfplumber(real_pages: dict[tuple[str, int], View]) -> None:
    assert len(real_pages) == 35  # 20 + 15 pages
    with_tables = {}
    for key, view in real_pages.items():
        ours = find_tables(view)
        theirs = TableFinder(view).tables
        assert summary(ours) == summary(theirs), key
        assert [t.extract() for t in ours] == [t.extract() for t in theirs], key
        if ours:
            with_tables[key] = [len(t.cells) for t in ours]
    assert with_tables == {
        (LONGEVAL.name, 1): [4, 3, 4, 3, 4, 3, 2, 2],
        (LONGEVAL.name, 4): [2, 3],
        (LONGEVAL.name, 5): [2],
        (LONGEVAL.name, 17): [2],
        (FEDREG.name, 4): [3],
        (FEDREG.name, 5): [6],
    }


def test_real_pages_intermediate_steps(real_pages: dict[tuple[str, int], View]) -> None:
    for key in [(LONGEVAL.name, 1), (LONGEVAL.name, 4), (FEDREG.name, 5)]:
        assert_same(real_pages[key])


def test_federal_register_cost_table(real_pages: dict[tuple[str, int], View]) -> None:
    (table,) = find_tables(real_pages[(FEDREG.name, 5)])
    assert [round(x, 2) for x in table.bbox] == [190.94, 76.2, 493.34, 144.8]
    rows = table.extract()
    assert len(rows) == 2 and len(rows[0]) == 3
    assert rows[0] == ["Labor cost", "Parts cost", "Cost per product"]


def test_longeval_page_2_tables(real_pages: dict[tuple[str, int], View]) -> None:
    tables = find_tables(real_pages[(LONGEVAL.name, 1)])
    assert [tuple(round(x, 2) for x in t.bbox) for t in tables][:2] == [
        (73.39, 71.17, 307.91, 250.98), (319.3, 71.17, 522.54, 101.49)]
    assert tables[0].extract()[0][0].startswith("Q1 : Can inter annotator")


# -------------------------------------------------------------------------- pinned grids


def hline(x0: float, x1: float, y: float, object_type: str = "curve_edge") -> dict[str, Any]:
    return {"x0": x0, "x1": x1, "top": y, "bottom": y, "width": x1 - x0, "height": 0.0,
            "orientation": "h", "object_type": object_type}


def vline(x: float, top: float, bottom: float, object_type: str = "curve_edge") -> dict[str, Any]:
    return {"x0": x, "x1": x, "top": top, "bottom": bottom, "width": 0.0, "height": bottom - top,
            "orientation": "v", "object_type": object_type}


def grid(xs: list[float], ys: list[float]) -> list[dict[str, Any]]:
    return ([vline(x, ys[0], ys[-1]) for x in xs] + [hline(xs[0], xs[-1], y) for y in ys])


def test_two_grids_give_two_tables_in_reading_order() -> None:
    # a 3 x 2 grid below a 2 x 3 one, edges listed lower grid first
    edges = grid([100, 200, 300, 400], [500, 520, 540]) + grid([50, 150, 250], [100, 120, 140, 160])
    tables = assert_same(View(edges))
    assert [len(t.cells) for t in tables] == [6, 6]
    assert tables[0].bbox == (50, 100, 250, 160)
    assert tables[1].bbox == (100, 500, 400, 540)
    assert tables[1].cells[0] == (100, 500, 200, 520)


def test_snapped_edges_keep_pdfplumbers_float_steps() -> None:
    # x = 2.5 and 0.4 snap to their mean 1.45, which pdfplumber computes per edge as
    # x0 + (mean - x0): 1.45 for one, 1.4499999999999997 for the other, so the two halves of
    # the left border stay on two lines (not joined) and the lower cell starts at the latter
    edges = [vline(2.5, 0, 20), vline(0.4, 20, 40), vline(50, 0, 40),
             hline(0, 50, 0), hline(0, 50, 20), hline(0, 50, 40)]
    tables = assert_same(View(edges))
    (table,) = tables
    assert table.cells == [(1.4499999999999997, 20, 50, 40), (1.45, 0, 50, 20)]
    assert table.bbox == (1.4499999999999997, 0, 50, 40)


def test_join_and_snap_merge_broken_ruling() -> None:
    # each line drawn as pieces with small gaps and offsets: one 2 x 2 table
    edges = [vline(10, 10, 30), vline(10.5, 31, 50), vline(30, 10, 50), vline(51, 10, 25), vline(50, 27, 50),
             hline(10, 25, 10), hline(26, 50, 10.4), hline(10, 50, 30), hline(10, 50, 50), hline(10, 50, 51.5)]
    tables = assert_same(View(edges))
    assert [len(t.cells) for t in tables] == [4]


def test_cell_order_follows_pdfplumbers_passes() -> None:
    # the first column lacks its middle cell (its left ruling has a gap), so the cells below the
    # gap touch the table only through the second column: pdfplumber's first pass skips them
    # and its second adds them, after the second column's cells (not in sorted order)
    ys = [0, 10, 20, 30, 40, 50]
    edges = [vline(0, 0, 20), vline(0, 30, 50), vline(10, 0, 50), vline(20, 0, 50)]
    edges += [hline(0, 20, y) for y in ys]
    (table,) = assert_same(View(edges))
    assert table.cells == [(0, 0, 10, 10), (0, 10, 10, 20),
                           (10, 0, 20, 10), (10, 10, 20, 20), (10, 20, 20, 30), (10, 30, 20, 40),
                           (10, 40, 20, 50), (0, 30, 10, 40), (0, 40, 10, 50)]
    assert table.cells != sorted(table.cells)


def test_intersection_tolerance_boundary() -> None:
    # the vertical rulings stop exactly intersection_tolerance (3) short of the top line and
    # 3.5 short of the bottom one: the top row is a row of cells, the bottom one is not
    edges = [vline(x, 13, 46.5) for x in (0, 20, 40)] + [hline(0, 40, y) for y in (10, 30, 50)]
    (table,) = assert_same(View(edges))
    assert table.cells == [(0, 10, 20, 30), (20, 10, 40, 30)]


def test_too_short_and_lone_cells() -> None:
    # a single cell is no table; edges under edge_min_length (3) are dropped
    assert assert_same(View(grid([0, 10], [0, 10]))) == []
    assert assert_same(View(grid([0, 2], [0, 2, 4]))) == []
    assert find_tables(View([])) == []


@pytest.mark.parametrize("table_settings", [
    None,
    {"snap_tolerance": 0},
    {"snap_tolerance": 0, "join_tolerance": 0},
    {"snap_x_tolerance": 5, "snap_y_tolerance": 1, "join_tolerance": 8},
    {"intersection_tolerance": 0},
    {"intersection_x_tolerance": 6, "intersection_y_tolerance": 1},
    {"edge_min_length": 15, "edge_min_length_prefilter": 4},
    {"vertical_strategy": "lines_strict", "horizontal_strategy": "lines"},
    {"vertical_strategy": "explicit", "horizontal_strategy": "lines",
     "explicit_vertical_lines": [10, 30, 50]},
    TableSettings(join_tolerance=1),
])
def test_settings(table_settings: Any) -> None:
    edges = [vline(10, 10, 30), vline(10.5, 31, 50), vline(30, 10, 50, "line"), vline(51, 10, 25, "line"),
             vline(50, 27, 50), hline(10, 25, 10), hline(26, 50, 10.4), hline(10, 50, 30),
             hline(10, 50, 50, "line"), hline(10, 50, 51.5)]
    assert_same(View(edges), table_settings)


# --------------------------------------------------------------------- random edge sets

BASES = [0.0, 10.0, 20.0, 30.0, 45.0, 60.0, 80.0]
JITTERS = [0.0, 0.0, 0.0, 0.1, -0.1, 0.4, 0.5, -1.0, 2.9, 3.0, 3.1, -3.0, 5.0, 0.1 + 0.2]
coord = st.one_of(st.sampled_from(BASES), st.floats(-5, 90, allow_nan=False, width=64),
                  st.floats(-5, 90).map(lambda x: round(x, 2)))
jitter = st.one_of(st.sampled_from(JITTERS), st.floats(-4, 4, allow_nan=False))
# mostly small: a grid's rulings still meet, some snapped or joined across the tolerances
small_jitter = st.one_of(st.just(0.0), st.just(0.0), st.floats(-0.6, 0.6, allow_nan=False), jitter)


@st.composite
def edge_sets(draw: Any) -> list[dict[str, Any]]:
    xs = sorted(draw(st.lists(coord, min_size=2, max_size=6)))
    ys = sorted(draw(st.lists(coord, min_size=2, max_size=6)))
    edges = []

    def span(values: list[float]) -> tuple[float, float]:
        """a segment between two of the lines across (possibly the whole span), jittered;
        sometimes one of random length (short ones test the length filters)"""
        if draw(st.integers(0, 5)) == 0:
            a = draw(coord)
            return a, a + draw(st.sampled_from([0.0, 0.5, 1.0, 2.5, 3.0, 4.0, 12.0]))
        i = draw(st.integers(0, len(values) - 1))
        j = draw(st.integers(0, len(values) - 1))
        a, b = sorted((values[i] + draw(jitter), values[j] + draw(jitter)))
        return a, b

    for x in xs:  # vertical rulings: one to three pieces each (gaps, overlaps, touches)
        for _ in range(draw(st.integers(1, 3))):
            top, bottom = span(ys)
            edges.append(vline(x + draw(jitter), top, bottom, draw(st.sampled_from(["curve_edge", "line"]))))
    for y in ys:
        for _ in range(draw(st.integers(1, 3))):
            x0, x1 = span(xs)
            edges.append(hline(x0, x1, y + draw(jitter), draw(st.sampled_from(["curve_edge", "line"]))))
    for _ in range(draw(st.integers(0, 3))):  # exact duplicates, as a page may draw twice
        if edges:
            edges.append(dict(edges[draw(st.integers(0, len(edges) - 1))]))
    return draw(st.permutations(edges))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edge_sets())
def test_random_edge_sets_match_pdfplumber(edges: list[dict[str, Any]]) -> None:
    assert_same(View(edges))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edge_sets(), st.sampled_from([
    {"snap_tolerance": 0}, {"join_tolerance": 0}, {"intersection_tolerance": 0},
    {"snap_tolerance": 6, "join_tolerance": 1, "intersection_tolerance": 1},
    {"vertical_strategy": "lines_strict", "horizontal_strategy": "lines_strict"},
]))
def test_random_edge_sets_other_settings(edges: list[dict[str, Any]], table_settings: dict[str, Any]) -> None:
    assert_same(View(edges), table_settings)


@st.composite
def full_grids(draw: Any) -> list[dict[str, Any]]:
    """grids whose rulings mostly cross the whole table (so tables are found), some pieces
    missing or jittered, several grids side by side or touching"""
    edges = []
    for _ in range(draw(st.integers(1, 3))):
        ox, oy = draw(st.sampled_from([0.0, 40.0, 100.0, 100.5])), draw(st.sampled_from([0.0, 30.0, 200.0]))
        xs = [ox + x for x in sorted(set(draw(st.lists(st.sampled_from(BASES), min_size=2, max_size=6))))]
        ys = [oy + y for y in sorted(set(draw(st.lists(st.sampled_from(BASES), min_size=2, max_size=6))))]
        for x in xs:
            if draw(st.integers(0, 6)):
                edges.append(vline(x + draw(small_jitter), ys[0] + draw(small_jitter), ys[-1] + draw(small_jitter)))
        for y in ys:
            if draw(st.integers(0, 6)):
                edges.append(hline(xs[0] + draw(small_jitter), xs[-1] + draw(small_jitter), y + draw(small_jitter)))
    return draw(st.permutations(edges))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(full_grids())
def test_random_grids_match_pdfplumber(edges: list[dict[str, Any]]) -> None:
    assert_same(View(edges))
