"""Generation cache: hits, partial hits (only missing samples generated), resume after a crash."""

from __future__ import annotations

import json

import polars as pl
import pytest

from kohaku.llm import BackendError, ChatRequest, Counters
from kohaku.llm.base import sent_params, short_hash
from kohaku.llm.cache import GenerationCache, generate_cached, params_hash
from kohaku.llm.fake import FakeBackend


def responder(req: ChatRequest, seed: int) -> str:
    return json.dumps({"q": req.messages[-1]["content"], "seed": seed})


def req(text: str, n: int = 1, seed: int = 100, temperature: float = 0.7) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": text}], n=n, seed=seed,
                       temperature=temperature, max_tokens=16)


def seeds(samples) -> list[int]:
    return [json.loads(s.text)["seed"] for s in samples]


def test_full_hit_calls_no_model(tmp_path):
    fake = FakeBackend(responder)
    cache = GenerationCache(tmp_path, fake.identity)
    c1 = Counters()
    first = generate_cached(fake, [req("a", n=2), req("b")], cache, c1)
    assert (c1.model_calls, c1.prompts, c1.samples, c1.cache_hits) == (1, 2, 3, 0)
    assert [seeds(s) for s in first] == [[100, 101], [100]]
    assert not any(s.cached for ss in first for s in ss)
    # a new process: reopen from disk
    cache2 = GenerationCache(tmp_path, fake.identity)
    assert len(cache2) == 3
    c2 = Counters()
    again = generate_cached(fake, [req("a", n=2), req("b")], cache2, c2)
    assert (c2.model_calls, c2.prompts, c2.cache_hits) == (0, 0, 3)
    assert len(fake.calls) == 1
    assert [[s.text for s in ss] for ss in again] == [[s.text for s in ss] for ss in first]
    assert all(s.cached for ss in again for s in ss)


def test_partial_hit_generates_only_missing_samples_with_their_own_seeds(tmp_path):
    fake = FakeBackend(responder)
    cache = GenerationCache(tmp_path, fake.identity)
    generate_cached(fake, [req("a", n=2)], cache, Counters())
    c = Counters()
    out = generate_cached(fake, [req("a", n=5), req("new", n=1)], cache, c)
    sent = fake.calls[-1]
    assert [(r.messages[-1]["content"], r.n, r.seed) for r in sent] == [("a", 3, 102), ("new", 1, 100)]
    assert seeds(out[0]) == [100, 101, 102, 103, 104]
    assert [s.cached for s in out[0]] == [True, True, False, False, False]
    assert (c.cache_hits, c.samples, c.prompts, c.model_calls) == (2, 4, 2, 1)
    # a single-sample request with seed s+k finds sample k
    c3 = Counters()
    single = generate_cached(fake, [req("a", n=1, seed=103)], cache, c3)
    assert c3.cache_hits == 1 and c3.model_calls == 0 and seeds(single[0]) == [103]


def test_params_and_identity_change_the_key(tmp_path):
    fake = FakeBackend(responder)
    cache = GenerationCache(tmp_path, fake.identity)
    generate_cached(fake, [req("a")], cache, Counters())
    c = Counters()
    generate_cached(fake, [ChatRequest(messages=[{"role": "user", "content": "a"}], seed=100,
                                       temperature=0.7, max_tokens=17)], cache, c)
    assert c.cache_hits == 0 and c.samples == 1
    other = FakeBackend(responder, identity="fake:other@0")
    c2 = Counters()
    generate_cached(other, [req("a")], GenerationCache(tmp_path, other.identity), c2)
    assert c2.cache_hits == 0
    # greedy decoding ignores the seed
    generate_cached(fake, [req("g", seed=1, temperature=0.0)], cache, Counters())
    c4 = Counters()
    generate_cached(fake, [req("g", seed=2, temperature=0.0)], cache, c4)
    assert c4.cache_hits == 1


def test_duplicate_prompts_in_one_call_are_generated_once(tmp_path):
    fake = FakeBackend(responder)
    c = Counters()
    out = generate_cached(fake, [req("same"), req("same"), req("other")], None, c)
    assert c.prompts == 2 and c.samples == 2 and c.deduped == 1 and c.cache_hits == 0
    assert out[0][0].text == out[1][0].text and not out[1][0].cached
    greedy = Counters()
    three = generate_cached(fake, [req("g3", n=3, temperature=0.0)], None, greedy)
    assert greedy.samples == 1 and greedy.deduped == 2 and len(three[0]) == 3


def test_interrupted_run_resumes_from_written_parts(tmp_path):
    state = {"calls": 0}

    def flaky(req: ChatRequest, seed: int) -> str:
        if req.messages[-1]["content"] == "q3" and state["calls"] == 0:
            state["calls"] += 1
            raise KeyboardInterrupt("killed")
        return responder(req, seed)

    fake = FakeBackend(flaky)
    cache = GenerationCache(tmp_path, fake.identity)
    reqs = [req(f"q{i}") for i in range(5)]
    with pytest.raises(KeyboardInterrupt):
        generate_cached(fake, reqs, cache, Counters(), chunk_size=2)
    parts = sorted(cache.dir.glob("part-*.parquet"))
    assert len(parts) == 1 and pl.read_parquet(parts[0]).height == 2     # q0, q1 survived
    assert not list(cache.dir.glob(".*.tmp"))
    fresh = FakeBackend(flaky)
    c = Counters()
    out = generate_cached(fresh, reqs, GenerationCache(tmp_path, fake.identity), c, chunk_size=2)
    assert c.cache_hits == 2 and c.samples == 3
    assert [r.messages[-1]["content"] for call in fresh.calls for r in call] == ["q2", "q3", "q4"]
    assert [json.loads(o[0].text)["q"] for o in out] == [f"q{i}" for i in range(5)]


