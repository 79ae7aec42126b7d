"""SQuAD-style short answers' named functions (listed in kohaku.tasks.named.catalog): free text
grouped by its normalised form, exact match and token F1 (kohaku.tasks.score.text_match)."""

from __future__ import annotations

from typing import Any

from kohaku.tasks.grouping import Grouping
from kohaku.tasks.named.builtin import MetricEnv, _empty, _truths
from kohaku.tasks.spec import VoteSpec
from kohaku.tasks.score.text_match import exact_match, normalize_answer, token_f1


def text_grouping(spec: VoteSpec) -> Grouping:
    """Free text by its normalised form (lower case, no punctuation or articles)."""
    return Grouping(normalize_answer, lambda a, b: a == b, lambda p, raw: raw.strip(),
                    blank_raw=_empty, blank_parsed=lambda p: p == "")


def exact_match_metric(rows: list[dict[str, Any]], params: dict[str, Any], env: MetricEnv) -> list[float | None]:
    """SQuAD v1.1 exact match (max over the accepted answers); a blank answer scores 0."""
    return [0.0 if r["pred_blank"] else exact_match(r["pred"] or "", _truths(r)) for r in rows]


def token_f1_metric(rows: list[dict[str, Any]], params: dict[str, Any], env: MetricEnv) -> list[float | None]:
    """SQuAD v1.1 token F1 (max over the accepted answers); a blank answer scores 0."""
    return [0.0 if r["pred_blank"] else token_f1(r["pred"] or "", _truths(r)) for r in rows]
