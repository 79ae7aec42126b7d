"""A PDF page read through PDFium (pypdfium2's compiled text and page-object API), shaped like
the pdfplumber page that kohaku's layout code reads (kohaku/ingest/text/pdf.py).

Why: pdfplumber interprets every content stream in pure Python (pdfminer); on long filings that
is ~2 pages/s per core, 94 % of it in pdfminer. PDFium reads the same characters, boxes, font
sizes and page objects in C, so the per-page cost is what turns characters into words and
path segments into edges. Those loops run in C too (kohaku/ingest/text/pdfium_scan.c, built by
kohaku/ingest/text/native.py; the Python loops here are the fallback without a compiler and the
reference tests/test_pdfium_native.py compares the C loops with, page by page).

What the adapter gives (coordinates in points, origin top-left of the media box, as pdfplumber):
- ``extract_words(...)``: the words pdfplumber's ``extract_words`` gives with kohaku's
  settings, made from PDFium's text: a run between its whitespace (the spaces a PDF draws,
  those PDFium puts at word gaps, its line breaks) is a word when its first and last characters
  share size, font and line; otherwise it is measured character by character and split where
  pdfplumber would (size, font or line changes, a gap over 0.15 x the size); rotated text a word
  per character; ligatures expanded (``ﬁ`` -> ``fi``); each with ``size`` and ``fontname``.
- ``images``: the page's image objects (also inside form XObjects), with their boxes.
- ``find_tables()``: pdfplumber's table finder (kohaku/ingest/text/table_cells.py: its TableFinder's
  tables, exactly, faster; pdfplumber's Table class) given the edges of PDFium's path objects (every axis-aligned segment of every subpath, as pdfplumber
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

from kohaku.ingest.text import native
from kohaku.ingest.text.clean import SURROGATES, valid_text

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
    """The parts of a pdfplumber page that kohaku/ingest/text/pdf.py and figures.py read."""

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

    # ---------------------------------------------------------------- text

    def word_items(self) -> list[tuple[Any, ...]]:
        """(text, x0, top, x1, bottom, size, fontname, upright) of every word on the page: a run
        of characters between PDFium's whitespace (the spaces the PDF draws, the spaces PDFium
        puts where it sees a word gap, its line breaks). Only a word's first and last
        characters are measured: size, font and top come from the first, the box spans both.
        The two ends of every word are read in C when kohaku/ingest/text/native.py could build its
        library (same figures), else here."""
        api = _api()
        textpage = self._page.get_textpage()
        try:
            tp = ctypes.cast(textpage.raw, ctypes.c_void_p).value
            n = api.count(tp)
            if n <= 0:
                return []
            buf = (ctypes.c_ushort * (n + 1))()
            api.text(tp, 0, n, ctypes.addressof(buf))
            units = bytes(buf)[: 2 * n]
            text = units.decode("utf-16-le", errors="surrogatepass")
            if len(text) != n or SURROGATES.search(text) is not None:
                # a character outside the BMP is two of PDFium's characters (a surrogate pair,
                # UTF-16 code units; in a right-to-left run low half first): read one Python
                # character per code unit so the indices stay PDFium's; the words join each
                # pair (_join_pairs) when they are done
                import numpy as np

                text = "".join(map(chr, np.frombuffer(units, dtype="<u2").tolist()))
            return _Words(api, tp, self._left, self._top).read(text)
        finally:
            textpage.close()

    def extract_words(self, extra_attrs: Any = None, keep_blank_chars: bool = False, use_text_flow: bool = False,
                      x_tolerance_ratio: float | None = None, x_tolerance: float = 3.0, **_: Any) -> list[dict[str, Any]]:
        """Words as pdfplumber's ``extract_words`` gives them with kohaku's settings (see the
        module docstring); ``extra_attrs`` size and fontname are always filled."""
        return [{"text": w[0], "x0": w[1], "top": w[2], "x1": w[3], "bottom": w[4], "upright": w[7],
                 "size": w[5], "fontname": w[6]} for w in self._words]

    @cached_property
    def _words(self) -> list[tuple[Any, ...]]:
        """``word_items()``, read once a page (the layout and the table cells both use them)."""
        return self.word_items()

    # --------------------------------------------------------------- objects

    @cached_property
    def _objects(self) -> list[tuple[int, int, tuple[float, float, float, float, float, float]]]:
        """(type, handle, matrix to page space) of every image and path object, those inside
        form XObjects included (text objects are read through the text page)."""
        arrays = self._object_arrays
        if arrays is not None:
            kinds, objs, matrices = arrays
            return list(zip(kinds.tolist(), objs.tolist(), map(tuple, matrices.reshape(-1, 6).tolist())))
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

    @cached_property
    def _object_arrays(self) -> tuple[Any, Any, Any] | None:
        """``_objects`` as arrays (kinds, handles, matrices), read by the C loop
        (kohaku_page_objects); None without it."""
        lib = native.library()
        if lib is None:
            return None
        import numpy as np

        api = _api()
        page = ctypes.cast(self._page.raw, ctypes.c_void_p).value
        room = 256
        while True:
            kinds = np.zeros(room, dtype=np.intc)
            objs = np.zeros(room, dtype=np.uintp)
            matrices = np.zeros(6 * room, dtype=np.float64)
            n = lib.kohaku_page_objects(page, api.IMAGE, api.PATH, api.FORM, api.addr_page_count,
                                        api.addr_page_obj, api.addr_form_count, api.addr_form_obj,
                                        api.addr_obj_type, api.addr_obj_matrix, room, kinds.ctypes.data,
                                        objs.ctypes.data, matrices.ctypes.data)
            if n < 0:
                raise MemoryError(f"page {self.page_number}: no memory for its stack of form objects")
            if n <= room:
                return kinds[:n], objs[:n], matrices[: 6 * n]
            room = n

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
        arrays = self._object_arrays
        if arrays is not None:  # only the images' handles and matrices made into Python values
            kinds, objs, matrices = arrays
            at = (kinds == image).nonzero()[0]
            found = zip(objs[at].tolist(), map(tuple, matrices.reshape(-1, 6)[at].tolist()))
        else:
            found = ((obj, matrix) for kind, obj, matrix in self._objects if kind == image)
        out = []
        for obj, matrix in found:
            x0, top, x1, bottom = self._bounds(obj, matrix)
            out.append({"x0": x0, "top": top, "x1": x1, "bottom": bottom, "width": x1 - x0,
                        "height": bottom - top, "page_number": self.page_number})
        return out

    def edges(self) -> list[dict[str, Any]]:
        """Horizontal and vertical edges of the page's path objects, as pdfplumber makes them
        from lines, rectangles and curves: every axis-aligned segment of every subpath."""
        return [_edge_dict(row) for row in self._edge_rows()]

    def _edge_rows(self) -> list[tuple[float, float, float, float, str]]:
        """``edges`` as (x0, top, x1, bottom, orientation) rows, read in C where it is built."""
        arrays = self._object_arrays
        if arrays is not None:
            return self._edge_rows_native(*arrays)
        api = _api()
        path, moveto = api.PATH, api.MOVETO
        count, segment, point, seg_type, seg_close = (api.seg_count, api.segment, api.seg_point, api.seg_type,
                                                      api.seg_close)
        out: list[tuple[float, float, float, float, str]] = []
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

    def _edge_rows_native(self, kinds: Any, objs: Any, matrices: Any) -> list[tuple[float, float, float, float, str]]:
        import numpy as np

        api, lib = _api(), native.library()
        paths = kinds == api.PATH
        if not paths.any():
            return []
        handles = np.ascontiguousarray(objs[paths])
        outer = np.ascontiguousarray(matrices.reshape(-1, 6)[paths]).reshape(-1)
        room = 1024
        while True:
            rows = np.zeros(4 * room, dtype=np.float64)
            orient = np.zeros(room, dtype=np.uint8)
            n = lib.kohaku_path_edges(len(handles), handles.ctypes.data, outer.ctypes.data, self._left, self._top,
                                      api.addr_obj_matrix, api.addr_seg_count, api.addr_segment, api.addr_seg_point,
                                      api.addr_seg_type, api.addr_seg_close, api.MOVETO, room, rows.ctypes.data,
                                      orient.ctypes.data)
            if n <= room:
                break
            room = n
        values = rows[: 4 * n].reshape(n, 4).T.tolist()
        return list(zip(*values, orient[:n].tobytes().decode("ascii")))

    def find_tables(self, table_settings: Any = None) -> list[Any]:
        """pdfplumber's own table finder (``TableFinder``, default settings: lines strategy)
        run on this page's PDFium edges and characters; a page without two horizontal and two
        vertical edges cannot hold a ruled table and is skipped."""
        from kohaku.ingest.text.table_cells import find_tables

        # the same edge drawn twice (two adjacent cells' rectangles share a side) is one edge
        # to the finder: its merge step would join them anyway
        rows = self._edge_rows()
        if not _ruled([r[4] for r in rows]):  # too few edges even before the twice-drawn ones go
            return []
        unique = _unique_edges(rows)
        if not _ruled([rows[k][4] for k in unique]):
            return []
        edges = [_edge_dict(rows[k]) for k in unique]
        self.stats["table_pages"] = self.stats.get("table_pages", 0) + 1
        tables = find_tables(_TableView(self, edges, []), table_settings)
        if tables:
            for table, chars in zip(tables, self._chars_in([t.bbox for t in tables])):
                table.page = _TableView(self, edges, chars)  # each table reads only the characters in its box
        return tables

    def char_dicts(self) -> list[dict[str, Any]]:
        """What pdfplumber's table cells read as characters: here the page's words (a cell's
        text is the words whose centre lies in it), with a space between two words of a line
        so that pdfplumber's cell text keeps them apart."""
        return [_char_dict(c) for c in self._char_items()]

    def _char_items(self) -> list[tuple[Any, ...]]:
        out: list[tuple[Any, ...]] = []
        prev = None
        for w in self._words:
            if prev is not None and w[7] and prev[7] and abs(prev[4] - w[4]) < 1 and prev[3] <= w[1]:
                out.append((" ", prev[3], w[2], w[1], w[4], w[5], w[6], True))
            out.append(w)
            prev = w
        return out

    def _chars_in(self, boxes: list[tuple[float, float, float, float]]) -> list[list[dict[str, Any]]]:
        """For each box (x0, top, x1, bottom), the ``char_dicts`` that touch it, in their order
        (only those are made into dicts)."""
        import numpy as np

        items = self._char_items()
        if not items:
            return [[] for _ in boxes]
        x0, top, x1, bottom = (np.array(v, dtype=np.float64) for v in list(zip(*items))[1:5])
        out = []
        for bx0, btop, bx1, bbottom in boxes:
            keep = np.flatnonzero((x1 >= bx0) & (x0 <= bx1) & (bottom >= btop) & (top <= bbottom))
            out.append([_char_dict(items[k]) for k in keep.tolist()])
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
        self.__dict__.pop("_object_arrays", None)
        self._page.close()


