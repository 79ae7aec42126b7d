"""pdfplumber's ruled-table finder (``pdfplumber.table.TableFinder``, 0.11.x), the same tables
computed faster.

``find_tables(page_view, settings)`` returns exactly ``TableFinder(page_view, settings).tables``:
the same ``Table`` objects (pdfplumber's own class, on the same page view) holding the same cell
boxes in the same order, so ``bbox``, ``rows`` and ``extract()`` are identical. Each step of
TableFinder is kept bit for bit; only its data structures change:

- edges are tuples, not dicts (pdfplumber copies a dict per snapped or joined edge);
- the snap keeps pdfplumber's cluster rule (sorted distinct values, a new cluster where a value
  is more than the tolerance above the previous one), its means (``sum`` over a cluster's
  values in the edges' order, divided by their count) and its float steps (an edge moves by
  ``x0 + (mean - x0)``, which need not equal the mean); the join keeps its width and height
  arithmetic (``height + (new bottom - old bottom)``);
- intersections: pdfplumber tests every vertical edge against every horizontal one; here, for
  each vertical edge, only the horizontal edges whose ``top`` lies in its span (found by
  bisection with a wide margin) are tested, with pdfplumber's exact comparisons, in its order;
- cells: pdfplumber rebuilds sets of edge boxes for every pair of points it compares and scans
  all later points for those below and right of each point; here every point carries the ids
  of its edges (an edge's id is its box, as pdfplumber compares edges by box), and points are
  indexed by x and by y. The search order (below, then right) and the first cell found are
  pdfplumber's;
- tables: pdfplumber's passes over the remaining cells end with the seed's connected component
  (cells sharing corners); the components are found first and the passes run over each
  component's cells alone, which keeps the order of cells pdfplumber gives.

Settings other than the "lines"/"lines_strict" strategies without explicit lines (text or
explicit strategies) go to pdfplumber's TableFinder itself.

Use: in ``PdfiumPage.find_tables``, ``TableFinder(_TableView(self, edges, []), settings).tables``
becomes ``find_tables(_TableView(self, edges, []), settings)``.

Measured on the 36 FinanceBench filings (2,531 pages; 2,090 with edges; 4,960 tables, 83,554
cells): identical tables (bbox and cells, in order) on every page; TableFinder 5.1-7.9 s,
this 0.88-1.46 s (4.2-7.3x a run, best of three 6.32 s vs 1.12 s = 5.6x; 2 shared cores,
under other load). tests/test_table_cells.py checks it against
pdfplumber on the committed real PDFs, pinned grids and random edge sets.

``extract(table)`` returns exactly ``table.extract()`` (pdfplumber's ``Table.extract`` with its
default arguments: not layout, x and y tolerance 3): the same rows, the same cell strings
(spacing, newlines, "" for a cell without characters, None for a row's slot without a cell).
pdfplumber tests every character against every row's box, then the row's characters against
each of its cells, and runs ``utils.extract_text`` (a WordExtractor, dicts for words, a
TextMap) per cell; here each character's centre is computed once, the characters are sorted by
vertical centre so a cell's band of rows is a slice (bisection, with pdfplumber's comparisons:
``x0 <= centre < x1``, ``top <= centre < bottom``), and the cell's text is computed on tuples by
the same steps (line clusters, x0 order, word breaks, ligatures, word line clusters). A cell
with one character, the common case with PdfiumPage's word "chars", is its text ("" if blank).
Other arguments, a NaN cell corner, and in a cell a character not upright or with a non-string
text go to pdfplumber's own code. Use: in ``kohaku.ingest.text.pdf._table_rows``, ``table.extract()``
becomes ``extract(table)``.

Measured on the same 36 filings (every table of every page, PdfiumPage.find_tables): 4,960
tables, 0 differences; pdfplumber 1.69-1.87 s (0.67-0.74 ms/page), this 0.30-0.33 s
(0.12-0.13 ms/page), 5.6-5.7x in three runs (2 shared cores). tests/test_table_extract.py
checks it on the committed real PDFs, pinned cells and random words in random grids.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from operator import itemgetter
from typing import Any

from pdfplumber import utils
from pdfplumber.table import Table, TableFinder, TableSettings
from pdfplumber.utils.text import LIGATURES as _LIGATURES

__all__ = ["extract", "find_tables"]


def find_tables(page_view: Any, settings: Any = None) -> list[Table]:
    """The tables ``pdfplumber.table.TableFinder(page_view, settings).tables`` finds, found
    faster. ``page_view`` needs ``.edges`` (pdfplumber edge dicts) and ``.bbox``; the tables'
    ``extract()`` reads its ``.chars``, as pdfplumber's do."""
    s = TableSettings.resolve(settings)
    strategies = ("lines", "lines_strict")
    if (s.vertical_strategy not in strategies or s.horizontal_strategy not in strategies
            or s.explicit_vertical_lines or s.explicit_horizontal_lines):
        return TableFinder(page_view, s).tables
    v, h = _merged_edges(page_view.edges, s)
    points = _intersections(v, h, s.intersection_x_tolerance, s.intersection_y_tolerance)
    cells = _cells(points)
    return [Table(page_view, group) for group in _cells_to_tables(cells)]


