"""retrieve stage: plan queries + tree + index (+ the questions, for the evidence rescoring)
-> ``hits``, ``ranking``, ``contexts`` (kohaku.retrieval.retrieve; the contexts table carries
its blocks and their document ids)."""

from __future__ import annotations

import polars as pl

from kohaku.embedding import EmbedConfig, load_encoder
from kohaku.retrieval.retrieve import RetrieveConfig, retrieve
from kohaku.stage import Stage, StageContext


def compute(ctx: StageContext) -> dict[str, pl.DataFrame]:
    cfg: RetrieveConfig = ctx.config("retrieve")
    ecfg: EmbedConfig = ctx.config("embed")
    encoder = ctx.services.get("encoder", ctx.section("embed"), load_encoder)
    tables, summary = retrieve(
        ctx.table("plan", "queries"), ctx.table("tree", "nodes"), ctx.path("index"), encoder, cfg,
        ctx.cache_dir if ecfg.cache else None, lambda: ctx.table("embed", "embeddings"), ctx.log,
        questions=ctx.table("questions", "questions") if cfg.evidence.enabled else None,
    )
    ctx.report(**summary)
    return tables


STAGE = Stage(
    name="retrieve",
    version="4",  # 4: evidence rescoring (questions in); 3: contexts carry blocks
    inputs=("plan", "tree", "embed", "index", "questions"),
    config_keys=("retrieve", "embed"),
    compute=compute,
    outputs=("hits", "ranking", "contexts"),
    configs={"retrieve": RetrieveConfig, "embed": EmbedConfig},
)
