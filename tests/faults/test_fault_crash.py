"""Crash safety and concurrency, with real processes.

- A run killed with SIGKILL during embed or infer resumes on rerun from the parts it wrote
  (encoding cache / generation cache), redoes none of them, and gives the tables of a run that
  was never interrupted.
- A half-written artifact is never read; a damaged cache entry is reported and recomputed.
- Two processes running one configuration on one cache at once both finish, identically.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import polars as pl
import pytest

from faultkit import (comparable_generations, overrides, parts, run_inprocess, run_json, sigkill,
                      stage_table, start_driver, wait_for)

# Small chunks so the caches are written in many parts; the slow-down is per encoder/LLM call.
CHUNKS = ["embed.chunk_size=8", "infer.chunk_size=1"]
N_TEXTS = 79       # leaf texts the sample corpus gives the embed stage
N_QUESTIONS = 11   # the fake backend answers every sample question in round 0


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    """Run dir of a run with the same configuration, never interrupted, in its own cache."""
    tmp = tmp_path_factory.mktemp("clean")
    return run_inprocess(tmp, *CHUNKS).run_dir


def _same_outputs(run_dir: Path, reference: Path) -> None:
    for stage, name in [("tree", "nodes"), ("embed", "embeddings"), ("retrieve", "contexts"),
                        ("vote", "answers"), ("score", "scores")]:
        assert stage_table(run_dir, stage, name).equals(stage_table(reference, stage, name)), stage
    assert comparable_generations(stage_table(run_dir, "infer", "generations")).equals(
        comparable_generations(stage_table(reference, "infer", "generations")))
    assert (run_dir / "submission.csv").read_bytes() == (reference / "submission.csv").read_bytes()
    assert json.loads((run_dir / "scores.json").read_text()) == \
        json.loads((reference / "scores.json").read_text())


def _no_half_artifacts(cache: Path) -> None:
    """Every artifact folder has its manifest; only dot-named scratch folders may lack one."""
    for stage_dir in cache.iterdir():
        if stage_dir.name in ("llm", "encodings"):
            continue
        for folder in stage_dir.iterdir():
            if folder.is_dir() and not folder.name.startswith("."):
                assert (folder / "manifest.json").is_file(), folder


def test_sigkill_during_embed_resumes_from_the_encoding_parts(tmp_path, uninterrupted, caplog):
    cache = tmp_path / "cache"
    over = overrides(cache, *CHUNKS)
    proc = start_driver(tmp_path / "killed", over, slow_embed=0.15)
    encodings = cache / "encodings"
    wait_for(lambda: len(parts(encodings)) >= 3, proc)
    sigkill(proc)
    assert list((cache / "embed").glob(".tmp-*"))  # the stage's scratch folder, never read
    written = len(parts(encodings))
    assert 3 <= written < N_TEXTS // 8  # killed half way through the document texts
    record = run_json(tmp_path / "killed")
    assert record["status"] == "running" and "embed" not in record["stages"]
    assert not list((cache / "embed").glob("*/manifest.json"))  # no embed artifact was sealed
    _no_half_artifacts(cache)

    with caplog.at_level(logging.INFO, logger="kohaku.embed"):
        result = run_inprocess(tmp_path, *CHUNKS, run="rerun")
    embed = result.summary("embed")
    assert embed["n_cached"] >= 8 * written and embed["n_encoded"] == N_TEXTS - embed["n_cached"]
    # the log says how much was reused and how much encoded
    assert (f"{N_TEXTS} distinct, {embed['n_cached']} cached, {embed['n_encoded']} encoded in"
            in caplog.text)
    assert all(result.stages[s].cache_hit for s in ("parse", "questions", "tree"))
    _same_outputs(result.run_dir, uninterrupted)


def test_sigkill_during_infer_resumes_from_the_generation_parts(tmp_path, uninterrupted, caplog):
    cache = tmp_path / "cache"
    over = overrides(cache, *CHUNKS)
    proc = start_driver(tmp_path / "killed", over, slow_infer=0.15)
    wait_for(lambda: len(parts(cache / "llm")) >= 3, proc)
    sigkill(proc)
    written = len(parts(cache / "llm"))
    assert 3 <= written < N_QUESTIONS
    record = run_json(tmp_path / "killed")
    assert record["status"] == "running" and list(record["stages"])[-1] == "retrieve"
    _no_half_artifacts(cache)

    with caplog.at_level(logging.INFO, logger="kohaku.infer"):
        result = run_inprocess(tmp_path, *CHUNKS, run="rerun")
    infer = result.summary("infer")
    assert infer["cache_hits"] == written and infer["prompts"] == N_QUESTIONS - written
    assert (f"infer: {N_QUESTIONS} questions, {N_QUESTIONS - written} prompts sent in "
            f"{N_QUESTIONS - written} call(s), {written} cached sample(s)" in caplog.text)
    assert all(result.stages[s].cache_hit for s in ("parse", "embed", "index", "retrieve"))
    _same_outputs(result.run_dir, uninterrupted)


def _copy_cache(run_dir: Path, tmp_path: Path) -> Path:
    """A private copy of the cache of ``run_dir``'s run, to damage."""
    shutil.copytree(run_dir.parent / "cache", tmp_path / "cache")
    return tmp_path / "cache"


