"""Leaderboard, ablation tables and plots over fabricated run dirs (a 2x2 sweep x 3 seeds)."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import polars as pl
import pytest

from kohaku.report import collect_runs, write_reports
from kohaku.report.reports import make_reports
from kohaku.report.runs import parse_overrides
from kohaku.report.tables import ablation_long, ablation_pivot, swept_keys

REPO = Path(__file__).resolve().parents[1]
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
                           "llm.temperature=0.2", "vote.weights=null", "caption=none", "planner=None"])
    assert got == {"experiment": "cpu", "retrieve.top_k": 8, "llm.temperature": 0.2, "vote.weights": None,
                   "caption": "none", "planner": "None"}  # none is an option name, null is null


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


# --- paired comparisons in the sweep reports ------------------------------------------------

N_Q = 40


def scores_parquet(run_dir: Path, n_right: int, seed: int = 0) -> float:
    """A per-question score table: the first ``n_right`` questions right (value and ref), the
    rest wrong; seed shifts which one extra question flips. Returns the wattbot score."""
    value = [i < n_right for i in range(N_Q)]
    if seed:
        value[N_Q - seed] = not value[N_Q - seed]
    table = pl.DataFrame({
        "qid": [f"q{i}" for i in range(N_Q)], "truth_value": ["5"] * N_Q, "truth_ref": ["['a']"] * N_Q,
        "truth_blank": [False] * N_Q, "pred_value": ["5" if v else "7" for v in value],
        "pred_ref": ["['a']"] * N_Q, "pred_blank": [False] * N_Q, "value_ok": value,
        "ref_score": [1.0] * N_Q, "na_ok": [True] * N_Q, "unit_ok": [None] * N_Q,
        "missing": [False] * N_Q, "ref_malformed": [False] * N_Q,
    })
    table.write_parquet(run_dir / "scores.parquet")
    return 0.75 * sum(value) / N_Q + 0.15 + 0.10


@pytest.fixture
def scored_sweep(tmp_path: Path) -> Path:
    """Four points (top_k 4/8 x order), two seeds each; top_k=8 context_first is 12 questions
    better than the baseline (top_k=4 context_first), the others within 1-2 questions."""
    root = tmp_path / "scored"
    right = {(4, "context_first"): 20, (4, "question_first"): 21, (8, "context_first"): 32, (8, "question_first"): 19}
    num = 0
    for (top_k, order), n_right in right.items():
        for seed in (0, 1):
            run_dir = write_run(root, num, [f"retrieve.top_k={top_k}", f"infer.prompt_order={order}", f"seed={seed}"], 0.0)
            score = scores_parquet(run_dir, n_right, seed)
            record = json.loads((run_dir / "run.json").read_text())
            record["stages"]["score"]["summary"]["score"] = score
            (run_dir / "run.json").write_text(json.dumps(record))
            num += 1
    return root


def test_sweep_reports_compare_every_point_with_the_first(scored_sweep: Path, tmp_path: Path) -> None:
    out = tmp_path / "rep"
    paths = write_reports(scored_sweep, out)
    cells = pl.read_csv(paths["comparison"])
    assert cells.height == 4
    base = cells.row(0, named=True)
    assert (base["retrieve.top_k"], base["infer.prompt_order"], base["sig"]) == (4, "context_first", "baseline")
    best = cells.filter((pl.col("retrieve.top_k") == 8) & (pl.col("infer.prompt_order") == "context_first")).row(0, named=True)
    assert best["delta"] == pytest.approx(0.75 * 12 / N_Q)  # seeds average out: same flips on both sides
    assert best["sig"] == "*" and best["delta_lo"] > 0 and best["p_holm"] < 0.01
    assert best["fixed"] == 12 and best["broken"] == 0 and best["n_runs"] == 2
    near = cells.filter(pl.col("infer.prompt_order") == "question_first")
    assert near["sig"].fill_null("").to_list() == ["", ""]  # one or two questions: not real
    assert all(lo <= 0 <= hi for lo, hi in zip(near["delta_lo"], near["delta_hi"]))
    assert best["correct"] == 32.5 and best["wrong_number"] == 7.5  # seed 1 also gets q39 right
    assert base["seed_sd"] == pytest.approx(abs(scores_parquet(tmp_path, 20, 0) - scores_parquet(tmp_path, 20, 1)) / 2 ** 0.5)
    board = pl.read_csv(paths["leaderboard"])
    assert {"delta", "delta_lo", "delta_hi", "p", "p_holm", "sig"} <= set(board.columns)
    assert board["sig"].fill_null("").to_list()[:2] == ["*", "*"]  # best runs first, both top_k=8 context_first
    md = paths["ablation_md"].read_text()
    assert "## Against the baseline" in md and "Baseline: retrieve.top_k=4, infer.prompt_order=context_first" in md
    assert "## Error classes per point" in md and "needless_abstention" in md
    assert "| 8 | context_first | 2 |" in md
    # the selection section: top_k=8 context_first is 12 questions ahead: the in-sample best, the
    # pick, P(best) near 1; the estimate of picking the best is below its in-sample score
    sel = pl.read_csv(paths["selection"])
    assert sel["config"].to_list()[0] == "retrieve.top_k=4,infer.prompt_order=context_first"
    row = sel.filter(pl.col("config") == "retrieve.top_k=8,infer.prompt_order=context_first").row(0, named=True)
    assert row["picked"] and row["delta_to_best"] == 0 and row["p_best"] > 0.95
    assert row["score"] == pytest.approx(best["score"])
    assert not sel.filter(pl.col("config") == "retrieve.top_k=4,infer.prompt_order=context_first")["within_noise"][0]
    assert "## Selection" in md and "out-of-sample estimate of picking the best" in md
    assert paths["selection_md"].read_text().startswith("## Selection")


def test_sweep_selection_picks_the_baseline_among_equals(tmp_path: Path) -> None:
    """Points within a question or two of each other: the best of them is optimistic (its
    estimate on held-out questions is lower) and the pick is the baseline, the simplest."""
    root = tmp_path / "eq"
    for num, (top_k, n_right) in enumerate(((4, 20), (8, 21), (16, 21), (32, 22))):
        run_dir = write_run(root, num, [f"retrieve.top_k={top_k}"], 0.0)
        score = scores_parquet(run_dir, n_right)
        record = json.loads((run_dir / "run.json").read_text())
        record["stages"]["score"]["summary"]["score"] = score
        (run_dir / "run.json").write_text(json.dumps(record))
    reports = make_reports(root, tmp_path / "rep")
    sel = reports.selection
    assert sel is not None and sel.best_name == "retrieve.top_k=32"
    assert sel.pick_name == "retrieve.top_k=4" and sel.within_noise.all()
    assert sel.optimism > 0 and sel.estimate < sel.scores[sel.best]


def test_sweep_report_baseline_setting(scored_sweep: Path, tmp_path: Path) -> None:
    from kohaku.report.reports import ReportConfig

    paths = write_reports(scored_sweep, tmp_path / "r2",
                          ReportConfig(baseline="retrieve.top_k=8,infer.prompt_order=context_first", resamples=1000))
    cells = pl.read_csv(paths["comparison"])
    assert cells.row(0, named=True)["sig"] == "baseline" and cells["retrieve.top_k"][0] == 8
    assert (cells["delta"][1:] < 0).all()
    with pytest.raises(ValueError, match="no sweep point has these values"):
        write_reports(scored_sweep, tmp_path / "r3", ReportConfig(baseline="retrieve.top_k=16"))
    with pytest.raises(ValueError, match="which the sweep does not vary"):
        write_reports(scored_sweep, tmp_path / "r3", ReportConfig(baseline="llm=fake"))


def test_leaderboard_script_prints_the_comparison_columns(scored_sweep: Path, capsys) -> None:
    spec = importlib.util.spec_from_file_location("leaderboard_script", REPO / "scripts" / "leaderboard.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    assert mod.main([str(scored_sweep), "--resamples", "1000"]) == 0
    printed = capsys.readouterr().out
    assert "baseline: retrieve.top_k=4, infer.prompt_order=context_first" in printed
    assert "delta_lo" in printed and "p_holm" in printed
    assert "in-sample best: retrieve.top_k=8,infer.prompt_order=context_first" in printed
    assert "optimism" in printed and "p_best" in printed
    assert mod.main([str(scored_sweep), "--baseline", "bogus"]) == 2


def test_plots_draw_interval_bars_when_tables_exist(scored_sweep: Path, tmp_path: Path) -> None:
    from kohaku.report.runs import collect_runs as collect
    from kohaku.report.significance import group_interval

    runs, _ = collect(scored_sweep)
    cell = runs.filter((pl.col("retrieve.top_k") == 8) & (pl.col("infer.prompt_order") == "context_first"))
    lo, hi = group_interval(cell, n_resamples=2000)
    mean = float(cell["score"].mean())
    assert lo < mean < hi and hi - lo > 0.05
    no_tables = runs.with_columns(pl.lit(None, dtype=pl.String).alias("scores_table"))
    assert group_interval(no_tables.head(2)) is None


def test_leaderboard_task_keeps_the_runs_of_that_task(sweep: Path, tmp_path: Path) -> None:
    """--task: runs scored with another task's metric are left out (these are WattBot's)."""
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[1] / "scripts" / "leaderboard.py"
    same = subprocess.run([sys.executable, str(script), str(sweep), "--out", str(tmp_path / "a"),
                           "--task", "wattbot", "--resamples", "200"], capture_output=True, text=True)
    assert same.returncode == 0, same.stderr
    assert pl.read_csv(tmp_path / "a" / "leaderboard.csv").height == 13
    other = subprocess.run([sys.executable, str(script), str(sweep), "--out", str(tmp_path / "b"),
                            "--task", "financebench"], capture_output=True, text=True)
    assert other.returncode == 2 and "no run.json scored with task financebench" in other.stderr
