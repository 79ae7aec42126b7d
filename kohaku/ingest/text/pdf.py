"""PDF -> parse blocks: reading order, columns, headings by font, ruled tables.

Characters, boxes, fonts and page objects come from an engine (``PdfOptions.engine``):
``pdfium`` (default; kohaku/ingest/text/pdfium_page.py: PDFium's compiled text layer, ~25x faster,
with pdfplumber's table finder and figure geometry asked only on the pages that need them) or
``pdfplumber`` (pdfplumber for every page, as before). The layout below is kohaku's own and the
same for both. A document is read in parts (``read_pdf_part``: a page range, one per worker
job) and assembled (``assemble_pdf``: the steps that need every page).

Per page:
- ruled tables come from ``page.find_tables()``; each becomes a ``table`` block (one row per
  line, cells joined by `` | ``) and the words inside its box are left out of the text;
- words (with font size and name) are grouped into rows; a two-column page is recognised by a
  gutter in the x-histogram of the words (an empty vertical band near the middle with text on
  both sides); rows that cross the gutter are full-width (titles, abstracts, wide figures);
  reading order is: each full-width run, then the left column, then the right column;
- rows are classified against the document's body font size (the character-weighted mode):
  clearly larger or bold short rows are headings (levels by size rank, or by the number prefix
  "2.3"), "Figure n:" / "Table n:" rows start captions, the rest is body text grouped into
  paragraph blocks by vertical gaps and first-line indentation;
- ``page.close()`` after each page keeps memory flat on long documents.
"""

from __future__ import annotations

import functools
import logging
import re
from collections import Counter
from dataclasses import dataclass, field
from itertools import accumulate
from operator import itemgetter
from pathlib import Path
from typing import Any

from kohaku.ingest.text.clean import ends_sentence, normalize_line
from kohaku.ingest.text.figures import (FigureBox, FigureOptions, RenderError, chart_tables, drop_repeated, find_page_figures,
                                 render_figure)
from kohaku.ingest.text.formats import DocumentError
from kohaku.ingest.text.headings import is_caption

log = logging.getLogger(__name__)

Block = dict[str, Any]


@dataclass
class _Row:
    words: list[dict[str, Any]]
    top: float
    bottom: float
    x0: float
    x1: float
    column: int = 0             # 0 full width, 1 left, 2 right
    text: str = ""
    size: float = 0.0
    bold: bool = False
    n_chars: int = 0


@dataclass
class _Table:
    top: float
    bottom: float
    x0: float
    x1: float
    rows: list[str] = field(default_factory=list)
    column: int = 0


@dataclass
class PdfOptions:
    min_gutter: float = 8.0         # points; narrower gaps are word spaces, not a gutter
    heading_ratio: float = 1.12     # size / body size above which a short row is a heading
    max_heading_words: int = 16
    tables: bool = True
    figures: FigureOptions | None = None   # None: figures are not looked for
    # a gap between two letters wider than this share of the font size separates words
    # (pdfplumber's default, 3 points whatever the size, glues tightly set words together:
    # "individualauthorcontributions" in ACL papers)
    word_gap_ratio: float | None = 0.15
    # pdfium: characters and page objects from PDFium (compiled), pdfplumber's table finder only
    # on pages whose ruling lines can form a table; pdfplumber: pdfplumber for every page
    engine: str = "pdfium"
    # OCR of pages without a usable text layer (kohaku/ingest/text/ocr.py OcrOptions); None = off
    ocr: Any = None


@functools.lru_cache(maxsize=4096)  # a document has a few dozen font names; asked once a word
def _is_bold(fontname: str) -> bool:
    name = (fontname or "").lower()
    return any(k in name for k in ("bold", "black", "heavy", "semibold", ",b", "-b", "cmbx"))


_X0 = itemgetter("x0")


