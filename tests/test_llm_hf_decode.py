"""hf backend decode loops on a tiny random Llama (no model files).

Continuous batching (kohaku/llm/hf/decode.py) must give every row the tokens it gets decoded
alone, while rows leave and join mid-batch, a row stops at its max_tokens, the n samples of one
prompt share one prefill, and a grammar row decodes next to an unconstrained one."""

from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
xgr = pytest.importorskip("xgrammar")

from kohaku.llm.hf import HFBackend, HFConfig  # noqa: E402
from kohaku.llm.hf.decode import SlotCache, decode_generate  # noqa: E402
from kohaku.llm.hf.progress import Progress  # noqa: E402
from kohaku.llm.hf.sampler import Closers, Row, RowSampler  # noqa: E402

EOS = 2
# token texts: 0 pad, 1 bos (special: empty), 2 eos, then single characters, then pairs
CHARS = list('{}[]":, abcdefghijklmnopqrstuvwxyz0123456789')
VOCAB = ["", "", "</s>"] + CHARS + [a + b for a in "aeiou" for b in "nrstlmdcpg"][: 97 - 3 - len(CHARS)]
assert len(VOCAB) == 97


class _Tok:
    pad_token_id = 0

    def decode(self, ids, skip_special_tokens=True):
        return "".join(VOCAB[i] for i in ids if i > 2)


def tiny_backend(decoder: str = "loop", batch_size: int = 2) -> HFBackend:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      eos_token_id=EOS, pad_token_id=0, bos_token_id=1,
                      initializer_range=0.3)   # peaked attention: positions and masks matter
    model = LlamaForCausalLM(cfg).eval()
    be = HFBackend(HFConfig(name="tiny", backend="hf", model="tiny", device="cpu", decoder=decoder,
                            batch_size=batch_size))
    be._model, be._tok, be._eos_ids = model, _Tok(), [EOS]
    return be


