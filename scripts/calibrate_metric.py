"""Calibrate a metric on your own labels: agreement, confusion matrix, every disagreement by category.

Usage:
  python scripts/calibrate_metric.py LABELS --task NAME|TASK.yaml [--metric NAME] [--llm NAME]
  python scripts/calibrate_metric.py LABELS --metric numeric_match|llm_judge|... [--param KEY=VALUE ...]
      [--question-col C] [--gold-col C] [--answer-col C] [--label-col C] [--category-col C]
      [--id-col C] [--format csv|jsonl] [--show N] [--json OUT.json]

LABELS is a CSV or JSON-lines file with one answer a row: the question, the gold answer, the
answer and a person's label (correct/incorrect, true/false, 1/0, yes/no). The metric is a
component of a task (``--task financebench --metric numeric``: its fn with the task's params;
without ``--metric``, the task's first component) or a named metric (``--metric numeric_match``);
``--param KEY=VALUE`` sets or overrides one of its params (a YAML value: ``--param
rounded_inputs_tol=0``, ``--param final_figure=false``). A metric that asks an LLM
(``llm_judge``) uses ``--llm`` (a conf/llm option: fake, smollm2_cpu, an OpenAI-compatible
server's) through the generation cache under ``--cache-dir``.

Prints the agreement over the answers the metric covers, the confusion matrix (label against
metric) and every disagreement under its category: the file's category column when it has one,
else the amount rule that decided (strict, rounded_inputs_tol, ratio_percent, unit_conversion,
final_figure, text_gold, asked_precision, refusal; "NAME (off)": a rule the metric leaves off that
would have decided it) or what the answer states instead (no amount, percent/ratio, scale, sign,
near miss, other figure), else ``text`` (kohaku/tasks/score/calibration.py). ``--json`` writes the
figures. Exit code 0; 2 for a file or config error (the message names the file, row or key).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml  # noqa: E402

from kohaku.core.config import ConfigError  # noqa: E402
from kohaku.core.errors import KohakuError  # noqa: E402
from kohaku.tasks.score.amounts import CAREFUL  # noqa: E402
from kohaku.tasks.named.builtin import MetricEnv  # noqa: E402
from kohaku.tasks.score.calibration import (LabelColumns, amount_rules_of, calibrate, default_category,  # noqa: E402
                                      read_labels, report_lines)


def _params(pairs: list[str]) -> dict:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--param {pair!r}: write KEY=VALUE (e.g. --param rounded_inputs_tol=0.002)")
        out[key.strip()] = yaml.safe_load(value)
    return out


def _metric(args: argparse.Namespace) -> tuple[str, str, dict, object]:
    """(display name, metric fn name, params, task) of the arguments."""
    task = None
    if args.task:
        from kohaku.runner.pipeline import task_values
        from kohaku.tasks import build_task, task_file

        task = build_task(task_values(args.task, args.set), f"{task_file(args.task)}: task")
        specs = task.score.metric_specs
        if not specs:
            raise ConfigError(f"task {task.name} has no score.metrics to calibrate (a components scorer's)")
        if args.metric:
            found = [m for m in specs if args.metric in (m.name, m.fn)]
            if not found:
                raise ConfigError(f"--metric {args.metric}: task {task.name} has "
                                  + ", ".join(f"{m.name} ({m.fn})" for m in specs))
            spec = found[0]
        else:
            spec = specs[0]
        return f"{spec.name} ({spec.fn}) of task {task.name}", spec.fn, {**spec.params, **_params(args.param)}, task
    if not args.metric:
        raise ConfigError("give --task (a task's metric) or --metric (a named metric, e.g. numeric_match)")
    return args.metric, args.metric, _params(args.param), None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("labels", type=Path, help="labelled answers: CSV or JSON lines")
    parser.add_argument("--task", default=None, help="a conf/task option (financebench, ...) or a task YAML's path")
    parser.add_argument("--metric", default=None,
                        help="a component of the task (its name or fn), or without --task a named metric "
                             "(numeric_match, llm_judge, exact_match, ...)")
    parser.add_argument("--param", action="append", default=[],
                        help="KEY=VALUE: a param of the metric (a YAML value), repeatable")
    parser.add_argument("--llm", default=None, help="conf/llm option for a metric that asks an LLM, e.g. fake")
    parser.add_argument("--cache-dir", type=Path, default=Path("outputs/cache"),
                        help="generation cache of the judge's answers (default outputs/cache)")
    parser.add_argument("--set", action="append", default=[],
                        help="a config value the task file's interpolations read, e.g. corpus.root=/data")
    parser.add_argument("--format", default=None, choices=["csv", "jsonl"],
                        help="the labels file's format (default: by its extension)")
    parser.add_argument("--question-col", default="question", help="the question column (default question)")
    parser.add_argument("--gold-col", default="gold", help="the gold answer column (default gold)")
    parser.add_argument("--answer-col", default="answer", help="the answer column (default answer)")
    parser.add_argument("--label-col", default="label", help="the label column (default label)")
    parser.add_argument("--category-col", default="category",
                        help="a column naming each answer's category (default category; used when present)")
    parser.add_argument("--id-col", default="id", help="a column naming each answer (default id; else its row)")
    parser.add_argument("--show", type=int, default=None, help="list at most N disagreements per category")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures as JSON")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        name, fn_name, params, task = _metric(args)
        from kohaku.tasks.named import registry

        fn = registry.lookup("metric", fn_name, "--metric")
        columns = LabelColumns(args.question_col, args.gold_col, args.answer_col, args.label_col,
                               args.category_col or None, args.id_col or None)
        items = read_labels(args.labels, columns, args.format)
        backend = cache = None
        if args.llm:
            from kohaku.llm.base import load_backend
            from kohaku.llm.cache import open_generation_cache
            from kohaku.runner.pipeline import option_values

            loaded = load_backend(option_values("llm", args.llm))
            backend, cache = (lambda: loaded), open_generation_cache(args.cache_dir, loaded.identity, True)
        elif fn_name == "llm_judge":
            raise ConfigError("the llm_judge metric asks an LLM: give --llm (e.g. --llm fake)")
        if fn_name == "numeric_match":
            rel_tol, rules = amount_rules_of(params)
        else:                      # name an answer's style by the careful rules
            rel_tol, rules = 0.0, CAREFUL
        result = calibrate(items, fn, params, MetricEnv(backend=backend, cache=cache, stats={}, task=task), name,
                           categorize=lambda it: default_category(it, rules, rel_tol))
    except (KohakuError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(report_lines(result, args.show)))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result.summary(), indent=2, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
