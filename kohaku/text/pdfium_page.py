"""A PDF page read through PDFium (pypdfium2's compiled text and page-object API), shaped like
the pdfplumber page that kohaku's layout code reads (kohaku/text/pdf.py).

Why: pdfplumber interprets every content stream in pure Python (pdfminer); on long filings that
is ~2 pages/s per core, 94 % of it in pdfminer. PDFium reads the same characters, boxes, font
sizes and page objects in C, so the per-page cost is the Python that turns characters into
words, which is the part kohaku needs.

What the adapter gives (coordinates in points, origin top-left of the media box, as pdfplumber):
- ``extract_words(...)``: the words pdfplumber's ``extract_words`` gives with kohaku's
  settings, made from PDFium's text: a run between its whitespace (the spaces a PDF draws,
  those PDFium puts at word gaps, its line breaks) is a word when its first and last characters
  share size, font and line; otherwise it is measured character by character and split where
  pdfplumber would (size, font or line changes, a gap over 0.15 x the size); rotated text a word
  per character; ligatures expanded (``ﬁ`` -> ``fi``); each with ``size`` and ``fontname``.
- ``images``: the page's image objects (also inside form XObjects), with their boxes.
- ``find_tables()``: pdfplumber's own table finder (its TableFinder and Table classes) given
  the edges of PDFium's path objects (every axis-aligned segment of every subpath, as pdfplumber
  makes them of lines, rectangles and curves) and PDFium's characters for the cell text, so no
  page is interpreted by pdfminer for its tables.
- ``curves`` / ``rects`` / ``lines`` and ``crop(...).to_image(...)``: from the pdfplumber page,
  opened only when asked (the figure finder asks on pages with a "Figure n" caption, and to
  render a figure found), so figures and their PNG bytes are exactly pdfplumber's.
"""

from __future__ import annotations

import ctypes
import re
from functools import cached_property, lru_cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

LIGATURES = {"\ufb00": "ff", "\ufb01": "fi", "\ufb02": "fl", "\ufb03": "ffi", "\ufb04": "ffl",
             "\ufb05": "st", "\ufb06": "st"}
# PDFium's marks for a hyphen that ends a line (U+0002 from GetUnicode, U+FFFE in GetText's
# output); other uses of the two are unmappable characters
_HYPHEN_MARKS = ("\x02", "\ufffe")
_LINE_TOLERANCE = 3.0      # pdfplumber's y_tolerance: characters further apart are on two lines


class PdfiumDocument:
    """One PDF open in PDFium; pdfplumber's view of it is opened on first use only."""

    def __init__(self, path: Path | str):
        import pypdfium2 as pdfium

        self.path = Path(path)
        self.pdf = pdfium.PdfDocument(str(self.path))
        self._plumber: Any = None

    def __len__(self) -> int:
        return len(self.pdf)

    def page(self, index: int, stats: dict[str, int] | None = None) -> "PdfiumPage":
        return PdfiumPage(self, index, stats)

    def plumber_page(self, index: int) -> Any:
        if self._plumber is None:
            import pdfplumber

            self._plumber = pdfplumber.open(self.path)
        return self._plumber.pages[index]

    def close(self) -> None:
        if self._plumber is not None:
            self._plumber.close()
            self._plumber = None
        self.pdf.close()


