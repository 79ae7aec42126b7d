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

from kohaku.answer.voting import REF_MODES, TIEBREAKS  # noqa: E402
from kohaku.tools.ensemble_command import command  # noqa: E402


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
    return command(args)


if __name__ == "__main__":
    sys.exit(main())
