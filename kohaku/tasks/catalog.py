"""The table of kohaku's named functions: kind -> name -> ``module:function``.

A task YAML names its code by these short names (``vote.group: amounts``, ``score.metrics[].fn:
token_f1``, ``submission.writer: columns``, ``score.scorer: components``). The registry
(:mod:`kohaku.tasks.registry`) reads this table and imports a function only when a task names
it; nothing registers itself by being imported. The generic functions (:mod:`kohaku.tasks.builtin`, :mod:`kohaku.tasks.kind_metrics`,
:mod:`kohaku.tasks.scoring`) are listed here (:data:`GENERIC`); a competition's own functions live
in its room (``kohaku/tasks/<name>/``), whose ``__init__.py`` holds the room's table
(``FUNCTIONS``, the same shape). The catalog finds the rooms by listing the subpackages of
``kohaku/tasks/`` and reads each room's table (the ``__init__`` holds only strings; the
functions' modules are imported on lookup). The room whose ``DEFAULTS`` is set holds the default
task (:func:`default_names`). A function of your own needs no line here: name it
``package.module:function`` in the task YAML.

Kinds and signatures (kohaku.tasks.builtin's docstring has the details):

- group:   ``fn(spec: VoteSpec) -> Grouping``
- writer:  ``fn(answers, questions, spec: SubmissionSpec, path) -> DataFrame``
- table:   ``fn(answers, questions) -> DataFrame``: a fixed-format writer's submission table, not
  written (the ensemble of that format's submissions, kohaku.answer.ensemble)
- metric:  ``fn(rows, params, env) -> list[float | None]`` (or one number at ``level: set``)
- classes: ``fn(table) -> (table with error classes, summary)``
- scorer:  ``fn(task, solutions, submission, variant, subset, strict, backend, cache) -> TaskScore``
- columns: ``fn(task) -> (id column, value column)`` of a writer whose columns are fixed
- layout:  ``fn(task) -> kohaku.tasks.check.Layout``: a fixed-format writer's columns for the
  perturbed submissions of ``scripts/check_scorer.py``
- rows:    ``fn(task, solutions, submission, variant) -> {qid: {component: value, score}}``: a
  competition scorer's per-question components, for ``scripts/check_scorer.py``
- frames:  ``fn(solutions, submission, variant, names) -> classified per-question table``: a
  submission table scored with a variant's metric (compare's sources without a task)
- variant: ``fn(variant) -> Metric``: the metric of a ``scores.json`` that names only a variant
  (runs scored before scores.json held its metric)
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

_BUILTIN = "kohaku.tasks.builtin"

#: the generic named functions (a competition's are in its room's ``FUNCTIONS``)
GENERIC: dict[str, dict[str, str]] = {
    "group": {"name": f"{_BUILTIN}:name_grouping"},
    "writer": {"columns": f"{_BUILTIN}:columns_writer", "json": f"{_BUILTIN}:json_writer"},
    "table": {},
    "metric": {
        "llm_judge": f"{_BUILTIN}:llm_judge_metric",
        "page_prf": f"{_BUILTIN}:page_prf_metric",
        "page_pools": f"{_BUILTIN}:page_pools_metric",
        "na_f1": f"{_BUILTIN}:na_f1_metric",
        "kind_value": "kohaku.tasks.kind_metrics:kind_value_metric",
        "adopted": "kohaku.tasks.adopted:adopted_metric",
    },
    "classes": {"generic": f"{_BUILTIN}:generic_classes"},
    "scorer": {"components": "kohaku.tasks.scoring:score_components"},
    "columns": {},
    "layout": {},
    "rows": {},
    "frames": {},
    "variant": {},
}

_PACKAGE = "kohaku.tasks"
_DIR = Path(__file__).resolve().parent


def rooms() -> list[str]:
    """The rooms: the subpackages of kohaku/tasks/, by name."""
    return sorted(m.name for m in pkgutil.iter_modules([str(_DIR)]) if m.ispkg)


def _room(name: str):
    return importlib.import_module(f"{_PACKAGE}.{name}")


def _catalog() -> dict[str, dict[str, str]]:
    table = {kind: dict(entries) for kind, entries in GENERIC.items()}
    where = {(kind, n): _BUILTIN for kind, entries in GENERIC.items() for n in entries}
    for room in rooms():
        for kind, entries in (getattr(_room(room), "FUNCTIONS", None) or {}).items():
            if kind not in table:
                raise ImportError(f"kohaku/tasks/{room}/__init__.py FUNCTIONS: unknown kind {kind!r}; "
                                  f"kinds: {', '.join(table)}")
            for n, path in entries.items():
                if (kind, n) in where:
                    raise ImportError(f"kohaku/tasks/{room}/__init__.py FUNCTIONS: the {kind} name {n!r} "
                                      f"is taken (by {where[kind, n]}); pick another")
                where[kind, n] = f"kohaku/tasks/{room}"
                table[kind][n] = path
    return table


def default_names() -> dict[str, str]:
    """The default task's names (the one room whose ``__init__`` sets ``DEFAULTS``): its task's
    name and the function of each kind a task, or a scores.json, that names none takes."""
    found = [(room, d) for room in rooms() if (d := getattr(_room(room), "DEFAULTS", None))]
    if len(found) != 1:
        raise ImportError("exactly one room of kohaku/tasks/ sets DEFAULTS (the default task's names); "
                          f"found {[r for r, _ in found] or 'none'}")
    return dict(found[0][1])


#: kind -> name -> ``module:function``: the generic table and every room's
CATALOG: dict[str, dict[str, str]] = _catalog()

#: the variant a ``scores.json`` without ``metric`` and without ``variant`` was scored with
#: (the score stage's default, ScoreConfig.variant): the default task's
DEFAULT_VARIANT = default_names()["variant"]
