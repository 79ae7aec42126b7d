"""Experiment tracking: finished runs and sweeps logged to an MLflow tracking store.

What is logged is read from the run dirs (library code; the Hydra callback
``kohaku.runner.callbacks.MlflowTracking`` only says when):

- a run (a single run, or a sweep point as a child of its sweep's run): its overrides and its
  composed config (``run.json``'s, flattened to ``a.b.c`` keys) as params; as metrics the row the
  leaderboard has for it (:func:`kohaku.report.runs.load_run`: score, the task's components,
  seconds, ``seconds_<stage>``, model calls, tokens, cache hits), the score's 95 % interval
  (``score_lo``, ``score_hi``: bootstrap over the run's questions, ``report.resamples`` and
  ``report.bootstrap_seed`` of its config) and the error-class counts of its scores.json
  (``errors.<class>``); ``submission.csv``, ``scores.json`` and ``report.html`` as artifacts;
- a sweep: one parent run (the sweep's overrides as params); when the sweep ends, each child
  gets its leaderboard row's comparison with the baseline (``delta``, ``delta_lo``, ``delta_hi``,
  ``p``, ``p_holm``), the parent the best score and the sweep reports (leaderboard.csv, .md,
  ablation.md, comparison.csv, report.html) as artifacts. A point whose child is missing then
  (a worker that could not log) is logged there.

The store: ``TrackingConfig.tracking_uri``, else the ``MLFLOW_TRACKING_URI`` environment
variable, else a local SQLite store ``sqlite:///<dir>/mlflow.db`` with artifacts in
``<dir>/artifacts`` (``dir``: ``outputs/mlflow``), which ``mlflow ui --backend-store-uri
sqlite:///outputs/mlflow/mlflow.db`` browses.

Logging never fails a run: the first error (an unreachable server, a missing ``mlflow``) is one
warning, and the logger then stays quiet. HTTP requests get ``http_timeout_s`` and
``http_retries`` (MLflow's own defaults retry for minutes). mlflow (the optional extra
``kohaku[mlflow]``) is imported only inside the functions that log: importing kohaku does not
import it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import polars as pl

from kohaku.core.config import environment
from kohaku.report.runs import load_run, parse_overrides

log = logging.getLogger(__name__)

# MLflow's limits (mlflow.utils.validation): a longer param value is cut with TRUNCATED at its end.
MAX_PARAM_LENGTH = 6000
MAX_KEY_LENGTH = 250
MAX_TAG_LENGTH = 8000
PARAMS_PER_BATCH = 100
METRICS_PER_BATCH = 1000
TRUNCATED = "...[truncated]"
RUN_ARTIFACTS = ("submission.csv", "scores.json", "report.html")
SWEEP_ARTIFACTS = ("leaderboard.csv", "leaderboard.md", "ablation.md", "comparison.csv", "report.html")
COMPARISON_COLUMNS = ("delta", "delta_lo", "delta_hi", "p", "p_holm")
# Leaderboard columns that are neither metrics nor params (tags or paths).
TEXT_COLUMNS = ("run_id", "status", "error", "variant", "metric", "scores_table", "run_path", "sig")
PARENT_TAG = "mlflow.parentRunId"
RUN_DIR_TAG = "kohaku.run_dir"
RUN_PATH_TAG = "kohaku.run_path"
KIND_TAG = "kohaku.kind"


@dataclass
class TrackingConfig:
    """Where and how runs are logged (the keys of ``hydra.callbacks.mlflow``).

    tracking_uri: any MLflow tracking URI (``http://host:5000``, ``sqlite:///path.db``,
    ``databricks``); null: ``MLFLOW_TRACKING_URI`` if set, else the local store in ``dir``.
    dir: the local store's folder (``mlflow.db`` and ``artifacts/``), relative to the working dir.
    experiment: the MLflow experiment the runs go to (created when missing).
    http_timeout_s, http_retries: per request, for a tracking server (MLflow's defaults: 120 s,
    7 retries with backoff).
    """

    tracking_uri: str | None = None
    dir: str = "outputs/mlflow"
    experiment: str = "kohaku"
    http_timeout_s: int = 10        # seconds per request to a tracking server
    http_retries: int = 0           # retries per request to a tracking server

    def validate(self) -> None:
        if not str(self.experiment).strip():
            raise ValueError("experiment must be a non-empty name")
        if int(self.http_timeout_s) < 1:
            raise ValueError(f"http_timeout_s must be >= 1, got {self.http_timeout_s}")
        if int(self.http_retries) < 0:
            raise ValueError(f"http_retries must be >= 0, got {self.http_retries}")

    @property
    def local(self) -> bool:
        """True when the runs go to the local SQLite store in ``dir``."""
        return not self.tracking_uri and not os.environ.get("MLFLOW_TRACKING_URI")

    def store_uri(self) -> str:
        if self.tracking_uri:
            return str(self.tracking_uri)
        if os.environ.get("MLFLOW_TRACKING_URI"):
            return os.environ["MLFLOW_TRACKING_URI"]
        return f"sqlite:///{self.db_path()}"

    def db_path(self) -> Path:
        return Path(self.dir).absolute() / "mlflow.db"

    def artifact_location(self) -> str | None:
        """The local store's artifact folder (None: the tracking server decides)."""
        return (Path(self.dir).absolute() / "artifacts").as_uri() if self.local else None


