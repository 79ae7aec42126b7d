"""hf backend decode paths on a tiny random Llama (no model files): the kv-cache loop gives the
same tokens as ``model.generate``, prefills each distinct prompt once, and drops finished rows."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from kohaku.llm.hf import HFBackend, HFConfig, RowSampler, _Row  # noqa: E402

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