# ------------------------------------------------------------------------------------ edges
# an edge is a tuple (x0, top, x1, bottom, length): length is the dict's "height" for a
# vertical edge and its "width" for a horizontal one (the one dimension pdfplumber filters on)


def _prefilter(edges: list[dict[str, Any]], v_type: str | None, h_type: str | None,
               min_length: Any) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """utils.filter_edges(edges, "v", v_type, min_length) and the same for "h", as tuples,
    in one pass (each list keeps the page's order)."""
    v: list[tuple[Any, ...]] = []
    h: list[tuple[Any, ...]] = []
    for e in edges:
        o = e["orientation"]
        if o == "v":
            if (v_type is None or e["object_type"] == v_type) and e["height"] >= min_length:
                v.append((e["x0"], e["top"], e["x1"], e["bottom"], e["height"]))
        elif o == "h":
            if (h_type is None or e["object_type"] == h_type) and e["width"] >= min_length:
                h.append((e["x0"], e["top"], e["x1"], e["bottom"], e["width"]))
    return v, h


def _snap(edges: list[tuple[Any, ...]], key: int, tolerance: Any) -> list[tuple[Any, ...]]:
    """utils.snap_objects(edges, "x0" (key 0) or "top" (key 1), tolerance): clusters of
    values within ``tolerance`` of the previous one, each edge moved to its cluster's mean."""
    if not edges:
        return []
    values = sorted(set(e[key] for e in edges))
    cluster_of: dict[Any, int] = {}
    index = 0
    last = values[0]
    for x in values:
        if x > last + tolerance:  # pdfplumber: same cluster while x <= last + tolerance
            index += 1
        cluster_of[x] = index
        last = x
    clusters: list[list[tuple[Any, ...]]] = [[] for _ in range(index + 1)]
    for e in edges:
        clusters[cluster_of[e[key]]].append(e)
    out = []
    if key == 0:  # vertical edges: x0 and x1 move
        for cluster in clusters:
            if not cluster:
                continue
            avg = sum([e[0] for e in cluster]) / len(cluster)
            for x0, top, x1, bottom, length in cluster:
                d = avg - x0
                out.append((x0 + d, top, x1 + d, bottom, length))
    else:  # horizontal edges: top and bottom move
        for cluster in clusters:
            if not cluster:
                continue
            avg = sum([e[1] for e in cluster]) / len(cluster)
            for x0, top, x1, bottom, length in cluster:
                d = avg - top
                out.append((x0, top + d, x1, bottom + d, length))
    return out


