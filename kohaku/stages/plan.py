"""plan stage: questions (+ the tree for rules, an LLM for llm) -> ``queries`` (kohaku.retrieval.planning)."""

from __future__ import annotations

import polars as pl

from kohaku.llm.base import load_backend
from kohaku.llm.cache import open_generation_cache
from kohaku.retrieval.planning import PlannerConfig, plan_queries
from kohaku.runner.stage import Stage, StageContext


def compute(ctx: StageContext) -> dict[str, pl.DataFrame]:
    cfg: PlannerConfig = ctx.config("planner")
    questions = ctx.table("questions", "questions")
    nodes = ctx.table("tree", "nodes") if cfg.kind == "rules" else None
    backend = cache = None
    if cfg.kind == "llm" and cfg.n_queries > 1:
        backend = ctx.services.get("llm", cfg.llm, load_backend)
        cache = open_generation_cache(ctx.cache_dir, backend.identity, cfg.generation_cache)
    table, summary = plan_queries(questions, cfg, nodes, backend, cache)
    ctx.log.info("plan (%s): %d queries for %d questions", cfg.kind, table.height, questions.height)
    ctx.report(**summary)
    return {"queries": table}


STAGE = Stage(name="plan", version="1", inputs=("questions", "tree"), config_keys=("planner",),
              compute=compute, outputs=("queries",), configs={"planner": PlannerConfig},
              llm_configs=("planner.llm",), unkeyed=("planner.generation_cache",))
