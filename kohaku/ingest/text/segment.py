"""Document segmentation: parsed blocks -> sections -> paragraphs -> sentences.

Works on both clean blocks (PDF parsed with layout, Markdown) and raw page text such as the
WattBot pre-extracted JSON, where one block is a whole page of wrapped lines. Steps:

1. Blocks become a stream of items: text lines (normalised, with their raw indentation), blank
   lines, block breaks, and the parser's own headings, captions and tables.
2. Running headers/footers (lines repeated on many pages) and page numbers are dropped.
3. Headings are found on lines: numbered ("2.1 Method"), roman ("IV. RESULTS"), appendix
   letters, well-known names ("Abstract", "References"), ALL-CAPS lines and, only in documents
   without numbered structure, short Title-Case lines. Numbered headings must form a plausible
   numbering chain (list items and footnotes that look like headings drop out), and a heading
   never follows a line that ends mid-sentence. Wrapped headings are re-joined.
4. Runs of mostly numeric lines become tables; "Figure n" / "Table n" lines become captions.
5. Paragraph boundaries come from blank lines, block breaks (unless the text clearly
   continues), indentation, a sentence end on a short line followed by a capital, and bullets.
   Lines are re-flowed with end-of-line hyphenation undone; a paragraph interrupted by a table
   or figure continues after it when the next line starts in lower case.
6. Long paragraphs are cut at sentence ends; sentences are split with the abbreviation-aware
   splitter and short fragments merged. Documents with fewer than two headings fall back to one
   section per page.

Everything is deterministic: the same blocks give the same sections.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from kohaku.ingest.text.clean import (
    fix_small_caps,
    document_vocab,
    ends_sentence,
    is_open_ended,
    join_lines,
    leading_indent,
    normalize_line,
    numeric_share,
    is_number_token,
)
from kohaku.ingest.text.headings import (
    KNOWN,
    HeadingMatch,
    best_chain,
    is_caps_line,
    is_caption,
    is_title_case,
    match_heading,
    split_run_in,
)
from kohaku.ingest.text.sentences import split_sentences

_BULLET_START = re.compile(r"^[•●▪◦■□►‣∙]")
_ENUM_START = re.compile(r"^(?:[-–*]\s|\(\d{1,2}\)\s|\d{1,2}\)\s|\([a-z]\)\s|\d{1,2}\.\s+[A-Z])")
_PAGE_NUMBER = re.compile(r"^(?:page\s*)?[\divxlc]{1,5}(?:\s*(?:/|of)\s*\d{1,4})?$", re.I)


@dataclass
class SegmentConfig:
    """Knobs of the hierarchical segmenter (the ``tree`` config group holds them)."""

    min_sentence_chars: int = 15  # shorter sentence fragments are merged into a neighbour
    max_sentence_chars: int = 1000  # longer "sentences" (lists, tables in prose) are cut at ; , or space
    max_paragraph_chars: int = 1800  # longer paragraphs are cut at sentence ends into even parts
    min_paragraph_chars: int = 40  # shorter text paragraphs are merged into the next one
    drop_repeated_lines: bool = True  # drop running headers/footers and page numbers
    detect_tables: bool = True  # runs of numeric lines in raw text become table paragraphs
    # short Title-Case lines as headings: auto (only when a document has < 3 numbered headings)
    # | always | never
    title_case_headings: str = "auto"
    page_fallback: bool = True  # documents with < 2 heading sections get one section per page


@dataclass
class Paragraph:
    kind: str                       # text / table / figure
    page: int
    lines: list[str] = field(default_factory=list)
    text: str = ""
    sentences: list[str] = field(default_factory=list)
    caption: bool = False


@dataclass
class Section:
    title: str
    page: int
    source: str                     # heading / front / page
    level: int = 1
    path: str = ""
    paragraphs: list[Paragraph] = field(default_factory=list)


@dataclass
class _Item:
    kind: str                       # line / blank / break / heading / table / caption / figure
    text: str = ""
    page: int = 1
    indent: int = 0
    level: int | None = None
    width: float = 80.0
    rows: list[str] = field(default_factory=list)
    number: tuple[int, ...] | None = None
    lines: list[str] = field(default_factory=list)
    heading_kind: str = ""


# ----------------------------------------------------------------------------- items


def _block_items(blocks: Sequence[dict[str, Any]]) -> list[_Item]:
    items: list[_Item] = []
    for block in blocks:
        kind = block.get("kind") or "text"
        page = int(block.get("page") or 1)
        text = block.get("text") or ""
        items.append(_Item("break", page=page))
        if kind == "heading":
            title = " ".join(normalize_line(x) for x in text.split("\n") if x.strip())
            if title:
                items.append(_Item("heading", text=title, page=page, level=block.get("level") or 1))
            continue
        if kind == "table":
            rows = [normalize_line(r) for r in text.split("\n")]
            rows = [r for r in rows if r]
            if rows:
                items.append(_Item("table", page=page, rows=rows))
            continue
        if kind == "caption":
            lines = [normalize_line(x) for x in text.split("\n")]
            lines = [x for x in lines if x]
            if lines:
                items.append(_Item("caption", page=page, lines=lines))
            continue
        if kind == "figure":  # a captioned figure (the caption stage): one paragraph of its own
            body = " ".join(normalize_line(x) for x in text.split("\n") if x.strip())
            if body:
                items.append(_Item("figure", page=page, lines=[body]))
            continue
        raw_lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        norm = [normalize_line(x) for x in raw_lines]
        lengths = sorted(len(x) for x in norm if len(x) >= 3)
        width = _percentile(lengths, 0.8) if len(lengths) >= 6 else 0.0
        for raw, line in zip(raw_lines, norm):
            if not line:
                items.append(_Item("blank", page=page))
            else:
                items.append(_Item("line", text=line, page=page, indent=leading_indent(raw), width=width))
    # blocks too short to estimate a line width take the document's
    widths = sorted(len(it.text) for it in items if it.kind == "line" and len(it.text) >= 3)
    doc_width = _percentile(widths, 0.8) if widths else 80.0
    for it in items:
        if it.kind == "line" and it.width <= 0:
            it.width = doc_width
    return items


def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    idx = min(len(values) - 1, max(0, int(math.floor(q * (len(values) - 1) + 0.5))))
    return float(values[idx])


def _drop_furniture(items: list[_Item], n_pages: int) -> list[_Item]:
    """Drop running headers/footers and page numbers."""
    line_idx = [i for i, it in enumerate(items) if it.kind == "line"]
    drop: set[int] = set()
    # page numbers: first or last line of a page
    by_page: dict[int, list[int]] = {}
    for i in line_idx:
        by_page.setdefault(items[i].page, []).append(i)
    for idxs in by_page.values():
        for i in (idxs[0], idxs[-1]):
            if _PAGE_NUMBER.match(items[i].text):
                drop.add(i)
    # repeated lines: same text (digits ignored) among the first or last lines of many pages
    if n_pages >= 4:
        edge: set[int] = set()
        for idxs in by_page.values():
            edge.update(idxs[:3])
            edge.update(idxs[-3:])
        pages_of: dict[str, set[int]] = {}
        for i in sorted(edge):
            text = items[i].text
            if len(text) > 150 or sum(c.isalpha() for c in text) < 3:
                continue
            key = re.sub(r"\d+", "#", text.lower())
            pages_of.setdefault(key, set()).add(items[i].page)
        threshold = max(3, math.ceil(0.1 * n_pages))
        repeated = {k for k, pages in pages_of.items() if len(pages) >= threshold}
        if repeated:
            for i in edge:
                if re.sub(r"\d+", "#", items[i].text.lower()) in repeated:
                    drop.add(i)
    return [it for i, it in enumerate(items) if i not in drop]


# -------------------------------------------------------------------------- headings


def _prev_line(items: list[_Item], i: int) -> _Item | None:
    """The closest preceding content item (skipping blanks and breaks)."""
    j = i - 1
    while j >= 0 and items[j].kind in ("blank", "break"):
        j -= 1
    return items[j] if j >= 0 else None


def _next_line(items: list[_Item], i: int) -> _Item | None:
    j = i + 1
    while j < len(items) and items[j].kind in ("blank", "break"):
        j += 1
    return items[j] if j < len(items) else None


def _prev_index(items: list[_Item], i: int) -> int:
    j = i - 1
    while j >= 0 and items[j].kind in ("blank", "break"):
        j -= 1
    return j


def _context_ok(items: list[_Item], i: int, raw: dict[int, HeadingMatch], strict: bool) -> bool:
    """A heading cannot follow a line that ends mid-sentence (unless that line is a heading
    itself). ``strict``: any line ending in lower case counts as mid-sentence; otherwise only a
    trailing comma, hyphen or joining word does (for unmistakable names such as "Abstract")."""
    j = _prev_index(items, i)
    if j < 0 or items[j].kind != "line" or j in raw:
        return True
    prev = items[j].text
    if strict:
        return not is_open_ended(prev)
    return not (prev.rstrip().endswith((",", ";", "(", "-", "–", "&")) or prev.split()[-1].lower() in _JOINERS)


def _find_headings(items: list[_Item], cfg: SegmentConfig) -> None:
    """Turn heading lines into heading items (in place)."""
    raw: dict[int, HeadingMatch] = {}
    for i, it in enumerate(items):
        if it.kind == "line":
            m = match_heading(it.text)
            if m is not None:
                raw[i] = m
    cands: dict[int, HeadingMatch] = {}
    run_in: dict[int, tuple[str, str]] = {}
    for i, it in enumerate(items):
        if it.kind != "line":
            continue
        ri = split_run_in(it.text)
        if ri and _context_ok(items, i, raw, strict=False):
            run_in[i] = ri
            continue
        m = raw.get(i)
        if m is None or len(it.text) > max(0.95 * it.width, 30):
            continue
        body = m.title.split(" ", 1)[1] if m.number and " " in m.title else m.title
        distinctive = m.kind == "known" or is_caps_line(body) or body.lower().strip(" :") in KNOWN
        if _context_ok(items, i, raw, strict=not distinctive):
            cands[i] = m
    _drop_contents_runs(items, cands)

    accepted: dict[int, HeadingMatch] = {}
    def weight(i: int) -> float:
        m = cands[i]
        title = m.title.split(" ", 1)[1] if " " in m.title else m.title
        w = 1.0
        if title.lower().strip(" :") in _KNOWN_LOWER:
            w += 0.5
        nxt = _next_line(items, i)
        if nxt is not None and nxt.kind == "line" and nxt.text[:1].isupper():
            w += 0.2
        return w

    def chain_of(idx: list[int]) -> list[int]:
        picked = best_chain([cands[i].number or (0,) for i in idx], [weight(i) for i in idx])
        return [idx[c] for c in picked]

    for kind in ("numbered", "roman"):
        idx = sorted(i for i, m in cands.items() if m.kind == kind)
        chain = chain_of(idx) if idx else []
        if kind == "roman" and len(chain) < 2:
            chain = []
        for i in chain:
            accepted[i] = cands[i]
    lettered = sorted(i for i, m in cands.items() if m.kind == "lettered")
    romans = sorted(i for i, m in accepted.items() if m.kind == "roman")
    numbered = sorted(i for i, m in accepted.items() if m.kind == "numbered")
    if lettered:
        if romans:
            # IEEE style: "II. BACKGROUND" then "A. Datasets", restarting under each part
            groups: dict[int, list[int]] = {}
            for i in lettered:
                parent = max((r for r in romans if r < i), default=-1)
                groups.setdefault(parent, []).append(i)
            for group in groups.values():
                for i in chain_of(group):
                    m = cands[i]
                    accepted[i] = HeadingMatch(m.kind, m.number, m.title, m.level + 1)
        else:
            # appendices after the numbered body: "A ADDITIONAL PLOTS", "B.1 Details"; they
            # start a new top level (not children of "References")
            last = numbered[-1] if numbered else -1
            for i in chain_of([i for i in lettered if i > last]):
                m = cands[i]
                accepted[i] = HeadingMatch(m.kind, m.number, m.title, 1)
    n_strong = sum(1 for m in accepted.values() if m.kind in ("numbered", "roman"))
    for i, m in cands.items():
        if m.kind in ("known", "caps"):
            if m.kind == "caps" and not _caps_context_ok(items, i):
                continue
            accepted[i] = m

    use_title_case = cfg.title_case_headings == "always" or (
        cfg.title_case_headings == "auto" and n_strong < 3
    )
    if use_title_case:
        for i, it in enumerate(items):
            if it.kind == "line" and i not in accepted and i not in run_in and _title_case_heading(items, i):
                accepted[i] = HeadingMatch("title", None, it.text, 1)

    # apply: run-in names split into heading + text, accepted lines become headings
    out: list[_Item] = []
    skip: set[int] = set()
    for i, it in enumerate(items):
        if i in skip:
            continue
        if i in run_in:
            name, rest = run_in[i]
            out.append(_Item("heading", text=name, page=it.page, level=1, heading_kind="known"))
            out.append(_Item("line", text=rest, page=it.page, indent=0, width=it.width))
            continue
        m = accepted.get(i)
        if m is None:
            out.append(it)
            continue
        title = m.title
        # wrapped heading: join one or two continuation lines
        j = i + 1
        for _ in range(2):
            if j < len(items) and items[j].kind == "line" and j not in accepted and _continues_heading(title, items, j, it.width):
                title = f"{title} {items[j].text}" if not title.endswith("-") else title + items[j].text
                skip.add(j)
                j += 1
            else:
                break
        out.append(_Item("heading", text=fix_small_caps(title), page=it.page, level=m.level, number=m.number,
                         heading_kind=m.kind))
    items[:] = out


_TOC_LINE = re.compile(r"^(?:\d{1,3}(?:\.\d{1,2})*\.?\s+\S.{0,70}|.{2,80}?\s(?:\.\s?){2,}\s*\d{1,3}|.{2,70}\s\d{1,3})$")


def _drop_contents_runs(items: list[_Item], cands: dict[int, HeadingMatch]) -> None:
    """A table of contents is a run of four or more short numbered lines ("3 Introduction",
    "Results ..... 12") with at most one short other line between them; its lines are not the
    document's headings. A line that repeats an entry of the run (page number and dot leaders
    aside) is the body's first heading: the run ends before it."""
    lines = [i for i, it in enumerate(items) if it.kind == "line"]
    run: list[int] = []
    entries: set[str] = set()
    gap = 0

    def close() -> None:
        if sum(1 for k in run if _TOC_LINE.match(items[k].text)) >= 4:
            for k in range(run[0], run[-1] + 1):
                cands.pop(k, None)
        run.clear()
        entries.clear()

    for i in lines:
        text = items[i].text
        if _TOC_LINE.match(text) and not ends_sentence(text):
            entry = _toc_entry(text)
            if entry in entries:
                close()
            run.append(i)
            entries.add(entry)
            gap = 0
        elif run and gap == 0 and len(text) < 60 and not ends_sentence(text):
            gap = 1
        else:
            close()
            gap = 0
    close()