@dataclass
class TrackedRun:
    """One MLflow run's content, read from a run dir or a sweep dir."""

    name: str
    params: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    artifacts: list[Path] = field(default_factory=list)
    failed: bool = False


# --- what is logged (no mlflow) --------------------------------------------------------------


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, ending with TRUNCATED when cut."""
    return text if len(text) <= limit else text[: limit - len(TRUNCATED)] + TRUNCATED


def entity_key(name: str) -> str:
    """A valid MLflow param / metric key: characters outside ``[/\\w.\\- ]`` become ``_`` (colons
    too: Windows stores refuse them), at most MAX_KEY_LENGTH characters."""
    key = re.sub(r"[^/\w.\- ]", "_", str(name)).strip("/") or "_"
    return clip(key, MAX_KEY_LENGTH)


def param_text(value: Any) -> str:
    """A param value as text: ``null``/``true``/JSON for lists and mappings, else ``str``;
    at most MAX_PARAM_LENGTH characters."""
    if value is None or isinstance(value, (bool, list, tuple, dict)):
        text = json.dumps(value, default=str, ensure_ascii=False)
    else:
        text = str(value)
    return clip(text, MAX_PARAM_LENGTH)


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one ``{"a.b.c": value}`` mapping (lists stay values)."""
    if not isinstance(data, dict):
        return {prefix: data} if prefix else {}
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            out.update(flatten(value, name))
        else:
            out[name] = value
    return out


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def score_interval(row: dict[str, Any], config: dict[str, Any]) -> tuple[float, float] | None:
    """The 95 % percentile-bootstrap interval of a run's score over its questions (None when the
    run has no per-question table)."""
    if row.get("score") is None or not row.get("scores_table"):
        return None
    from kohaku.report.paired import N_RESAMPLES, SEED
    from kohaku.report.significance import group_interval

    report = config.get("report") if isinstance(config.get("report"), dict) else {}
    resamples = int(report.get("resamples") or N_RESAMPLES)
    seed = int(report.get("bootstrap_seed") if report.get("bootstrap_seed") is not None else SEED)
    table = pl.DataFrame([{"run_id": row["run_id"], "run_path": row["run_path"], "status": row["status"],
                           "score": row["score"], "scores_table": row["scores_table"],
                           "variant": row.get("variant"), "metric": row.get("metric")}])
    try:
        return group_interval(table, n_resamples=resamples, seed=seed)
    except Exception as exc:  # noqa: BLE001 - an interval is extra; the run is still logged
        log.debug("%s: no score interval (%s)", row["run_path"], exc)
        return None


def error_counts(scores: dict[str, Any]) -> dict[str, float]:
    """``errors.<class>``: the question count of each error class in scores.json."""
    errors = scores.get("errors") if isinstance(scores.get("errors"), dict) else {}
    counts = errors.get("counts") if isinstance(errors.get("counts"), dict) else {}
    out = {f"errors.{k}": _number(v) for k, v in counts.items()}
    if _number(errors.get("n_errors")) is not None:
        out["errors.n_errors"] = _number(errors.get("n_errors"))
    return {k: v for k, v in out.items() if v is not None}


