"""Compare runs question by question: is the difference real, and what changed?

Usage:
  python scripts/compare.py --solutions SOL.csv A B [C ...] [--all-pairs] [--variant V]
                            [--subset] [--resamples N] [--seed S] [--flips N] [--json OUT]

A, B, ... are run dirs (anything with a submission.csv: a single run or a sweep point),
submission CSVs, or ``NAME=PATH,PATH,...`` for one configuration run with several seeds (its
questions' components are averaged over the seeds before resampling; the seeds' own spread is
shown beside). Every source is scored against SOL (missing questions count as wrong; --subset
keeps only the questions every source answered).

Prints, for each pair (B against the first source A, or every pair with --all-pairs): the score
difference B - A, a paired bootstrap 95 % interval over questions (10,000 resamples, fixed seed),
the two-sided p-value, Holm-adjusted p-values over the pairs, the smallest difference this
question set detects at 80 % power (mde80), the questions fixed and broken, a '*' where the
interval excludes zero; then each source's score interval, its error classes
(kohaku/diagnosis.py) and the flipped questions with the question, the truth and both answers.

The interval and p-value cover which questions were asked (resampling questions), not the
model's sampling noise: that is the seed spread, shown separately.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from itertools import combinations
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kohaku.metrics import VARIANTS, MetricError  # noqa: E402
from kohaku.report.compare import (Config, error_counts, error_table_lines, flip_lines, flips,  # noqa: E402
                                   interval_lines, pair_lines, parse_source, score_matrix, score_source)
from kohaku.report.paired import N_RESAMPLES, SEED, compare  # noqa: E402
from kohaku.submission import read_csv_str  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("sources", nargs="+", metavar="SOURCE",
                        help="run dir, sweep point, submission CSV, or NAME=PATH,PATH (seeds)")
    parser.add_argument("--solutions", required=True, type=Path, help="solutions CSV")
    parser.add_argument("--variant", choices=VARIANTS, default="wattbot")
    parser.add_argument("--all-pairs", action="store_true", help="compare every pair, not only against the first")
    parser.add_argument("--subset", action="store_true", help="only questions every source answered")
    parser.add_argument("--resamples", type=int, default=N_RESAMPLES, help="bootstrap resamples (default 10000)")
    parser.add_argument("--seed", type=int, default=SEED, help="bootstrap seed (default 0)")
    parser.add_argument("--flips", type=int, default=10, help="flipped questions to print per pair (default 10)")
    parser.add_argument("--json", type=Path, help="write pairs, intervals, error classes and every flip here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    if len(args.sources) < 2:
        print("error: give at least two sources to compare", file=sys.stderr)
        return 2
    if args.resamples < 100:
        print("error: --resamples must be at least 100", file=sys.stderr)
        return 2
    started = time.perf_counter()
    try:
        solutions = read_csv_str(args.solutions)
        configs = []
        for arg in args.sources:
            name, paths = parse_source(arg)
            tables = [score_source(solutions, p, args.variant, str(args.solutions)) for p in paths]
            configs.append(Config(name, tables, paths))
        names = [c.name for c in configs]
        if len(set(names)) != len(names):
            print(f"error: two sources share a name ({', '.join(names)}); name them with NAME=PATH",
                  file=sys.stderr)
            return 2
        m = score_matrix(configs, args.variant, subset=args.subset)
    except (MetricError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    pairs = list(combinations(range(len(configs)), 2)) if args.all_pairs else [(0, j) for j in range(1, len(configs))]
    result = compare(m, pairs, n_resamples=args.resamples, seed=args.seed)
    counts = [error_counts(c, m.qids) for c in configs]
    all_flips = {f"{configs[a].name} vs {configs[b].name}": flips(configs, m, a, b) for a, b in pairs}
    seconds = time.perf_counter() - started

    lines = [f"{m.n} questions ({int(m.blank.sum())} unanswerable), metric {args.variant}, "
             f"{args.resamples} paired resamples (seed {args.seed}); delta = B - A", ""]
    lines += pair_lines(result)
    lines += ["", "* the 95 % interval excludes zero; p_holm: Holm-adjusted over the pairs above.", ""]
    lines += interval_lines(result)
    lines += ["", "error classes (counts; mean over seeds):"]
    lines += error_table_lines(names, counts)
    for (label, rows), pair in zip(all_flips.items(), result.pairs):
        lines += ["", f"flipped questions, {label}: {pair.fixed} fixed, {pair.broken} broken"]
        lines += flip_lines(rows, args.flips)
    lines += ["", f"({seconds:.2f} s)"]
    print("\n".join(lines))
    if args.json:
        out = {
            "solutions": str(args.solutions), "variant": args.variant, "n_resamples": args.resamples,
            "seed": args.seed, "n": m.n,
            "pairs": [p.as_json() for p in result.pairs],
            "intervals": [{"name": it.name, "score": it.score, "ci": [it.lo, it.hi], "seed_sd": it.seed_sd,
                           "n_seeds": it.n_seeds} for it in result.intervals],
            "errors": dict(zip(names, counts)),
            "flips": all_flips,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
