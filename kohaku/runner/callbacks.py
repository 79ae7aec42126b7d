"""Hydra callbacks: after a multirun, write the leaderboard, ablation tables and plots; log runs
and sweeps to MLflow (``hydra/callbacks=mlflow``)."""

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
        from kohaku.core.config import build
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


class MlflowTracking(Callback):
    """Log every run, and a sweep as one parent run with a child per point, to an MLflow tracking
    store (kohaku/report/tracking.py). Enabled by ``hydra/callbacks=mlflow`` (conf/hydra/callbacks/);
    its keys are kohaku.report.tracking.TrackingConfig's. Listed before ``sweep_report``, so at the end of
    a sweep (Hydra calls end hooks in reverse) the sweep reports exist when it logs them."""

    def __init__(self, **settings: Any) -> None:
        from kohaku.core.config import build
        from kohaku.report.tracking import MlflowLogger, TrackingConfig

        self.logger = MlflowLogger(build(TrackingConfig, settings, "hydra.callbacks.mlflow"))
        self.parent_id: str | None = None  # set in the launching process; travels to the workers
        self.sweep_dir: Path | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from kohaku.report.tracking import start_sweep

        self.sweep_dir = Path(config.hydra.sweep.dir).absolute()
        overrides = [str(o) for o in OmegaConf.select(config, "hydra.overrides.task") or []]
        self.parent_id = start_sweep(self.logger, self.sweep_dir, overrides)

    def on_job_end(self, config: DictConfig, job_return: Any = None, **kwargs: Any) -> None:
        from kohaku.report.tracking import log_run_dir

        run_dir = Path(config.hydra.runtime.output_dir)
        log_run_dir(self.logger, run_dir, self.parent_id, self.sweep_dir if self.parent_id else None)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from kohaku.report.tracking import finish_sweep

        finish_sweep(self.logger, self.sweep_dir or Path(config.hydra.sweep.dir), self.parent_id)
