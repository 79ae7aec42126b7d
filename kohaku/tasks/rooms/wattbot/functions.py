"""WattBot's named functions (the names the wattbot task YAML uses; listed in
kohaku.tasks.named.catalog): its vote grouping, its submission CSV, its reference score, its error
classes, its scorer and its metric's description (the reports' fallback)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import polars as pl

from kohaku.core.errors import MetricError
from kohaku.tasks.named.builtin import MetricEnv, _cell
from kohaku.tasks.score.check import Layout
from kohaku.tasks.score.components import Component, Metric
from kohaku.tasks.grouping import CANONICAL_GROUPING, Grouping
from kohaku.tasks.score.scoring import TaskScore, task_classes
from kohaku.tasks.spec import SubmissionSpec, Task, VoteSpec
from kohaku.tasks.rooms.wattbot import diagnosis
from kohaku.tasks.rooms.wattbot.metric import VARIANTS, WEIGHTS, ref_score, score_files, score_frames
from kohaku.tasks.rooms.wattbot.submission import answers_to_submission, write_submission

WATTBOT = "wattbot"


def wattbot_grouping(spec: VoteSpec) -> Grouping:
    """kohaku.core.values canonical forms; the competition's tolerance (rel 1e-3, abs 1e-3)."""
    return CANONICAL_GROUPING


def wattbot_writer(answers: pl.DataFrame, questions: pl.DataFrame, spec: SubmissionSpec,
                   path: Path) -> pl.DataFrame:
    """The WattBot CSV (kohaku.tasks.rooms.wattbot.submission): refuses to write an invalid one."""
    sub = answers_to_submission(answers, questions)
    write_submission(sub, path)
    return sub


def wattbot_table(answers: pl.DataFrame, questions: pl.DataFrame) -> pl.DataFrame:
    """The WattBot CSV's table (kohaku.tasks.rooms.wattbot.submission), not written: what the ensemble
    of WattBot submissions writes (kohaku.answer.ensemble.ensemble_submissions)."""
    return answers_to_submission(answers, questions)


def doc_jaccard_metric(rows: list[dict[str, Any]], params: dict[str, Any], env: MetricEnv) -> list[float | None]:
    """WattBot's reference score: the Jaccard index of the cited (``params.pred``, default
    ``ref_id``) and the gold (``params.gold``, default ``ref_id``) document ids, by the
    competition's rules (kohaku.tasks.rooms.wattbot.metric.ref_score); a missing row scores 0."""
    pred, gold = params.get("pred", "ref_id"), params.get("gold", "ref_id")
    out: list[float | None] = []
    for r in rows:
        if r.get("submission") is None:
            out.append(0.0)
            continue
        out.append(ref_score(str(_cell(r, "solution", gold, "doc_jaccard") or ""),
                             str(_cell(r, "submission", pred, "doc_jaccard") or "")))
    return out


def wattbot_classes(table: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, Any]]:
    """WattBot's error classes (kohaku/tasks/rooms/wattbot/diagnosis.py): correct, missing, answered_na,
    needless_abstention, wrong_ref, scale, near_miss, wrong_number, wrong_range, wrong_name,
    wrong_list; with their counts."""
    table = diagnosis.classify(table)
    return table, diagnosis.error_summary(table)


# -- its metric, as the score stage and the reports describe it -----------------------------


def wattbot_metric(variant: str | None = None) -> Metric:
    """WattBot's metric for ``variant`` (wattbot: NA over every question; wattbot-recall: NA
    the recall over unanswerable questions, 1.0 when there is none)."""
    variant = variant or WATTBOT
    if variant not in VARIANTS:
        raise MetricError(f"unknown metric variant '{variant}'; use one of {', '.join(VARIANTS)}")
    recall = variant == "wattbot-recall"
    return Metric(WATTBOT, (
        Component("value", "value_ok", WEIGHTS["value"]),
        Component("ref", "ref_score", WEIGHTS["ref"]),
        Component("na", "na_ok", WEIGHTS["na"], "truth_blank" if recall else None, 1.0 if recall else None),
    ), variant, title="WattBot", classes="wattbot", class_names=diagnosis.CLASSES,
        needs=("qid", "value_ok", "ref_score", "na_ok", "truth_blank"),
        classes_source="kohaku/tasks/rooms/wattbot/diagnosis.py")


def wattbot_scorer(task: Task, solutions: Path, submission: Path, variant: str | None, subset: bool,
                   strict: bool, backend: Callable[[], Any] | None = None, cache: Any = None) -> TaskScore:
    """The competition's metric exactly (kohaku.tasks.rooms.wattbot.metric, variant ``wattbot`` or
    ``wattbot-recall``) and its error classes (the task's ``score.classes``)."""
    variant = variant or WATTBOT
    result = score_files(solutions, submission, variant, subset=subset, strict=strict)
    table, errors = task_classes(task, result.table)
    details = result.summary()
    for key in ("score", "components", "n", "n_missing", "n_extra", "warnings"):
        details.pop(key)
    return TaskScore(task.name, "wattbot", result.score,
                     {"value": result.value, "ref": result.ref, "na": result.na, "unit": result.unit},
                     wattbot_metric(variant).as_json()["components"], result.n, result.n_missing,
                     result.n_extra, table, errors, details, result.warnings)


def wattbot_frames(solutions: pl.DataFrame, submission: pl.DataFrame, variant: str | None,
                   names: tuple[str, str]) -> pl.DataFrame:
    """A submission table scored against a solutions table with WattBot's metric, classified
    (kohaku.report.compare's sources without a task)."""
    result = score_frames(solutions, submission, variant or WATTBOT, names=names)
    return diagnosis.classify(result.table)


def wattbot_columns(task: Task) -> tuple[str, str]:
    """(id column, value column) of the WattBot CSV."""
    return "id", "answer_value"


def wattbot_layout(task: Task) -> Layout:
    """The WattBot CSV's columns for the perturbations of the gold (kohaku.tasks.score.check): the
    competition refuses an empty explanation (``x``), and a row given ``is_blank`` cites
    ``is_blank``."""
    return Layout(["id", "answer_value", "answer_unit", "ref_id", "explanation"], "id", "answer_value",
                  "ref_id", "is_blank", filler="x", blank_refs="is_blank")


def wattbot_rows(task: Task, solutions: Path, submission: Path, variant: str) -> dict[str, dict[str, float]]:
    """The competition metric's per-question components (``value``, ``ref``, ``na``) and
    ``score``, their weighted total, of a submission (kohaku.tasks.score.check)."""
    r = score_files(solutions, submission, variant, subset=True)
    out = {}
    for t in r.table.to_dicts():
        comp = {"value": float(t["value_ok"]), "ref": float(t["ref_score"]), "na": float(t["na_ok"])}
        comp["score"] = sum(WEIGHTS[k] * comp[k] for k in WEIGHTS)
        out[t["qid"]] = comp
    return out
