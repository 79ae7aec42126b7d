"""The MLflow callback (``hydra/callbacks=mlflow``, kohaku/report/tracking.py) on data/sample with the
fake LLM and the hashing encoder: a 4-point sweep is one parent run and four child runs whose
params and metrics are the leaderboard's, read back with MLflow's own client; a tracking server
that cannot be reached (a closed port on 127.0.0.1; no server is started) is one warning and
changes no output of the run."""

from __future__ import annotations

import importlib.util
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from conftest import REPO
from kohaku.report.tracking import (PARENT_TAG, RUN_PATH_TAG, TRUNCATED, MlflowLogger, TrackedRun, TrackingConfig, clip,
                             entity_key, flatten, param_text)
from test_sweep import FAKE, SWEEP, free_port, run_sweep

# mlflow is imported by the tests that use it, not at collection (about a second).
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning:mlflow"),
              pytest.mark.skipif(importlib.util.find_spec("mlflow") is None,
                                 reason="the mlflow extra is not installed (pip install -e '.[mlflow]'; dev has it)")]

TRACK = ["hydra/callbacks=mlflow"]
RUN_TIMEOUT_S = 120
POINT0 = ["retrieve.top_k=2", "infer.prompt_order=context_first"]  # the sweep's first point


@pytest.fixture(scope="module")
def tracked_sweep(tmp_path_factory) -> tuple[Path, Path]:
    """(sweep dir, MLflow store dir) of a 2x2 sweep with the callback (Hydra's basic launcher)."""
    tmp = tmp_path_factory.mktemp("tracked")
    store = tmp / "mlflow"
    rc, log = run_sweep(tmp, [*TRACK, f"hydra.callbacks.mlflow.dir={store}", *SWEEP])
    assert rc == 0, log[-3000:]
    return tmp / "sweep", store


def client_for(store: Path) -> tuple[Any, str]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{store / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("kohaku")
    assert experiment is not None
    return client, experiment.experiment_id


def run_single(runs: dict[Path, list[str]], cache: Path) -> dict[Path, tuple[int, str]]:
    """Single runs (no sweep) into each run dir with its overrides, side by side: (rc, output)."""
    procs = {}
    for out, overrides in runs.items():
        cmd = [sys.executable, str(REPO / "scripts" / "run.py"), *overrides, *FAKE, f"cache.dir={cache}",
               f"hydra.run.dir={out}"]
        procs[out] = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    results = {}
    for out, proc in procs.items():
        try:
            text, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            text, _ = proc.communicate()
            pytest.fail(f"run into {out} still running after {RUN_TIMEOUT_S} s\n{text[-3000:]}")
        results[out] = (proc.returncode, text)
    return results


def test_a_sweep_is_a_parent_and_a_child_per_point_equal_to_the_leaderboard(tracked_sweep, tmp_path):
    sweep, store = tracked_sweep
    board = pl.read_csv(sweep / "leaderboard.csv")
    assert board.height == 4
    client, experiment = client_for(store)
    runs = client.search_runs([experiment])
    parents = [r for r in runs if PARENT_TAG not in r.data.tags]
    assert len(parents) == 1 and len(runs) == 5
    parent = parents[0]
    children = {r.data.tags[RUN_PATH_TAG]: r for r in runs if r.data.tags.get(PARENT_TAG) == parent.info.run_id}
    assert sorted(children) == ["0", "1", "2", "3"] == sorted(str(p) for p in board["run_path"])
    assert parent.info.status == "FINISHED" and all(c.info.status == "FINISHED" for c in children.values())
    # The parent: the sweep's overrides, the best score, the reports.
    assert parent.data.params["retrieve.top_k"] == "2,4"
    assert parent.data.params["infer.prompt_order"] == "context_first,question_first"
    assert parent.data.metrics["best_score"] == board["score"].max()
    assert parent.data.metrics["points"] == 4 and parent.data.metrics["points_ok"] == 4
    parent_files = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"leaderboard.csv", "ablation.md", "comparison.csv"} <= parent_files
    assert ("report.html" in parent_files) == (sweep / "report.html").is_file()

    swept = {"retrieve.top_k", "infer.prompt_order", "llm", "embed.model", "cache.dir"}
    assert swept <= set(board.columns)
    text = {"run_id", "status", "run_path", "error", "metric", "scores_table", "variant", "sig"}
    checked = 0
    for row in board.iter_rows(named=True):
        child = children[str(row["run_path"])]
        params, metrics = child.data.params, child.data.metrics
        for column, value in row.items():
            if column in text or value is None:
                continue
            if column in swept:
                assert params[column] == str(value), (row["run_path"], column)
            else:  # score, value, ref, na, seconds, seconds_<stage>, calls, tokens, cache hits, delta, p ...
                assert metrics[entity_key(column)] == pytest.approx(float(value), rel=1e-12, abs=1e-12), column
            checked += 1
        # The composed config (flattened) besides the overrides, the interval, the error classes.
        assert params["seed"] == "0" and params["task.name"] == "wattbot"
        assert params["stages"].startswith('["parse", "questions"')
        assert metrics["score_lo"] <= row["score"] <= metrics["score_hi"]
        assert metrics["score_lo"] < metrics["score_hi"]
        classes = {k: v for k, v in metrics.items() if k.startswith("errors.") and k != "errors.n_errors"}
        assert sum(classes.values()) == 11  # data/sample's questions, each in one class
        assert metrics["errors.n_errors"] == 11 - metrics["errors.correct"]
        assert {"seconds_parse", "seconds_infer", "seconds_score"} <= set(metrics)
        # The run's files, byte for byte.
        run_dir = sweep / str(row["run_path"])
        files = {a.path for a in client.list_artifacts(child.info.run_id)}
        assert {"submission.csv", "scores.json"} <= files
        assert ("report.html" in files) == (run_dir / "report.html").is_file()
        for name in ("submission.csv", "scores.json"):
            got = Path(client.download_artifacts(child.info.run_id, name, str(tmp_path)))
            assert got.read_bytes() == (run_dir / name).read_bytes()
    assert checked >= 4 * 25, checked


