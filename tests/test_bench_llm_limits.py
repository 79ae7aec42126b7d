"""scripts/bench_llm.py: the decode limits (memory-bandwidth floor per step, fewest decode steps),
the bandwidth measurement, and the limit columns of a run (with the fake backend, no model)."""

from __future__ import annotations

import csv
import importlib.util
import math
import sys
import time
from types import SimpleNamespace

import pytest

from conftest import REPO

spec = importlib.util.spec_from_file_location("bench_llm", REPO / "kohaku" / "tools" / "bench_llm.py")
bench = importlib.util.module_from_spec(spec)
sys.modules["bench_llm"] = bench
spec.loader.exec_module(bench)


# -- min_decode_steps ----------------------------------------------------------------------------

@pytest.mark.parametrize("rows, slots, steps", [
    ([5, 5, 5, 5], 2, 10),       # the slots are the bound: 20 tokens, 2 per step
    ([30, 1, 1], 16, 30),        # the longest row is the bound
    ([5, 5, 5, 5], 4, 5),        # one step per token of every row at once
    ([7, 2, 2], 2, 7),           # 11 tokens / 2 slots = 6 steps, but one row needs 7
    ([3, 3, 3], 2, 5),           # ceil(9 / 2)
    ([4], 1, 4),
    ([], 8, 0),
    ([0, 0], 4, 0),
])
def test_min_decode_steps(rows, slots, steps):
    assert bench.min_decode_steps(rows, slots) == steps


def test_min_decode_steps_needs_a_slot():
    with pytest.raises(ValueError):
        bench.min_decode_steps([1, 2], 0)


# -- kv_read_limit_seconds -----------------------------------------------------------------------

def test_kv_read_limit_seconds_known_numbers():
    # SmolLM2-135M-like: 30 layers x 2 (k, v) x 3 kv heads x 64 dims x 2 bytes (bf16)
    kv_bytes = 30 * 2 * 3 * 64 * 2
    assert kv_bytes == 23_040
    # 100 steps of 16 rows over ~1,550 cached positions each; 270 MB of weights; 10 GB/s
    kv_positions = 100 * 16 * 1550
    seconds = bench.kv_read_limit_seconds(kv_positions, 100, kv_bytes, 270_000_000, 10e9)
    per_step_bytes = 16 * 1550 * 23_040 + 270_000_000      # 571.4 MB kv + 270 MB weights
    assert seconds == pytest.approx(per_step_bytes / 10e9)
    assert seconds == pytest.approx(0.0841392)              # 841.4 MB at 10 GB/s


def test_kv_read_limit_seconds_weights_only_and_kv_only():
    assert bench.kv_read_limit_seconds(0, 10, 1000, 2_000_000, 1e9) == pytest.approx(2e-3)
    # 10 steps reading 50,000 positions in all: 5,000 per step x 1,000 bytes = 5 MB per step
    assert bench.kv_read_limit_seconds(50_000, 10, 1000, 0, 1e9) == pytest.approx(5e-3)


@pytest.mark.parametrize("steps, bandwidth", [(0, 1e9), (-1, 1e9), (10, 0.0)])
def test_kv_read_limit_seconds_rejects_nonsense(steps, bandwidth):
    with pytest.raises(ValueError):
        bench.kv_read_limit_seconds(100, steps, 1000, 1000, bandwidth)


# -- measure_bandwidth ---------------------------------------------------------------------------

def test_measure_bandwidth_is_plausible_quick_and_restores_threads():
    import torch

    before = torch.get_num_threads()
    t0 = time.perf_counter()
    bw = bench.measure_bandwidth(1, nbytes=64 << 20)
    elapsed = time.perf_counter() - t0
    assert math.isfinite(bw) and bw > 1e8          # > 100 MB/s on any machine
    assert bw < 1e13                                # and below 10 TB/s: a real measurement
    assert elapsed < 3.0
    assert torch.get_num_threads() == before


def test_measure_bandwidth_keeps_to_its_budget():
    t0 = time.perf_counter()
    assert bench.measure_bandwidth(None, nbytes=16 << 20, repeats=10_000, budget_s=0.2) > 1e8
    assert time.perf_counter() - t0 < 2.0


# -- limit_columns -------------------------------------------------------------------------------

class _HFLike:
    cfg = SimpleNamespace(batch_size=4, threads=None)
    device = "cpu"

    def kv_bytes_per_position(self) -> int:
        return 1000

    def weight_bytes(self) -> int:
        return 900_000


def test_limit_columns_of_a_backend_with_the_interface():
    spent = {"decode_seconds": 0.05, "decode_steps": 10, "kv_positions": 1000, "decode_rows": 25}
    cols = bench.limit_columns(_HFLike(), spent, [10, 6, 5, 4], bandwidth=1e9)
    # step 5 ms; limit (1000 x 1000 / 10 + 900,000) B / 1 GB/s = 1 ms; min steps max(25/4, 10)
    assert cols == {"step_ms": 5.0, "limit_ms": 1.0, "step_vs_limit": 5.0, "min_steps": 10,
                    "steps": 10, "steps_vs_min": 1.0, "rows_per_step": 2.5, "mem_gb_s": 1.0,
                    "compute_ms": "", "step_vs_compute": "", "gflop_s": ""}


class _HFLikeWithFlops(_HFLike):
    def step_flops(self, rows: float, kv_positions: float) -> float:
        return 1e6 * rows + 10.0 * kv_positions


