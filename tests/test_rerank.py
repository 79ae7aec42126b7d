"""Consensus rerank strategies and BM25 fusion on hand-made hit lists."""

from __future__ import annotations

import polars as pl
import pytest

from kohaku.retrieval.rerank import consensus, fuse, node_stats

A, B, C, D, E = 10, 11, 12, 13, 14


def hits(rows, qid="q1", attempt=0) -> pl.DataFrame:
    """rows: (query_idx, node_row, score); ranks follow score order within each query."""
    df = pl.DataFrame(
        {
            "qid": [qid] * len(rows),
            "attempt": [attempt] * len(rows),
            "query_idx": [r[0] for r in rows],
            "level": [3] * len(rows),
            "node_row": [r[1] for r in rows],
            "score": [float(r[2]) for r in rows],
        }
    )
    return df.with_columns(
        pl.col("score").rank("ordinal", descending=True).over("query_idx").sub(1).cast(pl.Int64)
        .alias("rank")
    )


# three queries; C is returned by every query but always with a low score
RAW = hits([
    (0, A, 0.9), (0, B, 0.8), (0, C, 0.3),
    (1, D, 0.95), (1, B, 0.6), (1, C, 0.2),
    (2, E, 0.99), (2, C, 0.1),
])


def order(df: pl.DataFrame) -> list[int]:
    return df.sort("rank")["node_row"].to_list()


def test_strategies_on_full_list():
    assert order(consensus(RAW, "frequency")) == [C, B, E, D, A]
    assert order(consensus(RAW, "score")) == [B, E, D, A, C]  # B: 0.8 + 0.6
    assert order(consensus(RAW, "combined")) == [B, C, E, D, A]
    assert order(consensus(RAW, "rrf")) == [C, B, E, D, A]
    assert order(consensus(RAW, "none")) == [A, B, C, D, E]  # first occurrence, query order


def test_consensus_changes_order_vs_single_query_score():
    # ranking by the best single-query score (what dedup-before-rerank degenerates to)
    single = RAW.group_by("node_row").agg(pl.col("score").max()).sort("score", descending=True)
    assert single["node_row"].to_list() == [E, D, A, B, C]
    assert order(consensus(RAW, "combined"))[:2] == [B, C]


def test_combined_values_and_weight():
    ranked = consensus(RAW, "combined", freq_weight=0.4)
    vals = dict(zip(ranked["node_row"].to_list(), ranked["value"].to_list()))
    assert vals[B] == pytest.approx(0.4 * 2 / 3 + 0.6 * 1.0)
    assert vals[C] == pytest.approx(0.4 + 0.6 * 0.6 / 1.4)
    assert vals[A] == pytest.approx(0.4 / 3 + 0.6 * 0.9 / 1.4)
    # weight 0 is pure score sum; weight 1 is pure frequency (ties by score sum)
    assert order(consensus(RAW, "combined", freq_weight=0.0)) == order(consensus(RAW, "score"))
    assert order(consensus(RAW, "combined", freq_weight=1.0)) == order(consensus(RAW, "frequency"))
    stats = dict(zip(ranked["node_row"].to_list(), ranked["freq"].to_list()))
    assert stats == {A: 1, B: 2, C: 3, D: 1, E: 1}


def test_rrf_value():
    ranked = consensus(RAW, "rrf", rrf_k=60)
    vals = dict(zip(ranked["node_row"].to_list(), ranked["value"].to_list()))
    assert vals[C] == pytest.approx(1 / 63 + 1 / 63 + 1 / 62)
    assert vals[B] == pytest.approx(2 / 62)


def test_groups_are_independent_and_ranks_dense():
    other = hits([(0, A, 0.1), (0, E, 0.5)], qid="q2")
    later = hits([(0, D, 0.7)], qid="q1", attempt=1)
    ranked = consensus(pl.concat([RAW, other, later]), "combined")
    q2 = ranked.filter(pl.col("qid") == "q2")
    assert order(q2) == [E, A] and q2["rank"].sort().to_list() == [0, 1]
    assert order(ranked.filter(pl.col("attempt") == 1)) == [D]
    assert ranked.filter((pl.col("qid") == "q1") & (pl.col("attempt") == 0)).height == 5


def test_combined_normalises_per_question_and_attempt():
    """max freq and max score sum are taken per (qid, attempt), not per question: a second
    attempt with one hit gets value 1.0 whatever the first attempt held (mutation survivor:
    normalising over qid alone)."""
    later = hits([(0, D, 0.7), (1, A, 0.35)], qid="q1", attempt=1)
    ranked = consensus(pl.concat([RAW, later]), "combined", freq_weight=0.4)
    second = ranked.filter(pl.col("attempt") == 1)
    vals = dict(zip(second["node_row"].to_list(), second["value"].to_list()))
    assert vals[D] == pytest.approx(0.4 * 1 / 1 + 0.6 * 0.7 / 0.7)
    assert vals[A] == pytest.approx(0.4 * 1 / 1 + 0.6 * 0.35 / 0.7)
    first = ranked.filter(pl.col("attempt") == 0)
    alone = consensus(RAW, "combined", freq_weight=0.4)
    assert first["value"].to_list() == pytest.approx(alone["value"].to_list())


