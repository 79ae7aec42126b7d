"""Table pages first: the context's first units come from as many table pages as it holds.

A statement or table page is matched row by row: a question about capital expenditure ranks
several rows of one statement near the top (each row matching a part of the question: the
years, "cash", "property"), and a context of 2,000 tokens filled in that order spends its budget
on two or three table pages and misses the right one ranked a little lower. So the ranking is
reordered: each table page (the page of a leaf that is a table row, kohaku.ingest.tree.rows.is_row)
keeps only its best-ranked row in the first part, and every other node (prose, and rows of
pages with no other) is a page of its own there:

1. the best row of each table page and every other node, ordered by ``order``: ``vote`` (the
   sum of ``1 / (k + rank)`` over the page's rows among the first ``pool`` ranked; a node of
   its own page votes alone) or ``rank`` (the best row's rank);
2. the table pages' other rows, in their old order.

Prose keeps its place (``rank``) or moves behind table pages that many rows vote for
(``vote``); on WattBot's papers the evidence recall is as without it, on FinanceBench's filings
the page recall rises (docs/measured/history.md). ``RetrieveConfig.pages`` (``vote``, ``rank`` or
``none``), ``page_k`` and ``page_pool`` set it.
"""

from __future__ import annotations

from typing import Sequence

MODES = ("none", "rank", "vote")


def pages_first(rows: Sequence[int], page_of: Sequence[tuple[str, int] | None], order: str = "rank",
                k: float = 10.0, pool: int = 200) -> list[int]:
    """``rows`` (a ranking, best first) reordered: one row a page, then the rest in order.
    ``page_of[row]``: the (document, page) a row shares with others, or None for a node that is
    a page of its own."""
    if order == "none" or not rows:
        return list(rows)
    votes: dict[object, float] = {}
    first: dict[object, int] = {}
    for rank, row in enumerate(rows[:pool]):
        key = page_of[row] if page_of[row] is not None else ("row", row)
        votes[key] = votes.get(key, 0.0) + 1.0 / (k + rank)
        first.setdefault(key, rank)
    leaders = sorted(first, key=(lambda key: first[key]) if order == "rank"
                     else (lambda key: (-votes[key], first[key])))
    lead_rows = [rows[first[key]] for key in leaders]
    taken = set(lead_rows)
    return lead_rows + [row for row in rows if row not in taken]
