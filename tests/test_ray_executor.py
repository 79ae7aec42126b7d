"""run.executor=ray: parse and embed of one run on a two-node Ray cluster on 127.0.0.1 (a head
and a worker node, each ``ray start``ed with one CPU) give the local run's artifacts under the
same cache keys, and an embedding actor killed mid-stage costs only a rerun of its batch.
Skipped where Ray is not installed (scripts/test_cluster.sh runs it in .venv-cluster).
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from conftest import REPO, SAMPLE

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                                reason="ray is not installed (bash scripts/test_cluster.sh runs this in .venv-cluster)")

# the sample corpus, one PDF page a parse job (many jobs for two nodes), small embedding chunks
# (many Ray Data batches); the bundled CPU embedding model
BASE = [f"corpus.root={SAMPLE}", "stages=[parse,tree,embed]", "parse.pages_per_job=1", "embed.chunk_size=8"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _session_pids(sid: int) -> list[int]:
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[3]) == sid:
            pids.append(int(stat.parent.name))
    return pids


def _stop(proc: subprocess.Popen) -> None:
    """TERM then KILL every process of the session ``proc`` leads (each node's raylet, workers)."""
    for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait_s
        while _session_pids(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
    proc.wait(5)


NODES = """
import sys, time, ray
ray.init(address=sys.argv[1], log_to_driver=False)
deadline = time.monotonic() + 120
while sum(n["Alive"] for n in ray.nodes()) < 2 and time.monotonic() < deadline:
    time.sleep(1)
print(sum(n["Alive"] for n in ray.nodes()))
"""


@pytest.fixture(scope="module")
def cluster():
    """(host:port, environment) of a head and a worker node (`ray start`, 1 CPU each, loopback
    only, a token of their own); every process they start is stopped at the end."""
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token",
           "RAY_AUTH_TOKEN": secrets.token_hex(32), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    port = _free_port()
    temp = Path(f"/tmp/kx{secrets.token_hex(3)}")   # Ray's socket paths must stay short
    ray_bin = str(Path(sys.executable).with_name("ray"))
    common = ["--block", "--node-ip-address=127.0.0.1", "--num-cpus=1", "--num-gpus=0"]
    procs = [subprocess.Popen([ray_bin, "start", "--head", f"--port={port}", "--include-dashboard=false",
                               f"--temp-dir={temp}", *common], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.STDOUT, start_new_session=True)]
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert procs[0].poll() is None, "ray start --head exited"
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline, "the Ray head did not come up in 120 s"
            time.sleep(1)
        procs.append(subprocess.Popen([ray_bin, "start", f"--address={address}", *common], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True))
        nodes = subprocess.run([sys.executable, "-c", NODES, address], env=env, capture_output=True,
                               text=True, timeout=180)
        assert nodes.stdout.strip().endswith("2"), f"the worker node did not join: {nodes.stderr[-2000:]}"
        yield address, env
    finally:
        for proc in reversed(procs):
            _stop(proc)
        assert all(_session_pids(p.pid) == [] for p in procs)
        subprocess.run(["rm", "-rf", str(temp)], check=False)


def _run(tmp_path: Path, name: str, extra: list[str], env: dict[str, str] | None = None) -> dict:
    """scripts/run.py (its own process: the Ray driver) -> its run.json."""
    run_dir = tmp_path / name / "run"
    cmd = [sys.executable, str(REPO / "scripts" / "run.py"), *BASE, f"cache.dir={tmp_path / name / 'cache'}",
           f"hydra.run.dir={run_dir}", *extra]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((run_dir / "run.json").read_text())


def _same_artifacts(local: dict, remote: dict) -> None:
    """The same cache keys; parse and tree tables byte-identical; vectors equal within 1e-6."""
    for stage in ("parse", "tree", "embed"):
        assert remote["stages"][stage]["key"] == local["stages"][stage]["key"], stage
        assert not remote["stages"][stage]["cache_hit"]
    for stage in ("parse", "tree"):
        ours, theirs = Path(local["stages"][stage]["path"]), Path(remote["stages"][stage]["path"])
        names = sorted(p.name for p in ours.glob("*.parquet"))
        assert names and names == sorted(p.name for p in theirs.glob("*.parquet"))
        for name in names:
            assert (ours / name).read_bytes() == (theirs / name).read_bytes(), f"{stage}/{name}"
    a = pl.read_parquet(Path(local["stages"]["embed"]["path"]) / "embeddings.parquet")
    b = pl.read_parquet(Path(remote["stages"]["embed"]["path"]) / "embeddings.parquet")
    assert a["node_id"].to_list() == b["node_id"].to_list() and a["level"].to_list() == b["level"].to_list()
    va, vb = a["vector"].to_numpy(), b["vector"].to_numpy()
    assert va.shape == vb.shape and va.shape[0] > 50
    np.testing.assert_allclose(vb, va, rtol=0, atol=1e-6)


def test_parse_and_embed_on_two_nodes_equal_the_local_run(cluster, tmp_path):
    address, env = cluster
    local = _run(tmp_path, "local", ["run.executor=local"])
    remote = _run(tmp_path, "ray", ["run.executor=ray", f"run.ray_address={address}"], env)
    _same_artifacts(local, remote)
    parse, embed = remote["stages"]["parse"]["summary"], remote["stages"]["embed"]["summary"]
    assert parse["executor"] == "ray" and parse["pages_per_s"] > 0
    assert embed["executor"] == "ray" and embed["n_encoded"] == embed["n_unique"] > 50
    assert embed["texts_per_s"] > 0
    assert remote["config"]["run"]["executor"] == "ray"


def _actor_pids() -> list[int]:
    """This machine's Ray Data embedding actor processes (their title names the actor class)."""
    pids = []
    for cmd in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmd.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "ray::" in text and "_EncodeActor" in text:
            pids.append(int(cmd.parent.name))
    return pids


def test_an_embedding_actor_killed_mid_stage_costs_only_a_rerun(cluster, tmp_path):
    """SIGKILL to an embedding actor while the embed stage runs: the stage completes and its
    artifacts equal the local run's (the lost batch is encoded again, nothing twice)."""
    local = _run(tmp_path, "local", ["run.executor=local"])
    killed: list[int] = []
    done = threading.Event()

    def killer() -> None:
        deadline = time.monotonic() + 240
        while not done.is_set() and time.monotonic() < deadline:
            pids = _actor_pids()
            if pids:
                time.sleep(2.0)   # let it take batches (its model loads first)
                if done.is_set():
                    return
                os.kill(pids[0], signal.SIGKILL)
                killed.append(pids[0])
                return
            time.sleep(0.1)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        remote = _run(tmp_path, "ray", ["run.executor=ray", f"run.ray_address={cluster[0]}",
                                        "run.ray_max_retries=3"], cluster[1])
    finally:
        done.set()
        thread.join(10)
    assert killed, "no embedding actor was seen to kill while the stage ran"
    assert remote["status"] == "ok"
    _same_artifacts(local, remote)
