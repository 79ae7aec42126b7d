"""Calibrating a metric against people's labels: does the metric accept what people accept?

A labelled file holds answers with a person's verdict: one row per answer with the question, the
gold answer, the answer and the label (CSV or JSON lines; the column names are
:class:`LabelColumns`, ``question``, ``gold``, ``answer``, ``label`` by default). A label is
``correct``/``incorrect`` (also ``true``/``false``, ``1``/``0``, ``yes``/``no``, ``accept``/
``reject``, ``right``/``wrong``, any case); anything else is an error naming the file and row.

:func:`calibrate` runs one metric (any named metric: ``numeric_match``, ``llm_judge`` with any
backend, a task's component with its params) over the answers as the scorer does (one row per
answer, ``pred_blank`` for an empty answer) and compares its verdict (a value >= 0.5 accepts)
with the label:

- **agreement**: the share of the covered answers where the metric and the label agree; an
  answer the metric does not cover (``numeric_match`` on a gold that is no amount) is counted
  apart and left out;
- **the confusion matrix**: label correct/incorrect against metric accepts/rejects;
- **every disagreement, by category**: the file's category column when it names one
  (``LabelColumns.category``), else, for a gold that is an amount, the rule of
  :mod:`kohaku.tasks.score.amounts` that decided (:func:`amount_category`: ``strict``, a careful
  rule of :class:`~kohaku.tasks.score.amounts.AmountRules` that accepts or rejects it alone
  (``rounded_inputs_tol``, ``ratio_percent``, ``unit_conversion``, ``final_figure``,
  ``text_gold``, ``asked_precision``, ``refusal``; ``careful rules together`` when only all of
  them do; ``NAME (off)``: a rule the metric does not use that would), or what a rejected answer
  states instead (``no amount``, ``percent/ratio``, ``scale``, ``sign``, ``near miss``,
  ``other figure``), else ``text``.

:func:`report_lines` prints them; ``scripts/calibrate_metric.py`` is the command.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable

from kohaku.core.errors import CorpusError
from kohaku.tasks.files import io
from kohaku.tasks.score.amounts import (CAREFUL, STRICT, AmountRules, answer_amounts, gold_amount, question_decimals,
                                  question_unit, readings)
from kohaku.tasks.score.amounts import numeric_match as _numeric_match

ACCEPT = frozenset({"correct", "true", "1", "yes", "accept", "accepted", "right", "y"})
REJECT = frozenset({"incorrect", "false", "0", "no", "reject", "rejected", "wrong", "n"})


@dataclass
class LabelColumns:
    """The labelled file's columns."""

    question: str = "question"       # the question (the amount metric reads its unit: "in USD millions")
    gold: str = "gold"               # the gold answer
    answer: str = "answer"           # the answer graded
    label: str = "label"             # the person's verdict: correct / incorrect (true/false, 1/0, ...)
    category: str | None = "category"   # optional: the category a disagreement is listed under
    id: str | None = "id"            # optional: the answer's id in the listing (else its row number)


@dataclass
class LabelledAnswer:
    """One answer with a person's verdict."""

    row: int                          # 1-based row of the file (the header not counted)
    id: str
    question: str
    gold: str
    answer: str
    label: bool
    category: str | None = None


def parse_label(value: object, where: str) -> bool:
    """A label cell as True (accepted) / False (rejected); a CorpusError naming ``where``
    otherwise."""
    text = str(value if value is not None else "").strip().lower()
    if text in ACCEPT:
        return True
    if text in REJECT:
        return False
    raise CorpusError(f"{where}: label {value!r} is neither correct nor incorrect; write correct/incorrect "
                      "(or true/false, 1/0, yes/no)")


def read_labels(path: str | Path, columns: LabelColumns | None = None, fmt: str | None = None) -> list[LabelledAnswer]:
    """The labelled answers of a CSV or JSON-lines file (``fmt``: csv | jsonl | None: by the
    extension). Missing columns and bad labels are CorpusErrors naming the file (and row)."""
    cols = columns or LabelColumns()
    path = Path(path)
    df = io.read_rows(path, fmt, "labelled answers", skip_blank_lines=True)
    need = {"gold": cols.gold, "answer": cols.answer, "label": cols.label}
    missing = [f"{k} ({v!r})" for k, v in need.items() if v not in df.columns]
    if missing:
        raise CorpusError(f"{path}: no column for {', '.join(missing)}; the file has {', '.join(df.columns)} "
                          "(name the columns with --gold-col, --answer-col, --label-col)")
    out = []
    for i, r in enumerate(df.to_dicts(), start=1):
        category = (r.get(cols.category) or None) if cols.category else None
        ident = (r.get(cols.id) or "") if cols.id else ""
        out.append(LabelledAnswer(
            row=i, id=str(ident or f"row {i}"), question=r.get(cols.question) or "",
            gold=r.get(cols.gold) or "", answer=r.get(cols.answer) or "",
            label=parse_label(r.get(cols.label), f"{path}: row {i}, column {cols.label!r}"),
            category=category))
    if not out:
        raise CorpusError(f"{path}: no labelled answers")
    return out