def test_many_parts_are_compacted(tmp_path, monkeypatch):
    import kohaku.llm.cache as cache_mod

    monkeypatch.setattr(cache_mod, "COMPACT_AFTER", 3)
    fake = FakeBackend(responder)
    cache = GenerationCache(tmp_path, fake.identity)
    counts = []
    for i in range(5):
        generate_cached(fake, [req(f"p{i}")], cache, Counters())
        counts.append(len(list(cache.dir.glob("part-*.parquet"))))
    # this process merges its own parts once there are three: 1, 2, merged, 2, merged
    assert counts == [1, 2, 1, 2, 1]
    other = GenerationCache(tmp_path, fake.identity)        # another process adds two parts
    for i in range(5, 7):
        generate_cached(fake, [req(f"p{i}")], other, Counters())
    generate_cached(fake, [req("p7")], cache, Counters())   # the first one: merged + p7
    assert len(list(cache.dir.glob("part-*.parquet"))) == 4
    reopened = GenerationCache(tmp_path, fake.identity)     # more than three: one part
    assert len(reopened) == 8
    assert len(list(cache.dir.glob("part-*.parquet"))) == 1


class _Streaming(FakeBackend):
    """Reports every request as it completes (``on_complete``) and fails at request ``fail_at``
    of a call, as an HTTP backend does when its server goes away part-way."""

    def __init__(self, fail_at: int | None = None):
        super().__init__(responder)
        self.fail_at = fail_at

    def generate(self, requests, on_complete=None):
        out = []
        for idx, r in enumerate(requests):
            if idx == self.fail_at:
                raise BackendError("server went away")
            [comp] = super().generate([r])
            if on_complete is not None:
                on_complete(idx, 0, comp)
            out.append(comp)
        return out


def test_samples_are_stored_as_they_complete_and_a_rerun_sends_only_the_missing(tmp_path):
    reqs = [req(f"q{i}", n=2) for i in range(5)]         # N = 10 samples in one call
    broken = _Streaming(fail_at=3)
    with pytest.raises(BackendError) as err:
        generate_cached(broken, reqs, GenerationCache(tmp_path, broken.identity), Counters())
    assert str(err.value) == ("server went away; 6 of the 10 samples of this call had finished "
                              "and are cached, so a re-run sends only the other 4")
    fresh = _Streaming()
    c = Counters()
    out = generate_cached(fresh, reqs, GenerationCache(tmp_path, fresh.identity), c)
    assert [(r.messages[-1]["content"], r.n, r.seed) for call in fresh.calls for r in call] == \
        [("q3", 2, 100), ("q4", 2, 100)]
    assert (c.cache_hits, c.samples) == (6, 4)
    assert [seeds(ss) for ss in out] == [[100, 101]] * 5
    assert [[s.cached for s in ss] for ss in out] == [[True, True]] * 3 + [[False, False]] * 2


def test_backends_without_a_key_hook_keep_their_keys():
    """The key of a backend that sends the request as it is did not change with request_params
    (caches written before stay valid); a backend's cache_params changes it."""
    r = ChatRequest(messages=[{"role": "user", "content": "a"}], temperature=0.0, top_p=0.5,
                    max_tokens=16, json_schema={"type": "object"})
    before = short_hash({"temperature": 0.0, "top_p": 1.0, "max_tokens": 16,
                         "json_schema": {"type": "object"}}, 32)
    assert params_hash(r) == params_hash(r, FakeBackend(responder)) == before

    class Thinking(FakeBackend):
        def cache_params(self, req):
            return sent_params(req, chat_template_kwargs={"enable_thinking": False})

    assert params_hash(r, Thinking(responder)) != before
    assert sent_params(r, chat_template_kwargs=None) == sent_params(r)


def test_vllm_key_hook_adds_only_the_chat_template_options():
    from kohaku.llm.vllm_backend import VLLMBackend, VLLMConfig

    r = ChatRequest(messages=[{"role": "user", "content": "a"}], max_tokens=16)
    plain = VLLMBackend(VLLMConfig(name="v", backend="vllm", model="m"))
    off = VLLMBackend(VLLMConfig(name="v", backend="vllm", model="m", enable_thinking=False))
    assert params_hash(r, plain) == params_hash(r)
    assert off.cache_params(r)["chat_template_kwargs"] == {"enable_thinking": False}
    assert params_hash(r, off) != params_hash(r)


def test_data_parallel_replicas_report_their_completions_as_each_one_finishes():
    from kohaku.llm.parallel import DataParallelBackend

    cfg = {"name": "fake", "backend": "fake", "model": "fake", "revision": "0"}
    reqs = [req(f"d{i}", n=1 + i % 2) for i in range(5)]
    seen = []
    dp = DataParallelBackend(cfg, ["0", "1"])
    try:
        out = dp.generate(reqs, on_complete=lambda i, first, comp: seen.append((i, first, comp.texts)))
    finally:
        dp.close()
    assert sorted(seen) == [(i, 0, c.texts) for i, c in enumerate(out)]
    assert [len(t) for _, _, t in sorted(seen)] == [1, 2, 1, 2, 1]