_TOC_PAGE = re.compile(r"(?:\s?\.){2,}\s*\d{1,3}$|\s\d{1,3}$")


def _toc_entry(text: str) -> str:
    """A contents line without its page number and dot leaders, lower case: "1 Introduction . . 3"
    and "1 Introduction" are the same entry."""
    return _TOC_PAGE.sub("", text).strip().lower()


# section names that win a numbering tie ("2 Related Work" over a list item "2 Data ..."); whole
# names only: "work" or "related" alone are no section names
_KNOWN_LOWER = frozenset(
    "abstract introduction background conclusion conclusions discussion results "
    "methods methodology evaluation references experiments".split()
) | {"related work", "experimental setup", "future work"}


def _caps_context_ok(items: list[_Item], i: int) -> bool:
    nxt = _next_line(items, i)
    if nxt is None:
        return False
    prev = _prev_line(items, i)
    j = _prev_index(items, i)
    for _ in range(3):  # "TABLE IV" / "ESTIMATED COST ..." / "BASED ON ...": an IEEE caption
        if j < 0 or items[j].kind != "line":
            break
        if is_caption(items[j].text):
            return False
        if not _is_upper(items[j].text):
            break
        j = _prev_index(items, j)
    if prev is not None and prev.kind == "line" and is_caps_line(prev.text) and not ends_sentence(prev.text):
        return False  # middle of a block of capitals (a title page), kept as text
    if nxt.kind == "line" and numeric_share(nxt.text) > 0.5:
        return False  # table header
    return True


