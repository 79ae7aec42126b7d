"""The cache's per-key lock: where flock fails (some network filesystems) a run stops with an
error naming cache.dir, or, with cache.locking=warn, goes on after one loud warning."""

from __future__ import annotations

import errno
import fcntl
import multiprocessing as mp
import time

import polars as pl
import pytest
from omegaconf import OmegaConf

from kohaku.core import artifacts
from kohaku.core.artifacts import ArtifactStore, CacheLockError
from kohaku.runner.pipeline import Registry, StageError, run_pipeline
from kohaku.runner.stage import Stage


@pytest.fixture
def no_flock(monkeypatch):
    calls = []

    def flock(handle, op):
        calls.append(op)
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(artifacts.fcntl, "flock", flock)
    return calls


def test_lock_without_flock_is_an_error_naming_cache_dir(tmp_path, no_flock):
    store = ArtifactStore(tmp_path / "cache")
    with pytest.raises(CacheLockError) as info, store.lock("embed", "abc"):
        pytest.fail("the body must not run without the lock")
    message = str(info.value)
    assert f"cache.dir={tmp_path / 'cache'}" in message
    assert "No locks available" in message and "embed-abc.lock" in message
    assert "cache.locking=warn" in message  # says how to go on anyway
    assert no_flock == [fcntl.LOCK_EX]


def test_locking_warn_goes_on_and_warns_once(tmp_path, no_flock, caplog):
    store = ArtifactStore(tmp_path / "cache", locking="warn")
    ran = []
    with caplog.at_level("WARNING", logger="kohaku.artifacts"):
        for key in ("a", "b"):
            with store.lock("embed", key):
                ran.append(key)
    assert ran == ["a", "b"]
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1
    assert f"cache.dir={tmp_path / 'cache'}" in warnings[0].getMessage()
    assert no_flock == [fcntl.LOCK_EX, fcntl.LOCK_EX]  # no unlock of a lock never taken


def test_unknown_locking_mode_is_refused(tmp_path):
    with pytest.raises(ValueError, match="cache.locking='maybe'"):
        ArtifactStore(tmp_path, locking="maybe")


def _numbers(ctx):
    return {"numbers": pl.DataFrame({"x": [1, 2, 3]})}


def _cfg(tmp_path, locking=None):
    cache = {"dir": str(tmp_path / "cache"), "verify": True}
    if locking:
        cache["locking"] = locking
    return OmegaConf.create({"stages": ["source"], "force": [], "cache": cache, "source": {"n": 3}})


def test_run_stops_with_a_stage_error_when_the_cache_cannot_lock(tmp_path, no_flock):
    registry = Registry([Stage("source", "1", (), ("source",), _numbers, outputs=("numbers",))])
    with pytest.raises(StageError, match=r"stage 'source': cache.dir=.*flock"):
        run_pipeline(_cfg(tmp_path), tmp_path / "run", registry=registry)
    result = run_pipeline(_cfg(tmp_path, "warn"), tmp_path / "run2", registry=registry)
    assert result.stages["source"].summary is not None and not result.stages["source"].cache_hit


def _hold(root, started, seconds):
    store = ArtifactStore(root)
    with store.lock("s", "k"):
        started.set()
        time.sleep(seconds)


def test_real_flock_makes_a_second_process_wait(tmp_path):
    started = mp.get_context("spawn").Event()
    holder = mp.get_context("spawn").Process(target=_hold, args=(tmp_path, started, 1.0))
    holder.start()
    try:
        assert started.wait(60)
        t0 = time.perf_counter()
        with ArtifactStore(tmp_path).lock("s", "k"):
            waited = time.perf_counter() - t0
    finally:
        holder.join(60)
    assert waited > 0.5
