"""Reports over run dirs: leaderboard, ablation tables, paired comparisons and plots.

``write_reports(runs_dir, out_dir)`` (kohaku.report.reports) is what scripts/leaderboard.py and
the Hydra multirun callback (kohaku.runner.callbacks.SweepReport) call; scripts/compare.py uses
kohaku.report.compare and kohaku.report.paired. Plotting (matplotlib) is imported only when a
report is written.
"""

from __future__ import annotations

from typing import Any

from kohaku.report.runs import collect_runs
from kohaku.report.tables import leaderboard, swept_keys

__all__ = ["write_reports", "collect_runs", "leaderboard", "swept_keys"]


def write_reports(*args: Any, **kwargs: Any) -> Any:
    """See :func:`kohaku.report.reports.write_reports`."""
    from kohaku.report.reports import write_reports as write

    return write(*args, **kwargs)
