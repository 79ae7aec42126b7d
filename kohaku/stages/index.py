"""index stage: one dense index per searchable tree level, plus optional BM25 indexes.

Files in the artifact folder (kohaku.retrieval.search.write_index): ``index.json``, for each
level ``ids_<level>.parquet`` and ``hnsw_<level>.bin`` (kind hnsw) and ``bm25_<level>/``.
Kind ``exact`` stores no vectors: retrieve searches the embed stage's table directly.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import polars as pl
from omegaconf import DictConfig

from kohaku.retrieval.search import IndexConfig, write_index
from kohaku.runner.stage import Stage, StageContext


def compute(ctx: StageContext) -> dict[str, pl.DataFrame]:
    cfg: IndexConfig = ctx.config("index")
    t0 = time.perf_counter()
    meta = write_index(ctx.out_dir, ctx.table("tree", "nodes"), ctx.table("embed", "embeddings"), cfg)
    seconds = time.perf_counter() - t0
    ctx.log.info("index %s over levels %s: %s nodes in %.1fs", cfg.kind, cfg.levels,
                 meta["counts"], seconds)
    ctx.report(kind=cfg.kind, dim=meta["dim"], counts=meta["counts"], bm25=meta["bm25"],
               bm25_stemmer=meta["bm25_stemmer"], bm25_context=cfg.bm25_context,
               build_seconds=round(seconds, 3))
    return {}


@dataclass(frozen=True)
class IndexStage(Stage):
    """``bm25_context`` is in the key only when set (none kept every earlier index key)."""

    def config_slice(self, cfg: DictConfig) -> dict:
        slice_ = super().config_slice(cfg)
        index = dict(slice_["index"])
        if index.get("bm25_context") == "none":
            del index["bm25_context"]
        return {**slice_, "index": index}


STAGE = IndexStage(
    name="index",
    version="1",
    inputs=("tree", "embed"),
    config_keys=("index",),
    compute=compute,
    outputs=(),
    configs={"index": IndexConfig},
)
