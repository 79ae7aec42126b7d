"""The paired bootstrap (kohaku/report/paired.py): exact cases, the metric recomputed per
resample, Holm, and the interval's coverage on synthetic datasets."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from kohaku.tasks.rooms.wattbot.metric import score_frames
from kohaku.report.paired import ScoreMatrix, bootstrap, compare, holm, minimum_detectable, resample_counts


def matrix(value, ref=None, na=None, blank=None, variant="wattbot", names=None, seed_scores=None) -> ScoreMatrix:
    value = np.atleast_2d(np.asarray(value, dtype=float))
    r, n = value.shape
    return ScoreMatrix(
        names or [f"r{i}" for i in range(r)], [f"q{i}" for i in range(n)], value,
        np.ones((r, n)) if ref is None else ref, np.ones((r, n)) if na is None else na,
        np.zeros(n, dtype=bool) if blank is None else blank, variant, seed_scores or [],
    )


def test_identical_runs_give_zero_delta_zero_width_and_p_one():
    rng = np.random.default_rng(3)
    v = rng.integers(0, 2, 120).astype(float)
    ref = rng.random(120)
    m = matrix([v, v], ref=[ref, ref], na=np.ones((2, 120)))
    pair = compare(m, n_resamples=2000).pairs[0]
    assert (pair.delta, pair.lo, pair.hi, pair.p, pair.fixed, pair.broken) == (0.0, 0.0, 0.0, 1.0, 0, 0)
    assert pair.sd == 0.0 and pair.mde == 0.0 and not pair.significant


def test_fixing_k_of_n_questions_moves_the_score_by_k_over_n_times_the_gain():
    n, k = 200, 17
    a = np.zeros(n)
    b = a.copy()
    b[:k] = 1.0  # value right on k more questions, refs and NA unchanged
    m = matrix([a, b], ref=np.full((2, n), 0.5))
    pair = compare(m, n_resamples=2000).pairs[0]
    assert pair.delta == pytest.approx(k / n * 0.75, abs=1e-12)
    assert (pair.fixed, pair.broken) == (k, 0)
    assert pair.fixed_ids == [f"q{i}" for i in range(k)]
    assert pair.lo > 0 and pair.significant and pair.p < 0.01
    # the reverse pair is the mirror image
    back = compare(m, [(1, 0)], n_resamples=2000).pairs[0]
    assert back.delta == pytest.approx(-pair.delta) and (back.fixed, back.broken) == (0, k)
    assert (back.lo, back.hi) == pytest.approx((-pair.hi, -pair.lo))


def test_scores_and_per_question_match_the_metric_in_both_variants():
    sol = pl.DataFrame({"id": [f"q{i}" for i in range(8)],
                        "answer_value": ["1", "2", "is_blank", "4", "is_blank", "6", "7", "8"],
                        "ref_id": ["['a']"] * 8})
    sub = pl.DataFrame({"id": [f"q{i}" for i in range(8)],
                        "answer_value": ["1", "3", "is_blank", "4", "5", "6", "is_blank", "8"],
                        "ref_id": ["['a']", "['a']", "['b']", "['a','b']", "['a']", "['c']", "['a']", "['a']"],
                        "explanation": ["e"] * 8})
    for variant in ("wattbot", "wattbot-recall"):
        result = score_frames(sol, sub, variant)
        t = result.table
        m = ScoreMatrix(["x"], t["qid"].to_list(), [t["value_ok"].cast(float).to_numpy()],
                        [t["ref_score"].to_numpy()], [t["na_ok"].cast(float).to_numpy()],
                        t["truth_blank"].to_numpy(), variant)
        assert m.scores()[0] == pytest.approx(result.score, abs=1e-12), variant
        assert m.per_question()[0].mean() == pytest.approx(result.score, abs=1e-12), variant


def test_recall_variant_recomputes_the_na_recall_on_each_resample():
    # one unanswerable question answered wrongly (na 0), nine answerable all right
    blank = np.array([True] + [False] * 9)
    m = matrix([np.ones(10)], na=[np.array([0.0] + [1.0] * 9)], blank=blank, variant="wattbot-recall")
    counts = np.array([[2] + [0] * 8 + [8], [0] * 9 + [10]], dtype=float)
    # a resample with the blank question scores NA recall 0; one without it scores recall 1.0
    from kohaku.report.paired import resample_scores

    got = resample_scores(m, counts)[:, 0]
    assert got == pytest.approx([0.9, 1.0])


def test_resample_counts_draw_n_questions_each_and_are_reproducible():
    chunks = list(resample_counts(50, 4500, seed=5))
    assert [c.shape for c in chunks] == [(2000, 50), (2000, 50), (500, 50)]
    assert all((c.sum(axis=1) == 50).all() for c in chunks)
    again = np.vstack(list(resample_counts(50, 4500, seed=5)))
    assert np.array_equal(np.vstack(chunks), again)
    assert not np.array_equal(np.vstack(chunks), np.vstack(list(resample_counts(50, 4500, seed=6))))


def test_holm_adjustment():
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []


def test_minimum_detectable_difference():
    assert minimum_detectable(0.01) == pytest.approx((1.959964 + 0.841621) * 0.01, rel=1e-5)
    m = matrix([np.zeros(100), np.r_[np.ones(10), np.zeros(90)]])
    pair = compare(m, n_resamples=4000).pairs[0]
    assert pair.mde == pytest.approx(minimum_detectable(pair.sd))
    # the resampled sd of a mean difference of 10 ones in 100 is about sqrt(.1*.9/100)*0.75
    assert pair.sd == pytest.approx(0.75 * (0.1 * 0.9 / 100) ** 0.5, rel=0.08)


def test_seed_spread_is_reported_beside_and_holm_covers_all_pairs():
    m = matrix([np.ones(30), np.zeros(30), np.r_[np.ones(15), np.zeros(15)]],
               seed_scores=[[1.0], [0.2, 0.3, 0.25], [0.6]])
    result = compare(m, n_resamples=1000)
    assert [it.n_seeds for it in result.intervals] == [1, 3, 1]
    assert result.intervals[1].seed_sd == pytest.approx(0.05)
    assert result.intervals[0].seed_sd is None
    ps = [p.p for p in result.pairs]
    assert [p.p_holm for p in result.pairs] == pytest.approx(holm(ps))


def test_shapes_are_checked():
    with pytest.raises(ValueError, match="configurations x questions"):
        ScoreMatrix(["a", "b"], ["q1"], np.ones((1, 1)), np.ones((2, 1)), np.ones((2, 1)), np.zeros(1))
    with pytest.raises(ValueError, match="unknown metric variant"):
        matrix([np.ones(3)], variant="kaggle")


def test_interval_covers_the_true_difference_in_about_95_percent_of_datasets():
    """1,000 synthetic datasets of 150 questions drawn from a population where run B beats run
    A by a known amount: the 95 % interval must cover that amount in 93-97 % of them."""
    rng = np.random.default_rng(2026)
    # population: per question, (A right, B right) with these probabilities; refs Jaccard 0/0.5/1
    joint = np.array([0.55, 0.07, 0.13, 0.25])  # both, A only, B only, neither
    ref_levels = np.array([0.0, 0.5, 1.0])
    ref_p_a, ref_p_b = np.array([0.2, 0.3, 0.5]), np.array([0.15, 0.3, 0.55])
    true_delta = 0.75 * (joint[2] - joint[1]) + 0.15 * (ref_levels @ ref_p_b - ref_levels @ ref_p_a)
    covered = 0
    n, datasets = 150, 1000
    for d in range(datasets):
        cell = rng.choice(4, size=n, p=joint)
        va = np.isin(cell, (0, 1)).astype(float)
        vb = np.isin(cell, (0, 2)).astype(float)
        ra = rng.choice(ref_levels, size=n, p=ref_p_a)
        rb = rng.choice(ref_levels, size=n, p=ref_p_b)
        m = matrix([va, vb], ref=[ra, rb])
        pair = compare(m, n_resamples=1000, seed=d).pairs[0]
        covered += pair.lo <= true_delta <= pair.hi
    assert 0.93 <= covered / datasets <= 0.97, covered


def test_bootstrap_of_no_questions_is_empty_not_an_error():
    m = ScoreMatrix(["a", "b"], [], np.zeros((2, 0)), np.zeros((2, 0)), np.zeros((2, 0)), np.zeros(0, bool))
    assert bootstrap(m, 200).shape == (200, 2)
