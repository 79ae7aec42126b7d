"""Paired comparisons of runs: per-question score tables in, intervals, tests and flips out.

A *configuration* is one or more scored runs of the same settings (several seeds); each run is a
per-question score table (:func:`kohaku.metrics.score_frames`, classified by
:func:`kohaku.diagnosis.classify`). :func:`score_matrix` aligns configurations on the solutions'
questions and averages each question's components over a configuration's seeds;
:func:`kohaku.report.paired.compare` does the statistics; :func:`flips` lists the questions
that changed, with both answers. ``scripts/compare.py`` and the sweep reports
(:mod:`kohaku.report.significance`) are built on these.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from kohaku.diagnosis import class_counts, classify
from kohaku.metrics import MetricError, score_frames
from kohaku.report.paired import Comparison, ScoreMatrix
from kohaku.submission import read_csv_str

log = logging.getLogger(__name__)

REQUIRED = ("qid", "value_ok", "ref_score", "na_ok", "truth_blank")


class CompareError(MetricError):
    """A source that cannot be compared; the message names it and what to pass instead."""


@dataclass
class Config:
    """One configuration: its name and the per-question tables of its runs (seeds)."""

    name: str
    tables: list[pl.DataFrame]
    sources: list[str]


def submission_of(source: str | Path) -> Path:
    """The submission CSV of a source: the file itself, or a run dir's ``submission.csv``."""
    path = Path(source)
    if path.is_file():
        return path
    if path.is_dir():
        if (path / "submission.csv").is_file():
            return path / "submission.csv"
        points = sorted(p.parent.name for p in path.glob("*/run.json"))
        if points:
            raise CompareError(
                f"{path}: a sweep dir, not a run; pass its points ({', '.join(points[:6])}"
                f"{' ...' if len(points) > 6 else ''}), or use scripts/leaderboard.py for the whole sweep")
        raise CompareError(f"{path}: no submission.csv in this folder; pass a run dir or a submission CSV")
    raise CompareError(f"{path}: no such file or run dir")


def score_source(solutions: pl.DataFrame, source: str | Path, variant: str, solutions_name: str = "solutions") -> pl.DataFrame:
    """The classified per-question table of one source scored against ``solutions`` (missing
    questions count as wrong; the subset is chosen later, over all sources)."""
    sub = submission_of(source)
    result = score_frames(solutions, read_csv_str(sub), variant, names=(solutions_name, str(sub)))
    return classify(result.table)


def parse_source(arg: str) -> tuple[str, list[str]]:
    """``NAME=PATH[,PATH...]`` (a configuration over seeds) or ``PATH`` -> (name, paths)."""
    name, sep, rest = arg.partition("=")
    if sep and name and not Path(arg).exists():
        paths = [p for p in rest.split(",") if p]
        if not paths:
            raise CompareError(f"'{arg}': no path after '='; write NAME=PATH[,PATH...]")
        return name, paths
    return arg, [arg]


def _collapse(table: pl.DataFrame, where: str) -> pl.DataFrame:
    """One row per question: duplicate submission rows are averaged (with a warning)."""
    missing = [c for c in REQUIRED if c not in table.columns]
    if missing:
        raise CompareError(f"{where}: per-question table lacks column(s) {missing}; rescore it with "
                           "the score stage or scripts/score.py")
    if table["qid"].n_unique() == table.height:
        return table
    log.warning("%s: %d duplicate question row(s) averaged", where, table.height - table["qid"].n_unique())
    return table.group_by("qid", maintain_order=True).agg(
        pl.col("value_ok").cast(pl.Float64).mean(), pl.col("ref_score").mean(),
        pl.col("na_ok").cast(pl.Float64).mean(), pl.col("truth_blank").first(),
        pl.all().exclude("value_ok", "ref_score", "na_ok", "truth_blank").first(),
    )


