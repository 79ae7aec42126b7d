"""PNG plots of a sweep (matplotlib, Agg canvas; no pyplot global state)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import polars as pl
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from kohaku.report.runs import component_columns, run_metrics
from kohaku.report.significance import group_interval
from kohaku.report.tables import _sorted_values
from kohaku.tasks.score.components import variant_metric


def components(runs: pl.DataFrame) -> list[tuple[str, str]]:
    """(column, label) of the bars per run: the score, then each of the task's components as
    ``name (weight)`` (WattBot: value (0.75), ref (0.15), na (0.10))."""
    return [("score", "overall"), *component_columns(runs)]


def metric_name(runs: pl.DataFrame) -> str:
    """The runs' task for titles: a known metric's title (``WattBot``), else the metrics' names;
    the default variant's title when the runs name none."""
    names = list(dict.fromkeys(m.display for m in run_metrics(runs)))
    return " / ".join(names) or variant_metric().display


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", name).strip("_") or "key"


def _save(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


def _is_numeric(runs: pl.DataFrame, key: str) -> bool:
    return runs.schema[key].is_numeric()


def _ok(runs: pl.DataFrame) -> pl.DataFrame:
    if runs.is_empty() or "score" not in runs.columns:
        return pl.DataFrame()
    return runs.filter((pl.col("status") == "ok") & pl.col("score").is_not_null())


INTERVAL_LABEL = "{} score (bars: 95 % bootstrap interval over questions)"
STD_LABEL = "{} score (mean ± std over seeds)"


def _cell_stats(df: pl.DataFrame, key: str) -> tuple[dict[Any, tuple[float, float, float]], bool]:
    """{value of key: (mean score, lower bar, upper bar)} and whether the bars are bootstrap
    intervals over questions (every group's runs have per-question tables) or the std over seeds."""
    groups = {}
    intervals = True
    for (value,), sub in df.partition_by(key, as_dict=True, maintain_order=True).items():
        mean = float(sub["score"].mean())  # type: ignore[arg-type]
        ci = group_interval(sub) if "scores_table" in sub.columns else None
        if ci is None:
            intervals = False
        std = float(sub["score"].std(ddof=1) or 0.0) if sub.height > 1 else 0.0
        groups[value] = (mean, ci, std)
    out = {}
    for value, (mean, ci, std) in groups.items():
        if intervals:
            out[value] = (mean, max(0.0, mean - ci[0]), max(0.0, ci[1] - mean))  # type: ignore[index]
        else:
            out[value] = (mean, std, std)
    return out, intervals


def score_vs_key(runs: pl.DataFrame, key: str, line_key: str | None, path: Path) -> Path | None:
    """Score (mean ± std over seeds and other keys) against numeric ``key``, one line per
    value of ``line_key``."""
    ok = _ok(runs).filter(pl.col(key).is_not_null())
    if ok.is_empty():
        return None
    fig = Figure(figsize=(6.4, 4.2))
    ax = fig.add_subplot(1, 1, 1)
    groups: list[tuple[Any, pl.DataFrame]]
    if line_key:
        groups = [(v, ok.filter(pl.col(line_key) == v) if v is not None else ok.filter(pl.col(line_key).is_null()))
                  for v in _sorted_values(ok[line_key].to_list())]
    else:
        groups = [(None, ok)]
    all_intervals = True
    for value, sub in groups:
        stats, intervals = _cell_stats(sub, key)
        all_intervals &= intervals
        x = sorted(stats)
        y = [stats[v][0] for v in x]
        err = [[stats[v][1] for v in x], [stats[v][2] for v in x]]
        label = f"{line_key}={value}" if line_key else "score"
        ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=label)
    ax.set_xlabel(key)
    ax.set_ylabel((INTERVAL_LABEL if all_intervals else STD_LABEL).format(metric_name(ok)))
    ax.set_title(f"Score vs {key}" + (f" by {line_key}" if line_key else ""))
    values = sorted(v for v in ok[key].unique().to_list() if v is not None)
    if len(values) <= 12:
        ax.set_xticks(values)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def score_by_key(runs: pl.DataFrame, key: str, bar_key: str | None, path: Path) -> Path | None:
    """Grouped bars of score (mean ± std) per value of a categorical ``key``."""
    ok = _ok(runs)
    if ok.is_empty():
        return None
    cats = _sorted_values(ok[key].to_list())
    sub_values = _sorted_values(ok[bar_key].to_list()) if bar_key else [None]
    fig = Figure(figsize=(max(6.4, 1.2 * len(cats) * max(1, len(sub_values)) ** 0.5), 4.2))
    ax = fig.add_subplot(1, 1, 1)
    width = 0.8 / len(sub_values)
    all_intervals = True
    for j, sv in enumerate(sub_values):
        sub = ok.filter(pl.col(bar_key) == sv) if bar_key else ok
        stats, intervals = _cell_stats(sub, key)
        all_intervals &= intervals
        xs = [i + (j - (len(sub_values) - 1) / 2) * width for i in range(len(cats))]
        ys = [stats[c][0] if c in stats else math.nan for c in cats]
        es = [[stats[c][1] if c in stats else 0.0 for c in cats], [stats[c][2] if c in stats else 0.0 for c in cats]]
        ax.bar(xs, ys, width=width, yerr=es, capsize=3, label=f"{bar_key}={sv}" if bar_key else "score")
    ax.set_xticks(range(len(cats)))
    ax.set_xticklabels([str(c) for c in cats], rotation=20 if len(cats) > 4 else 0, ha="right" if len(cats) > 4 else "center")
    ax.set_xlabel(key)
    ax.set_ylabel((INTERVAL_LABEL if all_intervals else STD_LABEL).format(metric_name(ok)))
    ax.set_title(f"Score by {key}" + (f" and {bar_key}" if bar_key else ""))
    ax.set_ylim(0, 1.05)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def run_label(row: dict[str, Any], keys: list[str]) -> str:
    parts = [f"{k}={row[k]}" for k in keys if k in row and row[k] is not None]
    return ", ".join(parts) if parts else str(row["run_id"])


