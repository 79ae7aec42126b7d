"""The artifact cache and the stage runner, on toy stages (no models, no corpus)."""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import socket
import time
from pathlib import Path

import polars as pl
import pytest
from omegaconf import OmegaConf

from kohaku.core.artifacts import ArtifactStore, CorruptArtifact, artifact_key, fingerprint_files, sha256_file, stable_json
from kohaku.core.config import ConfigError
from kohaku.runner.pipeline import Registry, run_pipeline
from kohaku.runner.stage import Stage
from kohaku.core.versions import library_versions

CALLS: list[str] = []


def _source(ctx):
    CALLS.append("source")
    n = ctx.section("source.n")
    return {"numbers": pl.DataFrame({"x": list(range(n))})}


def _double(ctx):
    CALLS.append("double")
    factor = ctx.section("double.factor")
    numbers = ctx.table("source", "numbers")
    (ctx.out_dir / "note.txt").write_text("extra file")
    ctx.report(total=int(numbers["x"].sum() * factor))
    return {"doubled": numbers.with_columns(pl.col("x") * factor)}


def _boom(ctx):
    raise RuntimeError("stage exploded")


def _with_file(tmp_path: Path):
    def files(cfg):
        return [Path(cfg.data_file)]

    def compute(ctx):
        CALLS.append("reader")
        return {"lines": pl.DataFrame({"line": Path(ctx.cfg.data_file).read_text().splitlines()})}

    return Stage("reader", "1", (), ("reader",), compute, file_inputs=files)


def registry(extra: list[Stage] | None = None) -> Registry:
    stages = [
        Stage("source", "1", (), ("source",), _source, outputs=("numbers",)),
        Stage("double", "1", ("source",), ("double",), _double, outputs=("doubled",)),
    ]
    return Registry(stages + (extra or []))


def make_cfg(tmp_path: Path, **over) -> OmegaConf:
    base = {
        "stages": ["double"],
        "force": [],
        "cache": {"dir": str(tmp_path / "cache"), "verify": True},
        "source": {"n": 4},
        "double": {"factor": 2},
        "reader": {"x": 1},
        "data_file": str(tmp_path / "data.txt"),
    }
    cfg = OmegaConf.create(base)
    for key, value in over.items():
        OmegaConf.update(cfg, key, value)
    return cfg


@pytest.fixture(autouse=True)
def _reset_calls():
    CALLS.clear()


def test_first_run_computes_and_second_run_hits(tmp_path):
    result = run_pipeline(make_cfg(tmp_path), tmp_path / "run1", registry=registry())
    assert CALLS == ["source", "double"]
    assert not result.stages["double"].cache_hit
    assert result.stages["double"].summary == {"total": 12}
    out = pl.read_parquet(Path(result.stages["double"].path) / "doubled.parquet")
    assert out["x"].to_list() == [0, 2, 4, 6]
    assert (Path(result.stages["double"].path) / "note.txt").read_text() == "extra file"

    CALLS.clear()
    again = run_pipeline(make_cfg(tmp_path), tmp_path / "run2", registry=registry())
    assert CALLS == []
    assert all(rec.cache_hit for rec in again.stages.values())
    assert again.stages["double"].summary == {"total": 12}
    run_json = json.loads((tmp_path / "run2" / "run.json").read_text())
    assert run_json["status"] == "ok"
    assert run_json["stages"]["double"]["cache_hit"] is True
    assert run_json["stages"]["double"]["key"] == result.stages["double"].key
    assert run_json["libraries"] == library_versions() and "torch" in run_json["libraries"]
    manifest = json.loads((Path(result.stages["double"].path) / "manifest.json").read_text())
    assert manifest["libraries"] == library_versions()


def test_config_change_recomputes_only_downstream_of_change(tmp_path, caplog):
    run_pipeline(make_cfg(tmp_path), tmp_path / "r1", registry=registry())
    CALLS.clear()
    with caplog.at_level("INFO", logger="kohaku.pipeline"):
        res = run_pipeline(make_cfg(tmp_path, **{"double.factor": 3}), tmp_path / "r2", registry=registry())
    assert CALLS == ["double"]
    assert res.stages["source"].cache_hit and not res.stages["double"].cache_hit
    assert "config changed: double.factor=3" in res.stages["double"].reason
    assert "config changed: double.factor=3" in caplog.text

    CALLS.clear()
    res = run_pipeline(make_cfg(tmp_path, **{"source.n": 5}), tmp_path / "r3", registry=registry())
    assert CALLS == ["source", "double"]
    assert "input changed: source" in res.stages["double"].reason


