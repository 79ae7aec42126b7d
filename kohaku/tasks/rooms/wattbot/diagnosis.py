"""Why a run loses: every scored question in exactly one error class.

Input: the score stage's per-question table (:func:`kohaku.tasks.rooms.wattbot.metric.score_frames`: ``value_ok``,
``ref_score``, ``na_ok``, ``truth_blank``, ``pred_blank``, ``missing``, the truth and submitted
values, and ``question`` when the solutions have it). Output: the same table with three more
columns, ``answer_kind``, ``error_class`` and ``error_detail`` (:func:`classify`), and the counts
per class split by answer kind, evidence flag and usage (:func:`error_summary`).

The classes, tried in this order (the first that applies wins):

1. ``missing``: the submission has no row for the question.
2. The truth is blank (unanswerable): left blank → ``correct`` (or ``wrong_ref`` when the
   references are not all right); answered → ``answered_na``.
3. ``needless_abstention``: the truth has a value, the run left it blank.
4. The value is right by the metric (``value_ok``): ``correct`` when the references are all right
   (ref Jaccard 1), else ``wrong_ref``.
5. A wrong value, by the kind of the truth:

   - a number: ``scale`` when the submitted number is off by a power of ten (x10^k, k ≠ 0, within
     5 %) or by a common unit factor (:data:`UNIT_FACTORS`: minutes/hours, bits/bytes, kWh/MJ,
     kg/lb, km/mile); ``near_miss`` when within 10 % but outside the metric's 0.1 %;
     ``wrong_number`` otherwise (also for a submitted name or list);
   - a numeric two-item list (the metric's range): ``scale`` when both ends are off by the same
     factor as above, else ``wrong_range``;
   - any other list: ``wrong_list``;
   - a name, or a True/False answer: ``wrong_name``.

So ``correct`` + ``wrong_ref`` are exactly the questions whose value the metric counts as
right, an unanswerable question counting as right only when left blank.

``error_detail`` holds the finer split: the factor of a ``scale`` slip (``x1e3``, ``unit x60``),
the relative error of a ``near_miss`` (``+4.2%``), ``format`` for a value that is right once read
leniently (:func:`kohaku.core.values.canonical`: ``2 billion``, ``1,000``, ``True``) but that the
metric variant compares as written, ``not a number`` / ``range for a number`` / ``overlap`` /
``k of m items`` where they apply, ``bool`` for a wrong True/False answer, and
``ref jaccard 0.50`` for ``wrong_ref``.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any

import polars as pl

from kohaku.tasks.rooms.wattbot.metric import EVIDENCE_FLAGS, listish
from kohaku.core.values import canonical, format_number, same
from kohaku.tasks.analysis.slips import (NEAR_TOL, SCALE_TOL, UNIT_FACTORS, answer_kind, scale_factor,  # noqa: F401
                                with_class_columns)
from kohaku.tasks.analysis.slips import class_counts as _class_counts

CLASSES = (
    "correct",
    "missing",
    "answered_na",
    "needless_abstention",
    "wrong_ref",
    "scale",
    "near_miss",
    "wrong_number",
    "wrong_range",
    "wrong_name",
    "wrong_list",
)
ERROR_CLASSES = CLASSES[1:]
KINDS = ("number", "name", "list", "bool", "blank")
# The evidence columns the issue asks splits by (is_NA is the blank kind already).
SPLIT_FLAGS = tuple(f for f in EVIDENCE_FLAGS if f != "is_NA")

def _wrong_number(truth: float, pred: str) -> tuple[str, str]:
    c = canonical(pred)
    if c.kind == "range":
        return "wrong_number", "range for a number"
    if c.kind != "number":
        return "wrong_number", "not a number"
    x = c.numbers[0]
    if same(x, truth):
        return "wrong_number", "format"
    factor = scale_factor(x, truth)
    if factor:
        return "scale", factor
    if truth != 0 and abs(x - truth) <= NEAR_TOL * abs(truth):
        return "near_miss", f"{(x - truth) / abs(truth):+.1%}"
    return "wrong_number", ""


def _wrong_range(lo: float, hi: float, pred: str) -> tuple[str, str]:
    c = canonical(pred)
    if c.kind == "range" and len(c.numbers) == 2:
        a, b = c.numbers
        if same(a, lo) and same(b, hi):
            return "wrong_range", "format"
        fa, fb = scale_factor(a, lo), scale_factor(b, hi)
        if fa and fa == fb:
            return "scale", fa
        return "wrong_range", "overlap" if a <= hi and b >= lo else "disjoint"
    if c.kind == "number":
        return "wrong_range", "number outside the range"
    return "wrong_range", "not a range"


def _item_key(x: Any) -> str:
    return format_number(x) if isinstance(x, float) and math.isfinite(x) else str(x).strip().lower()


def _wrong_list(truth: str, items: list[Any], pred: str) -> tuple[str, str]:
    if same(canonical(truth), canonical(pred)):
        return "wrong_list", "format"
    want = {_item_key(x) for x in items}
    got = {_item_key(x) for x in (listish(pred) or [pred])}
    return "wrong_list", f"{len(want & got)} of {len(want)} items"


def classify_row(row: dict[str, Any], kind: str) -> tuple[str, str]:
    """(error_class, error_detail) of one row of the per-question score table."""
    if row.get("missing"):
        return "missing", ""
    ref = float(row.get("ref_score") or 0.0)
    ref_detail = f"ref jaccard {ref:.2f}"
    if row.get("truth_blank"):
        if row.get("pred_blank"):
            return ("correct", "") if ref >= 1.0 else ("wrong_ref", ref_detail)
        return "answered_na", ""
    if row.get("pred_blank"):
        return "needless_abstention", ""
    if row.get("value_ok"):
        return ("correct", "") if ref >= 1.0 else ("wrong_ref", ref_detail)
    truth, pred = str(row.get("truth_value") or "").strip(), str(row.get("pred_value") or "").strip()
    if kind == "bool":
        c = canonical(pred)
        return "wrong_name", "format" if same(c, truth) else "bool"
    items = listish(truth)
    if items is not None:
        numbers = [x for x in items if isinstance(x, float)]
        if len(items) == 2 and len(numbers) == 2:
            lo, hi = sorted(numbers)
            return _wrong_range(lo, hi, pred)
        return _wrong_list(truth, items, pred)
    c = canonical(truth)
    if c.kind == "number":
        return _wrong_number(c.numbers[0], pred)
    return "wrong_name", "format" if same(canonical(pred), c) else ""


def classify(table: pl.DataFrame) -> pl.DataFrame:
    """The score table with ``answer_kind``, ``error_class`` and ``error_detail`` added (one
    class per row, by the precedence in the module doc)."""
    questions = table["question"].to_list() if "question" in table.columns else [None] * table.height
    triples = []
    for row, question in zip(table.iter_rows(named=True), questions):
        kind = answer_kind(question, row.get("truth_value"))
        triples.append((kind, *classify_row(row, kind)))
    return with_class_columns(table, triples)


def class_counts(classes: list[str], names: tuple[str, ...] = CLASSES) -> dict[str, int]:
    """Count per class, every class of ``names`` (WattBot's by default) present (0 when none), in that order."""
    return _class_counts(classes, names)


def error_summary(table: pl.DataFrame) -> dict[str, Any]:
    """Counts and shares of each class over a classified table (:func:`classify`), split by
    answer kind, evidence flag (Quote, Table, Figure, Math, where the table has them) and usage.

    ``share`` is of all questions; ``error_share`` of the questions not ``correct``. Splits hold
    counts only; ``details`` the finer split of each class (``{class: {detail: count}}``).
    """
    if "error_class" not in table.columns:
        table = classify(table)
    classes = table["error_class"].to_list()
    n = len(classes)
    counts = class_counts(classes)
    n_errors = n - counts["correct"]
    out: dict[str, Any] = {
        "n": n,
        "n_errors": n_errors,
        "counts": counts,
        "share": {k: (v / n if n else 0.0) for k, v in counts.items()},
        "error_share": {k: (v / n_errors if n_errors else 0.0) for k, v in counts.items() if k != "correct"},
    }
    details: dict[str, dict[str, int]] = {}
    for cls, detail in zip(classes, table["error_detail"].to_list()):
        if detail:
            key = re.sub(r"[+-]\d+(\.\d+)?%$", "within 10%", detail)
            key = re.sub(r"^ref jaccard .*", "ref jaccard < 1", key)
            details.setdefault(cls, Counter())[key] += 1  # type: ignore[index]
    out["details"] = {cls: dict(sorted(c.items())) for cls, c in details.items()}
    kinds = table["answer_kind"].to_list()
    out["by_kind"] = {k: class_counts([c for c, kk in zip(classes, kinds) if kk == k])
                      for k in KINDS if k in kinds}
    out["by_evidence"] = {
        f: class_counts([c for c, flag in zip(classes, table[f].to_list()) if flag])
        for f in SPLIT_FLAGS if f in table.columns
    }
    if "usage" in table.columns:
        usage = [u or "(none)" for u in table["usage"].to_list()]
        out["by_usage"] = {u: class_counts([c for c, uu in zip(classes, usage) if uu == u])
                           for u in sorted(set(usage))}
    return out


def error_lines(summary: dict[str, Any], examples: pl.DataFrame | None = None, shown: int = 3) -> list[str]:
    """The text report of :func:`error_summary` (``score.py --errors``): the class table, then
    each split as a table of counts; with ``examples`` (a classified table) the first ids of
    each error class."""
    n, n_err = summary["n"], summary["n_errors"]
    lines = [f"error classes ({n} questions, {n_err} not correct):",
             f"  {'class':<21}{'n':>5}{'of all':>9}{'of errors':>11}  detail"]
    for cls, count in summary["counts"].items():
        share = summary["share"][cls]
        err = "" if cls == "correct" else f"{summary['error_share'][cls]:>10.1%}"
        detail = ", ".join(f"{k}: {v}" for k, v in summary.get("details", {}).get(cls, {}).items())
        lines.append(f"  {cls:<21}{count:>5}{share:>9.1%}{err:>11}  {detail}".rstrip())
    for title, key in (("answer kind", "by_kind"), ("evidence", "by_evidence"), ("usage", "by_usage")):
        split = summary.get(key) or {}
        if not split:
            continue
        names = list(split)
        lines.append("")
        lines.append(f"  by {title}:")
        lines.append(f"  {'class':<21}" + "".join(f"{name[:9]:>10}" for name in names))
        for cls in CLASSES:
            lines.append(f"  {cls:<21}" + "".join(f"{split[name][cls]:>10}" for name in names))
        lines.append(f"  {'(n)':<21}" + "".join(f"{sum(split[name].values()):>10}" for name in names))
    if examples is not None and examples.height and "error_class" in examples.columns:
        lines.append("")
        lines.append("  first questions of each error class:")
        for cls in ERROR_CLASSES:
            sel = examples.filter(pl.col("error_class") == cls).head(shown)
            for r in sel.iter_rows(named=True):
                pred = "<missing>" if r.get("missing") else r.get("pred_value")
                detail = f" ({r['error_detail']})" if r.get("error_detail") else ""
                lines.append(f"  {cls:<21}{r['qid']:<8} truth {str(r['truth_value'])[:24]!s:<26}"
                             f"submitted {str(pred)[:24]}{detail}")
    return lines