def components_bars(runs: pl.DataFrame, keys: list[str], path: Path, max_runs: int = 40) -> Path | None:
    """Horizontal grouped bars of the score and the task's components per run (best runs first),
    labelled ``name (weight)``."""
    ok = _ok(runs)
    if ok.is_empty():
        return None
    ok = ok.sort(["score", "run_id"], descending=[True, False]).head(max_runs)
    rows = ok.to_dicts()
    labels = [run_label(r, keys) for r in rows]
    comps = [(c, name) for c, name in components(ok) if c in ok.columns]
    height = 0.8 / len(comps)
    fig = Figure(figsize=(8.0, 1.0 + 0.22 * len(rows) * len(comps) + 0.6))
    ax = fig.add_subplot(1, 1, 1)
    for j, (col, name) in enumerate(comps):
        ys = [i + (j - (len(comps) - 1) / 2) * height for i in range(len(rows))]
        xs = [r[col] if r[col] is not None else 0.0 for r in rows]
        ax.barh(ys, xs, height=height, label=name)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.02)
    ax.set_xlabel("component value (fraction)")
    ax.set_ylabel("run")
    ax.set_title(f"{metric_name(ok)} score components per run"
                 + (f" (best {max_runs})" if len(runs) > max_runs else ""))
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(fig, path)


def sweep_plots(runs: pl.DataFrame, swept: list[str], keys: list[str], out_dir: Path) -> dict[str, Path]:
    """All plots for a sweep; returns name -> path."""
    out: dict[str, Path] = {}
    for key in swept:
        others = [k for k in swept if k != key]
        line_key = others[0] if others else None
        if _is_numeric(runs, key):
            p = score_vs_key(runs, key, line_key, out_dir / f"score_vs_{_safe(key)}.png")
            if p:
                out[f"score_vs_{key}"] = p
        else:
            p = score_by_key(runs, key, line_key, out_dir / f"score_by_{_safe(key)}.png")
            if p:
                out[f"score_by_{key}"] = p
    label_keys = [k for k in keys if k in runs.columns]
    if "seed" in runs.columns and "seed" not in label_keys and runs["seed"].n_unique() > 1:
        label_keys.append("seed")
    p = components_bars(runs, label_keys, out_dir / "components.png")
    if p:
        out["components"] = p
    return out
