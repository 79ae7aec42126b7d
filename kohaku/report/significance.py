"""Sweep points against a baseline: paired intervals, Holm p-values and error classes.

Input: the runs table of :func:`kohaku.report.runs.collect_runs` (its ``scores_table`` column
points at each run's per-question score table) and the swept keys. A *cell* is one setting of
the swept keys; its runs (seeds, unswept repeats) are averaged question by question. The baseline
is the cell of the first point (the lowest point number of the sweep) unless ``baseline`` names
one by its overrides (``"retrieve.top_k=4,infer.prompt_order=context_first"``: the cell whose
values match every pair given).

:func:`sweep_comparison` returns a per-cell table (score and its interval, seed spread, delta to
the baseline, its interval, p, Holm p, '*' where the interval excludes zero, questions fixed and
broken, error-class counts) and a per-run table (each run against the baseline cell) for the
leaderboard, or None (with a warning saying why) when the runs cannot be compared: among them
runs scored with different metrics (another task, WattBot's other variant). The metric is each
run's (its ``metric`` column, from its scores.json); the error classes are those its table holds
(the task's; WattBot's kohaku.tasks.rooms.wattbot.diagnosis classes for a WattBot table without them), in the order
its scores.json lists them.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from kohaku.core.errors import MetricError
from kohaku.report.compare import PAGE_PREFIX, Config, class_names, error_counts, page_counts, score_matrix
from kohaku.tasks.score.components import (Metric, class_order, describe_metrics, read_scores_json, scores_json_of,
                                     variant_metric, with_classes)
from kohaku.report.paired import N_RESAMPLES, SEED, ScoreMatrix, bootstrap, compare
from kohaku.report.runs import parse_value, run_metrics

log = logging.getLogger(__name__)

CELL_COLUMNS = ("n_runs", "score", "score_lo", "score_hi", "seed_sd", "delta", "delta_lo", "delta_hi",
                "p", "p_holm", "sig", "fixed", "broken")
RUN_COLUMNS = ("delta", "delta_lo", "delta_hi", "p", "p_holm", "sig")


@dataclass
class SweepComparison:
    baseline: dict[str, Any]
    cells: pl.DataFrame
    runs: pl.DataFrame
    n: int
    n_resamples: int
    variant: str | None
    metric: Metric | None = None
    # the error-class columns of ``cells`` (then a typed task's page classes, pages:<class>)
    classes: list[str] = field(default_factory=list)
    matrix: ScoreMatrix | None = None  # the cells' per-question components, in ``cells`` order


def _point_number(run_id: str, run_path: str) -> tuple[int, str]:
    m = re.search(r"(\d+)$", run_path) or re.search(r"(\d+)$", run_id)
    return (int(m.group(1)) if m else 10**9, run_path)


def parse_baseline(text: str | None) -> dict[str, Any]:
    """``"a=1,b=x"`` -> ``{"a": 1, "b": "x"}`` (values read as override values)."""
    out: dict[str, Any] = {}
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"report.baseline: '{part}' is not KEY=VALUE; write e.g. "
                             "report.baseline='retrieve.top_k=4'")
        out[key.strip().lstrip("+")] = parse_value(value)
    return out


def _same(a: Any, b: Any) -> bool:
    return a == b or str(a) == str(b)


def _load(path: str) -> pl.DataFrame:
    return with_classes(pl.read_parquet(path))  # a table scored before the error classes


def _classes(path: str) -> list[str]:
    """The error classes the scores.json beside a per-question table lists."""
    return class_order(read_scores_json(scores_json_of(path)))


def _metric(ok: pl.DataFrame, warn: bool = True) -> Metric | None:
    """The runs' one metric (WattBot's by their variant when they name none); None, with a
    warning, when they were scored with different ones."""
    say = log.warning if warn else log.debug
    variants = sorted({v for v in ok["variant"].to_list() if v}) if "variant" in ok.columns else []
    if len(variants) > 1:
        say("runs were scored with different metric variants (%s): no paired comparison", ", ".join(variants))
        return None
    metrics = run_metrics(ok)
    if any(not m.same_as(metrics[0]) for m in metrics[1:]):
        say("runs were scored with different metrics (%s): no paired comparison", describe_metrics(metrics))
        return None
    if metrics:
        return metrics[0]
    try:
        return variant_metric(variants[0] if variants else None)
    except MetricError as exc:
        say("%s: no paired comparison", exc)
        return None


def scored_runs(runs: pl.DataFrame) -> pl.DataFrame:
    """The runs that finished, were scored and still have their per-question table, by point."""
    if runs.is_empty() or "scores_table" not in runs.columns:
        return pl.DataFrame()
    ok = runs.filter((pl.col("status") == "ok") & pl.col("score").is_not_null() & pl.col("scores_table").is_not_null())
    if ok.is_empty():
        return ok
    order = sorted(range(ok.height), key=lambda i: _point_number(ok["run_id"][i], ok["run_path"][i]))
    return ok[order]


def sweep_comparison(
    runs: pl.DataFrame,
    swept: list[str],
    baseline: str | dict[str, Any] | None = None,
    *,
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
) -> SweepComparison | None:
    ok = scored_runs(runs)
    if ok.is_empty():
        log.info("no scored run has a per-question table: no intervals in the reports")
        return None
    metric = _metric(ok)
    if metric is None:
        return None
    keys = [k for k in swept if k in ok.columns]
    rows = ok.to_dicts()
    cells: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        cells.setdefault(tuple(r[k] for k in keys), []).append(r)
    cell_keys = list(cells)
    wanted = parse_baseline(baseline) if isinstance(baseline, str) or baseline is None else dict(baseline)
    if wanted:
        unknown = [k for k in wanted if k not in keys]
        if unknown:
            raise ValueError(f"report.baseline names {unknown}, which the sweep does not vary; "
                             f"swept keys: {', '.join(keys) or '(none)'}")
        matches = [c for c in cell_keys if all(_same(c[keys.index(k)], v) for k, v in wanted.items())]
        if not matches:
            raise ValueError(f"report.baseline={wanted}: no sweep point has these values; cells: "
                             + "; ".join(",".join(f"{k}={v}" for k, v in zip(keys, c)) for c in cell_keys))
        base = matches[0]
    else:
        base = cell_keys[0]
    order = [base] + [c for c in cell_keys if c != base]
    read: dict[str, pl.DataFrame] = {}

    def table(path: str) -> pl.DataFrame:
        if path not in read:
            read[path] = _load(path)
        return read[path]

    def classes(rs: list[dict[str, Any]]) -> list[str]:
        return list(dict.fromkeys(k for r in rs for k in _classes(r["scores_table"])))

    try:
        # a cell is named by the swept keys it sets (a point that leaves one unset: the others)
        configs = [Config(",".join(f"{k}={v}" for k, v in zip(keys, c) if v is not None)
                          or ("as composed" if keys else "all"),
                          [table(r["scores_table"]) for r in cells[c]],
                          [r["run_path"] for r in cells[c]], metric, classes(cells[c])) for c in order]
        m = score_matrix(configs, metric)
        cmp = compare(m, n_resamples=n_resamples, seed=seed)
        run_configs = [configs[0]] + [Config(r["run_path"], [table(r["scores_table"])], [r["run_path"]], metric)
                                      for r in rows]
        run_m = score_matrix(run_configs, metric)
        run_cmp = compare(run_m, n_resamples=n_resamples, seed=seed)
    except (MetricError, OSError) as exc:
        log.warning("sweep points cannot be compared question by question (%s): no intervals", exc)
        return None

    class_list = [c for c in class_names(configs) if c not in keys and c not in CELL_COLUMNS]
    cell_rows = []
    pairs = {p.b: p for p in cmp.pairs}
    for c, config, it in zip(order, configs, cmp.intervals):
        p = pairs.get(config.name)
        row: dict[str, Any] = dict(zip(keys, c))
        row.update(n_runs=len(config.tables), score=it.score, score_lo=it.lo, score_hi=it.hi, seed_sd=it.seed_sd)
        if p is None:  # the baseline itself
            row.update(delta=0.0, delta_lo=None, delta_hi=None, p=None, p_holm=None, sig="baseline",
                       fixed=None, broken=None)
        else:
            row.update(delta=p.delta, delta_lo=p.lo, delta_hi=p.hi, p=p.p, p_holm=p.p_holm,
                       sig="*" if p.significant else "", fixed=p.fixed, broken=p.broken)
        row.update(error_counts(config, m.qids, class_list))
        row.update(page_counts(config, m.qids))   # a typed task's page classes (pages:...)
        cell_rows.append(row)
    schema: dict[str, Any] = {k: ok.schema[k] for k in keys}
    schema.update({"n_runs": pl.Int64, "score": pl.Float64, "score_lo": pl.Float64, "score_hi": pl.Float64,
                   "seed_sd": pl.Float64, "delta": pl.Float64, "delta_lo": pl.Float64, "delta_hi": pl.Float64,
                   "p": pl.Float64, "p_holm": pl.Float64, "sig": pl.String, "fixed": pl.Int64, "broken": pl.Int64})
    page_list = list(dict.fromkeys(k for r in cell_rows for k in r if k.startswith(PAGE_PREFIX)))
    class_list += page_list
    schema.update({cls: pl.Float64 for cls in class_list})
    cell_table = pl.DataFrame(cell_rows, schema=schema, strict=False)

    run_rows = [{"run_path": p.b, "delta": p.delta, "delta_lo": p.lo, "delta_hi": p.hi, "p": p.p,
                 "p_holm": p.p_holm, "sig": "*" if p.significant else ""} for p in run_cmp.pairs]
    run_table = pl.DataFrame(run_rows, schema={"run_path": pl.String, **{c: pl.Float64 for c in RUN_COLUMNS[:-1]},
                                                "sig": pl.String})
    return SweepComparison(dict(zip(keys, base)), cell_table, run_table, m.n, n_resamples, metric.variant,
                           metric, class_list, m)


def group_interval(runs: pl.DataFrame, *, n_resamples: int = N_RESAMPLES, seed: int = SEED,
                   level: float = 0.95) -> tuple[float, float] | None:
    """The percentile interval of the score of a group of runs averaged question by question
    (for plot bars); None when a run has no per-question table."""
    ok = scored_runs(runs)
    if ok.is_empty() or ok.height != runs.filter(pl.col("status") == "ok").height:
        return None
    metric = _metric(ok, warn=False)
    if metric is None:
        return None
    try:
        m: ScoreMatrix = score_matrix([Config("g", [_load(p) for p in ok["scores_table"].to_list()],
                                              ok["run_path"].to_list(), metric)], metric)
    except (MetricError, OSError):
        return None
    boot = bootstrap(m, n_resamples, seed)[:, 0]
    lo, hi = np.quantile(boot, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(lo), float(hi)
