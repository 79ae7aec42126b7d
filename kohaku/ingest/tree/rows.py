"""What a table row means: the title and column header it stands under.

A row of a financial statement reads ``Purchases of property, plant and equipment | (1,577) |
(1,373) | (1,420)``: no years, no statement. The years are a header row above it ("Year Ended
December 31, 2018 2017 2016") and the statement is the section's heading ("Consolidated
Statement of Cash Flows"). A row is found, by a dense or a BM25 search, for what it means only
when it is matched with them, so the texts matched for a row (never the text shown in a
context) carry them in front: ``Consolidated Statement of Cash Flows | Year Ended December 31,
2018 2017 2016 | Purchases of property, plant and equipment | (1,577) | ...``.

A row here is a leaf of the tree that is a table row (``block_kind`` table) or reads like one (a
short line ending in two figures or more, or mostly figures: the rows a layout left as text
between shaded ones). Its header is the nearest line above it in its document, within
:data:`HEADER_REACH` leaves and one page, that names two years or more (a column header) and
holds no other figures; its title the section's heading (the section node's text), else the
last part of its section path, after the title the header stands under where that differs (a
statement that runs on under a sub-heading: "Consolidated Balance Sheets | As of December 31,
2017 2016 | Liabilities and Stockholders' Equity | Current content liabilities ..."). Prose is
left as it is.
"""

from __future__ import annotations

import re
from typing import Sequence

import polars as pl

HEADER_REACH = 80     # leaves above a row in which its column header is looked for
TITLE_CHARS = 120     # a title or header longer than this is cut (at a word)
_YEAR = re.compile(r"(?<![\d,.$])(?:19|20)\d\d(?![\d,.%])")
_NUMBER = re.compile(r"(?<![\w.])[($-]*\d[\d,]*(?:\.\d+)?%?\)?(?![\w])")
_WORD = re.compile(r"[A-Za-z]{2,}")


def _cut(text: str, limit: int = TITLE_CHARS) -> str:
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0]


def is_header(text: str) -> bool:
    """A column header: two years or more and no other figure ("Year Ended December 31, 2018
    2017 2016", "2023 | 2022")."""
    years = _YEAR.findall(text)
    if len(years) < 2 or len(text) > 200:
        return False
    others = [m for m in _NUMBER.findall(text) if not _YEAR.fullmatch(m.strip("($-)"))]
    return len(others) <= 1   # a "December 31," day is one


def is_row(text: str, block_kind: str | None) -> bool:
    """A table row: from a ruled table, or a short line that ends in two figures or more (a
    label and its columns) or is mostly figures."""
    if block_kind == "table":
        return True
    if len(text) > 240:
        return False
    figures = len(_NUMBER.findall(text))
    if figures < 2:
        return False
    tokens = [t for t in text.replace("|", " ").replace("$", " ").split() if t not in ("-", "—", "–")]
    trailing = 0
    for token in reversed(tokens):
        if not _NUMBER.fullmatch(token):
            break
        trailing += 1
    return trailing >= 2 or figures >= 0.5 * len(_WORD.findall(text))


def row_prefixes(nodes: pl.DataFrame) -> list[str]:
    """For each node of ``nodes`` (a tree: node_id, parent_id, level, order, text, section,
    block_kind), the prefix its matched text takes: ``"title | header | "`` for a table row (the
    parts it has; no header where the row names years itself), ``""`` for anything else."""
    n = nodes.height
    out = [""] * n
    if n == 0:
        return out
    texts: Sequence[str] = nodes["text"].cast(pl.String).fill_null("").to_list()
    levels = nodes["level"].to_list()
    kinds = (nodes["block_kind"].cast(pl.String).fill_null("").to_list()
             if "block_kind" in nodes.columns else [""] * n)
    sections = (nodes["section"].cast(pl.String).fill_null("").to_list()
                if "section" in nodes.columns else [""] * n)
    ids = nodes["node_id"].to_list()
    parents = nodes["parent_id"].to_list()
    row_of = {node_id: r for r, node_id in enumerate(ids)}
    has_children = set(parents)
    # leaves grouped by section (the level-1 ancestor), in document order (node ids sort so
    # within a parent; the order column orders siblings)
    orders = nodes["order"].to_list() if "order" in nodes.columns else list(range(n))

    def path(r: int) -> tuple:
        keys = []
        while r is not None:
            keys.append(orders[r])
            p = parents[r]
            r = row_of.get(p) if p is not None else None
        return tuple(reversed(keys))

    def section_of(r: int) -> int | None:
        while r is not None and levels[r] > 1:
            p = parents[r]
            r = row_of.get(p) if p is not None else None
        return r if r is not None and levels[r] == 1 else None

    pages = nodes["page"].to_list() if "page" in nodes.columns else [None] * n
    docs = nodes["doc_id"].cast(pl.String).to_list()
    by_doc: dict[str, list[int]] = {}
    for r in range(n):
        if ids[r] not in has_children and levels[r] >= 2:
            by_doc.setdefault(docs[r], []).append(r)
    titles: dict[int | None, str] = {}
    for leaves in by_doc.values():
        leaves.sort(key=path)
        # the last column header met: its text, its table's title, its position and page
        header, header_title, header_at, header_page = "", "", -HEADER_REACH - 1, None
        for i, r in enumerate(leaves):
            sec = section_of(r)
            if sec not in titles:
                if sec is not None and texts[sec].strip():
                    titles[sec] = _cut(texts[sec].splitlines()[0])
                else:
                    titles[sec] = _cut(sections[r].split(" > ")[-1]) if sections[r] else ""
            title, text = titles[sec], texts[r]
            if is_header(text):
                header, header_title, header_at, header_page = _cut(text), title, i, pages[r]
                continue
            if not is_row(text, kinds[r]):
                continue
            parts = []
            near = (header and i - header_at <= HEADER_REACH and len(_YEAR.findall(text)) < 2
                    and (header_page is None or pages[r] is None or 0 <= pages[r] - header_page <= 1))
            if near and header_title and header_title != title:
                parts.append(header_title)   # a table that runs on under a sub-heading ("Liabilities")
            if title:
                parts.append(title)
            if near:
                parts.append(header)
            if parts:
                out[r] = " | ".join(parts) + " | "
    return out
