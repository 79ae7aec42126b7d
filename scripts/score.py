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
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kohaku.tasks.rooms.wattbot.metric import VARIANTS  # noqa: E402
from kohaku.tools.score_command import command  # noqa: E402


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
    return command(args)


if __name__ == "__main__":
    sys.exit(main())
