"""Compare runs question by question: is the difference real, and what changed?

Usage:
  python scripts/compare.py [--solutions SOL] [--task NAME|YAML] A B [C ...] [--all-pairs]
                            [--variant V] [--subset] [--resamples N] [--seed S] [--flips N]
                            [--json OUT] [--html OUT]

A, B, ... are run dirs (anything with a submission.csv: a single run or a sweep point),
submission CSVs, or ``NAME=PATH,PATH,...`` for one configuration run with several seeds (its
questions' components are averaged over the seeds before resampling; the seeds' own spread is
shown beside). With --solutions every source is scored against SOL (missing questions count as
wrong; --subset keeps only the questions every source answered): with WattBot's metric
(--variant), or with --task's own scorer for any other competition. Without --solutions the
sources are run dirs and their own per-question tables (scores.parquet) are compared, under the
metric their scores.json names; runs scored with different metrics are not compared.

Sources scored with --task may be the task's JSON documents as well as CSVs (read as the task's
flat columns, kohaku/tasks/files/submissions.py). Every figure is on the task's own scale: a task whose
score is a sum over questions (task.score.combine: sum) in points, a set-level component (an F1
over the set) recomputed as the set statistic on each resample.

Prints, for each pair (B against the first source A, or every pair with --all-pairs): the score
difference B - A, a paired bootstrap 95 % interval over questions (10,000 resamples, fixed seed),
the two-sided p-value, Holm-adjusted p-values over the pairs, the smallest difference this
question set detects at 80 % power (mde80), the questions fixed and broken, a '*' where the
interval excludes zero; then each source's score interval, its metric components, its error
classes (kohaku/tasks/rooms/wattbot/diagnosis.py for WattBot, the task's classes otherwise: for a task with
answer kinds the typed classes, kohaku/tasks/analysis/typed_classes.py, with the cited pages' classes
pages:all_pools ... beside them) and the flipped questions with the question, its kind, the truth
and both answers, each with its refs or cited pages and its classes.

With three sources or more, a selection section follows (kohaku/report/selection.py): the
in-sample best, the out-of-sample estimate of picking the best (chosen on half the questions,
scored on the rest, repeated) with its 95 % interval, the optimism (best minus estimate), each
source's probability of being best (paired bootstrap) and the pick: the simplest source (the
order given, A first) whose paired interval of the difference to the best contains 0.

The interval and p-value cover which questions were asked (resampling questions), not the
model's sampling noise: that is the seed spread, shown separately.

Every source is scored before any comparison: each one that cannot be read (any bytes: a wrong
encoding, binary data, JSON nested too deep, NaN; kohaku/core/readfile.py) is named on its own
``error:`` line and the exit code is 2; never a traceback, unless ``--debug`` (or
``KOHAKU_DEBUG=1``) asks for it.
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

from kohaku.core.errors import one_line  # noqa: E402
from kohaku.core.readfile import debug_wanted, read_each  # noqa: E402
from kohaku.tasks.rooms.wattbot.metric import VARIANTS  # noqa: E402
from kohaku.report.compare import (CompareError, Config, Scored, class_names, component_lines,  # noqa: E402
                                   error_counts, error_table_lines, flip_lines, flips, interval_lines,
                                   page_counts, pair_lines, parse_source, read_run, run_metric, score_matrix,
                                   score_source, score_with_task)
from kohaku.tasks.rooms.wattbot.functions import wattbot_metric  # noqa: E402
from kohaku.report.paired import N_RESAMPLES, SEED, compare  # noqa: E402
from kohaku.tasks.rooms.wattbot.submission import read_csv_str  # noqa: E402


def scorer(args: argparse.Namespace):
    """source path -> Scored, as the options ask (see the module doc)."""
    if args.task:
        if args.solutions is None:
            raise CompareError("--task scores submissions: give --solutions too (or leave out --task to "
                               "compare run dirs' own score tables)")
        from kohaku.tasks import load_task

        task = load_task(args.task)
        return lambda path: score_with_task(task, args.solutions, path, args.variant, args.submission_format)
    if args.solutions is None:
        return lambda path: read_run(path, args.variant)
    solutions = read_csv_str(args.solutions)
    metric = wattbot_metric(args.variant)

    def wattbot(path: str) -> Scored:
        named = run_metric(path)
        if named is not None and named.known is None:
            raise CompareError(f"{path}: scored with task '{named.name}' ({named.describe()}); pass "
                               f"--task {named.name} to rescore its submission, or leave out --solutions "
                               "to compare the runs' own score tables")
        return Scored(score_source(solutions, path, args.variant or "wattbot", str(args.solutions)), metric)

    return wattbot


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("sources", nargs="+", metavar="SOURCE",
                        help="run dir, sweep point, submission CSV (or the task's JSON with --task), or NAME=PATH,PATH (seeds)")
    parser.add_argument("--solutions", type=Path,
                        help="solutions file to score every source against (default: compare run dirs' "
                             "own scores.parquet)")
    parser.add_argument("--task", help="the task (name or YAML) whose scorer scores the sources "
                                       "(default: WattBot's metric)")
    parser.add_argument("--submission-format", choices=("csv", "json"), default=None,
                        help="with --task: the sources' format (default: detected; a .json file or one "
                             "that starts with { or [ is the task's JSON document)")
    parser.add_argument("--variant", choices=VARIANTS, default=None,
                        help="WattBot's metric variant (default wattbot; runs' own: their scores.json's)")
    parser.add_argument("--all-pairs", action="store_true", help="compare every pair, not only against the first")
    parser.add_argument("--subset", action="store_true", help="only questions every source answered")
    parser.add_argument("--resamples", type=int, default=N_RESAMPLES, help="bootstrap resamples (default 10000)")
    parser.add_argument("--seed", type=int, default=SEED, help="bootstrap seed (default 0)")
    parser.add_argument("--flips", type=int, default=10, help="flipped questions to print per pair (default 10)")
    parser.add_argument("--json", type=Path, help="write pairs, intervals, error classes and every flip here")
    parser.add_argument("--html", type=Path, help="write a self-contained HTML report here (pairs, flips with "
                                                  "both contexts and answers side by side)")
    parser.add_argument("--debug", action="store_true",
                        help="re-raise the first error with its traceback (also: KOHAKU_DEBUG=1)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    args.debug = debug_wanted(args.debug)
    if len(args.sources) < 2:
        print("error: give at least two sources to compare", file=sys.stderr)
        return 2
    if args.resamples < 100:
        print("error: --resamples must be at least 100", file=sys.stderr)
        return 2
    started = time.perf_counter()
    try:
        score = scorer(args)
        configs = []
        sources = [parse_source(arg) for arg in args.sources]
        files = list(dict.fromkeys(p for _, paths in sources for p in paths))
        by_file = dict(zip(files, read_each(files, score, args.debug)))   # every file tried, each bad one named
        for name, paths in sources:
            scored = [by_file[p] for p in paths]
            classes = list(dict.fromkeys(k for s in scored for k in s.classes))
            configs.append(Config(name, [s.table for s in scored], paths, scored[0].metric, classes))
            for s, p in zip(scored[1:], paths[1:]):
                if not s.metric.same_as(scored[0].metric):
                    raise CompareError(f"{name}: {paths[0]} and {p} were scored with different metrics "
                                       f"({scored[0].metric.describe()}; {s.metric.describe()}); no comparison")
        names = [c.name for c in configs]
        if len(set(names)) != len(names):
            print(f"error: two sources share a name ({', '.join(names)}); name them with NAME=PATH",
                  file=sys.stderr)
            return 2
        m = score_matrix(configs, args.variant, subset=args.subset)
    except Exception as exc:  # MetricError, a task that cannot be loaded, unreadable sources (one line each)
        if args.debug:
            raise
        for line in getattr(exc, "lines", None) or [one_line(exc)]:
            print(f"error: {line}", file=sys.stderr)
        return 2
    pairs = list(combinations(range(len(configs)), 2)) if args.all_pairs else [(0, j) for j in range(1, len(configs))]
    result = compare(m, pairs, n_resamples=args.resamples, seed=args.seed)
    classes = class_names(configs)
    # the error classes, then a typed task's page classes (pages:all_pools, ...) beside them
    counts = [{**error_counts(c, m.qids, classes), **page_counts(c, m.qids)} for c in configs]
    all_flips = {f"{configs[a].name} vs {configs[b].name}": flips(configs, m, a, b) for a, b in pairs}
    seconds = time.perf_counter() - started

    unanswerable = f" ({int(m.blank.sum())} unanswerable)" if m.metric.known is not None else ""
    units = " in points (the task's score is a sum over questions)" if m.metric.summed else ""
    lines = [f"{m.n} questions{unanswerable}, metric {m.metric.describe()}, "
             f"{args.resamples} paired resamples (seed {args.seed}); delta = B - A{units}", ""]
    lines += pair_lines(result)
    lines += ["", "* the 95 % interval excludes zero; p_holm: Holm-adjusted over the pairs above.", ""]
    lines += interval_lines(result)
    lines += ["", "components (on all questions; weight in brackets, weight 0: beside the score):"]
    lines += component_lines(result, m.metric)
    lines += ["", "error classes (counts; mean over seeds):"]
    lines += error_table_lines(names, counts) if any(counts) else ["  (the score tables have no error classes)"]
    for (label, rows), pair in zip(all_flips.items(), result.pairs):
        lines += ["", f"flipped questions, {label}: {pair.fixed} fixed, {pair.broken} broken"]
        lines += flip_lines(rows, args.flips)
    selection = None
    if len(configs) > 2:  # ranking three or more: how much of the best's lead survives
        from kohaku.report.selection import SelectionConfig, select_matrix

        selection = select_matrix(m, None, SelectionConfig(seed=args.seed))
        lines += ["", "selection (simplest first: the order given):"]
        lines += [f"  {line}" for line in selection.lines()]
        lines += [f"  {r['config']}: {r['score']:.4f}, vs best {r['delta_to_best']:+.4f} "
                  f"[{r['delta_lo']:+.4f}, {r['delta_hi']:+.4f}], P(best) {r['p_best']:.3f}"
                  f"{', pick' if r['picked'] else ''}" for r in selection.rows()]
    lines += ["", f"({seconds:.2f} s)"]
    print("\n".join(lines))
    if args.json:
        out = {
            "solutions": None if args.solutions is None else str(args.solutions),
            "task": args.task, "variant": m.metric.variant, "metric": m.metric.as_json(),
            "n_resamples": args.resamples, "seed": args.seed, "n": m.n,
            "pairs": [p.as_json() for p in result.pairs],
            "intervals": [{"name": it.name, "score": it.score, "ci": [it.lo, it.hi], "seed_sd": it.seed_sd,
                           "n_seeds": it.n_seeds, "components": it.components} for it in result.intervals],
            "errors": dict(zip(names, counts)),
            "flips": all_flips,
            "selection": None if selection is None else {**selection.summary(), "configs": selection.rows()},
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2))
    if args.html:
        from kohaku.report.html import write_compare_report

        print(f"written {write_compare_report(args.html, configs, result, m.metric, counts, all_flips, pairs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
