"""tree stage: parse tables (+ figure captions) -> the ``nodes`` table (kohaku.ingest.tree).

Captioned figures (the caption stage; none with ``caption=none``) become ``figure`` paragraphs
after the block they follow; without captions the tree is what the blocks alone give. The
summary's problems name every document of the parse stage's table that is not in the tree, with
its reason (the run's one list of the documents left out; run.json keeps it whole).
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
    documents = ctx.table("parse", "documents")
    problems = dropped_problems(dropped, documents, nodes)   # every document not in the tree, named
    ctx.report(mode=cfg.mode, **report, n_figure_paragraphs=n_figures, n_left_out=problems["count"],
               problems=problems)
    return {"nodes": nodes}


STAGE = Stage(
    name="tree",
    version="4",  # 2: captioned figures as figure paragraphs; 3: a sentence has the page it starts on;
    # 4: the summary names every document not in the tree (parse failures too), n_left_out
    inputs=("parse", "caption"),
    config_keys=("tree",),
    compute=compute,
    outputs=("nodes",),
    configs={"tree": TreeConfig},
)
