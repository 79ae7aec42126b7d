"""FinanceBench's named functions (listed in kohaku.tasks.named.catalog): amounts as a vote
grouping and the numeric match metric (kohaku.tasks.score.amounts)."""

from __future__ import annotations

from typing import Any

from kohaku.core.values import format_number
from kohaku.tasks.grouping import Grouping
from kohaku.tasks.named.builtin import MetricEnv, _empty
from kohaku.core.config import build
from kohaku.tasks.score.amounts import (AmountRules, gold_amount, normalize_text, numeric_match, parse_amount,
                                  question_decimals, question_unit, same_amount)
from kohaku.tasks.spec import VoteSpec


def amounts_grouping(spec: VoteSpec) -> Grouping:
    """Amounts (``$1,577.00``, ``(1.2)``, ``2.8%``, ``USD 1.5 billion``; a bare ``3M`` is a name)
    within ``vote.tolerance``; anything else by its normalised text (SQuAD normalisation)."""
    def parse(raw: str) -> Any:
        amount = parse_amount(raw)
        return amount if amount is not None else normalize_text(raw)

    def same(a: Any, b: Any) -> bool:
        if isinstance(a, str) or isinstance(b, str):
            return a == b
        return same_amount(a, b, spec.tolerance)

    def render(parsed: Any, raw: str) -> str:
        if isinstance(parsed, str):
            return raw.strip()
        return format_number(parsed.value) + ("%" if parsed.percent else "")

    return Grouping(parse, same, render, blank_raw=_empty, blank_parsed=lambda p: p == "")


def numeric_match_rules(params: dict[str, Any]) -> tuple[float, AmountRules]:
    """``params.rel_tol`` (default 0) and the careful grader's rules of ``params`` (the fields of
    :class:`~kohaku.tasks.score.amounts.AmountRules`, each off by default); an unknown key or a bad
    value is a ConfigError naming it."""
    values = dict(params or {})
    rel_tol = float(values.pop("rel_tol", 0.0))
    return rel_tol, build(AmountRules, values, "task.score.metrics[numeric_match].params")


def numeric_match_metric(rows: list[dict[str, Any]], params: dict[str, Any], env: MetricEnv) -> list[float | None]:
    """1/0 on the questions whose gold answer is an amount, or starts with one
    (kohaku.tasks.score.amounts.numeric_match: the gold's own precision, ``params.rel_tol`` a
    relative tolerance on top, default 0); None (not covered) on the others. A sentence answer
    is read for its amounts. A careful grader's readings, each a param, all off by default
    (kohaku.tasks.score.amounts.AmountRules; all on in conf/task/financebench.yaml):
    ``params.rounded_inputs_tol`` (a computed figure within the gold's half unit plus this share
    of it, e.g. 0.002), ``params.ratio_percent`` (a ratio written as a percent, both rounded),
    ``params.unit_conversion`` (an amount in full read in the question's unit, ``in USD
    millions``), ``params.final_figure`` (a computation's final figure), ``params.refusals`` (a
    refusal is no answer), ``params.text_gold`` (a text gold's leading number),
    ``params.asked_precision`` (the question's "round to two decimal places")."""
    rel_tol, rules = numeric_match_rules(params)
    out: list[float | None] = []
    for r in rows:
        if gold_amount(r["truth"] or "") is None:
            out.append(None)
        elif r["pred_blank"]:
            out.append(0.0)
        else:
            question = r.get("question")
            out.append(1.0 if numeric_match(r["truth"], r["pred"] or "", rel_tol, question_unit(question), rules,
                                            question_decimals(question)) else 0.0)
    return out
