"""From ranked hits to the context string: expansion, tree dedup, sibling merge, budget cut.

Each ranked node becomes a *unit*:

- a sentence (a leaf whose parent is a paragraph or section) becomes, with ``expand``:
  ``paragraph`` its whole parent; ``window`` the sentences within ``window`` positions of it in the
  same parent; ``none`` itself;
- any other node (a paragraph or a section hit) stays itself, whole.

Units go into blocks in rank order. A *full* block holds one node's whole content (a section
whose own text is just its title is rendered as its paragraphs, see TreeView.full_text); a *partial* block
holds some sentences of one parent, always rendered in document order (siblings from one
paragraph merge into one block, with " … " marking gaps). Tree dedup: a unit whose node or an
ancestor is already in a full block adds nothing; a full unit that covers earlier blocks
(its descendants, or a partial block of its own sentences) replaces them at the position of the
earliest one. So no text appears twice. A unit that would push the context over the token
budget is skipped (a too-long paragraph falls back to the sentence window, then the sentence)
and later, shorter units may still fill the budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import polars as pl

from kohaku.text.tokens import count_tokens

GAP = " … "


@dataclass
class RenderConfig:
    expand: str = "window"
    window: int = 1
    heading: str = "paragraphs"
    block_format: str = "[ref_id={doc_id}] {heading}{text}"
    heading_format: str = "{section}\n"
    separator: str = "\n---\n"


class TreeView:
    """Array view of the ``nodes`` table for fast parent/sibling lookups by row."""

    def __init__(self, nodes: pl.DataFrame) -> None:
        from kohaku.stages.embed import node_arrays

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
        self._tokens: dict[int, int] = {}
        self._anc: dict[int, tuple[int, ...]] = {}
        self._full: dict[int, str] = {}

    def ancestors(self, row: int) -> tuple[int, ...]:
        out = self._anc.get(row)
        if out is None:
            chain = []
            p = int(self.parent[row])
            while p >= 0:
                chain.append(p)
                p = int(self.parent[p])
            out = self._anc[row] = tuple(chain)
        return out

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


@dataclass
class Block:
    key: int  # full: the node's row; partial: the parent's row
    full: bool
    members: list[int] = field(default_factory=list)  # partial: sentence rows, document order
    tokens: int = 0
    alive: bool = True


@dataclass
class Context:
    context: str
    doc_ids: list[str]
    node_ids: list[str]
    n_tokens: int
    n_blocks: int
    n_units: int


class ContextBuilder:
    def __init__(self, view: TreeView, cfg: RenderConfig) -> None:
        if cfg.expand not in ("paragraph", "window", "none"):
            raise ValueError(f"retrieve.expand={cfg.expand!r}: use paragraph, window or none")
        if cfg.heading not in ("none", "paragraphs", "all"):
            raise ValueError(f"retrieve.heading={cfg.heading!r}: use none, paragraphs or all")
        self.view = view
        self.cfg = cfg
        self.sep_tokens = count_tokens(cfg.separator)
        self.gap_tokens = count_tokens(GAP)
        self._full_tokens: dict[int, int] = {}
        self._head_tokens: dict[tuple[int, int], int] = {}
        # no unit is smaller than a header plus one token: stop scanning once that cannot fit
        self.additive = self._is_additive()
        self.min_unit = count_tokens(cfg.block_format.format(
            doc_id="x", heading="", text="", section="", page="")) + 1

    def _is_additive(self) -> bool:
        """True when a context's token count is the sum of its parts (text is joined to the
        format by whitespace or punctuation), so counts need not be redone on the final text."""
        fmt, sep = self.cfg.block_format, self.cfg.separator
        for text in ("a", "a b", "!a!", "ab_c1"):
            for heading in ("", "Head\n"):
                kw = dict(doc_id="d1", section="Head", page=3, heading=heading)
                block = fmt.format(text=text, **kw)
                if count_tokens(block) != count_tokens(fmt.format(text="", **kw)) + count_tokens(text):
                    return False
                if count_tokens(block + sep + block) != 2 * count_tokens(block) + count_tokens(sep):
                    return False
        return True

    # ------------------------------------------------------------------------------ rendering
    def _heading(self, row: int, text: str, full: bool) -> str:
        mode = self.cfg.heading
        if mode == "none" or (mode == "paragraphs" and not full):
            return ""
        v = self.view
        section = v.section[row]
        if not section or text.lstrip().startswith(section.strip()):
            return ""
        return self.cfg.heading_format.format(section=section, page=v.page[row], doc_id=v.doc_id[row])

    def render(self, block: Block) -> str:
        v = self.view
        if block.full:
            text = v.full_text(block.key)
        else:
            parts = []
            prev = None
            for r in block.members:
                if prev is not None:
                    parts.append(" " if v.sib_pos[r] == v.sib_pos[prev] + 1 else GAP)
                parts.append(v.text[r].strip())
                prev = r
            text = "".join(parts)
        heading = self._heading(block.key, text, block.full)
        return self.cfg.block_format.format(
            doc_id=v.doc_id[block.key], heading=heading, text=text,
            section=v.section[block.key], page=v.page[block.key],
        )

    def _tokens(self, block: Block) -> int:
        """Token count of the rendered block; partial blocks are summed from cached parts (the
        count is additive over whitespace-joined pieces; ``build`` re-checks the final text)."""
        if block.full:
            n = self._full_tokens.get(block.key)
            if n is None:
                n = self._full_tokens[block.key] = count_tokens(self.render(block))
            return n
        v = self.view
        members = block.members
        head_key = (block.key, members[0])
        head = self._head_tokens.get(head_key)
        if head is None:
            text = v.text[members[0]].strip()
            heading = self._heading(block.key, text, False)
            head = self._head_tokens[head_key] = count_tokens(self.cfg.block_format.format(
                doc_id=v.doc_id[block.key], heading=heading, text="",
                section=v.section[block.key], page=v.page[block.key]))
        n = head
        prev = None
        for r in members:
            n += v.text_tokens(r)
            if prev is not None and v.sib_pos[r] != v.sib_pos[prev] + 1:
                n += self.gap_tokens
            prev = r
        return n

    # ------------------------------------------------------------------------------- building
    def build(self, ranked_rows: Sequence[int], budget: int) -> Context:
        v = self.view
        blocks: list[Block] = []
        full_at: dict[int, int] = {}  # node row -> block index of its full block
        partial_at: dict[int, int] = {}  # parent row -> block index of its partial block
        under: dict[int, list[int]] = {}  # node row -> blocks lying inside that node
        total = 0  # tokens of alive blocks, separators excluded
        n_alive = 0
        n_units = 0

        def cost(tokens_delta: int, alive_after: int) -> int:
            return total + tokens_delta + self.sep_tokens * max(alive_after - 1, 0)

        def covered(row: int) -> bool:
            if row in full_at:
                return True
            return any(a in full_at for a in v.ancestors(row))

        def register(idx: int, row: int, include_self: bool) -> None:
            chain = ((row,) if include_self else ()) + v.ancestors(row)
            for a in chain:
                under.setdefault(a, []).append(idx)

        def try_full(row: int) -> bool:
            nonlocal total, n_alive
            inside = [i for i in under.get(row, []) if blocks[i].alive]
            block = Block(key=row, full=True)
            block.tokens = self._tokens(block)
            delta = block.tokens - sum(blocks[i].tokens for i in inside)
            alive_after = n_alive + 1 - len(inside)
            if cost(delta, alive_after) > budget:
                return False
            if inside:
                first = min(inside)
                for i in inside:
                    blocks[i].alive = False
                    if not blocks[i].full:
                        partial_at.pop(blocks[i].key, None)
                    else:
                        full_at.pop(blocks[i].key, None)
                blocks[first] = block  # take the place of the earliest covered block
                idx = first
            else:
                blocks.append(block)
                idx = len(blocks) - 1
            full_at[row] = idx
            register(idx, row, include_self=False)
            total += delta
            n_alive = alive_after
            return True

        def try_partial(parent: int, members: list[int]) -> bool:
            nonlocal total, n_alive
            idx = partial_at.get(parent)
            if idx is not None:
                old = blocks[idx]
                merged = sorted(set(old.members) | set(members), key=lambda r: v.sib_pos[r])
                if len(merged) == len(old.members):
                    return True  # nothing new
                block = Block(key=parent, full=False, members=merged)
                block.tokens = self._tokens(block)
                delta = block.tokens - old.tokens
                if cost(delta, n_alive) > budget:
                    return False
                blocks[idx] = block
                total += delta
                return True
            block = Block(key=parent, full=False, members=sorted(members, key=lambda r: v.sib_pos[r]))
            block.tokens = self._tokens(block)
            if cost(block.tokens, n_alive + 1) > budget:
                return False
            blocks.append(block)
            idx = len(blocks) - 1
            partial_at[parent] = idx
            register(idx, parent, include_self=True)
            total += block.tokens
            n_alive += 1
            return True

        def window(row: int, parent: int, w: int) -> list[int]:
            kids = v.children[parent]
            pos = int(v.sib_pos[row])
            return kids[max(pos - w, 0) : pos + w + 1].tolist()

        for row in ranked_rows:
            row = int(row)
            if cost(self.min_unit, n_alive + 1) > budget:
                break  # the budget is full
            if covered(row):
                continue
            n_units += 1
            parent = int(v.parent[row])
            is_sentence = not v.has_children[row] and parent >= 0 and v.level[parent] > 0
            if not is_sentence:
                try_full(row)
                continue
            if covered(parent):
                continue
            mode = self.cfg.expand
            if mode == "paragraph" and try_full(parent):
                continue
            if mode in ("paragraph", "window") and self.cfg.window > 0:
                if try_partial(parent, window(row, parent, self.cfg.window)):
                    continue
            try_partial(parent, [row])

        alive = [b for b in blocks if b.alive]
        rendered = [self.render(b) for b in alive]
        context = self.cfg.separator.join(rendered)
        if self.additive:
            n_tokens = total + self.sep_tokens * max(len(alive) - 1, 0)
        else:  # count exactly and drop trailing blocks while over budget
            sizes = [count_tokens(r) for r in rendered]
            while alive and sum(sizes) + self.sep_tokens * (len(sizes) - 1) > budget:
                alive.pop()
                rendered.pop()
                sizes.pop()
            context = self.cfg.separator.join(rendered)
            n_tokens = count_tokens(context)
        doc_ids: list[str] = []
        node_ids: list[str] = []
        seen: set[str] = set()
        for b in alive:
            d = v.doc_id[b.key]
            if d not in seen:
                seen.add(d)
                doc_ids.append(d)
            if b.full:
                node_ids.append(v.node_id[b.key])
            else:
                node_ids.extend(v.node_id[r] for r in b.members)
        return Context(context, doc_ids, node_ids, n_tokens, len(alive), n_units)