def _rows_from_words(words: list[dict[str, Any]], tol: float = 2.5) -> list[_Row]:
    """Words -> rows: sorted by (top to 0.1 pt, x0), a word joins the row above when its top is
    within ``tol`` of that row's first top; each row's words left to right."""
    if not isinstance(words, list):
        words = list(words)
    tops = [w["top"] for w in words]
    rounded = {t: round(t, 1) for t in set(tops)}  # the words of a line share a top: round each once
    keys = list(zip(map(rounded.__getitem__, tops), map(_X0, words)))
    order = sorted(range(len(words)), key=keys.__getitem__)  # the same comparisons as sorting the words
    rows: list[_Row] = []
    ws: list[dict[str, Any]] = []
    top = bottom = x0 = x1 = 0.0
    for i in order:
        w = words[i]
        if ws and abs(tops[i] - top) <= tol:
            ws.append(w)
            # max()/min() keep the first of equals: so do these
            v = w["bottom"]
            if v > bottom:
                bottom = v
            v = w["x0"]
            if v < x0:
                x0 = v
            v = w["x1"]
            if v > x1:
                x1 = v
        else:
            if ws:
                rows.append(_Row(ws, top, bottom, x0, x1))
            ws = [w]
            top, bottom, x0, x1 = tops[i], w["bottom"], w["x0"], w["x1"]
    if ws:
        rows.append(_Row(ws, top, bottom, x0, x1))
    for r in rows:
        if len(r.words) > 1:
            r.words.sort(key=_X0)
    return rows


def _find_gutter(rows: list[_Row], width: float, min_gutter: float) -> tuple[float, float] | None:
    """The band between two columns: in the middle 40 % of the text area, the widest run of x
    positions that few rows cover (full-width titles may cross it), with text on both sides."""
    if len(rows) < 6:
        return None
    x_lo = min(r.x0 for r in rows)
    x_hi = max(r.x1 for r in rows)
    span = x_hi - x_lo
    if span < 200:
        return None
    n = int(span) + 1
    # cover[x]: the words over x (each word adds 1 over its range [a, b)), by prefix sums
    starts = [0] * (n + 1)
    for r in rows:
        for w in r.words:
            a = int(w["x0"] - x_lo)
            b = int(w["x1"] - x_lo) + 1
            if a < 0:
                a = 0
            if b > n:
                b = n
            if a < b:
                starts[a] += 1
                starts[b] -= 1
    cover = list(accumulate(starts))
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
    sides = [_row_side(r, band, min_gutter) for r in rows]
    left = sum(1 for s in sides if s in (1, 3))
    right = sum(1 for s in sides if s in (2, 3))
    if left < 3 or right < 3:
        return None
    return band


def _split_gap(r: _Row, band: tuple[float, float], min_gutter: float) -> int | None:
    """Index of the word after the widest gap that lies in the band and is gutter-wide."""
    b0, b1 = band
    best, best_w = None, 0.0
    for k in range(1, len(r.words)):
        g0, g1 = r.words[k - 1]["x1"], r.words[k]["x0"]
        width = g1 - g0
        if width >= 0.8 * min_gutter and g1 >= b0 and g0 <= b1 and width > best_w:
            best, best_w = k, width
    return best


def _row_side(r: _Row, band: tuple[float, float], min_gutter: float) -> int:
    """0 full width, 1 left column, 2 right column, 3 both columns (split at the gutter)."""
    b0, b1 = band
    mid = (b0 + b1) / 2
    if _split_gap(r, band, min_gutter) is not None and r.x0 < b0 and r.x1 > b1:
        return 3
    if r.x1 <= b1 + 1 and r.x0 < mid:
        return 1
    if r.x0 >= b0 - 1:
        return 2
    return 0


def _split_columns(rows: list[_Row], gutter: tuple[float, float] | None, min_gutter: float = 8.0) -> list[_Row]:
    """Rows tagged with their column; rows with text in both columns are split in two."""
    if gutter is None:
        return rows
    out: list[_Row] = []
    for r in rows:
        side = _row_side(r, gutter, min_gutter)
        if side == 3:
            k = _split_gap(r, gutter, min_gutter)
            assert k is not None
            for col, ws in ((1, r.words[:k]), (2, r.words[k:])):
                out.append(_Row(ws, min(w["top"] for w in ws), max(w["bottom"] for w in ws),
                                ws[0]["x0"], max(w["x1"] for w in ws), column=col))
        else:
            r.column = side
            out.append(r)
    return out


def _reading_order(items: list[Any]) -> list[Any]:
    """Full-width runs in place; between them, the left column then the right column."""
    items = sorted(items, key=lambda r: (r.top, r.x0))
    ordered: list[Any] = []
    band: list[Any] = []

    def close_band() -> None:
        ordered.extend(sorted((r for r in band if r.column == 1), key=lambda r: (r.top, r.x0)))
        ordered.extend(sorted((r for r in band if r.column == 2), key=lambda r: (r.top, r.x0)))
        band.clear()

    for r in items:
        if r.column == 0:
            close_band()
            ordered.append(r)
        else:
            band.append(r)
    close_band()
    return ordered


