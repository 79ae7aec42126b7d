"""A 2x2 multirun on data/sample whose points share one cache (fake LLM, hashing encoder: this
tests the sweep plumbing; the real-model sweep is in the README's figures), under each launcher:
joblib (2 workers), submitit's local executor (slurm_local) and Ray (a local instance, and a head
started with ``ray start --head``). Launchers whose plugin is not installed are skipped;
scripts/test_cluster.sh runs them all in .venv-cluster. Every Ray process a test starts is
stopped (its process group), also on failure, and Ray stays on 127.0.0.1."""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from conftest import REPO, compose

pytestmark = pytest.mark.slow

SWEEP = ["retrieve.top_k=2,4", "infer.prompt_order=context_first,question_first"]
FAKE = ["llm=fake", "embed.model=hash:64"]
PLUGIN = {
    "local": "hydra_plugins.hydra_joblib_launcher",
    "slurm_local": "hydra_plugins.hydra_submitit_launcher",
    "ray": "hydra_plugins.hydra_ray_launcher",
    "ray_cluster": "hydra_plugins.hydra_ray_launcher",
}
LAUNCH = {  # the overrides that pick each launcher, as a user would type them
    "local": ["hydra/launcher=local", "hydra.launcher.n_jobs=2"],
    "slurm_local": ["hydra/launcher=slurm_local"],
    "ray": ["hydra/launcher=ray"],
}
TIMEOUT_S = 300  # a sweep that hangs (e.g. waiting for a GPU that is not there) fails here


def need(launcher: str) -> None:
    if importlib.util.find_spec(PLUGIN[launcher]) is None:
        pytest.skip(f"{PLUGIN[launcher]} is not installed (scripts/test_cluster.sh runs this in .venv-cluster)")


def ray_env() -> dict[str, str]:
    """Ray without usage reports and with a token of its own (nothing written to ~/.ray)."""
    return {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": secrets.token_hex(32)}


def session_processes(sid: int) -> list[int]:
    """Live processes in session ``sid`` (everything started from a ``start_new_session`` child)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[3]) == sid:  # state, ppid, pgrp, session
            pids.append(int(stat.parent.name))
    return pids


def stop_session(proc: subprocess.Popen, grace_s: float = 0.0) -> list[int]:
    """Stop the session ``proc`` leads (TERM, then KILL) after ``grace_s`` for it to end on its
    own; return the processes that were still alive then."""
    deadline = time.monotonic() + grace_s
    while session_processes(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = session_processes(proc.pid)
    for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait_s
        while session_processes(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:  # pragma: no cover
        pass
    return left


def run_sweep(tmp_path: Path, overrides: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    """scripts/run.py -m in its own session; on a timeout every process it started is killed."""
    cmd = [sys.executable, str(REPO / "scripts" / "run.py"), "-m", *overrides, *FAKE,
           f"cache.dir={tmp_path / 'cache'}", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    log = tmp_path / "sweep.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        try:
            proc.wait(TIMEOUT_S)
        except subprocess.TimeoutExpired:
            stop_session(proc)
            pytest.fail(f"sweep still running after {TIMEOUT_S} s: {' '.join(overrides)}\n"
                        f"{log.read_text()[-3000:]}")
        finally:
            left = stop_session(proc, grace_s=15)
    assert left == [], f"processes still running 15 s after the sweep ended: {left}"
    return proc.returncode, log.read_text()


def check_sweep(sweep: Path, tmp_path: Path) -> list[dict]:
    runs = [json.loads(p.read_text()) for p in sorted(sweep.glob("*/run.json"))]
    assert len(runs) == 4 and all(r["status"] == "ok" for r in runs)
    computed = {
        stage: sum(not r["stages"][stage]["cache_hit"] for r in runs)
        for stage in ("parse", "questions", "tree", "embed", "index", "plan", "retrieve", "infer")
    }
    assert computed["parse"] == computed["tree"] == computed["embed"] == computed["index"] == 1, computed
    assert computed["retrieve"] == 2  # one per top_k
    assert computed["infer"] == 4  # every point has its own prompts
    board = pl.read_csv(sweep / "leaderboard.csv")
    assert board.height == 4
    assert {"retrieve.top_k", "infer.prompt_order"} <= set(board.columns)
    assert (sweep / "ablation.md").is_file()
    assert list(sweep.glob("*.png"))
    # The sweeper launches distinct upstream work first: the first two points differ in top_k
    # (two retrieve artifacts at once), not only in prompt order (which would wait on one lock).
    firsts = [dict(o.split("=", 1) for o in runs[i]["overrides"]) for i in (0, 1)]
    assert {f["retrieve.top_k"] for f in firsts} == {"2", "4"}, firsts
    return runs


@pytest.mark.parametrize("launcher", ["local", "slurm_local", "ray"])
def test_sweep_shares_the_cache_and_the_leaderboard_lists_four_runs(launcher, tmp_path):
    need(launcher)
    env = ray_env() if launcher == "ray" else None
    rc, log = run_sweep(tmp_path, [*LAUNCH[launcher], *SWEEP], env)
    assert rc == 0, log[-3000:]
    runs = check_sweep(tmp_path / "sweep", tmp_path)
    if launcher == "ray":
        assert "_node_ip_address='127.0.0.1'" in log
    if launcher == "local":
        # kohaku.runner.sweep orders the points by the keys it predicts from their configs: they must be
        # the keys the runner used, or the order would be wrong.
        from kohaku.runner.sweep import predict_keys

        for run in runs:
            predicted = predict_keys(compose(run["overrides"]))  # the point's overrides, cache.dir included
            assert predicted == {stage: rec["key"] for stage, rec in run["stages"].items()}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sweep_on_a_running_ray_head(tmp_path):
    """The README's cluster form against ``ray start --head`` on this machine (loopback only)."""
    need("ray_cluster")
    env = ray_env()
    port = free_port()
    ray_bin = Path(sys.executable).with_name("ray")
    temp = Path(f"/tmp/kr{secrets.token_hex(3)}")  # Ray's socket paths must stay short
    head = subprocess.Popen(
        [str(ray_bin), "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}",
         "--include-dashboard=false", "--num-cpus=2", "--num-gpus=0", f"--temp-dir={temp}"],
        env={**env, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}, stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert head.poll() is None, "ray start --head exited"
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline, "the Ray head did not come up in 120 s"
            time.sleep(1)
        rc, log = run_sweep(
            tmp_path, ["hydra/launcher=ray_cluster", f"hydra.launcher.ray.init.address=127.0.0.1:{port}", *SWEEP], env)
        assert rc == 0, log[-3000:]
        check_sweep(tmp_path / "sweep", tmp_path)
    finally:
        stop_session(head)
        assert session_processes(head.pid) == []
        subprocess.run(["rm", "-rf", str(temp)], check=False)


def test_a_gpu_launcher_on_a_cpu_machine_fails_fast(tmp_path):
    """ray_gpu asks for 1 GPU per point: on a machine without one, Ray would wait for ever."""
    need("ray")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    started = time.monotonic()
    rc, log = run_sweep(tmp_path, ["hydra/launcher=ray_gpu", "retrieve.top_k=2,4"], ray_env())
    assert rc != 0
    assert "hydra.launcher.ray.remote: each point asks for CPU 4, GPU 1" in log
    assert "Ray would wait for ever" in log
    assert time.monotonic() - started < 120
    assert not list((tmp_path / "sweep").glob("*/run.json"))
