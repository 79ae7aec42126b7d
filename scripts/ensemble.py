"""Ensemble WattBot submission CSVs by an abstention-aware, canonical majority vote.

Usage:
  python scripts/ensemble.py --out OUT.csv IN1.csv IN2.csv ... [--ref-mode answer_priority]
      [--tiebreak first] [--weights 2,1,1] [--no-ignore-blank] [--raw] [--seed 0]
      [--metadata metadata.csv] [--task NAME|TASK.yaml]

``--task`` ensembles another competition's submissions (kohaku/answer/ensemble.py): its
submission columns and list format, its vote grouping (amounts, names, text), its blank cell
and not-answerable token (an answer when the task never abstains), the winner as written when
the task keeps the surface form; the output in the task's format.

Inputs are in priority order (ties go to the earlier file with --tiebreak first). Values are
compared in canonical form ("1,000" = "1000.0"; --raw votes on the strings as written, like
KohakuRAG). Refs come only from the inputs agreeing with the winning answer (--ref-mode
answer_priority | union | intersection | majority). ref_url is rebuilt from --metadata
(id,url columns) when given, else from the inputs' ref_id/ref_url pairs. Writes a valid
submission (kohaku/tasks/wattbot/submission.py) and prints a short summary.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kohaku.core.config import ConfigError  # noqa: E402
from kohaku.answer.ensemble import ensemble_submissions  # noqa: E402
from kohaku.answer.voting import REF_MODES, TIEBREAKS, VoteConfig  # noqa: E402
from kohaku.tasks.wattbot.submission import SubmissionError, read_csv_str, require_columns, write_submission  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="+", type=Path, help="submission CSVs, in priority order")
    parser.add_argument("--out", required=True, type=Path, help="output submission CSV")
    parser.add_argument("--ref-mode", choices=REF_MODES, default="answer_priority")
    parser.add_argument("--tiebreak", choices=TIEBREAKS, default="first")
    parser.add_argument("--weights", help="comma-separated vote weight per input, e.g. 2,1,1")
    parser.add_argument("--no-ignore-blank", action="store_true", help="let blank answers win votes")
    parser.add_argument("--raw", action="store_true", help="vote on raw strings (no canonical values)")
    parser.add_argument("--seed", type=int, default=0, help="seed for --tiebreak random")
    parser.add_argument("--metadata", type=Path, help="metadata.csv (id,url) to rebuild ref_url")
    parser.add_argument("--task", default="wattbot",
                        help="the competition: a conf/task option or a task YAML's path (default wattbot)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
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
            from kohaku.core.artifacts import atomic_write
            from kohaku.runner.pipeline import task_values
            from kohaku.tasks import build_task, task_file
            from kohaku.answer.ensemble import ensemble_task

            task = build_task(task_values(args.task), f"{task_file(args.task)}: task")
            if task.submission.writer != "wattbot":
                frames = [read_csv_str(p) for p in args.inputs]
                answers, submission = ensemble_task(frames, task, cfg, [str(p) for p in args.inputs])
                args.out.parent.mkdir(parents=True, exist_ok=True)
                atomic_write(args.out, submission.write_csv)
                return _summary(answers, args)
        urls = None
        if args.metadata:
            meta = read_csv_str(args.metadata)
            require_columns(meta, ("id", "url"), str(args.metadata))
            urls = {r["id"].strip(): r["url"].strip() for r in meta.to_dicts() if r["id"].strip()}
        frames = [read_csv_str(p) for p in args.inputs]
        answers, submission = ensemble_submissions(frames, cfg, urls, [str(p) for p in args.inputs])
        write_submission(submission, args.out)
    except (ConfigError, SubmissionError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return _summary(answers, args)


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
