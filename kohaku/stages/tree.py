"""tree stage: parse tables -> the ``nodes`` table (kohaku.tree)."""

from __future__ import annotations

import polars as pl

from kohaku.stage import Stage, StageContext
from kohaku.tree import TreeConfig, build_tree, corpus_report, dropped_problems, format_report


def compute(ctx: StageContext) -> dict[str, pl.DataFrame]:
    cfg: TreeConfig = ctx.config("tree")
    dropped: list[tuple[str, str]] = []
    nodes = build_tree(ctx.table("parse", "documents"), ctx.table("parse", "blocks"), cfg, dropped)
    report = corpus_report(nodes)
    ctx.log.info("tree (%s): %s", cfg.mode, format_report(report))
    ctx.report(mode=cfg.mode, **report, problems=dropped_problems(dropped))
    return {"nodes": nodes}


STAGE = Stage(
    name="tree",
    version="1",
    inputs=("parse",),
    config_keys=("tree",),
    compute=compute,
    outputs=("nodes",),
    configs={"tree": TreeConfig},
)