def _char_dict(c: tuple[Any, ...]) -> dict[str, Any]:
    return {"text": c[0], "x0": c[1], "top": c[2], "x1": c[3], "bottom": c[4], "doctop": c[2],
            "width": c[3] - c[1], "height": c[4] - c[2], "size": c[5], "fontname": c[6],
            "upright": c[7], "object_type": "char"}


class _Words:
    """The words of one text page (``PdfiumPage.word_items``): each whitespace run of the
    page's text measured at its two ends, or character by character where they disagree."""

    def __init__(self, api: SimpleNamespace, tp: int, left: float, top: float):
        self.api, self.tp, self.left, self.top = api, tp, left, top
        self.by_obj: dict[int | None, tuple[float, bool, str, bool]] = {}   # size, upright, font, italic
        self.by_font: dict[int | None, tuple[str, bool]] = {}               # name, italic
        self.box = api.FS_RECTF()
        self.box_at = ctypes.addressof(self.box)
        self.ox, self.oy = ctypes.c_double(), ctypes.c_double()
        self.out: list[tuple[Any, ...]] = []

    def font(self, obj: int | None, i: int) -> tuple[float, bool, str, bool]:
        font = self.by_obj.get(obj)
        if font is None:
            font = self.by_obj[obj] = _object_font(self.api, self.tp, i, obj, self.by_font)
        return font

    def read(self, text: str) -> list[tuple[Any, ...]]:
        """The words of ``text``, the page's characters one per PDFium index (a character
        outside the BMP as its two surrogate halves, joined in the words returned)."""
        special = _SPECIAL.search(text) is not None
        lib = native.library()
        spans = _word_spans(text) if lib is not None else None
        if _RTL.search(text) is not None:
            self.read_visual(text)
        elif spans is None:
            runs = [(m.start(), m.end(), m.group()) for m in _WORD.finditer(text)]
            words = [self.clean(a, w) if special else w for a, _, w in runs]
            self._read_python(runs, words)
        elif len(spans[0]):
            raw = _WORD.findall(text)
            words = [self.clean(a, w) for a, w in zip(spans[0].tolist(), raw)] if special else raw
            self._read_native(lib, spans[0], spans[1], raw, words, special)
        if SURROGATES.search(text):
            self.out = [(_join_pairs(w[0]), *w[1:]) if SURROGATES.search(w[0]) else w for w in self.out]
        return self.out

    def clean(self, start: int, word: str) -> str:
        return _clean_word(self.api, self.tp, start, word) if _SPECIAL.search(word) else word

    def _read_python(self, runs: list[tuple[int, int, str]], words: list[str]) -> None:
        """Every word through ``general`` (the reference the C path is tested against)."""
        for (a, end, raw), word in zip(runs, words):
            self.general(a, end, raw, word)

    def _read_native(self, lib: Any, first: Any, end: Any, raw: list[str], words: list[str], special: bool) -> None:
        """The same words as ``_read_python``: C reads both ends of every word
        (kohaku_word_ends), numpy makes the common case's boxes with the same float64
        operations, and the words that need more go through ``general`` in their place.
        ``first``/``end``: the runs' starts and ends (int32 arrays), ``raw`` their text."""
        import numpy as np

        api, tp, left, top = self.api, self.tp, self.left, self.top
        n = len(raw)
        last = end - 1
        objs = np.zeros(2 * n, dtype=np.uintp)
        boxes = np.zeros(8 * n, dtype=np.float32)
        origins = np.zeros(n, dtype=np.float64)
        sizes = np.zeros(2 * n, dtype=np.float64)
        matrices = np.zeros(8 * n, dtype=np.float32)
        has_matrix = np.zeros(2 * n, dtype=np.intc)
        font_handles = np.zeros(2 * n, dtype=np.uintp)
        lib.kohaku_word_ends(tp, n, first.ctypes.data, last.ctypes.data, api.addr_obj, api.addr_box,
                             api.addr_origin, api.addr_size, api.addr_matrix, api.addr_font,
                             objs.ctypes.data, boxes.ctypes.data, origins.ctypes.data, sizes.ctypes.data,
                             matrices.ctypes.data, has_matrix.ctypes.data, font_handles.ctypes.data)
        # each text object's figures from its first end met (the one the Python loop reads),
        # objects with bit-identical figures (size, font, matrix: one object per word on many
        # pages) made into one font tuple, then each word's ends through their object's tuple
        handles, first_at, which = np.unique(objs, return_index=True, return_inverse=True)
        figures = np.empty((len(handles), 7), dtype=np.int64)
        figures[:, 0] = sizes[first_at].view(np.int64)
        figures[:, 1] = font_handles[first_at].view(np.int64)
        figures[:, 2] = has_matrix[first_at]
        figures[:, 3:] = matrices.reshape(2 * n, 4)[first_at].view(np.int32)
        rows = figures.view(np.dtype((np.void, figures.shape[1] * 8))).ravel()   # a row as one value
        _, font_first, font_of_obj = np.unique(rows, return_index=True, return_inverse=True)
        by_font = self.by_font
        fonts: list[tuple[float, bool, str, bool]] = []
        for j in first_at[font_first].tolist():
            fonts.append(_font_tuple(api, float(sizes[j]), matrices[4 * j: 4 * j + 4].tolist() if has_matrix[j] else None,
                                     int(font_handles[j]) or None, by_font))
        # fonts alike in size, direction and name are one class: a word whose two ends are in
        # one class keeps its font
        classes: dict[tuple[Any, ...], int] = {}
        cls = np.array([classes.setdefault(f[:3], len(classes)) for f in fonts], dtype=np.int64)
        font_of_end = font_of_obj.reshape(-1)[which.reshape(-1)]
        ua, ub = font_of_end[0::2], font_of_end[1::2]
        size = np.array([f[0] for f in fonts], dtype=np.float64)[ua]
        upright = np.array([f[1] for f in fonts], dtype=bool)[ua]
        same = cls[ua] == cls[ub]
        names = np.array([f[2] for f in fonts], dtype=object)[ua].tolist()
        box = boxes.reshape(n, 8).astype(np.float64)
        right, bot, right_b, bot_b = box[:, 2], box[:, 3], box[:, 6], box[:, 7]
        ok = same & (np.abs(bot - bot_b) < 0.5 * size + 0.5) & (right_b > origins)
        if special:
            ok &= np.fromiter((len(w) for w in words), dtype=np.int64, count=n) == end - first
        ok = upright & ((first == last) | ok)
        bottom = top - np.minimum(bot, bot_b)
        fast = list(zip(words, (origins - left).tolist(), (bottom - size).tolist(),
                        (np.maximum(right, right_b) - left).tolist(), bottom.tolist(), size.tolist(),
                        names, [True] * n))
        if ok.all():
            self.out.extend(fast)
            return
        # the objects' fonts for the words measured one by one
        self.by_obj.update(zip([h or None for h in handles.tolist()],
                               [fonts[k] for k in font_of_obj.reshape(-1).tolist()]))
        done = 0
        for k in np.flatnonzero(~ok).tolist():
            self.out.extend(fast[done:k])
            self.general(int(first[k]), int(end[k]), raw[k], words[k])
            done = k + 1
        self.out.extend(fast[done:])

    def measure(self, i: int) -> tuple[Any, ...]:
        """(x0, top, x1, bottom, size, font, upright) of character i, in PDF space."""
        api, tp, box = self.api, self.tp, self.box
        font = self.font(api.obj(tp, i), i)
        api.box(tp, i, self.box_at)
        x0 = box.left
        if font[1]:  # upright: x0 at the origin, as pdfminer (the loose box of an italic glyph
            # leans left of it, and a round one's starts a little before it)
            api.origin(tp, i, ctypes.addressof(self.ox), ctypes.addressof(self.oy))
            x0 = self.ox.value
        return (x0, box.top, box.right, box.bottom, font[0], font[2], font[1])

    def emit(self, word: str, a: tuple[Any, ...], b: tuple[Any, ...]) -> None:
        size, name, upright = a[4], a[5], a[6]
        left, top = self.left, self.top
        if upright:
            bottom = top - min(a[3], b[3])
            self.out.append((word, a[0] - left, bottom - size, max(a[2], b[2]) - left, bottom, size, name, True))
        else:  # rotated text (margin notes, axis titles): its box as it lies
            self.out.append((word, min(a[0], b[0]) - left, top - max(a[1], b[1]), max(a[2], b[2]) - left,
                             top - min(a[3], b[3]), size, name, False))

    def general(self, a: int, end: int, raw: str, word: str) -> None:
        """One word measured character by character where its ends disagree (rotated text,
        a font or line change inside the run, a ligature)."""
        b = end - 1
        measure, emit = self.measure, self.emit
        first = measure(a)
        if b == a:
            emit(word, first, first)
            return
        if not first[6]:
            # rotated text (a margin note, an axis title): a word per character, as
            # pdfplumber's extraction gives it, so it does not stretch a row of the page
            text_k = word if len(word) == b - a + 1 else raw
            k = 0
            while k <= b - a:
                c = first if k == 0 else measure(a + k)
                step = 2 if _is_pair(text_k, k) else 1   # a surrogate pair is one character
                emit(LIGATURES.get(text_k[k], text_k[k: k + step]), c, c)
                k += step
            return
        last = measure(b)
        if (first[4:] == last[4:] and abs(first[3] - last[3]) < 0.5 * first[4] + 0.5
                and last[2] > first[0] and len(word) == b - a + 1):
            emit(word, first, last)
            return
        # the run changes font, size or line inside (a superscript, a word broken over two
        # lines): measured character by character, split where pdfplumber would
        _split_word(raw, a, measure, emit, word if len(word) == b - a + 1 else None)

    def read_visual(self, text: str) -> None:
        """Every character measured, each line's taken left to right and split where pdfplumber
        splits: for a page with right-to-left text, whose lines PDFium gives in their logical
        order (runs right to left, a pair's halves swapped, the end of one line joined to the
        next without a space), so its whitespace runs are no words on the page."""
        items: list[tuple[str, tuple[Any, ...]]] = []
        k = 0
        while k < len(text):
            ch = text[k]
            step = 2 if _is_pair(text, k) else 1
            if ch not in "\r\n\x00":
                shown = text[k: k + step] if step == 2 else LIGATURES.get(ch, ch)
                if ch in _HYPHEN_MARKS:
                    shown = _clean_word(self.api, self.tp, k, ch)
                c = self.measure(k)
                if c[6] or ch.isspace():
                    items.append((shown, c))
                else:   # rotated text: a word per character, as in ``general``
                    self.emit(shown, c, c)
            k += step
        words = [item for item in _unmirror(_visual_order(items)) if not item[0].isspace()]
        _split_items(words, self.emit)


