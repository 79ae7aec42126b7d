"""kohaku's own named functions that belong to no one competition: vote groupings, submission
writers, metrics, error classes (a competition's own live in its room, kohaku/tasks/rooms/<name>/).

The registry finds each by the name a task YAML uses through its table (:mod:`kohaku.tasks.named.catalog`).
Signatures:

- group:   ``fn(spec: VoteSpec) -> Grouping``
- writer:  ``fn(answers, questions, spec: SubmissionSpec, path) -> DataFrame`` (writes ``path``)
- metric:  ``fn(rows, params, env) -> list[float | None]``: one value per row (None: the metric
  does not cover that question); ``rows`` are dicts with qid, question, truth, pred, pred_blank,
  missing (no row), empty (a row whose value is empty), unanswered (no row, or an empty value
  for a metric of ``empty: unanswered``: the scorer gives it ``task.score.unanswered`` whatever
  the metric returns, unless None; a set-level metric reads the flag), and the whole rows: ``solution`` (every column of
  the solutions file) and ``submission`` (every column of the submission, None when it has no
  row for the question); ``env`` gives the LLM backend and generation cache to metrics that
  need a model, and the task (its answer kinds and page bases). A metric of ``level: set``
  returns one number for all rows (an F1 over the set, a total).
- classes: ``fn(table) -> (table with answer_kind, error_class, error_detail, summary dict)``;
  ``fn(table, task)`` for classes that read the task (``typed``, kohaku.tasks.analysis.typed_classes)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import polars as pl

from kohaku.core.artifacts import atomic_write
from kohaku.core.cells import format_ref_list
from kohaku.core.config import ConfigError, build
from kohaku.core.errors import MetricError
from kohaku.llm.base import Counters
from kohaku.tasks.analysis import classes
from kohaku.tasks.files import documents
from kohaku.tasks.score import refs
from kohaku.tasks.grouping import Grouping
from kohaku.tasks.score.judge import JudgeConfig, JudgeItem, judge
from kohaku.tasks.spec import SubmissionSpec, VoteSpec

# -- vote groupings -----------------------------------------------------------------------


def _empty(raw: str) -> bool:
    return not (raw or "").strip()


def name_grouping(spec: VoteSpec) -> Grouping:
    """Names, case- and whitespace-insensitive."""
    return Grouping(lambda raw: " ".join((raw or "").lower().split()), lambda a, b: a == b,
                    lambda p, raw: raw.strip(), blank_raw=_empty, blank_parsed=lambda p: p == "")


# -- submission writers -------------------------------------------------------------------


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
            if source == "ref_pages":   # the JSON writer's references as doc:page cells
                value = documents.written_pages(a, spec.page_base)
            elif source in fixed:
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


def json_writer(answers: pl.DataFrame, questions: pl.DataFrame, spec: SubmissionSpec,
                path: Path) -> pl.DataFrame:
    """``submission.json`` beside ``path`` (kohaku.tasks.files.documents: the answers as objects, typed
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
    task: Any = None              # the Task scored (kohaku.tasks.spec): kinds, page bases
    solutions: Path | None = None     # the files scored (an adopted script may read them itself)
    submission: Path | None = None
    level: str = "question"       # the metric's level (question | set)


def _truths(row: dict[str, Any]) -> list[str]:
    """A gold answer cell: one answer, or a JSON list of accepted answers."""
    text = row["truth"] or ""
    if text.startswith("["):
        try:
            items = json.loads(text)
            if isinstance(items, list):
                return [str(x) for x in items]
        except (ValueError, RecursionError):   # malformed, or nested past the parser's stack
            pass
    return [text]


def llm_judge_metric(rows: list[dict[str, Any]], params: dict[str, Any], env: MetricEnv) -> list[float | None]:
    """1/0 by an LLM judge (kohaku.tasks.score.judge; ``params`` are its JudgeConfig: prompts,
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


def _cell(row: dict[str, Any], side: str, column: str, metric: str) -> Any:
    """Column ``column`` of the question's ``side`` row (``solution`` or ``submission``; None
    when the submission has no row for the question)."""
    data = row.get(side)
    if data is None:
        return None
    if column not in data:
        raise ConfigError(f"metric {metric}: the {side} has no column {column!r} (params."
                          f"{'gold' if side == 'solution' else 'pred'}); it has {', '.join(data)}")
    return data[column]


def _bases(params: dict[str, Any], env: MetricEnv) -> tuple[int, int]:
    """(submission, gold) page bases: the task's (``submission.page_base``,
    ``solutions.page_base``); without a task, ``params.page_base`` and ``params.gold_page_base``
    (default 1). A task refuses params that disagree with it (Task.check_page_bases)."""
    if env.task is not None:
        return env.task.submission.page_base, env.task.gold_page_base
    return int(params.get("page_base", 1)), int(params.get("gold_page_base", 1))


def _reading(env: MetricEnv) -> tuple[str, bool]:
    """How submitted pages are read: the task's ``submission.pages`` and
    ``submission.trim_doc_ids`` (without a task: ``number``, trimmed)."""
    spec = getattr(env.task, "submission", None)
    return (spec.pages, spec.trim_doc_ids) if spec is not None else ("number", True)


def _pages_of(r: dict[str, Any], params: dict[str, Any], base: int, metric: str,
              env: MetricEnv | None = None) -> list:
    """The submitted pages of a row in the order listed, repeats kept (none without a row), read
    as the task says (``submission.pages``, ``submission.trim_doc_ids``): a page that is no
    integer is a cited page that matches no gold page."""
    if r.get("submission") is None:
        return []
    cell = _cell(r, "submission", params.get("pred", "pages"), metric)
    pages, trim = _reading(env or MetricEnv())
    try:
        return refs.page_list(cell, base, f"{metric}: question {r['qid']}, submitted pages", pages, trim)
    except ValueError as exc:
        raise MetricError(f"the submission: {exc}") from exc


def page_prf_metric(rows: list[dict[str, Any]], params: dict[str, Any], env: MetricEnv) -> list[float | None]:
    """Cited pages (submission column ``params.pred``, default ``pages``) against gold pages
    (solution column ``params.gold``, default ``pages``), each side numbered as the task says
    (``submission.page_base``, ``solutions.page_base``): ``params.measure`` ``f`` (F-beta,
    ``params.beta``, default 1), ``precision`` or ``recall``. A question without gold pages is
    not covered unless ``params.cover_empty``."""
    beta = float(params.get("beta", 1.0))
    measure = params.get("measure", "f")
    index = {"precision": 0, "recall": 1, "f": 2}.get(measure)
    if index is None:
        raise ConfigError(f"page_prf params.measure={measure!r}; use f, precision or recall")
    base, gold_base = _bases(params, env)
    out: list[float | None] = []
    for r in rows:
        gold = refs.parse_pages(_cell(r, "solution", params.get("gold", "pages"), "page_prf"),
                                gold_base, f"page_prf: question {r['qid']}, gold pages")
        if not gold and not params.get("cover_empty", False):
            out.append(None)
            continue
        out.append(refs.page_prf(set(_pages_of(r, params, base, "page_prf", env)), gold, beta)[index])
    return out


REPEATS = ("set", "each")


def page_pools_metric(rows: list[dict[str, Any]], params: dict[str, Any], env: MetricEnv) -> list[float | None]:
    """Pools: each gold group of pages (solution column ``params.gold``, default ``pools``)
    needs one cited page (submission column ``params.pred``, default ``pages``):
    ``params.points`` (1) less ``params.missing`` (0.5) per group with none and ``params.extra``
    (0.25) per cited page in no group, floored at 0 (kohaku.tasks.score.refs.pools_score).
    ``params.repeats``: ``set`` (default) counts a page cited twice once; ``each`` counts every
    listed page, repeats included (a page outside the pools listed twice costs ``extra``
    twice). Pages are numbered as the task says (``submission.page_base``,
    ``solutions.page_base``). An unanswered question scores ``task.score.unanswered`` (0)."""
    points = float(params.get("points", 1.0))
    missing, extra = float(params.get("missing", 0.5)), float(params.get("extra", 0.25))
    repeats = params.get("repeats", "set")
    if repeats not in REPEATS:
        raise ConfigError(f"page_pools params.repeats={repeats!r}; use one of {', '.join(REPEATS)}")
    base, gold_base = _bases(params, env)
    out: list[float | None] = []
    for r in rows:
        pools = refs.parse_pools(_cell(r, "solution", params.get("gold", "pools"), "page_pools"),
                                 gold_base, f"page_pools: question {r['qid']}, gold pools")
        cited = _pages_of(r, params, base, "page_pools", env)
        out.append(refs.pools_score(cited if repeats == "each" else set(cited), pools, points, missing, extra))
    return out


def na_f1_metric(rows: list[dict[str, Any]], params: dict[str, Any], env: MetricEnv) -> float:
    """Set-level (``level: set``): F1 of the not-answerable class over all questions
    (``params.average``: ``positive``, or ``macro`` over both classes). Gold not-answerable:
    the gold answer is ``params.token`` (case-insensitive, default ``is_blank``); predicted:
    the submitted answer is that token or blank (a missing row included)."""
    token = str(params.get("token", "is_blank")).strip().lower()
    gold = [(r["truth"] or "").strip().lower() == token for r in rows]
    pred = [bool(r["pred_blank"]) or (r["pred"] or "").strip().lower() == token for r in rows]
    return refs.na_f1(gold, pred, str(params.get("average", "positive")))


# -- error classes ------------------------------------------------------------------------


def generic_classes(table: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, Any]]:
    """The generic error classes of any task (kohaku/tasks/analysis/classes.py: missing,
    needless_abstention, correct, then by the truth's kind: wrong_number, sign, near_miss, scale,
    ...), one per question, with their counts."""
    table = classes.classify(table)
    return table, classes.error_summary(table)


def is_blank_answer(text: str | None, blank_cell: str, blank_values: list[str] | None = None) -> bool:
    """A submitted cell that holds no answer: empty, the writer's blank cell, or one of
    ``blank_values`` (the task's blank tokens when it lets a model abstain; None: none)."""
    s = (text or "").strip()
    return not s or s == blank_cell or s.lower() in {b.strip().lower() for b in blank_values or ()}

