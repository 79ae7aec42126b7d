"""kohaku's own named functions for tasks: vote groupings, submission writers, metrics, error classes.

Each is registered under the name a task YAML uses (:mod:`kohaku.tasks.registry`). Signatures:

- group:   ``fn(spec: VoteSpec) -> Grouping``
- writer:  ``fn(answers, questions, spec: SubmissionSpec, path) -> DataFrame`` (writes ``path``)
- metric:  ``fn(rows, params, env) -> list[float | None]``: one value per row (None: the metric
  does not cover that question); ``rows`` are dicts with qid, question, truth, pred, pred_blank,
  missing; ``env`` gives the LLM backend and generation cache to metrics that need a model.
- classes: ``fn(table) -> (table with answer_kind, error_class, error_detail, summary dict)``
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import polars as pl

from kohaku import diagnosis
from kohaku.artifacts import atomic_write
from kohaku.config import ConfigError, build
from kohaku.llm.base import Counters
from kohaku.submission import answers_to_submission, format_ref_list, write_submission
from kohaku.tasks import classes, documents
from kohaku.tasks.accounting import normalize_text, numeric_match, parse_amount, same_amount
from kohaku.tasks.judge import JudgeConfig, JudgeItem, judge
from kohaku.tasks.registry import register
from kohaku.tasks.spec import SubmissionSpec, VoteSpec
from kohaku.tasks.squad import exact_match, normalize_answer, token_f1
from kohaku.values import format_number
from kohaku.voting import WATTBOT_GROUPING, Grouping

# -- vote groupings -----------------------------------------------------------------------


@register("group", "wattbot")
def wattbot_grouping(spec: VoteSpec) -> Grouping:
    """kohaku.values canonical forms; the competition's tolerance (rel 1e-3, abs 1e-3)."""
    return WATTBOT_GROUPING


def _empty(raw: str) -> bool:
    return not (raw or "").strip()


@register("group", "amounts")
def amounts_grouping(spec: VoteSpec) -> Grouping:
    """Amounts (``$1,577.00``, ``(1.2)``, ``2.8%``, ``USD 1.5 billion``; a bare ``3M`` is a name)
    within ``vote.tolerance``; anything else by its normalised text (SQuAD normalisation)."""
    def parse(raw: str) -> Any:
        amount = parse_amount(raw)
        return amount if amount is not None else normalize_text(raw)

    def same(a: Any, b: Any) -> bool:
        if isinstance(a, str) or isinstance(b, str):
            return a == b
        return same_amount(a, b, spec.tolerance)

    def render(parsed: Any, raw: str) -> str:
        if isinstance(parsed, str):
            return raw.strip()
        return format_number(parsed.value) + ("%" if parsed.percent else "")

    return Grouping(parse, same, render, blank_raw=_empty, blank_parsed=lambda p: p == "")


@register("group", "text")
def text_grouping(spec: VoteSpec) -> Grouping:
    """Free text by its normalised form (lower case, no punctuation or articles)."""
    return Grouping(normalize_answer, lambda a, b: a == b, lambda p, raw: raw.strip(),
                    blank_raw=_empty, blank_parsed=lambda p: p == "")


@register("group", "name")
def name_grouping(spec: VoteSpec) -> Grouping:
    """Names, case- and whitespace-insensitive."""
    return Grouping(lambda raw: " ".join((raw or "").lower().split()), lambda a, b: a == b,
                    lambda p, raw: raw.strip(), blank_raw=_empty, blank_parsed=lambda p: p == "")


# -- submission writers -------------------------------------------------------------------


@register("writer", "wattbot")
def wattbot_writer(answers: pl.DataFrame, questions: pl.DataFrame, spec: SubmissionSpec,
                   path: Path) -> pl.DataFrame:
    """The WattBot CSV (kohaku.submission): refuses to write an invalid one."""
    sub = answers_to_submission(answers, questions)
    write_submission(sub, path)
    return sub