@lru_cache(maxsize=1)
def _separators() -> Any:
    """A bool per UTF-16 code unit: does it end a word (``_WORD``'s complement: Python's
    whitespace, NUL)?"""
    import numpy as np

    return np.array([c == 0 or chr(c).isspace() for c in range(65536)], dtype=bool)


def _word_spans(text: str) -> tuple[Any, Any] | None:
    """(starts, ends) of ``_WORD``'s matches in ``text`` as int32 arrays, found with numpy;
    None when the text has characters outside the BMP (the regex finds them then)."""
    import numpy as np

    codes = np.frombuffer(text.encode("utf-16-le", "surrogatepass"), dtype=np.uint16)
    if len(codes) != len(text):
        return None
    inside = np.zeros(len(codes) + 2, dtype=np.int8)
    inside[1:-1] = ~_separators()[codes]
    step = np.diff(inside)
    return np.flatnonzero(step == 1).astype(np.int32), np.flatnonzero(step == -1).astype(np.int32)


def _split_word(raw_word: str, start: int, measure: Any, emit: Any, clean: str | None) -> None:
    """Emit the pieces of a whitespace-delimited run whose characters change font, size,
    direction or line (``_split_items``); a surrogate pair is one character."""
    text = clean if clean is not None else raw_word
    items: list[tuple[str, tuple[Any, ...]]] = []
    k = 0
    while k < len(raw_word):
        step = 2 if _is_pair(raw_word, k) else 1
        ch = raw_word[k]
        items.append((text[k: k + step] if clean is not None else LIGATURES.get(ch, raw_word[k: k + step]),
                      measure(start + k)))
        k += step
    _split_items(items, emit)


