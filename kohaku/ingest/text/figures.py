"""Figures cut from PDF pages: embedded images and vector charts, rendered to PNG.

Per page (:func:`find_page_figures`, called by the PDF reader while the page is open):

- embedded images (pdfplumber's ``page.images``), clipped to the page; images that touch or
  overlap are one figure (tiled pictures); tiny ones (masks, bullets, icons: a side under
  ``min_size`` points or less than ``min_area_share`` of the page) are dropped, and so are
  images covering ``full_page_share`` of the page (scans) unless ``full_page`` is set;
- vector charts: the page's curves, rects and lines outside ruled tables and image figures,
  clustered by proximity; a cluster of at least ``min_vector_objects`` objects next to a
  "Figure n" caption line (below or above it, within ``caption_gap`` points) is a figure, grown
  by the words inside or right beside it (tick labels, axis titles);
- each figure gets the caption line ("Figure 3: ...", up to four lines) nearest to it.

Per document (:func:`drop_repeated`): an image at the same place on ``repeat_pages`` pages or
more is a logo or letterhead, not a figure. :func:`render_figure` renders a figure's region at
``dpi`` through pdfplumber's page rendering (pypdfium2) and returns the PNG bytes.
"""

from __future__ import annotations

import hashlib
import io
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kohaku.ingest.text.clean import normalize_chars, normalize_line

_FIGURE_CAPTION = re.compile(r"(?i)^\s*(fig\.?|figure)\s*\d+[a-z]?\s*[:.\-–—]?")
_TABLE_CAPTION = re.compile(r"(?i)^\s*table\s*\d+[a-z]?\s*[:.\-–—]")
_FIG = re.compile(r"(?i)fig")   # what every figure caption holds (chart_tables' quick test)


@dataclass
class FigureOptions:
    """How figures are found and rendered (the ``parse.figures`` config keys)."""

    enabled: bool = True            # find figures and write them to the figures table
    dpi: int = 150                  # rendering resolution
    min_size: float = 40.0          # points; an image or chart with a shorter side is dropped
    min_area_share: float = 0.01    # of the page area; smaller regions are dropped
    full_page: bool = False         # keep images covering most of a page (scans)
    full_page_share: float = 0.8    # area share from which an image is a full-page scan
    repeat_pages: int = 3           # an image at one place on this many pages is a logo
    vector: bool = True             # vector charts (curves/rects next to a "Figure n" caption)
    min_vector_objects: int = 6     # drawing objects a vector chart has at least
    caption_gap: float = 40.0       # points between a figure and its caption line
    max_pixels: int = 6_000_000     # a larger rendering is scaled down to this many pixels

    def validate(self) -> None:
        if not 36 <= int(self.dpi) <= 600:
            raise ValueError(f"figures.dpi={self.dpi}: use 36..600")
        if self.min_size < 0 or not 0 <= self.min_area_share < 1:
            raise ValueError("figures.min_size must be >= 0 and figures.min_area_share in [0, 1)")
        if not 0 < self.full_page_share <= 1:
            raise ValueError(f"figures.full_page_share={self.full_page_share}: use a share in (0, 1]")
        if self.repeat_pages < 2:
            raise ValueError(f"figures.repeat_pages={self.repeat_pages}: use 2 or more")


@dataclass
class FigureBox:
    """A figure region on a page (pdfplumber coordinates: points, top-left origin)."""

    page: int
    x0: float
    top: float
    x1: float
    bottom: float
    source: str                     # image | vector
    caption: str = ""
    column: int = 0                 # set by the PDF reader (0 full width, 1 left, 2 right)
    anchor: int = -1                # index of the block it follows in reading order (-1: none)
    # indices of the reader's blocks a captioned figure stands for: its caption paragraph and
    # the paragraphs made only of text inside its box (tick labels, legends)
    replaces: list[int] = field(default_factory=list)
    png: bytes | None = None        # the rendering (None when it failed: see error)
    error: str = ""

    @property
    def bbox(self) -> tuple[float, float, float, float]:
        return (self.x0, self.top, self.x1, self.bottom)

    @property
    def width(self) -> float:
        return self.x1 - self.x0

    @property
    def height(self) -> float:
        return self.bottom - self.top

    def signature(self) -> tuple[int, int, int, int]:
        """Position and size rounded to 4 points: equal on every page for a repeated logo."""
        return (round(self.x0 / 4), round(self.top / 4), round(self.width / 4), round(self.height / 4))