@pytest.mark.parametrize(
    "damage",
    ["garbage-table", "truncated-manifest", "missing-file", "empty-manifest"],
)
def test_damaged_artifact_is_reported_and_recomputed(tmp_path, uninterrupted, caplog, damage):
    cache = _copy_cache(uninterrupted, tmp_path)
    folder = cache / "embed" / run_json(uninterrupted)["stages"]["embed"]["key"]
    table_file, manifest = folder / "embeddings.parquet", folder / "manifest.json"
    if damage == "garbage-table":
        table_file.write_bytes(table_file.read_bytes()[:100])
    elif damage == "truncated-manifest":
        manifest.write_text(manifest.read_text()[:50])
    elif damage == "missing-file":
        table_file.unlink()
    else:
        manifest.write_text("")
    with caplog.at_level(logging.WARNING, logger="kohaku.pipeline"):
        result = run_inprocess(tmp_path, *CHUNKS, run="rerun")
    assert "embed: corrupt cache entry, recomputing" in caplog.text
    assert str(folder) in caplog.text
    rec = result.stages["embed"]
    assert not rec.cache_hit and rec.reason.startswith("corrupt cache entry")
    assert result.summary("embed")["n_cached"] == N_TEXTS  # the encodings were still good
    assert all(result.stages[s].cache_hit for s in ("tree", "index", "infer", "vote"))
    _same_outputs(result.run_dir, uninterrupted)


def test_damaged_cache_parts_are_skipped_with_a_warning_and_redone(tmp_path, uninterrupted, caplog):
    _copy_cache(uninterrupted, tmp_path)
    for part in parts(tmp_path / "cache" / "encodings")[:2] + parts(tmp_path / "cache" / "llm")[:2]:
        part.write_bytes(b"PAR1 not really")
        # what a writer killed mid-write leaves: its temporary file (never a part-* name)
        temp = f".tmp-x{part.stem}.parquet" if "encodings" in str(part) else f".{part.name}.tmp"
        (part.parent / temp).write_bytes(b"PAR1 half")
    with caplog.at_level(logging.WARNING):
        result = run_inprocess(tmp_path, *CHUNKS, "force=[embed,infer]", run="rerun")
    assert caplog.text.count("unreadable") + caplog.text.count("cannot read") == 4  # temps unread
    assert result.summary("embed")["n_encoded"] == 2 * 8  # the texts of the two damaged parts
    assert result.summary("infer")["prompts"] == 2 and result.summary("infer")["cache_hits"] == 9
    _same_outputs(result.run_dir, uninterrupted)


def test_two_processes_on_one_cache_both_finish_with_identical_outputs(tmp_path, uninterrupted):
    cache = tmp_path / "cache"
    over = overrides(cache, *CHUNKS)
    procs = [start_driver(tmp_path / f"run{i}", over, slow_embed=0.02, slow_infer=0.02)
             for i in range(2)]
    for proc in procs:
        assert proc.wait(timeout=120) == 0, Path(proc.log_path).read_text()[-3000:]
    records = [run_json(tmp_path / f"run{i}") for i in range(2)]
    assert [r["status"] for r in records] == ["ok", "ok"]
    keys = [{s: rec["key"] for s, rec in r["stages"].items()} for r in records]
    assert keys[0] == keys[1]
    for stage, key in keys[0].items():  # one sealed copy per stage, no scratch left behind
        entries = sorted(p.name for p in (cache / stage).iterdir() if p.name != "last.json")
        assert entries == [key], (stage, entries)
    _same_outputs(tmp_path / "run0", tmp_path / "run1")
    _same_outputs(tmp_path / "run0", uninterrupted)


def test_forced_recompute_replaces_the_cached_artifact(tmp_path):
    """force=[stage] seals the new result even though an intact artifact has the same key."""
    from omegaconf import OmegaConf

    from kohaku.runner.pipeline import Registry, run_pipeline
    from kohaku.runner.stage import Stage

    version = {"n": 1}

    def source(ctx):
        return {"numbers": pl.DataFrame({"x": [version["n"]]})}

    registry = Registry([Stage("source", "1", (), (), source, outputs=("numbers",))])
    cfg = OmegaConf.create({"stages": ["source"], "force": [], "cache": {"dir": str(tmp_path / "c")}})
    first = run_pipeline(cfg, tmp_path / "r1", registry=registry)
    version["n"] = 2  # the code changed without a version bump: what force is for
    cfg.force = ["source"]
    second = run_pipeline(cfg, tmp_path / "r2", registry=registry)
    assert second.stages["source"].key == first.stages["source"].key
    assert pl.read_parquet(Path(second.stages["source"].path) / "numbers.parquet")["x"].to_list() == [2]
    cfg.force = []
    third = run_pipeline(cfg, tmp_path / "r3", registry=registry)
    assert third.stages["source"].cache_hit
    assert pl.read_parquet(Path(third.stages["source"].path) / "numbers.parquet")["x"].to_list() == [2]


def test_concurrent_writers_of_one_json_file_never_fail(tmp_path):
    """run.json / last.json are written by every process sharing a run or cache dir."""
    from concurrent.futures import ThreadPoolExecutor

    from kohaku.runner.pipeline import _write_json

    target = tmp_path / "last.json"

    def write(i):
        for j in range(40):
            _write_json(target, {"writer": i, "n": j, "pad": "x" * 20_000})

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(write, range(8)))
    assert json.loads(target.read_text())["n"] == 39
    assert [p.name for p in tmp_path.iterdir()] == ["last.json"]  # no temporary file left