def _visual_order(items: list[tuple[str, tuple[Any, ...]]]) -> list[tuple[str, tuple[Any, ...]]]:
    """(text, measured character) items as pdfplumber reads a page: lines top down (bottoms
    within _LINE_TOLERANCE), each left to right; at one x a combining mark or zero-width
    character first (drawn after the character before it, where the next one starts)."""
    line, at, prev = {}, 0, None
    for y in sorted({c[3] for _, c in items}, reverse=True):
        if prev is not None and prev - y > _LINE_TOLERANCE:
            at += 1
        line[y], prev = at, y
    return sorted(items, key=lambda item: (line[item[1][3]], item[1][0], not _ZERO_WIDTH.match(item[0])))


def _direction(text: str) -> str:
    """How PDFium's bidi segmentation (CFX_BidiChar) classes a character: 'R' (right-to-left
    letters), 'L' (left-to-right letters), 'W' (digits: left to right, weak) or 'N' (the rest,
    and every character outside the BMP: PDFium's table of classes ends at U+FFFF)."""
    import unicodedata

    kind = unicodedata.bidirectional(text[0]) if len(text) == 1 else ""
    return "R" if kind in ("R", "AL") else "L" if kind == "L" else "W" if kind in ("EN", "AN") else "N"


def _unmirror(items: list[tuple[str, tuple[Any, ...]]]) -> list[tuple[str, tuple[Any, ...]]]:
    """Brackets as drawn. PDFium reads each line in drawing order, cuts it into runs of one
    direction class (_direction), reads the line right to left when it has more right-to-left
    runs than left-to-right ones (as the PDFium pypdfium2 ships does; the fuzz test checks it),
    and gives every character of a right-to-left run (a neutral run takes the direction of the
    run read before it) as its mirror image, "(" for the ")" drawn. The same here on ``items``
    in visual order (_visual_order, spaces included), and the mirrored brackets turned back."""
    out = list(items)
    lines: list[list[int]] = []
    for j, (_, c) in enumerate(items):
        if lines and abs(items[lines[-1][-1]][1][3] - c[3]) <= _LINE_TOLERANCE:
            lines[-1].append(j)
        else:
            lines.append([j])
    for line in lines:
        if not any(items[j][0] in _MIRROR for j in line):
            continue
        runs: list[tuple[str, list[int]]] = []
        for j in line:
            d = _direction(items[j][0])
            if runs and runs[-1][0] == d:
                runs[-1][1].append(j)
            else:
                runs.append((d, [j]))
        right = sum(d == "R" for d, _ in runs)
        current = "R" if right > sum(d == "L" for d, _ in runs) else "L"
        for d, members in reversed(runs) if current == "R" else runs:
            if d == "R" or (d == "N" and current == "R"):
                current = "R"
                for j in members:
                    mirror = _MIRROR.get(items[j][0])
                    if mirror is not None:
                        out[j] = (mirror, items[j][1])
            elif d != "W":
                current = "L"
    return out


