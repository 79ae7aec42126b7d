"""scripts/ensemble.py's work: vote submissions into one (WattBot's CSVs, or any task's CSV or
JSON documents) and, with ``--select``, rank the inputs and the ensembles with the selection
report. The script parses the arguments (its module doc says what each does) and calls
:func:`command`. Held to the scripts' rule: it prints its results.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import sys
import tempfile
from pathlib import Path

from kohaku.answer.ensemble import ensemble_submissions
from kohaku.answer.voting import VoteConfig
from kohaku.core.config import ConfigError
from kohaku.core.errors import KohakuError, one_line
from kohaku.core.readfile import debug_wanted, read_each
from kohaku.tasks.files.submissions import require_csv
from kohaku.tasks.rooms.wattbot.submission import read_csv_str, require_columns, write_submission


def command(args: argparse.Namespace) -> int:
    """Vote ``args.inputs`` into ``args.out``, print the summary and (``args.select``) the
    selection report; the exit code (2: an input or option that cannot be used, each named)."""
    args.debug = debug_wanted(args.debug)
    try:
        weights = None
        if args.weights:
            try:
                weights = [float(w) for w in args.weights.split(",")]
            except ValueError:
                raise ConfigError(f"--weights '{args.weights}': give comma-separated numbers") from None
            if len(weights) != len(args.inputs):
                raise ConfigError(f"--weights has {len(weights)} values for {len(args.inputs)} inputs")
        cfg = VoteConfig(
            ignore_blank=not args.no_ignore_blank,
            ref_mode=args.ref_mode,
            tiebreak=args.tiebreak,
            weights=weights,
            seed=args.seed,
            canonical=not args.raw,
        )
        if args.task != "wattbot":
            from kohaku.runner.pipeline import task_values
            from kohaku.tasks import build_task, task_file

            task = build_task(task_values(args.task), f"{task_file(args.task)}: task")
            if task.submission.writer != "wattbot":
                return _summary(_ensemble_task(task, cfg, args), args)
        urls = None
        if args.metadata:
            meta = read_csv_str(args.metadata)
            require_columns(meta, ("id", "url"), str(args.metadata))
            urls = {r["id"].strip(): r["url"].strip() for r in meta.to_dicts() if r["id"].strip()}
        frames = read_each(args.inputs, lambda p: read_csv_str(require_csv(p, 'ensemble.py without --task')),
                           args.debug)
        answers, submission = ensemble_submissions(frames, cfg, urls, [str(p) for p in args.inputs])
        write_submission(submission, args.out)
    except Exception as exc:   # named errors, one line per unreadable input; a bug said to be one
        if args.debug:
            raise
        for line in getattr(exc, "lines", None) or [one_line(exc)]:
            print(f"error: {line}", file=sys.stderr)
        return 2
    code = _summary(answers, args)
    if args.select is not None and code == 0:
        return select(args)
    return code




def select(args: argparse.Namespace) -> int:
    """Each input alone, the ensemble of all and the leave-one-out ensembles scored against
    --select, with the selection report (see the module doc)."""
    from kohaku.report.compare import Config, score_matrix, score_source, score_with_task
    from kohaku.report.selection import SelectionConfig, select_matrix

    weights = [float(w) for w in args.weights.split(",")] if args.weights else [1.0] * len(args.inputs)
    suffix = ".json" if (args.format or ("json" if args.out.suffix.lower() == ".json" else "csv")) == "json" else ".csv"
    names = [p.stem if p.is_file() else p.name for p in args.inputs]
    if len(set(names)) != len(names):
        names = [f"{i}:{n}" for i, n in enumerate(names)]
    choices: list[tuple[str, Path | None, list[int]]] = [(n, p, [i]) for i, (n, p) in enumerate(zip(names, args.inputs))]
    choices.append(("ensemble", None, list(range(len(args.inputs)))))
    if len(args.inputs) >= 3:
        choices += [(f"ensemble-without-{n}", None, [j for j in range(len(args.inputs)) if j != i])
                    for i, n in enumerate(names)]
    task = None
    if args.task != "wattbot":
        from kohaku.tasks import load_task

        task = load_task(args.task)
    try:
        with tempfile.TemporaryDirectory(prefix="ensemble-select-") as tmp:
            configs = []
            for name, path, members in choices:
                if path is None:
                    path = Path(tmp) / f"{len(configs)}{suffix}"
                    with contextlib.redirect_stdout(io.StringIO()):
                        code = command(_member_args(args, members, weights, path))
                    if code != 0:
                        return code
                if task is None:
                    from kohaku.tasks.rooms.wattbot.functions import wattbot_metric
                    from kohaku.tasks.rooms.wattbot.submission import read_csv_str

                    table = score_source(read_csv_str(args.select), path, "wattbot", str(args.select))
                    configs.append(Config(name, [table], [str(path)], wattbot_metric("wattbot")))
                else:
                    scored = score_with_task(task, args.select, path, None, args.submission_format
                                             if path in args.inputs else None)
                    configs.append(Config(name, [scored.table], [str(path)], scored.metric))
            m = score_matrix(configs, configs[0].metric)
    except (KohakuError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    selection = select_matrix(m, None, SelectionConfig(seed=args.seed))
    print(f"\nselection over {len(configs)} choices ({m.n} questions; simplest first: the inputs "
          "alone in the order given, then the ensembles):")
    for line in selection.lines():
        print(f"  {line}")
    for r in selection.rows():
        print(f"  {r['config']}: {r['score']:.4f}, vs best {r['delta_to_best']:+.4f} "
              f"[{r['delta_lo']:+.4f}, {r['delta_hi']:+.4f}], P(best) {r['p_best']:.3f}"
              f"{', pick' if r['picked'] else ''}")
    return 0


def _member_args(args: argparse.Namespace, members: list[int], weights: list[float],
                 out: Path) -> argparse.Namespace:
    """``args`` for the ensemble of the inputs ``members`` (their weights) written to ``out``:
    the same vote, task and formats, no selection."""
    sub = copy.copy(args)
    sub.inputs = [args.inputs[j] for j in members]
    sub.weights = ",".join(str(weights[j]) for j in members)
    sub.out = out
    sub.select = None
    return sub


def _ensemble_task(task, cfg: VoteConfig, args: argparse.Namespace):
    """The vote of --task's submissions (CSV or JSON) written as CSV or as the task's document."""
    from kohaku.answer.ensemble import ensemble_document, ensemble_task, members_escape
    from kohaku.core.artifacts import atomic_write
    from kohaku.tasks.files.documents import write_json
    from kohaku.tasks.files.io import read_questions
    from kohaku.tasks.files.submissions import read_submission

    questions = None
    if args.questions:
        questions = read_questions(args.questions, task.questions)
    members = read_each(args.inputs, lambda p: read_submission(p, task, args.submission_format), args.debug)
    names = [str(p) for p in args.inputs]
    fmt = args.format or ("json" if args.out.suffix.lower() == ".json" else "csv")
    if task.submission.shape:      # the competition's own JSON, as its members are (kohaku.tasks.files.shapes)
        from kohaku.tasks.files.shapes import write_shaped

        answers, submission = ensemble_task(members, task, cfg, names, questions)
        write_shaped(submission, task.submission.shape, args.out)
        return answers
    if fmt == "json":
        answers, document = ensemble_document(members, task, cfg, names, questions)
        # written as the members are: non-ASCII escaped when every member escapes it
        write_json(document, task.submission, args.out, ensure_ascii=members_escape(members))
        return answers
    answers, submission = ensemble_task(members, task, cfg, names, questions)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(args.out, submission.write_csv)
    return answers


def _summary(answers, args: argparse.Namespace) -> int:
    n = answers.height
    print(f"inputs: {len(args.inputs)}   questions: {n}   blank: {int(answers['is_blank'].sum())}")
    if n:
        print(f"mean agreement: {answers['agreement'].mean():.3f}   "
              f"unanimous: {int((answers['agreement'] >= 1.0 - 1e-9).sum())}")
    print(f"wrote {args.out}")
    return 0
