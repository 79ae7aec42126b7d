"""retrieve stage: plan queries + tree + index (+ the questions, for the evidence rescoring, a
reranker, ``retrieve.restrict_column`` and the document prior ``retrieve.doc_prior``, which
also reads the corpus metadata, corpus.metadata) -> ``hits``, ``ranking``, ``contexts``
(kohaku.retrieval.retrieve; the contexts table carries its blocks and their document ids).

When the task has gold evidence (``task.gold``, kohaku.retrieval.gold.GoldSpec; skipped when
the config has no such key), the summary reports doc, page, page±1 and evidence-text recall of
attempt 0's contexts; a gold page outside its document stops the stage with the file and row.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
from omegaconf import DictConfig, OmegaConf

from kohaku.ingest.corpus import CorpusConfig, CorpusFileNotFound, read_metadata
from kohaku.retrieval.embedding import EmbedConfig, load_encoder
from kohaku.llm.base import load_backend
from kohaku.llm.cache import open_generation_cache
from kohaku.retrieval.gold import GoldSpec, gold_figures, gold_path
from kohaku.retrieval.rerankers import LLMReranker, RerankerConfig, load_reranker
from kohaku.retrieval.retrieve import RetrieveConfig, retrieve
from kohaku.runner.stage import Stage, StageContext, optional_config


def _reranker(ctx: StageContext, rcfg: RerankerConfig):
    if rcfg.kind == "cross_encoder":
        return ctx.services.get("reranker", ctx.section("reranker"), load_reranker)
    if rcfg.kind == "llm":
        backend = ctx.services.get("llm", rcfg.llm, load_backend)
        return LLMReranker(rcfg, backend, open_generation_cache(ctx.cache_dir, backend.identity,
                                                                rcfg.generation_cache))
    return None


def _doc_meta(ctx: StageContext, cfg: RetrieveConfig) -> pl.DataFrame | None:
    """The corpus metadata (every column of metadata.csv: company, doc_period, ...) for the
    document prior, and for the words naming a restricted question's documents
    (retrieve.bm25_drop_named, retrieve.evidence.named_weight); the parse stage's documents table
    (id, title, year, type) without it."""
    if not (cfg.doc_prior.active or cfg.restrict_column):
        return None
    path = _metadata_path(ctx.cfg)
    if path is not None:
        try:
            return read_metadata(path)
        except CorpusFileNotFound:
            pass
    return ctx.table("parse", "documents") if "parse" in ctx.input_dirs else None


def _metadata_path(cfg: DictConfig) -> Path | None:
    root = OmegaConf.select(cfg, "corpus.root", default=None)
    meta = OmegaConf.select(cfg, "corpus.metadata", default="metadata.csv")
    return CorpusConfig(root=str(root), metadata=str(meta)).metadata_path if root is not None and meta else None


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
                   if cfg.evidence.enabled or rcfg.enabled or cfg.restrict_column
                   or cfg.doc_prior.active else None),
        reranker=reranker, rerank_cfg=rcfg, doc_meta=_doc_meta(ctx, cfg),
    )
    gold = optional_config(ctx.cfg, "task.gold", GoldSpec)
    if gold is not None and gold.file:
        summary.update(gold_figures(
            gold, ctx.section("corpus.root"), tables["contexts"], ctx.table("tree", "nodes"),
            ctx.table("parse", "documents"), ctx.table("questions", "questions")["qid"].cast(pl.String).to_list()))
    if isinstance(reranker, LLMReranker):
        summary.update({f"rerank_{k}": v for k, v in reranker.counters.as_dict().items()},
                       rerank_invalid=reranker.invalid)
    ctx.report(**summary)
    return tables


def gold_files(cfg: DictConfig) -> list[Path]:
    """file_inputs: the task's gold evidence file and the corpus metadata (the document prior
    reads it; their content is part of the key)."""
    spec = optional_config(cfg, "task.gold", GoldSpec)
    path = gold_path(spec, str(OmegaConf.select(cfg, "corpus.root", default="."))) if spec else None
    meta = _metadata_path(cfg)
    return [p for p in (path, meta) if p is not None and p.is_file()]


STAGE = Stage(
    name="retrieve",
    # 6: doc_prior (the corpus metadata in); 5: restrict_column, gold recall in the summary;
    # 4: evidence rescoring and rerankers (questions in); 3: contexts carry blocks
    version="6",
    inputs=("plan", "tree", "embed", "index", "questions", "parse"),  # parse: gold page checks
    # task.gold: the gold figures of the summary (the gold file's content is a file input)
    config_keys=("retrieve", "embed", "reranker", "task.gold"),
    compute=compute,
    file_inputs=gold_files,
    outputs=("hits", "ranking", "contexts"),
    configs={"retrieve": RetrieveConfig, "embed": EmbedConfig, "reranker": RerankerConfig, "task.gold": GoldSpec},
    llm_configs=("reranker.llm",),
    # the query encoder's thread count and the cache-use flags cannot change a ranking
    unkeyed=("embed.torch_threads", "embed.cache", "reranker.generation_cache"),
)
