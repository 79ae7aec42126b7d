"""caption stage: parse's ``figures`` -> ``captions`` (kohaku.ingest.captioning).

Off by default (``caption=none``: an empty table, no model). Otherwise every distinct figure
image goes to the vision backend ``caption.llm`` in one batched call through the generation
cache, so a second run with the same figures makes no model call.
"""

from __future__ import annotations

import polars as pl

from kohaku.ingest.captioning import CAPTIONS_SCHEMA, CaptionConfig, caption_figures
from kohaku.llm.base import Counters, load_backend
from kohaku.llm.cache import open_generation_cache
from kohaku.runner.stage import Stage, StageContext


def compute(ctx: StageContext) -> dict[str, pl.DataFrame]:
    cfg: CaptionConfig = ctx.config("caption")
    figures = ctx.table("parse", "figures")
    if not cfg.enabled:
        ctx.report(enabled=False, n_figures=figures.height, n_captions=0)
        return {"captions": pl.DataFrame(schema=CAPTIONS_SCHEMA)}
    # loaded here, not from ctx.services, and closed at once: a vision model is used by no other
    # stage, and on a GPU its engine must be gone before the answering engine starts
    backend = load_backend(cfg.llm)
    try:
        cache = open_generation_cache(ctx.cache_dir, backend.identity, cfg.use_cache)
        counters = Counters()
        captions = caption_figures(figures, backend, cache, cfg, counters)
    finally:
        backend.close()
    empty = captions.filter(pl.col("text") == "").height
    ctx.log.info("captions: %d figure images, %d model calls, %d from the generation cache",
                 captions.height, counters.model_calls, counters.cache_hits)
    ctx.report(enabled=True, model=backend.identity, n_figures=figures.height, n_captions=captions.height,
               empty_captions=empty, **counters.as_dict())
    return {"captions": captions}


STAGE = Stage(
    name="caption",
    version="1",
    inputs=("parse",),
    config_keys=("caption",),
    compute=compute,
    outputs=("captions",),
    configs={"caption": CaptionConfig},
    llm_configs=("caption.llm",),
    unkeyed=("caption.use_cache",),
    summary_events={"empty_captions": "figures with an empty caption"},
)
