"""Reference metrics that real competitions use on cited documents and pages (pure functions).

- :func:`doc_jaccard`: WattBot's reference score, the Jaccard index of the cited and the gold
  document ids (:func:`kohaku.tasks.rooms.wattbot.metric.ref_score`, the competition's rules exactly).
- :func:`page_prf`: cited pages against gold pages: precision, recall and F-beta.
- :func:`pools_score`: each gold group ("pool") of pages needs one cited page; a penalty per
  pool with no cited page and per cited page in no pool, floored at 0.
- :func:`na_f1`: a set-level F1 of the not-answerable predictions.

**Page cells.** A cell lists pages as a JSON list (``[3, 4]``, ``["doc1:3", "doc1:4"]``), a
Python list, or items separated by ``;`` or ``,``; an item is ``page`` or ``doc:page``. Pages are
numbered from ``base`` (0 or 1, the task says) and compared from 1. When either side of a
comparison names no document, pages are compared by number only. **Pools** are written as a
JSON list of lists (``[[3, 4], [10]]``: page 3 or 4, and page 10) or as groups separated by
``;`` whose alternatives are separated by ``|`` (``3|4;10``). An empty cell, ``[]`` or a blank
token is no page. A submitted page that is no integer (``88.5``; with ``task.submission.pages:
integer`` also ``88.0``) is never read as another page: it is a cited page that matches no gold
page (:func:`page_list`); in the gold it is an error.
"""

from __future__ import annotations

import ast
import json
import math
import re
from typing import Any, Iterable

Page = tuple[str | None, int | None]    # (document or None, page from 1; None: no page)

BLANKS = frozenset({"", "is_blank", "none", "null", "nan", "n/a", "na", "[]"})


def _items(cell: Any) -> list[Any]:
    if cell is None:
        return []
    if isinstance(cell, (list, tuple)):
        return list(cell)
    text = str(cell).strip()
    if text.lower() in BLANKS:
        return []
    if text[:1] in "[(":
        for loader in (json.loads, ast.literal_eval):
            try:
                value = loader(text)
            except (ValueError, SyntaxError, RecursionError, MemoryError):   # nested past the parser's stack too
                continue
            if isinstance(value, (list, tuple)):   # a '\ud800' escape (no character) kept as written
                return [x.encode("utf-8", "backslashreplace").decode("utf-8") if isinstance(x, str) else x
                        for x in value]
    sep = ";" if ";" in text else ","
    return [p.strip() for p in text.split(sep) if p.strip()]


#: how a page number is read (``task.submission.pages``): ``number``: an integral number (88,
#: 88.0; 88.5 is no page); ``integer``: integer digits only (88.0 is no page either)
PAGE_READINGS = ("number", "integer")
_INTEGER = re.compile(r"^[+-]?\d+$")


def _page_number(num: Any, pages: str) -> int | None:
    """The page a number cell says, or None when it is no page under ``pages``; ValueError when
    it is no number at all."""
    if isinstance(num, int) and not isinstance(num, bool):
        return num
    text = str(num).strip()
    if _INTEGER.match(text):
        return int(text)
    value = float(text)         # ValueError: no number
    if pages == "integer" or not math.isfinite(value) or not value.is_integer():
        return None
    return int(value)


def _page(item: Any, base: int, where: str, pages: str = "number", trim: bool = True,
          refuse: bool = True) -> Page:
    """One page item (``page`` or ``doc:page``) numbered from 1. A number that is no page
    (``88.5``; ``88.0`` when ``pages`` is ``integer``) is refused (``refuse``, as the gold's
    are), or read as a page that matches no page: ``(doc, None)``. ``trim``: the document id
    without surrounding spaces."""
    if isinstance(item, bool):
        raise ValueError(f"{where}: page {item!r} is no page number")
    if isinstance(item, int):
        return None, item - base + 1
    text = str(item).strip().strip("'\"") if trim else str(item)
    doc, _, num = text.rpartition(":")
    try:
        n = _page_number(item if isinstance(item, float) else num, pages)
    except (ValueError, OverflowError):   # not a number
        raise ValueError(f"{where}: {item!r} is no page ('page' or 'doc:page')") from None
    doc_id = (doc.strip() if trim else doc) or None
    if n is None:
        if refuse:
            raise ValueError(f"{where}: {item!r} is no page: a page is an integer"
                             + (" (task.submission.pages=integer)" if pages == "integer" else ""))
        return doc_id, None
    return doc_id, n - base + 1


