"""The sweep reports: leaderboard, ablation tables (with paired intervals against a baseline and
error classes) and plots, written by :func:`write_reports`."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from kohaku.report.paired import N_RESAMPLES
from kohaku.report.plots import sweep_plots
from kohaku.report.runs import collect_runs, run_metrics
from kohaku.report.selection import Selection, SelectionConfig, select_matrix
from kohaku.report.significance import SweepComparison, sweep_comparison
from kohaku.report.tables import ablation_long, ablation_pivot, leaderboard, swept_keys, to_markdown
from kohaku.tasks.score.components import known_metric, variant_metric

log = logging.getLogger(__name__)

@dataclass
class ReportConfig:
    """The ``report`` block of conf/config.yaml: how sweep reports compare points.

    baseline: the point the others are compared with: null = the first point (lowest point
    number), or its overrides, e.g. ``"retrieve.top_k=4,infer.prompt_order=context_first"``.
    resamples: paired bootstrap resamples over questions (fixed seed ``bootstrap_seed``).
    """

    baseline: str | None = None
    resamples: int = N_RESAMPLES
    bootstrap_seed: int = 0         # seed of the bootstrap resamples
    task: str | None = None           # only runs scored with this task's metric (its name); null: all


def _comparison_md(cmp: SweepComparison, swept: list[str]) -> str:
    base = ", ".join(f"{k}={v}" for k, v in cmp.baseline.items()) or "the only point"
    lines = [
        "## Against the baseline\n",
        f"Baseline: {base}. delta = point - baseline on the same {cmp.n} questions; interval: paired "
        f"bootstrap 95 % over questions ({cmp.n_resamples} resamples, each point's runs averaged per "
        "question); p: two-sided, p_holm: Holm-adjusted over the points; * = the interval excludes "
        "zero. seed sd: the spread of the point's runs (seeds), not in the interval.\n",
    ]
    rows = []
    for r in cmp.cells.iter_rows(named=True):
        row = {k: r[k] for k in swept}
        row["runs"] = r["n_runs"]
        row["score [95 %]"] = f"{r['score']:.4f} [{r['score_lo']:.4f}, {r['score_hi']:.4f}]"
        row["seed sd"] = "" if r["seed_sd"] is None else f"{r['seed_sd']:.4f}"
        if r["delta_lo"] is None:
            row.update({"delta [95 %]": "baseline", "p": "", "p_holm": "", "fixed": "", "broken": ""})
        else:
            row["delta [95 %]"] = (f"{r['delta']:+.4f} [{r['delta_lo']:+.4f}, {r['delta_hi']:+.4f}]"
                                   + (" *" if r["sig"] == "*" else ""))
            row.update(p=f"{r['p']:.4f}", p_holm=f"{r['p_holm']:.4f}", fixed=str(r["fixed"]), broken=str(r["broken"]))
        rows.append(row)
    table = pl.DataFrame(rows, schema={**{k: cmp.cells.schema[k] for k in swept}, "runs": pl.Int64,
                                       **{c: pl.String for c in ("score [95 %]", "seed sd", "delta [95 %]", "p",
                                                                 "p_holm", "fixed", "broken")}})
    lines.append(to_markdown(table))
    if cmp.classes:
        lines.append("\n## Error classes per point\n")
        known = known_metric(cmp.metric)
        where = (known.classes_source if known is not None else None) or "the task's classes"
        lines.append(f"Questions per class ({where}; mean over the point's runs).\n")
        lines.append(to_markdown(cmp.cells.select(*swept, *cmp.classes), floats=1))
    return "\n".join(lines)


@dataclass
class Reports:
    """What :func:`make_reports` wrote (name -> path), the leaderboard it wrote (runs, keys and,
    where the runs could be compared, the columns against the baseline), and that comparison."""

    paths: dict[str, Path]
    board: pl.DataFrame
    keys: list[str]
    comparison: SweepComparison | None
    selection: Selection | None = None


def write_reports(runs_dir: str | Path, out_dir: str | Path, config: ReportConfig | None = None) -> dict[str, Path]:
    """:func:`make_reports`, returning name -> path of what was written ({} without runs)."""
    return make_reports(runs_dir, out_dir, config).paths


def make_reports(runs_dir: str | Path, out_dir: str | Path, config: ReportConfig | None = None) -> Reports:
    """Scan ``runs_dir`` for run.json files and write into ``out_dir``:

    leaderboard.csv / .md (one row per run, with its difference to the baseline point, the
    interval, p, Holm p and a mark), ablation.csv (pivot: first swept key rows, second swept key
    columns; mean/std/n of the score over seeds), ablation_long.csv (the score and each of the
    task's components per cell),
    comparison.csv (per point: score and its interval, delta to the baseline with interval, p,
    Holm p, fixed, broken, error classes), ablation.md, and PNG plots (score vs each swept key
    with interval bars, components per run). Raises ValueError for a ``config.baseline`` that
    names no point.
    """
    config = config or ReportConfig()
    runs_dir, out_dir = Path(runs_dir), Path(out_dir)
    runs, keys = collect_runs(runs_dir)
    if config.task is not None and not runs.is_empty() and "metric" in runs.columns:
        names = [(json.loads(m).get("name") if m else None) for m in runs["metric"].to_list()]
        keep = [n == config.task or (n is None and config.task == variant_metric().name) for n in names]
        if not all(keep):
            log.warning("%d run(s) scored with another task than %s left out", keep.count(False), config.task)
        runs = runs.filter(pl.Series(keep))
    if runs.is_empty():
        log.warning("%s: no run.json found; no reports written", runs_dir)
        return Reports({}, runs, keys, None)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    swept = swept_keys(runs, keys)
    cmp = sweep_comparison(runs, swept, config.baseline, n_resamples=config.resamples, seed=config.bootstrap_seed)
    board = leaderboard(runs, keys)
    if cmp is not None:
        board = board.join(cmp.runs, on="run_path", how="left")
    selection = sweep_selection(cmp, config.bootstrap_seed)
    if selection is not None:
        pl.DataFrame(selection.rows()).write_csv(out_dir / "selection.csv")
        # one row: the in-sample winner, the estimate [95 %], the optimism and the pick
        pl.DataFrame([selection.summary()]).write_csv(out_dir / "selection_summary.csv")
        (out_dir / "selection.md").write_text(selection.markdown())
        paths.update(selection=out_dir / "selection.csv", selection_summary=out_dir / "selection_summary.csv",
                     selection_md=out_dir / "selection.md")
        for line in selection.lines():
            log.info("selection: %s", line)
    board.write_csv(out_dir / "leaderboard.csv")
    paths["leaderboard"] = out_dir / "leaderboard.csv"
    (out_dir / "leaderboard.md").write_text(
        "# Leaderboard\n\n" + to_markdown(board.drop([c for c in ("error", "run_path", "scores_table", "metric")
                                                      if c in board.columns]))
    )
    paths["leaderboard_md"] = out_dir / "leaderboard.md"

    long = ablation_long(runs, swept)
    if not long.is_empty():
        numeric, text = ablation_pivot(long, swept)
        long.write_csv(out_dir / "ablation_long.csv")
        numeric.write_csv(out_dir / "ablation.csv")
        metrics = run_metrics(runs)
        head = "# Ablation\n\n"
        head += f"Swept keys: {', '.join(swept) if swept else '(none)'}; cells: score mean ± std over seeds"
        head += f" (metric {'; '.join(m.describe() for m in metrics) or 'unknown'}).\n\n"
        if len(swept) >= 2:
            head += f"Rows: {', '.join([swept[0]] + swept[2:])}; columns: {swept[1]}.\n\n"
        body = to_markdown(text)
        if cmp is not None:
            cmp.cells.write_csv(out_dir / "comparison.csv")
            paths["comparison"] = out_dir / "comparison.csv"
            body += "\n" + _comparison_md(cmp, [k for k in swept if k in cmp.cells.columns])
        if selection is not None:
            body += "\n" + selection.markdown()
        body += "\n## All components\n\n" + to_markdown(long)
        (out_dir / "ablation.md").write_text(head + body)
        paths.update(
            ablation=out_dir / "ablation.csv",
            ablation_long=out_dir / "ablation_long.csv",
            ablation_md=out_dir / "ablation.md",
        )
    paths.update(sweep_plots(runs, swept, swept or [k for k in keys if k in runs.columns], out_dir))
    from kohaku.report.html import try_write, write_sweep_report  # report.html; a failure is a warning
    html = try_write(str(out_dir), write_sweep_report, out_dir, runs_dir, runs, board, swept, cmp, dict(paths))
    if html is not None:
        paths["report_html"] = html
    return Reports(paths, board, keys, cmp, selection)


def sweep_selection(cmp: SweepComparison | None, seed: int = 0) -> Selection | None:
    """Selection-aware figures over the sweep's cells (kohaku.report.selection, the task's
    metric): the in-sample best cell, the out-of-sample estimate of picking it, the optimism,
    P(best) per cell and the pick, the simplest cell (the baseline, then fewest keys changed from
    it) within the noise of the best; None without two comparable cells."""
    if cmp is None or cmp.matrix is None or len(cmp.matrix.names) < 2 or cmp.matrix.n < 2:
        return None
    keys = [k for k in cmp.baseline if k in cmp.cells.columns]
    changes = [sum(str(r[k]) != str(cmp.baseline[k]) for k in keys) for r in cmp.cells.iter_rows(named=True)]
    order = sorted(range(len(changes)), key=lambda i: (changes[i], i))
    return select_matrix(cmp.matrix, order, SelectionConfig(seed=seed))