def _list_cell(items: list[str], spec: SubmissionSpec) -> str:
    items = [str(i) for i in items if str(i).strip()]
    if not items:
        return spec.blank
    if spec.list_format == "json":
        return json.dumps(items, ensure_ascii=False)
    if spec.list_format == "semicolon":
        return ";".join(items)
    return format_ref_list(items)


#: What a ``columns`` writer's source may name, per answer row ``a`` and question row ``q``.
COLUMN_SOURCES: dict[str, Callable[[dict, dict], Any]] = {
    "qid": lambda a, q: a["qid"],
    "question": lambda a, q: q.get("question", ""),
    "value": lambda a, q: a["answer_value"],
    "answer": lambda a, q: a["answer"],
    "explanation": lambda a, q: a["explanation"],
    "refs": lambda a, q: list(a["ref_id"] or []),
    "ref_urls": lambda a, q: list(a["ref_url"] or []),
    "ref_pages": lambda a, q: list(a.get("ref_pages") or []),
    "agreement": lambda a, q: a["agreement"],
    "kind": lambda a, q: a.get("kind") or "",          # with task.answer.kinds
}


@register("writer", "columns")
def columns_writer(answers: pl.DataFrame, questions: pl.DataFrame, spec: SubmissionSpec,
                   path: Path) -> pl.DataFrame:
    """A CSV with ``submission.columns`` (output column -> source), one row per question in
    question order. A source is a fixed name (qid, question, value, answer, explanation, refs,
    ref_urls, ref_pages, agreement, kind), an answer field of the task, or a question column.
    Refuses to write a duplicated id or a row that fails ``submission.schema``."""
    fixed = COLUMN_SOURCES
    by_qid = {r["qid"]: r for r in answers.to_dicts()}
    rows = []
    for q in questions.to_dicts():
        a = by_qid[q["qid"]]
        fields = json.loads(a.get("fields") or "{}")
        row = {}
        for column, source in spec.columns.items():
            if source in fixed:
                value = fixed[source](a, q)
            elif source in fields:
                value = fields[source]
            elif source in q:
                value = q[source]
            else:
                raise ConfigError(f"task.submission.columns.{column}={source!r} is no answer field, "
                                  f"question column or one of {', '.join(fixed)}")
            if isinstance(value, list):
                value = _list_cell(value, spec)
            elif isinstance(value, float):
                value = f"{value:.4f}"
            value = "" if value is None else str(value)
            row[column] = value if value.strip() else spec.blank
        rows.append(row)
    documents.check_rows(rows, spec, path)
    df = pl.DataFrame(rows, schema={c: pl.String for c in spec.columns})
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, df.write_csv)
    return df


@register("writer", "json")
def json_writer(answers: pl.DataFrame, questions: pl.DataFrame, spec: SubmissionSpec,
                path: Path) -> pl.DataFrame:
    """``submission.json`` beside ``path`` (kohaku.tasks.documents: the answers as objects, typed
    values, references as objects; checked against ``submission.schema``), and at ``path`` the
    flat CSV of ``submission.columns`` that kohaku scores, compares and ensembles."""
    document = documents.json_document(answers, questions, spec, COLUMN_SOURCES)
    documents.write_json(document, spec, path.with_name("submission.json"))
    return columns_writer(answers, questions, replace(spec, schema=None), path)


# -- metrics ------------------------------------------------------------------------------


@dataclass
class MetricEnv:
    """What a metric may need besides the rows: the LLM backend (loaded on first use) and the
    generation cache, and counters for the summary."""
    backend: Callable[[], Any] | None = None
    cache: Any = None
    stats: dict[str, Any] | None = None


def _truths(row: dict[str, Any]) -> list[str]:
    """A gold answer cell: one answer, or a JSON list of accepted answers."""
    text = row["truth"] or ""
    if text.startswith("["):
        try:
            items = json.loads(text)
            if isinstance(items, list):
                return [str(x) for x in items]
        except ValueError:
            pass
    return [text]