def _split_items(items: list[tuple[str, tuple[Any, ...]]], emit: Any) -> None:
    """Emit (text, measured character) items as words: a new word where font, size, direction
    or line changes or the next character starts left of the previous one or more than 0.15 x
    its size right of its end (pdfplumber's rule)."""
    cur: list[tuple[str, tuple[Any, ...]]] = []
    for shown, c in items:
        if cur:
            p = cur[-1][1]
            if (c[4:] != p[4:] or abs(c[3] - p[3]) > _LINE_TOLERANCE or c[0] < p[0] - 0.01
                    or c[0] > p[2] + 0.15 * p[4]):
                emit("".join(ch for ch, _ in cur), cur[0][1], cur[-1][1])
                cur = []
        cur.append((shown, c))
    if cur:
        emit("".join(ch for ch, _ in cur), cur[0][1], cur[-1][1])


_WORD = re.compile(r"[^\s\x00]+")
_ZERO_WIDTH = re.compile("[\u0300-\u036f\u0483-\u0489\u0591-\u05c7\u0610-\u061a\u064b-\u065f\u0670"
                         "\u06d6-\u06ed\u1ab0-\u1aff\u1dc0-\u1dff\u200b-\u200f\u2060\u20d0-\u20ff\ufe20-\ufe2f]")
