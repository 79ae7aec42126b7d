"""A 2x2 multirun on data/sample with two joblib workers sharing one cache (fake LLM, hashing
encoder: this tests the sweep plumbing; the real-model sweep is in the README's figures)."""

from __future__ import annotations

import json
import subprocess
import sys

import polars as pl
import pytest

from conftest import REPO

pytestmark = pytest.mark.slow


def test_two_workers_share_the_cache_and_the_leaderboard_lists_four_runs(tmp_path):
    sweep = tmp_path / "sweep"
    cmd = [
        sys.executable, str(REPO / "scripts" / "run.py"), "-m",
        "hydra/launcher=local", "hydra.launcher.n_jobs=2",
        "llm=fake", "embed.model=hash:64",
        "retrieve.top_k=2,4", "infer.prompt_order=context_first,question_first",
        f"cache.dir={tmp_path / 'cache'}", f"hydra.sweep.dir={sweep}",
    ]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
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
