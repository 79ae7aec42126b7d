"""The tree model: the ``nodes`` table's schema and ids, its array view, parent aggregation.

A corpus is a forest of document trees, one row per node in the ``nodes`` table
(:data:`NODES_SCHEMA`): level 0 document, 1 section, 2 paragraph, 3 sentence. Node ids encode
the path and are stable across runs: ``<doc>``, ``<doc>#s<i>``, ``<doc>#s<i>.p<j>``,
``<doc>#s<i>.p<j>.t<k>``; indices are 1-based per parent and ``order`` is that index (0 for
documents). :func:`node_arrays` gives each row's parent row; :func:`aggregate_parents` fills
parent vectors bottom-up from their children; :class:`TreeView` is the array view the context
builder walks (children in order, the leaves of every section in document order).
"""

from __future__ import annotations

from functools import cached_property
from itertools import accumulate

import numpy as np
import polars as pl

from kohaku.core.tokens import count_tokens
from kohaku.core.vectors import l2_normalise

NODES_SCHEMA = {
    "node_id": pl.String,
    "doc_id": pl.String,
    "parent_id": pl.String,
    "level": pl.Int64,
    "kind": pl.String,
    "order": pl.Int64,
    "page": pl.Int64,
    "section": pl.String,
    "text": pl.String,
    "n_tokens": pl.Int64,
    "block_kind": pl.String,
    "section_source": pl.String,
}
KINDS = ("document", "section", "paragraph", "sentence")