def run_record(run_dir: str | Path, root: str | Path | None = None) -> TrackedRun | None:
    """What is logged for the finished run in ``run_dir`` (None without a readable run.json).

    ``root``: the sweep dir, so that the ``kohaku.run_path`` tag is the leaderboard's
    ``run_path`` (the run dir's name otherwise)."""
    run_dir = Path(run_dir).absolute()
    path = run_dir / "run.json"
    if not path.is_file():
        return None
    loaded = load_run(path, Path(root).absolute() if root is not None else run_dir.parent)
    if loaded is None:
        return None
    row, keys = loaded
    data = _read_json(path)
    config = data.get("config") if isinstance(data.get("config"), dict) else {}
    overrides = [str(o) for o in data.get("overrides") or []]
    params = {entity_key(k): param_text(v) for k, v in flatten(config).items()}
    for key, value in parse_overrides(overrides).items():
        params[entity_key(key)] = param_text(value)
    for column in keys:  # the leaderboard's override columns (``cfg:<key>`` where one shadows a metric)
        params[entity_key(column)] = param_text(row[column])
    params["overrides"] = param_text(" ".join(overrides))
    metrics: dict[str, float] = {}
    for column, value in row.items():
        if column in keys or column in TEXT_COLUMNS:
            continue
        x = _number(value)
        if x is not None:
            metrics[entity_key(column)] = x
    interval = score_interval(row, config)
    if interval is not None:
        metrics["score_lo"], metrics["score_hi"] = interval
    scores_json = run_dir / "scores.json"
    metrics.update(error_counts(_read_json(scores_json)))
    tags = {RUN_DIR_TAG: str(run_dir), RUN_PATH_TAG: str(row["run_path"]), KIND_TAG: "run",
            "kohaku.run_id": str(row["run_id"]), "kohaku.status": str(row["status"])}
    for column in ("variant", "error"):
        if row.get(column) is not None:
            tags[f"kohaku.{column}"] = clip(str(row[column]), MAX_TAG_LENGTH)
    artifacts = [run_dir / name for name in RUN_ARTIFACTS if (run_dir / name).is_file()]
    return TrackedRun(name=str(row["run_path"]) if root is not None else str(row["run_id"]), params=params,
                      metrics=metrics, tags=tags, artifacts=artifacts, failed=row["status"] != "ok")


def sweep_record(sweep_dir: str | Path, overrides: list[str]) -> TrackedRun:
    """The parent run of a sweep: its overrides (the sweep's, e.g. ``retrieve.top_k=2,4``)."""
    sweep_dir = Path(sweep_dir)
    params = {entity_key(k): param_text(v) for k, v in parse_overrides(overrides).items()}
    params["overrides"] = param_text(" ".join(str(o) for o in overrides))
    return TrackedRun(name=f"sweep {sweep_dir.name}", params=params,
                      tags={RUN_DIR_TAG: str(sweep_dir.absolute()), KIND_TAG: "sweep"})


def sweep_results(sweep_dir: str | Path) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """(parent metrics, run_path -> comparison metrics) from the sweep's leaderboard.csv
    (({}, {}) without one): the parent gets ``best_score``, ``points``, ``points_ok``."""
    board_path = Path(sweep_dir) / "leaderboard.csv"
    if not board_path.is_file():
        return {}, {}
    try:
        board = pl.read_csv(board_path, infer_schema_length=None)
    except Exception as exc:  # noqa: BLE001 - a broken leaderboard loses the sweep's summary only
        log.warning("%s: cannot read (%s); the sweep's run gets no leaderboard metrics", board_path, exc)
        return {}, {}
    parent: dict[str, float] = {"points": float(board.height)}
    if "status" in board.columns:
        parent["points_ok"] = float(board.filter(pl.col("status") == "ok").height)
    if "score" in board.columns and board["score"].drop_nulls().len():
        parent["best_score"] = float(board["score"].drop_nulls().cast(pl.Float64).max())
    children: dict[str, dict[str, float]] = {}
    if "run_path" in board.columns:
        for row in board.iter_rows(named=True):
            values = {c: _number(row.get(c)) for c in COMPARISON_COLUMNS}
            children[str(row["run_path"])] = {c: v for c, v in values.items() if v is not None}
    return parent, children