class PdfiumPage:
    """The parts of a pdfplumber page that kohaku/text/pdf.py and figures.py read."""

    def __init__(self, doc: PdfiumDocument, index: int, stats: dict[str, int] | None = None):
        self.doc = doc
        self.index = index
        self.page_number = index + 1
        self.stats = stats if stats is not None else {}
        self._page = doc.pdf[index]
        # the page's box as PDFium resolves it (inherited from the page tree where the page
        # has none of its own; get_mediabox would fall back to US Letter there)
        left, bottom, right, top = self._page.get_bbox()
        self._left, self._top = float(left), float(top)
        self.width = float(right - left)
        self.height = float(top - bottom)
        self.bbox = (0.0, 0.0, self.width, self.height)
        self._plumber: Any = None
        self._items: list[tuple[Any, ...]] | None = None

    # ---------------------------------------------------------------- text

    def word_items(self) -> list[tuple[Any, ...]]:
        """(text, x0, top, x1, bottom, size, fontname, upright) of every word on the page: a run
        of characters between PDFium's whitespace (the spaces the PDF draws, the spaces PDFium
        puts where it sees a word gap, its line breaks). Only a word's first and last
        characters are measured: size, font and top come from the first, the box spans both."""
        api = _api()
        textpage = self._page.get_textpage()
        try:
            tp = ctypes.cast(textpage.raw, ctypes.c_void_p).value
            n = api.count(tp)
            if n <= 0:
                return []
            buf = (ctypes.c_ushort * (n + 1))()
            api.text(tp, 0, n, ctypes.addressof(buf))
            text = bytes(buf)[: 2 * n].decode("utf-16-le", errors="replace")
            if len(text) != n:  # a character outside the BMP: ask one by one
                text = "".join(chr(api.unicode(tp, i)) for i in range(n))
            box = api.FS_RECTF()
            box_at = ctypes.addressof(box)
            ox, oy = ctypes.c_double(), ctypes.c_double()
            ox_at, oy_at = ctypes.addressof(ox), ctypes.addressof(oy)
            get_box, get_obj = api.box, api.obj
            by_obj: dict[int | None, tuple[float, bool, str, bool]] = {}   # size, upright, font, italic
            by_font: dict[int | None, tuple[str, bool]] = {}               # name, italic
            left, top = self._left, self._top
            out: list[tuple[Any, ...]] = []
            def measure(i: int) -> tuple[Any, ...]:
                """(x0, top, x1, bottom, size, font, upright) of character i, in PDF space."""
                obj = get_obj(tp, i)
                font = by_obj.get(obj)
                if font is None:
                    font = by_obj[obj] = _object_font(api, tp, i, obj, by_font)
                get_box(tp, i, box_at)
                x0 = box.left
                if font[1]:  # upright: x0 at the origin, as pdfminer (the loose box of an italic
                    # glyph leans left of it, and a round one's starts a little before it)
                    api.origin(tp, i, ox_at, oy_at)
                    x0 = ox.value
                return (x0, box.top, box.right, box.bottom, font[0], font[2], font[1])

            def emit(word: str, a: tuple[Any, ...], b: tuple[Any, ...]) -> None:
                size, name, upright = a[4], a[5], a[6]
                if upright:
                    bottom = top - min(a[3], b[3])
                    out.append((word, a[0] - left, bottom - size, max(a[2], b[2]) - left, bottom, size, name, True))
                else:  # rotated text (margin notes, axis titles): its box as it lies
                    out.append((word, min(a[0], b[0]) - left, top - max(a[1], b[1]), max(a[2], b[2]) - left,
                                top - min(a[3], b[3]), size, name, False))

            for m in _WORD.finditer(text):
                a, b = m.start(), m.end() - 1
                word = m.group()
                if _SPECIAL.search(word):
                    word = _clean_word(api, tp, a, word)
                first = measure(a)
                if b == a:
                    emit(word, first, first)
                    continue
                if not first[6]:
                    # rotated text (a margin note, an axis title): a word per character, as
                    # pdfplumber's extraction gives it, so it does not stretch a row of the page
                    text_k = word if len(word) == b - a + 1 else m.group()
                    for k in range(b - a + 1):
                        c = first if k == 0 else measure(a + k)
                        emit(LIGATURES.get(text_k[k], text_k[k]), c, c)
                    continue
                last = measure(b)
                if (first[4:] == last[4:] and abs(first[3] - last[3]) < 0.5 * first[4] + 0.5
                        and last[2] > first[0] and len(word) == b - a + 1):
                    emit(word, first, last)
                    continue
                # the run changes font, size or line inside (a superscript, a word broken over
                # two lines): measured character by character, split where pdfplumber would
                _split_word(m.group(), a, measure, emit, word if len(word) == b - a + 1 else None)
            return out
        finally:
            textpage.close()

    def extract_words(self, extra_attrs: Any = None, keep_blank_chars: bool = False, use_text_flow: bool = False,
                      x_tolerance_ratio: float | None = None, x_tolerance: float = 3.0, **_: Any) -> list[dict[str, Any]]:
        """Words as pdfplumber's ``extract_words`` gives them with kohaku's settings (see the
        module docstring); ``extra_attrs`` size and fontname are always filled."""
        if self._items is None:
            self._items = self.word_items()
        return [{"text": w[0], "x0": w[1], "top": w[2], "x1": w[3], "bottom": w[4], "upright": w[7],
                 "size": w[5], "fontname": w[6]} for w in self._items]

    # --------------------------------------------------------------- objects

    @cached_property
    def _objects(self) -> list[tuple[int, int, tuple[float, float, float, float, float, float]]]:
        """(type, handle, matrix to page space) of every image and path object, those inside
        form XObjects included (text objects are read through the text page)."""
        api = _api()
        image, path, form = api.IMAGE, api.PATH, api.FORM
        get_type, page_obj, form_obj = api.obj_type, api.page_obj, api.form_obj
        out: list[tuple[int, int, tuple[float, float, float, float, float, float]]] = []
        page = ctypes.cast(self._page.raw, ctypes.c_void_p).value
        identity = (1.0, 0.0, 0.0, 1.0, 0.0, 0.0)
        stack: list[tuple[int | None, int, tuple[float, ...], int]] = [(None, api.page_count(page), identity, 0)]
        while stack:
            parent, count, matrix, depth = stack.pop()
            for k in range(count):
                obj = page_obj(page, k) if parent is None else form_obj(parent, k)
                kind = get_type(obj)
                if kind == image or kind == path:
                    out.append((kind, obj, matrix))
                elif kind == form and depth < 8:
                    stack.append((obj, api.form_count(obj), _compose(_matrix(api, obj), matrix), depth + 1))
        return out

    def _bounds(self, obj: int, matrix) -> tuple[float, float, float, float]:
        """An object's box (x0, top, x1, bottom) on the page."""
        api = _api()
        v = (ctypes.c_float * 4)()
        at = ctypes.addressof(v)
        api.bounds(obj, at, at + 4, at + 8, at + 12)
        l, b, r, t = v
        xs, ys = [], []
        for x, y in ((l, b), (r, t), (l, t), (r, b)):
            px, py = _apply(matrix, x, y)
            xs.append(px)
            ys.append(py)
        return (min(xs) - self._left, self._top - max(ys), max(xs) - self._left, self._top - min(ys))

    @cached_property
    def images(self) -> list[dict[str, Any]]:
        """Image objects as pdfplumber's ``page.images`` items (their box keys)."""
        image = _api().IMAGE
        out = []
        for kind, obj, matrix in self._objects:
            if kind == image:
                x0, top, x1, bottom = self._bounds(obj, matrix)
                out.append({"x0": x0, "top": top, "x1": x1, "bottom": bottom, "width": x1 - x0,
                            "height": bottom - top, "page_number": self.page_number})
        return out

    def edges(self) -> list[dict[str, Any]]:
        """Horizontal and vertical edges of the page's path objects, as pdfplumber makes them
        from lines, rectangles and curves: every axis-aligned segment of every subpath."""
        api = _api()
        path, moveto = api.PATH, api.MOVETO
        count, segment, point, seg_type, seg_close = (api.seg_count, api.segment, api.seg_point, api.seg_type,
                                                      api.seg_close)
        out: list[dict[str, Any]] = []
        xy = (ctypes.c_float * 2)()
        x_at = ctypes.addressof(xy)
        y_at = x_at + 4
        left, top = self._left, self._top
        for kind, obj, outer in self._objects:
            if kind != path:
                continue
            a, b, c, d, e, f = _compose(_matrix(api, obj), outer)
            prev: tuple[float, float] | None = None
            start: tuple[float, float] | None = None
            for k in range(max(0, count(obj))):
                seg = segment(obj, k)
                point(seg, x_at, y_at)
                x, y = xy
                p = (a * x + c * y + e - left, top - (b * x + d * y + f))
                if seg_type(seg) == moveto:
                    start = p
                elif prev is not None:
                    _add_edge(out, prev, p)
                prev = p
                if seg_close(seg) and start is not None:
                    _add_edge(out, p, start)
        return out

    def find_tables(self, table_settings: Any = None) -> list[Any]:
        """pdfplumber's own table finder (``TableFinder``, default settings: lines strategy)
        run on this page's PDFium edges and characters; a page without two horizontal and two
        vertical edges cannot hold a ruled table and is skipped."""
        from pdfplumber.table import TableFinder

        # the same edge drawn twice (two adjacent cells' rectangles share a side) is one edge
        # to the finder: its merge step would join them anyway
        edges = list({(e["orientation"], round(e["x0"], 2), round(e["top"], 2), round(e["x1"], 2),
                       round(e["bottom"], 2)): e for e in self.edges()}.values())
        hs = sum(1 for e in edges if e["orientation"] == "h")
        if hs < 2 or len(edges) - hs < 2:
            return []
        self.stats["table_pages"] = self.stats.get("table_pages", 0) + 1
        tables = TableFinder(_TableView(self, edges, []), table_settings).tables
        if tables:
            chars = self.char_dicts()
            for table in tables:  # each table reads only the characters in its box
                x0, top, x1, bottom = table.bbox
                table.page = _TableView(self, edges, [c for c in chars if c["x1"] >= x0 and c["x0"] <= x1
                                                      and c["bottom"] >= top and c["top"] <= bottom])
        return tables

    def char_dicts(self) -> list[dict[str, Any]]:
        """What pdfplumber's table cells read as characters: here the page's words (a cell's
        text is the words whose centre lies in it), with a space between two words of a line
        so that pdfplumber's cell text keeps them apart."""
        if self._items is None:
            self._items = self.word_items()
        out: list[dict[str, Any]] = []
        prev = None
        for w in self._items:
            if prev is not None and w[7] and prev[7] and abs(prev[4] - w[4]) < 1 and prev[3] <= w[1]:
                out.append(_char_dict((" ", prev[3], w[2], w[1], w[4], w[5], w[6], True)))
            out.append(_char_dict(w))
            prev = w
        return out

    # ------------------------------------------------ pdfplumber, on demand

    @property
    def plumber(self) -> Any:
        if self._plumber is None:
            self.stats["plumber_pages"] = self.stats.get("plumber_pages", 0) + 1
            self._plumber = self.doc.plumber_page(self.index)
        return self._plumber

    @property
    def curves(self) -> list[dict[str, Any]]:
        return self.plumber.curves

    @property
    def rects(self) -> list[dict[str, Any]]:
        return self.plumber.rects

    @property
    def lines(self) -> list[dict[str, Any]]:
        return self.plumber.lines

    def crop(self, bbox: Any, relative: bool = False, strict: bool = True) -> Any:
        return self.plumber.crop(bbox, relative=relative, strict=strict)

    def close(self) -> None:
        if self._plumber is not None:
            self._plumber.close()
            self._plumber = None
        self.__dict__.pop("_objects", None)
        self._page.close()


