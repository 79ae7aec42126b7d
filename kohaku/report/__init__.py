"""Reports over run dirs: leaderboard, ablation tables (mean ± std over seeds) and plots.

``write_reports(runs_dir, out_dir)`` is what scripts/leaderboard.py and the Hydra multirun
callback (kohaku.callbacks.SweepReport) call.
"""

from __future__ import annotations

import logging
from pathlib import Path

from kohaku.report.plots import sweep_plots
from kohaku.report.runs import collect_runs
from kohaku.report.tables import ablation_long, ablation_pivot, leaderboard, swept_keys, to_markdown

log = logging.getLogger(__name__)

__all__ = ["write_reports", "collect_runs", "leaderboard", "swept_keys"]


def write_reports(runs_dir: str | Path, out_dir: str | Path) -> dict[str, Path]:
    """Scan ``runs_dir`` for run.json files and write into ``out_dir``:

    leaderboard.csv / .md (one row per run), ablation.csv (pivot: first swept key rows, second
    swept key columns; mean/std/n of the score over seeds), ablation_long.csv (every
    component per cell), ablation.md, and PNG plots (score vs each swept key, components per
    run). Returns name -> path of what was written ({} when there are no runs).
    """
    runs_dir, out_dir = Path(runs_dir), Path(out_dir)
    runs, keys = collect_runs(runs_dir)
    if runs.is_empty():
        log.warning("%s: no run.json found; no reports written", runs_dir)
        return {}
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    board = leaderboard(runs, keys)
    board.write_csv(out_dir / "leaderboard.csv")
    paths["leaderboard"] = out_dir / "leaderboard.csv"
    (out_dir / "leaderboard.md").write_text(
        "# Leaderboard\n\n" + to_markdown(board.drop([c for c in ("error", "run_path") if c in board.columns]))
    )
    paths["leaderboard_md"] = out_dir / "leaderboard.md"

    swept = swept_keys(runs, keys)
    long = ablation_long(runs, swept)
    if not long.is_empty():
        numeric, text = ablation_pivot(long, swept)
        long.write_csv(out_dir / "ablation_long.csv")
        numeric.write_csv(out_dir / "ablation.csv")
        variants = sorted({v for v in runs["variant"].to_list() if v}) if "variant" in runs.columns else []
        head = "# Ablation\n\n"
        head += f"Swept keys: {', '.join(swept) if swept else '(none)'}; cells: WattBot score mean ± std over seeds"
        head += f" (metric variant: {', '.join(variants) or 'unknown'}).\n\n"
        if len(swept) >= 2:
            head += f"Rows: {', '.join([swept[0]] + swept[2:])}; columns: {swept[1]}.\n\n"
        body = to_markdown(text) + "\n## All components\n\n" + to_markdown(long)
        (out_dir / "ablation.md").write_text(head + body)
        paths.update(
            ablation=out_dir / "ablation.csv",
            ablation_long=out_dir / "ablation_long.csv",
            ablation_md=out_dir / "ablation.md",
        )
    paths.update(sweep_plots(runs, swept, swept or [k for k in keys if k in runs.columns], out_dir))
    return paths
