"""The WattBot 2025 metric: 0.75·value + 0.15·ref Jaccard + 0.10·NA (kohaku_spec.md §8).

Two variants; always report which one produced a number (they differ by up to ±0.02):

``wattbot`` (default)
    The metric as first distributed with the competition (Kaggle-style score.py): the
    submission's ``answer_value`` is compared as written (no normalisation), and the NA
    component is the mean over **all** rows of ``na_ok``, where a row whose truth is not blank
    counts as correct.
``wattbot-recall``
    Like the later UI-fork scorer: NA is the recall over truly-unanswerable rows (1.0 when there
    are none), and the submission value is leniently normalised first (``kohaku.values``:
    thousands separators, hedges, magnitude suffixes, true/false, ``a-b`` ranges, ...). A value
    counts as correct if it matches either as written or normalised.

Per row (both variants):

- value (0.75): a blank truth is always correct. Otherwise both sides get the "list-ish" parse
  (``[...]``: JSON after ' → ", else split on commas; elements are floats where possible,
  lowercase strings otherwise; ``{...}``: a lowercase set). List vs list: order-insensitive; all
  numeric → same length and sorted pairs within ``isclose(rel 1e-3, abs 1e-3)``; else equal
  sorted lowercase strings. Numeric 2-list truth vs scalar: ``lo-1e-3 <= x <= hi+1e-3``. Other
  list/scalar mixes: wrong. Scalars: both floats → isclose; else stripped lowercase equality.
- ref (0.15): Jaccard of the ref sets. ``[...]`` is read as a JSON list after ' → "
  (``ast.literal_eval`` as a second try); any other string, ``is_blank`` included, is ONE
  lowercase token. Both empty → 1, one empty → 0. A ``[...]`` that neither reader accepts is
  treated as one token and counted in ``n_malformed_refs`` (with a warning).
- NA (0.10): a blank-truth row is correct iff the submitted ``answer_value`` is blank.
- unit (weight 0): lowercase stripped equality of ``answer_unit``, reported only.

Blank tokens: ``""``, ``na``, ``n/a``, ``is_blank`` (any case), or a string starting with
"Unable to answer with confidence based on the provided documents".

Input checks: missing columns, empty or duplicate ids and empty explanations raise
:class:`MetricError` naming the file, row and column. Solution ids missing from the submission
count as wrong on every component (and warn); submission ids not in the solutions are ignored.
"""

from __future__ import annotations

import ast
import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from kohaku.config import ConfigError
from kohaku.corpus import SOLUTION_COLUMNS
from kohaku.submission import SubmissionError, check_ids, read_csv_str, require_columns
from kohaku.values import canonical, format_number, is_blank_value, render

log = logging.getLogger(__name__)

VARIANTS = ("wattbot", "wattbot-recall")
WEIGHTS = {"value": 0.75, "ref": 0.15, "na": 0.10}
EVIDENCE_FLAGS = ("Quote", "Table", "Figure", "Math", "is_NA")
TOL = 1e-3
SUBMISSION_REQUIRED = ("id", "answer_value", "ref_id", "explanation")


class MetricError(SubmissionError):
    """Malformed solutions or submission; the message names the file, row and column."""


# ---------------------------------------------------------------------------------------------
# value


def _to_float(text: str) -> float | None:
    try:
        x = float(text)
    except (TypeError, ValueError, OverflowError):
        return None
    return x if math.isfinite(x) else None


def _element(x: Any) -> float | str:
    if isinstance(x, bool):
        return str(x).lower()
    if isinstance(x, (int, float)):
        f = float(x)
        return f if math.isfinite(f) else str(x).lower()
    s = str(x).strip()
    f = _to_float(s)
    return f if f is not None else s.lower()


def listish(text: str) -> list[float | str] | None:
    """The list-ish parse of a value (see module doc); None when ``text`` is a scalar."""
    s = text.strip()
    if s.startswith("[") and s.endswith("]"):
        try:
            items = json.loads(s.replace("'", '"'))
            if not isinstance(items, list):
                raise ValueError
        except (ValueError, RecursionError):
            inner = s[1:-1].strip()
            items = [p.strip().strip("'\"") for p in inner.split(",")] if inner else []
        return [_element(x) for x in items]
    if s.startswith("{") and s.endswith("}"):
        inner = s[1:-1].strip()
        parts = {p.strip().strip("'\"").lower() for p in inner.split(",")} if inner else set()
        return sorted(parts)
    return None