@dataclass
class Disagreement:
    """An answer where the metric and the label differ."""

    item: LabelledAnswer
    value: float                     # the metric's value (>= 0.5: accepted)
    category: str


@dataclass
class Calibration:
    """A metric against the labels (module docstring)."""

    metric: str
    n: int                            # labelled answers
    covered: int                      # answers the metric gives a value
    tp: int                           # label correct, metric accepts
    fn: int                           # label correct, metric rejects
    fp: int                           # label incorrect, metric accepts
    tn: int                           # label incorrect, metric rejects
    disagreements: list[Disagreement] = field(default_factory=list)

    @property
    def agreement(self) -> float:
        """Agreeing answers over the covered ones (nan when none is covered)."""
        return (self.tp + self.tn) / self.covered if self.covered else math.nan

    def by_category(self) -> dict[str, list[Disagreement]]:
        """The disagreements grouped by category, the largest group first."""
        counts = Counter(d.category for d in self.disagreements)
        return {c: [d for d in self.disagreements if d.category == c]
                for c, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))}

    def summary(self) -> dict[str, Any]:
        return {"metric": self.metric, "n": self.n, "covered": self.covered,
                "agreement": None if not self.covered else self.agreement,
                "confusion": {"tp": self.tp, "fn": self.fn, "fp": self.fp, "tn": self.tn},
                "disagreements": {c: [{"row": d.item.row, "id": d.item.id, "gold": d.item.gold,
                                       "answer": d.item.answer, "label": d.item.label, "value": d.value}
                                      for d in ds] for c, ds in self.by_category().items()}}


# -- the category of an amount answer ----------------------------------------------------------

_RULES = ("unit_conversion", "ratio_percent", "rounded_inputs_tol", "final_figure", "text_gold")


def amount_category(question: str, gold: str, answer: str, rules: AmountRules | None = None,
                    rel_tol: float = 0.0) -> str | None:
    """Which rule of :mod:`kohaku.tasks.score.amounts` decides ``answer`` against ``gold`` (None when
    the gold is no amount): ``strict`` when the strict rules accept it; the first careful rule
    of ``rules`` that alone makes the strict rules accept it (``rounded_inputs_tol``,
    ``unit_conversion``, ...; ``NAME (off)`` for a rule of :data:`~kohaku.tasks.score.amounts.CAREFUL`
    that ``rules`` leaves off and that would); ``refusal`` when the ``refusals`` rule makes it no answer; for a
    rejected answer, what it states instead: ``no amount``, ``percent/ratio`` (the figure as a
    percent where a ratio is meant, or 100x off), ``scale`` (1,000x off), ``sign``, ``near miss``
    (within 10 %), ``other figure``."""
    rules = rules or STRICT
    t = gold_amount(gold)
    if t is None:
        return None
    unit = question_unit(question)
    asked = question_decimals(question)

    def numeric_match(g: str, a: str, rt: float, u: float | None, r: AmountRules) -> bool | None:
        return _numeric_match(g, a, rt, u, r, asked)

    refused = not answer_amounts(answer, t, replace(STRICT, refusals=True))
    if numeric_match(gold, answer, rel_tol, unit, STRICT):   # accepted, unless a careful rule rejects it
        if refused:
            return _tag("refusal", rules.refusals)
        if not numeric_match(gold, answer, rel_tol, unit, replace(
                STRICT, ratio_percent=True, rounded_inputs_tol=rules.rounded_inputs_tol)):
            return _tag("ratio_percent", rules.ratio_percent)
        if not numeric_match(gold, answer, rel_tol, unit, replace(STRICT, final_figure=True)):
            return _tag("final_figure", rules.final_figure)
        if not numeric_match(gold, answer, rel_tol, unit, replace(STRICT, asked_precision=True)):
            return _tag("asked_precision", rules.asked_precision)
        if not numeric_match(gold, answer, rel_tol, unit, CAREFUL if rules == STRICT else rules):
            return "careful rules together" + (" (off)" if rules == STRICT else "")
        return "strict"
    if refused:
        return _tag("refusal", rules.refusals)
    for name in _RULES:          # the rule that accepts it; "(off)": one the metric does not use
        value = getattr(rules, name) or getattr(CAREFUL, name)
        if numeric_match(gold, answer, rel_tol, unit, replace(STRICT, **{name: value})):
            return _tag(name, getattr(rules, name))
    if numeric_match(gold, answer, rel_tol, unit, rules):
        return "careful rules together"
    found = answer_amounts(answer, t, rules, every=True)
    if not found:
        return "no amount"
    return _miss(t, found[0])


def _tag(name: str, used: object) -> str:
    return name if used else f"{name} (off)"


