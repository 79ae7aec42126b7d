"""index stage: one dense index per searchable tree level, plus optional BM25 indexes.

Files in the artifact folder: ``index.json`` (kind, dim, levels, counts, ef), for each level
``ids_<level>.parquet`` (label -> node_id), ``hnsw_<level>.bin`` (kind hnsw; built with
``num_threads`` threads, 1 = reproducible) and ``bm25_<level>/`` (bm25s' own files). Kind
``exact`` stores no vectors: retrieve searches the embed stage's table directly.
"""

from __future__ import annotations

import time

import polars as pl

from kohaku.config import build
from kohaku.retrieval.search import IndexConfig, write_index
from kohaku.stage import Stage, StageContext


def compute(ctx: StageContext) -> dict[str, pl.DataFrame]:
    cfg = build(IndexConfig, ctx.section("index"), "index")
    nodes = ctx.table("tree", "nodes")
    embeddings = ctx.table("embed", "embeddings")
    t0 = time.perf_counter()
    meta = write_index(ctx.out_dir, nodes, embeddings, cfg)
    seconds = time.perf_counter() - t0
    ctx.log.info("index %s over levels %s: %s nodes in %.1fs", cfg.kind, cfg.levels,
                 meta["counts"], seconds)
    ctx.report(kind=cfg.kind, dim=meta["dim"], counts=meta["counts"], bm25=meta["bm25"],
               bm25_stemmer=meta["bm25_stemmer"], build_seconds=round(seconds, 3))
    return {}


STAGE = Stage(
    name="index",
    version="1",
    inputs=("tree", "embed"),
    config_keys=("index",),
    compute=compute,
    outputs=(),
)