def _finish_row(r: _Row) -> None:
    """The row's text, character count, size (the character-weighted mode of its words' sizes
    to 0.1 pt, the first of equals) and boldness (60 % of its characters in bold fonts)."""
    ws = r.words
    if not ws:
        r.text, r.n_chars, r.size, r.bold = normalize_line(""), 0, 0.0, False
        return
    texts = [w["text"] for w in ws]
    lens = list(map(len, texts))
    n = sum(lens)
    raw_sizes = [w.get("size") for w in ws]
    first = raw_sizes[0]
    if raw_sizes.count(first) == len(raw_sizes):  # one size (most rows): the mode is it
        r.size = round(float(first or 0.0), 1)
    else:
        sizes: dict[float, int] = {}
        for k, s in zip(lens, raw_sizes):
            key = round(float(s or 0.0), 1)
            sizes[key] = sizes.get(key, 0) + k
        r.size = max(sizes, key=sizes.__getitem__)  # Counter.most_common(1): the first of equals
    fonts = [w.get("fontname", "") for w in ws]
    if fonts.count(fonts[0]) == len(fonts):
        bold = n if _is_bold(fonts[0]) else 0
    else:
        bold = sum(k for k, f in zip(lens, fonts) if _is_bold(f))
    r.text = normalize_line(" ".join(texts))
    r.n_chars = n
    r.bold = n > 0 and bold >= 0.6 * n


def _table_rows(table: Any) -> list[str]:
    from kohaku.ingest.text.table_cells import extract  # table.extract(), exactly, faster

    out = []
    for row in extract(table) or []:
        cells = [normalize_line((c or "").replace("\n", " ")) for c in row]
        if any(cells):
            out.append(" | ".join(cells))
    return out


def _box(t: _Table) -> tuple[float, float, float, float]:
    return (t.x0, t.top, t.x1, t.bottom)