def _title_case_heading(items: list[_Item], i: int) -> bool:
    it = items[i]
    text = it.text
    if not is_title_case(text, 8) or len(text) < 4 or len(text) > 0.7 * it.width:
        return False
    if text.rstrip().endswith((".", ",", ";", ":", "-")) or is_caption(text):
        return False
    if numeric_share(text) > 0.2 or not re.search(r"[a-z]{3}", text):
        return False
    prev = _prev_line(items, i)
    if prev is not None and prev.kind == "line" and not ends_sentence(prev.text):
        return False
    nxt = _next_line(items, i)
    if nxt is None or nxt.kind != "line":
        return False
    if not nxt.text[:1].isupper() or len(nxt.text) < 0.6 * nxt.width:
        return False
    return numeric_share(nxt.text) < 0.3


def _continues_heading(title: str, items: list[_Item], j: int, width: float) -> bool:
    nxt = items[j].text
    ws = nxt.split()
    if len(ws) > 7 or len(nxt) > 60 or ends_sentence(nxt) or nxt.endswith(","):
        return False
    m = match_heading(nxt)
    if (m is not None and m.kind != "caps") or split_run_in(nxt) or is_caption(nxt) or numeric_share(nxt) > 0.3:
        return False
    if not items[j].text[:1].isalpha():
        return False
    after = _next_line(items, j)
    if after is not None and after.kind == "line" and is_open_ended(nxt) is False and after.text[:1].islower():
        return False
    body = title.split(" ", 1)[1] if " " in title else title
    if is_caps_line(body):
        return is_caps_line(nxt)
    if title.rstrip().endswith((",", "-", "&")) or title.split()[-1].lower() in _JOINERS:
        return True
    if len(title) >= 0.45 * width and is_title_case(nxt, 7) and not is_caps_line(nxt):
        return after is None or after.kind != "line" or after.text[:1].isupper()
    return False