def _miss(t: Any, p: Any) -> str:
    if t.value != 0 and p.value != 0 and (t.value > 0) != (p.value > 0):
        return "sign"
    best = math.inf
    for tv, pv, _ in readings(t, p):
        if tv and pv:
            best = min(best, abs(math.log10(abs(pv / tv))))
    if best == math.inf:
        return "other figure"
    if abs(best - 2) < 0.05:
        return "percent/ratio"
    if any(abs(best - k) < 0.05 for k in (3, 6, 9)):
        return "scale"
    if best < math.log10(1.1):
        return "near miss"
    return "other figure"


# -- calibrating -------------------------------------------------------------------------------

def metric_rows(items: list[LabelledAnswer]) -> list[dict[str, Any]]:
    """The rows a metric reads (kohaku.tasks.named.builtin's signature), one per labelled answer."""
    rows = []
    for it in items:
        blank = not it.answer.strip()
        rows.append({"qid": f"{it.row}", "question": it.question, "truth": it.gold, "pred": it.answer,
                     "pred_blank": blank, "missing": False, "unanswered": blank,
                     "solution": {"question": it.question, "answer": it.gold},
                     "submission": {"answer": it.answer}})
    return rows


def calibrate(items: list[LabelledAnswer], metric: Callable[..., Any], params: dict[str, Any], env: Any,
              name: str, categorize: Callable[[LabelledAnswer], str] | None = None) -> Calibration:
    """``metric`` (a named metric: ``fn(rows, params, env)``) over the labelled answers, against
    their labels (module docstring). ``categorize`` names a disagreement's category when the
    file's category column does not (default: :func:`default_category` with the strict rules)."""
    values = list(metric(metric_rows(items), params, env))
    if len(values) != len(items):
        raise ValueError(f"metric {name} returned {len(values)} values for {len(items)} answers")
    cat = categorize or (lambda it: default_category(it))
    result = Calibration(name, len(items), 0, 0, 0, 0, 0)
    for it, v in zip(items, values):
        if v is None:
            continue
        result.covered += 1
        accepted = float(v) >= 0.5
        if it.label and accepted:
            result.tp += 1
        elif it.label:
            result.fn += 1
        elif accepted:
            result.fp += 1
        else:
            result.tn += 1
        if accepted != it.label:
            result.disagreements.append(Disagreement(it, float(v), it.category or cat(it)))
    return result


def default_category(item: LabelledAnswer, rules: AmountRules | None = None, rel_tol: float = 0.0) -> str:
    """A disagreement's category: the file's, else :func:`amount_category` for an amount gold,
    else ``text``."""
    if item.category:
        return item.category
    return amount_category(item.question, item.gold, item.answer, rules, rel_tol) or "text"


def amount_rules_of(params: dict[str, Any]) -> tuple[float, AmountRules]:
    """``rel_tol`` and the :class:`AmountRules` of a ``numeric_match`` metric's params (unknown
    keys ignored: the metric itself checks them)."""
    names = {f.name for f in fields(AmountRules)}
    rules = AmountRules(**{k: v for k, v in (params or {}).items() if k in names})
    return float((params or {}).get("rel_tol", 0.0)), rules


def report_lines(result: Calibration, show: int | None = None) -> list[str]:
    """The printed report: agreement, the confusion matrix, every disagreement by category
    (``show``: at most that many listed per category; None: all)."""
    lines = [f"metric: {result.metric}   labelled answers: {result.n}   covered: {result.covered}"
             + (f"   not covered: {result.n - result.covered}" if result.n != result.covered else "")]
    if result.covered:
        lines.append(f"agreement: {result.agreement:.4f} ({result.tp + result.tn} of {result.covered})")
    else:
        lines.append("agreement: n/a (the metric covers none of the answers)")
    w = max(5, *(len(str(x)) for x in (result.tp, result.fn, result.fp, result.tn)))
    lines += ["confusion (rows: label; columns: metric):",
              f"  {'':<16} {'accepts':>{w + 2}} {'rejects':>{w + 2}}",
              f"  {'label correct':<16} {result.tp:>{w + 2}} {result.fn:>{w + 2}}",
              f"  {'label incorrect':<16} {result.fp:>{w + 2}} {result.tn:>{w + 2}}",
              f"disagreements: {len(result.disagreements)} (false accepts {result.fp}, false rejects {result.fn})"]
    for category, ds in result.by_category().items():
        lines.append(f"  {category}: {len(ds)}")
        for d in ds[:show] if show is not None else ds:
            verdict = "label correct, metric rejects" if d.item.label else "label incorrect, metric accepts"
            lines.append(f"    {d.item.id}: gold {_short(d.item.gold)!r} answer {_short(d.item.answer)!r} ({verdict})")
        if show is not None and len(ds) > show:
            lines.append(f"    ... {len(ds) - show} more")
    return lines


def _short(text: str, n: int = 90) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[: n - 3] + "..."

