"""FinanceBench: amounts (parsing, units, numeric match) (the task's room).

:data:`FUNCTIONS` is the room's table of named functions (kind -> name -> ``module:function``),
read by :mod:`kohaku.tasks.named.catalog`.
"""

_F = "kohaku.tasks.rooms.financebench.functions"

FUNCTIONS: dict[str, dict[str, str]] = {
    "group": {"amounts": f"{_F}:amounts_grouping"},
    "metric": {"numeric_match": f"{_F}:numeric_match_metric"},
}

#: the params each of the room's functions accepts (kohaku.tasks.named.catalog; none when not listed)
PARAMS: dict[str, dict[str, tuple[str, ...]]] = {"metric": {"numeric_match": (
    "rel_tol", "rounded_inputs_tol", "ratio_percent", "unit_conversion", "final_figure", "refusals",
    "text_gold", "asked_precision")}}   # rel_tol and kohaku.tasks.score.amounts.AmountRules' fields
