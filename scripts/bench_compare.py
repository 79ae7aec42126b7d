"""Time the paired bootstrap (kohaku/report/paired.py) on synthetic per-question tables.

Usage:
  python scripts/bench_compare.py [--questions 282] [--runs 2 6 12] [--resamples 10000] [--repeat 3]

Prints, per run count, the fastest of --repeat timings of ``compare`` (every run against the
first: resampling, every configuration's metric on every resample, intervals, p, Holm, flips)
for both WattBot metric variants and a task with masked components (``judge`` weight 1 over the
questions the judge covers, ``numeric`` weight 0 over the numeric ones: FinanceBench's shape).
The scoring of submission files is not included (scripts/compare.py prints its own total).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kohaku.tasks.score.components import Component, Metric  # noqa: E402
from kohaku.report.paired import ComponentMatrix, ScoreMatrix, compare  # noqa: E402

JUDGED = Metric("judged", (Component("judge", "judge", 1.0, "judge_covered"),
                           Component("numeric", "numeric", 0.0, "numeric_covered")))
METRICS = ("wattbot", "wattbot-recall", "judged")


def synthetic(n: int, runs: int, variant: str, seed: int = 0) -> ScoreMatrix:
    rng = np.random.default_rng(seed)
    names, qids = [f"run{i}" for i in range(runs)], [f"q{i}" for i in range(n)]
    if variant == "judged":
        covered = rng.random(n) < 0.95
        numeric = rng.random(n) < 0.6
        judge = np.where(covered, (rng.random((runs, n)) < 0.6).astype(float), 0.0)
        num = np.where(numeric, (rng.random((runs, n)) < 0.5).astype(float), 0.0)
        return ScoreMatrix(names, qids, metric=JUDGED, components=[
            ComponentMatrix("judge", 1.0, judge, covered), ComponentMatrix("numeric", 0.0, num, numeric)])
    blank = rng.random(n) < 0.1
    value = (rng.random((runs, n)) < 0.7).astype(float)
    ref = rng.choice([0.0, 0.5, 1.0], size=(runs, n), p=[0.2, 0.2, 0.6])
    na = np.where(blank, (rng.random((runs, n)) < 0.6).astype(float), 1.0)
    return ScoreMatrix(names, qids, value, ref, na, blank, variant)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=282)
    parser.add_argument("--runs", type=int, nargs="+", default=[2, 6, 12])
    parser.add_argument("--resamples", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    rows = []
    for variant in METRICS:
        for runs in args.runs:
            m = synthetic(args.questions, runs, variant)
            times = []
            for _ in range(args.repeat):
                started = time.perf_counter()
                compare(m, n_resamples=args.resamples)
                times.append(time.perf_counter() - started)
            rows.append({"variant": variant, "questions": args.questions, "runs": runs,
                         "resamples": args.resamples, "seconds": round(min(times), 3)})
    with pl.Config(tbl_rows=50):
        print(pl.DataFrame(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