def _char_dict(c: tuple[Any, ...]) -> dict[str, Any]:
    return {"text": c[0], "x0": c[1], "top": c[2], "x1": c[3], "bottom": c[4], "doctop": c[2],
            "width": c[3] - c[1], "height": c[4] - c[2], "size": c[5], "fontname": c[6],
            "upright": c[7], "object_type": "char"}


def _split_word(raw_word: str, start: int, measure: Any, emit: Any, clean: str | None) -> None:
    """Emit the pieces of a whitespace-delimited run whose characters change font, size,
    direction or line: a new piece where any of them changes or the next character starts left
    of the previous one or more than 0.15 x its size right of its end (pdfplumber's rule)."""
    text = clean if clean is not None else raw_word
    cur: list[tuple[str, tuple[Any, ...]]] = []

    def flush() -> None:
        if cur:
            emit("".join(ch for ch, _ in cur), cur[0][1], cur[-1][1])
            cur.clear()

    for k, ch in enumerate(raw_word):
        c = measure(start + k)
        shown = text[k] if clean is not None else LIGATURES.get(ch, ch)
        if cur:
            p = cur[-1][1]
            if (c[4:] != p[4:] or abs(c[3] - p[3]) > _LINE_TOLERANCE or c[0] < p[0] - 0.01
                    or c[0] > p[2] + 0.15 * p[4]):
                flush()
        cur.append((shown, c))
    flush()