_JOINERS = frozenset("a an the and or of to in on for with by from at via vs".split())


# ---------------------------------------------------------------- tables & captions


def _is_table_row(text: str) -> bool:
    tokens = text.split()
    if not tokens or len(text) > 160:
        return False
    share = numeric_share(text)
    if share >= 0.4:
        return True
    return is_number_token(tokens[-1]) and len(tokens) <= 10 and share >= 0.15 and not text.endswith(".")


def _is_upper(line: str) -> bool:
    letters = [c for c in line if c.isalpha()]
    return len(letters) >= 3 and sum(c.isupper() for c in letters) >= 0.85 * len(letters)


_FOOTNOTE = re.compile(r"^\d{1,2}(?:[A-Za-z]|\s[A-Z\[(“\"])")


def _footnote_end(items: list[_Item], i: int, out: list[_Item]) -> int:
    """Footnotes dropped into the middle of a sentence: the line before them ends mid-sentence,
    each note ends a sentence within four lines, and the text after the last note goes on in
    lower case. Returns the index after the notes, or ``i`` when these are not notes."""
    prev = next((x for x in reversed(out) if x.kind not in ("blank", "break")), None)
    if prev is None or prev.kind != "line" or ends_sentence(prev.text):
        return i
    j = i
    n_notes = 0
    while n_notes < 6:
        # one note: lines up to a sentence end
        n = 0
        end = -1
        while j < len(items) and n < 4:
            if items[j].kind == "line":
                n += 1
                if ends_sentence(items[j].text):
                    end = j + 1
                    break
            elif items[j].kind not in ("blank", "break"):
                return i
            j += 1
        if end < 0:
            return i
        n_notes += 1
        k = end
        while k < len(items) and items[k].kind in ("blank", "break"):
            k += 1
        if k >= len(items) or items[k].kind != "line":
            return i
        if items[k].text[:1].islower():
            return end
        if not _FOOTNOTE.match(items[k].text):
            return i
        j = k
    return i


