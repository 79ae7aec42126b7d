"""Consensus rerank over the raw hits of all queries of a question, then dedup.

KohakuRAG deduplicated the concatenated per-query hit lists *before* reranking, so every node had
frequency 1 and its "frequency"/"combined" strategies collapsed to first-occurrence score order
(kohaku_spec.md §5 step 4-5, §11.1). Here the statistics are taken over the full list, so a node
returned by several queries (or several levels) ranks higher.

Hits tables have the columns qid, attempt, query_idx, level, node_row, rank (0-based within one
query's list for one level), score. All functions are vectorised polars expressions.
"""

from __future__ import annotations

import polars as pl

STRATEGIES = ("frequency", "score", "combined", "rrf", "none")
GROUP = ["qid", "attempt"]


def node_stats(hits: pl.DataFrame, rrf_k: int = 60) -> pl.DataFrame:
    """Per (qid, attempt, node_row): freq, score_sum, score_max, rrf, first (query order)."""
    ordered = hits.sort(GROUP + ["query_idx", "score", "node_row"],
                        descending=[False, False, False, True, False], maintain_order=True)
    ordered = ordered.with_columns(pl.int_range(pl.len()).over(GROUP).alias("_pos"))
    return ordered.group_by(GROUP + ["node_row"]).agg(
        pl.len().alias("freq"),
        pl.col("score").sum().alias("score_sum"),
        pl.col("score").max().alias("score_max"),
        (1.0 / (rrf_k + pl.col("rank") + 1)).sum().alias("rrf"),
        pl.col("_pos").min().alias("first"),
    )


def consensus(
    hits: pl.DataFrame,
    strategy: str = "combined",
    freq_weight: float = 0.4,
    rrf_k: int = 60,
) -> pl.DataFrame:
    """Distinct nodes per (qid, attempt) ranked by ``strategy``.

    - ``frequency``: number of hits (queries x levels that returned the node), ties by score sum
    - ``score``: sum of the node's scores over all hits
    - ``combined``: freq_weight * freq/max_freq + (1 - freq_weight) * sum/max_sum (per question)
    - ``rrf``: sum over hits of 1 / (rrf_k + rank + 1)
    - ``none``: first occurrence, queries in plan order, each query's hits by score

    Returns qid, attempt, node_row, rank (0-based), value, freq, score_sum, score_max, sorted.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"retrieve.rerank={strategy!r}: use one of {', '.join(STRATEGIES)}")
    stats = node_stats(hits, rrf_k)
    if strategy == "frequency":
        value = pl.col("freq").cast(pl.Float64)
    elif strategy == "score":
        value = pl.col("score_sum").cast(pl.Float64)
    elif strategy == "combined":
        max_freq = pl.max_horizontal(pl.col("freq").max().over(GROUP), pl.lit(1))
        max_sum = pl.max_horizontal(pl.col("score_sum").max().over(GROUP), pl.lit(1e-3))
        value = freq_weight * pl.col("freq") / max_freq + (1 - freq_weight) * pl.col("score_sum") / max_sum
    elif strategy == "rrf":
        value = pl.col("rrf")
    else:
        value = -pl.col("first").cast(pl.Float64)
    ranked = stats.with_columns(value.cast(pl.Float64).alias("value")).sort(
        GROUP + ["value", "score_sum", "node_row"],
        descending=[False, False, True, True, False],
    )
    ranked = ranked.with_columns(pl.int_range(pl.len()).over(GROUP).alias("rank"))
    return ranked.select(GROUP + ["node_row", "rank", "value", "freq", "score_sum", "score_max"])


def fuse(dense: pl.DataFrame, bm25: pl.DataFrame | None, weight: float, rrf_k: int = 60) -> pl.DataFrame:
    """Reciprocal-rank fusion of the dense consensus list with the BM25 consensus list.

    value = 1/(rrf_k + dense_rank + 1) + weight/(rrf_k + bm25_rank + 1); a node missing from a
    list gets 0 from it. ``weight`` 0 (or no BM25 hits) returns ``dense`` unchanged.
    """
    if bm25 is None or weight <= 0 or bm25.height == 0:
        return dense
    d = dense.select(GROUP + ["node_row", pl.col("rank").alias("_rd"), "freq", "score_sum", "score_max"])
    b = bm25.select(GROUP + ["node_row", pl.col("rank").alias("_rb")])
    both = d.join(b, on=GROUP + ["node_row"], how="full", coalesce=True)
    value = (
        pl.when(pl.col("_rd").is_not_null()).then(1.0 / (rrf_k + pl.col("_rd") + 1)).otherwise(0.0)
        + pl.when(pl.col("_rb").is_not_null()).then(weight / (rrf_k + pl.col("_rb") + 1)).otherwise(0.0)
    )
    out = both.with_columns(
        value.alias("value"),
        pl.col("freq").fill_null(0),
        pl.col("score_sum").fill_null(0.0),
        pl.col("score_max").fill_null(0.0),
    ).sort(GROUP + ["value", "_rd", "node_row"], descending=[False, False, True, False, False],
           nulls_last=True)
    out = out.with_columns(pl.int_range(pl.len()).over(GROUP).alias("rank"))
    return out.select(GROUP + ["node_row", "rank", "value", "freq", "score_sum", "score_max"])