def prompt(n: int, seed: int) -> list[int]:
    return torch.randint(3, 97, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def make_rows() -> list[Row]:
    """Seven rows of five requests: greedy and sampled, a request with two samples, max_tokens
    from 4 to 24 (the eos token of this random model is rare: most rows run to their limit)."""
    spec = [  # (req, sample, prompt length, seed, temperature, max_tokens)
        (0, 0, 9, 0, 0.0, 6), (1, 0, 23, 7, 0.9, 20), (1, 1, 23, 8, 0.9, 20),
        (2, 0, 15, 0, 0.0, 12), (3, 0, 31, 3, 0.8, 4), (4, 0, 5, 0, 0.0, 24), (4, 1, 5, 1, 0.7, 24)]
    return [Row(req=q, sample=k, ids=prompt(n, 100 + q), seed=s, temperature=t, top_p=0.9,
                max_tokens=m) for q, k, n, s, t, m in spec]


def alone(row: Row) -> list[int]:
    """The row's tokens decoded by itself with model.generate (no padding, no other rows)."""
    be = tiny_backend("generate")
    fresh = Row(**{**row.__dict__, "text": "", "completion_tokens": 0})
    (st,) = decode_generate(be._model, [fresh], RowSampler([EOS], 97), 0, [EOS], "cpu")
    return st.tokens


def simulated_steps(lengths: list[int], slots: int) -> list[int]:
    """Rows per step of an ideal continuous batcher: a row that finishes leaves, the next in the
    queue takes its slot before the next step."""
    queue, live, steps = list(lengths), [], []
    while queue or live:
        while queue and len(live) < slots:
            live.append(queue.pop(0))
        steps.append(len(live))
        live = [n - 1 for n in live if n > 1]
    return steps


def run_loop(be: HFBackend, rows: list[Row], progress: Progress | None = None):
    events = []
    hook = be._model.register_forward_pre_hook(
        lambda mod, args, kwargs: events.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True)
    sampler = RowSampler([EOS], 97, slots=be.cfg.batch_size)
    chose = []
    choose = sampler.choose
    sampler.choose = lambda states, logits: (chose.append(len(states)), choose(states, logits))[1]
    order = list(range(len(rows)))
    try:
        states = be._decode_loop(rows, order, sampler, progress)
    finally:
        hook.remove()
    return states, events, chose


def test_rows_join_and_leave_and_each_gets_its_own_tokens(monkeypatch):
    rows = make_rows()
    be = tiny_backend(batch_size=3)
    progress = Progress("tiny", rows, show=False)
    moves = []
    move = SlotCache.move
    monkeypatch.setattr(SlotCache, "move", lambda self, src, dst: (moves.append((src, dst)),
                                                                   move(self, src, dst))[1])
    states, events, chose = run_loop(be, rows, progress)
    # a row that finished before the last live slot left a hole: the last slot moved into it
    assert moves and all(src > dst for src, dst in moves)
    for r, st in zip(rows, states):
        assert st.tokens == alone(r), f"row {r.req}.{r.sample}"
    lengths = [len(st.tokens) for st in states]
    # every step decodes full slots until the queue runs dry: the ideal schedule, step for step
    assert chose == simulated_steps(lengths, 3)
    assert len(chose) < sum(lengths) and sum(chose) == sum(lengths)
    # prompts are prefilled between decode steps (rows join mid-batch), each distinct one once
    prefills = [i for i, shape in enumerate(events) if shape[1] > 1]
    assert [events[i][1] for i in prefills] == [9, 23, 15, 31, 5]
    assert prefills[-1] > prefills[0] + 3 and any(events[i][1] == 1 for i in range(prefills[-1]))
    # the decode forwards run on the rows still live after the step's choice
    assert all(shape[0] <= 3 for shape in events if shape[1] == 1)
    t = progress.timings()
    assert t["prefill_tokens"] == 9 + 23 + 15 + 31 + 5
    assert t["decode_steps"] == len(chose) and t["decoded_tokens"] == sum(lengths)
    assert t["decode_rows"] == sum(lengths) and t["kv_positions"] > 0
    assert len(progress.done_rows) == 7 and set(progress.left.values()) == {0}


def test_row_at_max_tokens_ends_forced_and_the_batch_goes_on():
    rows = make_rows()
    be = tiny_backend(batch_size=4)
    states, _, _ = run_loop(be, rows)
    short = states[4]                                # max_tokens 4
    assert len(short.tokens) == 4 and short.forced and EOS not in short.tokens
    be._finish(short, 0.0)
    assert short.row.finish == "length" and short.row.completion_tokens == 4
    assert max(len(st.tokens) for st in states) > 4  # the others went on


def test_samples_of_one_prompt_share_a_prefill_and_differ_by_seed():
    rows = make_rows()
    be = tiny_backend(batch_size=1)                  # one slot: the second sample joins later
    states, events, _ = run_loop(be, rows)
    assert [n for _, n in events if n > 1] == [9, 23, 15, 31, 5]
    assert states[1].tokens != states[2].tokens      # seeds 7 and 8
    assert states[1].tokens == alone(rows[1]) and states[2].tokens == alone(rows[2])


def test_slot_cache_moves_rows_and_masks_their_own_lengths():
    cache = SlotCache(slots=3, capacity=8, device="cpu")
    layer = [(torch.arange(2 * 4 * 5, dtype=torch.float32).reshape(1, 2, 5, 4),) * 2]
    short = [(torch.ones(1, 2, 2, 4),) * 2]
    cache.load(0, layer)
    cache.load(1, short)
    cache.load(2, layer)
    cache.move(2, 1)                                 # row 1 left: the last slot fills its hole
    assert cache.lengths.tolist() == [5, 5, 5] and torch.equal(cache.keys[0][1, :, :, :5], layer[0][0][0].transpose(-1, -2))
    cache.load(1, short)
    mask, pos, read = cache.step(2)
    assert mask.shape == (2, 1, 1, 6) and mask[1, 0, 0].tolist() == [True] * 3 + [False] * 3
    assert pos.tolist() == [[5], [2]] and read == 6 + 3
    k, _ = cache.update(torch.full((2, 2, 1, 4), 7.0), torch.full((2, 2, 1, 4), 7.0), 0)
    assert k.shape == (2, 2, 6, 4) and bool((k[0, :, 5] == 7).all()) and bool((k[1, :, 2] == 7).all())
    cache.advance(2)
    assert cache.lengths.tolist() == [6, 3, 5]


def grammar_and_closers():
    info = xgr.TokenizerInfo(VOCAB, vocab_size=97, stop_token_ids=[EOS])
    schema = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 40},
                                               "b": {"type": "array", "items": {"type": "string"}}},
              "required": ["a", "b"]}
    grammar = xgr.GrammarCompiler(info).compile_json_schema(json.dumps(schema), any_whitespace=False)
    ids = {ch: VOCAB.index(ch) for ch in ('"', "]", "}", ",")}
    closing = Closers(texts=VOCAB, ids=ids, lengths=torch.tensor([float(len(t)) for t in VOCAB]))
    return grammar, closing


