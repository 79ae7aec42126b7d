"""The task checked whole, before any stage runs (kohaku.runner.pipeline.run_pipeline calls
:func:`check_task` on the composed config's ``task``).

Besides each part's own checks (kohaku.tasks.spec: every key's type and value, one page base):
every named function exists (vote grouping, writer, scorer, error classes, metrics); every source
a writer names is one it can write (``kind`` and ``typed_value`` need answer kinds; a question
column must be in the questions file); every metric's params are ones it takes (``kind_value``:
kohaku.tasks.score.kind_metrics; ``page_pools``: its repeat policy); the submission writes the columns
the metrics read; the questions file holds the kind column and the solutions file the columns
the metrics read; a solutions file that is also the retrieval gold (``task.gold.file``) counts
its pages one way. Errors name the key. Files that are not given, or not there yet, are not read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kohaku.core.config import ConfigError
from kohaku.tasks.named import registry
from kohaku.tasks.named.builtin import COLUMN_SOURCES, REPEATS
from kohaku.tasks.files.io import read_rows
from kohaku.tasks.score.kind_metrics import kind_scores
from kohaku.tasks.score.adopted import ADOPTED, check_params
from kohaku.tasks.spec import WRITERS_WITH_COLUMNS, Task, build_task

#: the json writer's sources beyond the columns writer's (kohaku.tasks.files.documents)
DOCUMENT_SOURCES = ("typed_value", "references", "kind")
#: the metric params that name a column: (metric, param, default, side)
COLUMN_PARAMS = (("page_pools", "pred", "pages", "submission"), ("page_pools", "gold", "pools", "solutions"),
                 ("page_prf", "pred", "pages", "submission"), ("page_prf", "gold", "pages", "solutions"),
                 ("doc_jaccard", "pred", "ref_id", "submission"), ("doc_jaccard", "gold", "ref_id", "solutions"))


def _header(path: Path | None, fmt: str | None, what: str) -> list[str] | None:
    if path is None or not Path(path).is_file():
        return None
    return read_rows(path, fmt, what).columns


def _check_functions(task: Task) -> None:
    registry.lookup("group", task.vote.group, "task.vote.group")
    registry.lookup("writer", task.submission.writer, "task.submission.writer")
    registry.lookup("classes", task.error_classes, "task.score.classes")
    if task.error_classes == "typed" and not task.answer.kinds.enabled:
        raise ConfigError("task.score.classes=typed reads each question's answer kind: set "
                          "task.answer.kinds (column and types), or use generic")
    registry.lookup("scorer", task.score.scorer, "task.score.scorer")
    if task.score.scorer == "components":
        for i, m in enumerate(task.score.metric_specs):
            registry.lookup("metric", m.fn, f"task.score.metrics[{i}].fn")


def _check_sources(task: Task, questions: list[str] | None) -> None:
    sub = task.submission
    if sub.writer not in WRITERS_WITH_COLUMNS:
        return
    known = set(COLUMN_SOURCES) | set(task.answer.fields)
    parts = [("columns", sub.columns, known)]
    if sub.writer == "json":
        parts.append(("answer", sub.answer, known | set(DOCUMENT_SOURCES)))
    for part, mapping, allowed in parts:
        for key, source in mapping.items():
            where = f"task.submission.{part}.{key}={source!r}"
            if source in ("kind", "typed_value") and not task.answer.kinds.enabled:
                raise ConfigError(f"{where} needs answer kinds (task.answer.kinds.column and types)")
            if source not in allowed and questions is not None and source not in questions:
                raise ConfigError(f"{where} is no answer field, question column ({', '.join(questions)}) "
                                  f"or one of {', '.join(sorted(allowed - set(task.answer.fields)))}")


def _check_metrics(task: Task, solutions: list[str] | None) -> None:
    if task.score.scorer != "components":
        return
    submitted = (set(task.submission.columns) if task.submission.writer in WRITERS_WITH_COLUMNS else None)
    for i, m in enumerate(task.score.metric_specs):
        where = f"task.score.metrics[{i}] ({m.fn})"
        if m.fn == "kind_value":
            params, _ = kind_scores(m.params, task.answer.kinds, f"task.score.metrics[{i}].params")
            column = params.column or task.answer.kinds.column
            if solutions is not None and column not in solutions:
                raise ConfigError(f"{where}: the solutions file has no kind column {column!r} "
                                  f"(params.column or task.answer.kinds.column); it has {', '.join(solutions)}")
        if m.fn in ADOPTED:   # its params, its script's file, the solutions columns it reads
            check_params(m.params, f"task.score.metrics[{i}].params", solutions)
        if m.fn == "page_pools" and m.params.get("repeats", "set") not in REPEATS:
            raise ConfigError(f"task.score.metrics[{i}].params.repeats={m.params['repeats']!r}; use one "
                              f"of {', '.join(REPEATS)}")
        for fn, param, default, side in COLUMN_PARAMS:
            if fn != m.fn:
                continue
            column = m.params.get(param, default)
            have = submitted if side == "submission" else solutions
            if have is not None and column not in have:
                what = "task.submission.columns" if side == "submission" else "the solutions file"
                raise ConfigError(f"task.score.metrics[{i}].params.{param}={column!r}: {what} has no such "
                                  f"column ({', '.join(sorted(have))})")


PAGE_METRICS = ("page_pools", "page_prf")


def _check_gold_base(task: Task, solutions: Path | None, gold: Path | None) -> None:
    """The retrieval gold (``task.gold``) read from the solutions file must count its pages as
    the page metrics read them there."""
    if solutions is None or gold is None or task.score.scorer != "components":
        return
    if not any(m.fn in PAGE_METRICS for m in task.score.metric_specs):
        return
    if Path(solutions).resolve() == Path(gold).resolve() and task.gold.page_base != task.gold_page_base:
        raise ConfigError(f"task.gold.page_base={task.gold.page_base} disagrees with task.solutions.page_base="
                          f"{task.gold_page_base} (null: task.submission.page_base), and both read {solutions}; "
                          "one file counts its pages one way: set both alike")


def check_task(values: Any, where: str = "task", questions: Path | None = None,
               solutions: Path | None = None, gold: Path | None = None) -> Task:
    """The Task of ``values`` checked whole (module doc); ``questions``, ``solutions`` and
    ``gold`` (the retrieval gold file): the files whose columns are checked when they exist."""
    task = build_task(values, where)
    _check_gold_base(task, solutions, gold)
    _check_functions(task)
    q_cols = _header(questions, task.questions.format, "questions")
    if q_cols is not None and task.answer.kinds.enabled and task.answer.kinds.column not in q_cols:
        raise ConfigError(f"task.answer.kinds.column={task.answer.kinds.column!r}: {questions} has no such "
                          f"column ({', '.join(q_cols)})")
    _check_sources(task, q_cols)
    s_cols = None if task.solutions.shape else _header(solutions, task.solutions.format, "solutions")
    _check_metrics(task, s_cols)
    return task
