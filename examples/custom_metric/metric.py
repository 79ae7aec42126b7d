"""A metric of your own for a kohaku task: partial credit for a number close to the gold one.

A task YAML names it by its import path (``examples.custom_metric.metric:closeness``), with its
``params`` beside it; kohaku's scorer calls it with every scored question's row. The signature
of a metric (``kohaku/tasks/named/catalog.py``): ``fn(rows, params, env) -> list[float | None]``, one
value per row, None where the metric does not cover the question. Documented, with the commands
that run it, in docs/examples/custom-metric.md; run by tests/test_custom_metric_example.py.
"""

from __future__ import annotations

from typing import Any

from kohaku.core.config import ConfigError
from kohaku.core.values import parse_number


def closeness(rows: list[dict[str, Any]], params: dict[str, Any], env: Any) -> list[float | None]:
    """1 for the gold number, falling linearly to 0 at a relative error of ``params.tolerance``
    (default 0.1: 10 %); 0 for an answer that is no number; not covered (None) where the gold
    answer is no number, so the task's other metrics score those questions."""
    tolerance = float(params.get("tolerance", 0.1))
    if tolerance <= 0:
        raise ConfigError(f"closeness params.tolerance={tolerance}; use a positive fraction such as 0.1")
    out: list[float | None] = []
    for row in rows:
        gold = parse_number(str(row["truth"]))        # (value, has a magnitude word) or None
        if gold is None:
            out.append(None)
            continue
        pred = None if row["pred_blank"] or row["pred"] is None else parse_number(str(row["pred"]))
        if pred is None:
            out.append(0.0)
            continue
        error = abs(pred[0] - gold[0]) / max(abs(gold[0]), 1e-12)
        out.append(max(0.0, 1.0 - error / tolerance))
    return out
