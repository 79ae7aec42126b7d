"""kohaku.report.selection on synthetic per-question scores: the in-sample best of equal
configurations is optimistic, the split estimate is not (and a split that is ignored is caught),
a truly better configuration is picked, and the simplest one is picked among equals."""

from __future__ import annotations

import numpy as np
import pytest

from kohaku.report import selection
from kohaku.report.selection import SelectionConfig, select

FAST = SelectionConfig(n_splits=60, n_outer=20, outer_splits=10, n_resamples=300)
TRUE_MEAN = 0.6


def equal_draws(seed: int, n: int = 60, r: int = 8) -> np.ndarray:
    """n questions x r configurations that are all equally good (Bernoulli(0.6), independent)."""
    return (np.random.default_rng(seed).random((n, r)) < TRUE_MEAN).astype(float)


def mean_figures(draws: int = 120) -> tuple[float, float]:
    """(mean optimism, mean estimate - true mean) over synthetic draws of equal configurations."""
    opt, bias = [], []
    for d in range(draws):
        s = select(equal_draws(1000 + d), config=SelectionConfig(n_splits=60, n_outer=1, outer_splits=1,
                                                                 n_resamples=50, seed=d))
        opt.append(s.optimism)
        bias.append(s.estimate - TRUE_MEAN)
    return float(np.mean(opt)), float(np.mean(bias))


# the estimate's mean over 120 draws of 60 questions: sd of one estimate ~0.06/sqrt(2) -> the
# mean's sd ~0.004; the in-sample best of 8 equal configurations is ~+0.08 above the true mean
BAND = 0.015


def test_equal_configurations_optimism_positive_and_estimate_unbiased():
    optimism, bias = mean_figures()
    assert optimism > 0.05, optimism
    assert abs(bias) < BAND, bias


def test_ignoring_the_split_is_caught(monkeypatch):
    """Scoring the chosen configuration on the questions it was chosen on (the held-out part
    replaced by the selection part) makes the estimate the in-sample best: biased, so the
    unbiasedness check above fails."""
    real = selection.split_masks

    def leaky(weights, n_splits, share, rng):
        sel, _ = real(weights, n_splits, share, rng)
        return sel, sel

    monkeypatch.setattr(selection, "split_masks", leaky)
    optimism, bias = mean_figures()
    assert bias > BAND, bias          # the check of the test above would fail
    assert abs(optimism) < 0.04         # and the optimism all but vanishes (a share of the questions)


def test_truly_better_configuration_is_picked_with_high_probability():
    picked = 0
    for d in range(40):
        rng = np.random.default_rng(d)
        s = (rng.random((200, 5)) < 0.55).astype(float)
        s[:, 4] = (rng.random(200) < 0.80).astype(float)   # 25 points better, the last (least simple)
        out = select(s, names=list("abcde"), config=SelectionConfig(
            n_splits=60, n_outer=10, outer_splits=10, n_resamples=400, seed=d))
        picked += out.pick_name == "e"
        assert out.best_name == "e"
        assert out.p_best[4] > 0.9
    assert picked >= 38, picked


def test_pick_is_the_simplest_within_noise_and_figures_are_consistent():
    # six configurations that differ on a few questions each: every one within the noise
    rng = np.random.default_rng(7)
    base = (rng.random(80) < TRUE_MEAN).astype(float)
    s = np.repeat(base[:, None], 6, axis=1)
    for j in range(6):
        flip = rng.choice(80, 3, replace=False)
        s[flip, j] = 1 - s[flip, j]
    out = select(s, names=[f"v{i}" for i in range(6)], simplicity=["v3", 0], config=FAST)
    assert out.within_noise.all()
    assert out.pick_name == "v3"               # simplest first, every one within the noise
    assert out.scores == pytest.approx(s.mean(axis=0))
    assert out.best == int(np.argmax(s.mean(axis=0)))
    assert out.optimism == pytest.approx(out.scores[out.best] - out.estimate)
    assert out.estimate_lo <= out.estimate <= out.estimate_hi
    assert out.p_best.sum() == pytest.approx(1.0)
    assert out.chosen_share.sum() == pytest.approx(1.0)
    assert out.delta[out.best] == 0 and out.delta_hi[out.best] == 0
    # deterministic given the seed; another seed moves the estimate
    again = select(s, names=[f"v{i}" for i in range(6)], simplicity=["v3", 0], config=FAST)
    assert again.estimate == out.estimate and (again.p_best == out.p_best).all()
    other = select(s, config=SelectionConfig(**{**FAST.__dict__, "seed": 5}))
    assert other.estimate != out.estimate
    md = out.markdown()
    assert md.startswith("## Selection") and "**pick**" in md and md.count("\n| v") == 6