def test_compute_floor_columns():
    spent = {"decode_seconds": 0.05, "decode_steps": 10, "kv_positions": 1000, "decode_rows": 25}
    cols = bench.limit_columns(_HFLikeWithFlops(), spent, [10, 6, 5, 4], bandwidth=1e9,
                               flop_rate=1e9)
    # per step 2.5 rows and 100 positions: 2.5e6 + 1e3 flops at 1 GFLOP/s = 2.501 ms
    assert cols["compute_ms"] == 2.501 and cols["step_vs_compute"] == 2.0 and cols["gflop_s"] == 1.0
    assert cols["limit_ms"] == 1.0                       # the memory floor is unchanged


def test_measure_matmul_flops_is_plausible():
    import torch

    before = torch.get_num_threads()
    rate = bench.measure_matmul_flops(1, size=256, repeats=2)
    assert 1e8 < rate < 1e14 and torch.get_num_threads() == before


def test_limit_columns_are_empty_without_the_interface():
    empty = dict.fromkeys(bench.LIMIT_COLS, "")
    assert bench.limit_columns(SimpleNamespace(), {}, [3, 4], bandwidth=None) == empty
    assert bench.limit_columns(SimpleNamespace(cfg=SimpleNamespace(batch_size=8)), {}, [3],
                               bandwidth=1e9) == empty
    # decode steps reported but no kv positions / byte counts: only the step columns
    cols = bench.limit_columns(SimpleNamespace(cfg=SimpleNamespace(batch_size=2)),
                               {"decode_seconds": 0.2, "decode_steps": 20}, [5, 5, 5, 5], 1e9)
    assert cols["step_ms"] == 10.0 and cols["steps"] == 20 and cols["min_steps"] == 10
    assert cols["steps_vs_min"] == 2.0
    assert cols["limit_ms"] == cols["step_vs_limit"] == cols["mem_gb_s"] == ""


# -- a run with the fake backend -----------------------------------------------------------------

class _Reporting:
    """The fake backend plus the hf timings and byte counts: steps = the longest row of a call,
    every row live until it is done, 100 cached positions per live row and step."""

    def __init__(self, inner):
        self.inner = inner
        self.cfg = SimpleNamespace(batch_size=3, threads=None)
        self.device = "cpu"
        self._t = dict.fromkeys(["prefill_seconds", "decode_seconds", "prefill_tokens",
                                 "decode_steps", "decoded_tokens", "kv_positions", "decode_rows"], 0)
        self.calls: list[list[int]] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    @property
    def timings(self) -> dict:
        return dict(self._t)

    def kv_bytes_per_position(self) -> int:
        return 2000

    def weight_bytes(self) -> int:
        return 1_000_000

    def generate(self, requests):
        comps = self.inner.generate(requests)
        rows = [t for c in comps for t in c.completion_tokens]
        self.calls.append(rows)
        steps = max(rows)
        self._t["decode_steps"] += steps
        self._t["decode_seconds"] += 0.002 * steps
        self._t["decoded_tokens"] += sum(rows)
        self._t["decode_rows"] += sum(rows)
        self._t["kv_positions"] += 100 * sum(rows)
        return comps


def _run(monkeypatch, tmp_path, wrap):
    made = []
    real_load = bench.load_backend

    def load(cfg):
        backend = real_load(cfg)
        if wrap:
            backend = _Reporting(backend)
        made.append(backend)
        return backend

    measured = []
    monkeypatch.setattr(bench, "load_backend", load)
    monkeypatch.setattr(bench, "measure_bandwidth",
                        lambda threads, device="cpu", **kw: measured.append((device, threads)) or 2e9)
    out = tmp_path / "bench.csv"
    assert bench.main(["--llm", "fake", "--batches", "2", "5", "--max-tokens", "16",
                       "--context-tokens", "40", "--out", str(out)]) == 0
    with open(out, newline="") as f:
        return list(csv.DictReader(f)), made, measured


def test_run_reports_the_limits_of_a_backend_with_the_interface(monkeypatch, tmp_path, capsys):
    rows, made, measured = _run(monkeypatch, tmp_path, wrap=True)
    assert measured == [("cpu", None)]                      # once per run
    text = capsys.readouterr().out
    assert "memory read bandwidth (cpu, threads=default): 2.00 GB/s" in text
    assert "step_vs_limit" in text and "steps_vs_min" in text
    backend = made[0]
    assert len(backend.calls) == 3                          # warm-up + 2 cells
    for row, tokens in zip(rows, backend.calls[1:]):
        steps = max(tokens)
        assert int(row["steps"]) == steps
        assert float(row["step_ms"]) == pytest.approx(2.0)
        limit = (100 * sum(tokens) * 2000 / steps + 1_000_000) / 2e9
        assert float(row["limit_ms"]) == pytest.approx(limit * 1000, abs=1e-3)
        assert float(row["step_vs_limit"]) == pytest.approx(2.0 / (limit * 1000), abs=0.01)
        least = bench.min_decode_steps(tokens, 3)
        assert int(row["min_steps"]) == least
        assert float(row["steps_vs_min"]) == pytest.approx(steps / least, abs=0.01)
        assert float(row["mem_gb_s"]) == 2.0
        assert row["speed_vs_first"] and row["decode_s"]    # the old columns stay


def test_run_leaves_the_limits_empty_for_a_backend_without_them(monkeypatch, tmp_path, capsys):
    rows, _, measured = _run(monkeypatch, tmp_path, wrap=False)
    assert measured == []                                   # nothing to measure against
    assert "step_vs_limit" not in capsys.readouterr().out
    for row in rows:
        assert all(row[c] == "" for c in bench.LIMIT_COLS)
        assert row["samples_per_s"]
