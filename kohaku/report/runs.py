"""Collect finished runs: each run dir's ``run.json`` (written by kohaku.runner.pipeline) as one row.

A scored run's row has its ``score`` (a run without a score stage that ran the recall stage:
its retrieval recall, :mod:`kohaku.tasks.analysis.recall`), one column per metric component (named as the component:
``value``, ``ref``, ``na`` for WattBot; ``judge``, ``numeric``, ... for other tasks), its
``variant``, its ``metric`` (compact JSON, :mod:`kohaku.tasks.score.components`: from the run's
``scores.json``, WattBot's by the variant for runs scored before tasks) and ``scores_table``,
the path of its per-question table.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import polars as pl
import yaml

from kohaku.core.errors import MetricError
from kohaku.tasks.score.components import (RESULT_FILES, Metric, metric_from_json, metric_of, read_scores_json,
                                          scores_json_of, variant_metric)

log = logging.getLogger(__name__)

SCORE_FIELDS = ("score", "value", "ref", "na")  # the default variant's; other tasks': component_columns()
INFER_FIELDS = ("model_calls", "prompt_tokens", "completion_tokens")
# Row fields a component column must not shadow (such a component gets 'component:<name>').
BASE_FIELDS = ("run_id", "run_path", "status", "error", "seconds", "score", "variant", "metric", "scores_table",
               "cache_hits", *INFER_FIELDS)


def component_column(name: str) -> str:
    """The runs table's column of a metric component."""
    return name if name not in BASE_FIELDS and not name.startswith("seconds_") else f"component:{name}"


def run_metrics(runs: pl.DataFrame) -> list[Metric]:
    """The distinct metrics of the runs (their ``metric`` column), in order of appearance."""
    if runs.is_empty() or "metric" not in runs.columns:
        return []
    out: list[Metric] = []
    for text in runs["metric"].drop_nulls().unique(maintain_order=True).to_list():
        try:
            m = metric_from_json(text, where="runs table")
        except MetricError:
            continue
        if not any(m.same_as(o) and m.name == o.name for o in out):
            out.append(m)
    return out


def component_columns(runs: pl.DataFrame) -> list[tuple[str, str]]:
    """(column, label) of every metric component in the runs table (label ``name (weight)``),
    in the metrics' order; WattBot's for a table without a ``metric`` column."""
    metrics = run_metrics(runs) or [variant_metric()]
    out: dict[str, str] = {}
    for m in metrics:
        for c in m.components:
            col = component_column(c.name)
            if col in runs.columns and col not in out:
                out[col] = c.label
    return list(out.items())


def parse_value(text: str) -> Any:
    """An override value as int / float when it is one, else the string (``null`` -> None, as
    Hydra reads it; ``none`` stays a string: it is an option name, e.g. ``caption=none``)."""
    s = str(text).strip()
    if s.lower() in ("null", "~"):
        return None
    for cast in (int, float):
        try:
            return cast(s)
        except ValueError:
            pass
    return s.strip("'\"")


def parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """``["retrieve.top_k=8", "+experiment=x", "~foo"]`` -> ``{"retrieve.top_k": 8, "experiment": "x"}``.

    Hydra's own settings (``hydra.*``) and deletions (``~key``) are skipped.
    """
    out: dict[str, Any] = {}
    for item in overrides or []:
        item = str(item).strip()
        if not item or item.startswith("~") or "=" not in item:
            continue
        key, _, value = item.partition("=")
        key = key.lstrip("+").strip()
        if not key or key.startswith("hydra.") or key == "hydra":
            continue
        out[key] = parse_value(value)
    return out


def _read_overrides(run_dir: Path, data: dict[str, Any]) -> list[str]:
    if data.get("overrides"):
        return [str(x) for x in data["overrides"]]
    file = run_dir / ".hydra" / "overrides.yaml"
    if file.is_file():
        try:
            return [str(x) for x in (yaml.safe_load(file.read_text()) or [])]
        except Exception as exc:  # noqa: BLE001 - a bad file only loses the overrides
            log.warning("%s: cannot read (%s); run listed without overrides", file, exc)
    return []


