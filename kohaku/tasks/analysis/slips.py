"""Helpers any task's error classes use (:mod:`kohaku.tasks.analysis.classes`, a room's own classes):
the kind of an answer value (:func:`answer_kind`), the slip of scale between a submitted number and the truth (a power of ten or a common unit
factor), and the class columns and counts of a classified per-question table.
"""

from __future__ import annotations

import math
import re
from collections import Counter

import polars as pl

from kohaku.core.values import canonical

SCALE_TOL = 0.05
NEAR_TOL = 0.10
# Unit slips that are no power of ten: (factor, what it usually is).
UNIT_FACTORS = ((60.0, "min/h, s/min"), (3600.0, "s/h"), (24.0, "h/day"), (8.0, "bits/bytes"),
                (1024.0, "KiB/MiB"), (3.6, "kWh/MJ"), (2.20462, "kg/lb"), (1.60934, "km/mile"))


_WS = re.compile(r"\s+")


def answer_kind(question: str | None, value: str | None) -> str:
    """number | name | list | bool (a True/False question) | blank (unanswerable) of a truth."""
    v = _WS.sub(" ", str(value or "")).strip()
    if not v or canonical(v).kind == "blank":
        return "blank"
    if (question or "").strip().lower().startswith("true or false"):
        return "bool"
    if v.startswith("["):
        return "list"
    try:
        float(v.replace(",", ""))
        return "number"
    except ValueError:
        return "name"


def _close(x: float, y: float, tol: float) -> bool:
    return y != 0 and abs(x / y - 1.0) <= tol


def scale_factor(pred: float, truth: float) -> str | None:
    """``x1e3`` / ``x1e-2`` when ``pred`` is ``truth`` times a power of ten (k ≠ 0) within 5 %,
    ``unit x60`` / ``unit /60`` for a :data:`UNIT_FACTORS` slip; None otherwise."""
    if pred == 0 or truth == 0 or (pred > 0) != (truth > 0):
        return None
    ratio = pred / truth
    k = round(math.log10(ratio))
    if k != 0 and _close(ratio, 10.0 ** k, SCALE_TOL):
        return f"x1e{k}"
    for factor, _ in UNIT_FACTORS:
        if _close(ratio, factor, SCALE_TOL):
            return f"unit x{factor:g}"
        if _close(ratio, 1.0 / factor, SCALE_TOL):
            return f"unit /{factor:g}"
    return None


def with_class_columns(table: pl.DataFrame, triples: list[tuple[str, str, str]]) -> pl.DataFrame:
    """``table`` with ``answer_kind``, ``error_class`` and ``error_detail`` from one
    (kind, class, detail) per row (any task's classifier)."""
    kinds, classes, details = (list(col) for col in zip(*triples)) if triples else ([], [], [])
    return table.with_columns(
        pl.Series("answer_kind", kinds, dtype=pl.String),
        pl.Series("error_class", classes, dtype=pl.String),
        pl.Series("error_detail", details, dtype=pl.String),
    )


def class_counts(classes: list[str], names: tuple[str, ...]) -> dict[str, int]:
    """Count per class, every class of ``names`` present (0 when none), in that order."""
    c = Counter(classes)
    return {name: int(c.get(name, 0)) for name in names}