def _join(edges: list[tuple[Any, ...]], key: int, tolerance: Any, min_length: Any,
          out: list[tuple[Any, ...]]) -> None:
    """merge_edges' grouping and join_edge_group for one orientation (edges on the same line,
    ``key`` 1: top for horizontal edges, 0: x0 for vertical ones), then the final
    filter_edges(min_length); the kept edges appended to ``out`` in pdfplumber's order."""
    if not edges:
        return
    edges = sorted(edges, key=lambda e: e[key])
    n = len(edges)
    i = 0
    horizontal = key == 1
    while i < n:
        k = edges[i][key]
        j = i + 1
        while j < n and edges[j][key] == k:
            j += 1
        group = edges[i:j]
        i = j
        if horizontal:  # join along x: x1 extends, width = new x1 - x0
            group.sort(key=lambda e: e[0])
            x0, top, x1, bottom, length = group[0]
            joined = []
            for e in group[1:]:
                if e[0] <= x1 + tolerance:
                    if e[2] > x1:
                        x1 = e[2]
                        length = x1 - x0
                else:
                    joined.append((x0, top, x1, bottom, length))
                    x0, top, x1, bottom, length = e
            joined.append((x0, top, x1, bottom, length))
        else:  # join along y: bottom extends, height += new bottom - old bottom
            group.sort(key=lambda e: e[1])
            x0, top, x1, bottom, length = group[0]
            joined = []
            for e in group[1:]:
                if e[1] <= bottom + tolerance:
                    if e[3] > bottom:
                        length = length + (e[3] - bottom)
                        bottom = e[3]
                else:
                    joined.append((x0, top, x1, bottom, length))
                    x0, top, x1, bottom, length = e
            joined.append((x0, top, x1, bottom, length))
        for e in joined:
            if e[4] >= min_length:
                out.append(e)


