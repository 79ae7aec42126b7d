#!/usr/bin/env python
"""What the task layer costs: the seconds of the stages that read the task (questions, infer,
vote, score), recomputed with the generation cache warm and every other stage a cache hit, so
only the harness's own work is timed (no model computes: a cached sample is read).

    python scripts/bench_task.py [--repeats 5] [-o llm=fake -o embed.dtype=float32 ...]

Runs ``scripts/run.py`` once to warm the cache, then ``--repeats`` times with those stages
forced, and prints one row per stage (min, median and max of the seconds in run.json) and their
sum. Run it from two checkouts (e.g. a git worktree of the commit before the task layer) in one
session and compare the sums; set them against a full run's seconds to get the share.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STAGES = ("questions", "infer", "vote", "score")


def run(overrides: list[str], run_dir: Path) -> dict[str, float]:
    subprocess.run([sys.executable, str(REPO / "scripts" / "run.py"), *overrides,
                    f"hydra.run.dir={run_dir}"], cwd=REPO, check=True, capture_output=True)
    stages = json.loads((run_dir / "run.json").read_text())["stages"]
    return {s: float(stages[s]["seconds"]) for s in STAGES}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("-o", "--override", action="append", default=[],
                        help="Hydra override (repeatable); default llm=fake embed.dtype=float32")
    args = parser.parse_args(argv)
    overrides = args.override or ["llm=fake", "embed.dtype=float32"]
    times: dict[str, list[float]] = {s: [] for s in STAGES}
    with tempfile.TemporaryDirectory() as tmp:
        run(overrides, Path(tmp) / "warm")     # upstream stages and the generation cache
        for i in range(args.repeats):
            for s, t in run([*overrides, f"force=[{','.join(STAGES)}]"], Path(tmp) / f"run{i}").items():
                times[s].append(t)
    print(f"{'stage':<10}{'min s':>9}{'median s':>10}{'max s':>9}")
    for s in STAGES:
        t = times[s]
        print(f"{s:<10}{min(t):>9.4f}{statistics.median(t):>10.4f}{max(t):>9.4f}")
    total = [sum(times[s][i] for s in STAGES) for i in range(args.repeats)]
    print(f"{'sum':<10}{min(total):>9.4f}{statistics.median(total):>10.4f}{max(total):>9.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
