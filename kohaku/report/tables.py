"""Leaderboard and ablation tables over collected runs (see kohaku.report.runs)."""

from __future__ import annotations

import json

import math
from pathlib import Path
from typing import Any

import polars as pl

from kohaku.report.runs import INFER_FIELDS, component_columns

SEED_KEY = "seed"


def print_and_save(table: pl.DataFrame, path: str | Path, width: int = 200) -> Path:
    """Print a benchmark/evaluation table in full (up to 100 rows, 20 columns, ``width``
    characters) and write it as CSV to ``path`` (folders created); returns the path."""
    path = Path(path)
    with pl.Config(tbl_rows=100, tbl_cols=20, tbl_width_chars=width):
        print(table)
    path.parent.mkdir(parents=True, exist_ok=True)
    table.write_csv(path)
    print(f"written {path}")
    return path


def score_fields(runs: pl.DataFrame) -> list[str]:
    """``score`` and the task's component columns (WattBot: value, ref, na), as the runs have them."""
    return [c for c in ("score", *(col for col, _ in component_columns(runs))) if c in runs.columns]


def leaderboard(runs: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """One row per run: id, status, overridden keys, score and its components (the task's),
    seconds, calls, tokens; best score first (failed or unscored runs last)."""
    if runs.is_empty():
        return runs
    seconds = sorted(c for c in runs.columns if c.startswith("seconds_"))
    order = (
        ["run_id", "status"]
        + [k for k in keys if k in runs.columns]
        + score_fields(runs)
        + [c for c in ("variant", "seconds") if c in runs.columns]
        + seconds
        + [c for c in (*INFER_FIELDS, "cache_hits", "run_path", "error") if c in runs.columns]
    )
    order += [c for c in runs.columns if c not in order]
    return runs.select(order).sort(["score", "run_id"], descending=[True, False], nulls_last=True)


def swept_keys(runs: pl.DataFrame, keys: list[str]) -> list[str]:
    """Override keys (other than ``seed``) that take more than one value across the runs."""
    out = []
    for k in keys:
        if k == SEED_KEY or k not in runs.columns:
            continue
        if runs[k].n_unique() > 1:
            out.append(k)
    return out


def _sorted_values(values: list[Any]) -> list[Any]:
    present = [v for v in dict.fromkeys(values) if v is not None]
    try:
        present.sort()
    except TypeError:
        present.sort(key=str)
    return present + ([None] if None in values else [])


def ablation_long(runs: pl.DataFrame, swept: list[str]) -> pl.DataFrame:
    """Mean, std (over seeds and any unswept repeats) and n of the score and each of the task's
    components per cell of the swept keys; scored runs with status ok only."""
    ok = runs.filter((pl.col("status") == "ok") & pl.col("score").is_not_null()) if not runs.is_empty() else runs
    if ok.is_empty():
        return pl.DataFrame()
    fields = score_fields(ok)
    aggs: list[pl.Expr] = [pl.len().alias("n")]
    for f in fields:
        aggs += [pl.col(f).mean().alias(f"{f}_mean"), pl.col(f).std(ddof=1).alias(f"{f}_std")]
    if swept:
        table = ok.group_by(swept, maintain_order=True).agg(aggs)
        return table.sort(swept, nulls_last=True)
    return ok.select(aggs)


def _cell(mean: float | None, std: float | None, n: int) -> str:
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "-"
    if n > 1 and std is not None and not math.isnan(std):
        return f"{mean:.4f} ± {std:.4f} (n={n})"
    return f"{mean:.4f} (n={n})"


def ablation_pivot(long: pl.DataFrame, swept: list[str], field: str = "score") -> tuple[pl.DataFrame, pl.DataFrame]:
    """(numeric pivot, text pivot): rows = first swept key (and keys 3+), columns = the second
    swept key's values. The numeric one has ``<key>=<v> mean|std|n`` columns; the text one
    ``mean ± std (n=..)`` cells."""
    if long.is_empty():
        return pl.DataFrame(), pl.DataFrame()
    if len(swept) < 2:
        row_keys = swept
        numeric = long.select(*row_keys, pl.col(f"{field}_mean").alias("mean"),
                              pl.col(f"{field}_std").alias("std"), "n")
        text = long.select(
            *row_keys,
            pl.struct(f"{field}_mean", f"{field}_std", "n")
            .map_elements(lambda s: _cell(s[f"{field}_mean"], s[f"{field}_std"], s["n"]), return_dtype=pl.String)
            .alias(field),
        )
        return numeric, text
    col_key = swept[1]
    row_keys = [swept[0]] + swept[2:]
    col_values = _sorted_values(long[col_key].to_list())
    row_tuples = list(dict.fromkeys(tuple(r[k] for k in row_keys) for r in long.select(row_keys).to_dicts()))
    cells = {
        (tuple(r[k] for k in row_keys), r[col_key]): r for r in long.to_dicts()
    }
    numeric_rows, text_rows = [], []
    for rt in row_tuples:
        nrow: dict[str, Any] = dict(zip(row_keys, rt))
        trow: dict[str, Any] = dict(zip(row_keys, rt))
        for v in col_values:
            c = cells.get((rt, v))
            name = f"{col_key}={v}"
            nrow[f"{name} mean"] = c[f"{field}_mean"] if c else None
            nrow[f"{name} std"] = c[f"{field}_std"] if c else None
            nrow[f"{name} n"] = c["n"] if c else 0
            trow[name] = _cell(c[f"{field}_mean"], c[f"{field}_std"], c["n"]) if c else "-"
        numeric_rows.append(nrow)
        text_rows.append(trow)
    key_schema = {k: long.schema[k] for k in row_keys}
    nschema: dict[str, Any] = dict(key_schema)
    tschema: dict[str, Any] = dict(key_schema)
    for v in col_values:
        name = f"{col_key}={v}"
        nschema.update({f"{name} mean": pl.Float64, f"{name} std": pl.Float64, f"{name} n": pl.Int64})
        tschema[name] = pl.String
    return pl.DataFrame(numeric_rows, schema=nschema), pl.DataFrame(text_rows, schema=tschema)


def to_markdown(df: pl.DataFrame, floats: int = 4) -> str:
    """A GitHub-flavoured markdown table (no extra dependency)."""
    if df.is_empty() and not df.columns:
        return "(no rows)\n"

    def fmt(v: Any) -> str:
        if v is None:
            return ""
        if isinstance(v, float):
            return "" if math.isnan(v) else f"{v:.{floats}f}"
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(df.columns) + " |", "|" + "|".join("---" for _ in df.columns) + "|"]
    for row in df.iter_rows():
        lines.append("| " + " | ".join(fmt(v) for v in row) + " |")
    return "\n".join(lines) + "\n"