def _list_key(items: list[float | str]) -> list[str]:
    return sorted(format_number(x) if isinstance(x, float) else x for x in items)


def value_matches(truth: str, pred: str) -> bool:
    """The competition's value rule for a non-blank truth (no normalisation of ``pred``)."""
    truth, pred = (truth or "").strip(), (pred or "").strip()
    t_list, p_list = listish(truth), listish(pred)
    if t_list is not None and p_list is not None:
        if t_list and p_list and all(isinstance(x, float) for x in t_list + p_list):
            if len(t_list) != len(p_list):
                return False
            return all(
                math.isclose(a, b, rel_tol=TOL, abs_tol=TOL)  # type: ignore[arg-type]
                for a, b in zip(sorted(t_list), sorted(p_list))  # type: ignore[type-var]
            )
        return _list_key(t_list) == _list_key(p_list)
    if t_list is not None:
        x = _to_float(pred)
        if x is not None and len(t_list) == 2 and all(isinstance(v, float) for v in t_list):
            lo, hi = sorted(t_list)  # type: ignore[type-var]
            return lo - TOL <= x <= hi + TOL
        return False
    if p_list is not None:
        return False
    a, b = _to_float(truth), _to_float(pred)
    if a is not None and b is not None:
        return math.isclose(a, b, rel_tol=TOL, abs_tol=TOL)
    return truth.lower() == pred.lower()


def normalise_value(pred: str) -> str:
    """Lenient normalisation of a submitted value (variant ``wattbot-recall``)."""
    return render(canonical(pred))


def value_ok(truth: str, pred: str, variant: str = "wattbot") -> bool:
    if is_blank_value(truth):
        return True
    if value_matches(truth, pred):
        return True
    if variant == "wattbot-recall":
        norm = normalise_value(pred)
        return not is_blank_value(norm) and value_matches(truth, norm)
    return False


# ---------------------------------------------------------------------------------------------
# ref


def parse_refs(text: str) -> tuple[frozenset[str], bool]:
    """(ref set, malformed) for a ref_id field, per the module doc."""
    s = (text or "").strip()
    if not s:
        return frozenset(), False
    if s.startswith("["):
        for reader in (lambda t: json.loads(t.replace("'", '"')), ast.literal_eval):
            try:
                items = reader(s)
            except Exception:  # noqa: BLE001 - the next reader, then the documented fallback
                continue
            if isinstance(items, (list, tuple)):
                return frozenset(str(x).strip().lower() for x in items if str(x).strip()), False
        return frozenset({s.lower()}), True
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


