"""retrieve stage: plan queries + tree + index (+ the questions, for the evidence rescoring and
a reranker) -> ``hits``, ``ranking``, ``contexts`` (kohaku.retrieval.retrieve; the contexts
table carries its blocks and their document ids)."""

from __future__ import annotations

import polars as pl

from kohaku.embedding import EmbedConfig, load_encoder
from kohaku.llm.base import load_backend
from kohaku.llm.cache import open_generation_cache
from kohaku.retrieval.rerankers import LLMReranker, RerankerConfig, load_reranker
from kohaku.retrieval.retrieve import RetrieveConfig, retrieve
from kohaku.stage import Stage, StageContext


def _reranker(ctx: StageContext, rcfg: RerankerConfig):
    if rcfg.kind == "cross_encoder":
        return ctx.services.get("reranker", ctx.section("reranker"), load_reranker)
    if rcfg.kind == "llm":
        backend = ctx.services.get("llm", rcfg.llm, load_backend)
        return LLMReranker(rcfg, backend, open_generation_cache(ctx.cache_dir, backend.identity,
                                                                rcfg.generation_cache))
    return None


def compute(ctx: StageContext) -> dict[str, pl.DataFrame]:
    cfg: RetrieveConfig = ctx.config("retrieve")
    ecfg: EmbedConfig = ctx.config("embed")
    rcfg: RerankerConfig = ctx.config("reranker")
    encoder = ctx.services.get("encoder", ctx.section("embed"), load_encoder)
    reranker = _reranker(ctx, rcfg)
    tables, summary = retrieve(
        ctx.table("plan", "queries"), ctx.table("tree", "nodes"), ctx.path("index"), encoder, cfg,
        ctx.cache_dir if ecfg.cache else None, lambda: ctx.table("embed", "embeddings"), ctx.log,
        questions=(ctx.table("questions", "questions")
                   if cfg.evidence.enabled or rcfg.enabled else None),
        reranker=reranker, rerank_cfg=rcfg,
    )
    if isinstance(reranker, LLMReranker):
        summary.update({f"rerank_{k}": v for k, v in reranker.counters.as_dict().items()},
                       rerank_invalid=reranker.invalid)
    ctx.report(**summary)
    return tables


STAGE = Stage(
    name="retrieve",
    version="4",  # 4: evidence rescoring and rerankers (questions in); 3: contexts carry blocks
    inputs=("plan", "tree", "embed", "index", "questions"),
    config_keys=("retrieve", "embed", "reranker"),
    compute=compute,
    outputs=("hits", "ranking", "contexts"),
    configs={"retrieve": RetrieveConfig, "embed": EmbedConfig, "reranker": RerankerConfig},
)
