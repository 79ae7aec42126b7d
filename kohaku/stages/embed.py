"""embed stage: one unit vector per tree node (kohaku.retrieval.embedding.embed_nodes).

Leaves are encoded, parents aggregated bottom-up; encodings are cached per (model, text) under
``<cache.dir>/encodings/`` so re-embedding a grown corpus only encodes the new texts.
``embed.context`` (default none) puts each node's document title and section path in front of
the text encoded (kohaku.retrieval.embedding.context_texts); the encodings are keyed by that text.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import polars as pl
from omegaconf import DictConfig

from kohaku.retrieval.embedding import (EmbedConfig, EncodeStats, embed_nodes, int8_identity, load_encoder,
                              pick_device, pick_dtype)
from kohaku.retrieval.ray_embed import RayEncoder
from kohaku.runner.stage import Stage, StageContext


def compute(ctx: StageContext) -> dict[str, pl.DataFrame]:
    cfg: EmbedConfig = ctx.config("embed")
    nodes = ctx.table("tree", "nodes")
    ray = ctx.ray()  # run.executor=ray: the chunks through Ray Data actors (the same vectors)
    encoder = (RayEncoder(ray, ctx.section("embed")) if ray else
               ctx.services.get("encoder", ctx.section("embed"), load_encoder))
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
        context=cfg.context,
        encode_seconds=round(seconds, 3),
        texts_per_s=round(stats.n_encoded / seconds, 1) if stats.n_encoded and seconds else None,
        executor="ray" if ray else "local",
        **stats.as_dict(),
    )
    return {"embeddings": table}


@dataclass(frozen=True)
class EmbedStage(Stage):
    """The embed key leaves out what cannot change the vectors' meaning: ``context`` while it is
    ``none`` (so adding the key kept every earlier embed key) and ``torch_threads``. When the
    dtype resolves to int8 on this machine, the key holds the export's identity (recipe, sha256,
    the versions that made it) and the onnxruntime version, so a new export or runtime re-embeds."""

    def config_slice(self, cfg: DictConfig) -> dict:
        slice_ = super().config_slice(cfg)
        embed = dict(slice_["embed"])
        if embed.get("context") == "none":
            del embed["context"]
        embed["torch_threads"] = 0
        model = str(embed.get("model", ""))
        if embed.get("dtype") in ("auto", "int8") and not model.startswith("hash:"):
            ecfg = self.typed(cfg, "embed")
            device = pick_device(ecfg.device)
            if device == "cpu" and pick_dtype(ecfg.dtype, device, ecfg.cpu_fallback) == "int8":
                embed["int8"] = int8_identity(ecfg)
        return {**slice_, "embed": embed}


STAGE = EmbedStage(
    name="embed",
    version="1",
    inputs=("tree",),
    config_keys=("embed",),
    compute=compute,
    outputs=("embeddings",),
    configs={"embed": EmbedConfig},
)