_WORD = re.compile(r"[^\s\x00]+")
_SPECIAL = re.compile("[\x02\ufffe\ufb00-\ufb06]")


def _clean_word(api: SimpleNamespace, tp: int, start: int, word: str) -> str:
    """Ligatures expanded (``ﬁ`` -> ``fi``, as pdfplumber does); PDFium's line-end hyphen
    marks (U+0002, U+FFFE) made ``-`` where PDFium says the character is a hyphen, else the
    replacement character."""
    chars = []
    for k, ch in enumerate(word):
        if ch in _HYPHEN_MARKS:
            ch = "-" if api.is_hyphen(tp, start + k) else "\ufffd"
        chars.append(LIGATURES.get(ch, ch))
    return "".join(chars)


class _TableView:
    """What pdfplumber's TableFinder and Table.extract read of a page: its edges, characters
    and box (here PDFium's, so pdfminer never interprets the page)."""

    def __init__(self, page: PdfiumPage, edges: list[dict[str, Any]], chars: list[dict[str, Any]]):
        self.edges = edges
        self.bbox = page.bbox
        self.chars = chars


@lru_cache(maxsize=1)
def _api() -> SimpleNamespace:
    """The PDFium calls of the character loop, declared with plain address arguments (ints):
    pypdfium2's own declarations check pointer types on every call, which costs more than
    the call itself when a page has thousands of characters."""
    import pypdfium2.raw as raw

    V, I, D = ctypes.c_void_p, ctypes.c_int, ctypes.c_double

    def declare(fn: Any, restype: Any, *args: Any) -> Any:
        return ctypes.CFUNCTYPE(restype, *args)(ctypes.cast(fn, V).value)

    return SimpleNamespace(
        FS_RECTF=raw.FS_RECTF, FS_MATRIX=raw.FS_MATRIX,
        count=declare(raw.FPDFText_CountChars, I, V),
        text=declare(raw.FPDFText_GetText, I, V, I, I, V),
        unicode=declare(raw.FPDFText_GetUnicode, ctypes.c_uint, V, I),
        box=declare(raw.FPDFText_GetLooseCharBox, I, V, I, V),
        origin=declare(raw.FPDFText_GetCharOrigin, I, V, I, V, V),
        obj=declare(raw.FPDFText_GetTextObject, V, V, I),
        size=declare(raw.FPDFText_GetFontSize, D, V, I),
        matrix=declare(raw.FPDFText_GetMatrix, I, V, I, V),
        is_hyphen=declare(raw.FPDFText_IsHyphen, I, V, I),
        font=declare(raw.FPDFTextObj_GetFont, V, V),
        font_name=declare(raw.FPDFFont_GetBaseFontName, ctypes.c_size_t, V, V, ctypes.c_size_t),
        font_flags=declare(raw.FPDFFont_GetFlags, I, V),
        IMAGE=raw.FPDF_PAGEOBJ_IMAGE, PATH=raw.FPDF_PAGEOBJ_PATH, FORM=raw.FPDF_PAGEOBJ_FORM,
        MOVETO=raw.FPDF_SEGMENT_MOVETO,
        page_count=declare(raw.FPDFPage_CountObjects, I, V),
        page_obj=declare(raw.FPDFPage_GetObject, V, V, I),
        form_count=declare(raw.FPDFFormObj_CountObjects, I, V),
        form_obj=declare(raw.FPDFFormObj_GetObject, V, V, ctypes.c_ulong),
        obj_type=declare(raw.FPDFPageObj_GetType, I, V),
        obj_matrix=declare(raw.FPDFPageObj_GetMatrix, I, V, V),
        bounds=declare(raw.FPDFPageObj_GetBounds, I, V, V, V, V, V),
        seg_count=declare(raw.FPDFPath_CountSegments, I, V),
        segment=declare(raw.FPDFPath_GetPathSegment, V, V, I),
        seg_point=declare(raw.FPDFPathSegment_GetPoint, I, V, V, V),
        seg_type=declare(raw.FPDFPathSegment_GetType, I, V),
        seg_close=declare(raw.FPDFPathSegment_GetClose, I, V),
    )