def test_one_se_rule_and_a_clear_loser_is_not_within_noise():
    rng = np.random.default_rng(3)
    s = np.column_stack([(rng.random(300) < 0.3), (rng.random(300) < 0.7),
                         (rng.random(300) < 0.7)]).astype(float)
    for rule in ("bootstrap", "one_se"):
        out = select(s, names=["base", "x", "y"], config=SelectionConfig(
            n_splits=60, n_outer=10, outer_splits=10, n_resamples=500, rule=rule))
        assert not out.within_noise[0]
        assert out.pick_name in ("x", "y")
        assert out.delta_hi[0] < 0


def test_scorer_matches_the_matrix_and_errors_name_the_problem():
    s = equal_draws(11, n=40, r=3)
    a = select(s, config=FAST)
    b = select(scorer=selection.mean_scorer(s), n_questions=40, config=FAST)
    assert a.estimate == b.estimate and a.pick == b.pick
    with pytest.raises(ValueError, match="scores has shape"):
        select(np.zeros(5))
    with pytest.raises(ValueError, match="rule"):
        SelectionConfig(rule="best")
    with pytest.raises(ValueError, match="not among"):
        select(s, names=["a", "b", "c"], simplicity=["z"], config=FAST)


def test_a_score_over_some_questions_says_how_many_it_reads():
    """A recall over the answerable questions only (a masked component): the report counts the
    questions the score reads beside all the split draws from, and the figures are those of the
    scored questions alone (the mean over the mask)."""
    from kohaku.report.paired import ComponentMatrix, ScoreMatrix
    from kohaku.tasks.score.components import Component, Metric

    rng = np.random.default_rng(3)
    n, r = 50, 3
    values = (rng.random((r, n)) < 0.7).astype(float)
    over = np.zeros(n)
    over[:20] = 1.0                                  # 20 of the 50 questions have an answer to find
    metric = Metric("recall", (Component("evidence", "evidence", 1.0, over="evidence_eligible"),
                               Component("doc_hit", "doc_hit", 0.0)))
    m = ScoreMatrix(["a", "b", "c"], [f"q{i}" for i in range(n)],
                    components=[ComponentMatrix("evidence", 1.0, values * over, over),
                                ComponentMatrix("doc_hit", 0.0, np.ones((r, n)))], metric=metric)
    assert m.n == 50 and m.n_scored == 20
    found = selection.select_matrix(m, config=FAST)
    assert found.n_scored == 20 and found.summary()["scored"] == 20 and found.summary()["questions"] == 50
    assert "20 of 50 questions scored" in found.lines()[0]
    assert np.allclose(found.scores, values[:, :20].mean(axis=1))
    plain = select(equal_draws(4, n=30, r=2), config=FAST)
    assert "30 questions)" in plain.lines()[0] and plain.summary()["scored"] == 30


def test_ensemble_select_ranks_inputs_and_ensembles(tmp_path, capsys):
    """scripts/ensemble.py --select: each input alone, the ensemble and the leave-one-out
    ensembles, scored against the solutions, with the selection report."""
    import importlib.util
    from pathlib import Path

    import polars as pl

    repo = Path(__file__).resolve().parents[1]
    ids = [f"q{i}" for i in range(12)]
    truth = [str(i + 1) for i in range(12)]
    pl.DataFrame({"id": ids, "question": [f"Question {i}?" for i in range(12)], "answer_value": truth,
                  "ref_id": ["['a']"] * 12}).write_csv(tmp_path / "sol.csv")

    def sub(name: str, wrong: set[int]) -> Path:
        path = tmp_path / f"{name}.csv"
        pl.DataFrame({"id": ids, "answer_value": ["x" if i in wrong else truth[i] for i in range(12)],
                      "ref_id": ["['a']"] * 12, "explanation": ["e"] * 12}).write_csv(path)
        return path

    inputs = [sub("a", {0, 1, 2, 3}), sub("b", {4, 5, 6, 7}), sub("c", {0, 5, 8, 9})]
    spec = importlib.util.spec_from_file_location("ensemble_script", repo / "scripts" / "ensemble.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    assert mod.main([*map(str, inputs), "--out", str(tmp_path / "out.csv"), "--select", str(tmp_path / "sol.csv")]) == 0
    printed = capsys.readouterr().out
    # the vote of the three is right wherever two agree: wrong only on q0 and q5 (10 of 12)
    assert "in-sample best: ensemble 0.8750" in printed   # 0.75 * 10/12 + 0.15 + 0.10
    assert "  a: 0.7500" in printed and ", pick" in printed.split("  a: ")[1].split("\n")[0]  # 12 questions: noise
    for name in ("a", "b", "c", "ensemble", "ensemble-without-a", "ensemble-without-b", "ensemble-without-c"):
        assert f"  {name}: " in printed
    assert "optimism" in printed and "P(best)" in printed and ", pick" in printed