def load_run(path: Path, root: Path) -> tuple[dict[str, Any], list[str]] | None:
    """(row, override key order) for one run.json; None (with a warning) when unreadable."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        log.warning("%s: cannot read run record (%s); skipped", path, exc)
        return None
    if not isinstance(data, dict):
        log.warning("%s: not a run record; skipped", path)
        return None
    run_dir = path.parent
    overrides = parse_overrides(_read_overrides(run_dir, data))
    stages = data.get("stages") or {}
    try:
        rel = str(run_dir.relative_to(root))
    except ValueError:
        rel = str(run_dir)
    row: dict[str, Any] = {
        "run_id": str(data.get("run_id") or run_dir.name),
        "run_path": rel if rel != "." else run_dir.name,
        "status": str(data.get("status") or "unknown"),
        "error": data.get("error"),
        "seconds": _num(data.get("seconds")),
    }
    # a run without a score stage that ran the recall stage (stages=[recall], a retrieval
    # sweep) is read through the recall stage's table and metric (kohaku.tasks.analysis.recall)
    scorer = ("recall" if not (stages.get("score") or {}).get("summary")
              and (stages.get("recall") or {}).get("summary") else "score")
    score_stage = stages.get(scorer) or {}
    score = score_stage.get("summary") or {}
    table = _scores_table(run_dir, score_stage, RESULT_FILES[scorer][0])
    json_path = run_dir / RESULT_FILES[scorer][1]
    if not json_path.is_file() and table is not None:
        json_path = scores_json_of(table)
    scores = read_scores_json(json_path) if score else {}
    metric: Metric | None = None
    if score:
        try:
            metric = metric_of(scores, score.get("variant") if isinstance(score.get("variant"), str) else None,
                               str(json_path))
        except MetricError as exc:
            log.warning("%s: %s; its components are not listed", run_dir, exc)
    row["score"] = _num(score.get("score"))
    for c in metric.components if metric else ():
        row[component_column(c.name)] = _component(c.name, score, scores)
    row["variant"] = score.get("variant") if score.get("variant") is not None else scores.get("variant")
    if metric is not None:
        row["metric"] = metric.dumps()
    row["scores_table"] = table
    infer = (stages.get("infer") or {}).get("summary") or {}
    for f in INFER_FIELDS:
        row[f] = _num(infer.get(f))
    row["cache_hits"] = sum(1 for s in stages.values() if isinstance(s, dict) and s.get("cache_hit"))
    for name, s in stages.items():
        if isinstance(s, dict):
            row[f"seconds_{name}"] = _num(s.get("seconds"))
    keys = []
    for k, v in overrides.items():
        column = k if k not in row else f"cfg:{k}"  # never shadow a metric column
        row[column] = v
        keys.append(column)
    return row, keys


def _scores_table(run_dir: Path, score_stage: dict[str, Any], name: str = "scores.parquet") -> str | None:
    """The run's per-question score table: ``scores.parquet`` (the recall stage's
    ``recall.parquet``) in the run dir (copied there by the stage), else in the stage's artifact
    named by run.json (while the cache holds it)."""
    candidates = [run_dir / name]
    if score_stage.get("path"):
        artifact = Path(str(score_stage["path"]))
        candidates.append(artifact / name)
        if not artifact.is_absolute():
            candidates.append(run_dir / artifact / name)
    for path in candidates:
        if path.is_file():
            return str(path)
    return None


def _component(name: str, summary: dict[str, Any], scores: dict[str, Any]) -> float | None:
    """A component's value: the score stage's summary in run.json (``name``, or its
    ``components``), else scores.json's ``components``."""
    for source in (summary, summary.get("components"), scores.get("components")):
        if isinstance(source, dict) and _num(source.get(name)) is not None:
            return _num(source.get(name))
    return None


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or x is None:
        return None
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def collect_runs(runs_dir: str | Path) -> tuple[pl.DataFrame, list[str]]:
    """All runs under ``runs_dir`` (recursive) and the override keys in first-seen order.

    Override columns are named by their key (``cfg:<key>`` if it would shadow a metric column);
    Int64 / Float64 when every value is a number, else strings.
    """
    root = Path(runs_dir)
    rows: list[dict[str, Any]] = []
    keys: list[str] = []
    for path in sorted(root.rglob("run.json")):
        if "cache" in path.relative_to(root).parts[:-1]:
            continue
        loaded = load_run(path, root)
        if loaded is None:
            continue
        row, order = loaded
        rows.append(row)
        keys.extend(k for k in order if k not in keys)
    if not rows:
        return pl.DataFrame(), keys
    columns: list[str] = []
    for r in rows:
        columns.extend(c for c in r if c not in columns)
    data: dict[str, list[Any]] = {c: [r.get(c) for r in rows] for c in columns}
    series = []
    for c, values in data.items():
        present = [v for v in values if v is not None]
        if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
            series.append(pl.Series(c, values, dtype=pl.Int64))
        elif present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
            series.append(pl.Series(c, [None if v is None else float(v) for v in values], dtype=pl.Float64))
        else:
            series.append(pl.Series(c, [None if v is None else str(v) for v in values], dtype=pl.String))
    return pl.DataFrame(series), keys
