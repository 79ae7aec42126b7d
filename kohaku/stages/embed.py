"""embed stage: one unit vector per tree node.

Leaves (nodes without children) are encoded; parents are computed bottom-up from their children
(``weighted``: n_tokens-weighted mean, ``mean``: plain mean, both L2-normalised) or, with
``direct``, encoded from their own text. Encodings are cached per (model, text sha1) under
``<cache.dir>/encodings/`` so re-embedding a grown corpus only encodes the new texts.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import polars as pl

from kohaku.config import build
from kohaku.embedding import EmbedConfig, EncodeStats, Encoder, encode_texts, l2_normalise, load_encoder
from kohaku.stage import Stage, StageContext


def node_arrays(nodes: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(parent row index or -1, has_children) for each row of ``nodes``."""
    ids = nodes["node_id"]
    if ids.n_unique() != nodes.height:
        dup = ids.filter(ids.is_duplicated()).head(3).to_list()
        raise ValueError(f"tree nodes: node_id values are not unique, e.g. {dup}")
    index = pl.DataFrame({"parent_id": ids, "_prow": pl.int_range(nodes.height, eager=True)})
    parent = (
        nodes.select("parent_id")
        .with_row_index("_row")
        .join(index, on="parent_id", how="left")
        .sort("_row")
    )
    prow = parent["_prow"].fill_null(-1).to_numpy().astype(np.int64)
    missing = parent.filter(pl.col("parent_id").is_not_null() & pl.col("_prow").is_null())
    if missing.height:
        row = missing["_row"][0]
        raise ValueError(
            f"tree nodes row {row} ({nodes['node_id'][row]}): parent_id "
            f"'{missing['parent_id'][0]}' is not a node; rebuild the tree stage"
        )
    has_children = np.zeros(nodes.height, dtype=bool)
    has_children[prow[prow >= 0]] = True
    return prow, has_children


def aggregate_parents(
    parent_row: np.ndarray,
    levels: np.ndarray,
    weights: np.ndarray,
    vectors: np.ndarray,
    known: np.ndarray,
    mode: str = "weighted",
) -> np.ndarray:
    """Fill the vectors of unknown nodes bottom-up from their children.

    ``parent_row[i]`` is i's parent row (-1 for roots), ``known[i]`` says ``vectors[i]`` is
    already set (encoded). Each unknown node with children gets the normalised (weighted) mean
    of its children's vectors; ``weights`` are used by ``mode='weighted'`` (clamped to >= 1).
    """
    out = vectors.copy()
    done = known.copy()
    w = np.maximum(weights.astype(np.float64), 1.0) if mode == "weighted" else np.ones(len(levels))
    child = np.flatnonzero(parent_row >= 0)
    for level in sorted(set(levels[~done].tolist()), reverse=True):
        targets = (~done) & (levels == level)
        sel = child[targets[parent_row[child]]]
        if sel.size == 0:
            continue
        if not done[sel].all():
            bad = sel[~done[sel]][0]
            raise ValueError(f"node row {bad} has no vector when its parent needs one")
        order = np.argsort(parent_row[sel], kind="stable")
        sel = sel[order]
        parents = parent_row[sel]
        starts = np.flatnonzero(np.r_[True, parents[1:] != parents[:-1]])
        weighted = out[sel].astype(np.float64) * w[sel, None]
        sums = np.add.reduceat(weighted, starts, axis=0)
        wsum = np.add.reduceat(w[sel], starts)
        rows = parents[starts]
        out[rows] = l2_normalise((sums / wsum[:, None]).astype(np.float32))
        done[rows] = True
    return out


def embed_nodes(
    nodes: pl.DataFrame,
    encoder: Encoder,
    cfg: EmbedConfig,
    cache_root: Path | None,
    stats: EncodeStats | None = None,
    progress: bool = True,
) -> pl.DataFrame:
    """The ``embeddings`` table (node_id, level, vector) for ``nodes``, in the same row order."""
    stats = stats if stats is not None else EncodeStats()
    if nodes.height == 0:
        return pl.DataFrame(
            {"node_id": [], "level": [], "vector": []},
            schema={"node_id": pl.String, "level": pl.Int64,
                    "vector": pl.Array(pl.Float32, encoder.dim)},
        )
    prow, has_children = node_arrays(nodes)
    levels = nodes["level"].to_numpy().astype(np.int64)
    texts = nodes["text"].fill_null("").to_list()
    encode_mask = ~has_children
    if cfg.parents == "direct":
        nonempty = np.array([bool(t.strip()) for t in texts])
        encode_mask |= has_children & np.isin(levels, cfg.direct_levels) & nonempty
    rows = np.flatnonzero(encode_mask)
    vectors = np.zeros((nodes.height, encoder.dim), np.float32)
    vectors[rows] = encode_texts(
        encoder, [texts[i] for i in rows], "document", cache_root, cfg.chunk_size, progress, stats
    )
    if "n_tokens" in nodes.columns:
        weights = nodes["n_tokens"].fill_null(1).to_numpy()
    else:
        weights = np.array([max(len(t.split()), 1) for t in texts])
    mode = "weighted" if cfg.parents == "direct" else cfg.parents
    vectors = aggregate_parents(prow, levels, weights, vectors, encode_mask, mode)
    return pl.DataFrame(
        {
            "node_id": nodes["node_id"],
            "level": nodes["level"].cast(pl.Int64),
            "vector": pl.Series("vector", vectors, dtype=pl.Array(pl.Float32, encoder.dim)),
        }
    )


def compute(ctx: StageContext) -> dict[str, pl.DataFrame]:
    section = ctx.section("embed")
    cfg = build(EmbedConfig, section, "embed")
    nodes = ctx.table("tree", "nodes")
    encoder = ctx.services.get("encoder", section, load_encoder)
    cache_root = Path(str(ctx.cfg.cache.dir)) if cfg.cache else None
    stats = EncodeStats()
    t0 = time.perf_counter()
    table = embed_nodes(nodes, encoder, cfg, cache_root, stats)
    seconds = time.perf_counter() - t0
    ctx.log.info(
        "embedded %d nodes: %d texts, %d distinct, %d cached, %d encoded in %.1fs",
        table.height, stats.n_texts, stats.n_unique, stats.n_cached, stats.n_encoded, seconds,
    )
    ctx.report(
        model=cfg.model,
        dim=encoder.dim,
        n_nodes=table.height,
        parents=cfg.parents,
        encode_seconds=round(seconds, 3),
        texts_per_s=round(stats.n_encoded / seconds, 1) if stats.n_encoded and seconds else None,
        **stats.as_dict(),
    )
    return {"embeddings": table}


STAGE = Stage(
    name="embed",
    version="1",
    inputs=("tree",),
    config_keys=("embed",),
    compute=compute,
    outputs=("embeddings",),
)
