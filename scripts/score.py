"""Score submissions against a solutions file with a task's metric (WattBot's by default).

Usage:
  python scripts/score.py SOLUTIONS.csv SUBMISSION.csv [--variant wattbot|wattbot-recall]
                          [--mismatches N] [--subset] [--strict] [--errors] [--json OUT.json]
  python scripts/score.py SOLUTIONS SUBMISSION --task NAME|TASK.yaml [--llm NAME] [--json OUT.json]
                          [--set corpus.root=/data ...]
  python scripts/score.py SOLUTIONS SUB1 SUB2 ... [--task ...] [--format text|csv|json] [--out FILE]

A submission is a CSV, or with ``--task`` also the task's JSON writer's document (detected: a
``.json`` file or one that starts with ``{`` or ``[``; or told: ``--submission-format``;
kohaku/tasks/files/submissions.py reads its answer objects as the flat columns the task's CSV has, so
both score the same).

Several submissions are scored in one call (one process, the task built once) into one table:
a row per submission with its score, each component (a summed task's in points) and the number
of questions missing from it, the ids it answers more than once (``duplicates``: how many;
task.submission.duplicates picks the row scored) and the ids it answers that are no question
(``unknown_ids``, named), best first; printed as text, or as CSV or JSON (``--format``),
written to ``--out`` when given. A file that cannot be scored (any bytes: a wrong encoding,
binary data, JSON nested too deep, NaN where a number goes, a file or cell over the size limit;
kohaku/core/readfile.py) gets its error in the table's ``error`` column (and on stderr), the
other files are scored as when scored alone, and the exit code is 2; never a traceback, unless
``--debug`` (or ``KOHAKU_DEBUG=1``) asks for it.

``--task`` scores with another competition's metric (conf/task/<NAME>.yaml or a task YAML's
path; kohaku/tasks/score/scoring.py): each component with its weight and the number of questions it
covers, the error classes and the first wrong questions. A task whose metric asks an LLM judge
uses ``--llm`` (a conf/llm option, e.g. fake or smollm2_cpu) through the generation cache under
``--cache-dir``.

Prints the components (value, ref, NA, unit), value accuracy per evidence flag (Quote, Table,
Figure, Math, is_NA) and per Usage split when the solutions have those columns, the first
mismatches, and as its last line ``score: 0.xxxx``. ``--errors`` adds each question's error class
(kohaku/tasks/rooms/wattbot/diagnosis.py: correct, missing, answered_na, needless_abstention, wrong_ref, scale,
near_miss, wrong_number, wrong_range, wrong_name, wrong_list) counted overall and by answer kind,
evidence flag and usage, with the first questions of each class; ``--json`` always holds them
under ``errors``.

Every file the competition's reference scorers score gets a score. Rows a strict reader would
question (empty explanations, empty/NaN cells, blank items inside lists such as
``[10000,is_blank]``, malformed or quoted ref lists, empty or duplicate ids) are scored as the
references score them and listed as warnings (stderr, and ``row_issues`` in --json) naming the
file, row, id and column; ``--strict`` refuses them instead. Missing columns, an unreadable file
or, with --strict, questionable rows: an error naming the file, row and column, exit code 2.

Variants (kohaku/tasks/rooms/wattbot/metric.py): ``wattbot`` = the scorer's first commit, the competition's
distributed metric (values as written, NA averaged over all rows); ``wattbot-recall`` = its
latest commit (submitted values normalised, NA as recall over unanswerable questions).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import polars as pl  # noqa: E402

from kohaku.core.config import ConfigError  # noqa: E402
from kohaku.core.errors import KohakuError, one_line  # noqa: E402
from kohaku.core.readfile import debug_wanted  # noqa: E402
from kohaku.tasks.files.submissions import require_csv  # noqa: E402
from kohaku.tasks.rooms.wattbot.diagnosis import classify, error_lines, error_summary  # noqa: E402
from kohaku.tasks.rooms.wattbot.metric import VARIANTS, WEIGHTS, ScoreResult, score_files  # noqa: E402


WITHOUT_TASK = "score.py without --task"


def _fmt(x: float | None) -> str:
    return "   n/a" if x is None else f"{x:.4f}"


def report(result: ScoreResult, n_mismatches: int) -> list[str]:
    lines = [f"variant: {result.variant}   questions: {result.n} ({result.n_na} unanswerable)"]
    if result.n_missing:
        lines.append(f"missing from the submission (scored wrong): {result.n_missing}")
    if result.n_extra:
        lines.append(f"extra ids in the submission (ignored): {result.n_extra}")
    if result.n_malformed_refs:
        lines.append(f"malformed ref lists (read as one token): {result.n_malformed_refs}")
    if result.issues:
        lines.append(f"questionable rows (scored; listed on stderr, --strict refuses): {len(result.issues)}")
    lines.append("")
    lines.append(f"{'component':<10}{'weight':>8}{'value':>9}")
    for name, value in (("value", result.value), ("ref", result.ref), ("na", result.na)):
        lines.append(f"{name:<10}{WEIGHTS[name]:>8.2f}{value:>9.4f}")
    lines.append(f"{'unit':<10}{0.0:>8.2f}{_fmt(result.unit):>9}")
    if result.per_evidence:
        lines.append("")
        lines.append(f"{'evidence':<10}{'n':>6}{'value acc':>11}")
        for flag, d in result.per_evidence.items():
            lines.append(f"{flag:<10}{d['n']:>6}{_fmt(d['value']):>11}")
    if result.per_usage:
        lines.append("")
        lines.append(f"{'usage':<10}{'n':>6}{'score':>9}{'value':>9}{'ref':>9}{'na':>9}")
        for split, d in result.per_usage.items():
            lines.append(
                f"{split:<10}{d['n']:>6}{d['score']:>9.4f}{d['value']:>9.4f}{d['ref']:>9.4f}{d['na']:>9.4f}"
            )
    table = result.table
    if table.height:
        bad = table.filter(~table["value_ok"] | (table["ref_score"] < 1.0) | ~table["na_ok"])
        if bad.height:
            lines.append("")
            lines.append(f"first mismatches ({min(n_mismatches, bad.height)} of {bad.height}):")
            lines.append(f"  {'id':<8}{'truth':<22}{'submitted':<22}{'value':>6}{'ref':>6}  refs (truth | submitted)")
            for r in bad.head(n_mismatches).to_dicts():
                pred = "<missing>" if r["missing"] else str(r["pred_value"])
                lines.append(
                    f"  {r['qid']:<8}{str(r['truth_value'])[:21]:<22}{pred[:21]:<22}"
                    f"{'ok' if r['value_ok'] else 'x':>6}{r['ref_score']:>6.2f}  "
                    f"{r['truth_ref']} | {r['pred_ref'] if not r['missing'] else '-'}"
                )
    lines.append("")
    lines.append(f"score: {result.score:.4f}")
    return lines


def task_report(result, n_mismatches: int) -> list[str]:
    """The lines of a ``components`` task's score (kohaku.tasks.score.scoring.TaskScore)."""
    d = result.details
    lines = [f"task: {result.task}   questions: {result.n}"]
    if result.n_missing:
        lines.append(f"missing from the submission (scored wrong): {result.n_missing}")
    if result.n_extra:
        unknown = d.get("unknown_ids") or []
        lines.append(f"extra ids in the submission (ignored): {result.n_extra}"
                     + (": " + ", ".join(unknown[:10]) + (" ..." if len(unknown) > 10 else "") if unknown else ""))
    dup = d.get("duplicates") or {}
    if dup.get("ids"):
        lines.append(f"answered more than once (the {dup['policy']} row scored, task.submission.duplicates): "
                     f"{len(dup['ids'])}: " + ", ".join(dup["ids"][:10]) + (" ..." if len(dup["ids"]) > 10 else ""))
    digits = d.get("round", {}).get("decimals")
    show = (lambda x: "   n/a" if x is None else f"{x:.{digits}f}") if digits is not None else _fmt
    what = "total" if d.get("combine") == "sum" else "value"
    width = max([12, *(len(n) + 1 for n in result.components)])   # long names (an adopted script's figures)
    lines += ["", f"{'component':<{width}}{'weight':>8}{what:>9}{'covers':>8}"]
    for name, value in result.components.items():
        level = "   (set)" if name in d.get("set_level", ()) else f"{d['coverage'][name]:>8}"
        lines.append(f"{name:<{width}}{d['weights'][name]:>8.2f}{show(value):>9}{level}")
    if d.get("judge_invalid"):
        lines.append(f"judge outputs that were no verdict (scored 0): {d['judge_invalid']}")
    counts = result.errors["counts"]
    lines += ["", "error classes: " + ", ".join(f"{k} {v}" for k, v in counts.items() if v)]
    pages = (result.errors.get("pages") or {}).get("counts")
    if pages:   # a typed task's cited pages against the gold pools (kohaku/tasks/analysis/typed_classes.py)
        lines.append("cited pages: " + ", ".join(f"{k} {v}" for k, v in pages.items() if v))
    wrong = result.table.filter(~pl.col("correct"))
    if wrong.height:
        lines += ["", f"first wrong ({min(n_mismatches, wrong.height)} of {wrong.height}, by {d['correct_by']}):"]
        for r in wrong.head(n_mismatches).to_dicts():
            pred = "<missing>" if r["missing"] else str(r["pred"])
            lines.append(f"  {r['qid']:<24} {r['error_class']:<20} truth {str(r['truth'])[:30]!r}  "
                         f"submitted {pred[:30]!r}")
    lines += ["", f"score: {show(result.score) if digits is not None else f'{result.score:.4f}'}"]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("solutions", help="solutions CSV (id, answer_value, ref_id, ... )")
    parser.add_argument("submissions", nargs="+", metavar="submission",
                        help="submission CSV (id, answer_value, ref_id, explanation, ...) or, with --task, "
                             "the task's JSON document; several: one table")
    parser.add_argument("--submission-format", choices=("csv", "json"), default=None,
                        help="with --task: the submissions' format (default: detected; a .json file or "
                             "one that starts with { or [ is the task's JSON document)")
    parser.add_argument("--format", choices=("text", "csv", "json"), default=None,
                        help="the table of scores as text, CSV or JSON (default: text for several "
                             "submissions, the full report for one)")
    parser.add_argument("--out", type=Path, help="write the table of scores here (with --format csv or json)")
    parser.add_argument("--variant", choices=VARIANTS, default="wattbot")
    parser.add_argument("--mismatches", type=int, default=10, help="how many mismatches to list")
    parser.add_argument("--subset", action="store_true",
                        help="score only ids present in the submission (the reference scorers do)")
    parser.add_argument("--strict", action="store_true",
                        help="refuse a submission with questionable rows (empty explanation, "
                        "empty/NaN cells, blank list items, malformed refs, duplicate ids)")
    parser.add_argument("--errors", action="store_true",
                        help="print the error classes (overall, by answer kind, evidence and usage)")
    parser.add_argument("--json", type=Path, help="also write the summary (error classes included) as JSON here")
    parser.add_argument("--task", default="wattbot",
                        help="the competition: a conf/task option (wattbot, financebench, short_answer) "
                        "or a task YAML's path")
    parser.add_argument("--llm", default=None,
                        help="conf/llm option for a metric that asks an LLM (the judge), e.g. fake, smollm2_cpu")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a config value the task file's interpolations read, e.g. "
                        "--set corpus.root=/data (repeatable)")
    parser.add_argument("--cache-dir", type=Path, default=Path("outputs/cache"),
                        help="generation cache of the judge's answers (default outputs/cache)")
    parser.add_argument("--debug", action="store_true",
                        help="re-raise the first error with its traceback (also: KOHAKU_DEBUG=1)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    args.debug = debug_wanted(args.debug)
    try:
        return run(args)
    except Exception as exc:   # a bug, or an error no branch below names: one line, exit 2
        if args.debug:
            raise
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2


def run(args: argparse.Namespace) -> int:
    task = None
    if args.task != "wattbot":
        try:
            task = _task(args)
        except (ConfigError, FileNotFoundError) as exc:
            if args.debug:
                raise
            print(f"error: {one_line(exc)}", file=sys.stderr)
            return 2
        if task.score.scorer == "wattbot":
            task = None
    if len(args.submissions) > 1 or args.format is not None:
        return score_many(args, task)
    args.submission = args.submissions[0]
    if task is not None:
        return score_task(args, task)
    try:
        result = score_files(args.solutions, require_csv(args.submission, WITHOUT_TASK), args.variant, subset=args.subset,
                             strict=args.strict)
    except (KohakuError, FileNotFoundError) as exc:
        if args.debug:
            raise
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2
    table = classify(result.table)
    errors = error_summary(table)
    if args.json:
        args.json.write_text(json.dumps({**result.summary(), "errors": errors, "rows": table.to_dicts()},
                                        indent=2, default=str))
    lines = report(result, args.mismatches)
    if args.errors:
        lines[-1:-1] = error_lines(errors, table) + [""]
    print("\n".join(lines))
    return 0


def score_many(args: argparse.Namespace, task) -> int:
    """Every submission scored in this process, one table (see the module doc)."""
    from kohaku.report.tables import score_table

    logging.getLogger("kohaku.score").setLevel(logging.ERROR)   # one line per file below, not per warning
    backend = cache = None
    if task is not None and args.llm:
        from kohaku.llm.base import load_backend
        from kohaku.llm.cache import open_generation_cache
        from kohaku.runner.pipeline import option_values

        loaded = load_backend(option_values("llm", args.llm))
        backend, cache = (lambda: loaded), open_generation_cache(args.cache_dir, loaded.identity, True)
    rows, failed = [], 0
    for path in args.submissions:
        try:
            if task is None:
                r = score_files(args.solutions, require_csv(path, WITHOUT_TASK), args.variant, subset=args.subset,
                                strict=args.strict)
                rows.append({"submission": path, "score": r.score, "components": {
                    "value": r.value, "ref": r.ref, "na": r.na}, "n": r.n, "n_missing": r.n_missing})
            else:
                from kohaku.tasks.score.scoring import score_submission

                r = score_submission(task, args.solutions, path, variant=args.variant, subset=args.subset,
                                     strict=args.strict, backend=backend, cache=cache, fmt=args.submission_format)
                rows.append({"submission": path, "score": r.score, "components": r.components, "n": r.n,
                             "n_missing": r.n_missing,
                             "duplicates": len((r.details.get("duplicates") or {}).get("ids") or []),
                             "unknown_ids": r.details.get("unknown_ids") or []})
        except Exception as exc:   # this file's fault (a named error) or a bug: its row, the others go on
            if args.debug:
                raise
            failed += 1
            message = one_line(exc, path)
            print(f"error: {message}", file=sys.stderr)
            rows.append({"submission": path, "error": message})
    table = score_table(rows)
    fmt = args.format or "text"
    if fmt == "csv":
        text = table.write_csv()
    elif fmt == "json":
        text = json.dumps(table.to_dicts(), indent=2, allow_nan=False) + "\n"
    else:
        with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_width_chars=200, fmt_str_lengths=80,
                       tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True):
            text = str(table) + "\n"
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
        print(f"{len(rows)} submissions scored ({failed} failed); wrote {args.out}")
    else:
        sys.stdout.write(text)
    return 2 if failed else 0


