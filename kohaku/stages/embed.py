"""embed stage: one unit vector per tree node (kohaku.embedding.embed_nodes).

Leaves are encoded, parents aggregated bottom-up; encodings are cached per (model, text) under
``<cache.dir>/encodings/`` so re-embedding a grown corpus only encodes the new texts.
"""

from __future__ import annotations

import time

import polars as pl

from kohaku.embedding import EmbedConfig, EncodeStats, embed_nodes, load_encoder
from kohaku.stage import Stage, StageContext


def compute(ctx: StageContext) -> dict[str, pl.DataFrame]:
    cfg: EmbedConfig = ctx.config("embed")
    nodes = ctx.table("tree", "nodes")
    encoder = ctx.services.get("encoder", ctx.section("embed"), load_encoder)
    stats = EncodeStats()
    t0 = time.perf_counter()
    table = embed_nodes(nodes, encoder, cfg, ctx.cache_dir if cfg.cache else None, stats)
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
    configs={"embed": EmbedConfig},
)