def _find_tables_and_captions(items: list[_Item], cfg: SegmentConfig) -> None:
    out: list[_Item] = []
    i = 0
    n = len(items)
    while i < n:
        it = items[i]
        if it.kind == "line" and is_caption(it.text):
            lines = [it.text]
            j = i + 1
            caps_title = re.fullmatch(r"(?i)table\s+[IVX\d]+\.?", it.text.strip()) is not None
            while (
                not ends_sentence(lines[-1]) or (caps_title and j < n and _is_upper(items[j].text))
            ) and j < n and items[j].kind == "line" and len(lines) < 6:
                nxt = items[j].text
                if match_heading(nxt) and not (caps_title and _is_upper(nxt)):
                    break
                if _is_table_row(nxt) and not is_open_ended(lines[-1]):
                    break
                lines.append(nxt)
                j += 1
                if caps_title and not _is_upper(nxt):
                    break
            out.append(_Item("caption", page=it.page, lines=lines))
            i = j
            continue
        if it.kind == "line" and _FOOTNOTE.match(it.text):
            end = _footnote_end(items, i, out)
            if end > i:
                out.append(_Item("caption", page=it.page, lines=[items[k].text for k in range(i, end) if items[k].kind == "line"]))
                i = end
                continue
        if cfg.detect_tables and it.kind == "line" and _is_table_row(it.text):
            # extend over table rows, allowing single non-numeric rows (group headers)
            j = i
            rows: list[int] = []
            while j < n and items[j].kind in ("line", "blank"):
                if items[j].kind == "blank":
                    j += 1
                    continue
                if _is_table_row(items[j].text):
                    rows.append(j)
                    j += 1
                    continue
                k = j + 1
                while k < n and items[k].kind == "blank":
                    k += 1
                if (
                    k < n
                    and items[k].kind == "line"
                    and _is_table_row(items[k].text)
                    and len(items[j].text) < 70
                    and not ends_sentence(items[j].text)
                ):
                    rows.append(j)
                    j += 1
                    continue
                break
            n_numeric = sum(_is_table_row(items[r].text) for r in rows)
            if n_numeric >= 3:
                # a short header line right before the run
                rows_text: list[str] = []
                if (
                    out
                    and out[-1].kind == "line"
                    and len(out[-1].text) < 80
                    and not ends_sentence(out[-1].text)
                    and not is_open_ended(out[-1].text)
                ):
                    rows_text.append(out.pop().text)
                rows_text += [items[r].text for r in rows]
                out.append(_Item("table", page=it.page, rows=rows_text))
                i = j
                continue
        out.append(it)
        i += 1
    items[:] = out


