"""Leaderboard, ablation tables and plots over run dirs.

Usage:
  python scripts/leaderboard.py [OUTPUTS_DIR] [--out DIR] [--top N] [--baseline K=V,...]
                                [--resamples N] [--task NAME|TASK.yaml]

Scans OUTPUTS_DIR (default: outputs) recursively for run.json files (one per Hydra run or
multirun job) and writes leaderboard.csv/.md, ablation.csv/.md (mean ± std over seeds for the
swept keys; every point against the baseline point with a paired bootstrap 95 % interval over
questions, p, Holm p and its error classes), comparison.csv and PNG plots (interval bars) into
--out (default: OUTPUTS_DIR). Prints the best runs with their difference to the baseline and the
task's score components (WattBot: value, ref, na; each run's scores.json names its metric; runs
scored with different metrics are listed but not compared), then the selection report
(selection.csv/.md, also in ablation.md; kohaku/report/selection.py): the best point's score on
the questions it was picked on, the out-of-sample estimate of picking the best (chosen on half the
questions, scored on the rest, repeated) with its 95 % interval, the optimism, each point's
probability of being best, and the pick: the simplest point (the baseline, then the fewest keys
changed) whose paired interval of the difference to the best contains 0. Every figure is on the task's own
scale: a task whose score is a sum over questions in points, a set-level component (an F1 over the
set) bootstrapped as the set statistic (kohaku/report/paired.py).

The baseline is the first point (lowest point number) unless --baseline names one by its
overrides, e.g. --baseline retrieve.top_k=4,infer.prompt_order=context_first. --task keeps
only the runs scored with that task (a conf/task option or a task YAML; its name in scores.json). Runs need their
per-question score table (scores.parquet in the run dir, or the score artifact in the cache) for
the intervals; without it those columns are left out.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kohaku.report.reports import ReportConfig, make_reports  # noqa: E402
from kohaku.report.runs import component_columns  # noqa: E402
from kohaku.report.significance import RUN_COLUMNS  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("outputs", nargs="?", default="outputs", type=Path, help="folder with run dirs")
    parser.add_argument("--out", type=Path, help="where to write the reports (default: OUTPUTS)")
    parser.add_argument("--top", type=int, default=20, help="how many runs to print")
    parser.add_argument("--baseline", help="the baseline point's overrides, K=V[,K=V] (default: the first point)")
    parser.add_argument("--resamples", type=int, default=ReportConfig.resamples, help="bootstrap resamples")
    parser.add_argument("--task", help="only the runs scored with this task (conf/task option or task YAML)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    if not args.outputs.is_dir():
        print(f"error: {args.outputs}: not a folder", file=sys.stderr)
        return 2
    task = None
    if args.task:
        from kohaku.core.config import ConfigError
        from kohaku.runner.pipeline import task_values
        from kohaku.tasks import build_task, task_file

        try:
            task = build_task(task_values(args.task), f"{task_file(args.task)}: task").name
        except (ConfigError, FileNotFoundError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    config = ReportConfig(baseline=args.baseline, resamples=args.resamples, task=task)
    try:
        reports = make_reports(args.outputs, args.out or args.outputs, config)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not reports.paths:
        scored = f" scored with task {task}" if task else ""
        print(f"error: no run.json{scored} under {args.outputs}", file=sys.stderr)
        return 2
    board, cmp, extra = reports.board, reports.comparison, []
    if cmp is not None:
        extra = list(RUN_COLUMNS)
        base = ", ".join(f"{k}={v}" for k, v in cmp.baseline.items()) or "the only point"
        print(f"baseline: {base}; delta [delta_lo, delta_hi]: paired bootstrap 95 % interval over "
              f"{cmp.n} questions; sig '*': the interval excludes zero")
    components = [c for c, _ in component_columns(board)]
    show = [c for c in ["run_id", "status", *reports.keys, "score", *extra, *components, "seconds"]
            if c in board.columns]
    with pl.Config(tbl_rows=args.top, tbl_cols=len(show), tbl_width_chars=220, fmt_str_lengths=40,
                   float_precision=4):
        print(board.select(show).head(args.top))
    if reports.selection is not None:  # the best point on questions it was not picked on
        print("\nSelection (kohaku/report/selection.py):")
        for line in reports.selection.lines():
            print(f"  {line}")
        with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_width_chars=220, fmt_str_lengths=60, float_precision=4):
            print(pl.DataFrame(reports.selection.rows()))
    for name, path in reports.paths.items():
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
