"""tree stage: parse tables (+ figure captions) -> the ``nodes`` table (kohaku.ingest.tree).

Captioned figures (the caption stage; none with ``caption=none``) become ``figure`` paragraphs
after the block they follow; without captions the tree is what the blocks alone give.
"""

from __future__ import annotations

import polars as pl

from kohaku.ingest.captioning import figure_blocks
from kohaku.runner.stage import Stage, StageContext
from kohaku.ingest.tree import TreeConfig, build_tree, corpus_report, dropped_problems, format_report


def compute(ctx: StageContext) -> dict[str, pl.DataFrame]:
    cfg: TreeConfig = ctx.config("tree")
    dropped: list[tuple[str, str]] = []
    figures = figure_blocks(ctx.table("parse", "figures"), ctx.table("caption", "captions"))
    nodes = build_tree(ctx.table("parse", "documents"), ctx.table("parse", "blocks"), cfg, dropped, figures)
    report = corpus_report(nodes)
    ctx.log.info("tree (%s): %s", cfg.mode, format_report(report))
    n_figures = nodes.filter((pl.col("block_kind") == "figure") & (pl.col("level") == 2)).height
    if figures.height:
        ctx.log.info("tree: %d captioned figures, %d figure paragraphs", figures.height, n_figures)
    ctx.report(mode=cfg.mode, **report, n_figure_paragraphs=n_figures, problems=dropped_problems(dropped))
    return {"nodes": nodes}


STAGE = Stage(
    name="tree",
    version="3",  # 2: captioned figures as figure paragraphs; 3: a sentence has the page it starts on
    inputs=("parse", "caption"),
    config_keys=("tree",),
    compute=compute,
    outputs=("nodes",),
    configs={"tree": TreeConfig},
)
