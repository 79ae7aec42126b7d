"""Scoring a submission with its task's metric.

The task's ``score.scorer`` names the scorer (kohaku.tasks.named.catalog's ``scorer`` table, or
``module:function``): a competition's own (its exact metric lives in its room,
kohaku/tasks/rooms/<name>/), or

- ``components``: a weighted sum of named metrics (``task.score.metrics``), each the mean over
  the questions it covers (a metric returns None for a question it does not cover: numeric
  match on a question whose gold answer is no amount), or their total (``score.combine: sum``).
  A component over no question is 0. A question the submission has no row for scores
  ``task.score.unanswered`` (0) on every metric that covers it; a row whose value is empty does
  too, on each metric of ``empty: unanswered`` (the default), while a metric of ``empty: score``
  scores it (a page metric sees its cited pages). Set-level metrics get the same per-row
  ``unanswered`` flag. A question answered more than once scores its first or last row, or the
  file is refused (``task.submission.duplicates``); ids that are no question are named
  (``details['unknown_ids']``).

Both give a :class:`TaskScore`: the per-question table (one column per component, and
``<name>_covered`` for the components that cover a subset), the summary for ``scores.json``
and ``metric``: the components with their table column, weight and the boolean column of the
questions each covers (``combine: sum`` for a task scored in points; a set-level metric as a set
statistic with its per-question counts, :func:`set_statistic`), which is all the reports need to
recompute the score on a resample.
"""

from __future__ import annotations

import inspect
import logging
from collections import Counter
from dataclasses import dataclass, field, replace
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any, Callable

import polars as pl

from kohaku.core.config import ConfigError, build
from kohaku.core.errors import MetricError
from kohaku.tasks.score import adopted
from kohaku.tasks.named import registry
from kohaku.tasks.score.adopted import MetricParts
from kohaku.tasks.named.catalog import DEFAULT_VARIANT
from kohaku.tasks.named.builtin import MetricEnv, is_blank_answer
from kohaku.tasks.files.io import read_rows
from kohaku.tasks.files.shapes import JsonShape, read_shaped
from kohaku.tasks.files.submissions import read_submission
from kohaku.tasks.analysis.typed_classes import page_columns
from kohaku.tasks.spec import DEFAULT, MetricSpec, ScoreSpec, Task

log = logging.getLogger("kohaku.score")


@dataclass
class TaskScore:
    task: str
    scorer: str
    score: float
    components: dict[str, float | None]
    metric: list[dict[str, Any]]      # name, column, weight, over, empty (see module doc)
    n: int
    n_missing: int
    n_extra: int
    table: pl.DataFrame
    errors: dict[str, Any]
    details: dict[str, Any] = field(default_factory=dict)   # the scorer's own figures
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {"task": self.task, "scorer": self.scorer, **self.details, "score": self.score,
                "components": self.components, "n": self.n, "n_missing": self.n_missing,
                "n_extra": self.n_extra, "warnings": self.warnings,
                "metric": {"name": self.task, "components": self.metric}, "errors": self.errors}


@dataclass
class ScoreConfig:
    """The ``score`` config group."""

    variant: str = DEFAULT_VARIANT  # a scorer variant (kohaku.tasks.named.catalog's variant table); the default task's by default
    subset: bool = False  # score only questions present in the submission (question subsets)
    # the LLM judge's model (a task metric llm_judge): an llm config such as
    # {name: judge, backend: openai, model: ...}; null: the run's llm
    judge_llm: Any = None

    def validate(self) -> None:
        known = registry.names("variant")
        if self.variant not in known:
            raise ConfigError(f"score.variant='{self.variant}'; use one of {', '.join(known)}")
        if self.judge_llm is not None and not (isinstance(self.judge_llm, dict) and "backend" in self.judge_llm):
            raise ConfigError(f"score.judge_llm={self.judge_llm!r}: give an llm config with at least "
                              "'backend' (and name, model), e.g. {name: judge, backend: fake}, or null")