def _overlap_share(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> float:
    """The share of box ``a``'s area that box ``b`` covers."""
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    area = (a[2] - a[0]) * (a[3] - a[1])
    return max(0.0, w) * max(0.0, h) / area if area > 0 else 0.0


def _outside(words: list[dict[str, Any]], tables: list[_Table]) -> list[dict[str, Any]]:
    """The words whose centre is not in any of the tables' boxes widened by 1 pt (``words``
    itself when no tables)."""
    if not tables:
        return words
    boxes = [(t.x0 - 1, t.x1 + 1, t.top - 1, t.bottom + 1) for t in tables]
    out = []
    for w in words:
        cx = (w["x0"] + w["x1"]) / 2
        cy = (w["top"] + w["bottom"]) / 2
        for x0, x1, top, bottom in boxes:
            if x0 <= cx <= x1 and top <= cy <= bottom:
                break
        else:
            out.append(w)
    return out


def _page_items(page: Any, opts: PdfOptions, figures: list[FigureBox] | None = None,
                stats: Counter | None = None, words: list[dict[str, Any]] | None = None) -> tuple[list[Any], int]:
    tables: list[_Table] = []
    if opts.tables:
        for t in page.find_tables():
            rows = _table_rows(t)
            if rows:
                x0, top, x1, bottom = t.bbox
                tables.append(_Table(top, bottom, x0, x1, rows))
    if words is None:
        words = page.extract_words(**_word_settings(opts))
    n_words = len(words)
    # text drawn outside the page box is invisible; it would only confuse the layout
    pw, ph = float(page.width), float(page.height)
    words = [w for w in words if w["x1"] > 0 and w["x0"] < pw and w["bottom"] > 0 and w["top"] < ph]
    want_figures = figures is not None and opts.figures is not None and opts.figures.enabled
    candidates: list[_Table] = []
    all_tables = tables
    if tables and want_figures and opts.figures.vector:  # type: ignore[union-attr]
        # a gridded plot is a "ruled table" to find_tables; one captioned "Figure n" is a chart
        # candidate: kept out of the tables while the figure finder looks at its drawing
        is_chart = set(chart_tables([_box(t) for t in tables], words, opts.figures))  # type: ignore[arg-type]
        candidates = [t for k, t in enumerate(tables) if k in is_chart]
        tables = [t for k, t in enumerate(tables) if k not in is_chart]
    words = _outside(words, tables)
    found: list[FigureBox] = []
    if want_figures:
        found = find_page_figures(page, words, [_box(t) for t in tables], opts.figures, stats)  # type: ignore[arg-type]
        for fig in found:
            try:
                fig.png = render_figure(page, fig, opts.figures)
            except RenderError as exc:
                fig.error = str(exc)
        figures.extend(found)  # type: ignore[union-attr]
    if candidates:
        # a candidate the finder made a vector figure of is a chart: no table block; one it did
        # not is a table again (nothing is lost). Either way its words are out of the text: the
        # chart's labels, or the table's own cells.
        vectors = [f.bbox for f in found if f.source == "vector"]
        charts = {id(t) for t in candidates if any(_overlap_share(_box(t), v) > 0.5 for v in vectors)}
        tables = [t for t in all_tables if id(t) not in charts]
        if stats is not None and charts:
            stats["charts_not_tables"] += len(charts)
        words = _outside(words, candidates)
    rows = _rows_from_words(words)
    gutter = _find_gutter(rows, float(page.width), opts.min_gutter)
    rows = _split_columns(rows, gutter, opts.min_gutter)
    for r in rows:
        _finish_row(r)
    if gutter is not None:
        g0, g1 = gutter
        for t in tables:
            t.column = 1 if t.x1 <= g1 + 1 else 2 if t.x0 >= g0 - 1 else 0
        for f in found:
            f.column = 1 if f.x1 <= g1 + 1 else 2 if f.x0 >= g0 - 1 else 0
        # a caption right above or below a table belongs where the table is read
        for r in rows:
            if r.text and is_caption(r.text):
                for t in tables:
                    near = -25 <= r.top - t.bottom <= 25 or -25 <= t.top - r.bottom <= 25
                    if near and r.x0 < t.x1 and r.x1 > t.x0:
                        r.column = t.column
                        break
    ordered = _reading_order([r for r in rows if r.text] + tables)
    # figures take their place in the reading order of the text, which does not change for them
    return _insert_figures(ordered, found), n_words


def _insert_figures(ordered: list[Any], figures: list[FigureBox]) -> list[Any]:
    """``ordered`` (rows and tables in reading order) with each figure after the item it
    follows: in a column, after the last item of that column above it (or before the column's
    first item below it); full width, after the last item that ends above it."""
    out = list(ordered)
    for fig in sorted(figures, key=lambda f: (f.top, f.x0)):
        text = [(i, r) for i, r in enumerate(out) if not isinstance(r, FigureBox)]
        pos = None
        if fig.column in (1, 2):
            above = [i for i, r in text if r.column == fig.column and r.top < fig.top]
            below = [i for i, r in text if r.column == fig.column and r.top >= fig.top]
            if above:
                pos = above[-1] + 1
            elif below:
                pos = below[0]
        if pos is None:
            above = [i for i, r in text if r.bottom <= fig.top + 2]
            pos = above[-1] + 1 if above else 0
        out.insert(pos, fig)
    return out


def _body_size(pages: list[list[Any]]) -> float:
    sizes: Counter[float] = Counter()
    for items in pages:
        for r in items:
            if isinstance(r, _Row):
                sizes[r.size] += r.n_chars
    return sizes.most_common(1)[0][0] if sizes else 10.0


_NUMBER_PREFIX = re.compile(r"^(\d{1,2}(?:\.\d{1,2}){0,3})\.?\s+\S")


def _is_heading_row(r: _Row, body: float, opts: PdfOptions) -> bool:
    words = r.text.split()
    if not words or len(words) > opts.max_heading_words or not re.search(r"[A-Za-z]{2}", r.text):
        return False
    if is_caption(r.text):
        return False
    larger = r.size >= body * opts.heading_ratio and r.size - body >= 0.8
    if larger:
        return True
    return r.bold and len(words) <= 12 and not ends_sentence(r.text) and r.size >= body - 0.5


def _blocks_from_pages(pages: list[list[Any]], opts: PdfOptions) -> list[Block]:
    body = _body_size(pages)
    heading_sizes = sorted(
        {r.size for items in pages for r in items if isinstance(r, _Row) and _is_heading_row(r, body, opts) and r.size > body + 0.4},
        reverse=True,
    )

    def level_of(r: _Row) -> int:
        m = _NUMBER_PREFIX.match(r.text)
        if m:
            return m.group(1).count(".") + 1
        if r.size in heading_sizes:
            return min(3, heading_sizes.index(r.size) + 1)
        return min(3, len(heading_sizes) + 1)

    blocks: list[Block] = []
    for page_no, page_items in enumerate(pages, start=1):
        items = [r for r in page_items if not isinstance(r, FigureBox)]
        cur: dict[str, Any] | None = None
        prev: _Row | None = None
        # typical line gap on this page
        gaps = [b.top - a.bottom for a, b in zip(items, items[1:])
                if isinstance(a, _Row) and isinstance(b, _Row) and a.column == b.column and 0 <= b.top - a.bottom < 30]
        gaps.sort()
        line_gap = gaps[len(gaps) // 2] if gaps else 3.0

        page_start = len(blocks)
        row_boxes: list[list[tuple[float, float, float, float]]] = []  # per block of this page

        def close() -> None:
            nonlocal cur
            if cur is not None and cur["lines"]:
                blocks.append({
                    "page": page_no, "kind": cur["kind"], "text": "\n".join(cur["lines"]),
                    "font_size": cur["size"], "level": cur.get("level"),
                })
                row_boxes.append(cur.get("boxes", []))
            cur = None

        col_left: dict[int, float] = {}
        for r in items:
            if isinstance(r, _Row):
                col_left[r.column] = min(col_left.get(r.column, r.x0), r.x0)
        for r in page_items:
            if isinstance(r, FigureBox):
                # the figure follows the block being built (or the last one closed)
                r.anchor = len(blocks) - (0 if cur is not None else 1)
                continue
            if isinstance(r, _Table):
                close()
                blocks.append({"page": page_no, "kind": "table", "text": "\n".join(r.rows), "font_size": None, "level": None})
                row_boxes.append([])
                prev = None
                continue
            heading = _is_heading_row(r, body, opts)
            caption = not heading and is_caption(r.text)
            new_para = (
                prev is None
                or prev.column != r.column
                or r.top - prev.bottom > max(1.6 * line_gap, line_gap + 4)
                or r.top < prev.top
            )
            if heading:
                same = cur is not None and cur["kind"] == "heading" and not new_para and abs(cur["size"] - r.size) < 0.3
                if same:
                    cur["lines"].append(r.text)
                else:
                    close()
                    cur = {"kind": "heading", "lines": [r.text], "size": r.size, "level": level_of(r)}
                prev = r
                continue
            indent = r.x0 - col_left.get(r.column, r.x0) > 0.8 * max(r.size, 1.0)
            if caption:
                close()
                cur = {"kind": "caption", "lines": [r.text], "size": r.size}
            elif cur is None or cur["kind"] == "heading" or new_para:
                close()
                cur = {"kind": "text", "lines": [r.text], "size": r.size}
            elif cur["kind"] == "caption" and ends_sentence(cur["lines"][-1]) and abs(cur["size"] - r.size) > 0.3:
                close()
                cur = {"kind": "text", "lines": [r.text], "size": r.size}
            elif cur["kind"] == "text" and indent and prev is not None and ends_sentence(prev.text):
                close()
                cur = {"kind": "text", "lines": [r.text], "size": r.size}
            else:
                cur["lines"].append(r.text)
            cur.setdefault("boxes", []).append((r.x0, r.top, r.x1, r.bottom))
            prev = r
        close()
        for fig in page_items:
            if isinstance(fig, FigureBox):
                fig.replaces = _replaced_blocks(fig, blocks[page_start:], row_boxes, page_start)
    return blocks


def _replaced_blocks(fig: FigureBox, page_blocks: list[Block], row_boxes: list[list[tuple[float, float, float, float]]],
                     offset: int) -> list[int]:
    """Block indices a captioned figure stands for: blocks whose every line lies inside its box
    (labels drawn as text), and its caption paragraph (the first block on the page, after the
    figure's anchor, whose text is the figure's caption line)."""
    x0, top, x1, bottom = fig.bbox
    out = []
    for k, boxes in enumerate(row_boxes):
        if boxes and all(x0 - 2 <= b[0] and b[2] <= x1 + 2 and top - 2 <= b[1] and b[3] <= bottom + 2 for b in boxes):
            out.append(offset + k)
    caption = " ".join(fig.caption.split())
    if caption:
        for k, b in enumerate(page_blocks):
            if offset + k > fig.anchor and " ".join(str(b["text"]).split()) == caption:
                out.append(offset + k)
                break
    return sorted(set(out))


ENGINES = ("pdfium", "pdfplumber")


@dataclass
class PdfPart:
    """What one worker reads of a PDF: the layout items of pages ``first``..``first + len(pages)``
    (0-based), before the document-wide steps (body size, headings, paragraphs) that need every
    page. A long document is read in parts by several workers and assembled in order."""

    first: int
    n_pages: int                          # pages of the whole document
    pages: list[list[Any]]                # per page: rows, tables and figures in reading order
    empty: list[int] = field(default_factory=list)      # 1-based pages without any word
    warnings: list[str] = field(default_factory=list)
    figures: list[FigureBox] = field(default_factory=list)
    stats: Counter = field(default_factory=Counter)     # the figure finder's (see read_pdf)
    # the pdfium engine's: table_pages (pages given to pdfplumber's table finder), plumber_pages
    # (pages pdfplumber opened at all: tables, vector figures, renderings)
    engine: Counter = field(default_factory=Counter)
    ocr: dict[int, float] = field(default_factory=dict)  # 1-based page read by OCR -> mean confidence


def pdf_page_count(path: Path) -> int:
    """The number of pages (PDFium; milliseconds); raises DocumentError when unreadable."""
    import pypdfium2 as pdfium

    try:
        pdf = pdfium.PdfDocument(str(path))
    except Exception as exc:
        raise DocumentError(_describe_open_error(exc)) from exc
    try:
        return len(pdf)
    finally:
        pdf.close()


def read_pdf_part(path: Path, opts: PdfOptions | None = None, start: int = 0, stop: int | None = None,
                  want_figures: bool = False) -> PdfPart:
    """Pages ``start``..``stop`` (0-based, stop excluded; None = to the end) of one PDF -> their
    layout items (``opts.engine``: ``pdfium``, the compiled text layer with pdfplumber's table
    finder where ruling lines can make a table, or ``pdfplumber`` for every page). Raises
    DocumentError when the file cannot be opened."""
    opts = opts or PdfOptions()
    path = Path(path)
    if path.stat().st_size == 0:
        raise DocumentError("empty file (0 bytes); re-download it")
    try:
        if opts.engine == "pdfplumber":
            import pdfplumber  # imported here: worker processes pay for it only when needed

            pdf: Any = pdfplumber.open(path)
            n_pages = len(pdf.pages)
            get_page = pdf.pages.__getitem__
        else:
            from kohaku.ingest.text.pdfium_page import PdfiumDocument

            pdf = PdfiumDocument(path)
            n_pages = len(pdf)
    except Exception as exc:  # pdfminer and PDFium raise many types; report them all the same way
        raise DocumentError(_describe_open_error(exc)) from exc
    stop = n_pages if stop is None else min(stop, n_pages)
    part = PdfPart(first=start, n_pages=n_pages, pages=[])
    found: list[FigureBox] | None = [] if want_figures else None
    reader = _OcrReader(path, opts, pdf if opts.engine == "pdfium" else None, n_pages, stop - start)
    try:
        for index in range(start, stop):
            try:
                page = pdf.page(index, part.engine) if opts.engine == "pdfium" else get_page(index)
            except Exception as exc:
                raise DocumentError(_describe_open_error(exc)) from exc
            try:
                words = page.extract_words(**_word_settings(opts))
                view, words = reader.view(page, words, index, part) if reader.active else (page, words)
                items, n_words = _page_items(view, opts, found, part.stats, words)
            except Exception as exc:
                items, n_words = [], 0
                part.warnings.append(f"page {index + 1}: {type(exc).__name__}: {exc}")
            finally:
                page.close()
            if n_words == 0:
                part.empty.append(index + 1)
            for item in items:  # the words are not needed past the page (smaller to send back)
                if isinstance(item, _Row):
                    item.words = []
            part.pages.append(items)
    except DocumentError:
        raise
    except Exception as exc:
        raise DocumentError(_describe_open_error(exc)) from exc
    finally:
        reader.close()
        pdf.close()
    part.figures = found or []
    reader.finish(part)
    return part


def _word_settings(opts: PdfOptions) -> dict[str, Any]:
    spacing = {"x_tolerance_ratio": opts.word_gap_ratio} if opts.word_gap_ratio else {}
    return dict(extra_attrs=["size", "fontname"], keep_blank_chars=False, use_text_flow=False, **spacing)


class _OcrReader:
    """OCR for the pages of one part whose text layer is missing or garbage
    (``opts.ocr.mode``: auto; always: every page): the page rendered with PDFium at
    ``ocr.dpi``, recognised (kohaku/ingest/text/ocr.py), and its words given to the layout code in
    place of the text layer's. At most ``ocr.max_pages`` per document (shared out over its
    parts by page count); a page the engine fails on or that times out is a page warning."""

    def __init__(self, path: Path, opts: PdfOptions, pdfium_doc: Any, n_pages: int, n_part: int):
        self.opts = opts.ocr
        self.active = self.opts is not None and self.opts.mode != "off"
        self.path = path
        self._doc = pdfium_doc
        self._own: Any = None
        # this part's share of the document's budget, rounded up (all of it for a whole document)
        self.budget = -(-int(self.opts.max_pages) * n_part // max(1, n_pages)) if self.active else 0
        self.skipped: list[int] = []
        self.failed: list[str] = []
        self.seconds = 0.0

    def view(self, page: Any, words: list[dict[str, Any]], index: int,
             part: PdfPart) -> tuple[Any, list[dict[str, Any]]]:
        """(the page, its words): the page and its text layer's ``words`` as they are, or the
        page seen through OCR and the recognised words."""
        from kohaku.ingest.text.ocr import ocr_page, page_needs_ocr, render_page

        if not page_needs_ocr(" ".join(w["text"] for w in words), self.opts):
            return page, words
        if self.budget <= 0:
            self.skipped.append(index + 1)
            return page, words
        self.budget -= 1
        pdfium_page = self._pdfium_page(index)
        try:
            width, height = pdfium_page.get_size()
            result = ocr_page(render_page(pdfium_page, int(self.opts.dpi)), width, height, self.opts)
        except Exception as exc:  # rendering or the engine: a page warning, never a crash
            self.failed.append(f"page {index + 1}: OCR failed ({type(exc).__name__}: {exc})")
            return page, words
        finally:
            pdfium_page.close()
        self.seconds += result.seconds
        if result.error:
            self.failed.append(f"page {index + 1}: OCR failed ({result.error})")
            return page, words
        if not result.words:
            return page, words
        part.ocr[index + 1] = float(result.mean_conf)
        view = _OcrView(page, result.words, result.width_pt or width, result.height_pt or height,
                        turned=bool(result.rotation))
        return view, view.extract_words()

    def _pdfium_page(self, index: int) -> Any:
        if self._doc is not None:
            return self._doc.pdf[index]
        if self._own is None:
            import pypdfium2 as pdfium

            self._own = pdfium.PdfDocument(str(self.path))
        return self._own[index]

    def close(self) -> None:
        if self._own is not None:
            self._own.close()
            self._own = None

    def finish(self, part: PdfPart) -> None:
        part.warnings.extend(self.failed)
        if self.skipped:
            part.warnings.append(f"OCR page budget (parse.ocr.max_pages={self.opts.max_pages}) reached: "
                                 f"{_page_list(self.skipped)} without a usable text layer not read")
        if part.ocr:
            part.engine["ocr_pages"] += len(part.ocr)
            part.engine["ocr_ms"] += int(1000 * self.seconds)


class _OcrView:
    """A page whose words come from OCR: the layout code reads it as any page (rows, columns,
    headings by height); it has no ruling lines to find tables in, and its own images and
    drawings still go to the figure finder (not on a page the engine turned: their boxes are
    in the unturned frame)."""

    def __init__(self, page: Any, words: list[dict[str, Any]], width: float, height: float, turned: bool):
        self._page = page
        self._words = words
        self.width, self.height = float(width), float(height)
        self.bbox = (0.0, 0.0, self.width, self.height)
        self.page_number = page.page_number
        self._turned = turned

    def extract_words(self, **_: Any) -> list[dict[str, Any]]:
        return [dict(w) for w in self._words]

    def find_tables(self, *_: Any, **__: Any) -> list[Any]:
        return []

    @property
    def images(self) -> list[dict[str, Any]]:
        return [] if self._turned else self._page.images

    @property
    def curves(self) -> list[dict[str, Any]]:
        return [] if self._turned else self._page.curves

    @property
    def rects(self) -> list[dict[str, Any]]:
        return [] if self._turned else self._page.rects

    @property
    def lines(self) -> list[dict[str, Any]]:
        return [] if self._turned else self._page.lines

    def crop(self, *args: Any, **kwargs: Any) -> Any:
        return self._page.crop(*args, **kwargs)


def assemble_pdf(parts: list[PdfPart], opts: PdfOptions | None = None, figures: list[FigureBox] | None = None,
                 figure_stats: Counter | None = None) -> tuple[list[Block], int, list[str]]:
    """A document's parts (any order) -> (blocks, n_pages, warnings); the document-wide steps:
    body font size, heading levels, paragraphs, repeated figures (logos). Raises DocumentError
    when no page has text."""
    opts = opts or PdfOptions()
    parts = sorted(parts, key=lambda p: p.first)
    n_pages = parts[0].n_pages if parts else 0
    pages = [items for p in parts for items in p.pages]
    empty = [n for p in parts for n in p.empty]
    warnings = [w for p in parts for w in p.warnings]
    found = [f for p in parts for f in p.figures]
    if figure_stats is not None:
        for p in parts:
            figure_stats.update(p.stats)
    if n_pages == 0:
        raise DocumentError("PDF has no pages")
    ocr = {n: conf for p in parts for n, conf in p.ocr.items()}
    if len(empty) == n_pages:
        hint = ("OCR found no words on them" if opts.ocr is not None and opts.ocr.mode != "off"
                else "OCR is off (parse.ocr.mode=auto reads such pages; bash scripts/setup_ocr.sh installs the engine)")
        raise DocumentError(f"no text layer (scanned or image-only PDF?) and {hint}; supply a text version "
                            "or an OCRed PDF")
    if empty:
        warnings.append(f"{len(empty)} of {n_pages} pages have no text layer: {_page_list(empty)}")
    if ocr:
        mean = sum(ocr.values()) / len(ocr)
        warnings.append(f"{len(ocr)} of {n_pages} pages read by OCR ({_page_list(sorted(ocr))}; mean word "
                        f"confidence {mean:.0f})")
    blocks = _blocks_from_pages(pages, opts)
    if not blocks:
        raise DocumentError("no text extracted")
    for b in blocks:
        if b["page"] in ocr:
            b["source"], b["confidence"] = "ocr", round(ocr[b["page"]], 1)
    if figures is not None and opts.figures is not None:
        kept, n_repeated = drop_repeated(found, opts.figures.repeat_pages)
        if figure_stats is not None and n_repeated:
            figure_stats["repeated"] += n_repeated
        for fig in kept:
            if fig.png is None:
                if figure_stats is not None:
                    figure_stats["unrendered"] += 1
                warnings.append(
                    f"page {fig.page}: {fig.source} figure at ({fig.x0:.0f}, {fig.top:.0f}, {fig.x1:.0f}, "
                    f"{fig.bottom:.0f}) could not be rendered ({fig.error}); it is left out of the "
                    f"figures table (lower parse.figures.dpi, or check the PDF page)")
            else:
                figures.append(fig)
    return blocks, n_pages, warnings


def _page_list(pages: list[int], limit: int = 20) -> str:
    """"pages 3, 7-9, 12" (at most ``limit`` ranges named)."""
    runs: list[list[int]] = []
    for n in sorted(pages):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    named = [f"{a}" if a == b else f"{a}-{b}" for a, b in runs[:limit]]
    more = f" and {len(runs) - limit} more ranges" if len(runs) > limit else ""
    return ("page " if len(pages) == 1 else "pages ") + ", ".join(named) + more


def read_pdf(path: Path, opts: PdfOptions | None = None, figures: list[FigureBox] | None = None,
             figure_stats: Counter | None = None) -> tuple[list[Block], int, list[str]]:
    """Parse one PDF -> (blocks, n_pages, warnings). Raises DocumentError when unreadable.

    With ``opts.figures`` enabled and a ``figures`` list, the document's figures are appended
    to it (kohaku/ingest/text/figures.py), each with the index of the block it follows in reading
    order (``anchor``); a figure that cannot be rendered is a warning naming its page and box.
    ``figure_stats`` counts what the finder dropped or changed: ``tiny image`` / ``tiny vector``,
    ``full_page``, ``repeated`` (logos), ``charts_not_tables`` (gridded charts find_tables took
    for ruled tables), ``unrendered``."""
    opts = opts or PdfOptions()
    part = read_pdf_part(path, opts, want_figures=figures is not None)
    return assemble_pdf([part], opts, figures, figure_stats)


def _describe_open_error(exc: Exception) -> str:
    chain: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and len(chain) < 5:
        chain.append(e)
        e = e.__cause__ or e.__context__
    names = " ".join(type(x).__name__ for x in chain)
    text = " ".join(str(x) for x in chain)
    if "Password" in names or "password" in text.lower() or "encrypt" in text.lower():
        return "encrypted PDF (a password is required); supply a decrypted copy"
    return (f"not a readable PDF ({type(exc).__name__}: {str(exc)[:200]}); the file is damaged or "
            f"truncated: re-download it or supply a text version")
