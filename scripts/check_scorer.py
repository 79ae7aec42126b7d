"""Check kohaku's metric against a competition's own scorer, row by row.

Usage:
  python scripts/check_scorer.py SOLUTIONS --scorer "CMD {solutions} {submission}"
      [--task NAME|TASK.yaml] [--variant wattbot|wattbot-recall] [SUBMISSION.csv ...]
      [--out-dir DIR] [--show N] [--set KEY=VALUE]

The scorer command reads the two files and prints per-question scores as CSV (a header line
``id,...``; columns named as kohaku's components, e.g. ``value,ref,na`` for WattBot, or
``score``: kohaku/tasks/score/check.py). Scored both ways: each SUBMISSION given and perturbations of
the gold written to --out-dir (exact; numbers off 0.5 % and 5 %; units; lists reordered and
partial; case and punctuation; the not-answerable token swapped). A task with answer kinds whose
solutions name each question's kind is perturbed by kind instead: numbers inside and outside
the kind_value metric's tolerance, rewritten and in parentheses; names, lists and booleans
rewritten, extended and cut; the task's not-answerable token (answer.kinds.not_answerable)
swapped with a value of the kind; cited pages outside the gold pools and none; every value
empty. Prints, per source, the rows
that agree / the rows scored and the first disagreeing rows; exit 1 when any row disagrees. A
SUBMISSION that cannot be read or scored (any bytes; kohaku/core/readfile.py) gets its error in
its row, the others are still checked, and the exit code is 2; never a traceback, unless
``--debug`` (or ``KOHAKU_DEBUG=1``) asks for it.
This is what a competitor runs first on a new competition.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kohaku.core.errors import one_line  # noqa: E402
from kohaku.core.readfile import debug_wanted  # noqa: E402
from kohaku.tasks.rooms.wattbot.metric import VARIANTS  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("solutions", type=Path)
    parser.add_argument("submissions", nargs="*", type=Path, help="real submissions to score both ways")
    parser.add_argument("--scorer", required=True, help="the competition's scorer command, with "
                        "{solutions} and {submission} where the paths go")
    parser.add_argument("--task", default="wattbot", help="a conf/task option or a task YAML's path")
    parser.add_argument("--variant", choices=VARIANTS, default="wattbot", help="WattBot's metric variant")
    parser.add_argument("--out-dir", type=Path, help="where the perturbed submissions are written (default: a temp dir)")
    parser.add_argument("--show", type=int, default=10, help="disagreeing rows shown per source")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a config value the task file's interpolations read")
    parser.add_argument("--debug", action="store_true",
                        help="re-raise the first error with its traceback (also: KOHAKU_DEBUG=1)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(message)s")
    args.debug = debug_wanted(args.debug)
    from kohaku.runner.pipeline import task_values
    from kohaku.tasks import build_task, task_file
    from kohaku.tasks.score.check import check_submissions

    try:
        task = build_task(task_values(args.task, args.set), f"{task_file(args.task)}: task")
        with tempfile.TemporaryDirectory() as tmp:
            out_dir = args.out_dir or Path(tmp)
            checks = check_submissions(task, args.solutions, args.scorer, args.submissions, out_dir, args.variant,
                                       debug=args.debug)
    except Exception as exc:   # a named error (ConfigError, CorpusError, MetricError, ...) or a bug: one line
        if args.debug:
            raise
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2
    total = sum(c.rows for c in checks)
    agree = sum(c.agree for c in checks)
    width = max(len(c.name) for c in checks)
    print(f"{'source':<{width}}  agree / rows  columns")
    for c in checks:
        if c.error:
            print(f"{c.name:<{width}}  error: {c.error}")
            print(f"error: {c.error}", file=sys.stderr)
            continue
        print(f"{c.name:<{width}}  {c.agree:>5} / {c.rows:<4}  {','.join(c.columns)}")
        for d in c.disagree[:args.show]:
            parts = "; ".join(f"{k}: kohaku {a:g} vs scorer {b:g}" for k, (a, b) in d["columns"].items())
            print(f"    {d['qid']}: {parts}")
    print(f"\nrows agree: {agree} / {total}")
    bad = sum(1 for c in checks if c.error)
    if bad:
        print(f"submissions that cannot be read or scored: {bad}")
        return 2
    return 0 if agree == total else 1


if __name__ == "__main__":
    sys.exit(main())