# The scores table when there is nothing to score (corpus.solutions=null).
EMPTY_SCORES = {
    "qid": pl.String,
    "value_ok": pl.Boolean,
    "ref_score": pl.Float64,
    "na_ok": pl.Boolean,
    "unit_ok": pl.Boolean,
}


def task_classes(task: Task, table: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, Any]]:
    """``table`` with the task's error classes (``score.classes``; null: ``typed`` for a task
    with answer kinds, Task.error_classes) and their summary; a classes function with a
    ``task`` parameter is given the task."""
    fn = registry.lookup("classes", task.error_classes, "task.score.classes")
    try:
        takes_task = "task" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        takes_task = False
    return fn(table, task=task) if takes_task else fn(table)


def score_code_key(values: Any) -> Any:
    """The ``task.score`` part of the score stage's cache key: its settings and the hash of the
    code of every function they name (metrics and error classes; kohaku.tasks.named.registry.code_hash),
    so editing a metric re-scores."""
    if not isinstance(values, dict):
        return values
    named = values.get("classes")
    # null: typed or the default task's, by the task's kinds (Task.error_classes): both hashed
    choices = [str(named)] if named is not None else ["typed", str(DEFAULT["classes"])]
    code = {f"classes:{c}": registry.code_hash("classes", c) for c in choices}
    for m in values.get("metrics") or []:
        if isinstance(m, dict) and m.get("fn"):
            code[f"metric:{m['fn']}"] = registry.code_hash("metric", str(m["fn"]))
            if m["fn"] in adopted.ADOPTED:      # the adopted script and the siblings it imports
                code[f"script:{m.get('name')}"] = adopted.code_key(m.get("params"))
    return {**values, "code": code}


def round_score(x: float, digits: int, how: str = "half_up") -> float:
    """``x`` to ``digits`` decimals as a competition's scorer rounds: ``half_up`` (ties away from
    zero on the number as printed: 12.25 -> 12.3, what ``Decimal(str(x)).quantize`` with
    ROUND_HALF_UP and most spreadsheets do), ``half_even`` (ties to even, on the number as
    printed: 12.25 -> 12.2) or ``python`` (the built-in ``round``, on the binary float:
    ``round(2.675, 2)`` is 2.67)."""
    if how == "python":
        return round(x, digits)
    mode = ROUND_HALF_UP if how == "half_up" else ROUND_HALF_EVEN
    return float(Decimal(repr(float(x))).quantize(Decimal(1).scaleb(-digits), rounding=mode))


def submission_columns(task: Task) -> tuple[str, str]:
    """(id column, value column) of the task's submission CSV."""
    spec = task.submission
    if spec.writer in registry.names("columns"):   # a writer with its own columns (a room's fixed CSV)
        return registry.lookup("columns", spec.writer, "task.submission.writer")(task)
    by_source = {source: column for column, source in spec.columns.items()}
    value = by_source.get("value") or by_source.get(task.answer.value)
    if "qid" not in by_source or value is None:
        raise ConfigError("task.submission.columns must name the columns of the question id "
                          "(source qid) and the answer value (source value) so the submission "
                          "can be scored")
    return by_source["qid"], value


def _require(df: pl.DataFrame, columns: dict[str, str], path: Path, what: str) -> None:
    missing = [f"'{c}' ({key})" for key, c in columns.items() if c not in df.columns]
    if missing:
        raise MetricError(f"{path}: the {what} lacks column(s) {', '.join(missing)}; found "
                          f"{df.columns}")