@register("metric", "exact_match")
def exact_match_metric(rows: list[dict[str, Any]], params: dict[str, Any], env: MetricEnv) -> list[float | None]:
    """SQuAD v1.1 exact match (max over the accepted answers); a blank answer scores 0."""
    return [0.0 if r["pred_blank"] else exact_match(r["pred"] or "", _truths(r)) for r in rows]


@register("metric", "token_f1")
def token_f1_metric(rows: list[dict[str, Any]], params: dict[str, Any], env: MetricEnv) -> list[float | None]:
    """SQuAD v1.1 token F1 (max over the accepted answers); a blank answer scores 0."""
    return [0.0 if r["pred_blank"] else token_f1(r["pred"] or "", _truths(r)) for r in rows]


@register("metric", "numeric_match")
def numeric_match_metric(rows: list[dict[str, Any]], params: dict[str, Any], env: MetricEnv) -> list[float | None]:
    """1/0 on the questions whose gold answer is an amount (kohaku.tasks.accounting.numeric_match,
    ``params.rel_tol``); None (not covered) on the others."""
    rel_tol = float(params.get("rel_tol", 0.01))
    out: list[float | None] = []
    for r in rows:
        if parse_amount(r["truth"] or "") is None:
            out.append(None)
        elif r["pred_blank"]:
            out.append(0.0)
        else:
            out.append(1.0 if numeric_match(r["truth"], r["pred"] or "", rel_tol) else 0.0)
    return out


@register("metric", "llm_judge")
def llm_judge_metric(rows: list[dict[str, Any]], params: dict[str, Any], env: MetricEnv) -> list[float | None]:
    """1/0 by an LLM judge (kohaku.tasks.judge; ``params`` are its JudgeConfig: prompts,
    max_tokens, ...) through the generation cache; an output that is no verdict scores 0 and is
    counted in the summary (``judge_invalid``)."""
    cfg = build(JudgeConfig, params, "task.score.metrics[llm_judge].params")
    items = [JudgeItem(r["qid"], r.get("question") or "", r["truth"] or "",
                       None if r["pred_blank"] else r["pred"]) for r in rows]
    if env.backend is None:
        raise ConfigError("the llm_judge metric needs an LLM backend (the run's llm config)")
    counters = Counters()
    # the model is loaded only when some answer is not blank (blank ones are wrong unasked)
    backend = env.backend() if any(not r["pred_blank"] for r in rows) else None
    verdicts = judge(backend, items, cfg, env.cache, counters)  # type: ignore[arg-type]
    if env.stats is not None:
        env.stats["judge_invalid"] = env.stats.get("judge_invalid", 0) + sum(v.correct is None for v in verdicts)
        env.stats["judge_calls"] = env.stats.get("judge_calls", 0) + counters.model_calls
        env.stats["judge_cache_hits"] = env.stats.get("judge_cache_hits", 0) + counters.cache_hits
    return [1.0 if v.correct else 0.0 for v in verdicts]


# -- error classes ------------------------------------------------------------------------


@register("classes", "wattbot")
def wattbot_classes(table: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, Any]]:
    table = diagnosis.classify(table)
    return table, diagnosis.error_summary(table)


@register("classes", "generic")
def generic_classes(table: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, Any]]:
    table = classes.classify(table)
    return table, classes.error_summary(table)


def is_blank_answer(text: str | None, blank_cell: str, blank_values: list[str] | None = None) -> bool:
    """A submitted cell that holds no answer: empty, the writer's blank cell, or one of
    ``blank_values`` (the task's blank tokens when it lets a model abstain; None: none)."""
    s = (text or "").strip()
    return not s or s == blank_cell or s.lower() in {b.strip().lower() for b in blank_values or ()}

