"""The LLM backend interface: chat requests in, completions out, one batched call per list.

Every backend (hf, vllm, openai, fake) implements :class:`Backend`. Stages never import a backend
module directly; they ask ``load_backend(llm_cfg)`` (through ``ctx.services``), which picks the
implementation from ``llm.backend``.

Sampling contract shared by all backends (the generation cache relies on it): sample ``k`` of a
request with ``n`` samples and ``seed=s`` is drawn with seed ``s + k``, so it is the same sample
that a request with ``n=1, seed=s+k`` returns. vLLM does exactly this for ``n>1`` (each child
request gets ``seed + index``); the hf backend seeds one generator per sequence; the openai backend
sends one HTTP request per sample when ``llm.per_sample_seed`` is true.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from dataclasses import dataclass
from typing import Any, Callable, Protocol, runtime_checkable

from kohaku.errors import KohakuError


class BackendError(KohakuError, RuntimeError):
    """A backend failed; the message names the model and the config key to change."""


@dataclass
class ChatRequest:
    """One chat prompt and how to sample from it.

    messages:    ``[{"role": "system"|"user"|"assistant", "content": str}, ...]``
    n:           number of samples (sample k uses seed ``seed + k``)
    temperature: 0 means greedy decoding
    json_schema: when set, the output is constrained to JSON matching this schema
    """

    messages: list[dict[str, str]]
    n: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 512
    seed: int = 0
    json_schema: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"ChatRequest.n must be >= 1, got {self.n}")
        if self.max_tokens < 1:
            raise ValueError(f"ChatRequest.max_tokens must be >= 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise ValueError(f"ChatRequest.temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"ChatRequest.top_p must be in (0, 1], got {self.top_p}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "messages": self.messages,
            "n": self.n,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
            "json_schema": self.json_schema,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ChatRequest":
        return cls(**d)


@dataclass
class Completion:
    """The n samples of one request.

    prompt_tokens:     tokens of the rendered prompt (counted once, shared by the samples)
    completion_tokens: generated tokens per sample
    finish_reasons:    per sample, "stop" (end of sequence) or "length" (hit max_tokens)
    seconds:           this request's share of the wall time of the batched call
    """

    texts: list[str]
    prompt_tokens: int
    completion_tokens: list[int]
    finish_reasons: list[str]
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "texts": self.texts,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "finish_reasons": self.finish_reasons,
            "seconds": self.seconds,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Completion":
        return cls(**d)


@runtime_checkable
class Backend(Protocol):
    """What every backend provides."""

    @property
    def identity(self) -> str:
        """Model + revision + backend (+ weights digest): the generation cache's namespace."""

    @property
    def max_context(self) -> int:
        """Tokens the model accepts (prompt + completion)."""

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` with the model's tokenizer (no special tokens)."""

    def generate(self, requests: list[ChatRequest]) -> list[Completion]:
        """All requests in one batched call; completions in input order."""

    def close(self) -> None:
        """Release the model (GPU memory, worker processes)."""


def identity_of(llm_cfg: dict[str, Any]) -> str:
    """The identity string of an llm config, computed without loading anything."""
    backend = llm_cfg.get("backend", "?")
    model = llm_cfg.get("model", "?")
    revision = llm_cfg.get("revision") or "main"
    ident = f"{backend}:{model}@{revision}"
    gguf = llm_cfg.get("gguf") or {}
    if isinstance(gguf, dict) and gguf.get("sha256"):
        ident += f"#gguf-{str(gguf['sha256'])[:16]}"
    if backend == "fake":
        ident += f"#{llm_cfg.get('script', 'default')}"
    return ident


def short_hash(obj: Any, n: int = 16) -> str:
    """A stable hex digest of a JSON-serialisable object."""
    data = json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str).encode()
    return hashlib.sha256(data).hexdigest()[:n]


# backend name -> "module:factory"; factories take the llm config dict.
BACKENDS: dict[str, str] = {
    "hf": "kohaku.llm.hf:HFBackend.from_config",
    "vllm": "kohaku.llm.vllm_backend:from_config",
    "openai": "kohaku.llm.openai_backend:OpenAIBackend.from_config",
    "fake": "kohaku.llm.fake:FakeBackend.from_config",
}


def _resolve(target: str) -> Callable[[dict[str, Any]], Backend]:
    module, _, attr = target.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def load_backend(llm_cfg: dict[str, Any]) -> Backend:
    """Create the backend named by ``llm.backend`` (hf / vllm / openai / fake)."""
    name = llm_cfg.get("backend")
    if name not in BACKENDS:
        raise BackendError(
            f"llm.backend={name!r} is not a backend; choose one of {', '.join(BACKENDS)} "
            f"(config group llm=..., e.g. llm=smollm2_cpu)"
        )
    return _resolve(BACKENDS[name])(dict(llm_cfg))


@dataclass
class Counters:
    """What a stage reports about its LLM use."""

    model_calls: int = 0
    prompts: int = 0
    samples: int = 0
    cache_hits: int = 0
    deduped: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "model_calls": self.model_calls,
            "prompts": self.prompts,
            "samples": self.samples,
            "cache_hits": self.cache_hits,
            "deduped": self.deduped,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "seconds": round(self.seconds, 3),
        }