def score_matrix(configs: list[Config], variant: str, subset: bool = False) -> ScoreMatrix:
    """Align configurations on the questions of their first table (the solutions' order).

    subset=False: every question counts, a missing one as wrong. subset=True: only the
    questions every run answered (not ``missing``). Each question's components are averaged
    over a configuration's runs; ``seed_scores`` holds each run's own score on those questions.
    """
    if not configs or not all(c.tables for c in configs):
        raise CompareError("nothing to compare: every configuration needs at least one scored run")
    collapsed = [[_collapse(t, f"{c.name} ({s})") for t, s in zip(c.tables, c.sources)] for c in configs]
    qids = collapsed[0][0]["qid"].to_list()
    for c, tables in zip(configs, collapsed):
        for t, s in zip(tables, c.sources):
            extra = set(t["qid"].to_list()) ^ set(qids)
            if extra:
                raise CompareError(f"{c.name} ({s}) was scored on other questions than {configs[0].name} "
                                   f"({len(extra)} differ, e.g. {sorted(extra)[:3]}); score both against "
                                   "the same solutions")
    if subset:
        answered = set(qids)
        for tables in collapsed:
            for t in tables:
                if "missing" in t.columns:
                    answered -= set(t.filter(pl.col("missing").fill_null(False))["qid"].to_list())
        qids = [q for q in qids if q in answered]
    frame = pl.DataFrame({"qid": qids})

    def aligned(t: pl.DataFrame) -> pl.DataFrame:
        return frame.join(t, on="qid", how="left", maintain_order="left")

    def arrays(t: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        a = aligned(t)
        return tuple(a[c].cast(pl.Float64).fill_null(0.0).to_numpy()  # type: ignore[return-value]
                     for c in ("value_ok", "ref_score", "na_ok"))

    blank = aligned(collapsed[0][0])["truth_blank"].fill_null(False).to_numpy()
    value, ref, na, seed_scores = [], [], [], []
    for c, tables in zip(configs, collapsed):
        per_run = [arrays(t) for t in tables]
        value.append(np.mean([v for v, _, _ in per_run], axis=0))
        ref.append(np.mean([r for _, r, _ in per_run], axis=0))
        na.append(np.mean([x for _, _, x in per_run], axis=0))
        runs = ScoreMatrix([f"{c.name}#{i}" for i in range(len(per_run))], qids,
                           np.array([v for v, _, _ in per_run]), np.array([r for _, r, _ in per_run]),
                           np.array([x for _, _, x in per_run]), blank, variant)
        seed_scores.append([float(s) for s in runs.scores()])
    return ScoreMatrix([c.name for c in configs], qids, np.array(value), np.array(ref), np.array(na),
                       blank, variant, seed_scores)


def flips(configs: list[Config], m: ScoreMatrix, a: int, b: int) -> list[dict[str, Any]]:
    """The questions whose score changed from configuration ``a`` to ``b`` (first run of each
    for the answers shown): qid, the change, question, truth, both answers, refs and classes."""
    per_q = m.per_question()
    diff = per_q[b] - per_q[a]
    ta = configs[a].tables[0].unique("qid", keep="first", maintain_order=True)
    tb = configs[b].tables[0].unique("qid", keep="first", maintain_order=True)
    rows_a = {r["qid"]: r for r in ta.iter_rows(named=True)}
    rows_b = {r["qid"]: r for r in tb.iter_rows(named=True)}
    out = []
    for i in np.flatnonzero(np.abs(diff) > 1e-9):
        qid = m.qids[i]
        ra, rb = rows_a.get(qid, {}), rows_b.get(qid, {})
        out.append({
            "qid": qid,
            "change": "fixed" if diff[i] > 0 else "broken",
            "delta": float(diff[i]),
            "question": ra.get("question") or rb.get("question"),
            "truth": ra.get("truth_value"),
            "truth_ref": ra.get("truth_ref"),
            "a_answer": None if ra.get("missing") else ra.get("pred_value"),
            "a_ref": None if ra.get("missing") else ra.get("pred_ref"),
            "a_class": ra.get("error_class"),
            "b_answer": None if rb.get("missing") else rb.get("pred_value"),
            "b_ref": None if rb.get("missing") else rb.get("pred_ref"),
            "b_class": rb.get("error_class"),
        })
    out.sort(key=lambda r: (r["change"] != "fixed", -abs(r["delta"]), r["qid"]))
    return out


def error_counts(config: Config, qids: list[str] | None = None) -> dict[str, float]:
    """Error-class counts of a configuration (mean over its runs; on ``qids`` when given)."""
    per_run = []
    for t in config.tables:
        if "error_class" not in t.columns:
            t = classify(t)
        if qids is not None:
            t = t.filter(pl.col("qid").is_in(qids))
        per_run.append(class_counts(t["error_class"].to_list()))
    keys = list(per_run[0])
    mean = {k: sum(c[k] for c in per_run) / len(per_run) for k in keys}
    return {k: (int(v) if float(v).is_integer() else round(v, 2)) for k, v in mean.items()}


def _f(x: float | None, digits: int = 4, signed: bool = False) -> str:
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return "-"
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def _p(p: float) -> str:
    return f"{p:.4f}" if p >= 1e-4 else "<1e-4"


def pair_lines(comparison: Comparison) -> list[str]:
    """The pairs table: delta, its interval, p, Holm p, MDE, fixed/broken, and a mark '*' where
    the interval excludes zero."""
    level = round(comparison.level * 100)
    lines = [f"{'A':<18}{'B':<18}{'n':>5}{'delta':>9}  {f'{level}% interval':<20}{'p':>8}{'p_holm':>8}"
             f"{'mde80':>8}{'fixed':>7}{'broken':>7}"]
    for p in comparison.pairs:
        ci = f"[{_f(p.lo, signed=True)}, {_f(p.hi, signed=True)}]"
        lines.append(f"{p.a[:17]:<18}{p.b[:17]:<18}{p.n:>5}{_f(p.delta, signed=True):>9}  {ci:<20}"
                     f"{_p(p.p):>8}{_p(p.p_holm):>8}{_f(p.mde):>8}{p.fixed:>7}{p.broken:>7}"
                     + ("  *" if p.significant else ""))
    return lines


def interval_lines(comparison: Comparison) -> list[str]:
    level = round(comparison.level * 100)
    lines = [f"{'run':<30}{'score':>8}  {f'{level}% interval':<18}{'seeds':>6}{'seed sd':>9}"]
    for it in comparison.intervals:
        ci = f"[{_f(it.lo)}, {_f(it.hi)}]"
        lines.append(f"{it.name[:29]:<30}{_f(it.score):>8}  {ci:<18}{it.n_seeds:>6}{_f(it.seed_sd):>9}")
    return lines


def error_table_lines(names: list[str], counts: list[dict[str, float]]) -> list[str]:
    """Error classes (rows) per configuration (columns)."""
    width = max(10, min(18, max(len(n) for n in names) + 2))
    lines = [f"{'class':<21}" + "".join(f"{n[:width - 1]:>{width}}" for n in names)]
    for cls in counts[0]:
        lines.append(f"{cls:<21}" + "".join(f"{c[cls]:>{width}}" for c in counts))
    return lines


def flip_lines(rows: list[dict[str, Any]], shown: int, width: int = 60) -> list[str]:
    def cut(x: Any, w: int) -> str:
        s = "<missing>" if x is None else str(x).replace("\n", " ")
        return s if len(s) <= w else s[: w - 1] + "…"

    lines = []
    for r in rows[:shown]:
        lines.append(f"  {r['change']:<6} {r['qid']:<7} {r['delta']:+.3f}  {cut(r['question'], width)}")
        lines.append(f"         truth {cut(r['truth'], 28):<30}{cut(r['truth_ref'], 40)}")
        lines.append(f"         A     {cut(r['a_answer'], 28):<30}{cut(r['a_ref'], 40):<42}{r['a_class'] or ''}")
        lines.append(f"         B     {cut(r['b_answer'], 28):<30}{cut(r['b_ref'], 40):<42}{r['b_class'] or ''}")
    if len(rows) > shown:
        lines.append(f"  ... {len(rows) - shown} more (--flips N shows more; --json has them all)")
    return lines
