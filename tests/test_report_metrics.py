"""The reports read any task's metric (kohaku/tasks/score/components.py): WattBot's numbers unchanged bit
for bit, masked components (a judge over the questions it covers, a weight-0 numeric match beside
the score) in the bootstrap, compare.py and the sweep reports, and runs scored with different
metrics refused."""

from __future__ import annotations

import importlib.util
import json
import logging
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from kohaku.tasks.rooms.wattbot.metric import WEIGHTS
from kohaku.report import write_reports
from kohaku.report.compare import CompareError, Config, read_run, score_matrix
from kohaku.tasks.score.components import Component, Metric, metric_from_json
from kohaku.tasks.rooms.wattbot.functions import wattbot_metric
from kohaku.report.paired import (ComponentMatrix, ScoreMatrix, bootstrap, compare, resample_counts,
                                  resample_scores)

REPO = Path(__file__).resolve().parents[1]


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(f"{name}_script", REPO / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


# --- WattBot: the old computation, kept here only to check the general one against it ---------

def old_resample_scores(value, ref, na, blank, variant, counts):
    n = np.maximum(counts.sum(axis=1, keepdims=True), 1.0)
    v = counts @ value.T / n
    r = counts @ ref.T / n
    if variant == "wattbot":
        a = counts @ na.T / n
    else:
        n_blank = counts @ blank.astype(np.float64)
        hits = counts @ (na * blank).T
        with np.errstate(invalid="ignore", divide="ignore"):
            a = np.where(n_blank[:, None] > 0, hits / np.maximum(n_blank, 1.0)[:, None], 1.0)
    return WEIGHTS["value"] * v + WEIGHTS["ref"] * r + WEIGHTS["na"] * a


def old_per_question(value, ref, na, blank, variant):
    out = WEIGHTS["value"] * value + WEIGHTS["ref"] * ref
    if variant == "wattbot":
        return out + WEIGHTS["na"] * na
    n_blank = int(blank.sum())
    if n_blank == 0:
        return out + WEIGHTS["na"]
    return out + WEIGHTS["na"] * na * blank * (value.shape[1] / n_blank)


def random_wattbot(rng, r, n, p_blank=0.15):
    blank = rng.random(n) < p_blank
    value = (rng.random((r, n)) < 0.6).astype(float)
    ref = rng.choice([0.0, 1 / 3, 0.5, 2 / 3, 1.0], size=(r, n))
    na = np.where(blank, (rng.random((r, n)) < 0.5).astype(float), (rng.random((r, n)) < 0.9).astype(float))
    return value, ref, na, blank


@pytest.mark.parametrize("variant", ["wattbot", "wattbot-recall"])
@pytest.mark.parametrize("p_blank", [0.15, 0.0])
def test_wattbot_scores_are_the_old_formulas_bit_for_bit(variant, p_blank):
    rng = np.random.default_rng(11)
    value, ref, na, blank = random_wattbot(rng, 5, 73, p_blank)
    m = ScoreMatrix([f"r{i}" for i in range(5)], [f"q{i}" for i in range(73)], value, ref, na, blank, variant)
    counts = np.vstack([*resample_counts(73, 2500, seed=3), np.zeros((1, 73)), np.ones((1, 73)),
                        np.where(blank, 0.0, 1.0)[None, :]])  # a resample without unanswerable questions
    assert np.array_equal(resample_scores(m, counts), old_resample_scores(value, ref, na, blank, variant, counts))
    assert np.array_equal(m.per_question(), old_per_question(value, ref, na, blank, variant))
    assert np.array_equal(m.scores(), old_resample_scores(value, ref, na, blank, variant, np.ones((1, 73)))[0])
    # the same matrix built from the metric's JSON (as scores.json will carry it)
    metric = metric_from_json(wattbot_metric(variant).as_json(), variant)
    assert metric.same_as(wattbot_metric(variant)) and metric.known.name == "wattbot"   # was metric.is_wattbot
    general = ScoreMatrix(m.names, m.qids, metric=metric, components=[
        ComponentMatrix(c.name, c.weight, {"value": value, "ref": ref, "na": na}[c.name],
                        blank if c.over else None, c.empty_value if c.over else 0.0) for c in metric.components])
    assert np.array_equal(bootstrap(general, 3000, seed=5), bootstrap(m, 3000, seed=5))


@pytest.mark.parametrize("variant", ["wattbot", "wattbot-recall"])
def test_score_matrix_of_seeded_wattbot_tables_is_the_old_computation(variant):
    rng = np.random.default_rng(7)
    n, qids = 41, [f"q{i}" for i in range(41)]
    blank = rng.random(n) < 0.2
    configs, raw = [], []
    for c in range(3):
        tables, arrays = [], []
        for s in range(2 if c else 1):
            value, ref, na, _ = random_wattbot(rng, 1, n)
            arrays.append((value[0], ref[0], na[0]))
            tables.append(pl.DataFrame({"qid": qids, "value_ok": value[0] > 0.5, "ref_score": ref[0],
                                        "na_ok": na[0] > 0.5, "truth_blank": blank}))
        configs.append(Config(f"c{c}", tables, [f"c{c}/{s}" for s in range(len(tables))]))
        raw.append(arrays)
    m = score_matrix(configs, variant)
    value = np.array([np.mean([a[0] for a in arrays], axis=0) for arrays in raw])
    ref = np.array([np.mean([a[1] for a in arrays], axis=0) for arrays in raw])
    na = np.array([np.mean([a[2] for a in arrays], axis=0) for arrays in raw])
    boot_old = np.vstack([old_resample_scores(value, ref, na, blank, variant, c)
                          for c in resample_counts(n, 4000, seed=0)])
    assert np.array_equal(bootstrap(m, 4000, seed=0), boot_old)
    assert np.array_equal(m.per_question(), old_per_question(value, ref, na, blank, variant))
    for arrays, seeds in zip(raw, m.seed_scores):
        own = [old_resample_scores(a[0][None], a[1][None], a[2][None], blank, variant, np.ones((1, n)))[0, 0]
               for a in arrays]
        assert seeds == own


# --- a judged task: judge (weight 1) over the questions the judge covers, numeric (weight 0) ---

FB = Metric("financebench", (Component("judge", "judge", 1.0, "judge_covered"),
                             Component("numeric", "numeric", 0.0, "numeric_covered")))
N = 12
QIDS = [f"fb{i}" for i in range(N)]
JUDGE_COVERED = [True] * 10 + [False, False]        # the judge gave no verdict on two questions
NUMERIC_COVERED = [i % 3 == 0 for i in range(N)]     # fb0, fb3, fb6, fb9 have amount answers
CLASSES = ["correct", "missing", "needless_abstention", "sign", "scale", "near_miss", "wrong_number",
           "partial", "wrong_text"]


def fb_table(judge_right: set[int], numeric_right: set[int]) -> pl.DataFrame:
    judge = [(1.0 if i in judge_right else 0.0) if JUDGE_COVERED[i] else None for i in range(N)]
    numeric = [(1.0 if i in numeric_right else 0.0) if NUMERIC_COVERED[i] else None for i in range(N)]
    cls = ["correct" if i in judge_right else ("wrong_number" if NUMERIC_COVERED[i] else "wrong_text")
           for i in range(N)]
    if N - 1 not in judge_right:
        cls[N - 1] = "odd_class"  # a class scores.json does not list: shown after the listed ones
    return pl.DataFrame({
        "qid": QIDS, "question": [f"What is {i}?" for i in range(N)], "truth": [f"t{i}" for i in range(N)],
        "pred": [f"t{i}" if i in judge_right else f"p{i}" for i in range(N)], "pred_blank": [False] * N,
        "missing": [False] * N, "judge": judge, "judge_covered": JUDGE_COVERED, "numeric": numeric,
        "numeric_covered": NUMERIC_COVERED, "error_class": cls, "error_detail": [""] * N,
    }, schema_overrides={"judge": pl.Float64, "numeric": pl.Float64})


def fb_expected(judge_right: set[int], numeric_right: set[int]) -> tuple[float, float]:
    judge = sum(1 for i in judge_right if JUDGE_COVERED[i]) / sum(JUDGE_COVERED)
    numeric = sum(1 for i in numeric_right if NUMERIC_COVERED[i]) / sum(NUMERIC_COVERED)
    return judge, numeric


def write_fb_run(run_dir: Path, judge_right: set[int], numeric_right: set[int], *, overrides: list[str] | None = None,
                 metric: Metric = FB) -> float:
    run_dir.mkdir(parents=True, exist_ok=True)
    table = fb_table(judge_right, numeric_right)
    table.write_parquet(run_dir / "scores.parquet")
    judge, numeric = fb_expected(judge_right, numeric_right)
    counts = {k: table["error_class"].to_list().count(k) for k in CLASSES}
    scores = {"task": metric.name, "scorer": "components", "score": judge,
              "components": {"judge": judge, "numeric": numeric}, "n": N,
              "metric": metric.as_json(), "errors": {"counts": counts}}
    (run_dir / "scores.json").write_text(json.dumps(scores))
    if overrides is not None:
        record = {"run_id": run_dir.name, "overrides": overrides, "status": "ok", "seconds": 1.0,
                  "stages": {"score": {"key": "k", "path": "p", "cache_hit": False, "seconds": 0.1,
                                       "summary": {"score": judge, "judge": judge, "numeric": numeric,
                                                   "task": metric.name, "n": N}}}}
        (run_dir / "run.json").write_text(json.dumps(record))
    return judge


def brute_force(table: pl.DataFrame, metric: Metric, counts: np.ndarray) -> np.ndarray:
    """Each resample's score, rows repeated as drawn and the metric taken literally."""
    out = []
    for row in counts:
        drawn = table[np.repeat(np.arange(table.height), row.astype(int)).tolist()]
        score = 0.0
        for c in metric.components:
            rows = drawn if c.over is None else drawn.filter(pl.col(c.over))
            value = c.empty_value if rows.height == 0 else float(rows[c.column].fill_null(0.0).mean())
            score += c.weight * value
        out.append(score)
    return np.array(out)


def test_masked_components_on_resamples_are_the_metric_taken_literally():
    table = fb_table({0, 1, 2, 4, 7, 11}, {0, 6})
    m = score_matrix([Config("a", [table], ["a"], FB)])
    assert m.component_scores()["judge"][0] == pytest.approx(5 / 10)       # fb11 is not covered
    assert m.component_scores()["numeric"][0] == pytest.approx(2 / 4)
    assert m.scores()[0] == pytest.approx(0.5)                              # numeric: beside, weight 0
    uncovered = np.zeros((1, N))
    uncovered[0, [10, 11]] = [3, 2]                                         # draws no judged question
    counts = np.vstack([*resample_counts(N, 300, seed=1), uncovered])
    assert resample_scores(m, counts)[:, 0] == pytest.approx(brute_force(table, FB, counts), abs=1e-12)
    assert resample_scores(m, uncovered)[0, 0] == 0.0                       # empty null: 0.0
    ones = Metric("t", (Component("judge", "judge", 1.0, "judge_covered", 1.0),))
    m1 = score_matrix([Config("a", [table], ["a"], ones)])
    assert resample_scores(m1, uncovered)[0, 0] == 1.0                      # empty 1.0
    assert resample_scores(m1, counts)[:, 0] == pytest.approx(brute_force(table, ones, counts), abs=1e-12)
    # per question: the judge's share spread over the 10 questions it covers
    assert m.per_question()[0].mean() == pytest.approx(m.scores()[0])
    assert m.per_question()[0][11] == 0.0


def test_seeds_whose_masks_differ_average_their_masked_values():
    a = fb_table({0, 1, 2}, set())
    b = a.with_columns(pl.Series("judge_covered", [True] * N), pl.col("judge").fill_null(1.0))  # covers all
    m = score_matrix([Config("x", [a, b], ["a", "b"], FB)])
    assert m.seed_scores[0] == pytest.approx([3 / 10, 5 / 12])
    # questions fb10 and fb11 weigh 1/2 (one seed covers them); the masked mean over both seeds
    assert m.scores()[0] == pytest.approx((3 + 5) / (10 + 12))


def test_bootstrap_interval_of_a_judged_task(tmp_path):
    base = write_fb_run(tmp_path / "a", {0, 1, 2, 3, 4}, {0})
    better = write_fb_run(tmp_path / "b", {0, 1, 2, 3, 4, 5, 6, 7, 8, 11}, {0, 3, 6})
    runs = [read_run(tmp_path / p) for p in ("a", "b")]
    assert all(r.metric.same_as(FB) and r.classes == CLASSES for r in runs)
    m = score_matrix([Config(p, [r.table], [p], r.metric, r.classes) for p, r in zip("ab", runs)])
    result = compare(m, n_resamples=2000)
    pair = result.pairs[0]
    assert pair.delta == pytest.approx(better - base) == pytest.approx(0.4)  # fb11 is not judged
    assert (pair.fixed, pair.broken) == (4, 0) and pair.fixed_ids == ["fb5", "fb6", "fb7", "fb8"]
    assert pair.lo <= pair.delta <= pair.hi and pair.lo > 0
    # the interval is the percentile interval of the literal metric on the same resamples
    counts = np.vstack(list(resample_counts(N, 2000, seed=0)))
    lit = brute_force(runs[1].table, FB, counts)
    lo, hi = np.quantile(lit, [0.025, 0.975])
    assert (result.intervals[1].lo, result.intervals[1].hi) == pytest.approx((lo, hi), abs=1e-12)
    assert result.intervals[1].components == pytest.approx({"judge": 0.9, "numeric": 0.75})


def test_compare_cli_on_run_dirs_reads_their_metric(tmp_path, capsys):
    write_fb_run(tmp_path / "a", {0, 1, 2, 3, 4}, {0})
    write_fb_run(tmp_path / "b", {0, 1, 2, 3, 4, 5, 6, 7, 8, 11}, {0, 3, 6})
    write_fb_run(tmp_path / "b2", {0, 1, 2, 3, 4, 5, 6, 7}, {0, 3})
    out = tmp_path / "cmp.json"
    rc = load_script("compare").main([f"A={tmp_path / 'a'}", f"B={tmp_path / 'b'},{tmp_path / 'b2'}",
                                      "--resamples", "1000", "--json", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0
    data = json.loads(out.read_text())
    assert data["metric"] == FB.as_json() and data["solutions"] is None
    pair = data["pairs"][0]
    assert pair["delta"] == pytest.approx((0.9 + 0.8) / 2 - 0.5) and pair["ci"][0] > 0
    b = data["intervals"][1]
    assert b["n_seeds"] == 2 and b["components"] == pytest.approx({"judge": 0.85, "numeric": (0.75 + 0.5) / 2})
    # the task's classes, in the order its scores.json lists them, then a class only the table has
    assert list(data["errors"]["A"]) == [*CLASSES, "odd_class"]
    assert data["errors"]["A"]["correct"] == 5 and data["errors"]["B"]["correct"] == 9
    assert data["errors"]["B"]["odd_class"] == 0.5
    flip = next(f for f in data["flips"]["A vs B"] if f["qid"] == "fb5")
    assert (flip["truth"], flip["a_answer"], flip["b_answer"]) == ("t5", "p5", "t5")
    assert "financebench: 1.00 judge (over judge_covered, 0 when none); beside: numeric" in printed
    assert "judge (1.00)" in printed and "numeric (0.00)" in printed and "wrong_text" in printed
    assert "unanswerable" not in printed


def wattbot_run(run_dir: Path) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    pl.DataFrame({"qid": QIDS, "value_ok": [True] * N, "ref_score": [1.0] * N, "na_ok": [True] * N,
                  "truth_blank": [False] * N, "truth_value": ["1"] * N, "pred_value": ["1"] * N,
                  "pred_blank": [False] * N, "missing": [False] * N}).write_parquet(run_dir / "scores.parquet")
    (run_dir / "scores.json").write_text(json.dumps({"variant": "wattbot", "score": 1.0}))  # before tasks
    return run_dir


def test_runs_scored_with_different_metrics_are_not_compared(tmp_path, capsys):
    write_fb_run(tmp_path / "fb", {0, 1}, {0})
    wattbot_run(tmp_path / "wb")
    script = load_script("compare")
    assert script.main([str(tmp_path / "wb"), str(tmp_path / "fb"), "--resamples", "200"]) == 2
    err = capsys.readouterr().err
    assert "different metrics" in err and "no paired comparison" in err and "financebench" in err
    # a WattBot run read from its own table: metric by the scores.json variant, classes classified
    wb = read_run(tmp_path / "wb")
    assert wb.metric.same_as(wattbot_metric("wattbot")) and "error_class" in wb.table.columns
    # a judged run dir with --solutions (WattBot scoring) is refused with what to pass instead
    sol = tmp_path / "sol.csv"
    pl.DataFrame({"id": QIDS, "answer_value": ["1"] * N, "ref_id": ["['a']"] * N}).write_csv(sol)
    for run in ("fb", "wb"):
        (tmp_path / run / "submission.csv").write_text("id,answer_value,ref_id,explanation\n")
    assert script.main(["--solutions", str(sol), str(tmp_path / "wb"), str(tmp_path / "fb")]) == 2
    assert "--task financebench" in capsys.readouterr().err
    # a CSV without --solutions
    assert script.main([str(sol), str(tmp_path / "fb")]) == 2
    assert "a submission CSV is scored against --solutions" in capsys.readouterr().err
    with pytest.raises(CompareError, match="different metrics"):
        score_matrix([Config("a", [fb_table({1}, set())], ["a"], FB),
                      Config("b", [fb_table({1}, set())], ["b"], wattbot_metric())])


# --- sweep reports over a judged task -----------------------------------------------------------

@pytest.fixture
def fb_sweep(tmp_path: Path) -> Path:
    """Two points (top_k 4 / 8), two seeds each; top_k=8 gets 5 more judged questions right."""
    root = tmp_path / "fbsweep"
    right = {4: [{0, 1, 2}, {0, 1, 2, 3}], 8: [{0, 1, 2, 3, 4, 5, 6, 7}, {0, 1, 2, 3, 4, 5, 6, 7, 8}]}
    num = 0
    for top_k, seeds in right.items():
        for seed, judged in enumerate(seeds):
            write_fb_run(root / f"{num}", judged, {0, 3} if top_k == 8 else {0},
                         overrides=[f"retrieve.top_k={top_k}", f"seed={seed}"])
            num += 1
    return root


def test_leaderboard_and_comparison_of_a_judged_task(fb_sweep, tmp_path, capsys):
    from kohaku.report.plots import components
    from kohaku.report.runs import collect_runs

    out = tmp_path / "rep"
    paths = write_reports(fb_sweep, out)
    board = pl.read_csv(paths["leaderboard"])
    assert {"judge", "numeric", "delta", "delta_lo", "p_holm", "sig"} <= set(board.columns)
    assert not {"value", "ref", "na"} & set(board.columns)
    cols = board.columns
    assert cols.index("score") < cols.index("judge") < cols.index("numeric")
    assert board["judge"].to_list() == pytest.approx([0.9, 0.8, 0.4, 0.3])
    assert board["numeric"].to_list() == pytest.approx([0.5, 0.5, 0.25, 0.25])
    cells = pl.read_csv(paths["comparison"])
    best = cells.filter(pl.col("retrieve.top_k") == 8).row(0, named=True)
    assert best["delta"] == pytest.approx(0.85 - 0.35) and best["sig"] == "*"
    assert best["correct"] == 8.5 and best["wrong_text"] is not None
    assert [c for c in cells.columns if c in CLASSES + ["odd_class"]] == [*CLASSES, "odd_class"]
    long = pl.read_csv(paths["ablation_long"])
    assert {"score_mean", "judge_mean", "numeric_mean"} <= set(long.columns)
    md = paths["ablation_md"].read_text()
    assert "financebench: 1.00 judge" in md and "the task's classes" in md and "wrong_text" in md
    assert "kohaku/tasks/rooms/wattbot/diagnosis.py" not in md
    runs, _ = collect_runs(fb_sweep)
    assert components(runs) == [("score", "overall"), ("judge", "judge (1.00)"), ("numeric", "numeric (0.00)")]
    assert load_script("leaderboard").main([str(fb_sweep), "--out", str(tmp_path / "rep2"), "--resamples", "500"]) == 0
    printed = capsys.readouterr().out
    assert "judge" in printed and "numeric" in printed and "delta_lo" in printed


def test_wattbot_runs_keep_their_component_columns_and_labels(tmp_path):
    from kohaku.report.plots import components
    from kohaku.report.runs import collect_runs

    root = tmp_path / "wb"
    for i in range(2):
        run_dir = wattbot_run(root / str(i))
        record = {"run_id": str(i), "overrides": [f"retrieve.top_k={4 * (i + 1)}"], "status": "ok",
                  "stages": {"score": {"summary": {"score": 1.0, "value": 1.0, "ref": 1.0, "na": 1.0,
                                                   "variant": "wattbot"}}}}
        (run_dir / "run.json").write_text(json.dumps(record))
    runs, _ = collect_runs(root)
    assert components(runs) == [("score", "overall"), ("value", "value (0.75)"), ("ref", "ref (0.15)"),
                                ("na", "na (0.10)")]
    assert metric_from_json(runs["metric"][0]).same_as(wattbot_metric())


def test_a_sweep_mixing_metrics_gets_no_comparison(fb_sweep, caplog):
    run_dir = wattbot_run(fb_sweep / "9")
    record = {"run_id": "9", "overrides": ["retrieve.top_k=16", "seed=0"], "status": "ok",
              "stages": {"score": {"summary": {"score": 1.0, "value": 1.0, "ref": 1.0, "na": 1.0,
                                               "variant": "wattbot"}}}}
    (run_dir / "run.json").write_text(json.dumps(record))
    with caplog.at_level(logging.WARNING):
        paths = write_reports(fb_sweep, fb_sweep / "rep")
    assert "comparison" not in paths and "different metrics" in caplog.text
    board = pl.read_csv(paths["leaderboard"])
    assert {"judge", "numeric", "value", "ref", "na"} <= set(board.columns)  # listed, not compared


# --- submissions scored with the task's own scorer (kohaku.tasks.score.scoring) ----------------------

def test_task_scorer_sources(tmp_path, capsys):
    pytest.importorskip("kohaku.tasks.score.scoring")
    from dataclasses import replace

    from kohaku.report.compare import score_with_task
    from kohaku.tasks import load_task
    from kohaku.tasks.spec import ScoreSpec

    ids = [f"q{i}" for i in range(6)]
    sol = tmp_path / "sol.csv"
    pl.DataFrame({"id": ids, "question": [f"Q{i}?" for i in range(6)],
                  "answer_value": ["Paris", "blue whale", "42", "red", "Mount Everest", "7"],
                  "ref_id": ["['a']"] * 6}).write_csv(sol)

    def sub(path: Path, values: list[str]) -> Path:
        pl.DataFrame({"id": ids, "answer_value": values, "ref_id": ["['a']"] * 6,
                      "explanation": ["e"] * 6}).write_csv(path)
        return path

    a = sub(tmp_path / "a.csv", ["Paris", "whale", "41", "red", "Everest", "x"])
    b = sub(tmp_path / "b.csv", ["Paris", "blue whale", "42", "red", "Mount Everest", "x"])
    # WattBot through its task: the same numbers as the built-in WattBot path
    script = load_script("compare")
    for extra, name in (([], "plain"), (["--task", "wattbot"], "task")):
        assert script.main(["--solutions", str(sol), str(a), str(b), "--resamples", "500",
                            "--json", str(tmp_path / f"{name}.json"), *extra]) == 0
    plain, task = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("plain", "task"))
    assert task["pairs"][0]["delta"] == plain["pairs"][0]["delta"]
    assert task["pairs"][0]["ci"] == plain["pairs"][0]["ci"]
    assert [i["score"] for i in task["intervals"]] == [i["score"] for i in plain["intervals"]]
    # a short-answer task: em beside (weight 0), f1 the score
    short = replace(load_task("wattbot"), name="short", score=ScoreSpec(
        scorer="components", classes="generic",
        metrics=[{"name": "em", "fn": "exact_match", "weight": 0.0}, {"name": "f1", "fn": "token_f1", "weight": 1.0}]))
    scored = [score_with_task(short, sol, p) for p in (a, b)]
    assert [c.name for c in scored[0].metric.components] == ["em", "f1"]
    m = score_matrix([Config(p.name, [s.table], [str(p)], s.metric, s.classes) for p, s in zip((a, b), scored)])
    em = m.component_scores()["em"]
    assert em == pytest.approx([2 / 6, 5 / 6])
    assert m.scores()[1] == pytest.approx(5 / 6) and m.scores()[0] < m.scores()[1]
    pair = compare(m, n_resamples=500).pairs[0]
    assert pair.delta == pytest.approx(m.scores()[1] - m.scores()[0])
