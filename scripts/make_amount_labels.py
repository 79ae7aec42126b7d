"""Write a labelled set of amount answers from FinanceBench's public questions and gold.

Usage:
  python scripts/make_amount_labels.py FINANCEBENCH OUT.csv [--seed 58]

FINANCEBENCH is a copy of patronus-ai/financebench: a checkout, a bare git directory or the
``data/financebench_open_source.jsonl`` file (its ``results/`` folder is never read). For every
question whose gold is an amount, or text that begins with one, answers are written in the
styles a careful grader accepts (rounded inputs, a percent for a ratio, units, a computation's final figure,
a text gold's leading number) with their wrong twins (another figure, another quantity, an
intermediate figure, a refusal that ends with a number), each labelled by its construction
(kohaku/tools/amount_labels.py). Write OUT under outputs/ or a temporary folder: the file
holds FinanceBench's questions and is not committed. Then:
``python scripts/calibrate_metric.py OUT.csv --task financebench --metric numeric``.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kohaku.tools.amount_labels import build_rows, read_questions, write_csv  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="a FinanceBench checkout, git directory or its questions JSONL")
    parser.add_argument("out", type=Path, help="the labelled CSV to write (e.g. outputs/amount_labels.csv)")
    parser.add_argument("--seed", type=int, default=58, help="the draws' seed (default 58)")
    args = parser.parse_args(argv)
    rows = build_rows(read_questions(args.source), args.seed)
    write_csv(rows, args.out)
    labels = Counter(r["label"] for r in rows)
    styles = Counter((r["style"], r["label"]) for r in rows)
    print(f"wrote {args.out}: {len(rows)} answers over {len({r['financebench_id'] for r in rows})} questions "
          f"({labels['correct']} correct, {labels['incorrect']} incorrect)")
    for (style, label), n in sorted(styles.items()):
        print(f"  {style:<20} {label:<10} {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