def score_components(task: Task, solutions: Path, submission: Path, variant: str | None, subset: bool,
                     strict: bool, backend: Callable[[], Any] | None = None, cache: Any = None,
                     fmt: str | None = None) -> TaskScore:
    """A weighted sum of the task's named metrics (``task.score.metrics``; see the module doc);
    ``variant`` and ``strict`` are not used; ``fmt``: the submission's format (csv | json;
    None: detected, kohaku.tasks.files.submissions)."""
    spec = task.solutions
    sol = read_solutions(solutions, task)
    _require(sol, {"task.solutions.id": spec.id, "task.solutions.answer": spec.answer}, solutions, "solutions file")
    kinds = task.answer.kinds
    kind_col = kinds.column if kinds.enabled and kinds.column in sol.columns else None
    sub = read_submission(submission, task, fmt, kinds_by_qid=None if kind_col is None else dict(
        zip(sol[spec.id].str.strip_chars(), sol[kind_col]))).rows
    id_col, value_col = submission_columns(task)
    _require(sub, {"the id column": id_col, "the value column": value_col}, submission, "submission")
    warnings: list[str] = []
    preds, dups = pick_answers(sub.to_dicts(), id_col, task.submission.duplicates, submission)
    if dups:
        warnings.append(f"{submission}: {len(dups)} id(s) with more than one row, the "
                        f"{task.submission.duplicates} scored (task.submission.duplicates): "
                        + ", ".join(list(dups)[:10]) + (" ..." if len(dups) > 10 else ""))
    sol_ids = [(r[spec.id] or "").strip() for r in sol.to_dicts()]
    extra = sorted(set(preds) - set(sol_ids))
    rows = []
    missing = []
    # what a submitted cell says "no answer" with: the task's blank tokens when it may abstain
    blanks = task.answer.blank_values if task.answer.abstention == "allowed" else None
    for s in sol.to_dicts():
        qid = (s[spec.id] or "").strip()
        p = preds.get(qid)
        if p is None:
            if subset:
                continue
            missing.append(qid)
        pred = None if p is None else p[value_col]
        question = s.get("question") or (p or {}).get("question") or ""
        rows.append({"qid": qid, "question": question, "truth": s[spec.answer] or "", "pred": pred,
                     "pred_blank": p is None or is_blank_answer(pred, task.submission.blank, blanks),
                     "missing": p is None,
                     # a row whose value is empty ("", [], null): a metric of empty: unanswered
                     # gives it score.unanswered, one of empty: score scores it
                     "empty": p is not None and not (pred or "").strip(),
                     # no row, or (for a metric of empty: unanswered) an empty value: the metric
                     # gives it score.unanswered (set per metric below)
                     "unanswered": p is None or not (pred or "").strip(),
                     # the whole rows: every column of the solution and of the submission (None:
                     # no row), for metrics that read references, pages or per-question columns
                     "solution": s, "submission": p})
    if missing:
        warnings.append(f"{len(missing)} solution id(s) missing from {submission}, scored as wrong "
                        "(score.subset=true scores only the submitted ones): "
                        + ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else ""))
    if extra:
        warnings.append(f"{len(extra)} submission id(s) not in {solutions}, ignored: " + ", ".join(extra[:10]))
    for w in warnings:
        log.warning(w)
    stats: dict[str, Any] = {}
    env = MetricEnv(backend=backend, cache=cache, stats=stats, task=task, solutions=solutions,
                    submission=submission)
    columns: dict[str, list[Any]] = {}
    components: dict[str, float | None] = {}
    metric: list[dict[str, Any]] = []
    coverage: dict[str, int] = {}
    score = 0.0
    set_values: dict[str, float] = {}
    set_metric: list[dict[str, Any]] = []
    for i, m in enumerate(task.score.metric_specs):
        fn = registry.lookup("metric", m.fn, f"task.score.metrics[{i}].fn")
        # one unanswered rule for every metric, set-level ones included: a missing row is
        # unanswered; an empty value is unless the metric scores it (metrics[].empty: score)
        m_rows = [{**r, "unanswered": r["missing"] or (r["empty"] and m.empty == "unanswered")}
                  for r in rows]
        if m.level == "set":
            value = fn(m_rows, m.params, replace(env, level="set"))
            parts: dict[str, Any] = {}
            if isinstance(value, MetricParts):   # an adopted script's figures beside its value
                value, parts = value.values, value.parts
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise ConfigError(f"task.score.metrics[{i}] ({m.fn}) is a set-level metric and "
                                  f"returned {type(value).__name__}; return one number for all rows")
            set_values[m.name] = float(value)
            set_columns, entry = set_statistic(m, rows, float(value))
            columns.update(set_columns)
            set_metric.append(entry)
            components[m.name] = float(value)
            coverage[m.name] = len(rows)
            score += m.weight * float(value)
            for key, part in parts.items():     # reported beside it, weight 0
                side = MetricSpec(name=f"{m.name}_{key}", fn=m.fn, weight=0.0, params=m.params, level="set")
                part_columns, part_entry = set_statistic(side, rows, float(part))
                columns.update(part_columns)
                set_metric.append(part_entry)
                components[side.name] = set_values[side.name] = float(part)
                coverage[side.name] = len(rows)
            continue
        values = fn(m_rows, m.params, env)
        parts = {}
        if isinstance(values, MetricParts):     # an adopted script's per-question figures
            values, parts = values.values, values.parts
        values = list(values)
        if len(values) != len(rows):
            raise ConfigError(f"task.score.metrics[{i}] ({m.fn}) returned {len(values)} values for "
                              f"{len(rows)} questions")
        value, coverage[m.name] = _per_question(task, m_rows, m.name, values, m.weight, columns, metric)
        components[m.name] = value
        score += m.weight * (value or 0.0)
        for key, part in parts.items():         # reported beside it, weight 0
            components[f"{m.name}_{key}"], coverage[f"{m.name}_{key}"] = _per_question(
                task, m_rows, f"{m.name}_{key}", list(part), 0.0, columns, metric)
    if task.score.round is not None:
        digits, how = task.score.round, task.score.rounding
        components = {k: None if v is None else round_score(v, digits, how) for k, v in components.items()}
        score = round_score(score, digits, how)
    if not metric:
        raise ConfigError("task.score.metrics has no per-question metric (level: question); the "
                          "per-question table and the error classes need one")
    schema: dict[str, Any] = {"qid": pl.String, "question": pl.String, "truth": pl.String,
                              "pred": pl.String, "pred_blank": pl.Boolean, "missing": pl.Boolean}
    table = pl.DataFrame([{k: r[k] for k in schema} for r in rows], schema=schema)
    table = table.with_columns(*cited_pages(task, rows), *page_columns(task, rows))
    if kinds.enabled:   # each question's kind (the solutions', else the submission's kind column)
        sub_kind = {s: c for c, s in task.submission.columns.items()}.get("kind")
        table = table.with_columns(pl.Series("kind", [
            (r["solution"].get(kind_col) if kind_col else None)
            or ((r["submission"] or {}).get(sub_kind) if sub_kind else None) for r in rows], dtype=pl.String))
    for name, values in columns.items():
        table = table.with_columns(pl.Series(name, values, dtype=pl.Boolean if name.endswith("_covered")
                                             else pl.Float64))
    correct_by = task.score.correct or next((m["name"] for m in metric if m["weight"] > 0), metric[0]["name"])
    table = table.with_columns((pl.col(correct_by).fill_null(0.0) >= 0.5).alias("correct"))
    table, errors = task_classes(task, table)
    weights = {m.name: m.weight for m in task.score.metric_specs}
    weights.update({k: 0.0 for k in components if k not in weights})   # a metric's parts, beside it
    details = {"weights": weights, "coverage": coverage,
               "correct_by": correct_by, "combine": task.score.combine, **stats}
    if set_values:
        details["set_level"] = sorted(set_values)
    if task.score.round is not None:
        details["round"] = {"decimals": task.score.round, "rounding": task.score.rounding}
    metric += set_metric
    details["duplicates"] = {"policy": task.submission.duplicates, "ids": sorted(dups)}
    details["unknown_ids"] = extra
    return TaskScore(task.name, "components", score, components, metric, len(rows), len(missing),
                     len(extra), table, errors, details, warnings)