_MIRROR = dict(zip("()[]{}<>\u00ab\u00bb\u2039\u203a\u2264\u2265\u2045\u2046\u207d\u207e\u208d\u208e\u3008\u3009\u300a\u300b",
                   ")(][}{><\u00bb\u00ab\u203a\u2039\u2265\u2264\u2046\u2045\u207e\u207d\u208e\u208d\u3009\u3008\u300b\u300a"))
# letters of the right-to-left scripts (Hebrew, Arabic, Syriac, Thaana, NKo, Samaritan, Mandaic,
# their presentation forms; outside the BMP as their high surrogates, U+10800-U+10FFF and
# U+1E800-U+1EFFF)
_RTL = re.compile("[\u0590-\u08ff\ufb1d-\ufdff\ufe70-\ufefc]|\ud802[\udc00-\udfff]|\ud803|\ud83a|\ud83b")


def _is_pair(text: str, k: int) -> bool:
    """Do ``text[k]`` and ``text[k + 1]`` form a surrogate pair (one character outside the BMP)?
    PDFium gives a pair in a right-to-left run in reverse (low half first): that is one too."""
    if k + 1 >= len(text):
        return False
    a, b = text[k], text[k + 1]
    return (("\ud800" <= a <= "\udbff" and "\udc00" <= b <= "\udfff")
            or ("\udc00" <= a <= "\udfff" and "\ud800" <= b <= "\udbff"))