def test_input_file_change_is_a_miss(tmp_path):
    data = tmp_path / "data.txt"
    data.write_text("a\nb\n")
    reg = registry([_with_file(tmp_path)])
    cfg = make_cfg(tmp_path, stages=["reader"])
    run_pipeline(cfg, tmp_path / "r1", registry=reg)
    run_pipeline(cfg, tmp_path / "r2", registry=reg)
    assert CALLS == ["reader"]
    data.write_text("a\nb\nc\n")
    res = run_pipeline(cfg, tmp_path / "r3", registry=reg)
    assert CALLS == ["reader", "reader"]
    assert "files changed" in res.stages["reader"].reason
    assert pl.read_parquet(Path(res.stages["reader"].path) / "lines.parquet").height == 3


def test_force_recomputes_named_stage(tmp_path):
    run_pipeline(make_cfg(tmp_path), tmp_path / "r1", registry=registry())
    CALLS.clear()
    res = run_pipeline(make_cfg(tmp_path, force=["double"]), tmp_path / "r2", registry=registry())
    assert CALLS == ["double"]
    assert res.stages["double"].reason.startswith("forced")


def test_unknown_stage_and_force_fail_with_names(tmp_path):
    with pytest.raises(ConfigError, match="unknown stage 'tre'"):
        run_pipeline(make_cfg(tmp_path, stages=["tre"]), tmp_path / "r", registry=registry())
    with pytest.raises(ConfigError, match="force"):
        run_pipeline(make_cfg(tmp_path, force=["nope"]), tmp_path / "r", registry=registry())


def test_failed_stage_leaves_no_artifact_and_records_failure(tmp_path):
    reg = registry([Stage("boom", "1", ("source",), ("source",), _boom)])
    with pytest.raises(RuntimeError, match="stage exploded"):
        run_pipeline(make_cfg(tmp_path, stages=["boom"]), tmp_path / "r", registry=reg)
    assert not (tmp_path / "cache" / "boom").exists() or not any(
        p for p in (tmp_path / "cache" / "boom").iterdir() if not p.name.endswith(".json")
    )
    run_json = json.loads((tmp_path / "r" / "run.json").read_text())
    assert run_json["status"] == "failed"
    assert "stage exploded" in run_json["error"]
    assert run_json["stages"]["source"]["cache_hit"] is False  # source finished and is kept
    assert (tmp_path / "cache" / "source" / run_json["stages"]["source"]["key"] / "manifest.json").is_file()


def test_corrupt_artifact_is_detected_and_recomputed(tmp_path, caplog):
    first = run_pipeline(make_cfg(tmp_path), tmp_path / "r1", registry=registry())
    parquet = Path(first.stages["double"].path) / "doubled.parquet"
    parquet.write_bytes(b"garbage")
    CALLS.clear()
    with caplog.at_level("WARNING", logger="kohaku.pipeline"):
        res = run_pipeline(make_cfg(tmp_path), tmp_path / "r2", registry=registry())
    assert CALLS == ["double"]
    assert "corrupt cache entry" in caplog.text
    assert pl.read_parquet(Path(res.stages["double"].path) / "doubled.parquet")["x"].to_list() == [0, 2, 4, 6]


def test_artifact_without_manifest_is_never_read(tmp_path):
    store = ArtifactStore(tmp_path)
    folder = store.folder("s", "k")
    folder.mkdir(parents=True)
    (folder / "t.parquet").write_bytes(b"half written")
    assert store.load("s", "k") is None


def test_manifest_checksum_mismatch_raises(tmp_path):
    store = ArtifactStore(tmp_path)
    tmp = store.scratch("s", "k")
    (tmp / "a.txt").write_text("one")
    art = store.commit("s", "k", tmp, {"x": 1})
    assert store.load("s", "k").manifest["x"] == 1
    (art.path / "a.txt").write_text("two")
    with pytest.raises(CorruptArtifact, match="a.txt"):
        store.load("s", "k")


def test_commit_race_keeps_one_copy(tmp_path):
    store = ArtifactStore(tmp_path)
    first, second = store.scratch("s", "k"), store.scratch("s", "k")
    (first / "v.txt").write_text("same")
    (second / "v.txt").write_text("same")
    a = store.commit("s", "k", first, {})
    b = store.commit("s", "k", second, {})
    assert a.path == b.path
    assert [p.name for p in (tmp_path / "s").iterdir()] == ["k"]


def _worker(args):
    cache, run_dir = args
    cfg = make_cfg(Path(cache).parent)
    res = run_pipeline(cfg, Path(run_dir), registry=registry())
    return res.stages["double"].key


def test_two_processes_same_config_both_finish(tmp_path):
    ctx = mp.get_context("spawn")
    with ctx.Pool(2) as pool:
        keys = pool.map(_worker, [(tmp_path / "cache", tmp_path / f"run{i}") for i in range(2)])
    assert keys[0] == keys[1]
    entries = [p.name for p in (tmp_path / "cache" / "double").iterdir() if not p.name.endswith(".json")]
    assert entries == [keys[0]]