def score_frames(
    solutions: pl.DataFrame,
    submission: pl.DataFrame,
    variant: str = "wattbot",
    *,
    names: tuple[str, str] = ("solutions", "submission"),
    subset: bool = False,
) -> ScoreResult:
    """Score a submission table against a solutions table (both all-string, as read by
    :func:`kohaku.submission.read_csv_str`).

    subset: score only the solution rows whose id is in the submission (for runs over a question
    subset); by default a missing id counts as wrong on every component.
    """
    if variant not in VARIANTS:
        raise MetricError(f"unknown metric variant '{variant}'; use one of {', '.join(VARIANTS)}")
    sol_name, sub_name = names
    try:
        require_columns(solutions, SOLUTION_COLUMNS, sol_name)
        require_columns(submission, SUBMISSION_REQUIRED, sub_name)
        check_ids(solutions, sol_name)
        check_ids(submission, sub_name)
    except SubmissionError as exc:
        raise MetricError(str(exc)) from exc
    solutions = solutions.with_columns(pl.all().cast(pl.String).fill_null(""))
    submission = submission.with_columns(pl.all().cast(pl.String).fill_null(""))

    for i, row in enumerate(submission.select("id", "explanation").to_dicts(), start=1):
        if not (row["explanation"] or "").strip():
            raise MetricError(
                f"{sub_name}: row {i} (id '{row['id'].strip()}'), column 'explanation': empty; "
                "every submission row needs a non-empty explanation (write is_blank)"
            )

    warnings: list[str] = []
    sub_rows = {r["id"].strip(): r for r in submission.to_dicts()}
    sol_ids = [q.strip() for q in solutions["id"].to_list()]
    extra = sorted(set(sub_rows) - set(sol_ids))
    if subset:
        keep = [q in sub_rows for q in sol_ids]
        solutions = solutions.filter(pl.Series(keep, dtype=pl.Boolean))
    has_unit = "answer_unit" in solutions.columns and "answer_unit" in submission.columns
    flags = [f for f in EVIDENCE_FLAGS if f in solutions.columns]
    has_usage = "Usage" in solutions.columns

    rows = []
    missing: list[str] = []
    malformed: list[str] = []
    for i, t in enumerate(solutions.to_dicts(), start=1):
        qid = t["id"].strip()
        p = sub_rows.get(qid)
        truth_blank = is_blank_value(t["answer_value"])
        t_refs, t_bad = parse_refs(t["ref_id"])
        if t_bad:
            malformed.append(f"{sol_name} row {i} (id '{qid}'), column 'ref_id': {t['ref_id']!r}")
        row: dict[str, Any] = {
            "qid": qid,
            "truth_value": t["answer_value"],
            "truth_ref": t["ref_id"],
            "truth_blank": truth_blank,
        }
        if p is None:
            missing.append(qid)
            row.update(
                pred_value=None, pred_ref=None, pred_blank=None, value_ok=False, ref_score=0.0,
                na_ok=False, unit_ok=False if has_unit else None, missing=True, ref_malformed=False,
            )
        else:
            p_refs, p_bad = parse_refs(p["ref_id"])
            if p_bad:
                malformed.append(f"{sub_name} id '{qid}', column 'ref_id': {p['ref_id']!r}")
            pred_blank = is_blank_value(p["answer_value"])
            row.update(
                pred_value=p["answer_value"],
                pred_ref=p["ref_id"],
                pred_blank=pred_blank,
                value_ok=value_ok(t["answer_value"], p["answer_value"], variant),
                ref_score=jaccard(t_refs, p_refs),
                na_ok=pred_blank if truth_blank else True,
                unit_ok=(
                    t["answer_unit"].strip().lower() == p["answer_unit"].strip().lower()
                    if has_unit
                    else None
                ),
                missing=False,
                ref_malformed=p_bad,
            )
        if has_usage:
            row["usage"] = t["Usage"].strip()
        for f in flags:
            row[f] = _flag(t[f])
        rows.append(row)

    schema: dict[str, Any] = {
        "qid": pl.String, "truth_value": pl.String, "truth_ref": pl.String, "truth_blank": pl.Boolean,
        "pred_value": pl.String, "pred_ref": pl.String, "pred_blank": pl.Boolean,
        "value_ok": pl.Boolean, "ref_score": pl.Float64, "na_ok": pl.Boolean, "unit_ok": pl.Boolean,
        "missing": pl.Boolean, "ref_malformed": pl.Boolean,
    }
    if has_usage:
        schema["usage"] = pl.String
    schema.update({f: pl.Boolean for f in flags})
    table = pl.DataFrame(rows, schema=schema) if rows else pl.DataFrame(schema=schema)

    if missing:
        warnings.append(
            f"{len(missing)} solution id(s) missing from {sub_name}, scored as wrong: "
            + ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else "")
        )
    if extra:
        warnings.append(f"{len(extra)} {sub_name} id(s) not in {sol_name}, ignored: "
                        + ", ".join(extra[:10]) + (" ..." if len(extra) > 10 else ""))
    if malformed:
        warnings.append(f"{len(malformed)} malformed ref list(s) read as one token each "
                        "(write them as ['id1','id2']): "
                        + "; ".join(malformed[:5]))
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
        n_malformed_refs=len(malformed),
        per_evidence=per_evidence,
        per_usage=per_usage,
        warnings=warnings,
        table=table,
    )


def score_files(
    solutions: str | Path, submission: str | Path, variant: str = "wattbot", *, subset: bool = False
) -> ScoreResult:
    """Score two CSV files; errors name the file, row and column."""
    try:
        sol = read_csv_str(solutions)
        sub = read_csv_str(submission)
    except SubmissionError as exc:
        raise MetricError(str(exc)) from exc
    return score_frames(sol, sub, variant, names=(str(solutions), str(submission)), subset=subset)


@dataclass
class ScoreConfig:
    """The ``score`` config group."""

    variant: str = "wattbot"  # wattbot (competition file) | wattbot-recall (UI fork scorer)
    subset: bool = False  # score only questions present in the submission (question subsets)

    def validate(self) -> None:
        if self.variant not in VARIANTS:
            raise ConfigError(f"score.variant='{self.variant}'; use one of {', '.join(VARIANTS)}")


# The scores table when there is nothing to score (corpus.solutions=null).
EMPTY_SCORES = {
    "qid": pl.String,
    "value_ok": pl.Boolean,
    "ref_score": pl.Float64,
    "na_ok": pl.Boolean,
    "unit_ok": pl.Boolean,
}