_ITALIC_FLAG = 1 << 6   # PDF font descriptor flag 7


def _object_font(api: SimpleNamespace, tp: int, i: int, obj: int | None,
                 by_font: dict[int | None, tuple[str, bool]]) -> tuple[float, bool, str, bool]:
    """(size, upright, font name, italic) of the text object of character ``i``: the size as
    pdfminer measures it, the font size times the vertical scale of the character's matrix
    (text in a scaled form or under a scaled text matrix is smaller or larger than its Tf
    size); upright by pdfminer's rule (a*d > 0, b*c <= 0)."""
    size = float(api.size(tp, i))
    upright = True
    m = api.FS_MATRIX()
    if api.matrix(tp, i, ctypes.addressof(m)):
        scale = (m.c * m.c + m.d * m.d) ** 0.5
        if scale > 0:
            size *= scale
        upright = m.a * m.d > 0 and m.b * m.c <= 0
    font = api.font(obj) if obj else None
    known = by_font.get(font)
    if known is None:
        name = ""
        n = api.font_name(font, None, 0) if font else 0
        if n > 0:
            buf = ctypes.create_string_buffer(n)
            api.font_name(font, buf, n)
            name = buf.value.decode("utf-8", errors="replace")
        flags = api.font_flags(font) if font else 0
        italic = bool(flags > 0 and flags & _ITALIC_FLAG) or any(k in name.lower() for k in ("italic", "oblique"))
        known = by_font[font] = (name, italic)
    return round(size, 4), upright, known[0], known[1]