def _join_pairs(text: str) -> str:
    """A word's surrogate pairs (either order, see _is_pair) as the characters they encode;
    a lone half becomes U+FFFD (clean.valid_text), so no word holds text UTF-8 cannot encode."""
    out, k = [], 0
    while k < len(text):
        if _is_pair(text, k):
            a, b = text[k], text[k + 1]
            out.append(a + b if a <= "\udbff" else b + a)
            k += 2
        else:
            out.append(text[k])
            k += 1
    return valid_text("".join(out))


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
        # the bare addresses, for the C loops (kohaku/ingest/text/pdfium_scan.c)
        **{"addr_" + k: ctypes.cast(getattr(raw, f), V).value for k, f in (
            ("obj", "FPDFText_GetTextObject"), ("box", "FPDFText_GetLooseCharBox"),
            ("origin", "FPDFText_GetCharOrigin"), ("size", "FPDFText_GetFontSize"),
            ("matrix", "FPDFText_GetMatrix"), ("font", "FPDFTextObj_GetFont"),
            ("page_count", "FPDFPage_CountObjects"),
            ("page_obj", "FPDFPage_GetObject"), ("form_count", "FPDFFormObj_CountObjects"),
            ("form_obj", "FPDFFormObj_GetObject"), ("obj_type", "FPDFPageObj_GetType"),
            ("obj_matrix", "FPDFPageObj_GetMatrix"), ("seg_count", "FPDFPath_CountSegments"),
            ("segment", "FPDFPath_GetPathSegment"), ("seg_point", "FPDFPathSegment_GetPoint"),
            ("seg_type", "FPDFPathSegment_GetType"), ("seg_close", "FPDFPathSegment_GetClose"))},
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
    m = api.FS_MATRIX()
    has = api.matrix(tp, i, ctypes.addressof(m))
    return _font_tuple(api, api.size(tp, i), (m.a, m.b, m.c, m.d) if has else None,
                       api.font(obj) if obj else None, by_font)