def is_figure_caption(text: str) -> bool:
    return bool(_FIGURE_CAPTION.match(text or ""))


def _overlaps(a: tuple[float, float, float, float], b: tuple[float, float, float, float],
              gap: float = 0.0) -> bool:
    return a[0] - gap <= b[2] and b[0] - gap <= a[2] and a[1] - gap <= b[3] and b[1] - gap <= a[3]


def _union(a: tuple[float, float, float, float], b: tuple[float, float, float, float]):
    return (min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3]))


def _merge_boxes(boxes: list[tuple[float, float, float, float]], gap: float) -> list[list[int]]:
    """Groups (indices) of boxes connected by overlap within ``gap`` points (union-find)."""
    parent = list(range(len(boxes)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    order = sorted(range(len(boxes)), key=lambda i: boxes[i][1])
    for n, i in enumerate(order):
        for j in order[n + 1:]:
            if boxes[j][1] - gap > boxes[i][3]:
                break
            if _overlaps(boxes[i], boxes[j], gap):
                parent[find(i)] = find(j)
    groups: dict[int, list[int]] = {}
    for i in range(len(boxes)):
        groups.setdefault(find(i), []).append(i)
    return sorted(groups.values(), key=lambda g: min(boxes[i][1] for i in g))


def _clip(obj: dict[str, Any], pw: float, ph: float) -> tuple[float, float, float, float] | None:
    x0, top = max(0.0, float(obj["x0"])), max(0.0, float(obj["top"]))
    x1, bottom = min(pw, float(obj["x1"])), min(ph, float(obj["bottom"]))
    if x1 < x0 or bottom < top:      # lines are boxes of zero width or height
        return None
    return (x0, top, x1, bottom)


def _lines(words: list[dict[str, Any]]) -> list[tuple[tuple[float, float, float, float], str]]:
    """(bbox, text) of the page's text lines: words on one row, split where a wide gap separates
    two columns."""
    rows: list[list[dict[str, Any]]] = []
    for w in sorted(words, key=lambda w: (round(w["top"], 1), w["x0"])):
        if rows and abs(w["top"] - rows[-1][0]["top"]) <= 2.5:
            rows[-1].append(w)
        else:
            rows.append([w])
    lines: list[tuple[tuple[float, float, float, float], str]] = []
    for r in rows:
        r.sort(key=lambda w: w["x0"])
        part = [r[0]]
        for w in r[1:]:
            if w["x0"] - part[-1]["x1"] > 12:
                lines.append(_line(part))
                part = []
            part.append(w)
        lines.append(_line(part))
    return lines


def _captions(words: list[dict[str, Any]]) -> list[tuple[tuple[float, float, float, float], str]]:
    """(bbox, text) of every "Figure n" caption: its first row and up to three rows below it
    that follow at line distance and start inside its horizontal extent."""
    if not any(w["text"][:3].lower() == "fig" for w in words):
        return []  # a caption line starts with a word "Fig..." (no need to build the lines)
    lines = _lines(words)
    out = []
    used: set[int] = set()
    for i, (box, text) in enumerate(lines):
        if i in used or not is_figure_caption(text):
            continue
        parts, cur = [text], box
        height = box[3] - box[1]
        for j in range(i + 1, len(lines)):
            if len(parts) >= 4:
                break
            nbox, ntext = lines[j]
            if nbox[1] - cur[3] > 0.9 * height + 2 or is_figure_caption(ntext):
                if nbox[1] > cur[3] + 0.9 * height + 2:
                    break
                continue
            if not (cur[0] - 4 <= nbox[0] <= cur[2]):
                continue
            parts.append(ntext)
            used.add(j)
            cur = _union(cur, nbox)
        out.append((cur, normalize_line(" ".join(parts))))
    return out


def chart_tables(tables: list[tuple[float, float, float, float]], words: list[dict[str, Any]],
                 opts: FigureOptions) -> list[int]:
    """Indices of the ruled "tables" (pdfplumber's ``find_tables``) that are charts: a gridded
    plot's axes and grid lines look like a ruled table to it. A table is a chart when the nearest
    caption line within ``caption_gap`` points above or below it is a "Figure n" line, not a
    "Table n" line."""
    # no "fig" anywhere in the page's text (as a caption line's is made: ligatures expanded,
    # invisible characters dropped; matched as the caption pattern matches, ignoring case):
    # no line can be a "Figure n" caption, so no table is a chart (and no lines need building)
    if not tables or not _FIG.search(normalize_chars(" ".join(w["text"] for w in words))):
        return []
    lines = _lines(words)
    out = []
    for k, box in enumerate(tables):
        best: tuple[float, bool] | None = None
        for cbox, text in lines:
            figure, table = is_figure_caption(text), bool(_TABLE_CAPTION.match(text))
            if not (figure or table) or not (cbox[0] < box[2] and box[0] < cbox[2]):
                continue
            below, above = cbox[1] - box[3], box[1] - cbox[3]
            d = below if -4 <= below <= opts.caption_gap else above if -4 <= above <= opts.caption_gap else None
            if d is not None and (best is None or d < best[0]):
                best = (d, figure)
        if best is not None and best[1]:
            out.append(k)
    return out


def _line(words: list[dict[str, Any]]) -> tuple[tuple[float, float, float, float], str]:
    box = (min(w["x0"] for w in words), min(w["top"] for w in words),
           max(w["x1"] for w in words), max(w["bottom"] for w in words))
    return box, normalize_line(" ".join(w["text"] for w in words))


def _nearest_caption(box: tuple[float, float, float, float], captions, taken: set[int],
                     gap: float) -> int | None:
    best, best_d = None, None
    for i, (cbox, _) in enumerate(captions):
        if i in taken or not (cbox[0] < box[2] and box[0] < cbox[2]):
            continue
        below = cbox[1] - box[3]
        above = box[1] - cbox[3]
        d = below if -4 <= below <= gap else (above + 0.5 if -4 <= above <= gap else None)
        if d is not None and (best_d is None or d < best_d):
            best, best_d = i, d
    return best


def find_page_figures(page: Any, words: list[dict[str, Any]],
                      tables: list[tuple[float, float, float, float]],
                      opts: FigureOptions, stats: Counter | None = None) -> list[FigureBox]:
    """The figures of one open pdfplumber page (see the module docstring); ``stats`` counts
    what was dropped (``tiny``, ``full_page``)."""
    pw, ph = float(page.width), float(page.height)
    area = pw * ph
    captions = _captions(words)
    regions: list[tuple[tuple[float, float, float, float], str]] = []

    images = [b for b in (_clip(im, pw, ph) for im in page.images) if b is not None]
    for group in _merge_boxes(images, 2.0):
        box = images[group[0]]
        for i in group[1:]:
            box = _union(box, images[i])
        regions.append((box, "image"))

    if opts.vector and captions:
        # drawings over an image belong to the image figure; a page background or scan (dropped
        # below) covers every drawing and must not hide the charts drawn over it
        taken = [b for b, _ in regions
                 if not ((b[2] - b[0]) * (b[3] - b[1]) >= opts.full_page_share * area and not opts.full_page)]
        objs = []
        for obj in list(page.curves) + list(page.rects) + list(page.lines):
            b = _clip(obj, pw, ph)
            if b is None or (b[2] - b[0]) * (b[3] - b[1]) > 0.5 * area:
                continue  # off the page, or a page background
            if any(_overlaps(b, t, -1.0) for t in tables) or any(_overlaps(b, t, -1.0) for t in taken):
                continue
            objs.append(b)
        for group in _merge_boxes(objs, 6.0):
            if len(group) < opts.min_vector_objects:
                continue
            box = objs[group[0]]
            for i in group[1:]:
                box = _union(box, objs[i])
            box = _grow_by_words(box, words, captions)
            if _nearest_caption(box, captions, set(), opts.caption_gap) is None:
                continue
            regions.append((box, "vector"))

    figures: list[FigureBox] = []
    taken_captions: set[int] = set()
    for box, source in sorted(regions, key=lambda r: (r[0][1], r[0][0])):
        w, h = box[2] - box[0], box[3] - box[1]
        if min(w, h) < opts.min_size or w * h < opts.min_area_share * area:
            if stats is not None:
                stats[f"tiny {source}"] += 1
            continue
        if source == "image" and w * h >= opts.full_page_share * area and not opts.full_page:
            if stats is not None:
                stats["full_page"] += 1
            continue
        k = _nearest_caption(box, captions, taken_captions, opts.caption_gap)
        caption = ""
        if k is not None:
            taken_captions.add(k)
            caption = captions[k][1]
        figures.append(FigureBox(int(page.page_number), *box, source=source, caption=caption))
    return figures


def _grow_by_words(box, words, captions, pad_x: float = 36.0, pad_y: float = 16.0):
    """The chart's box grown by the words whose centre lies inside it or within ``pad_x`` /
    ``pad_y`` points of it (tick labels, axis titles, units, legends), caption lines left out.
    Sideways it grows only within ``pad_x`` of the drawing itself (iterating sideways would walk
    along a text line into the next column); later passes grow downwards only (an axis title below
    the tick labels), never upwards (the text above a chart stays out)."""
    left, right = box[0] - pad_x, box[2] + pad_x
    grown = box
    for n in range(3):
        near = (left, grown[1] - (pad_y if n == 0 else 0.0), right, grown[3] + pad_y)
        before = grown
        for w in words:
            wb = (w["x0"], w["top"], w["x1"], w["bottom"])
            cx, cy = (wb[0] + wb[2]) / 2, (wb[1] + wb[3]) / 2
            if not (near[0] <= cx <= near[2] and near[1] <= cy <= near[3]):
                continue
            if any(_overlaps(wb, c, -0.5) for c, _ in captions):
                continue
            grown = _union(grown, wb)
        if grown == before:
            break
    return grown


def drop_repeated(figures: list[FigureBox], repeat_pages: int) -> tuple[list[FigureBox], int]:
    """Figures less the images found at the same place on ``repeat_pages`` pages or more
    (logos, letterheads); returns (kept, number dropped)."""
    pages: dict[tuple[int, int, int, int], set[int]] = {}
    for f in figures:
        if f.source == "image":
            pages.setdefault(f.signature(), set()).add(f.page)
    repeated = {sig for sig, p in pages.items() if len(p) >= repeat_pages}
    kept = [f for f in figures if not (f.source == "image" and f.signature() in repeated)]
    return kept, len(figures) - len(kept)


class RenderError(RuntimeError):
    """A figure's region could not be rendered."""


def render_figure(page: Any, fig: FigureBox, opts: FigureOptions) -> bytes:
    """PNG bytes of ``fig``'s region of the open pdfplumber ``page`` at ``opts.dpi`` (scaled
    down to ``opts.max_pixels``)."""
    dpi = int(opts.dpi)
    pixels = fig.width * fig.height * (dpi / 72) ** 2
    if pixels > opts.max_pixels:
        dpi = max(36, int(dpi * (opts.max_pixels / pixels) ** 0.5))
    try:
        data = png_bytes(page.crop(fig.bbox, strict=False).to_image(resolution=dpi, antialias=True).original)
    except Exception as exc:  # pypdfium2 and PIL raise many types
        raise RenderError(f"{type(exc).__name__}: {exc}") from exc
    if not data:
        raise RenderError("the rendering is empty")
    return data


def png_bytes(image: Any) -> bytes:
    """A PIL image as RGB PNG bytes (how every figure image is stored)."""
    buf = io.BytesIO()
    image.convert("RGB").save(buf, format="PNG")
    return buf.getvalue()


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) from a PNG's header."""
    if data[:8] != b"\x89PNG\r\n\x1a\n" or len(data) < 24:
        return (0, 0)
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
