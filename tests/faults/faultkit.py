"""Shared pieces of the fault tests: model-free configs, a scripted LLM, a damaged corpus, and
helpers to run the pipeline in this process or in a child process (tests/faults/driver.py)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import polars as pl

from conftest import REPO, SAMPLE, compose
from kohaku.llm.fake import FakeBackend
from kohaku.runner.pipeline import RunResult, run_pipeline
from kohaku.runner.services import Services

DRIVER = Path(__file__).with_name("driver.py")

# Every fault test runs without a model: the hashing encoder and the scripted fake LLM.
FAST = ["llm=fake", "embed.model=hash:64"]


def overrides(cache: Path, *extra: str) -> list[str]:
    return [f"cache.dir={cache}", *FAST, *extra]


class ScriptedServices(Services):
    """Services whose LLM is a given backend (a FakeBackend with a test's responder)."""

    def __init__(self, backend: Any) -> None:
        super().__init__()
        self.backend = backend

    def get(self, kind, cfg, factory):
        if kind == "llm":
            return self.backend
        return super().get(kind, cfg, factory)


def run_inprocess(tmp: Path, *extra: str, backend: Any = None, run: str = "run",
                  corpus: Path | None = None, cache: Path | None = None) -> RunResult:
    """Run every stage with run dir ``tmp/run`` and cache ``cache`` (default ``tmp/cache``).

    With ``backend`` (a scripted FakeBackend) the run uses it as its LLM and sets
    ``llm.name`` to the backend's name, so runs with different scripts never share an infer
    artifact when they share a cache."""
    over = overrides(cache or tmp / "cache", *extra)
    if corpus is not None:
        over.append(f"corpus.root={corpus}")
    services = None
    if backend is not None:
        over.append(f"llm.name={backend.name}")
        services = ScriptedServices(backend)
    return run_pipeline(compose(over), tmp / run, services=services)


def scripted(responder: Callable | None, name: str, **kw: Any) -> FakeBackend:
    """A fake backend whose generation-cache identity is its own (``name``)."""
    return FakeBackend(responder, name=name, identity=f"fake:{name}@test", **kw)


def question_of(req: Any) -> str:
    """The question line of an answer prompt (``Question: ...``), '' for other prompts."""
    text = req.messages[-1]["content"] if req.messages else ""
    match = re.search(r"^Question: (.*)$", text, re.M)
    return match.group(1) if match else ""


def generation_parts(cache: Path, identity: str) -> list[Path]:
    """The generation cache's part files for one backend identity."""
    folder = Path(cache) / "llm" / hashlib.sha256(identity.encode()).hexdigest()[:16]
    return sorted(folder.glob("part-*.parquet"))


def run_json(run_dir: Path) -> dict[str, Any]:
    return json.loads((Path(run_dir) / "run.json").read_text())


def table(result: RunResult, stage: str, name: str) -> pl.DataFrame:
    return pl.read_parquet(Path(result.stages[stage].path) / f"{name}.parquet")


def stage_table(run_dir: Path, stage: str, name: str) -> pl.DataFrame:
    path = Path(run_json(run_dir)["stages"][stage]["path"])
    return pl.read_parquet(path / f"{name}.parquet")


# Columns of generations that depend on timing or on the cache, not on the model's answer.
VOLATILE = ("seconds", "cached")


def comparable_generations(df: pl.DataFrame) -> pl.DataFrame:
    return df.drop([c for c in VOLATILE if c in df.columns]).sort(["qid", "attempt", "sample_idx"])


# --------------------------------------------------------------------------- child processes


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               PYTHONUNBUFFERED="1")
    return env


def start_driver(run_dir: Path, over: list[str], *, slow_embed: float = 0.0, slow_infer: float = 0.0,
                 log: Path | None = None) -> subprocess.Popen:
    log = log or Path(run_dir).with_suffix(".log")
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(DRIVER), str(run_dir), "--slow-embed", str(slow_embed),
           "--slow-infer", str(slow_infer), *over]
    handle = open(log, "wb")
    proc = subprocess.Popen(cmd, cwd=REPO, env=child_env(), stdout=handle, stderr=subprocess.STDOUT)
    proc.log_path = log  # type: ignore[attr-defined]
    handle.close()
    return proc


def wait_for(predicate: Callable[[], bool], proc: subprocess.Popen, timeout: float = 30.0) -> None:
    """Poll until ``predicate()``; fail when the process ends first or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            raise AssertionError(f"process ended (rc {proc.returncode}) before the condition held:\n"
                                 + Path(proc.log_path).read_text()[-3000:])  # type: ignore[attr-defined]
        time.sleep(0.02)
    proc.kill()
    raise AssertionError("condition not reached in time")


def sigkill(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def parts(folder: Path, pattern: str = "part-*.parquet") -> list[Path]:
    return sorted(folder.glob(f"*/{pattern}")) if folder.is_dir() else []


# --------------------------------------------------------------------------- a damaged corpus


def damaged_corpus(root: Path) -> Path:
    """data/sample plus one document per fault, each with a metadata row (and one file without)."""
    from helpers_corpus import LEFT, RIGHT, write_two_column_pdf

    shutil.copytree(SAMPLE, root)
    pdfs, docs = root / "pdfs", root / "docs"
    (pdfs / "zero2024.pdf").write_bytes(b"")
    write_two_column_pdf(pdfs / "locked2024.pdf", "Locked", LEFT, RIGHT, user_password="pw")
    good = (pdfs / "okafor2023.pdf").read_bytes()
    (pdfs / "cut2024.pdf").write_bytes(good[: len(good) // 2])
    from fpdf import FPDF

    scan = FPDF()
    scan.add_page()
    scan.rect(20, 20, 100, 60, style="F")  # a drawing, no text layer
    scan.output(str(pdfs / "scan2024.pdf"))
    (docs / "latin2024.txt").write_bytes(
        "Caf\xe9 cooling: the chiller ran at 12 \xb0C for 40 days.".encode("latin-1"))
    (docs / "stray2024.md").write_text("# Stray\n\nA file nobody listed.\n", encoding="utf-8")
    rows = (root / "metadata.csv").read_text(encoding="utf-8").rstrip("\n").split("\n")
    for doc_id in ("zero2024", "locked2024", "cut2024", "scan2024", "latin2024", "gone2024"):
        rows.append(f"{doc_id},paper,Fault {doc_id},2024,cite {doc_id},https://example.org/{doc_id}.pdf")
    (root / "metadata.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return root