def node_arrays(nodes: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(parent row index or -1, has_children) for each row of ``nodes``."""
    ids = nodes["node_id"]
    if ids.n_unique() != nodes.height:
        dup = ids.filter(ids.is_duplicated()).head(3).to_list()
        raise ValueError(f"tree nodes: node_id values are not unique, e.g. {dup}")
    index = pl.DataFrame({"parent_id": ids, "_prow": pl.int_range(nodes.height, eager=True)})
    parent = (
        nodes.select("parent_id")
        .with_row_index("_row")
        .join(index, on="parent_id", how="left")
        .sort("_row")
    )
    prow = parent["_prow"].fill_null(-1).to_numpy().astype(np.int64)
    missing = parent.filter(pl.col("parent_id").is_not_null() & pl.col("_prow").is_null())
    if missing.height:
        row = missing["_row"][0]
        raise ValueError(
            f"tree nodes row {row} ({nodes['node_id'][row]}): parent_id "
            f"'{missing['parent_id'][0]}' is not a node; rebuild the tree stage"
        )
    has_children = np.zeros(nodes.height, dtype=bool)
    has_children[prow[prow >= 0]] = True
    return prow, has_children


def aggregate_parents(
    parent_row: np.ndarray,
    levels: np.ndarray,
    weights: np.ndarray,
    vectors: np.ndarray,
    known: np.ndarray,
    mode: str = "weighted",
) -> np.ndarray:
    """Fill the vectors of unknown nodes bottom-up from their children.

    ``parent_row[i]`` is i's parent row (-1 for roots), ``known[i]`` says ``vectors[i]`` is
    already set (encoded). Each unknown node with children gets the normalised (weighted) mean
    of its children's vectors; ``weights`` are used by ``mode='weighted'`` (clamped to >= 1).
    """
    out = vectors.copy()
    done = known.copy()
    w = np.maximum(weights.astype(np.float64), 1.0) if mode == "weighted" else np.ones(len(levels))
    child = np.flatnonzero(parent_row >= 0)
    for level in sorted(set(levels[~done].tolist()), reverse=True):
        targets = (~done) & (levels == level)
        sel = child[targets[parent_row[child]]]
        if sel.size == 0:
            continue
        if not done[sel].all():
            bad = sel[~done[sel]][0]
            raise ValueError(f"node row {bad} has no vector when its parent needs one")
        order = np.argsort(parent_row[sel], kind="stable")
        sel = sel[order]
        parents = parent_row[sel]
        starts = np.flatnonzero(np.r_[True, parents[1:] != parents[:-1]])
        weighted = out[sel].astype(np.float64) * w[sel, None]
        sums = np.add.reduceat(weighted, starts, axis=0)
        wsum = np.add.reduceat(w[sel], starts)
        rows = parents[starts]
        out[rows] = l2_normalise((sums / wsum[:, None]).astype(np.float32))
        done[rows] = True
    return out


class TreeView:
    """Array view of the ``nodes`` table: parents, children in order, and the leaves of every
    section in document order (``leaves[c]``; node ``r`` covers ``leaves[container[r]][first[r]:
    last[r]]``)."""

    @cached_property
    def row_prefixes(self) -> list[str]:
        """Each node's table-row prefix (kohaku.ingest.tree.rows.row_prefixes), computed once
        for the evidence scorer and the reranker that both read it."""
        from kohaku.ingest.tree.rows import row_prefixes

        return row_prefixes(self.nodes)

    def __init__(self, nodes: pl.DataFrame) -> None:
        self.nodes = nodes
        self.parent, self.has_children = node_arrays(nodes)
        self.level = nodes["level"].to_numpy()
        self.node_id: list[str] = nodes["node_id"].to_list()
        self.doc_id: list[str] = nodes["doc_id"].cast(pl.String).to_list()
        self.text: list[str] = nodes["text"].fill_null("").to_list()
        self.section: list[str] = (
            nodes["section"].cast(pl.String).fill_null("").to_list()
            if "section" in nodes.columns else [""] * nodes.height
        )
        self.page: list = nodes["page"].to_list() if "page" in nodes.columns else [None] * nodes.height
        order = nodes["order"].to_numpy() if "order" in nodes.columns else np.arange(nodes.height)
        # children of every parent, in document order, and each node's position among them
        rows = np.flatnonzero(self.parent >= 0)
        idx = np.lexsort((order[rows], self.parent[rows]))
        rows = rows[idx]
        self.sib_pos = np.zeros(nodes.height, np.int64)
        self.children: dict[int, np.ndarray] = {}
        if len(rows):
            par = self.parent[rows]
            starts = np.flatnonzero(np.r_[True, par[1:] != par[:-1]])
            ends = np.r_[starts[1:], len(rows)]
            for s, e in zip(starts.tolist(), ends.tolist()):
                kids = rows[s:e]
                self.children[int(par[s])] = kids
                self.sib_pos[kids] = np.arange(e - s)
        self._layout()
        self._tokens: dict[int, int] = {}
        self._full: dict[int, str] = {}
        self._joiner: dict[int, str] = {}

    def _layout(self) -> None:
        """Containers (a root's children; a childless root is its own), their leaves in document
        order, each node's leaf range and each leaf's group (the paragraph it renders in). Kept
        as Python lists: the context loop indexes them one element at a time."""
        n = len(self.parent)
        parent = self.parent.tolist()
        container = [-1] * n
        first = [0] * n
        last = [0] * n
        self.leaves: dict[int, list[int]] = {}
        for root in np.flatnonzero(self.parent < 0).tolist():
            tops = self.children.get(root)
            for top in ([root] if tops is None else tops.tolist()):
                out: list[int] = []
                stack = [(top, False)]
                while stack:  # iterative pre/post-order walk: first at entry, last at exit
                    row, done = stack.pop()
                    if done:
                        last[row] = len(out)
                        continue
                    container[row] = top
                    first[row] = len(out)
                    kids = self.children.get(row)
                    if kids is None:
                        out.append(row)
                        last[row] = len(out)
                        continue
                    stack.append((row, True))
                    stack.extend((int(k), False) for k in kids[::-1])
                self.leaves[top] = out
        leaf_pos = [-1] * n
        group = list(range(n))
        for top, out in self.leaves.items():
            for i, leaf in enumerate(out):
                leaf_pos[leaf] = i
                p = parent[leaf]
                if p >= 0 and p != top and parent[p] >= 0:
                    group[leaf] = p  # a sentence renders inside its paragraph
        self.container, self.first, self.last = container, first, last
        self.leaf_pos, self.group = leaf_pos, group
        self._ctok: dict[int, list[int]] = {}
        self._adj: dict[int, int] = {}
        self._cum: dict[int, list[int]] = {}

    def leaves_of(self, row: int) -> list[int]:
        """The leaves under ``row`` (itself when it is a leaf), in document order."""
        c = self.container[row]
        if c >= 0:
            return self.leaves[c][self.first[row] : self.last[row]]
        return [leaf for top in self.children.get(row, []) for leaf in self.leaves[int(top)]]

    def n_leaves(self, row: int) -> int:
        return self.last[row] - self.first[row]

    def full_text(self, row: int) -> str:
        """A node's whole content. Paragraph text is the join of its sentences, so it is used
        as is; a section or document whose own text is only its title (shorter than its
        children together) is rendered as its children's content, one per line."""
        out = self._full.get(row)
        if out is None:
            own = self.text[row].strip()
            kids = self.children.get(row)
            if kids is None or len(kids) == 0:
                out = own
            else:
                child_len = sum(len(self.text[int(k)]) for k in kids)
                if len(own) >= 0.8 * child_len:
                    out = own
                else:
                    out = "\n".join(t for t in (self.full_text(int(k)) for k in kids) if t)
            self._full[row] = out
        return out

    def text_tokens(self, row: int) -> int:
        """Tokens of a node's (stripped) text, counted once per view."""
        n = self._tokens.get(row)
        if n is None:
            n = self._tokens[row] = count_tokens(self.text[row].strip())
        return n

    def full_tokens(self, row: int) -> int:
        n = self._tokens.get(-row - 1)
        if n is None:
            n = self._tokens[-row - 1] = count_tokens(self.full_text(row))
        return n

    def leaf_tokens(self, container: int) -> list[int]:
        """Text tokens of the container's leaves, by position."""
        out = self._ctok.get(container)
        if out is None:
            out = self._ctok[container] = [self.text_tokens(r) for r in self.leaves[container]]
        return out

    def cum_tokens(self, container: int) -> list[int]:
        """Prefix sums of ``leaf_tokens``: leaves lo..hi-1 hold cum[hi] - cum[lo] tokens."""
        out = self._cum.get(container)
        if out is None:
            out = self._cum[container] = [0, *accumulate(self.leaf_tokens(container))]
        return out

    def whole_adjust(self, group: int) -> int:
        """Tokens of a group rendered whole minus the sum of its leaves' tokens (0 when a
        paragraph's text is the join of its sentences)."""
        out = self._adj.get(group)
        if out is None:
            out = self._adj[group] = self.full_tokens(group) - sum(
                self.text_tokens(r) for r in self.leaves_of(group))
        return out

    def joiner(self, group: int) -> str:
        """How adjacent sentences of ``group`` are joined: table paragraphs keep their rows on
        separate lines, prose paragraphs use a space."""
        out = self._joiner.get(group)
        if out is None:
            out = self._joiner[group] = "\n" if "\n" in self.text[group].strip() else " "
        return out
