"""Why a run loses on a task with the generic error classes: every question in exactly one error class.

Input: a per-question table with the columns ``qid``, ``truth`` (str), ``pred`` (str or null),
``correct`` (bool: the task's primary judgement: exact match, numeric match, the judge, ...),
and optionally ``pred_blank`` (bool; default: ``pred`` is null or a blank token,
:func:`kohaku.core.values.is_blank_value`), ``missing`` (bool; default False) and ``f1`` (float, token
F1 for text answers; a ``token_f1`` column, the metric's registered name, serves when there is
no ``f1``). Output (:func:`classify`): the same table with ``answer_kind``,
``error_class`` and ``error_detail`` added; :func:`error_summary` counts them.

``answer_kind`` is ``number`` when the truth is an amount
(:func:`kohaku.tasks.score.amounts.parse_amount`), ``text`` otherwise. A task that declares its answer
kinds gets the typed classes instead (:mod:`kohaku.tasks.analysis.typed_classes`: by the task's own kinds,
N/A both ways, and the cited pages beside them), which reuse the number classes below.

The classes, tried in this order (the first that applies wins):

1. ``missing``: the submission has no row for the question.
2. ``needless_abstention``: the prediction is blank (or null).
3. ``correct``: the task's primary judgement says so.
4. A number truth:

   - ``wrong_number`` with detail ``not a number`` when the prediction is no amount,
     ``currency`` when it writes another currency than the truth (``$5`` vs ``€5``), or
     ``format`` when it is the gold amount by :func:`~kohaku.tasks.score.amounts.numeric_match`
     but the primary judgement (exact match, say) did not count it;
   - ``sign``: the prediction is the negated truth (``numeric_match`` of the negated
     prediction; the truth is not 0);
   - ``near_miss``: within 10 % of the truth in one of ``numeric_match``'s percent / magnitude
     readings (:func:`kohaku.tasks.score.amounts.readings`), the closest one in the detail
     (``+4.2%``). It is tried before ``scale``: a prediction that a percent or magnitude
     reading brings within 10 % (``2.8%`` vs ``0.029``; ``$1577.00`` in millions vs
     ``$1.6 billion``) is close, not a slip of scale (no single reading can be both);
   - ``scale``: off by a power of ten (x10^k, k ≠ 0, within 5 %:
     :func:`kohaku.tasks.analysis.slips.scale_factor`, its power-of-ten answers only, not its unit
     factors; ``x1e3`` in the detail), the values compared as written (``$1577.00`` vs
     ``1577000``: ``x1e3``);
   - ``wrong_number`` otherwise.

5. A text truth: ``partial`` when the ``f1`` column is given and ``f1 >= 0.5`` (detail
   ``f1 0.67``), else ``wrong_text``.

So ``correct`` is exactly the questions the primary judgement counts, unless a row is also
marked missing or blank.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import polars as pl

from kohaku.tasks.analysis.slips import NEAR_TOL, scale_factor, with_class_columns
from kohaku.tasks.analysis.slips import class_counts as slips_counts
from kohaku.tasks.score.amounts import Amount, numeric_match, parse_amount, readings
from kohaku.core.values import is_blank_value

CLASSES = (
    "correct",
    "missing",
    "needless_abstention",
    "sign",
    "scale",
    "near_miss",
    "wrong_number",
    "partial",
    "wrong_text",
)
ERROR_CLASSES = CLASSES[1:]
KINDS = ("number", "text")
PARTIAL_F1 = 0.5
REQUIRED = ("qid", "truth", "pred", "correct")


def answer_kind(truth: str | None) -> str:
    """``number`` when the truth is an amount, else ``text``."""
    return "number" if parse_amount(truth) is not None else "text"


def number_class(t: Amount, pred: str) -> tuple[str, str]:
    """(class, detail) of a wrong number ``pred`` against the amount ``t`` (4. above)."""
    p = parse_amount(pred)
    if p is None:
        return "wrong_number", "not a number"
    if t.currency and p.currency and t.currency != p.currency:
        return "wrong_number", "currency"
    if numeric_match(t, p):
        return "wrong_number", "format"
    if t.value != 0 and numeric_match(t, replace(p, value=-p.value)):
        return "sign", ""
    near = [(pv - tv) / abs(tv) for tv, pv, _ in readings(t, p)
            if tv != 0 and abs(pv - tv) <= NEAR_TOL * abs(tv)]
    if near:
        return "near_miss", f"{min(near, key=abs):+.1%}"
    factor = scale_factor(p.value, t.value)
    if factor and factor.startswith("x1e"):
        return "scale", factor
    return "wrong_number", ""


def classify_row(row: dict[str, Any]) -> tuple[str, str, str]:
    """(answer_kind, error_class, error_detail) of one row (module docstring)."""
    truth = row.get("truth")
    kind = answer_kind(truth)
    pred = row.get("pred")
    if row.get("missing"):
        return kind, "missing", ""
    blank = row.get("pred_blank")
    if pred is None or (is_blank_value(pred) if blank is None else blank):
        return kind, "needless_abstention", ""
    if row.get("correct"):
        return kind, "correct", ""
    if kind == "number":
        return (kind, *number_class(parse_amount(truth), str(pred)))  # type: ignore[arg-type]
    f1 = row.get("f1", row.get("token_f1"))
    if f1 is not None and f1 == f1 and f1 >= PARTIAL_F1:
        return kind, "partial", f"f1 {f1:.2f}"
    return kind, "wrong_text", ""


def classify(table: pl.DataFrame) -> pl.DataFrame:
    """``table`` with ``answer_kind``, ``error_class`` and ``error_detail`` added (one class per
    row). Raises ValueError naming the columns when a required one is absent."""
    absent = [c for c in REQUIRED if c not in table.columns]
    if absent:
        raise ValueError(f"classify: the per-question table lacks column(s) {', '.join(absent)} "
                         f"(needs {', '.join(REQUIRED)}; optional pred_blank, missing, f1)")
    return with_class_columns(table, [classify_row(row) for row in table.iter_rows(named=True)])


def class_counts(classes: list[str]) -> dict[str, int]:
    """Count per class, every class present (0 when none), in :data:`CLASSES` order."""
    return slips_counts(classes, CLASSES)


def error_summary(table: pl.DataFrame) -> dict[str, Any]:
    """``{"n", "n_errors", "counts": {class: n}, "by_kind": {kind: {class: n}}, "details":
    {class: {detail: n}}}`` over a table (classified first when it is not yet). Every class
    and both kinds are present, zeros included; near-miss percentages are grouped as
    ``within 10%`` and F1 values as ``f1 >= 0.5`` in ``details``."""
    if "error_class" not in table.columns:
        table = classify(table)
    classes = table["error_class"].to_list()
    kinds = table["answer_kind"].to_list()
    counts = class_counts(classes)
    details: dict[str, Counter] = {}
    for cls, detail in zip(classes, table["error_detail"].to_list()):
        if detail:
            if cls == "near_miss":
                detail = "within 10%"
            elif cls == "partial":
                detail = f"f1 >= {PARTIAL_F1:g}"
            details.setdefault(cls, Counter())[detail] += 1
    return {
        "n": len(classes),
        "n_errors": len(classes) - counts["correct"],
        "counts": counts,
        "by_kind": {k: class_counts([c for c, kk in zip(classes, kinds) if kk == k]) for k in KINDS},
        "details": {cls: dict(sorted(c.items())) for cls, c in details.items()},
    }