# ------------------------------------------------------------------------ paragraphs


def _starts_paragraph(prev: _Item, cur: _Item) -> bool:
    text = cur.text
    if _BULLET_START.match(text):
        return True
    if _ENUM_START.match(text) and (ends_sentence(prev.text) or prev.text.rstrip().endswith(";")):
        return True
    first = text[:1]
    capital = first.isupper() or first.isdigit() or first in "\"“‘[("
    if cur.indent >= prev.indent + 2 and capital and ends_sentence(prev.text):
        return True
    if ends_sentence(prev.text) and capital and len(prev.text) < 0.75 * prev.width:
        return True
    return False


def _same_title(heading: str, title: str) -> bool:
    a = set(re.findall(r"[a-z0-9]+", heading.lower()))
    b = set(re.findall(r"[a-z0-9]+", title.lower()))
    return bool(a and b) and len(a & b) >= 0.8 * max(len(a), len(b))


def _build(items: list[_Item], title: str) -> list[Section]:
    sections: list[Section] = []
    current = Section(title=title, page=1, source="front")
    sections.append(current)
    para: Paragraph | None = None          # the paragraph being filled (already in current)
    last_line: _Item | None = None
    soft_break = False
    open_para: Paragraph | None = None     # open-ended paragraph interrupted by a table/figure

    def start(it: _Item) -> Paragraph:
        p = Paragraph("text", it.page, lines=[it.text])
        current.paragraphs.append(p)
        return p

    def close(keep_open: bool) -> None:
        nonlocal para, open_para
        if para is not None:
            open_para = para if keep_open and is_open_ended(para.lines[-1]) else None
        elif not keep_open:
            open_para = None
        para = None

    for it in items:
        if it.kind == "heading" and current.source == "front" and not current.paragraphs and _same_title(it.text, title):
            continue  # the document title set in a heading font: stays the front matter
        if it.kind == "heading":
            close(False)
            open_para = None
            current = Section(title=it.text, page=it.page, source="heading", level=max(1, int(it.level or 1)))
            sections.append(current)
            last_line = None
            soft_break = False
            continue
        if it.kind in ("table", "caption", "figure"):
            close(True)
            if it.kind == "table":
                current.paragraphs.append(Paragraph("table", it.page, lines=list(it.rows)))
            elif it.kind == "figure":
                current.paragraphs.append(Paragraph("figure", it.page, lines=list(it.lines)))
            else:
                current.paragraphs.append(Paragraph("text", it.page, lines=list(it.lines), caption=True))
            last_line = None
            soft_break = False
            continue
        if it.kind == "blank":
            close(True)
            last_line = None
            continue
        if it.kind == "break":
            soft_break = True
            continue
        # a text line
        starts_lower = it.text[:1].islower()
        if para is None:
            if open_para is not None and starts_lower:
                para = open_para            # the sentence goes on after a table or figure
                para.lines.append(it.text)
                open_para = None
            else:
                para = start(it)
        elif soft_break:
            continues = (
                last_line is not None
                and not ends_sentence(last_line.text)
                and (starts_lower or is_open_ended(last_line.text))
                and not _BULLET_START.match(it.text)
            )
            if continues:
                para.lines.append(it.text)
            else:
                close(True)
                para = start(it)
        elif last_line is not None and _starts_paragraph(last_line, it):
            close(False)
            para = start(it)
        else:
            para.lines.append(it.text)
        last_line = it
        soft_break = False
    return sections