def pick_answers(rows: list[dict[str, Any]], id_col: str, policy: str,
                 path: Path | str) -> tuple[dict[str, dict[str, Any]], Counter]:
    """qid -> the row scored for it, and the ids answered more than once (how many extra
    rows), by ``task.submission.duplicates``: ``first`` (the first row), ``last`` (the last
    row, as a scorer that fills a dict does) or ``error`` (refused, naming the ids)."""
    preds: dict[str, dict[str, Any]] = {}
    dups: Counter = Counter()
    for r in rows:
        qid = (r[id_col] or "").strip()
        if qid in preds:
            dups[qid] += 1
            if policy != "last":
                continue
        preds[qid] = r
    if dups and policy == "error":
        ids = ", ".join(list(dups)[:10]) + (" ..." if len(dups) > 10 else "")
        # one f-string, so the error reference (scripts/gen_reference.py) lists the message
        raise MetricError(f"{path}: {len(dups)} question id(s) answered more than once: {ids}; "
                          f"task.submission.duplicates=error refuses them (first or last picks one)")
    return preds, dups


def _per_question(task: Task, rows: list[dict[str, Any]], name: str, values: list[Any], weight: float,
                  columns: dict[str, list[Any]], metric: list[dict[str, Any]]) -> tuple[float | None, int]:
    """One per-question component (a metric, or a part of one at weight 0: an adopted script's
    figures, kohaku.tasks.score.adopted.MetricParts): the rule of every per-question metric (an
    unanswered question it covers scores score.unanswered), its column and covered flags added
    to ``columns``, its entry to ``metric``; its value (mean, or sum) and covered count."""
    if len(values) != len(rows):
        raise ConfigError(f"the component {name} has {len(values)} values for {len(rows)} questions")
    values = [v if v is None or not r["unanswered"] else task.score.unanswered for v, r in zip(values, rows)]
    covered = [v is not None for v in values]
    columns[name] = [None if v is None else float(v) for v in values]
    columns[f"{name}_covered"] = covered
    total, n_cov = sum(v for v in values if v is not None), sum(covered)
    value = float(total) if task.score.combine == "sum" else (total / n_cov if n_cov else None)
    metric.append({"name": name, "column": name, "weight": weight, "over": f"{name}_covered", "empty": None,
                   **({"combine": "sum"} if task.score.combine == "sum" else {})})
    return value, n_cov