def test_long_params_are_cut_with_a_marker_and_logged(tracked_sweep):
    """A param over MLflow's 6000 characters is cut, ending with the marker, and logged."""
    _, store = tracked_sweep
    assert param_text("x" * 7000) == "x" * (6000 - len(TRUNCATED)) + TRUNCATED
    assert clip("short", 10) == "short"
    assert entity_key("component:a b?") == "component_a b_"
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": {}}) == {"a.b": 1, "a.c": [1, 2], "d": {}}
    logger = MlflowLogger(TrackingConfig(dir=str(store)))
    run_id = logger.log_run(TrackedRun("long", params={"prompt": param_text("y" * 9000), "none": param_text(None)},
                                       metrics={"score": 0.5}))
    assert run_id is not None and not logger.failed
    client, _ = client_for(store)
    params = client.get_run(run_id).data.params
    assert len(params["prompt"]) == 6000 and params["prompt"].endswith(TRUNCATED)
    assert params["none"] == "null"
    client.delete_run(run_id)


def test_an_unreachable_tracking_server_is_one_warning_and_changes_no_output(tracked_sweep, tmp_path, caplog):
    sweep, _ = tracked_sweep
    cache = sweep.parent / "cache"
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    results = run_single({tmp_path / "plain": POINT0,
                          tmp_path / "tracked": [*TRACK, f"hydra.callbacks.mlflow.tracking_uri={uri}", *POINT0]},
                         cache)
    for rc, log in results.values():
        assert rc == 0, log[-3000:]
    log = results[tmp_path / "tracked"][1]
    warnings = [line for line in log.splitlines() if "warn" in line.lower() and "mlflow" in line.lower()]
    assert len(warnings) == 1 and uri in warnings[0], log[-3000:]
    for name in ("submission.csv", "scores.json"):
        assert (tmp_path / "tracked" / name).read_bytes() == (tmp_path / "plain" / name).read_bytes()
    assert sorted(p.name for p in (tmp_path / "tracked").iterdir()) == sorted(
        p.name for p in (tmp_path / "plain").iterdir())

    # A sweep against it (the callback's hooks on the finished sweep's dirs): one warning in all.
    from omegaconf import OmegaConf

    from kohaku.runner.callbacks import MlflowTracking

    before = {p: p.read_bytes() for p in sweep.rglob("*") if p.is_file()}
    callback = MlflowTracking(tracking_uri=uri, http_timeout_s=2)
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}, "overrides": {"task": SWEEP}}})
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        callback.on_multirun_start(config)
        for n in range(4):
            callback.on_job_end(OmegaConf.create({"hydra": {"runtime": {"output_dir": str(sweep / str(n))}}}))
        callback.on_multirun_end(config)
    assert [r.name for r in caplog.records if r.levelno >= logging.WARNING] == ["kohaku.report.tracking"]
    assert callback.parent_id is None and callback.logger.failed
    assert {p: p.read_bytes() for p in sweep.rglob("*") if p.is_file()} == before


def test_importing_kohaku_does_not_import_mlflow():
    code = ("import sys, kohaku, kohaku.report.tracking, kohaku.runner.callbacks, kohaku.runner.pipeline; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'mlflow'))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
