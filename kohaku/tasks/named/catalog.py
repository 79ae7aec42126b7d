"""The table of kohaku's named functions: kind -> name -> ``module:function``.

A task YAML names its code by these short names (``vote.group: amounts``, ``score.metrics[].fn:
token_f1``, ``submission.writer: columns``, ``score.scorer: components``). The registry
(:mod:`kohaku.tasks.named.registry`) reads this table and imports a function only when a task names
it; nothing registers itself by being imported. The generic functions (:mod:`kohaku.tasks.named.builtin`, :mod:`kohaku.tasks.score.kind_metrics`,
:mod:`kohaku.tasks.score.scoring`) are listed here (:data:`GENERIC`); a competition's own functions live
in its room (``kohaku/tasks/rooms/<name>/``), whose ``__init__.py`` holds the room's table
(``FUNCTIONS``, the same shape). The catalog finds the rooms by listing the subpackages of
``kohaku/tasks/rooms/`` and reads each room's table (the ``__init__`` holds only strings; the
functions' modules are imported on lookup). The room whose ``DEFAULTS`` is set holds the default
task (:func:`default_names`). A function of your own needs no line here: name it
``package.module:function`` in the task YAML.

**Params.** Every named function declares the ``params`` it accepts (:data:`PARAMS`, kind ->
name -> the keys; a room's ``PARAMS`` in its ``__init__``, the same shape), read here without
importing the function's module: a task whose metric is given a key its function does not
declare (``page_pools`` with ``missng: 0.25``) is refused when it is built
(:func:`kohaku.tasks.named.registry.check_params`, from kohaku.tasks.spec), naming the valid keys. A
name a room does not declare takes no params. The functions of the other kinds (group, writer,
table, classes, scorer, ...) take none: their settings are the keys of their task section
(``vote``, ``submission``, ``score``), which the task's dataclasses check the same way. A
function of your own may declare its keys as a ``PARAMS`` attribute (a tuple of names, or a
dataclass whose fields are its keys); without one its params are not checked.

Kinds and signatures (kohaku.tasks.named.builtin's docstring has the details):

- group:   ``fn(spec: VoteSpec) -> Grouping``
- writer:  ``fn(answers, questions, spec: SubmissionSpec, path) -> DataFrame``
- table:   ``fn(answers, questions) -> DataFrame``: a fixed-format writer's submission table, not
  written (the ensemble of that format's submissions, kohaku.answer.ensemble)
- metric:  ``fn(rows, params, env) -> list[float | None]`` (or one number at ``level: set``)
- classes: ``fn(table) -> (table with error classes, summary)``, or ``fn(table, task)`` for
  classes that read the task (its answer kinds: ``typed``)
- scorer:  ``fn(task, solutions, submission, variant, subset, strict, backend, cache) -> TaskScore``
- columns: ``fn(task) -> (id column, value column)`` of a writer whose columns are fixed
- layout:  ``fn(task) -> kohaku.tasks.score.check.Layout``: a fixed-format writer's columns for the
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

_BUILTIN = "kohaku.tasks.named.builtin"

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
        "kind_value": "kohaku.tasks.score.kind_metrics:kind_value_metric",
        "adopted": "kohaku.tasks.score.adopted:adopted_metric",
    },
    "classes": {"generic": f"{_BUILTIN}:generic_classes",
                "typed": "kohaku.tasks.analysis.typed_classes:typed_classes"},
    "scorer": {"components": "kohaku.tasks.score.scoring:score_components"},
    "columns": {},
    "layout": {},
    "rows": {},
    "frames": {},
    "variant": {},
}

#: the params each generic function accepts (kind -> name -> keys); a name not listed takes none
GENERIC_PARAMS: dict[str, dict[str, tuple[str, ...]]] = {
    "metric": {
        # kohaku.tasks.score.judge.JudgeConfig's fields
        "llm_judge": ("system", "user", "max_tokens", "temperature", "seed"),
        "page_prf": ("pred", "gold", "measure", "beta", "cover_empty", "page_base", "gold_page_base"),
        "page_pools": ("pred", "gold", "points", "missing", "extra", "repeats", "page_base",
                       "gold_page_base"),
        "na_f1": ("token", "average"),
        # kohaku.tasks.score.kind_metrics.KindValueParams's fields
        "kind_value": ("column", "kinds", "na_vs_na", "na_vs_answer", "answer_vs_na"),
        # kohaku.tasks.score.adopted.AdoptedParams's fields
        "adopted": ("file", "function", "args", "init", "result", "returns", "names", "score",
                    "components", "shape", "call_missing"),
    },
}

_PACKAGE = "kohaku.tasks.rooms"
_DIR = Path(__file__).resolve().parents[1] / "rooms"


def rooms() -> list[str]:
    """The rooms: the subpackages of kohaku/tasks/rooms/, by name."""
    return sorted(m.name for m in pkgutil.iter_modules([str(_DIR)]) if m.ispkg)


def _room(name: str):
    return importlib.import_module(f"{_PACKAGE}.{name}")


def _catalog() -> dict[str, dict[str, str]]:
    table = {kind: dict(entries) for kind, entries in GENERIC.items()}
    where = {(kind, n): _BUILTIN for kind, entries in GENERIC.items() for n in entries}
    for room in rooms():
        for kind, entries in (getattr(_room(room), "FUNCTIONS", None) or {}).items():
            if kind not in table:
                raise ImportError(f"kohaku/tasks/rooms/{room}/__init__.py FUNCTIONS: unknown kind {kind!r}; "
                                  f"kinds: {', '.join(table)}")
            for n, path in entries.items():
                if (kind, n) in where:
                    raise ImportError(f"kohaku/tasks/rooms/{room}/__init__.py FUNCTIONS: the {kind} name {n!r} "
                                      f"is taken (by {where[kind, n]}); pick another")
                where[kind, n] = f"kohaku/tasks/rooms/{room}"
                table[kind][n] = path
    return table


def _params() -> dict[str, dict[str, tuple[str, ...]]]:
    table: dict[str, dict[str, tuple[str, ...]]] = {kind: {} for kind in GENERIC}
    for kind, entries in GENERIC_PARAMS.items():
        table[kind].update({n: tuple(keys) for n, keys in entries.items()})
    for room in rooms():
        for kind, entries in (getattr(_room(room), "PARAMS", None) or {}).items():
            for n, keys in entries.items():
                if n not in CATALOG.get(kind, {}):
                    raise ImportError(f"kohaku/tasks/rooms/{room}/__init__.py PARAMS: {kind} {n!r} is no "
                                      "function of the catalog")
                table[kind][n] = tuple(keys)
    for kind, entries in table.items():
        for n in entries:
            if n not in CATALOG.get(kind, {}):
                raise ImportError(f"kohaku/tasks/named/catalog.py GENERIC_PARAMS: {kind} {n!r} is no "
                                  "function of the catalog")
    return table


def declared_params(kind: str, name: str) -> tuple[str, ...]:
    """The params a catalog function accepts (none when it declares none)."""
    return PARAMS.get(kind, {}).get(name, ())


def default_names() -> dict[str, str]:
    """The default task's names (the one room whose ``__init__`` sets ``DEFAULTS``): its task's
    name and the function of each kind a task, or a scores.json, that names none takes."""
    found = [(room, d) for room in rooms() if (d := getattr(_room(room), "DEFAULTS", None))]
    if len(found) != 1:
        raise ImportError("exactly one room of kohaku/tasks/rooms/ sets DEFAULTS (the default task's names); "
                          f"found {[r for r, _ in found] or 'none'}")
    return dict(found[0][1])


#: kind -> name -> ``module:function``: the generic table and every room's
CATALOG: dict[str, dict[str, str]] = _catalog()

#: kind -> name -> the params that function accepts (the generic ones' and every room's)
PARAMS: dict[str, dict[str, tuple[str, ...]]] = _params()

#: the variant a ``scores.json`` without ``metric`` and without ``variant`` was scored with
#: (the score stage's default, ScoreConfig.variant): the default task's
DEFAULT_VARIANT = default_names()["variant"]