def test_key_depends_on_every_part():
    base = artifact_key("s", "1", {"a": 1}, {"up": "k"}, {"f": "h"})
    assert base == artifact_key("s", "1", {"a": 1}, {"up": "k"}, {"f": "h"})
    assert base != artifact_key("s", "2", {"a": 1}, {"up": "k"}, {"f": "h"})
    assert base != artifact_key("s", "1", {"a": 2}, {"up": "k"}, {"f": "h"})
    assert base != artifact_key("s", "1", {"a": 1}, {"up": "k2"}, {"f": "h"})
    assert base != artifact_key("s", "1", {"a": 1}, {"up": "k"}, {"f": "h2"})


def test_atomic_write_replaces_whole_files_and_cleans_up_on_failure(tmp_path):
    from kohaku.core.artifacts import atomic_write

    target = tmp_path / "a.json"
    assert atomic_write(target, lambda tmp: tmp.write_text("old")) == target
    atomic_write(target, lambda tmp: tmp.write_text("new"))
    assert target.read_text() == "new"

    def half_then_fail(tmp):
        tmp.write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, half_then_fail)
    assert target.read_text() == "new"                       # the old file is untouched
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]  # no temporary left behind


# ------------------------------------------------------------------ the store itself


def test_key_and_its_payload_are_fixed():
    # keys name folders of shared caches: the same inputs must give the same key in every version
    assert stable_json({"b": 1, "a": [1, 2.5, Path("p")]}) == '{"a":[1,2.5,"p"],"b":1}'
    key = artifact_key("s", "1", {"a": 1}, {"up": "k"})
    assert key == "abcfce5d616d005079d0"
    assert key == artifact_key("s", "1", {"a": 1}, {"up": "k"}, {})  # no files = empty files


