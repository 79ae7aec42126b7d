"""Captioning figures with a vision-language model: the ``figures`` table -> ``captions``.

Each distinct figure image (by its PNG's SHA-256) is sent once, as one chat request whose user
message holds the prompt and the image as an OpenAI-style ``image_url`` part (a ``data:`` URL):
the form vLLM's multimodal ``LLM.chat`` and every OpenAI-compatible server take. All figures go
in one batched backend call through the generation cache (kohaku/llm/cache.py), whose key is the
backend identity, the messages (prompt + image bytes) and the sampling parameters: a corpus is
captioned once across every sweep, and changing only the prompt recaptions it.

:func:`figure_blocks` turns figures with captions into the blocks the tree inserts after the
block each figure follows: text ``[Figure, page N] <the PDF's caption line> <description>``.
"""

from __future__ import annotations

import base64
import logging
from dataclasses import dataclass
from typing import Any

import polars as pl
from tqdm import tqdm

from kohaku.llm.base import Backend, ChatRequest, Counters, short_hash
from kohaku.llm.cache import GenerationCache, generate_cached

log = logging.getLogger(__name__)

DEFAULT_PROMPT = (
    "This image is a figure from a technical document. Describe it for a reader who has to answer "
    "questions from it without seeing it. Say what kind of figure it is and its title; name the "
    "axes with their quantities and units; name every series, category or legend entry; give "
    "every value that can be read from it (with its unit and the category or point it belongs "
    "to); then state the trend or comparison it shows. Write plain sentences, no lists, and do "
    "not guess values that cannot be read."
)

CAPTIONS_SCHEMA = {
    "sha256": pl.String,
    "model": pl.String,
    "prompt_hash": pl.String,
    "text": pl.String,
    "completion_tokens": pl.Int64,
    "finish_reason": pl.String,
    "cached": pl.Boolean,
}
BLOCK_COLUMNS = {
    "doc_id": pl.String, "figure": pl.Int64, "page": pl.Int64, "after_order": pl.Int64, "text": pl.String,
    "replaces_orders": pl.List(pl.Int64),
}


@dataclass
class CaptionConfig:
    """The ``caption`` config group.

    llm: the vision-capable backend, with the keys of the ``llm`` group (backend, model, ...);
         null (``caption=none``, the default) leaves figures uncaptioned and the tree as it is.
    """

    llm: dict[str, Any] | None = None
    prompt: str = DEFAULT_PROMPT    # the instruction sent with each figure's image
    max_tokens: int = 768           # most tokens of one caption
    temperature: float = 0.0        # sampling temperature (0: greedy, the same caption every run)
    seed: int = 0                   # sampling seed
    use_cache: bool = True          # the generation cache under cache.dir

    def validate(self) -> None:
        if self.llm is not None and not self.llm.get("backend"):
            raise ValueError("llm has no 'backend'; pick an option (caption=fake, caption=openai, "
                             "caption=vllm_qwen2_5_vl_7b) or set caption.llm.backend")
        if not str(self.prompt).strip():
            raise ValueError("prompt is empty; set caption.prompt")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens={self.max_tokens}: use at least 1")

    @property
    def enabled(self) -> bool:
        return self.llm is not None


def data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def image_messages(prompt: str, png: bytes) -> list[dict[str, Any]]:
    """One user message: the prompt as a text part, then the image as an ``image_url`` part."""
    return [{"role": "user", "content": [
        {"type": "text", "text": prompt},
        {"type": "image_url", "image_url": {"url": data_url(png)}},
    ]}]


def caption_requests(figures: pl.DataFrame, cfg: CaptionConfig) -> tuple[list[str], list[ChatRequest]]:
    """(sha256, request) for every distinct rendered image of ``figures``, in hash order."""
    seen: dict[str, bytes] = {}
    for sha, image in zip(figures["sha256"].to_list(), figures["image"].to_list()):
        if image and sha not in seen:
            seen[sha] = image
    shas = sorted(seen)
    requests = [ChatRequest(messages=image_messages(cfg.prompt, seen[s]), n=1, temperature=cfg.temperature,
                            max_tokens=cfg.max_tokens, seed=cfg.seed) for s in shas]
    return shas, requests


def caption_figures(figures: pl.DataFrame, backend: Backend, cache: GenerationCache | None,
                    cfg: CaptionConfig, counters: Counters) -> pl.DataFrame:
    """The ``captions`` table: one row per distinct figure image (sha256, the backend identity,
    the prompt's hash, the text). One batched backend call for every image the cache lacks."""
    shas, requests = caption_requests(figures, cfg)
    if not requests:
        return pl.DataFrame(schema=CAPTIONS_SCHEMA)
    log.info("captioning %d figure image(s) with %s", len(requests), backend.identity)
    samples = generate_cached(backend, requests, cache, counters)
    prompt_hash = short_hash(cfg.prompt)
    rows = []
    for sha, (sample,) in tqdm(zip(shas, samples), total=len(shas), desc="captions", unit="fig",
                               disable=len(shas) < 50):
        text = " ".join((sample.text or "").split())
        if not text:
            log.warning("figure image %s: %s returned an empty caption; the figure stays out of "
                        "the tree (check caption.max_tokens and the model)", sha[:12], backend.identity)
        rows.append({"sha256": sha, "model": backend.identity, "prompt_hash": prompt_hash,
                     "text": text, "completion_tokens": int(sample.completion_tokens),
                     "finish_reason": sample.finish_reason, "cached": sample.cached})
    return pl.DataFrame(rows, schema=CAPTIONS_SCHEMA)


def figure_text(page: int | None, caption_line: str, description: str) -> str:
    """A figure paragraph's text: the marker, the PDF's caption line, the model's description
    (an image file of an images/ corpus has no page: ``[Figure]``)."""
    parts = ["[Figure]" if page is None else f"[Figure, page {int(page)}]"]
    line = " ".join((caption_line or "").split())
    if line:
        parts.append(line if line.endswith((".", ":", "!", "?")) else line + ".")
    parts.append(description.strip())
    return " ".join(p for p in parts if p)


def figure_blocks(figures: pl.DataFrame, captions: pl.DataFrame) -> pl.DataFrame:
    """Figures with a non-empty caption as blocks for the tree (doc_id, figure, page,
    after_order, text, replaces_orders: the blocks the figure paragraph stands for, its caption
    paragraph and its text labels), in document order. No caption rows: an empty table."""
    if figures.height == 0 or captions.height == 0:
        return pl.DataFrame(schema=BLOCK_COLUMNS)
    text_of = {s: t for s, t in zip(captions["sha256"].to_list(), captions["text"].to_list()) if t}
    rows = []
    for f in figures.sort(["doc_id", "figure"]).iter_rows(named=True):
        description = text_of.get(f["sha256"])
        if description:
            rows.append({"doc_id": f["doc_id"], "figure": f["figure"], "page": f["page"],
                         "after_order": f["after_order"],
                         "text": figure_text(f["page"], f["caption"], description),
                         "replaces_orders": list(f.get("replaces_orders") or [])})
    return pl.DataFrame(rows, schema=BLOCK_COLUMNS)
