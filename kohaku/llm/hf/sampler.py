"""Choosing each row's next token: the JSON grammar, the closing of a JSON answer in time, the
length limit and per-row seeded sampling.

A *row* is one sample of one request. Every row carries its own decoding state
(:class:`RowState`: grammar matcher, random generator, where it is in its JSON text, tokens
written), so a row's tokens do not depend on which rows share its step or when it joined the
batch (up to float rounding of batched matrix products). The decode loops
(:mod:`kohaku.llm.hf.decode`) call :meth:`RowSampler.choose` with the logits of the rows live
in a step and :meth:`RowSampler.accept` with the token each row got.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)


@dataclass
class Row:
    """One sample of one request, and what decoding it produced."""

    req: int
    sample: int
    ids: list[int]
    seed: int
    temperature: float
    top_p: float
    max_tokens: int
    grammar: Any = None
    reserve: int = 0                # last tokens in which the row is steered to close its JSON
    text: str = ""
    completion_tokens: int = 0
    finish: str = "stop"
    seconds: float = 0.0


def minimal_instance(schema: dict[str, Any]) -> Any:
    """The smallest value a JSON schema accepts (required keys only, empty strings and lists)."""
    if "enum" in schema and schema["enum"]:
        return schema["enum"][0]
    branches = schema.get("anyOf") or schema.get("oneOf")
    if branches:   # the branch whose smallest instance is shortest (an answer kind or its token)
        return min((minimal_instance(b) for b in branches), key=lambda v: len(json.dumps(v)))
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties", {})
        return {k: minimal_instance(props.get(k, {})) for k in schema.get("required", [])}
    if kind == "array":
        item = minimal_instance(schema.get("items", {}))
        return [item] * int(schema.get("minItems", 0))
    if kind == "string":
        return "x" * int(schema.get("minLength", 0))
    if kind in ("number", "integer"):
        return 0
    if kind == "boolean":
        return False
    return None


@dataclass
class Closers:
    texts: list[str]          # decoded text of every token id
    ids: dict[str, int]       # '"', ']', '}', ',' -> the id of the token that is just that character
    lengths: Any = None       # tensor: characters per token


class JsonState:
    """Where a row is in its JSON text: inside a string or not, and the open brackets."""

    def __init__(self) -> None:
        self.in_string = False
        self.escape = False
        self.stack: list[str] = []

    def feed(self, text: str) -> None:
        for ch in text:
            if self.in_string:
                if self.escape:
                    self.escape = False
                elif ch == "\\":
                    self.escape = True
                elif ch == '"':
                    self.in_string = False
            elif ch == '"':
                self.in_string = True
            elif ch in "[{":
                self.stack.append(ch)
            elif ch in "]}" and self.stack:
                self.stack.pop()


@dataclass
class RowState:
    """Decoding state of one row (see :meth:`RowSampler.start`)."""

    row: Row
    generator: Any
    matcher: Any = None
    json: JsonState = field(default_factory=JsonState)
    tokens: list[int] = field(default_factory=list)   # generated so far
    done: bool = False
    forced: bool = False        # ended by its length limit or a grammar rejection: finish "length"


class RowSampler:
    """Per-row grammar mask, per-row length limit, per-row seeded sampling.

    - A grammar row's logits are masked by its xgrammar matcher; once the grammar is complete the
      row can only emit end-of-sequence.
    - Greedy rows (temperature 0) take the argmax; sampling rows draw with temperature/top_p from
      their own ``torch.Generator`` seeded with the row's seed (``seed + sample_index``).
    - A row that has written its ``max_tokens`` tokens is done (``forced``, finish "length").
    - Closing the JSON in time: in the last ``reserve`` tokens of a grammar row (what the smallest
      instance of its schema takes, at most half its max_tokens) the row is steered to finish: an
      open string gets its closing quote, an open array its ']', an object its '}' (or ',' to move
      on to the next required key) whenever the grammar allows that token; the grammar itself
      writes the remaining keys. So an answer that would run past max_tokens still ends as valid
      JSON, with shorter fields.
    """

    def __init__(self, eos_ids: list[int], vocab_size: int, closing: Closers | None = None,
                 slots: int = 1):
        self.closing = closing
        self.eos = eos_ids[0] if eos_ids else 0
        self.eos_ids = set(eos_ids)
        self.vocab_size = vocab_size
        self.slots = slots
        self._bitmask = None

    def start(self, row: Row) -> RowState:
        import torch

        g = torch.Generator()
        g.manual_seed(int(row.seed) & 0xFFFF_FFFF_FFFF)
        matcher = None
        if row.grammar is not None:
            import xgrammar as xgr

            matcher = xgr.GrammarMatcher(row.grammar)
        return RowState(row=row, generator=g, matcher=matcher)

    def accept(self, st: RowState, tok: int) -> None:
        """Record the token row ``st`` got; marks it done at end-of-sequence, at its length limit
        or when its grammar rejects the token."""
        st.tokens.append(tok)
        if tok in self.eos_ids:
            st.done = True
            return
        m = st.matcher
        if m is not None and not m.is_terminated() and not m.accept_token(tok):
            log.warning("grammar rejected token %d of a row of request %d; ending the row", tok,
                        st.row.req)
            st.done = st.forced = True
            return
        if self.closing is not None and tok < len(self.closing.texts):
            st.json.feed(self.closing.texts[tok])
        if len(st.tokens) >= st.row.max_tokens:
            st.done = st.forced = True

    def choose(self, states: list[RowState], logits) -> list[int]:
        """The next token of each row in ``states`` from its logits (``[len(states), vocab]``,
        float32; modified in place). No row may be done."""
        import torch

        scores = logits
        if any(st.matcher is not None for st in states):
            import xgrammar as xgr

            if self._bitmask is None or self._bitmask.shape[0] < len(states):
                self._bitmask = xgr.allocate_token_bitmask(max(self.slots, len(states)),
                                                           self.vocab_size)
            active = []
            for b, st in enumerate(states):
                if st.matcher is not None and not st.matcher.is_terminated():
                    st.matcher.fill_next_token_bitmask(self._bitmask, b)
                    active.append(b)
            if active:
                cpu = scores.device.type != "cuda"
                target = scores.cpu() if cpu else scores
                xgr.apply_token_bitmask_inplace(target, self._bitmask[: len(states)].to(target.device),
                                                vocab_size=self.vocab_size, indices=active)
                scores = target.to(scores.device) if cpu else target
        neg = torch.finfo(scores.dtype).min
        for b, st in enumerate(states):
            r = st.row
            if (self.closing is not None and r.grammar is not None
                    and len(st.tokens) >= r.max_tokens - min(r.reserve, r.max_tokens // 2)):
                choice = self._closing_token(st, scores[b], neg)
                if choice is not None:
                    keep = scores[b, choice].clone()
                    scores[b].fill_(neg)
                    scores[b, choice] = keep
        chosen = scores.argmax(dim=-1).tolist()
        for b, st in enumerate(states):
            r = st.row
            if r.temperature > 0:
                probs = torch.softmax(scores[b] / r.temperature, dim=-1)
                if r.top_p < 1.0:
                    sp, si = torch.sort(probs, descending=True)
                    keep = torch.cumsum(sp, dim=-1) - sp < r.top_p
                    keep[0] = True
                    filtered = torch.zeros_like(probs)
                    filtered[si[keep]] = sp[keep]
                    probs = filtered / filtered.sum()
                chosen[b] = int(torch.multinomial(probs.cpu(), 1, generator=st.generator).item())
        return chosen

    def _closing_token(self, st: RowState, row_scores, neg: float) -> int | None:
        """The token that brings a row closest to a complete JSON value: the closing quote,
        bracket, brace or comma when the grammar allows it, else the longest allowed token."""
        js = st.json
        ids = self.closing.ids

        def allowed(ch: str) -> int | None:
            tok = ids.get(ch)
            return tok if tok is not None and tok < row_scores.shape[0] and row_scores[tok] > neg / 2 else None

        choice = None
        if js.in_string and not js.escape:
            choice = allowed('"')
        elif not js.in_string:
            top = js.stack[-1] if js.stack else None
            if top == "[":
                choice = allowed("]")
            elif top == "{":
                choice = allowed("}") if allowed("}") is not None else allowed(",")
        if choice is None:
            # text the grammar dictates (key names, separators): take it in the fewest tokens
            import torch

            mask = row_scores > neg / 2
            lengths = self.closing.lengths[: row_scores.shape[0]].to(row_scores.device)
            if bool(mask.any()):
                choice = int(torch.where(mask, lengths, torch.full_like(lengths, -1.0)).argmax())
        return choice