def sweep_run_dirs(sweep_dir: str | Path) -> list[Path]:
    """The run dirs of a sweep (those with a run.json; the artifact cache excluded)."""
    root = Path(sweep_dir)
    return sorted(p.parent for p in root.rglob("run.json")
                  if "cache" not in p.relative_to(root).parts[:-1])


# --- the MLflow side -------------------------------------------------------------------------


class MlflowLogger:
    """Logs TrackedRuns with MLflow's client. Every public method catches its errors: the first
    one is a warning, after which the logger is off (``failed``) and does nothing. Holds no
    client (one is made per call), so it can travel to launcher workers."""

    def __init__(self, config: TrackingConfig) -> None:
        self.config = config
        self.failed = False

    @contextlib.contextmanager
    def _session(self) -> Iterator[Any]:
        """An MlflowClient, with short HTTP timeouts and MLflow's warnings quiet."""
        names = {"MLFLOW_HTTP_REQUEST_TIMEOUT": str(int(self.config.http_timeout_s)),
                 "MLFLOW_HTTP_REQUEST_MAX_RETRIES": str(int(self.config.http_retries))}
        with environment(names), warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", FutureWarning)
            from mlflow.tracking import MlflowClient

            if self.config.local:
                self.config.db_path().parent.mkdir(parents=True, exist_ok=True)
            yield MlflowClient(tracking_uri=self.config.store_uri())

    def _fail(self, what: str, exc: BaseException) -> None:
        if not self.failed:
            reason = str(exc).splitlines()[0][:300] if str(exc) else ""
            if isinstance(exc, ImportError):
                reason += " (install the extra: pip install -e '.[mlflow]')"
            log.warning("MLflow tracking off (%s at %s: %s: %s); the run's outputs are not affected",
                        what, self.config.store_uri(), type(exc).__name__, reason)
        self.failed = True

    def _experiment_id(self, client: Any) -> str:
        experiment = client.get_experiment_by_name(self.config.experiment)
        if experiment is not None:
            return experiment.experiment_id
        try:
            return client.create_experiment(self.config.experiment,
                                            artifact_location=self.config.artifact_location())
        except Exception:  # another process created it meanwhile
            experiment = client.get_experiment_by_name(self.config.experiment)
            if experiment is None:
                raise
            return experiment.experiment_id

    def _log(self, client: Any, run_id: str, params: dict[str, str], metrics: dict[str, float],
             tags: dict[str, str]) -> None:
        from mlflow.entities import Metric, Param, RunTag

        now = _now_ms()
        p = [Param(k, v) for k, v in params.items()]
        t = [RunTag(k, clip(v, MAX_TAG_LENGTH)) for k, v in tags.items()]
        m = [Metric(k, v, now, 0) for k, v in metrics.items()]
        for i in range(0, len(p), PARAMS_PER_BATCH):
            client.log_batch(run_id, params=p[i: i + PARAMS_PER_BATCH])
        for i in range(0, len(t), PARAMS_PER_BATCH):
            client.log_batch(run_id, tags=t[i: i + PARAMS_PER_BATCH])
        for i in range(0, len(m), METRICS_PER_BATCH):
            client.log_batch(run_id, metrics=m[i: i + METRICS_PER_BATCH])

    def start(self, record: TrackedRun, parent_id: str | None = None) -> str | None:
        """Create a run for ``record`` (a child of ``parent_id`` if given), log its params,
        metrics, tags and artifacts; the run stays open. Its id, or None after an error."""
        if self.failed:
            return None
        try:
            with self._session() as client:
                tags = dict(record.tags)
                if parent_id:
                    tags[PARENT_TAG] = parent_id
                run = client.create_run(self._experiment_id(client), run_name=record.name,
                                        tags={k: clip(v, MAX_TAG_LENGTH) for k, v in tags.items()})
                run_id = run.info.run_id
                self._log(client, run_id, record.params, record.metrics, {})
                for path in record.artifacts:
                    if path.is_file():
                        client.log_artifact(run_id, str(path))
                return run_id
        except Exception as exc:  # noqa: BLE001 - tracking never fails a run
            self._fail("cannot log run " + record.name, exc)
            return None

    def log_run(self, record: TrackedRun, parent_id: str | None = None) -> str | None:
        """Log ``record`` as a finished run (FAILED when the kohaku run failed); its id or None."""
        run_id = self.start(record, parent_id)
        if run_id is not None:
            self.end(run_id, failed=record.failed)
        return run_id

    def end(self, run_id: str, failed: bool = False) -> None:
        if self.failed:
            return
        try:
            with self._session() as client:
                client.set_terminated(run_id, status="FAILED" if failed else "FINISHED")
        except Exception as exc:  # noqa: BLE001
            self._fail("cannot end run " + run_id, exc)

    def children(self, parent_id: str) -> dict[str, str]:
        """run_path -> run id of the parent's child runs."""
        if self.failed:
            return {}
        try:
            with self._session() as client:
                runs = client.search_runs([self._experiment_id(client)],
                                          filter_string=f"tags.`{PARENT_TAG}` = '{parent_id}'",
                                          max_results=50000)
                return {r.data.tags.get(RUN_PATH_TAG, r.info.run_id): r.info.run_id for r in runs}
        except Exception as exc:  # noqa: BLE001
            self._fail("cannot list the runs of sweep " + parent_id, exc)
            return {}

    def add(self, run_id: str, metrics: dict[str, float] | None = None, artifacts: list[Path] | None = None) -> None:
        """Log more metrics and artifacts to an existing run."""
        if self.failed:
            return
        try:
            with self._session() as client:
                if metrics:
                    self._log(client, run_id, {}, metrics, {})
                for path in artifacts or []:
                    if path.is_file():
                        client.log_artifact(run_id, str(path))
        except Exception as exc:  # noqa: BLE001
            self._fail("cannot log to run " + run_id, exc)


