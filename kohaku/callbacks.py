"""Hydra callbacks: after a multirun, write the leaderboard, ablation tables and plots."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger("kohaku.callbacks")


class SweepReport(Callback):
    """``on_multirun_end``: scan the sweep dir's run.json files and write the reports into it
    (compared with the baseline point that ``report.baseline`` names, else the first point)."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from kohaku.config import build
        from kohaku.report.reports import ReportConfig, write_reports

        sweep_dir = Path(config.hydra.sweep.dir)
        try:
            settings = OmegaConf.to_container(OmegaConf.select(config, "report") or {}, resolve=True)
            paths = write_reports(sweep_dir, sweep_dir, build(ReportConfig, settings or {}, "report"))
        except Exception:  # a report failure must not hide the sweep's own results
            log.exception("could not write the sweep reports into %s", sweep_dir)
            return
        for name, path in paths.items():
            log.info("sweep report %s: %s", name, path)
