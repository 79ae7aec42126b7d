"""Leaderboard, ablation tables and plots over fabricated run dirs (a 2x2 sweep x 3 seeds)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl
import pytest

from kohaku.report import collect_runs, write_reports
from kohaku.report.runs import parse_overrides
from kohaku.report.tables import ablation_long, ablation_pivot, swept_keys

TOPKS = (4, 8)
ORDERS = ("context_first", "question_first")
SEEDS = (0, 1, 2)


def fake_score(top_k: int, order: str, seed: int) -> float:
    return 0.5 + 0.02 * top_k + (0.1 if order == "context_first" else 0.0) + 0.01 * seed


def write_run(root: Path, num: int, overrides: list[str], score: float | None, status: str = "ok") -> Path:
    run_dir = root / f"{num}_{'_'.join(overrides)}"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    stages = {
        "infer": {"key": "k1", "path": "p", "cache_hit": False, "seconds": 10.0 + num,
                  "summary": {"model_calls": 40 + num, "prompt_tokens": 1000 * num, "completion_tokens": 50}},
        "vote": {"key": "k2", "path": "p", "cache_hit": True, "seconds": 0.0, "summary": {}},
    }
    if score is not None:
        stages["score"] = {"key": "k3", "path": "p", "cache_hit": False, "seconds": 0.5,
                           "summary": {"score": score, "value": score - 0.05, "ref": 0.9, "na": 1.0,
                                       "variant": "wattbot"}}
    record = {"run_id": run_dir.name, "run_dir": str(run_dir), "overrides": overrides, "config": {},
              "stages": stages, "seconds": 12.0 + num, "status": status,
              "error": None if status == "ok" else "RuntimeError: boom"}
    (run_dir / "run.json").write_text(json.dumps(record))
    return run_dir


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    root = tmp_path / "multirun"
    num = 0
    for top_k in TOPKS:
        for order in ORDERS:
            for seed in SEEDS:
                write_run(root, num, [f"retrieve.top_k={top_k}", f"infer.prompt_order={order}", f"seed={seed}"],
                          fake_score(top_k, order, seed))
                num += 1
    write_run(root, num, ["retrieve.top_k=16", "infer.prompt_order=context_first", "seed=0"], None, "failed")
    return root


def test_parse_overrides_skips_hydra_and_deletions() -> None:
    got = parse_overrides(["+experiment=cpu", "retrieve.top_k=8", "hydra.launcher.n_jobs=2", "~foo",
                           "llm.temperature=0.2", "vote.weights=null"])
    assert got == {"experiment": "cpu", "retrieve.top_k": 8, "llm.temperature": 0.2, "vote.weights": None}


def test_collect_runs_reads_every_run(sweep: Path) -> None:
    runs, keys = collect_runs(sweep)
    assert runs.height == 13
    assert keys == ["retrieve.top_k", "infer.prompt_order", "seed"]
    assert runs.schema["retrieve.top_k"] == pl.Int64
    failed = runs.filter(pl.col("status") == "failed")
    assert failed.height == 1 and failed["score"][0] is None
    ok = runs.filter(pl.col("status") == "ok")
    assert ok["model_calls"].min() == 40 and ok["cache_hits"].to_list() == [1] * 12
    assert "seconds_infer" in runs.columns and "seconds_score" in runs.columns


def test_ablation_mean_std_over_seeds(sweep: Path) -> None:
    runs, keys = collect_runs(sweep)
    swept = swept_keys(runs, keys)
    assert swept == ["retrieve.top_k", "infer.prompt_order"]  # seed is not a swept key
    long = ablation_long(runs, swept)
    assert long.height == 4  # the failed top_k=16 run is left out
    cell = long.filter((pl.col("retrieve.top_k") == 8) & (pl.col("infer.prompt_order") == "context_first"))
    scores = [fake_score(8, "context_first", s) for s in SEEDS]
    assert cell["n"][0] == 3
    assert cell["score_mean"][0] == pytest.approx(sum(scores) / 3)
    assert cell["score_std"][0] == pytest.approx(0.01)  # seeds add 0, .01, .02: sample std 0.01
    numeric, text = ablation_pivot(long, swept)
    assert numeric["retrieve.top_k"].to_list() == [4, 8]
    assert numeric["infer.prompt_order=question_first mean"].to_list() == pytest.approx(
        [fake_score(4, "question_first", 1), fake_score(8, "question_first", 1)]
    )
    assert text["infer.prompt_order=context_first"][1] == "0.7700 ± 0.0100 (n=3)"


def test_write_reports_files_and_plots(sweep: Path, tmp_path: Path) -> None:
    out = tmp_path / "reports"
    paths = write_reports(sweep, out)
    for name in ("leaderboard", "leaderboard_md", "ablation", "ablation_md", "ablation_long",
                 "score_vs_retrieve.top_k", "score_by_infer.prompt_order", "components"):
        assert name in paths and paths[name].is_file() and paths[name].stat().st_size > 0, name
    board = pl.read_csv(paths["leaderboard"])
    assert board.height == 13
    assert board["score"][0] == pytest.approx(fake_score(8, "context_first", 2))  # best first
    assert board["status"][-1] == "failed"
    assert {"retrieve.top_k", "infer.prompt_order", "seed", "model_calls", "prompt_tokens",
            "seconds_infer"} <= set(board.columns)
    md = paths["ablation_md"].read_text()
    assert "Rows: retrieve.top_k; columns: infer.prompt_order" in md and "± 0.0100" in md
    for key in ("score_vs_retrieve.top_k", "components"):
        assert paths[key].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_single_key_and_no_runs(tmp_path: Path) -> None:
    assert write_reports(tmp_path / "empty", tmp_path / "out") == {}
    root = tmp_path / "runs"
    for i, k in enumerate((2, 4, 8)):
        write_run(root, i, [f"retrieve.top_k={k}"], 0.6 + 0.01 * k)
    paths = write_reports(root, root)
    numeric = pl.read_csv(paths["ablation"])
    assert numeric["retrieve.top_k"].to_list() == [2, 4, 8]
    assert numeric["mean"].to_list() == pytest.approx([0.62, 0.64, 0.68])
    assert all(s is None or math.isnan(s) for s in numeric["std"].to_list())  # one run per cell
    assert "score_vs_retrieve.top_k" in paths


def test_print_and_save_prints_every_row_and_writes_the_csv(tmp_path, capsys):
    import polars as pl

    from kohaku.report.tables import print_and_save

    table = pl.DataFrame({"variant": [f"v{i}" for i in range(30)], "recall": [i / 30 for i in range(30)]})
    out = print_and_save(table, tmp_path / "sub" / "t.csv")
    printed = capsys.readouterr().out
    assert "v29" in printed and "…" not in printed          # all 30 rows, none elided
    assert printed.rstrip().endswith(f"written {out}")
    assert pl.read_csv(out).equals(table)