def _now_ms() -> int:
    return int(time.time() * 1000)


# --- what the callback calls -----------------------------------------------------------------


def log_run_dir(logger: MlflowLogger, run_dir: str | Path, parent_id: str | None = None,
                root: str | Path | None = None) -> str | None:
    """Log the finished run in ``run_dir`` (a child of ``parent_id`` in sweep dir ``root``)."""
    if logger.failed:
        return None
    try:
        record = run_record(run_dir, root)
    except Exception as exc:  # noqa: BLE001 - reading is guarded like logging
        logger._fail(f"cannot read run {run_dir}", exc)
        return None
    if record is None:
        log.info("%s: no run.json; nothing logged to MLflow", run_dir)
        return None
    run_id = logger.log_run(record, parent_id)
    if run_id is not None:
        log.info("MLflow: run %s logged to %s (experiment %s)", run_id, logger.config.store_uri(),
                 logger.config.experiment)
    return run_id


def start_sweep(logger: MlflowLogger, sweep_dir: str | Path, overrides: list[str]) -> str | None:
    """Open the sweep's parent run; its id (None after an error)."""
    return logger.start(sweep_record(sweep_dir, overrides))


def finish_sweep(logger: MlflowLogger, sweep_dir: str | Path, parent_id: str | None) -> None:
    """Log what the sweep's reports say (leaderboard.csv) into the parent and its children,
    log the points no child has yet, attach the reports, and end the parent."""
    if logger.failed or not parent_id:
        return
    sweep_dir = Path(sweep_dir).absolute()
    try:
        parent_metrics, per_run = sweep_results(sweep_dir)
    except Exception as exc:  # noqa: BLE001
        logger._fail(f"cannot read the sweep reports in {sweep_dir}", exc)
        return
    logged = logger.children(parent_id)
    for run_dir in sweep_run_dirs(sweep_dir):
        path = str(run_dir.relative_to(sweep_dir))
        if path not in logged and not logger.failed:
            run_id = log_run_dir(logger, run_dir, parent_id, sweep_dir)
            if run_id is not None:
                logged[path] = run_id
    for path, metrics in per_run.items():
        if path in logged and metrics:
            logger.add(logged[path], metrics)
    logger.add(parent_id, parent_metrics, [sweep_dir / name for name in SWEEP_ARTIFACTS])
    failed = parent_metrics.get("points_ok", parent_metrics.get("points", 0.0)) < parent_metrics.get("points", 0.0)
    logger.end(parent_id, failed=failed)
    if not logger.failed:
        log.info("MLflow: sweep %s (%d runs) logged to %s", parent_id, len(logged), logger.config.store_uri())