def test_unknown_strategy():
    with pytest.raises(ValueError) as err:
        consensus(RAW, "best")
    assert str(err.value) == "retrieve.rerank='best': use one of frequency, score, combined, rrf, none"


def test_defaults_are_combined_and_rrf_k_60():
    assert consensus(RAW).equals(consensus(RAW, "combined", freq_weight=0.4, rrf_k=60))
    vals = dict(zip(*consensus(RAW, "rrf").select("node_row", "value").to_dict(as_series=False).values()))
    assert vals[B] == pytest.approx(2 / 62)


def test_rrf_k_reaches_the_statistics():
    ranked = consensus(RAW, "rrf", rrf_k=10)
    vals = dict(zip(ranked["node_row"].to_list(), ranked["value"].to_list()))
    assert vals[C] == pytest.approx(1 / 13 + 1 / 13 + 1 / 12) and vals[B] == pytest.approx(2 / 12)
    stats = node_stats(RAW)  # default rrf_k 60
    assert dict(zip(stats["node_row"].to_list(), stats["rrf"].to_list()))[B] == pytest.approx(2 / 62)


def test_ties_go_to_the_lower_node_row():
    # equal scores within one query: "none" keeps node_row order; equal hits: rank by node_row
    tied = hits([(0, B, 0.5), (0, A, 0.5), (0, C, 0.4)])
    assert order(consensus(tied, "none")) == [A, B, C]
    assert order(consensus(tied, "combined")) == [A, B, C]
    assert order(consensus(tied, "score")) == [A, B, C]


def test_zero_scores_stay_finite_in_combined():
    zero = hits([(0, A, 0.0), (1, A, 0.0), (1, B, 0.0)])
    ranked = consensus(zero, "combined", freq_weight=0.4)
    vals = dict(zip(ranked["node_row"].to_list(), ranked["value"].to_list()))
    assert vals == {A: pytest.approx(0.4), B: pytest.approx(0.2)}  # score part 0 / 1e-3 floor


def test_output_is_sorted_by_question_and_attempt():
    later = hits([(0, D, 0.7)], qid="q1", attempt=1)
    other = hits([(0, A, 0.1), (0, E, 0.5)], qid="q0")
    for ranked in (consensus(pl.concat([later, RAW, other]), "combined"),
                   fuse(consensus(pl.concat([later, RAW, other]), "score"),
                        consensus(pl.concat([other, later]), "rrf"), weight=1.0)):
        keys = ranked.select("qid", "attempt").rows()
        assert keys == sorted(keys) and ranked["qid"].to_list()[0] == "q0"


def test_bm25_fusion():
    dense = consensus(hits([(0, A, 0.9), (0, B, 0.8)]), "score")
    sparse = consensus(hits([(0, C, 7.0), (0, B, 5.0)]), "rrf")
    fused = fuse(dense, sparse, weight=1.0)
    assert order(fused) == [B, A, C]  # B in both lists; A beats C on the dense tie-break
    vals = dict(zip(fused["node_row"].to_list(), fused["value"].to_list()))
    assert vals[B] == pytest.approx(1 / 62 + 1 / 62)
    assert vals[C] == pytest.approx(1 / 61)
    # a small weight still appends BM25-only nodes, after every dense node
    small = fuse(dense, sparse, weight=0.1)
    assert order(small)[-1] == C
    assert dict(zip(small["node_row"].to_list(), small["value"].to_list()))[C] == pytest.approx(0.1 / 61)
    # weight 0 leaves the dense ranking untouched
    assert fuse(dense, sparse, weight=0.0).equals(dense)
    # a BM25-only node has no dense statistics: 0, not null or 1
    c_row = fused.filter(pl.col("node_row") == C).to_dicts()[0]
    assert (c_row["freq"], c_row["score_sum"], c_row["score_max"]) == (0, 0.0, 0.0)
    assert fused.filter(pl.col("node_row") == A).to_dicts()[0]["score_sum"] == pytest.approx(0.9)


def test_bm25_fusion_with_one_hit_and_ties_by_dense_rank():
    dense = consensus(hits([(0, A, 0.9), (0, B, 0.8)]), "score")
    one_hit = consensus(hits([(0, C, 3.0)]), "rrf")
    # C (BM25 rank 0) ties A (dense rank 0) at 1/61; the node with a dense rank goes first
    assert order(fuse(dense, one_hit, weight=1.0)) == [A, C, B]
    # A: 1/61 + 1/62 and B: 1/62 + 1/61 tie exactly; the dense rank decides
    swapped = consensus(hits([(0, B, 7.0), (0, A, 5.0)]), "rrf")
    fused = fuse(dense, swapped, weight=1.0)
    assert fused["value"].to_list()[0] == fused["value"].to_list()[1]
    assert order(fused) == [A, B]