def parse_pages(cell: Any, base: int = 1, where: str = "pages") -> set[Page]:
    """The pages a cell lists, numbered from 1 (``base``: how the cell numbers them)."""
    return set(page_list(cell, base, where))


def page_list(cell: Any, base: int = 1, where: str = "pages", pages: str | None = None,
              trim: bool = True) -> list[Page]:
    """The pages a cell lists in its order, repeats kept, numbered from 1. ``pages`` (a
    submission's reading, ``number`` or ``integer``): an item that is no page under it is kept
    as a page that matches none (``(doc, None)``: it counts as a cited page outside the gold);
    None: such an item is refused (the gold's reading). ``trim``: document ids without
    surrounding spaces."""
    return [_page(i, base, where, pages or "number", trim, refuse=pages is None) for i in _items(cell)]


def parse_pools(cell: Any, base: int = 1, where: str = "pools") -> list[set[Page]]:
    """The gold pools of a cell: a list of page sets, each needing one cited page."""
    if cell is None:
        return []
    text = str(cell).strip() if not isinstance(cell, (list, tuple)) else ""
    if isinstance(cell, (list, tuple)) or text[:1] == "[":
        groups = _items(cell)
        return [parse_pages(g if isinstance(g, (list, tuple)) else [g], base, where) for g in groups]
    if text.lower() in BLANKS:
        return []
    return [{_page(a, base, where) for a in g.split("|") if a.strip()} for g in text.split(";") if g.strip()]


def _same(a: Page, b: Page) -> bool:
    return a[1] is not None and a[1] == b[1] and (a[0] is None or b[0] is None or a[0] == b[0])


def _hits(cited: Iterable[Page], gold: Iterable[Page]) -> int:
    gold = list(gold)
    return sum(any(_same(c, g) for g in gold) for c in cited)


def page_prf(cited: set[Page], gold: set[Page], beta: float = 1.0) -> tuple[float, float, float]:
    """(precision, recall, F-beta) of the cited pages against the gold pages. No gold and no
    cited page: 1, 1, 1; only one side empty: 0, 0, 0."""
    if not gold and not cited:
        return 1.0, 1.0, 1.0
    if not gold or not cited:
        return 0.0, 0.0, 0.0
    precision = _hits(cited, gold) / len(cited)
    recall = sum(any(_same(c, g) for c in cited) for g in gold) / len(gold)
    if precision == 0 and recall == 0:
        return precision, recall, 0.0
    b2 = beta * beta
    return precision, recall, (1 + b2) * precision * recall / (b2 * precision + recall)


def pools_score(cited: Iterable[Page], pools: list[set[Page]], points: float = 1.0,
                missing: float = 0.5, extra: float = 0.25) -> float:
    """``points`` less ``missing`` per pool with no cited page and ``extra`` per cited page in
    no pool, floored at 0. No pool: ``points`` when nothing is cited, else the extra penalties.
    ``cited`` as a set counts a page once; as a list, every listed page (repeats included)."""
    cited = list(cited)
    n_missing = sum(not any(_same(c, g) for c in cited for g in pool) for pool in pools)
    n_extra = sum(not any(_same(c, g) for pool in pools for g in pool) for c in cited)
    return max(0.0, points - missing * n_missing - extra * n_extra)


def na_f1(gold_na: list[bool], pred_na: list[bool], average: str = "positive") -> float:
    """F1 of the not-answerable class (``positive``) or the mean of the F1 of both classes
    (``macro``), over all questions. A class with no gold and no prediction has F1 1."""
    def f1(g: list[bool], p: list[bool]) -> float:
        tp = sum(a and b for a, b in zip(g, p))
        fp = sum(b and not a for a, b in zip(g, p))
        fn = sum(a and not b for a, b in zip(g, p))
        return 1.0 if tp + fp + fn == 0 else 2 * tp / (2 * tp + fp + fn)

    if average == "positive":
        return f1(gold_na, pred_na)
    if average == "macro":
        return (f1(gold_na, pred_na) + f1([not g for g in gold_na], [not p for p in pred_na])) / 2
    raise ValueError(f"na_f1 average={average!r}; use positive or macro")
