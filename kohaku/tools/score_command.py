"""scripts/score.py's work: score submissions against a solutions file with a task's metric, and
print the report (one submission) or the table of scores (several). The script parses the
arguments (its module doc says what each does) and calls :func:`command`.

Without ``--task`` (or with a task whose scorer is WattBot's) a submission is scored with
WattBot's metric (kohaku.tasks.rooms.wattbot.metric) and reported with its error classes
(kohaku.tasks.rooms.wattbot.diagnosis); with ``--task`` by that task's scorer
(kohaku.tasks.score.scoring.score_submission). A file that cannot be scored costs only itself:
its error is one line on stderr (and a row of the table), exit code 2; ``--debug`` re-raises.
Held to the scripts' rule: it prints its results.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

import polars as pl

from kohaku.core.config import ConfigError
from kohaku.core.errors import KohakuError, one_line
from kohaku.core.readfile import debug_wanted
from kohaku.tasks.files.submissions import require_csv
from kohaku.tasks.rooms.wattbot.diagnosis import classify, error_lines, error_summary
from kohaku.tasks.rooms.wattbot.metric import WEIGHTS, ScoreResult, score_files

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


def _failed(exc: BaseException, debug: bool) -> int:
    """A named error of the one file scored: re-raised with --debug, else one line on stderr, exit 2."""
    if debug:
        raise exc
    print(f"error: {one_line(exc)}", file=sys.stderr)
    return 2


def _judge(args: argparse.Namespace):
    """The ``--llm`` backend (loaded once, handed out lazily) and its generation cache under
    ``--cache-dir``; (None, None) without ``--llm``."""
    if not args.llm:
        return None, None
    from kohaku.llm.base import load_backend
    from kohaku.llm.cache import open_generation_cache
    from kohaku.runner.pipeline import option_values

    loaded = load_backend(option_values("llm", args.llm))
    return (lambda: loaded), open_generation_cache(args.cache_dir, loaded.identity, True)


def command(args: argparse.Namespace) -> int:
    """Run scripts/score.py's parsed arguments: 0, or 2 when a file could not be scored (the
    error on stderr, one line; ``--debug`` or ``KOHAKU_DEBUG=1`` re-raises it)."""
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
            return _failed(exc, args.debug)
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
        return _failed(exc, args.debug)
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
    backend, cache = _judge(args) if task is not None else (None, None)
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
        if not args.llm and any(m.fn == "llm_judge" for m in task.score.metric_specs):
            raise ConfigError(f"task {task.name}'s metric asks an LLM judge: give --llm (e.g. --llm fake)")
        backend, cache = _judge(args)
        result = score_submission(task, args.solutions, args.submission, variant=args.variant,
                                  subset=args.subset, strict=args.strict, backend=backend, cache=cache,
                                  fmt=args.submission_format)
    except (KohakuError, FileNotFoundError) as exc:
        return _failed(exc, args.debug)
    if args.json:
        rows = result.table.to_dicts()
        args.json.write_text(json.dumps({**result.summary(), "rows": rows}, indent=2, allow_nan=False,
                                        default=str))
    print("\n".join(task_report(result, args.mismatches)))
    return 0
