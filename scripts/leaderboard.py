"""Leaderboard, ablation tables and plots over run dirs.

Usage:
  python scripts/leaderboard.py [OUTPUTS_DIR] [--out DIR] [--top N]

Scans OUTPUTS_DIR (default: outputs) recursively for run.json files (one per Hydra run or
multirun job) and writes leaderboard.csv/.md, ablation.csv/.md (mean ± std over seeds for the
swept keys) and PNG plots into --out (default: OUTPUTS_DIR). Prints the best runs.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kohaku.report import collect_runs, leaderboard, write_reports  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outputs", nargs="?", default="outputs", type=Path, help="folder with run dirs")
    parser.add_argument("--out", type=Path, help="where to write the reports (default: OUTPUTS)")
    parser.add_argument("--top", type=int, default=20, help="how many runs to print")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    if not args.outputs.is_dir():
        print(f"error: {args.outputs}: not a folder", file=sys.stderr)
        return 2
    runs, keys = collect_runs(args.outputs)
    if runs.is_empty():
        print(f"error: no run.json under {args.outputs}", file=sys.stderr)
        return 2
    paths = write_reports(args.outputs, args.out or args.outputs)
    board = leaderboard(runs, keys)
    show = [c for c in ["run_id", "status", *keys, "score", "value", "ref", "na", "seconds"] if c in board.columns]
    with pl.Config(tbl_rows=args.top, tbl_cols=len(show), tbl_width_chars=200, fmt_str_lengths=40):
        print(board.select(show).head(args.top))
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