# ---------------------------------------------------------------------- finishing


def _finish_paragraphs(sections: list[Section], vocab: set[str], cfg: SegmentConfig) -> None:
    for sec in sections:
        done: list[Paragraph] = []
        for p in sec.paragraphs:
            if p.kind == "table":
                rows = [r for r in p.lines if r.strip()]
                if not rows:
                    continue
                p.sentences = _merge_short_rows(rows, cfg.min_sentence_chars)
                p.text = "\n".join(p.sentences)
                done.append(p)
                continue
            if p.kind == "figure":  # one paragraph whatever its length, so the figure is one node
                p.text = " ".join(p.lines)
                p.sentences = split_sentences(p.text, cfg.min_sentence_chars, cfg.max_sentence_chars)
                if p.sentences:
                    done.append(p)
                continue
            text = join_lines(p.lines, vocab)
            if sum(c.isalpha() for c in text) < 2:
                continue
            sentences = split_sentences(text, cfg.min_sentence_chars, cfg.max_sentence_chars)
            if not sentences:
                continue
            for chunk in _cut_paragraph(sentences, cfg.max_paragraph_chars):
                done.append(Paragraph("text", p.page, text=" ".join(chunk), sentences=chunk, caption=p.caption))
        sec.paragraphs = _attach_table_captions(_merge_tiny(done, cfg.min_paragraph_chars, cfg.min_sentence_chars))


def _attach_table_captions(paragraphs: list[Paragraph]) -> list[Paragraph]:
    """A "Table n:" caption right before or after a table becomes the table's first sentence,
    so a retrieved table says what it is."""
    out: list[Paragraph] = []
    i = 0
    while i < len(paragraphs):
        p = paragraphs[i]
        nxt = paragraphs[i + 1] if i + 1 < len(paragraphs) else None
        if p.caption and _is_table_caption(p) and nxt is not None and nxt.kind == "table":
            nxt.sentences = [p.text] + nxt.sentences
            nxt.text = "\n".join(nxt.sentences)
            i += 1
            continue
        if p.kind == "table" and nxt is not None and nxt.caption and _is_table_caption(nxt) and not (
            i + 2 < len(paragraphs) and paragraphs[i + 2].kind == "table"
        ):
            p.sentences = [nxt.text] + p.sentences
            p.text = "\n".join(p.sentences)
            out.append(p)
            i += 2
            continue
        out.append(p)
        i += 1
    return out


def _is_table_caption(p: Paragraph) -> bool:
    return bool(re.match(r"(?i)(table|tab\.)\s*[\dIVX]", p.text))


def _merge_short_rows(rows: list[str], min_chars: int) -> list[str]:
    """Table rows are sentences; only stub rows (a lone number or label) join their neighbour."""
    min_chars = min(min_chars, 8)
    out: list[str] = []
    for row in rows:
        if out and (len(row) < min_chars or len(out[-1]) < min_chars):
            out[-1] = f"{out[-1]}; {row}"
        else:
            out.append(row)
    return out