def test_fingerprint_files_names_and_hashes(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_bytes(b"bee")
    (tmp_path / "a.txt").write_bytes(b"a" * 10)
    outside = tmp_path.parent / f"{tmp_path.name}-outside.txt"
    outside.write_bytes(b"")
    try:
        got = fingerprint_files([tmp_path / "sub" / "b.txt", tmp_path / "gone.txt", tmp_path / "a.txt", outside],
                                root=tmp_path)
    finally:
        outside.unlink()
    assert list(got) == ["a.txt", "gone.txt", "sub/b.txt", str(outside)]  # in path order
    assert got == {
        "a.txt": hashlib.sha256(b"a" * 10).hexdigest(),
        "gone.txt": "<missing>",
        "sub/b.txt": hashlib.sha256(b"bee").hexdigest(),
        str(outside): hashlib.sha256(b"").hexdigest(),
    }
    assert list(fingerprint_files([tmp_path / "a.txt"])) == [str(tmp_path / "a.txt")]  # no root: as given
    assert sha256_file(tmp_path / "a.txt", chunk=3) == hashlib.sha256(b"a" * 10).hexdigest()


def test_load_refuses_damaged_artifacts_with_the_file_named(tmp_path):
    store = ArtifactStore(tmp_path)
    tmp = store.scratch("s", "k")
    (tmp / "a.txt").write_text("one")
    art = store.commit("s", "k", tmp, {})
    (art.path / "a.txt").unlink()
    with pytest.raises(CorruptArtifact, match=r"a\.txt: listed in the manifest but missing"):
        store.load("s", "k")
    assert ArtifactStore(tmp_path, verify=False).load("s", "k").key == "k"  # not checked
    (art.path / "manifest.json").write_text("{not json")
    with pytest.raises(CorruptArtifact, match=r"manifest\.json: unreadable manifest"):
        store.load("s", "k")


def test_commit_writes_the_manifest_last_and_complete(tmp_path):
    store = ArtifactStore(tmp_path)
    tmp = store.scratch("st", "k1")
    assert tmp.parent == tmp_path / "st" and tmp.is_dir()
    assert tmp.name.startswith(f".tmp-k1-{socket.gethostname()}-{os.getpid()}-")
    (tmp / "sub").mkdir()
    (tmp / "sub" / "x.txt").write_text("x")
    (tmp / "t.txt").write_text("t")
    art = store.commit("st", "k1", tmp, {"extra": 1, "key": "ignored"})
    files = {"sub/x.txt": hashlib.sha256(b"x").hexdigest(), "t.txt": hashlib.sha256(b"t").hexdigest()}
    expected = {"extra": 1, "files": files, "key": "k1", "stage": "st"}
    assert (art.stage, art.key, art.path, art.manifest) == ("st", "k1", tmp_path / "st" / "k1", expected)
    assert json.loads((art.path / "manifest.json").read_text()) == expected
    assert sorted(p.name for p in art.path.iterdir()) == ["manifest.json", "sub", "t.txt"]  # no .part left
    assert store.load("st", "k1").manifest == expected


def _commit(store, key, text, **kw):
    tmp = store.scratch("s", key)
    (tmp / "v.txt").write_text(text)
    return store.commit("s", key, tmp, {"text": text}, **kw)


def test_commit_keeps_the_first_intact_copy_unless_replacing(tmp_path):
    store = ArtifactStore(tmp_path)
    _commit(store, "k", "first")
    assert _commit(store, "k", "second").manifest["text"] == "first"
    assert (tmp_path / "s" / "k" / "v.txt").read_text() == "first"
    assert _commit(store, "k", "third", replace=True).manifest["text"] == "third"
    assert (tmp_path / "s" / "k" / "v.txt").read_text() == "third"
    # a damaged copy in the way is replaced
    (tmp_path / "s" / "k" / "v.txt").write_text("damaged")
    assert _commit(store, "k", "fourth").manifest["text"] == "fourth"
    assert store.load("s", "k").manifest["text"] == "fourth"
    assert [p.name for p in (tmp_path / "s").iterdir()] == ["k"]  # no scratch or trash left


def test_discard_and_clean_scratch(tmp_path):
    store = ArtifactStore(tmp_path)
    store.discard("s", "absent")  # nothing to do
    _commit(store, "k", "v")
    store.discard("s", "k")
    assert list((tmp_path / "s").iterdir()) == []
    old, older, new = store.scratch("s", "a"), store.scratch("s", "b"), store.scratch("s", "c")
    (old / "part.txt").write_text("left by a crash")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    os.utime(older, (0, 0))
    (tmp_path / "s" / "kept").mkdir()
    os.utime(tmp_path / "s" / "kept", (0, 0))  # an old artifact folder is no scratch
    assert store.clean_scratch(max_age_s=3600) == 2
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == sorted([new.name, "kept"])
    assert store.clean_scratch() == 0  # the default age is a day


def test_atomic_write_uses_a_hidden_unique_sibling(tmp_path):
    from kohaku.core.artifacts import atomic_write

    seen = []
    atomic_write(tmp_path / "a.json", lambda tmp: (seen.append(tmp), tmp.write_text("x")))
    atomic_write(tmp_path / "a.json", lambda tmp: (seen.append(tmp), tmp.write_text("y")))
    assert all(t.parent == tmp_path and t.name.startswith(f".a.json.{os.getpid()}-") for t in seen)
    assert all(t.name.endswith(".tmp") for t in seen) and seen[0] != seen[1]


def test_atomic_write_that_fails_before_writing_raises_its_own_error(tmp_path):
    from kohaku.core.artifacts import atomic_write

    def fail(tmp):
        raise OSError("no space left")

    with pytest.raises(OSError, match="no space left"):  # not the FileNotFoundError of the cleanup
        atomic_write(tmp_path / "a.json", fail)
    assert list(tmp_path.iterdir()) == []


def test_store_in_a_new_folder_and_manifest_values_as_text(tmp_path):
    store = ArtifactStore(tmp_path / "new" / "cache")  # made on first use, parents included
    tmp = store.scratch("s", "k")
    (tmp / "a.txt").write_text("a")
    art = store.commit("s", "k", tmp, {"source": tmp_path / "data.csv"})
    assert json.loads((art.path / "manifest.json").read_text())["source"] == str(tmp_path / "data.csv")
    assert store.load("s", "k").manifest["source"] == str(tmp_path / "data.csv")


def test_lock_error_message_in_full(tmp_path, monkeypatch):
    import errno

    from kohaku.core import artifacts
    from kohaku.core.artifacts import CacheLockError

    def flock(handle, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(artifacts.fcntl, "flock", flock)
    root = tmp_path / "cache"
    with pytest.raises(CacheLockError) as info, ArtifactStore(root).lock("embed", "k1"):
        pass
    assert str(info.value) == (
        f"cache.dir={root}: file locking (flock) does not work there (No locks available on "
        f"{root / '.locks' / 'embed-k1.lock'}). Sweep points sharing this cache would compute the same artifact "
        "twice or race. Put cache.dir on a filesystem with working flock (a local disk for one machine; for several "
        "nodes shared storage whose flock works across nodes, e.g. NFSv4, or Lustre mounted with -o flock), or set "
        "cache.locking=warn if only one process at a time uses this cache."
    )


def test_store_arguments_and_a_manifest_without_files(tmp_path):
    with pytest.raises(ValueError) as info:
        ArtifactStore(tmp_path, locking="maybe")
    assert str(info.value) == "cache.locking='maybe': use one of required, warn"
    folder = tmp_path / "st" / "k"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text('{"key": "k"}')  # lists no files: nothing to check
    art = ArtifactStore(tmp_path).load("st", "k")
    assert (art.stage, art.key, art.path, art.manifest) == ("st", "k", folder, {"key": "k"})
