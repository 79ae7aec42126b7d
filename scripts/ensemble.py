"""Ensemble submissions by an abstention-aware majority vote (WattBot's CSVs by default).

Usage:
  python scripts/ensemble.py --out OUT.csv IN1.csv IN2.csv ... [--ref-mode answer_priority]
      [--tiebreak first] [--weights 2,1,1] [--no-ignore-blank] [--raw] [--seed 0]
      [--metadata metadata.csv] [--task NAME|TASK.yaml] [--questions Q.csv] [--format csv|json]

``--task`` ensembles another competition's submissions (kohaku/answer/ensemble.py), each its
flat CSV or its JSON writer's document (detected; kohaku/tasks/files/submissions.py). They are voted
exactly as the pipeline's vote stage votes samples: each question with the grouping of its answer
kind (task.answer.kinds: numbers within vote.tolerance, booleans, names, sets of names, dates;
the kind from --questions, else from the submissions' kind column), else the task's vote.group;
its blank cell, and its not-answerable token (an answer when the task never abstains); the
winner as written when the task keeps the surface form, else rendered by its kind. The output is
the task's JSON document when --out ends in .json (or --format json), else its flat CSV. The
document is written as its members are: non-ASCII escaped (\\uXXXX) when every JSON member that
holds non-ASCII text escapes it, raw UTF-8 when one does not, else as the task says
(task.submission.ensure_ascii).

Inputs are in priority order (ties go to the earlier file with --tiebreak first). Values are
compared in canonical form ("1,000" = "1000.0"; --raw votes on the strings as written, like
KohakuRAG). Refs come only from the inputs agreeing with the winning answer (--ref-mode
answer_priority | union | intersection | majority). ref_url is rebuilt from --metadata
(id,url columns) when given, else from the inputs' ref_id/ref_url pairs. Writes a valid
submission (kohaku/tasks/rooms/wattbot/submission.py) and prints a short summary.

Every input is read before any vote: when some cannot be read (any bytes: a wrong encoding,
binary data, JSON nested too deep, NaN; kohaku/core/readfile.py), each is named on its own
``error:`` line, nothing is written and the exit code is 2; never a traceback, unless
``--debug`` (or ``KOHAKU_DEBUG=1``) asks for it.

``--select SOLUTIONS`` ranks the choices: each input alone, the ensemble of all, and (three
inputs or more) each ensemble leaving one input out, scored against SOLUTIONS (WattBot's metric,
or --task's scorer), with the selection report of kohaku/report/selection.py: the in-sample best,
the out-of-sample estimate of picking the best (chosen on half the questions, scored on the
rest, repeated) with its 95 % interval, the optimism, P(best) per choice, and the pick: the
simplest choice (the first input alone, then the other inputs, then the ensembles) whose paired
interval of the difference to the best contains 0. --out is still the ensemble of all inputs.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kohaku.core.config import ConfigError  # noqa: E402
from kohaku.core.errors import one_line  # noqa: E402
from kohaku.core.readfile import debug_wanted, read_each  # noqa: E402
from kohaku.answer.ensemble import ensemble_submissions  # noqa: E402
from kohaku.answer.voting import REF_MODES, TIEBREAKS, VoteConfig  # noqa: E402
from kohaku.tasks.files.submissions import require_csv  # noqa: E402
from kohaku.tasks.rooms.wattbot.submission import read_csv_str, require_columns, write_submission  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="+", type=Path,
                        help="submissions (CSV, or with --task its JSON documents), in priority order")
    parser.add_argument("--out", required=True, type=Path, help="output submission (CSV, or .json with --task)")
    parser.add_argument("--ref-mode", choices=REF_MODES, default="answer_priority")
    parser.add_argument("--tiebreak", choices=TIEBREAKS, default="first")
    parser.add_argument("--weights", help="comma-separated vote weight per input, e.g. 2,1,1")
    parser.add_argument("--no-ignore-blank", action="store_true", help="let blank answers win votes")
    parser.add_argument("--raw", action="store_true", help="vote on raw strings (no canonical values)")
    parser.add_argument("--seed", type=int, default=0, help="seed for --tiebreak random")
    parser.add_argument("--metadata", type=Path, help="metadata.csv (id,url) to rebuild ref_url")
    parser.add_argument("--task", default="wattbot",
                        help="the competition: a conf/task option or a task YAML's path (default wattbot)")
    parser.add_argument("--questions", type=Path,
                        help="the task's questions file: each question's answer kind (default: the "
                             "submissions' kind column)")
    parser.add_argument("--submission-format", choices=("csv", "json"),
                        help="with --task: the inputs' format (default: detected; a .json file or one "
                             "that starts with { or [ is the task's JSON document)")
    parser.add_argument("--format", choices=("csv", "json"),
                        help="output format with --task (default: json for an --out ending in .json, else csv)")
    parser.add_argument("--debug", action="store_true",
                        help="re-raise the first error with its traceback (also: KOHAKU_DEBUG=1)")
    parser.add_argument("--select", type=Path, metavar="SOLUTIONS",
                        help="rank each input alone, the ensemble and the leave-one-out ensembles "
                             "against this solutions file, with the selection report")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
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
        return _select(args)
    return code


def _select(args: argparse.Namespace) -> int:
    """Each input alone, the ensemble of all and the leave-one-out ensembles scored against
    --select, with the selection report (see the module doc)."""
    import contextlib
    import io
    import tempfile

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
    passed = [f"--ref-mode={args.ref_mode}", f"--tiebreak={args.tiebreak}", f"--seed={args.seed}",
              f"--task={args.task}"]
    passed += ["--no-ignore-blank"] * args.no_ignore_blank + ["--raw"] * args.raw
    for flag, value in (("--metadata", args.metadata), ("--questions", args.questions),
                        ("--submission-format", args.submission_format), ("--format", args.format)):
        if value is not None:
            passed.append(f"{flag}={value}")
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
                        code = main([*map(str, (args.inputs[j] for j in members)), f"--out={path}", *passed,
                                     "--weights=" + ",".join(str(weights[j]) for j in members)])
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


if __name__ == "__main__":
    sys.exit(main())
