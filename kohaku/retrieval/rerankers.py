"""Model rerankers over the top of a question's ranking: a cross-encoder or the LLM.

Both are off by default (``reranker: none``): no cross-encoder ships its weights on PyPI, and an
LLM pass per question costs more than the answer. For users who have them:

- ``cross_encoder``: a sentence-transformers ``CrossEncoder`` (a hub name in the local HF cache,
  a folder, or ``pkg:<module>`` for a model a Python package bundles) scores (question, passage)
  pairs; configured like the embedders (``model``, ``device``, ``batch_size``, ``max_length``).
- ``llm``: the configured LLM backend judges the passages, through the generation cache:
  ``pointwise`` asks one request per passage for a relevance grade 0-3 (schema-constrained),
  ``listwise`` shows the numbered passages of a question in one request and asks for the
  numbers of the relevant ones, best first.

:func:`rerank_rows` re-sorts the first ``top_n`` rows of each ranking by the model's score
(ties, and rows the model could not score, keep their order after the scored ones' ties) and
leaves the rest in place. A passage is the node's text, with its section title in front; a
table row reads after its table's title and column header, as it is matched
(kohaku.retrieval.retrieve.passage_text).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence

import numpy as np

from kohaku.core.config import ConfigError, build
from kohaku.retrieval.embedding import pick_device, resolve_model
from kohaku.core.errors import KohakuError
from kohaku.llm.base import Backend, ChatRequest, Counters
from kohaku.llm.cache import GenerationCache, generate_cached
from kohaku.llm.prompts import check_template, render
from kohaku.llm.json_text import first_json_object

log = logging.getLogger("kohaku.rerank")

KINDS = ("none", "cross_encoder", "llm")
LLM_MODES = ("pointwise", "listwise")
RERANK_FIELDS = ("question", "passage", "passages", "n_passages")

POINTWISE_USER = (
    "Question: {question}\n\nPassage:\n{passage}\n\n"
    "How well does the passage answer the question? 3 = it states the answer, 2 = it holds "
    "part of it, 1 = same topic only, 0 = unrelated. Reply as {{\"score\": N}}."
)
LISTWISE_USER = (
    "Question: {question}\n\nPassages:\n{passages}\n\n"
    "List the numbers of the passages that help answer the question, most useful first "
    "(at most {n_passages}). Reply as {{\"ranking\": [numbers]}}."
)
SYSTEM = "You judge search results for a question answering system. Reply with one JSON object only."


@dataclass
class RerankerConfig:
    """The ``reranker`` config group (conf/reranker/*.yaml; kohaku/retrieval/rerankers.py)."""

    kind: str = "none"  # none | cross_encoder | llm
    top_n: int = 30  # ranked nodes rescored per (question, attempt)
    max_passage_chars: int = 1200  # a passage is cut to this many characters
    # cross_encoder
    # pkg:<module> (bundled) | hub name (local HF cache) | folder
    model: str = ""
    device: str = "auto"  # auto (as the embedder: cuda, mps, else cpu) | cpu | cuda | cuda:N
    batch_size: int = 32            # (question, passage) pairs per cross-encoder batch
    max_length: int = 512  # tokens per (question, passage) pair
    # llm
    llm: Any = None  # the llm config (conf/reranker/llm.yaml: llm: ${llm})
    mode: str = "pointwise"  # pointwise (a grade per passage) | listwise (one list per question)
    system: str = SYSTEM            # llm reranker: system prompt
    user: str = ""  # prompt; empty = the built-in one of the mode
    max_tokens: int = 64  # room for the JSON answer (listwise: raised to fit top_n numbers)
    seed: int = 0                   # llm reranker: sampling seed
    generation_cache: bool = True  # reuse judgements under <cache.dir>/llm/

    def validate(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"reranker.kind={self.kind!r}; choose one of {', '.join(KINDS)}")
        if self.top_n < 1:
            raise ConfigError("reranker.top_n must be >= 1")
        if self.kind == "cross_encoder" and not self.model:
            raise ConfigError("reranker.kind=cross_encoder needs reranker.model (a CrossEncoder "
                              "folder, hub name in the local cache, or pkg:<module>)")
        if self.kind == "llm":
            if self.mode not in LLM_MODES:
                raise ConfigError(f"reranker.mode={self.mode!r}; choose one of {', '.join(LLM_MODES)}")
            if not self.llm:
                raise ConfigError("reranker.kind=llm needs reranker.llm (conf/reranker/llm.yaml "
                                  "sets llm: ${llm})")
            check_template(self.system, RERANK_FIELDS, "reranker.system")
            check_template(self.prompt, RERANK_FIELDS, "reranker.user")

    @property
    def enabled(self) -> bool:
        return self.kind != "none"

    @property
    def prompt(self) -> str:
        return self.user or (POINTWISE_USER if self.mode == "pointwise" else LISTWISE_USER)


class Reranker(Protocol):
    def score(self, items: Sequence[tuple[str, Sequence[str]]]) -> list[list[float]]:
        """For each (question, passages): one score per passage, higher is better; NaN where
        the model gave none."""
        ...


# ------------------------------------------------------------------------------ cross-encoder

class CrossEncoderReranker:
    """sentence-transformers ``CrossEncoder`` over (question, passage) pairs; all pairs of all
    questions go through one ``predict`` call (batched by ``batch_size``)."""

    def __init__(self, cfg: RerankerConfig) -> None:
        from sentence_transformers import CrossEncoder

        path = resolve_model(cfg.model, "reranker.model")
        try:
            self.model = CrossEncoder(path, device=pick_device(cfg.device), max_length=cfg.max_length,
                                      local_files_only=True)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"reranker.model={cfg.model!r}: cannot load a CrossEncoder from "
                              f"{path} ({exc}); give a local folder or a model in the HF cache") from exc
        self.batch_size = cfg.batch_size
        self.model_id = cfg.model

    def score(self, items: Sequence[tuple[str, Sequence[str]]]) -> list[list[float]]:
        pairs = [(q, p) for q, passages in items for p in passages]
        if not pairs:
            return [[] for _ in items]
        raw = np.asarray(self.model.predict(pairs, batch_size=self.batch_size,
                                            show_progress_bar=False, convert_to_numpy=True))
        flat = raw.reshape(len(pairs), -1)[:, -1].astype(np.float64)  # one logit per pair
        out, i = [], 0
        for _, passages in items:
            out.append(flat[i: i + len(passages)].tolist())
            i += len(passages)
        return out


# ---------------------------------------------------------------------------------------- llm

def pointwise_schema() -> dict[str, Any]:
    return {"type": "object", "properties": {"score": {"type": "integer", "enum": [0, 1, 2, 3]}},
            "required": ["score"], "additionalProperties": False}


def listwise_schema(n: int) -> dict[str, Any]:
    return {"type": "object",
            "properties": {"ranking": {"type": "array", "maxItems": n,
                                       "items": {"type": "integer", "enum": list(range(1, n + 1))}}},
            "required": ["ranking"], "additionalProperties": False}


def parse_pointwise(text: str) -> float:
    obj = first_json_object(text)
    value = obj.get("score") if obj else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 3:
        return math.nan
    return float(value)


def parse_listwise(text: str, n: int) -> list[float]:
    """Scores from a listed order: the k-th listed passage (1-based numbers) gets n - k + 1,
    unlisted passages 0; an unreadable answer gives NaN for all."""
    obj = first_json_object(text)
    order = obj.get("ranking") if obj else None
    if not isinstance(order, list):
        return [math.nan] * n
    scores = [0.0] * n
    seen: set[int] = set()
    for k, item in enumerate(order):
        if isinstance(item, bool) or not isinstance(item, int) or not 1 <= item <= n or item in seen:
            continue
        seen.add(item)
        scores[item - 1] = float(n - k)
    return scores


class LLMReranker:
    """The answering backend as a judge, through the generation cache."""

    def __init__(self, cfg: RerankerConfig, backend: Backend, cache: GenerationCache | None) -> None:
        self.cfg = cfg
        self.backend = backend
        self.cache = cache
        self.counters = Counters()
        self.invalid = 0

    def _request(self, user: str, schema: dict[str, Any], max_tokens: int) -> ChatRequest:
        msgs = []
        if self.cfg.system:
            msgs.append({"role": "system", "content": self.cfg.system})
        msgs.append({"role": "user", "content": user})
        return ChatRequest(messages=msgs, n=1, temperature=0.0, max_tokens=max_tokens,
                           seed=self.cfg.seed, json_schema=schema)

    def score(self, items: Sequence[tuple[str, Sequence[str]]]) -> list[list[float]]:
        cfg = self.cfg
        reqs: list[ChatRequest] = []
        if cfg.mode == "pointwise":
            for q, passages in items:
                for p in passages:
                    reqs.append(self._request(render(cfg.prompt, question=q, passage=p, passages="",
                                                     n_passages=1), pointwise_schema(), cfg.max_tokens))
        else:
            for q, passages in items:
                listing = "\n".join(f"[{i}] {p}" for i, p in enumerate(passages, 1))
                n = len(passages)
                reqs.append(self._request(render(cfg.prompt, question=q, passage="", passages=listing,
                                                 n_passages=n), listwise_schema(n),
                                          max(cfg.max_tokens, 8 + 4 * n)))
        samples = generate_cached(self.backend, reqs, self.cache, self.counters) if reqs else []
        texts = [s[0].text for s in samples]
        out: list[list[float]] = []
        i = 0
        for _, passages in items:
            if cfg.mode == "pointwise":
                scores = [parse_pointwise(t) for t in texts[i: i + len(passages)]]
                i += len(passages)
            else:
                scores = parse_listwise(texts[i], len(passages)) if passages else []
                i += 1 if passages else 0
            self.invalid += sum(math.isnan(s) for s in scores)
            out.append(scores)
        return out


# ----------------------------------------------------------------------------------- reranking

def rerank_rows(
    rankings: Mapping[Any, Sequence[int]],
    questions: Mapping[Any, str],
    passage: Any,
    reranker: Reranker,
    top_n: int,
) -> dict[Any, list[int]]:
    """Each ranking with its first ``top_n`` rows re-sorted by ``reranker`` (scored rows first,
    by score, ties in their old order; unscored rows after them in their old order).
    ``passage(row)`` gives a row's text; all rankings are scored in one ``reranker.score``."""
    keys = list(rankings)
    items = [(questions.get(k, ""), [passage(int(r)) for r in list(rankings[k])[:top_n]]) for k in keys]
    scores = reranker.score(items)
    if len(scores) != len(items) or any(len(s) != len(it[1]) for s, it in zip(scores, items)):
        raise KohakuError("reranker returned a different number of scores than passages; "
                          "check the reranker implementation")
    out = {}
    for k, sc in zip(keys, scores):
        rows = list(rankings[k])
        head = rows[:top_n]
        s = np.asarray(sc, np.float64)
        known = ~np.isnan(s)
        # known scores first (best first), then the unknown ones; old rank breaks ties
        order = np.lexsort((np.arange(len(head)), np.where(known, -s, 0.0), ~known))
        out[k] = [head[i] for i in order] + rows[top_n:]
    return out


def load_reranker(cfg: Mapping[str, Any] | RerankerConfig) -> Reranker:
    """Factory for ``ctx.services.get("reranker", cfg, load_reranker)`` (cross-encoder only:
    the LLM reranker is built around the shared backend by the caller)."""
    rcfg = cfg if isinstance(cfg, RerankerConfig) else build(RerankerConfig, cfg, "reranker")
    if rcfg.kind != "cross_encoder":
        raise ConfigError(f"load_reranker builds cross-encoders; reranker.kind={rcfg.kind!r}")
    return CrossEncoderReranker(rcfg)
