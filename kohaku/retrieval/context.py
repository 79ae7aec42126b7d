"""From ranked hits to the context: expansion, tree dedup, section blocks, budget cut.

The context is built from the tree's *leaves* (sentences, or childless paragraphs and sections).
Each ranked node becomes a *unit*, a set of leaves:

- a sentence (a leaf whose parent is a paragraph or section) grows with ``expand``:
  ``none`` itself; ``window`` the sentences within ``window`` positions of it in the same parent;
  ``paragraph`` its whole parent; ``span`` its window widened to ``span_share * budget`` tokens
  of text (at most ``span_max_tokens``), taking its own paragraph's sentences first (nearest
  first, alternating after/before) and then the neighbouring paragraphs of its section, so a
  unit is a sentence window at small budgets and whole paragraphs with their neighbours at
  large ones;
- any other node (a paragraph, section or document hit) is all the leaves below it.

Units go into the context in rank order, breadth first (``breadth_share``, 0.5): the ranked
nodes' windows (or the node itself, when it is no sentence) until that share of the budget is
used, then a second pass in rank order widens them to their full units with the rest. A long
report's answer is often a hit ranked sixth to twentieth; one pass of 400-token spans fills
2,000 tokens with the first five (FinanceBench's filings: page recall 0.787 -> 0.827 with the
right filing; WattBot's papers: evidence recall 0.871 -> 0.881; docs/measured/history.md).

How wide the first pass may depend on whether the hits agree (``spread_pages``: 0, off, unless
the task asks for it, ``task.spread_pages``; FinanceBench: 7). When the first ``spread_top``
(10) ranked nodes lie on ``spread_pages`` or more distinct pages (sections, for a document
without pages), the ranking has not settled where the answer is, and the first pass places each
ranked sentence alone up to ``scattered_share`` (0.9) of the budget, so the context holds the
hits ranked 10-30 where a long filing's answer often is; hits that agree on a few pages keep
their windows and spans, where a paper's answer sits next to the first hit (FinanceBench page
recall 0.839 -> 0.871 single store, WattBot evidence recall unchanged at 2,000 tokens;
docs/measured/history.md, issue 47). A ranked node with the text of an earlier one (``dedup_text``: a
sentence in a filing's summary and in its notes) is skipped.

Leaves are grouped into one *block* per section (the document's child on the leaf's path): a
block is rendered once, with one ``[ref_id=...]`` header, its leaves in document order, whole
paragraphs as their own text, adjacent paragraphs on separate lines, and " … " marking left-out
text. Tree dedup is set union: a unit adds only its leaves not yet in the context (a paragraph
hit after a window of its sentences completes the paragraph in place), so no text appears twice.
A block keeps the position of its section's first unit.

A unit that would push the context over the token budget falls back to smaller ones (span or
paragraph -> sentence window -> the sentence); if none fits it is skipped and later, shorter units
may still fill the budget.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Sequence

from kohaku.core.tokens import count_tokens
from kohaku.ingest.tree.model import TreeView

GAP = " … "  # left-out sentences inside a paragraph
PARA_GAP = "\n…\n"  # left-out text between two paragraphs of one block
EXPAND_MODES = ("none", "window", "paragraph", "span")
HEADING_MODES = ("none", "paragraphs", "all")


@dataclass
class RenderConfig:
    """How ranked hits become the context (the rendering keys of the ``retrieve`` group)."""

    # sentence hit -> span (see span_share) | paragraph (whole parent) | window (neighbour
    # sentences) | none
    expand: str = "span"
    # sentences on each side with expand=window (also the fallback when a span or paragraph
    # does not fit)
    window: int = 1
    # span: the hit's window widened, own paragraph first then the section's neighbouring
    # paragraphs, to span_share * budget tokens
    span_share: float = 0.2
    # ... and at most span_max_tokens (0: no cap), so a large budget (4,000 tokens, a retry's
    # grown budget) holds more units rather than longer ones
    span_max_tokens: int = 400
    # breadth first: before any hit is widened, the ranked hits are placed as their windows
    # (ContextBuilder._small_units) until breadth_share of the budget is used; then a second pass
    # widens them in rank order with the rest (0: off, one pass of full units)
    breadth_share: float = 0.5
    # a ranked node whose text is that of an earlier ranked node (a sentence repeated in a
    # filing's summary and its notes, a boilerplate paragraph in each exhibit) is skipped
    dedup_text: bool = True
    spread_top: int = 10  # the first ranked nodes whose places spread_pages counts
    # a scattered ranking: when the first spread_top ranked nodes lie on at least spread_pages
    # distinct places (pages; the section where a node has no page), the hits disagree on where
    # the answer is and the breadth pass places the ranked sentences alone, up to
    # scattered_share of the budget; hits that agree keep their windows and spans (0: off, the
    # default; a task asks for it with task.spread_pages: FinanceBench 7, docs/measured/selection.md)
    spread_pages: int = 0
    scattered_share: float = 0.9  # the budget share of a scattered ranking's first pass
    # section title line on: paragraphs (blocks holding a whole paragraph) | all | none
    heading: str = "paragraphs"
    # fields: doc_id, heading, text, section, page
    block_format: str = "[ref_id={doc_id}] {heading}{text}"
    heading_format: str = "{section}\n"  # fields: section, page, doc_id
    # between blocks (one block per section: its units in document order)
    separator: str = "\n---\n"
    # stop filling after this many ranked nodes in a row that do not fit the rest of the
    # budget (0 = try every ranked node; a long ranking then costs time for a few tokens)
    fill_patience: int = 50

    def validate(self) -> None:
        if self.expand not in EXPAND_MODES:
            raise ValueError(f"expand={self.expand!r}: use {', '.join(EXPAND_MODES)}")
        if self.heading not in HEADING_MODES:
            raise ValueError(f"heading={self.heading!r}: use {', '.join(HEADING_MODES)}")
        if self.window < 0:
            raise ValueError("window must be >= 0")
        if self.fill_patience < 0:
            raise ValueError(f"fill_patience={self.fill_patience}: use 0 (off) or a count")
        if not 0.0 <= self.span_share <= 1.0:
            raise ValueError(f"span_share={self.span_share}: use a share of the budget in [0, 1]")
        if self.span_max_tokens < 0:
            raise ValueError(f"span_max_tokens={self.span_max_tokens}: use 0 (no cap) or a token count")
        if self.spread_top < 1 or self.spread_pages < 0:
            raise ValueError(f"spread_top={self.spread_top}, spread_pages={self.spread_pages}: use a "
                             "count >= 1 and a count of places (0: off)")
        if not 0.0 <= self.scattered_share <= 1.0:
            raise ValueError(f"scattered_share={self.scattered_share}: use a share of the budget in [0, 1]")
        if not 0.0 <= self.breadth_share <= 1.0:
            raise ValueError(f"breadth_share={self.breadth_share}: use a share of the budget in [0, 1]")


@dataclass
class Block:
    """The leaves of one section in the context: positions in ``view.leaves[container]``."""

    container: int
    pos: list[int] = field(default_factory=list)  # sorted
    counts: dict[int, int] = field(default_factory=dict)  # group row -> leaves of it in the block
    body: int = 0  # tokens of the rendered text (no header)
    n_whole: int = 0  # groups with all their leaves in the block
    tokens: int = 0  # body + header


@dataclass
class Context:
    """A built context: ``context`` is ``separator.join(blocks)``; ``block_doc_ids[i]`` is the
    document of ``blocks[i]`` (blocks are in rank order, so a consumer that must cut the context
    drops blocks from the end and knows exactly which documents remain)."""

    context: str
    doc_ids: list[str]
    node_ids: list[str]
    n_tokens: int
    n_blocks: int
    n_units: int
    blocks: list[str] = field(default_factory=list)
    block_doc_ids: list[str] = field(default_factory=list)


class ContextBuilder:
    def __init__(self, view: TreeView, cfg: RenderConfig) -> None:
        cfg.validate()
        self.view = view
        self.cfg = cfg
        self.sep_tokens = count_tokens(cfg.separator)
        self.gap_tokens = count_tokens(GAP)
        self.para_gap_tokens = count_tokens(PARA_GAP)
        self._head_tokens: dict[tuple[int, bool], int] = {}
        self.additive = self._is_additive()
        # no new block is smaller than a header plus one token (page: a number, as in the tree)
        self.min_unit = count_tokens(cfg.block_format.format(
            doc_id="x", heading="", text="", section="", page=1)) + 1

    def _is_additive(self) -> bool:
        """True when a context's token count is the sum of its parts (text is joined to the
        format by whitespace or punctuation), so counts need not be redone on the final text."""
        fmt, sep = self.cfg.block_format, self.cfg.separator
        # a one-letter section title: text glued to it changes the count ("Ha" is one token, "Head"
        # + "a" would be two either way); the heading line as heading_format makes it
        for text in ("a", "a b", "!a!", "ab_c1"):
            for section in ("H", "Head"):
                for show in (False, True):
                    kw = dict(doc_id="d1", section=section, page=3)
                    heading = self.cfg.heading_format.format(**kw) if show else ""
                    block = fmt.format(text=text, heading=heading, **kw)
                    empty = fmt.format(text="", heading=heading, **kw)
                    if count_tokens(block) != count_tokens(empty) + count_tokens(text):
                        return False
                    if count_tokens(block + sep + block) != 2 * count_tokens(block) + count_tokens(sep):
                        return False
        return True

    # ------------------------------------------------------------------------------ rendering
    def _groups(self, block: Block) -> list[tuple[int, list[int], bool]]:
        """(group, its leaf rows in the block, whole) for the block's runs of one paragraph."""
        v = self.view
        leaves = v.leaves[block.container]
        out: list[tuple[int, list[int], bool]] = []
        for p in block.pos:
            leaf = leaves[p]
            g = v.group[leaf]
            if out and out[-1][0] == g:
                out[-1][1].append(leaf)
            else:
                out.append((g, [leaf], False))
        return [(g, m, len(m) == v.n_leaves(g)) for g, m, _ in out]

    def _show_heading(self, container: int, n_whole: int, first_leaf: int, first_whole: bool) -> bool:
        """Whether a block gets its section title line (``heading``): mode ``all``, or
        ``paragraphs`` with a whole paragraph in it; left out when its text starts with it."""
        mode = self.cfg.heading
        if not (mode == "all" or (mode == "paragraphs" and n_whole > 0)):
            return False
        v = self.view
        section = v.section[container].strip()
        if not section:
            return False
        start = v.full_text(v.group[first_leaf]) if first_whole else v.text[first_leaf].strip()
        return not start.startswith(section)

    def _block_heading(self, block: Block) -> bool:
        v = self.view
        leaf = v.leaves[block.container][block.pos[0]]
        g = v.group[leaf]
        return self._show_heading(block.container, block.n_whole, leaf, block.counts.get(g) == v.n_leaves(g))

    def _head(self, container: int, show: bool) -> int:
        """Tokens of a block's header (the format without the text)."""
        key = (container, show)
        n = self._head_tokens.get(key)
        if n is None:
            n = self._head_tokens[key] = count_tokens(self._format(container, "", show))
        return n

    def _format(self, container: int, text: str, show: bool) -> str:
        v = self.view
        heading = (self.cfg.heading_format.format(section=v.section[container], page=v.page[container],
                                                  doc_id=v.doc_id[container]) if show else "")
        return self.cfg.block_format.format(doc_id=v.doc_id[container], heading=heading, text=text,
                                            section=v.section[container], page=v.page[container])

    def render(self, block: Block) -> str:
        v = self.view
        parts: list[str] = []
        prev_last = None
        for g, members, whole in self._groups(block):
            if prev_last is not None:
                adjacent = v.leaf_pos[members[0]] == v.leaf_pos[prev_last] + 1
                parts.append("\n" if adjacent else PARA_GAP)
            if whole:
                parts.append(v.full_text(g))
            else:
                join = v.joiner(g)
                prev = None
                for r in members:
                    if prev is not None:
                        parts.append(join if v.leaf_pos[r] == v.leaf_pos[prev] + 1 else GAP)
                    parts.append(v.text[r].strip())
                    prev = r
            prev_last = members[-1]
        return self._format(block.container, "".join(parts), self._block_heading(block))

    def _plan(self, block: Block, lo: int, hi: int):
        """What adding the leaves at positions ``lo..hi-1`` to ``block`` does: (block tokens
        after, runs of new positions, group count changes, groups made whole, body after), or
        None when they are all in it already. Tokens are summed from cached parts (counts are
        additive over whitespace-joined pieces; ``build`` re-checks otherwise)."""
        v = self.view
        leaves = v.leaves[block.container]
        cum = v.cum_tokens(block.container)
        group, last = v.group, v.last
        old = block.pos
        i0, i1 = bisect_left(old, lo), bisect_left(old, hi)
        if i1 - i0 == hi - lo:
            return None

        def brk(x: int, y: int) -> int:  # tokens between two consecutive leaves of the block
            if y == x + 1:
                return 0
            return self.gap_tokens if group[leaves[x]] == group[leaves[y]] else self.para_gap_tokens

        # the runs of new positions are the gaps between the positions already in [lo, hi);
        # each lies between two old neighbours (or an end of the block)
        runs = []
        start = lo
        for p in old[i0:i1]:
            if p > start:
                runs.append((start, p))
            start = p + 1
        if start < hi:
            runs.append((start, hi))
        body = block.body
        added: dict[int, int] = {}
        whole: list[int] = []
        for a, b in runs:
            i = bisect_left(old, a)
            before = old[i - 1] if i > 0 else None
            after = old[i] if i < len(old) else None
            body += cum[b] - cum[a]
            if before is not None:
                body += brk(before, a)
            if after is not None:
                body += brk(b - 1, after)
            if before is not None and after is not None:
                body -= brk(before, after)
            x = a
            while x < b:  # group by group
                g = group[leaves[x]]
                end = min(last[g], b)
                added[g] = added.get(g, 0) + end - x
                x = end
        for g, n in added.items():
            if block.counts.get(g, 0) + n == v.n_leaves(g):
                whole.append(g)
                body += v.whole_adjust(g)
        first = min(old[0], runs[0][0]) if old else runs[0][0]
        g0 = group[leaves[first]]
        first_whole = block.counts.get(g0, 0) + added.get(g0, 0) == v.n_leaves(g0)
        show = self._show_heading(block.container, block.n_whole + len(whole), leaves[first], first_whole)
        return body + self._head(block.container, show), runs, added, whole, body

    @staticmethod
    def _apply(block: Block, plan) -> None:
        tokens, runs, added, whole, body = plan
        for a, b in reversed(runs):
            i = bisect_left(block.pos, a)
            block.pos[i:i] = range(a, b)
        for g, n in added.items():
            block.counts[g] = block.counts.get(g, 0) + n
        block.n_whole += len(whole)
        block.body = body
        block.tokens = tokens

    # -------------------------------------------------------------------------------- units
    # A unit is a list of leaf ranges (container, lo, hi): positions lo..hi-1 of its leaves.
    def _is_sentence(self, row: int) -> bool:
        v = self.view
        parent = int(v.parent[row])
        return not v.has_children[row] and parent >= 0 and v.level[parent] > 0

    def _node_unit(self, row: int) -> list[tuple[int, int, int]]:
        v = self.view
        c = v.container[row]
        if c >= 0:
            return [(c, v.first[row], v.last[row])]
        return [(int(t), 0, len(v.leaves[int(t)])) for t in v.children.get(row, [])]

    def _window(self, row: int, w: int) -> tuple[int, int, int]:
        """The leaves of the siblings within ``w`` positions of ``row``."""
        v = self.view
        kids = v.children[int(v.parent[row])]
        pos = int(v.sib_pos[row])
        left, right = int(kids[max(pos - w, 0)]), int(kids[min(pos + w, len(kids) - 1)])
        return v.container[row], v.first[left], v.last[right]

    def _span(self, row: int, target: int) -> tuple[int, int, int]:
        """Leaves around ``row`` worth at most ``target`` tokens of text (at least ``row``): its
        paragraph's sentences first, nearest first alternating after/before, then the leaves of
        the neighbouring paragraphs of its section the same way."""
        v = self.view
        c = v.container[row]
        tok = v.leaf_tokens(c)
        pos = v.leaf_pos[row]
        g = v.group[row]
        used = tok[pos]
        lo, hi = pos, pos + 1  # the chosen range [lo, hi)
        for start, end in ((v.first[g], v.last[g]), (0, len(tok))):
            after = before = True
            while after or before:
                if after:
                    after = hi < end and used + tok[hi] <= target
                    if after:
                        used += tok[hi]
                        hi += 1
                if before:
                    before = lo > start and used + tok[lo - 1] <= target
                    if before:
                        used += tok[lo - 1]
                        lo -= 1
        return c, lo, hi

    def _small_units(self, row: int, window: int | None = None):
        """The units of the breadth-first pass, larger first: a sentence's window (for a
        sentence alone in its paragraph, the leaves within ``window`` of it in its section;
        ``window`` None: ``cfg.window``), then the sentence alone; any other node's leaves."""
        v = self.view
        if not self._is_sentence(row):
            yield self._node_unit(row)
            return
        c, pos = v.container[row], v.leaf_pos[row]
        w = self.cfg.window if window is None else window
        if self.cfg.expand != "none" and w > 0:
            win = self._window(row, w)
            if win[2] - win[1] > 1:
                yield [win]
            else:  # alone in its paragraph (a one-line row, a caption): its section's neighbours
                yield [(c, max(pos - w, 0), min(pos + w + 1, len(v.leaves[c])))]
        yield [(c, pos, pos + 1)]

    def _candidates(self, row: int, budget: int):
        """The units to try for a ranked node, largest first, each smaller than the one before
        (a generator: smaller ones are only made when a larger one did not fit)."""
        v = self.view
        if not self._is_sentence(row):
            yield self._node_unit(row)
            return
        mode = self.cfg.expand
        c, pos = v.container[row], v.leaf_pos[row]
        win = (self._window(row, self.cfg.window) if mode != "none" and self.cfg.window > 0
               else (c, pos, pos + 1))
        size = win[2] - win[1] + 1
        if mode == "paragraph":
            unit = self._node_unit(int(v.parent[row]))[0]
            size = unit[2] - unit[1]
            yield [unit]
        elif mode == "span":  # the window, widened to span_share of the budget
            cum = v.cum_tokens(c)
            share = int(self.cfg.span_share * budget)
            if self.cfg.span_max_tokens:
                share = min(share, self.cfg.span_max_tokens)
            target = max(share, cum[win[2]] - cum[win[1]])
            unit = self._span(row, target)
            size = unit[2] - unit[1]
            yield [unit]
        # the window when it is smaller, or as large but other leaves (a span grows leaf by leaf
        # and may pass a window of multi-leaf paragraphs before it has all of it)
        if win[2] - win[1] < size or (win[2] - win[1] == size and mode == "span" and win[1:] != unit[1:]):
            size = win[2] - win[1]
            yield [win]
        if size > 1:
            yield [(c, pos, pos + 1)]

    # ------------------------------------------------------------------------------- building
    def build(self, ranked_rows: Sequence[int], budget: int) -> Context:
        v = self.view
        blocks: list[Block] = []
        block_at: dict[int, int] = {}  # container row -> index in blocks
        state = {"total": 0}  # tokens of all blocks, separators excluded
        n_units = 0

        def cost(total: int, n_blocks: int) -> int:
            return total + self.sep_tokens * max(n_blocks - 1, 0)

        def add(unit: Sequence[tuple[int, int, int]], limit: int) -> bool | None:
            """Place a unit's new leaves; None when it has none, False when over budget."""
            changes = []
            total = state["total"]
            n_blocks = len(blocks)
            for c, lo, hi in unit:
                idx = block_at.get(c)
                block = blocks[idx] if idx is not None else Block(c)
                plan = self._plan(block, lo, hi)
                if plan is None:
                    continue
                total += plan[0] - block.tokens
                n_blocks += idx is None
                changes.append((c, idx, block, plan))
            if not changes:
                return None
            if cost(total, n_blocks) > limit:
                return False
            for c, idx, block, plan in changes:
                self._apply(block, plan)
                if idx is None:
                    block_at[c] = len(blocks)
                    blocks.append(block)
            state["total"] = total
            return True

        patience = self.cfg.fill_patience

        counted: set[int] = set()
        seen_text: dict[str, int] = {}  # a ranked node's text -> the first ranked row with it

        def fill(limit: int, small: bool, window: int | None = None) -> None:
            misses = 0  # ranked nodes in a row that did not fit
            for row in ranked_rows:
                row = int(row)
                if self.cfg.dedup_text:
                    key = " ".join(v.text[row].split()).lower()
                    if seen_text.setdefault(key, row) != row:
                        continue  # an earlier ranked node has the same text
                if cost(state["total"] + self.min_unit, len(blocks) + 1) > limit and (
                        not blocks or cost(state["total"] + 1, len(blocks)) > limit):
                    break  # the budget is full: no new block fits, nor one more token in a block
                placed = None
                for unit in (self._small_units(row, window) if small else self._candidates(row, budget)):
                    placed = add(unit, limit)
                    if placed is not False:
                        break  # placed, or nothing new (already in the context)
                if placed:
                    counted.add(row)
                misses = misses + 1 if placed is False else 0
                if patience and misses >= patience:
                    break  # what is left of the budget fits none of the next nodes

        share, window = self.cfg.breadth_share, self.cfg.window
        if self.scattered(ranked_rows):  # the hits disagree: as many of them as fit, alone
            share, window = self.cfg.scattered_share, 0
        if share > 0:  # windows of the ranked hits first, then widen them
            fill(int(share * budget), small=True, window=window)
        fill(budget, small=False)
        n_units = len(counted)

        rendered = [self.render(b) for b in blocks]
        kept = list(blocks)
        if self.additive:
            n_tokens = cost(state["total"], len(blocks))
        else:  # count exactly and drop trailing blocks while over budget
            sizes = [count_tokens(r) for r in rendered]
            while kept and sum(sizes) + self.sep_tokens * (len(sizes) - 1) > budget:
                kept.pop()
                rendered.pop()
                sizes.pop()
            n_tokens = count_tokens(self.cfg.separator.join(rendered))
        context = self.cfg.separator.join(rendered)
        doc_ids: list[str] = []
        node_ids: list[str] = []
        for b in kept:
            d = v.doc_id[b.container]
            if d not in doc_ids:
                doc_ids.append(d)
            node_ids.extend(self._node_ids(b))
        return Context(context, doc_ids, node_ids, n_tokens, len(kept), n_units, rendered,
                       [v.doc_id[b.container] for b in kept])

    def spread(self, ranked_rows: Sequence[int]) -> int:
        """Distinct places of the first ``spread_top`` ranked nodes: (document, page) of a node
        with a page (its first), else its section (a Markdown or text document has no pages)."""
        v = self.view
        places = set()
        for r in ranked_rows[: self.cfg.spread_top]:
            r = int(r)
            page = v.page[r]
            places.add((v.doc_id[r], page) if page is not None
                       else (v.doc_id[r], "section", int(v.container[r]) if v.container[r] >= 0 else r))
        return len(places)

    def scattered(self, ranked_rows: Sequence[int]) -> bool:
        """Whether the ranking's first nodes disagree on where the answer is (``spread_pages``)."""
        return bool(self.cfg.spread_pages) and self.spread(ranked_rows) >= self.cfg.spread_pages

    def _node_ids(self, block: Block) -> list[str]:
        """The block's content as node ids: the section when it is whole, else whole paragraphs
        by their id and the other sentences one by one, in document order."""
        v = self.view
        c = block.container
        if len(block.pos) == v.n_leaves(c) and v.has_children[c]:
            return [v.node_id[c]]
        out = []
        for g, members, whole in self._groups(block):
            if whole:
                out.append(v.node_id[g])
            else:
                out.extend(v.node_id[r] for r in members)
        return out
