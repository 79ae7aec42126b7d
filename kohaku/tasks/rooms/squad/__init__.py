"""SQuAD-style short answers: answer normalisation, exact match, token F1 (the short_answer task's room).

:data:`FUNCTIONS` is the room's table of named functions (kind -> name -> ``module:function``),
read by :mod:`kohaku.tasks.named.catalog`.
"""

_F = "kohaku.tasks.rooms.squad.functions"

FUNCTIONS: dict[str, dict[str, str]] = {
    "group": {"text": f"{_F}:text_grouping"},
    "metric": {"exact_match": f"{_F}:exact_match_metric", "token_f1": f"{_F}:token_f1_metric"},
}