def _font_tuple(api: SimpleNamespace, size: float, matrix: tuple[float, float, float, float] | None,
                font: int | None, by_font: dict[int | None, tuple[str, bool]]) -> tuple[float, bool, str, bool]:
    """``_object_font`` from PDFium's figures (the C loop reads them for every word end)."""
    size = float(size)
    upright = True
    if matrix is not None:
        a, b, c, d = matrix
        scale = (c * c + d * d) ** 0.5
        if scale > 0:
            size *= scale
        upright = a * d > 0 and b * c <= 0
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


def _add_edge(out: list[tuple[float, float, float, float, str]], p0: tuple[float, float], p1: tuple[float, float]) -> None:
    (x0, y0), (x1, y1) = p0, p1
    if abs(x0 - x1) < 1e-6 and abs(y0 - y1) >= 1e-6:
        out.append((x0, min(y0, y1), x0, max(y0, y1), "v"))
    elif abs(y0 - y1) < 1e-6 and abs(x0 - x1) >= 1e-6:
        out.append((min(x0, x1), y0, max(x0, x1), y0, "h"))


def _ruled(orientations: list[str]) -> bool:
    """Two horizontal and two vertical edges at least: the fewest a ruled table is made of."""
    horizontal = orientations.count("h")
    return horizontal >= 2 and len(orientations) - horizontal >= 2


def _unique_edges(rows: list[tuple[float, float, float, float, str]]) -> list[int]:
    """Which rows stay when an edge drawn twice counts once: the rows as
    ``{(orientation, round(x0, 2), round(top, 2), round(x1, 2), round(bottom, 2)): row}``
    keeps them (keys in the order first met, each with its last row), found with numpy. A
    coordinate is keyed by its hundredths as an integer: np.rint of x * 100, or Python's
    round where x * 100 lies within 1e-6 of a half (there the two may round apart)."""
    import numpy as np

    n = len(rows)
    if n == 0:
        return []
    cols = list(zip(*rows))
    keys = np.empty((n, 5), dtype=np.int64)
    keys[:, 0] = np.frombuffer("".join(cols[4]).encode("ascii"), dtype=np.uint8)
    for j in range(4):
        x = np.array(cols[j], dtype=np.float64) * 100.0
        k = np.rint(x)
        near = np.flatnonzero(np.abs(np.abs(x - np.floor(x)) - 0.5) < 1e-6)
        for i in near.tolist():
            k[i] = round(round(cols[j][i], 2) * 100.0)
        keys[:, j + 1] = k
    order = np.lexsort(keys.T[::-1])   # stable: within a key, rows in page order
    ranked = keys[order]
    starts = np.flatnonzero(np.r_[True, np.any(ranked[1:] != ranked[:-1], axis=1)])
    ends = np.r_[starts[1:], n] - 1
    first, last = order[starts], order[ends]
    return last[np.argsort(first, kind="stable")].tolist()


def _edge_dict(row: tuple[float, float, float, float, str]) -> dict[str, Any]:
    """An edge as pdfplumber's edge dicts (its table finder reads these keys)."""
    x0, top, x1, bottom, orientation = row
    return {"x0": x0, "x1": x1, "top": top, "bottom": bottom, "width": x1 - x0, "height": bottom - top,
            "orientation": orientation, "object_type": "curve_edge"}