def _task(args: argparse.Namespace):
    """The task of ``--task``, its interpolations resolved with ``--set`` (kohaku.runner.pipeline.task_values)."""
    from kohaku.runner.pipeline import task_values
    from kohaku.tasks import build_task, task_file

    return build_task(task_values(args.task, args.set), f"{task_file(args.task)}: task")


def score_task(args: argparse.Namespace, task) -> int:
    from kohaku.tasks.score.scoring import score_submission

    try:
        backend, cache = None, None
        if args.llm:
            from kohaku.llm.base import load_backend
            from kohaku.llm.cache import open_generation_cache
            from kohaku.runner.pipeline import option_values

            loaded = load_backend(option_values("llm", args.llm))
            backend, cache = (lambda: loaded), open_generation_cache(args.cache_dir, loaded.identity, True)
        elif any(m.fn == "llm_judge" for m in task.score.metric_specs):
            raise ConfigError(f"task {task.name}'s metric asks an LLM judge: give --llm (e.g. --llm fake)")
        result = score_submission(task, args.solutions, args.submission, variant=args.variant,
                                  subset=args.subset, strict=args.strict, backend=backend, cache=cache,
                                  fmt=args.submission_format)
    except (KohakuError, FileNotFoundError) as exc:
        if args.debug:
            raise
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2
    if args.json:
        rows = result.table.to_dicts()
        args.json.write_text(json.dumps({**result.summary(), "rows": rows}, indent=2, allow_nan=False,
                                        default=str))
    print("\n".join(task_report(result, args.mismatches)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