def read_solutions(path: Path, task: Task) -> pl.DataFrame:
    """The task's solutions file: as ``solutions.shape`` says where its records are (a
    competition's own JSON, kohaku.tasks.files.shapes), else a CSV, JSON lines or a JSON array."""
    shape = build(JsonShape, task.solutions.shape, "task.solutions.shape")
    if shape.enabled:
        return read_shaped(path, shape, "solutions")
    return read_rows(path, task.solutions.format, "solutions", skip_blank_lines=True,
                     key=task.solutions.id, value=task.solutions.answer)


def na_flags(rows: list[dict[str, Any]], params: dict[str, Any]) -> tuple[list[bool], list[bool]]:
    """(gold, predicted) not-answerable flags of the ``na_f1`` metric (kohaku.tasks.named.builtin): the
    gold answer is ``params.token``; the prediction is that token or blank."""
    token = str(params.get("token", "is_blank")).strip().lower()
    gold = [(r["truth"] or "").strip().lower() == token for r in rows]
    pred = [bool(r["pred_blank"]) or (r["pred"] or "").strip().lower() == token for r in rows]
    return gold, pred


#: set-level metrics whose value the reports can recompute on a resample of the questions:
#: metric fn -> (per-question class flags (gold, predicted), the statistic named by params.average)
SET_DECOMPOSED: dict[str, tuple[Callable[..., tuple[list[bool], list[bool]]], dict[str, str]]] = {
    "na_f1": (na_flags, {"positive": "f1", "macro": "f1_macro"}),
}


def _f1(tp: float, fp: float, fn: float) -> float:
    return 1.0 if tp + fp + fn == 0 else 2 * tp / (2 * tp + fp + fn)