def _matrix(api: SimpleNamespace, obj: int) -> tuple[float, float, float, float, float, float]:
    m = api.FS_MATRIX()
    if not api.obj_matrix(obj, ctypes.addressof(m)):
        return (1.0, 0.0, 0.0, 1.0, 0.0, 0.0)
    return (m.a, m.b, m.c, m.d, m.e, m.f)


def _compose(inner, outer):
    """The matrix applying ``inner`` then ``outer`` (PDF row-vector convention)."""
    a, b, c, d, e, f = inner
    A, B, C, D, E, F = outer
    return (a * A + b * C, a * B + b * D, c * A + d * C, c * B + d * D, e * A + f * C + E, e * B + f * D + F)


def _apply(m, x: float, y: float) -> tuple[float, float]:
    return (m[0] * x + m[2] * y + m[4], m[1] * x + m[3] * y + m[5])


def _add_edge(out: list[dict[str, Any]], p0: tuple[float, float], p1: tuple[float, float]) -> None:
    (x0, y0), (x1, y1) = p0, p1
    if abs(x0 - x1) < 1e-6 and abs(y0 - y1) >= 1e-6:
        top, bottom = min(y0, y1), max(y0, y1)
        out.append({"x0": x0, "x1": x0, "top": top, "bottom": bottom, "width": 0.0, "height": bottom - top,
                    "orientation": "v", "object_type": "curve_edge"})
    elif abs(y0 - y1) < 1e-6 and abs(x0 - x1) >= 1e-6:
        left, right = min(x0, x1), max(x0, x1)
        out.append({"x0": left, "x1": right, "top": y0, "bottom": y0, "width": right - left, "height": 0.0,
                    "orientation": "h", "object_type": "curve_edge"})