def score_table(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """One row per scored submission (``scripts/score.py SOL SUB SUB ...``): ``submission``,
    ``score``, a column per component (``components``: name -> value, None where a submission
    lacks it), ``n``, ``n_missing``, ``duplicates`` (ids answered more than once) and
    ``unknown_ids`` (ids that are no question, named as a JSON list; both null where the scorer does not
    tell), and ``error`` (a file that could not be scored), the best score first, the unscored
    last."""
    names = list(dict.fromkeys(k for r in rows for k in (r.get("components") or {})))

    def unknown(r: dict[str, Any]) -> str | None:
        ids = r.get("unknown_ids")
        return None if ids is None else json.dumps(ids, ensure_ascii=False)   # ids may hold spaces

    out = [{"submission": str(r["submission"]), "score": r.get("score"),
            **{k: (r.get("components") or {}).get(k) for k in names},
            "n": r.get("n"), "n_missing": r.get("n_missing"), "duplicates": r.get("duplicates"),
            "unknown_ids": unknown(r), "error": r.get("error") or ""} for r in rows]
    schema: dict[str, Any] = {"submission": pl.String, "score": pl.Float64, **{k: pl.Float64 for k in names},
                              "n": pl.Int64, "n_missing": pl.Int64, "duplicates": pl.Int64,
                              "unknown_ids": pl.String, "error": pl.String}
    table = pl.DataFrame(out, schema=schema)
    return table.sort("score", descending=True, nulls_last=True, maintain_order=True)