def set_statistic(m: Any, rows: list[dict[str, Any]], value: float) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    """The per-question columns and the metric entry of a set-level component, so the reports
    bootstrap the set statistic itself (kohaku.tasks.score.components): the F1's counts per question
    (``<name>_tp``, ``_fp``, ``_fn``, ``_tn``), or for a metric kohaku cannot decompose (or whose
    counts do not give its value back) its value on every row (``stat: fixed``)."""
    entry = {"name": m.name, "column": m.name, "weight": m.weight, "over": None, "empty": None}
    known = SET_DECOMPOSED.get(m.fn)
    stat = known[1].get(str(m.params.get("average", "positive"))) if known else None
    if known and stat:
        gold, pred = known[0](rows, m.params)
        counts = {"tp": [float(g and p) for g, p in zip(gold, pred)],
                  "fp": [float(p and not g) for g, p in zip(gold, pred)],
                  "fn": [float(g and not p) for g, p in zip(gold, pred)],
                  "tn": [float(not g and not p) for g, p in zip(gold, pred)]}
        t = {k: sum(v) for k, v in counts.items()}
        again = _f1(t["tp"], t["fp"], t["fn"])
        if stat == "f1_macro":
            again = (again + _f1(t["tn"], t["fn"], t["fp"])) / 2
        if abs(again - value) <= 1e-9:
            parts = ("tp", "fp", "fn", "tn") if stat == "f1_macro" else ("tp", "fp", "fn")
            return {f"{m.name}_{k}": counts[k] for k in parts}, {**entry, "stat": stat}
        log.warning("set-level metric %s (%s): its counts give %s, not its value %s; the reports "
                    "keep its value on every resample", m.name, m.fn, again, value)
    return {m.name: [value] * len(rows)}, {**entry, "stat": "fixed"}


def cited_pages(task: Task, rows: list[dict[str, Any]]) -> list[pl.Series]:
    """``truth_refs`` and ``pred_refs``: the gold and the cited references or pages of each
    question as the files write them (the solutions' ``task.solutions.refs`` column, else the
    gold column a page metric reads; the submission's refs or pages column, else the column a
    page metric reads), for the reports' flipped questions."""
    defaults = {"page_pools": "pools", "page_prf": "pages"}     # their params.gold defaults
    page_metrics = [m for m in task.score.metric_specs if m.fn in defaults]
    gold = task.solutions.refs or next((m.params.get("gold", defaults[m.fn]) for m in page_metrics), None)
    by_source = {s: c for c, s in task.submission.columns.items()}
    pred = by_source.get("refs") or by_source.get("ref_pages") or next(
        (m.params.get("pred", "pages") for m in page_metrics), None)
    out = []
    for name, side, column in (("truth_refs", "solution", gold), ("pred_refs", "submission", pred)):
        if column is None:
            continue
        out.append(pl.Series(name, [None if (r.get(side) or {}).get(column) is None else str(r[side][column])
                                     for r in rows], dtype=pl.String))
    return out


def score_submission(task: Task, solutions: str | Path, submission: str | Path, *,
                     variant: str | None = None, subset: bool = False, strict: bool = False,
                     backend: Callable[[], Any] | None = None, cache: Any = None,
                     fmt: str | None = None) -> TaskScore:
    """Score ``submission`` against ``solutions`` with ``task``'s scorer (``score.scorer``).
    ``fmt`` tells the submission's format (csv | json) to the ``components`` scorer (None: it
    detects it); a competition's own scorer reads its CSV.
    ``variant`` and ``strict`` apply to scorers with variants (a room's; None: the default variant);
    ``backend`` (a function that loads the LLM) and ``cache`` (a generation cache) serve metrics
    that need a model (the LLM judge)."""
    solutions, submission = Path(solutions), Path(submission)
    name = task.score.scorer
    if ":" not in name and name not in registry.names("scorer"):
        raise ConfigError(f"task.score.scorer={name!r}; use {' or '.join(sorted(registry.names('scorer'), reverse=True))}")
    if fmt is not None and name == "components":
        return score_components(task, solutions, submission, variant, subset, strict, backend, cache, fmt)
    if fmt not in (None, "csv"):
        raise ConfigError(f"task {task.name}'s scorer {name!r} reads CSV submissions; {submission} "
                          f"was given as {fmt}")
    scorer = registry.lookup("scorer", name, "task.score.scorer")
    return scorer(task, solutions, submission, variant, subset, strict, backend, cache)
