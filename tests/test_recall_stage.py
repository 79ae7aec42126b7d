"""The recall stage (kohaku/stages/recall.py, kohaku.tasks.analysis.recall): the retrieve stage's
contexts scored per question on data/sample (hashing encoder), and a retrieval sweep
(``scripts/run.py -m stages=[recall] ...``) whose reports compare and select the points."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from kohaku.retrieval.gold import node_pages
from kohaku.runner.pipeline import compose_config, run_pipeline
from kohaku.tasks.analysis.recall import norm_ws, value_pattern

from conftest import REPO, SAMPLE

BASE = ["embed.model=hash:64", "embed.dtype=float32", "parse.workers=1",
        "retrieve.max_hits=1", "retrieve.max_context_tokens=40"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


def test_recall_table_on_the_sample(cache, tmp_path):
    first = run_pipeline(compose_config(["stages=[retrieve]", *BASE, f"cache.dir={cache}"]), tmp_path / "r0")
    contexts = pl.read_parquet(Path(first.stages["retrieve"].path) / "contexts.parquet").filter(pl.col("attempt") == 0)
    nodes = pl.read_parquet(Path(first.stages["tree"].path) / "nodes.parquet")
    pages = node_pages(nodes)
    held = {q: {p for n in ids for p in pages.get(n, ())} for q, ids in contexts.select("qid", "node_ids").iter_rows()}
    doc_of = {q: ids[0] for q, ids in contexts.select("qid", "doc_ids").iter_rows()}
    # q001: a page its context holds; q002: a page of another document (the context has one document)
    other = next(d for d in ("okafor2023", "sato2025") if d != doc_of["q002"])
    gold = tmp_path / "gold.csv"
    with gold.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["qid", "doc", "page"])
        w.writerow(["q001", doc_of["q001"], min(held["q001"])])
        w.writerow(["q002", other, 1])
    overrides = ["stages=[recall]", *BASE, f"cache.dir={cache}", f"task.gold.file={gold}",
                 "task.gold.qid=qid", "task.gold.doc=doc", "task.gold.page=page"]
    result = run_pipeline(compose_config(overrides), tmp_path / "run")
    # parse..plan were computed by the first run: cache hits; retrieve keys on task.gold (recomputed)
    assert all(result.stages[s].cache_hit for s in ("parse", "tree", "embed", "index", "plan"))
    table = pl.read_parquet(tmp_path / "run" / "recall.parquet").sort("qid")
    by = {r["qid"]: r for r in table.iter_rows(named=True)}
    assert table.height == 11
    assert by["q001"]["page_hit"] is True and by["q002"]["page_hit"] is False
    assert by["q002"]["doc_hit"] is False and by["q003"]["page_hit"] is None
    assert table["page_gold"].to_list() == [q in ("q001", "q002") for q in table["qid"].to_list()]
    # answer-value evidence: True exactly where the answer value is in the context's text
    sol = {r["id"]: r for r in pl.read_csv(SAMPLE / "solutions.csv", infer_schema=False).iter_rows(named=True)}
    text = {q: norm_ws(c) for q, c in contexts.select("qid", "context").iter_rows()}
    checked = []
    for q, r in by.items():
        if r["evidence_eligible"]:
            found = bool(value_pattern(sol[q]["answer_value"]).search(text[q]))
            assert r["evidence"] is found, q
            checked.append(found)
    assert True in checked and False in checked       # 40 tokens: some answers missed
    summary = json.loads((tmp_path / "run" / "recall.json").read_text())
    assert summary["primary"] == "page_hit"             # auto: the gold has pages
    assert summary["score"] == pytest.approx(0.5)       # q001 hit, q002 missed
    weights = {c["name"]: c["weight"] for c in summary["metric"]["components"]}
    assert weights == {"page_hit": 1.0, "page_near": 0.0, "evidence": 0.0, "doc_hit": 0.0}
    assert summary["components"]["evidence"] == pytest.approx(sum(checked) / len(checked), abs=1e-6)
    with pytest.raises(Exception, match="recall.primary=text_hit"):
        run_pipeline(compose_config([*overrides, "recall.primary=text_hit"]), tmp_path / "bad")


def test_a_retrieval_sweep_writes_the_selection_report_and_shares_upstream_stages(tmp_path):
    sweep = tmp_path / "sweep"
    cmd = [sys.executable, str(REPO / "scripts" / "run.py"), "-m", "stages=[recall]", *BASE[:3],
           "retrieve.max_hits=1", f"cache.dir={tmp_path / 'cache'}", "retrieve.max_context_tokens=20,40,2000",
           f"hydra.sweep.dir={sweep}", "hydra.sweeper.order=given"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    runs = [json.loads((sweep / str(i) / "run.json").read_text()) for i in range(3)]
    upstream = ("parse", "questions", "tree", "embed", "index", "plan")
    assert not any(runs[0]["stages"][s]["cache_hit"] for s in upstream)
    for run in runs[1:]:     # the shared stages computed once: hits in points 2 and 3
        assert all(run["stages"][s]["cache_hit"] for s in upstream)
        assert not run["stages"]["retrieve"]["cache_hit"] and not run["stages"]["recall"]["cache_hit"]
        assert [run["stages"][s]["key"] for s in upstream] == [runs[0]["stages"][s]["key"] for s in upstream]
    scores = [r["stages"]["recall"]["summary"]["score"] for r in runs]
    assert scores[2] > scores[0]                        # 2000 tokens hold more answers than 20
    summary = pl.read_csv(sweep / "selection_summary.csv").row(0, named=True)
    best = max(range(3), key=lambda i: (scores[i], -i))
    assert summary["in_sample_best"] == f"retrieve.max_context_tokens={[20, 40, 2000][best]}"
    assert summary["in_sample_score"] == pytest.approx(max(scores))
    assert summary["estimate_lo"] <= summary["estimate"] <= summary["estimate_hi"]
    assert summary["optimism"] == pytest.approx(summary["in_sample_score"] - summary["estimate"])
    assert summary["pick"].startswith("retrieve.max_context_tokens=")
    per = pl.read_csv(sweep / "selection.csv")
    assert per.height == 3 and per["p_best"].sum() == pytest.approx(1.0)
    board = pl.read_csv(sweep / "leaderboard.csv")
    assert sorted(board["score"].to_list()) == pytest.approx(sorted(scores))
    assert "evidence" in board.columns and "doc_hit" in board.columns
    cmp = pl.read_csv(sweep / "comparison.csv")
    assert cmp["retrieve.max_context_tokens"].to_list() == [20, 40, 2000] and cmp["sig"][0] == "baseline"
    assert "## Selection" in (sweep / "ablation.md").read_text()
