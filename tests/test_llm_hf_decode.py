"""hf backend decode paths on a tiny random Llama (no model files): the kv-cache loop gives the
same tokens as ``model.generate``, prefills each distinct prompt once, and drops finished rows."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from kohaku.llm.hf import HFBackend, HFConfig, RowSampler, _Progress, _Row  # noqa: E402

EOS = 2


class _Tok:
    pad_token_id = 0


def tiny_backend(decoder: str) -> HFBackend:
    from transformers import LlamaConfig, LlamaForCausalLM

    if not hasattr(transformers, "StaticCache"):
        pytest.skip("transformers without StaticCache")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      eos_token_id=EOS, pad_token_id=0, bos_token_id=1,
                      initializer_range=0.3)   # peaked attention: positions and masks matter
    model = LlamaForCausalLM(cfg).eval()
    be = HFBackend(HFConfig(name="tiny", backend="hf", model="tiny", device="cpu", decoder=decoder))
    be._model, be._tok, be._eos_ids = model, _Tok(), [EOS]
    return be


def rows() -> list[_Row]:
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, 97, (n,), generator=g).tolist() for n in (9, 23, 15)]
    out = [_Row(req=0, sample=0, ids=prompts[0], seed=0, temperature=0.0, top_p=1.0, max_tokens=6),
           _Row(req=1, sample=0, ids=prompts[1], seed=7, temperature=0.9, top_p=0.9, max_tokens=20),
           _Row(req=1, sample=1, ids=prompts[1], seed=8, temperature=0.9, top_p=0.9, max_tokens=20),
           _Row(req=2, sample=0, ids=prompts[2], seed=0, temperature=0.0, top_p=1.0, max_tokens=12)]
    return out


def decode(be: HFBackend, method: str):
    rs = rows()
    sampler = RowSampler(rs, [EOS], vocab_size=97)
    gen = getattr(be, method)(rs, sampler)
    # tokens up to and including the first end-of-sequence token (generate pads after it)
    return [toks[: toks.index(EOS) + 1] if EOS in toks else toks for toks in gen], sampler.forced


def test_loop_matches_generate_and_shares_prefill():
    loop_be = tiny_backend("loop")
    prefill_lengths = []
    model = loop_be._model
    hook = model.register_forward_pre_hook(
        lambda mod, args, kwargs: prefill_lengths.append(kwargs["input_ids"].shape[1]),
        with_kwargs=True)
    loop, loop_forced = decode(loop_be, "_decode_loop")
    hook.remove()
    gen, gen_forced = decode(tiny_backend("generate"), "_decode_generate")
    assert loop == gen and loop_forced == gen_forced
    # rows 1 and 2 share one prompt: 3 prefills for 4 rows, then one-token decode steps
    assert sorted(n for n in prefill_lengths if n > 1) == [9, 15, 23]
    # row 0 stops at its own max_tokens (6) while others go on: it ends forced, the batch continues
    assert len(loop[0]) == 7 and 0 in loop_forced
    assert max(len(t) for t in loop) > 7
    # two samples of one prompt with different seeds differ
    assert loop[1] != loop[2]


def test_loop_drops_finished_rows_from_the_cache():
    be = tiny_backend("loop")
    batch_sizes = []
    hook = be._model.register_forward_pre_hook(
        lambda mod, args, kwargs: batch_sizes.append(kwargs["input_ids"].shape[0])
        if kwargs["input_ids"].shape[1] == 1 else None, with_kwargs=True)
    decode(be, "_decode_loop")
    hook.remove()
    assert batch_sizes[0] == 4 and batch_sizes[-1] < 4       # rows leave as they finish
    assert batch_sizes == sorted(batch_sizes, reverse=True)


def test_decoder_config_is_checked():
    with pytest.raises(ValueError, match="decoder"):
        HFConfig(name="x", backend="hf", model="m", decoder="fast").validate()


def test_loop_cache_grows_as_rows_write_and_matches_generate(monkeypatch):
    import kohaku.llm.hf as hf

    monkeypatch.setattr(hf, "CACHE_GROW", 4)
    be = tiny_backend("loop")
    lengths = []
    hook = be._model.register_forward_pre_hook(
        lambda mod, args, kwargs: lengths.append(kwargs["attention_mask"].shape[-1])
        if kwargs["input_ids"].shape[1] == 1 else None, with_kwargs=True)
    loop, loop_forced = decode(be, "_decode_loop")
    hook.remove()
    gen, gen_forced = decode(tiny_backend("generate"), "_decode_generate")
    assert loop == gen and loop_forced == gen_forced
    width = 23                                    # the longest prompt of rows()
    assert lengths[0] == width + 4                # not width + max_new (20)
    assert sorted(set(lengths)) == list(range(width + 4, max(lengths) + 1, 4))
    # step s writes position width + s, so the cache always holds it and at most 3 spare positions
    assert all(width + s < n <= width + s + 4 for s, n in enumerate(lengths))


def test_loop_reports_prefill_and_decode_to_progress():
    be = tiny_backend("loop")
    rs = rows()
    progress = _Progress("tiny", rs, [list(range(len(rs)))], 3, show=False)
    gen = be._decode_loop(rs, RowSampler(rs, [EOS], vocab_size=97), progress)
    t = progress.timings()
    assert t["prefill_tokens"] == 9 + 23 + 15     # the shared prompt once
    assert t["decoded_tokens"] == sum(len(g) for g in gen)
    assert t["decode_steps"] == max(len(g) for g in gen)
    assert t["prefill_seconds"] > 0 and t["decode_seconds"] > 0
    assert len(progress.done_rows) == 4 and progress.left == {0: 0, 1: 0, 2: 0}


def test_progress_eta_from_rates():
    rs = rows()                                   # prompts of 9, 23 (two rows) and 15 tokens
    p = _Progress("tiny", rs, [[0, 1, 2], [3]], 3, show=False)
    assert p.prompt_total == 9 + 23 + 15 and p.eta() is None
    p.prefilled(32, 2.0)                          # 16 prompt tokens/s; 15 tokens left
    assert p.eta() == pytest.approx(15 / 16)      # decode time unknown yet
    budget = (6 + 20 + 20 + 12) / 4               # mean max_tokens
    p.decoding(3)
    p.stepped(1.0, tokens=3)                      # 3 tokens/s; nothing finished: half the budget
    assert p.eta() == pytest.approx(15 / 16 + (budget + 3 * (budget - 1) / 2) / 3)
    p.stepped(2.0, tokens=6)                      # 9 tokens in 3 s
    p.row_done(rs[0], 3)                          # 2 live rows at 3 tokens, 1 row in a later batch
    assert p.eta() == pytest.approx(15 / 16 + (3 + 2 * (budget - 3) / 2) * 3 / 9)
    p.stepped(1.0, tokens=2)
    p.row_done(rs[1], 4)                          # the live row (4 written) expects nothing past 4
    assert p.left == {0: 0, 1: 1, 2: 1}           # request 1 waits for its second sample
    assert p.eta() == pytest.approx(15 / 16 + (3.5 + (budget - 4) / 2) * 4 / 11)