def test_a_grammar_row_beside_an_unconstrained_row():
    grammar, closing = grammar_and_closers()
    rows = make_rows()[:2]
    rows[0].grammar, rows[0].max_tokens, rows[0].reserve = grammar, 30, 12   # cut short: must close
    be = tiny_backend(batch_size=2)
    sampler = RowSampler([EOS], 97, closing=closing, slots=2)
    states = be._decode_loop(rows, [0, 1], sampler)
    for st in states:
        be._finish(st, 0.0)
    value = json.loads(rows[0].text)
    assert set(value) == {"a", "b"} and isinstance(value["b"], list)
    assert rows[0].completion_tokens <= 30
    assert states[1].tokens == alone(rows[1])        # the grammar row does not touch it


def test_generate_decoder_gives_the_loops_tokens():
    rows = make_rows()
    loop, _, _ = run_loop(tiny_backend(batch_size=3), rows)
    be = tiny_backend("generate", batch_size=3)
    gen = be._decode(make_rows(), list(range(7)), Progress.silent(make_rows()))
    assert [st.tokens for st in gen] == [st.tokens for st in loop]
    assert [st.forced for st in gen] == [st.forced for st in loop]


def test_decoder_config_is_checked():
    with pytest.raises(ValueError, match="decoder"):
        HFConfig(name="x", backend="hf", model="m", decoder="fast").validate()


def test_memory_traffic_figures():
    be = tiny_backend()
    # 2 layers x K and V x 2 kv heads x head dim 16 x 4 bytes
    assert be.kv_bytes_per_position() == 2 * 2 * 2 * 16 * 4
    n = sum(p.numel() for p in be._model.parameters())
    assert be.weight_bytes() == 4 * n                # tied lm_head counted once (parameters() dedups)
    assert be.weight_dtype == "float32"
    # 2 flops per weight per row; per position: 4 x 4 heads x 16 dims x 2 layers
    assert be.step_flops(3, 100) == 2 * n * 3 + 4 * 4 * 16 * 2 * 100


def test_progress_eta_from_rates():
    rs = make_rows()[:4]                          # prompts of 9, 23 (two rows) and 15 tokens
    p = Progress("tiny", rs, show=False)
    assert p.prompt_total == 9 + 23 + 15 and p.eta() is None
    p.prefilled(32, 2.0)                          # 16 prompt tokens/s; 15 tokens left
    assert p.eta() == pytest.approx(15 / 16)      # decode time unknown yet
    budget = (6 + 20 + 20 + 12) / 4               # mean max_tokens
    p.decoding(3)
    p.stepped(1.0, tokens=3)                      # 3 tokens/s; nothing finished: half the budget
    assert p.eta() == pytest.approx(15 / 16 + (budget + 3 * (budget - 1) / 2) / 3)
    p.stepped(2.0, tokens=6)                      # 9 tokens in 3 s
    p.row_done(rs[0], 3)                          # 2 live rows at 3 tokens, 1 row not started
    assert p.eta() == pytest.approx(15 / 16 + (3 + 2 * (budget - 3) / 2) * 3 / 9)
    p.stepped(1.0, tokens=2)
    p.row_done(rs[1], 4)                          # the live row (4 written) expects nothing past 4
    assert p.left == {0: 0, 1: 1, 2: 1}           # request 1 waits for its second sample
    assert p.eta() == pytest.approx(15 / 16 + (3.5 + (budget - 4) / 2) * 4 / 11)
    assert math.isclose(p.timings()["decode_seconds"], 4.0)
