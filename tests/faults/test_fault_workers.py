"""A dying parse worker or a hostile document costs one document, with real processes.

The documents are text files read by a test-only reader (tests/faults/hostile.py) that the spawned
parse workers import by name: one kills its own worker with SIGKILL (what the kernel's
out-of-memory killer or a segfault does), one sleeps past parse.doc_timeout_s, one allocates
past parse.worker_memory_gb. The pool (kohaku/ingest/workers.py) is the real one.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import hostile
import polars as pl
import pytest
from omegaconf import OmegaConf

from kohaku.ingest.corpus import read_metadata
from kohaku.ingest.parsing import Checkpoint, ParseConfig, read_corpus
from kohaku.runner.pipeline import Registry, run_pipeline
from kohaku.stages import parse as parse_stage

GOOD = hostile.GOOD
_corpus = hostile.text_corpus


def _parse(root: Path, **cfg) -> pl.DataFrame:
    documents, _, _ = read_corpus(root, read_metadata(root / "metadata.csv"), ParseConfig(workers=2, **cfg),
                                  readers={"txt": hostile.read})
    return documents


def _row(documents: pl.DataFrame, doc_id: str) -> dict:
    return documents.filter(pl.col("doc_id") == doc_id).row(0, named=True)


def _reads(root: Path) -> list[str]:
    return sorted((root / "docs" / "reads.log").read_text().split())


def test_a_worker_killed_mid_parse_costs_only_its_document(tmp_path):
    root = _corpus(tmp_path / "c", {**GOOD, "killer": "KILL\n"})
    started = time.monotonic()
    documents = _parse(root)
    assert time.monotonic() - started < 60
    assert documents.filter(pl.col("status") == "ok")["doc_id"].to_list() == ["good1", "good2"]
    killer = _row(documents, "killer")
    assert killer["status"] == "error" and killer["retry"] is True
    assert "worker died" in killer["error"] and "died 2 times" in killer["error"]
    assert "killed by SIGKILL" in killer["error"] and "the next run tries it again" in killer["error"]
    assert _reads(root) == ["good1", "good2", "killer", "killer"]  # sent once more, then named
    assert not multiprocessing.active_children()   # every worker the pool started was stopped


def test_a_worker_killed_once_parses_on_the_second_try(tmp_path):
    root = _corpus(tmp_path / "c", {**GOOD, "once": "KILL-UNTIL 1 {root}/kills\nRead on the second try.\n"})
    documents = _parse(root)
    assert documents["status"].to_list() == ["ok", "ok", "ok"]
    assert documents["retry"].to_list() == [False, False, False]
    assert (root / "kills").read_text() == "killed\n"
    assert _reads(root).count("once") == 2


def test_the_time_and_the_memory_limit_each_fail_their_document_alone(tmp_path):
    root = _corpus(tmp_path / "c", {**GOOD, "slow": "SLEEP 120\n", "hog": "HOG 3\n"})
    started = time.monotonic()
    documents = _parse(root, doc_timeout_s=2, worker_memory_gb=1)
    assert time.monotonic() - started < 60   # the sleeper was stopped, not waited for
    assert documents.filter(pl.col("status") == "ok")["doc_id"].to_list() == ["good1", "good2"]
    slow, hog = _row(documents, "slow"), _row(documents, "hog")
    assert slow["error"].startswith("over the time limit parse.doc_timeout_s=2 ")
    assert hog["error"].startswith("over the memory limit parse.worker_memory_gb=1 (MemoryError")
    assert slow["retry"] and hog["retry"]
    assert _reads(root).count("slow") == 1 and _reads(root).count("hog") == 1  # not sent again


def test_the_limits_hold_for_jobs_run_elsewhere(tmp_path):
    """map_jobs (run.executor=ray's seam, here a map in this process): each batch of jobs runs
    through the pool with one worker (kohaku.ingest.parsing.parse_batch), so the time and memory
    limits fail their document alone with the local words, and a killed worker is named."""
    root = _corpus(tmp_path / "c", {**GOOD, "slow": "SLEEP 120\n", "hog": "HOG 3\n", "killer": "KILL\n"})
    started = time.monotonic()
    documents, _, _ = read_corpus(root, read_metadata(root / "metadata.csv"),
                                  ParseConfig(doc_timeout_s=2, worker_memory_gb=1), readers={"txt": hostile.read},
                                  map_jobs=lambda fn, items: ((item, fn(item)) for item in items))
    assert time.monotonic() - started < 60
    assert documents.filter(pl.col("status") == "ok")["doc_id"].to_list() == ["good1", "good2"]
    slow, hog, killer = _row(documents, "slow"), _row(documents, "hog"), _row(documents, "killer")
    assert slow["error"].startswith("over the time limit parse.doc_timeout_s=2 (still running after 2 s")
    assert hog["error"].startswith("over the memory limit parse.worker_memory_gb=1 (MemoryError")
    assert killer["error"].startswith("worker died: the parse process reading it died 2 times (killed by SIGKILL")
    assert slow["retry"] and hog["retry"] and killer["retry"]
    assert not multiprocessing.active_children()


def test_the_limits_are_checked(tmp_path):
    for bad in ({"doc_timeout_s": -1}, {"worker_memory_gb": -2}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            ParseConfig(**bad).validate()


def test_a_transient_failure_is_parsed_again_by_the_next_run_without_force(tmp_path):
    """Run 1: a document whose worker dies twice and one that always kills its worker fail,
    marked retry. Run 2 (no force): only those two are read again; the first parses, the other
    is recorded as failed. Run 3: a cache hit."""
    root = _corpus(tmp_path / "c", {**GOOD, "twice": "KILL-UNTIL 2 {root}/kills\nRead at last.\n",
                                    "killer": "KILL\n"})
    stage = dataclasses.replace(parse_stage.STAGE,
                                compute=lambda ctx: parse_stage.compute(ctx, {"txt": hostile.read}))
    registry = Registry([stage])
    cfg = OmegaConf.create({"stages": ["parse"], "force": [], "cache": {"dir": str(tmp_path / "cache")},
                            "corpus": {"root": str(root), "metadata": "metadata.csv"},
                            "parse": {"workers": 2}})

    def documents(result) -> pl.DataFrame:
        return pl.read_parquet(Path(result.stages["parse"].path) / "documents.parquet")

    first = run_pipeline(cfg, tmp_path / "run1", registry=registry)
    assert first.summary("parse")["retry"] == ["killer", "twice"]
    assert documents(first)["status"].to_list() == ["ok", "ok", "error", "error"]
    assert _reads(root) == ["good1", "good2", "killer", "killer", "twice", "twice"]

    (root / "docs" / "reads.log").unlink()
    second = run_pipeline(cfg, tmp_path / "run2", registry=registry)
    record = second.stages["parse"]
    assert not record.cache_hit and record.key == first.stages["parse"].key
    assert record.reason.startswith("retrying 2 item(s) that failed last time")
    assert _reads(root) == ["killer", "killer", "twice"]   # the good documents were not read again
    docs = documents(second)
    assert docs["status"].to_list() == ["ok", "ok", "error", "ok"]
    assert docs["retry"].to_list() == [False] * 4 and second.summary("parse")["retry"] == []
    assert "failed again when the next run retried it" in _row(docs, "killer")["error"]
    blocks = pl.read_parquet(Path(record.path) / "blocks.parquet")
    assert sorted(set(blocks["doc_id"].to_list())) == ["good1", "good2", "twice"]
    assert blocks.filter(pl.col("doc_id") == "twice")["text"].to_list()[0].endswith("\nRead at last.")
    manifest = (Path(record.path) / "manifest.json").read_text()
    assert '"revision": 1' in manifest   # downstream keys change with it (runner.pipeline.input_key)

    (root / "docs" / "reads.log").unlink()
    third = run_pipeline(cfg, tmp_path / "run3", registry=registry)
    assert third.stages["parse"].cache_hit and not (root / "docs" / "reads.log").exists()


def test_a_parse_killed_mid_corpus_resumes_from_the_documents_it_had_read(tmp_path, caplog):
    """The parsing process itself (workers=1: the documents are read in it) is killed with
    SIGKILL while it reads the third of five documents; a parse with the same checkpoint reads
    only the third, fourth and fifth, and gives the tables of a parse never interrupted."""
    docs = {"a": "Alpha text.\n", "b": "Beta text.\n", "c": "SLEEP-ONCE 60 {root}/slept\nGamma text.\n",
            "d": "Delta text.\n", "e": "Epsilon text.\n"}
    root = _corpus(tmp_path / "c", docs)
    folder = tmp_path / "cache" / "parse" / ".partial-k"
    code = ("import sys; from pathlib import Path; sys.path.insert(0, sys.argv[3]); import hostile; "
            "from kohaku.ingest.corpus import read_metadata; "
            "from kohaku.ingest.parsing import Checkpoint, ParseConfig, read_corpus; root = Path(sys.argv[1]); "
            "read_corpus(root, read_metadata(root / 'metadata.csv'), ParseConfig(workers=1), "
            "readers={'txt': hostile.read}, checkpoint=Checkpoint(Path(sys.argv[2])))")
    proc = subprocess.Popen([sys.executable, "-c", code, str(root), str(folder), str(Path(hostile.__file__).parent)],
                            cwd=Path(__file__).resolve().parents[2], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (root / "slept").exists() and proc.poll() is None:
            time.sleep(0.05)
        assert (root / "slept").exists(), proc.stderr.read().decode()[-2000:] if proc.poll() is not None else ""
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert len(list(folder.glob("*.json"))) == 2 and _reads(root) == ["a", "b", "c"]

    (root / "docs" / "reads.log").unlink()
    with caplog.at_level(logging.INFO, logger="kohaku.parse"):
        resumed = read_corpus(root, read_metadata(root / "metadata.csv"), ParseConfig(workers=1),
                              readers={"txt": hostile.read}, checkpoint=Checkpoint(folder))
    assert _reads(root) == ["c", "d", "e"]
    assert "parse: 2 document(s) reused from an interrupted parse" in caplog.text and ", 3 to read" in caplog.text
    (root / "docs" / "reads.log").unlink()
    whole = read_corpus(root, read_metadata(root / "metadata.csv"), ParseConfig(workers=1),
                        readers={"txt": hostile.read})
    for got, want in zip(resumed, whole):
        assert got.equals(want)
    assert resumed[0]["status"].to_list() == ["ok"] * 5


def test_a_dead_workers_reason_names_the_signal_and_the_kernels_oom_kill():
    from kohaku.ingest.workers import _exit_words, oom_kill_count

    assert _exit_words(-9, False) == "killed by SIGKILL"
    assert _exit_words(-11, True).startswith("killed by SIGSEGV, out of memory? the kernel's out-of-memory killer")
    assert _exit_words(3, False) == "exit code 3"
    assert oom_kill_count() >= 0   # 0 where the kernel's memory cgroup does not say
