"""The WattBot 2025 metric: 0.75·value + 0.15·ref Jaccard + 0.10·NA (kohaku_spec.md §8).

Two variants, each matching one reference scorer rule for rule (``scripts/score.py`` of the
KohakuRAG_UI repository); always report which one produced a number:

``wattbot`` (default)
    The scorer's first commit (the Kaggle-style metric as distributed with the competition):
    the submitted ``answer_value`` is compared as written, and NA is the mean over **all** rows
    of ``na_ok``, where a row whose truth is not blank counts as correct.
``wattbot-recall``
    The scorer's latest commit: NA is the recall over truly-unanswerable rows (1.0 when there
    are none), and the submitted value is normalised first (:func:`normalise_value`), and only
    the normalised form is compared.

Reading (both variants; the references read with ``pandas.read_csv``): a cell that pandas reads
as missing (empty, ``NA``, ``N/A``, ``null``, ``None``, ``NaN``, ...:
:data:`kohaku.tasks.rooms.wattbot.submission.PANDAS_NA_TOKENS`) is the text ``nan``; it is neither blank (so an
empty ``answer_value`` on an unanswerable question fails NA) nor an id (an empty ``ref_id`` is
the one id ``nan``). Blank lines are skipped. Surrounding spaces of ids and header names are
stripped (pandas keeps them; a kohaku leniency).

Per row:

- value (0.75): a blank truth is always correct. Otherwise both sides get the list-ish parse:
  ``[...]`` is a JSON list after ' → ", else the text between the brackets split on commas
  (items stripped, quotes kept); each item is ``float(item)`` where Python reads it as a float
  (``nan`` and ``inf`` included), else the lowercase text; ``{...}`` is the sorted set of its
  lowercase comma-separated terms. List vs list: order-insensitive; all numeric → same length
  and sorted pairs ``isclose(rel 1e-3, abs 1e-3)``; else the sorted lowercase texts (a number
  written as Python's ``str(float)``) are equal. A blank item inside a list is an item like any
  other: ``[10000,is_blank]`` never matches ``10000``. Numeric 2-list truth vs a scalar:
  ``lo-1e-3 <= float(x) <= hi+1e-3``. Other list/scalar mixes: wrong. Scalars: both floats →
  ``isclose`` (NaN never matches); else stripped lowercase equality.
- ref (0.15): Jaccard of the ref sets. A ref field starting with ``[`` is a JSON list after
  ' → " whose items become stripped lowercase texts (blank and empty items included, ``null`` is
  ``""``); any other text, ``is_blank`` and ``nan`` included, is ONE lowercase id, and so is a
  ``[...]`` that is not JSON (counted in ``n_malformed_refs``). Both sets empty → 1, one empty → 0.
- NA (0.10): a blank-truth row is correct iff the submitted ``answer_value`` (as written) is blank.
- unit (weight 0): lowercase stripped equality of ``answer_unit``, reported only.

Blank: ``""``, ``na``, ``n/a``, ``is_blank`` after strip and lowercase, or a text starting with
"Unable to answer with confidence based on the provided documents" (any case).

Rows: every submission row whose id is a solution id is scored, duplicates included (the
references join the two tables on id). Solution ids missing from the submission count as wrong
on every component (a warning names them; the references drop them, as ``subset=True`` does);
submission ids not in the solutions are ignored.

Questionable rows (:func:`kohaku.tasks.rooms.wattbot.submission.scoring_issues`: empty explanations, empty cells,
blank items in lists, malformed or quoted ref lists, empty or duplicate ids) are scored and
reported as warnings naming the file, row, id and column; ``strict=True`` refuses them with a
:class:`MetricError`. Missing columns and an unknown variant are always errors.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from kohaku.core.config import ConfigError
from kohaku.ingest.corpus import SOLUTION_COLUMNS
from kohaku.core.errors import MetricError, SubmissionError  # noqa: F401 - MetricError re-exported
from kohaku.tasks.rooms.wattbot.submission import (ISSUE_ADVICE, RowIssue, read_csv_str, reference_cell,
                                             require_columns, scoring_issues)
from kohaku.core.values import is_blank_value

log = logging.getLogger(__name__)

VARIANTS = ("wattbot", "wattbot-recall")
WEIGHTS = {"value": 0.75, "ref": 0.15, "na": 0.10}
EVIDENCE_FLAGS = ("Quote", "Table", "Figure", "Math", "is_NA")
TOL = 1e-3
SUBMISSION_REQUIRED = ("id", "answer_value", "ref_id", "explanation")


# ---------------------------------------------------------------------------------------------
# value


def _float(text: str) -> float | None:
    """``float(text)`` as Python reads it (``nan``, ``inf``, ``1_000`` included); None if not."""
    try:
        return float(text)
    except ValueError:
        return None


def _item(x: Any) -> float | str:
    text = "" if x is None else str(x).strip()
    number = _float(text)
    return text.lower() if number is None else number


def listish(text: str) -> list[float | str] | None:
    """The list-ish parse of a value (see module doc); None when ``text`` is not a collection."""
    s = (text or "").strip()
    if s.startswith("[") and s.endswith("]"):
        try:
            items = json.loads(s.replace("'", '"'))
        except (ValueError, RecursionError):
            items = s[1:-1].split(",")
        return [_item(x) for x in items]
    if s.startswith("{") and s.endswith("}"):
        return sorted({t.strip().lower() for t in s[1:-1].split(",") if t.strip()})
    return None


def _numeric(items: list[float | str]) -> bool:
    return all(isinstance(x, float) for x in items)


def lists_equal(a: list[float | str], b: list[float | str]) -> bool:
    """Order-insensitive list equality: numbers within the tolerance, else lowercase texts."""
    if _numeric(a) and _numeric(b):
        return len(a) == len(b) and all(
            math.isclose(x, y, rel_tol=TOL, abs_tol=TOL)  # type: ignore[arg-type]
            for x, y in zip(sorted(a), sorted(b))  # type: ignore[type-var]
        )
    return sorted(str(x).strip().lower() for x in a) == sorted(str(x).strip().lower() for x in b)


def value_matches(truth: str, pred: str) -> bool:
    """The value rule for a non-blank truth, ``pred`` compared as given."""
    truth, pred = truth or "", pred or ""
    t_list = listish(truth)
    if t_list is not None:
        p_list = listish(pred)
        if p_list is not None:
            return lists_equal(t_list, p_list)
        if len(t_list) == 2 and _numeric(t_list):
            lo, hi = sorted(t_list)  # type: ignore[type-var]
            x = _float(pred)
            return x is not None and lo - TOL <= x <= hi + TOL  # type: ignore[operator]
        return False
    a, b = _float(truth), _float(pred)
    if a is not None and b is not None:
        return math.isclose(a, b, rel_tol=TOL, abs_tol=TOL)
    return truth.strip().lower() == pred.strip().lower()


# The submission-side normalisation of the wattbot-recall reference, step by step.
_HEDGE_WORDS = ("more than", "less than", "greater than", "fewer than", "approximately", "about",
                "around", "over", "under", "nearly", "roughly", "up to", "at least", "at most")
_HEDGE = re.compile(
    "^(?:(?:" + "|".join(w.replace(" ", r"\s+") for w in _HEDGE_WORDS) + r")\s+|[~≈><]\s*)",
    re.IGNORECASE,
)
_SUFFIX = re.compile(r"^(-?\d+(?:\.\d+)?)\s*([KkMmBbTt])$")
_SUFFIX_FACTOR = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}
_SPAN = re.compile(r"^(?:from\s+)?(-?[\d.]+)\s*(?:[-–—]|to)\s*(-?[\d.]+)$", re.IGNORECASE)


def _plain(x: float) -> str:
    """``2000000000`` for a whole number, else ``str(x)`` (OverflowError for inf)."""
    return str(int(x)) if x == int(x) else str(x)


def _without_commas(s: str) -> str:
    bare = s.replace(",", "")
    return bare if _float(bare) is not None else s


def normalise_value(pred: str) -> str:
    """The ``wattbot-recall`` normalisation of a submitted value: blank stays as is;
    true/yes → 1, false/no → 0; thousands commas dropped when the rest is a float; one leading
    hedge (about, more than, ~, >, ...) dropped; a k/M/B/T suffix multiplied out; ``a-b``,
    ``a to b``, ``from a to b`` → ``[lo,hi]``. Anything else is returned stripped."""
    s = (pred or "").strip()
    if not s or is_blank_value(s):
        return s
    if s.lower() in ("true", "yes"):
        return "1"
    if s.lower() in ("false", "no"):
        return "0"
    s = _without_commas(s)
    hedge = _HEDGE.match(s)
    if hedge:
        s = _without_commas(s[hedge.end():].strip())
    suffix = _SUFFIX.match(s)
    if suffix:
        try:
            return _plain(float(suffix.group(1)) * _SUFFIX_FACTOR[suffix.group(2).lower()])
        except OverflowError:  # hundreds of digits: the reference crashes; keep the text
            return s
    span = _SPAN.match(s)
    if span:
        try:
            lo, hi = sorted((float(span.group(1)), float(span.group(2))))
            return f"[{_plain(lo)},{_plain(hi)}]"
        except (ValueError, OverflowError):  # "1.2.3-4": not a span
            pass
    return s


def value_ok(truth: str, pred: str, variant: str = "wattbot") -> bool:
    if is_blank_value(truth):
        return True
    if variant == "wattbot-recall":
        pred = normalise_value(pred)
    return value_matches(truth, pred)


# ---------------------------------------------------------------------------------------------
# ref


def parse_refs(text: str) -> tuple[frozenset[str], bool]:
    """(ref set, malformed) for a ref_id field, per the module doc."""
    s = (text or "").strip()
    if not s:
        return frozenset(), False
    if s.startswith("["):
        try:
            items = json.loads(s.replace("'", '"'))
        except (ValueError, RecursionError):
            return frozenset({s.lower()}), True
        return frozenset(("" if x is None else str(x)).strip().lower() for x in items), False
    return frozenset({s.lower()}), False


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


def ref_score(truth: str, pred: str) -> float:
    return jaccard(parse_refs(truth)[0], parse_refs(pred)[0])


# ---------------------------------------------------------------------------------------------
# whole files


@dataclass
class ScoreResult:
    variant: str
    score: float
    value: float
    ref: float
    na: float
    unit: float | None
    n: int
    n_na: int
    n_missing: int
    n_extra: int
    n_malformed_refs: int
    per_evidence: dict[str, dict[str, float | None]] = field(default_factory=dict)
    per_usage: dict[str, dict[str, float]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    issues: list[RowIssue] = field(default_factory=list)
    table: pl.DataFrame = field(default_factory=pl.DataFrame)

    def summary(self) -> dict[str, Any]:
        """JSON-ready figures (everything but the per-question table)."""
        return {
            "variant": self.variant,
            "score": self.score,
            "components": {"value": self.value, "ref": self.ref, "na": self.na, "unit": self.unit},
            "weights": dict(WEIGHTS),
            "n": self.n,
            "n_na": self.n_na,
            "n_missing": self.n_missing,
            "n_extra": self.n_extra,
            "n_malformed_refs": self.n_malformed_refs,
            "per_evidence": self.per_evidence,
            "per_usage": self.per_usage,
            "warnings": self.warnings,
            "row_issues": [str(i) for i in self.issues],
        }


def _flag(text: str) -> bool:
    return (text or "").strip().lower() in {"1", "1.0", "true", "yes"}


def _components(table: pl.DataFrame, variant: str) -> dict[str, float]:
    n = table.height
    if n == 0:
        return {"score": 0.0, "value": 0.0, "ref": 0.0, "na": 0.0, "n": 0}
    value = float(table["value_ok"].cast(pl.Float64).mean())  # type: ignore[arg-type]
    ref = float(table["ref_score"].mean())  # type: ignore[arg-type]
    if variant == "wattbot":
        na = float(table["na_ok"].cast(pl.Float64).mean())  # type: ignore[arg-type]
    else:
        na_rows = table.filter(pl.col("truth_blank"))
        na = 1.0 if na_rows.height == 0 else float(na_rows["na_ok"].cast(pl.Float64).mean())  # type: ignore[arg-type]
    score = WEIGHTS["value"] * value + WEIGHTS["ref"] * ref + WEIGHTS["na"] * na
    return {"score": score, "value": value, "ref": ref, "na": na, "n": n}


def _group_issues(issues: list[RowIssue], shown: int = 5) -> list[str]:
    """One warning per (file, kind), naming the first rows."""
    groups: dict[tuple[str, str], list[RowIssue]] = defaultdict(list)
    for issue in issues:
        groups[(issue.where, issue.kind)].append(issue)
    lines = []
    for (where, kind), items in groups.items():
        named = "; ".join(i.cell() for i in items[:shown])
        more = f"; ... {len(items) - shown} more" if len(items) > shown else ""
        lines.append(f"{where}: {len(items)} row(s) with {kind}, scored anyway "
                     f"({ISSUE_ADVICE[kind]}): {named}{more}")
    return lines


def _keyed(df: pl.DataFrame) -> dict[str, list[tuple[int, dict[str, str]]]]:
    """Rows by id (as the reference keys them, stripped), with their 1-based row numbers."""
    rows: dict[str, list[tuple[int, dict[str, str]]]] = defaultdict(list)
    for i, r in enumerate(df.to_dicts(), start=1):
        rows[reference_cell(r["id"]).strip()].append((i, r))
    return rows


def score_frames(
    solutions: pl.DataFrame,
    submission: pl.DataFrame,
    variant: str = "wattbot",
    *,
    names: tuple[str, str] = ("solutions", "submission"),
    subset: bool = False,
    strict: bool = False,
) -> ScoreResult:
    """Score a submission table against a solutions table (both all-string, as read by
    :func:`kohaku.tasks.rooms.wattbot.submission.read_csv_str`; null and ``""`` are empty cells).

    subset: score only the solution rows whose id is in the submission (for runs over a question
    subset, and as the reference scorers do); by default a missing id counts as wrong on every
    component. strict: refuse a submission with questionable rows
    (:func:`kohaku.tasks.rooms.wattbot.submission.scoring_issues`) instead of warning.
    """
    if variant not in VARIANTS:
        raise MetricError(f"unknown metric variant '{variant}'; use one of {', '.join(VARIANTS)}")
    sol_name, sub_name = names
    try:
        require_columns(solutions, SOLUTION_COLUMNS, sol_name)
        require_columns(submission, SUBMISSION_REQUIRED, sub_name)
    except SubmissionError as exc:
        raise MetricError(str(exc)) from exc
    solutions = solutions.with_columns(pl.all().cast(pl.String).fill_null(""))
    submission = submission.with_columns(pl.all().cast(pl.String).fill_null(""))

    issues = scoring_issues(submission, sub_name)
    if strict and issues:
        raise MetricError(
            f"{sub_name}: {len(issues)} questionable row(s) refused (--strict): "
            + "; ".join(f"{i.cell()} ({i.kind})" for i in issues[:10])
            + (f"; ... {len(issues) - 10} more" if len(issues) > 10 else "")
            + "; fix them, or score without --strict to get warnings"
        )
    sol_issues = scoring_issues(solutions.select("id"), sol_name)  # empty or duplicate ids

    sub_rows = _keyed(submission)
    sol_keyed = [(reference_cell(t["id"]).strip(), t) for t in solutions.to_dicts()]
    sol_ids = {q for q, _ in sol_keyed}
    extra = sorted(q for q in sub_rows if q not in sol_ids)
    if subset:
        sol_keyed = [(q, t) for q, t in sol_keyed if q in sub_rows]
    has_unit = "answer_unit" in solutions.columns and "answer_unit" in submission.columns
    flags = [f for f in EVIDENCE_FLAGS if f in solutions.columns]
    has_usage = "Usage" in solutions.columns
    has_question = "question" in solutions.columns

    rows = []
    missing: list[str] = []
    malformed: list[str] = []
    for i, (qid, t) in enumerate(sol_keyed, start=1):
        t_value, t_ref = reference_cell(t["answer_value"]), reference_cell(t["ref_id"])
        truth_blank = is_blank_value(t_value)
        t_refs, t_bad = parse_refs(t_ref)
        if t_bad:
            malformed.append(f"{sol_name} row {i} (id '{qid}'), column 'ref_id': {t_ref!r}")
        base: dict[str, Any] = {
            "qid": qid, "truth_value": t["answer_value"], "truth_ref": t["ref_id"], "truth_blank": truth_blank,
        }
        if has_question:
            base["question"] = t["question"]
        if has_usage:
            base["usage"] = t["Usage"].strip()
        for f in flags:
            base[f] = _flag(t[f])
        preds = sub_rows.get(qid, [])
        if not preds:
            missing.append(qid)
            rows.append({
                **base, "pred_value": None, "pred_ref": None, "pred_blank": None, "value_ok": False,
                "ref_score": 0.0, "na_ok": False, "unit_ok": False if has_unit else None,
                "missing": True, "ref_malformed": False,
            })
            continue
        for _, p in preds:  # every submission row of the id, as the references' join scores them
            p_value, p_ref = reference_cell(p["answer_value"]), reference_cell(p["ref_id"])
            p_refs, p_bad = parse_refs(p_ref)
            pred_blank = is_blank_value(p_value)
            rows.append({
                **base,
                "pred_value": p["answer_value"],
                "pred_ref": p["ref_id"],
                "pred_blank": pred_blank,
                "value_ok": value_ok(t_value, p_value, variant),
                "ref_score": jaccard(t_refs, p_refs),
                "na_ok": pred_blank if truth_blank else True,
                "unit_ok": (
                    reference_cell(t["answer_unit"]).strip().lower()
                    == reference_cell(p["answer_unit"]).strip().lower()
                    if has_unit else None
                ),
                "missing": False,
                "ref_malformed": p_bad,
            })
    n_malformed = len(malformed) + sum(1 for r in rows if r["ref_malformed"])

    schema: dict[str, Any] = {
        "qid": pl.String, "truth_value": pl.String, "truth_ref": pl.String, "truth_blank": pl.Boolean,
        "pred_value": pl.String, "pred_ref": pl.String, "pred_blank": pl.Boolean,
        "value_ok": pl.Boolean, "ref_score": pl.Float64, "na_ok": pl.Boolean, "unit_ok": pl.Boolean,
        "missing": pl.Boolean, "ref_malformed": pl.Boolean,
    }
    if has_question:
        schema["question"] = pl.String
    if has_usage:
        schema["usage"] = pl.String
    schema.update({f: pl.Boolean for f in flags})
    table = pl.DataFrame(rows, schema=schema) if rows else pl.DataFrame(schema=schema)

    warnings = _group_issues(issues) + _group_issues(sol_issues)
    if missing:
        warnings.append(
            f"{len(missing)} solution id(s) missing from {sub_name}, scored as wrong (the reference "
            "scorers drop them; --subset scores that way): "
            + ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else "")
        )
    if extra:
        warnings.append(f"{len(extra)} {sub_name} id(s) not in {sol_name}, ignored: "
                        + ", ".join(extra[:10]) + (" ..." if len(extra) > 10 else ""))
    if malformed:
        warnings.append(f"{len(malformed)} malformed ref list(s) read as one token each "
                        "(write them as ['id1','id2']): " + "; ".join(malformed[:5]))
    for w in warnings:
        log.warning(w)

    comp = _components(table, variant)
    unit = None
    if has_unit and table.height:
        unit = float(table["unit_ok"].cast(pl.Float64).mean())  # type: ignore[arg-type]
    per_evidence = {}
    for f in flags:
        sel = table.filter(pl.col(f))
        per_evidence[f] = {
            "n": sel.height,
            "value": float(sel["value_ok"].cast(pl.Float64).mean()) if sel.height else None,  # type: ignore[arg-type]
        }
    per_usage = {}
    if has_usage:
        for split in sorted(set(table["usage"].to_list())):
            per_usage[split or "(none)"] = _components(table.filter(pl.col("usage") == split), variant)
    return ScoreResult(
        variant=variant,
        score=comp["score"],
        value=comp["value"],
        ref=comp["ref"],
        na=comp["na"],
        unit=unit,
        n=table.height,
        n_na=int(table["truth_blank"].sum()) if table.height else 0,
        n_missing=len(missing),
        n_extra=len(extra),
        n_malformed_refs=n_malformed,
        per_evidence=per_evidence,
        per_usage=per_usage,
        warnings=warnings,
        issues=issues + sol_issues,
        table=table,
    )


def score_files(
    solutions: str | Path,
    submission: str | Path,
    variant: str = "wattbot",
    *,
    subset: bool = False,
    strict: bool = False,
) -> ScoreResult:
    """Score two CSV files; errors name the file, row and column."""
    try:
        sol = read_csv_str(solutions)
        sub = read_csv_str(submission)
    except SubmissionError as exc:
        raise MetricError(str(exc)) from exc
    return score_frames(sol, sub, variant, names=(str(solutions), str(submission)), subset=subset,
                        strict=strict)
