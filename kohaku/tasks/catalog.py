"""The table of kohaku's named functions: kind -> name -> ``module:function``.

A task YAML names its code by these short names (``vote.group: amounts``, ``score.metrics[].fn:
token_f1``, ``submission.writer: columns``, ``score.scorer: components``). The registry
(:mod:`kohaku.tasks.registry`) reads this table and imports a function only when a task names
it; nothing registers itself by being imported. A competition's own functions live in its room
(``kohaku/tasks/<name>/functions.py``); the generic ones in :mod:`kohaku.tasks.builtin` and
:mod:`kohaku.tasks.scoring`. A function of your own needs no line here: name it
``package.module:function`` in the task YAML.

Kinds and signatures (kohaku.tasks.builtin's docstring has the details):

- group:   ``fn(spec: VoteSpec) -> Grouping``
- writer:  ``fn(answers, questions, spec: SubmissionSpec, path) -> DataFrame``
- metric:  ``fn(rows, params, env) -> list[float | None]`` (or one number at ``level: set``)
- classes: ``fn(table) -> (table with error classes, summary)``
- scorer:  ``fn(task, solutions, submission, variant, subset, strict, backend, cache) -> TaskScore``
- columns: ``fn(task) -> (id column, value column)`` of a writer whose columns are fixed
- frames:  ``fn(solutions, submission, variant, names) -> classified per-question table``: a
  submission table scored with a variant's metric (compare's sources without a task)
- variant: ``fn(variant) -> Metric``: the metric of a ``scores.json`` that names only a variant
  (runs scored before scores.json held its metric)
"""

from __future__ import annotations

_WATTBOT = "kohaku.tasks.wattbot.functions"
_FINANCEBENCH = "kohaku.tasks.financebench.functions"
_SQUAD = "kohaku.tasks.squad.functions"
_BUILTIN = "kohaku.tasks.builtin"

CATALOG: dict[str, dict[str, str]] = {
    "group": {
        "wattbot": f"{_WATTBOT}:wattbot_grouping",
        "amounts": f"{_FINANCEBENCH}:amounts_grouping",
        "text": f"{_SQUAD}:text_grouping",
        "name": f"{_BUILTIN}:name_grouping",
    },
    "writer": {
        "wattbot": f"{_WATTBOT}:wattbot_writer",
        "columns": f"{_BUILTIN}:columns_writer",
        "json": f"{_BUILTIN}:json_writer",
    },
    "metric": {
        "exact_match": f"{_SQUAD}:exact_match_metric",
        "token_f1": f"{_SQUAD}:token_f1_metric",
        "numeric_match": f"{_FINANCEBENCH}:numeric_match_metric",
        "llm_judge": f"{_BUILTIN}:llm_judge_metric",
        "doc_jaccard": f"{_WATTBOT}:doc_jaccard_metric",
        "page_prf": f"{_BUILTIN}:page_prf_metric",
        "page_pools": f"{_BUILTIN}:page_pools_metric",
        "na_f1": f"{_BUILTIN}:na_f1_metric",
    },
    "classes": {
        "wattbot": f"{_WATTBOT}:wattbot_classes",
        "generic": f"{_BUILTIN}:generic_classes",
    },
    "scorer": {
        "wattbot": f"{_WATTBOT}:wattbot_scorer",
        "components": "kohaku.tasks.scoring:score_components",
    },
    "columns": {
        "wattbot": f"{_WATTBOT}:wattbot_columns",
    },
    "frames": {
        "wattbot": f"{_WATTBOT}:wattbot_frames",
        "wattbot-recall": f"{_WATTBOT}:wattbot_frames",
    },
    "variant": {
        "wattbot": f"{_WATTBOT}:wattbot_metric",
        "wattbot-recall": f"{_WATTBOT}:wattbot_metric",
    },
}

#: the variant a ``scores.json`` without ``metric`` and without ``variant`` was scored with
#: (the score stage's default, ScoreConfig.variant)
DEFAULT_VARIANT = "wattbot"