def _merged_edges(page_edges: list[dict[str, Any]], s: TableSettings
                  ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """TableFinder.get_edges (lines strategies): the vertical and the horizontal edges after
    the prefilter, snap, join and length filter, each list in pdfplumber's order."""
    v, h = _prefilter(page_edges, "line" if s.vertical_strategy == "lines_strict" else None,
                      "line" if s.horizontal_strategy == "lines_strict" else None,
                      s.edge_min_length_prefilter)
    if s.snap_x_tolerance > 0 or s.snap_y_tolerance > 0:
        v = _snap(v, 0, s.snap_x_tolerance)
        h = _snap(h, 1, s.snap_y_tolerance)
    merged_h: list[tuple[Any, ...]] = []
    merged_v: list[tuple[Any, ...]] = []
    _join(h, 1, s.join_x_tolerance, s.edge_min_length, merged_h)
    _join(v, 0, s.join_y_tolerance, s.edge_min_length, merged_v)
    return merged_v, merged_h


# ---------------------------------------------------------------------------- intersections


def _intersections(v_edges: list[tuple[Any, ...]], h_edges: list[tuple[Any, ...]],
                   x_tolerance: Any, y_tolerance: Any) -> dict[tuple[Any, Any], tuple[set, set]]:
    """edges_to_intersections: each point (v.x0, h.top) where a vertical and a horizontal edge
    meet within the tolerances, with the ids of the vertical and of the horizontal edges
    there. An edge's id stands for its box (pdfplumber tells edges apart by box)."""
    v_sorted = sorted(v_edges, key=lambda e: (e[0], e[1]))
    h_sorted = sorted(h_edges, key=lambda e: (e[1], e[0]))
    v_ids: dict[tuple[Any, ...], int] = {}
    h_ids: dict[tuple[Any, ...], int] = {}
    h_top = [e[1] for e in h_sorted]
    h_x0 = [e[0] for e in h_sorted]
    h_x1 = [e[2] for e in h_sorted]
    h_id = [h_ids.setdefault(e[:4], len(h_ids)) for e in h_sorted]
    points: dict[tuple[Any, Any], tuple[set, set]] = {}
    for e in v_sorted:
        x, top, bottom = e[0], e[1], e[3]
        vid = v_ids.setdefault(e[:4], len(v_ids))
        # candidates: h.top within [top - y_tol, bottom + y_tol], widened far beyond any float
        # rounding of pdfplumber's comparisons; each candidate then gets those comparisons
        margin = 1e-6 * (1.0 + abs(top) + abs(bottom) + y_tolerance)
        lo = bisect_left(h_top, top - y_tolerance - margin)
        hi = bisect_right(h_top, bottom + y_tolerance + margin, lo)
        for k in range(lo, hi):
            t = h_top[k]
            if (top <= t + y_tolerance and bottom >= t - y_tolerance
                    and x >= h_x0[k] - x_tolerance and x <= h_x1[k] + x_tolerance):
                p = (x, t)
                at = points.get(p)
                if at is None:
                    points[p] = at = (set(), set())
                at[0].add(vid)
                at[1].add(h_id[k])
    return points


# ------------------------------------------------------------------------------------ cells


def _cells(points: dict[tuple[Any, Any], tuple[set, set]]) -> list[tuple[Any, Any, Any, Any]]:
    """intersections_to_cells: for each point in sorted order, the smallest cell with that
    top-left corner: the first point below it joined to it by a vertical edge, then the first
    point right of it joined by a horizontal edge, whose bottom-right corner is a point joined
    to both (pdfplumber's loop order; its tests are pure, so they are made lazily here)."""
    order = sorted(points)
    # the points with each x in order of y, with each y in order of x (as in the sorted list),
    # and each point's place in its column and in its row
    by_x: dict[Any, list[tuple[Any, Any]]] = {}
    by_y: dict[Any, list[tuple[Any, Any]]] = {}
    col_pos: dict[tuple[Any, Any], int] = {}
    row_pos: dict[tuple[Any, Any], int] = {}
    for p in order:
        col = by_x.setdefault(p[0], [])
        col_pos[p] = len(col)
        col.append(p)
        row = by_y.setdefault(p[1], [])
        row_pos[p] = len(row)
        row.append(p)
    get = points.get
    cells = []
    for pt in order:
        x, y = pt
        pv, ph = points[pt]
        col = by_x[x]
        row = by_y[y]
        n_row = len(row)
        ri = row_pos[pt] + 1        # next point of the row not yet tested against pt
        joined_right: list[tuple[Any, Any, set]] = []  # (x, vertical ids) of those joined
        for b_pt in col[col_pos[pt] + 1:]:
            bv, bh = points[b_pt]
            if pv.isdisjoint(bv):
                continue
            by = b_pt[1]
            found = False
            for rx, rv in joined_right:
                br = get((rx, by))
                if br is not None and not br[0].isdisjoint(rv) and not br[1].isdisjoint(bh):
                    found = True
                    break
            while not found and ri < n_row:
                r_pt = row[ri]
                ri += 1
                rv, rh = points[r_pt]
                if ph.isdisjoint(rh):
                    continue
                rx = r_pt[0]
                joined_right.append((rx, rv))
                br = get((rx, by))
                if br is not None and not br[0].isdisjoint(rv) and not br[1].isdisjoint(bh):
                    found = True
            if found:
                cells.append((x, y, rx, by))
                break
            if not joined_right:  # no point right of pt is joined to it: no cell
                break
    return cells


def _cells_to_tables(cells: list[tuple[Any, Any, Any, Any]]) -> list[list[tuple[Any, Any, Any, Any]]]:
    """cells_to_tables: cells grouped into tables by shared corners; tables of one cell
    dropped, the rest sorted by their top-left corner.

    pdfplumber starts a table with the first remaining cell and passes over the remaining
    cells, adding each that shares a corner with the table so far, until a pass adds none.
    A table so ends as the seed's connected component (cells linked by shared corners), and
    cells outside it never touch it; so the components are found first, then the passes are
    run over each component's own cells (in the cells' order), which gives pdfplumber's order
    of cells in each table without passing over the whole page per table."""
    n = len(cells)
    if n == 0:
        return []
    by_corner: dict[tuple[Any, Any], list[int]] = {}
    corners_of = []
    for i, (x0, top, x1, bottom) in enumerate(cells):
        cc = ((x0, top), (x0, bottom), (x1, top), (x1, bottom))
        corners_of.append(cc)
        for c in cc:
            by_corner.setdefault(c, []).append(i)
    component = [-1] * n
    tables = []
    for seed in range(n):
        if component[seed] >= 0:
            continue
        label = len(tables)
        component[seed] = label
        members = [seed]
        stack = [seed]
        while stack:
            i = stack.pop()
            for c in corners_of[i]:
                for j in by_corner[c]:
                    if component[j] < 0:
                        component[j] = label
                        members.append(j)
                        stack.append(j)
        members.sort()
        # pdfplumber's passes, over this component's cells only (the seed is its first)
        table = [cells[seed]]
        corners = set(corners_of[seed])
        remaining = members[1:]
        while remaining:
            kept = []
            for i in remaining:
                cc = corners_of[i]
                if cc[0] in corners or cc[1] in corners or cc[2] in corners or cc[3] in corners:
                    corners.update(cc)
                    table.append(cells[i])
                else:
                    kept.append(i)
            if len(kept) == len(remaining):  # cannot happen for a connected component
                raise AssertionError("cells of one component left unreached")
            remaining = kept
        tables.append(table)
    tables.sort(key=lambda t: min((c[1], c[0]) for c in t))
    return [t for t in tables if len(t) > 1]


# ------------------------------------------------------------------------------- cell text
# ``Table.extract()`` with its default arguments: for each row (cells grouped by top, one slot
# per distinct x0 of the table, None where the row has no cell), each cell's text is
# ``utils.extract_text`` (x_tolerance 3, y_tolerance 3, not layout) of the characters whose
# centre lies in the cell: chars clustered into lines by top, sorted by x0 in a line, split
# into words at blank chars and at gaps, the words clustered into lines again by their top,
# joined by " " in a line and by "\n" between lines.

_TOLERANCE = 3     # pdfplumber's DEFAULT_X_TOLERANCE and DEFAULT_Y_TOLERANCE


def extract(table: Table, **kwargs: Any) -> list[list[str | None]]:
    """``table.extract(**kwargs)`` (pdfplumber's ``Table.extract``), computed faster for the
    default arguments. A table with other arguments, or with a cell corner that is not a
    number (NaN), goes to pdfplumber's own method; a cell holding a character that is not
    upright, or whose text is not a string, gets pdfplumber's own ``utils.extract_text``."""
    cells = table.cells
    if kwargs or not cells:
        return table.extract(**kwargs)
    # Table.rows: cells sorted by (top, x0), grouped by top, one slot per distinct x0 (a later
    # cell with the same top and x0 takes the slot)
    xs = sorted(set([c[0] for c in cells]))
    rows: list[list[tuple[Any, ...] | None]] = []
    last_top: Any = None
    xdict: dict[Any, tuple[Any, ...]] = {}
    for c in sorted(cells, key=_top_x0):
        if c[1] != last_top or not rows:
            if rows:
                rows[-1] = [xdict.get(x) for x in xs]
            xdict = {}
            last_top = c[1]
            rows.append([])
        xdict[c[0]] = c
    rows[-1] = [xdict.get(x) for x in xs]
    # the chars: (page order, horizontal centre, vertical centre, text, x0, top, x1, plain),
    # in order of vertical centre; a char whose centre is NaN is in no cell
    chars = table.page.chars
    items = []
    for i, ch in enumerate(chars):
        x0, top, x1 = ch["x0"], ch["top"], ch["x1"]
        hm = (x0 + x1) / 2
        vm = (top + ch["bottom"]) / 2
        if hm == hm and vm == vm:
            text = ch["text"]
            items.append((i, hm, vm, text, x0, top, x1, ch["upright"] is True and type(text) is str))
    items.sort(key=_vmid)
    vms = [t[2] for t in items]
    # each cell's chars: those with top <= vm < bottom (a slice of items), then x0 <= hm < x1
    bands: dict[tuple[Any, Any], list[tuple[Any, ...]]] = {}
    out: list[list[str | None]] = []
    for row in rows:
        texts: list[str | None] = []
        for cell in row:
            if cell is None:
                texts.append(None)
                continue
            x0, top, x1, bottom = cell
            if not (x0 == x0 and top == top and x1 == x1 and bottom == bottom):
                return table.extract()
            band = bands.get((top, bottom))
            if band is None:
                band = bands[(top, bottom)] = items[bisect_left(vms, top):bisect_left(vms, bottom)]
            inside = [t for t in band if x0 <= t[1] < x1]
            if not inside:
                texts.append("")
            elif len(inside) == 1:
                t = inside[0]
                if not t[7]:
                    texts.append(utils.extract_text([chars[t[0]]]))
                else:
                    text = t[3]
                    texts.append("" if text.isspace() else _LIGATURES.get(text, text))
            else:
                inside.sort()  # page order (the first item, the char's index, is unique)
                if all([t[7] for t in inside]):
                    texts.append(_cell_text(inside))
                else:
                    texts.append(utils.extract_text([chars[t[0]] for t in inside]))
        out.append(texts)
    return out


_top_x0 = itemgetter(1, 0)     # a cell's (top, x0)
_vmid = itemgetter(2)          # an item's vertical centre
_x0 = itemgetter(4)            # an item's x0


def _clusters(values: list[Any]) -> dict[Any, int]:
    """utils.cluster_list / make_cluster_dict with the tolerance 3: each distinct value's
    cluster (sorted values, a new cluster where one is more than 3 above the previous)."""
    distinct = sorted(set(values))
    out = {}
    index = 0
    last = distinct[0]
    for v in distinct:
        if v > last + _TOLERANCE:   # pdfplumber: the same cluster while v <= last + tolerance
            index += 1
        out[v] = index
        last = v
    return out


def _cell_text(items: list[tuple[Any, ...]]) -> str:
    """utils.extract_text(chars) for two or more upright chars (as items, in page order)."""
    # WordExtractor.iter_chars_to_lines: clustered by top; in a line sorted by x0 (both sorts
    # stable: one sort by (cluster, x0) keeps the page order of ties as the two do)
    line_of = _clusters([t[5] for t in items])
    if len(line_of) == 1:
        ordered = sorted(items, key=_x0)
    else:
        ordered = sorted(items, key=lambda t: (line_of[t[5]], t[4]))
    # iter_chars_to_words: a blank char ends a word; "" (split_at_punctuation "" holds it) is a
    # word of its own; a char left of the last one's x0, more than 3 right of its x1 or more
    # than 3 above or below its top starts a new one; and a new line starts a new word
    words: list[tuple[Any, str]] = []   # (top, text)
    word: list[tuple[Any, ...]] = []
    line = -1
    for t in ordered:
        text = t[3]
        if word and line_of[t[5]] != line:
            words.append(_merged(word))
            word = []
        line = line_of[t[5]]
        if text.isspace():
            if word:
                words.append(_merged(word))
                word = []
        elif not text:
            if word:
                words.append(_merged(word))
            words.append((t[5], ""))
            word = []
        elif word:
            p = word[-1]
            if t[4] < p[4] or t[4] > p[6] + _TOLERANCE or abs(t[5] - p[5]) > _TOLERANCE:
                words.append(_merged(word))
                word = [t]
            else:
                word.append(t)
        else:
            word = [t]
    if word:
        words.append(_merged(word))
    if not words:
        return ""
    if len(words) == 1:
        return words[0][1]
    # extract_text: the words clustered into lines by top (stable), " " and "\n" between
    word_line = _clusters([w[0] for w in words])
    if len(word_line) == 1:
        return " ".join([w[1] for w in words])
    lines: list[list[str]] = [[] for _ in range(max(word_line.values()) + 1)]
    for top, text in words:
        lines[word_line[top]].append(text)
    return "\n".join([" ".join(ln) for ln in lines if ln])


def _merged(word: list[tuple[Any, ...]]) -> tuple[Any, str]:
    """WordExtractor.merge_chars: the word's top (its chars' least) and text (a char whose
    whole text is a ligature expanded)."""
    if len(word) == 1:
        t = word[0]
        return (t[5], _LIGATURES.get(t[3], t[3]))
    return (min([t[5] for t in word]), "".join([_LIGATURES.get(t[3], t[3]) for t in word]))