def _cut_paragraph(sentences: list[str], max_chars: int) -> list[list[str]]:
    total = sum(len(s) + 1 for s in sentences)
    if max_chars <= 0 or total <= max_chars or len(sentences) == 1:
        return [sentences]
    n_parts = math.ceil(total / max_chars)
    target = total / n_parts
    parts: list[list[str]] = [[]]
    size = 0
    for s in sentences:
        if parts[-1] and size + len(s) / 2 > target and len(parts) < n_parts:
            parts.append([])
            size = 0
        parts[-1].append(s)
        size += len(s) + 1
    return parts


def _merge_tiny(paragraphs: list[Paragraph], min_chars: int, min_sentence: int) -> list[Paragraph]:
    """Merge text paragraphs shorter than ``min_chars`` into the following text paragraph (or the
    previous one at the end of a section); tables and captions stay as they are."""
    out: list[Paragraph] = []
    carry: Paragraph | None = None
    for p in paragraphs:
        if p.kind == "text" and not p.caption:
            if carry is not None:
                p = Paragraph("text", carry.page, text=f"{carry.text} {p.text}",
                              sentences=_join_first(carry.sentences, p.sentences, min_sentence))
                carry = None
            if len(p.text) < min_chars:
                carry = p
                continue
        elif carry is not None:
            out.append(carry)
            carry = None
        out.append(p)
    if carry is not None:
        prev = next((q for q in reversed(out) if q.kind == "text" and not q.caption), None)
        if prev is not None and prev is out[-1]:
            prev.text = f"{prev.text} {carry.text}"
            prev.sentences = prev.sentences[:-1] + [f"{prev.sentences[-1]} {carry.text}"] if prev.sentences else carry.sentences
        else:
            out.append(carry)
    return out


def _join_first(first: list[str], rest: list[str], min_sentence: int) -> list[str]:
    if first and rest and len(" ".join(first)) < 2 * min_sentence:
        return [f"{' '.join(first)} {rest[0]}"] + rest[1:]
    return first + rest


def _fold_empty_sections(sections: list[Section]) -> list[Section]:
    """Compute heading paths, drop sections without paragraphs (their titles stay in the
    path of their subsections)."""
    stack: list[tuple[int, str]] = []
    for sec in sections:
        if sec.source != "heading":
            sec.path = sec.title
            stack = []
            continue
        while stack and stack[-1][0] >= sec.level:
            stack.pop()
        stack.append((sec.level, sec.title))
        sec.path = " > ".join(t for _, t in stack)
    return [s for s in sections if s.paragraphs]


def _page_sections(sections: list[Section]) -> list[Section]:
    pages: dict[int, Section] = {}
    for sec in sections:
        for p in sec.paragraphs:
            page = pages.get(p.page)
            if page is None:
                page = pages[p.page] = Section(title=f"Page {p.page}", page=p.page, source="page")
                page.path = page.title
            page.paragraphs.append(p)
    return [pages[k] for k in sorted(pages)]


def segment_document(
    blocks: Sequence[dict[str, Any]],
    title: str,
    cfg: SegmentConfig | None = None,
    n_pages: int | None = None,
) -> list[Section]:
    """Blocks of one document (dicts with page, kind, text, level; in reading order) ->
    sections with finished paragraphs and sentences."""
    cfg = cfg or SegmentConfig()
    items = _block_items(blocks)
    pages = n_pages or len({it.page for it in items}) or 1
    if cfg.drop_repeated_lines:
        items = _drop_furniture(items, pages)
    _find_headings(items, cfg)
    _find_tables_and_captions(items, cfg)
    sections = _build(items, title)
    vocab = document_vocab(b.get("text") or "" for b in blocks if (b.get("kind") or "text") == "text")
    _finish_paragraphs(sections, vocab, cfg)
    sections = _fold_empty_sections(sections)
    n_heading = sum(1 for s in sections if s.source == "heading")
    if cfg.page_fallback and n_heading < 2:
        sections = _page_sections(sections)
    return sections


def heading_sections(sections: Iterable[Section]) -> int:
    return sum(1 for s in sections if s.source == "heading")
