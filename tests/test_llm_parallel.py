"""Data-parallel sharding over worker processes, exercised with the fake backend."""

from __future__ import annotations

from kohaku.llm import ChatRequest, load_backend
from kohaku.llm.parallel import DataParallelBackend, shard_bounds

FAKE_CFG = {"name": "fake", "backend": "fake", "model": "fake", "revision": "0"}


def test_shard_bounds_balance_samples_and_keep_order():
    assert shard_bounds([1] * 10, 3) == [(0, 3), (3, 7), (7, 10)]
    assert shard_bounds([8, 1, 1, 1, 1, 1, 1, 1, 1], 2) == [(0, 1), (1, 9)]
    assert shard_bounds([1], 3) == [(0, 0), (0, 1), (1, 1)]
    assert shard_bounds([], 2) == [(0, 0), (0, 0)]


def test_workers_get_their_devices_and_results_merge_in_order():
    reqs = [ChatRequest(messages=[{"role": "user", "content": "x" * (i + 1)}], n=1 + i % 2, seed=i)
            for i in range(7)]
    expected = load_backend(FAKE_CFG).generate(reqs)
    dp = DataParallelBackend(FAKE_CFG, ["0", "1"])
    try:
        got = dp.generate(reqs)
        assert [c.texts for c in got] == [c.texts for c in expected]
        shards = sorted(dp.last_shards, key=lambda s: s["worker"])
        assert [s["devices"] for s in shards] == ["0", "1"]
        assert shards[0]["pid"] != shards[1]["pid"]
        assert shards[0]["start"] == 0 and shards[0]["end"] == shards[1]["start"] and shards[1]["end"] == 7
        # a second call reuses the same workers
        again = dp.generate(reqs[:1])
        assert again[0].texts == expected[0].texts
    finally:
        dp.close()
    assert dp._workers == []
