"""The LLM backend interface: chat requests in, completions out, one batched call per list.

Every backend (hf, vllm, openai, fake) implements :class:`Backend`. Stages never import a backend
module directly; they ask ``load_backend(llm_cfg)`` (through ``ctx.services``), which picks the
implementation from ``llm.backend``.

Sampling contract shared by all backends (the generation cache relies on it): sample ``k`` of a
request with ``n`` samples and ``seed=s`` is drawn with seed ``s + k``, so it is the same sample
that a request with ``n=1, seed=s+k`` returns. vLLM does exactly this for ``n>1`` (each child
request gets ``seed + index``); the hf backend seeds one generator per sequence; the openai backend
sends one HTTP request per sample when ``llm.per_sample_seed`` is true.

Generation-cache key: a sample is keyed by the backend identity, the messages, the effective seed
and :func:`request_params` of the request: everything else that reaches the model, as the backend
actually sends it. A backend whose request carries more than :func:`sent_params` (the openai
backend's response_format after ``drop_schema_keys`` and its ``extra_body``; vLLM's chat template
options) says so with a ``cache_params(req)`` method, so a setting that can change an output
changes the key and nothing else does. The same identity is in the cache key of every stage
whose config holds the llm config (:func:`key_config`), so neither a cached sample nor a cached
artifact made by another decoder, library version or dtype is reused.

Completions as they finish: a backend whose ``generate`` accepts ``on_complete`` calls
``on_complete(index, first, completion)`` for every part of a request as soon as it is done
(``completion`` holds samples ``first, first + 1, ...`` of ``requests[index]``), so the generation
cache stores each sample when it completes and a failed call loses only what was still running.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import json
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Callable, Protocol, runtime_checkable

from kohaku.core.errors import KohakuError


class BackendError(KohakuError, RuntimeError):
    """A backend failed; the message names the model and the config key to change."""


@dataclass
class ChatRequest:
    """One chat prompt and how to sample from it.

    messages:    ``[{"role": "system"|"user"|"assistant", "content": str}, ...]``; a content may
                 also be a list of OpenAI-style parts (``{"type": "text", "text": ...}``,
                 ``{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}``),
                 as the caption stage sends images (vLLM's multimodal chat takes the same form)
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
        """Model + revision + backend (+ weights digest, resolved dtype, decoder version, library
        versions): the generation cache's namespace, equal to :func:`backend_identity` of the
        backend's config, which the stages' cache keys hold."""

    @property
    def max_context(self) -> int:
        """Tokens the model accepts (prompt + completion)."""

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` with the model's tokenizer (no special tokens)."""

    def generate(self, requests: list[ChatRequest]) -> list[Completion]:
        """All requests in one batched call; completions in input order.

        Optionally ``generate(requests, on_complete=None)``: see the module docstring."""

    def close(self) -> None:
        """Release the model (GPU memory, worker processes)."""


OnComplete = Callable[[int, int, Completion], None]


def content_text(content: Any) -> str:
    """The text of a message content: the string itself, or its text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content
                         if isinstance(p, dict) and p.get("type") == "text")
    return "" if content is None else str(content)


def content_images(content: Any) -> list[str]:
    """The image URLs (``data:`` URLs for the caption stage) of a message content's parts."""
    if not isinstance(content, list):
        return []
    return [str((p.get("image_url") or {}).get("url", "")) for p in content
            if isinstance(p, dict) and p.get("type") == "image_url"]


def sent_params(req: ChatRequest, **extra: Any) -> dict[str, Any]:
    """What of ``req`` reaches the model besides the messages, ``n`` and the seed (greedy
    decoding ignores top_p, so it is normalised to 1.0 there). ``extra`` adds what a backend sends
    on top; keys whose value is None are left out, so adding an option to a backend does not
    change the keys of the samples generated without it."""
    greedy = req.temperature == 0
    params: dict[str, Any] = {
        "temperature": req.temperature,
        "top_p": 1.0 if greedy else req.top_p,
        "max_tokens": req.max_tokens,
        "json_schema": req.json_schema,
    }
    params.update({k: v for k, v in extra.items() if v is not None})
    return params


def request_params(backend: Any, req: ChatRequest) -> dict[str, Any]:
    """The generation-cache parameters of ``req`` on ``backend``: its ``cache_params(req)`` when
    it has one, else :func:`sent_params` (the request is sent as it is)."""
    hook = getattr(backend, "cache_params", None)
    return hook(req) if callable(hook) else sent_params(req)


def accepts_on_complete(backend: Any) -> bool:
    """Whether ``backend.generate`` reports completions as they finish (``on_complete``)."""
    try:
        return "on_complete" in inspect.signature(backend.generate).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins / C callables
        return False


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
    # how a vision model's processor sizes the image changes what it sees: captions made at
    # another resolution are other captions (text-only configs have none, their identity stays)
    engine = llm_cfg.get("engine_kwargs")
    mm = engine.get("mm_processor_kwargs") if isinstance(engine, dict) else None
    if mm:
        ident += f"#mm-{short_hash(mm, 8)}"
    return ident


def backend_identity(llm_cfg: dict[str, Any]) -> str:
    """``load_backend(llm_cfg).identity`` computed without loading anything (no model, no
    engine, no server): :func:`identity_of` plus what the backend module adds: the dtype it
    resolves on this machine, its ``DECODER_VERSION`` (bumped when kohaku's decoding changes a
    sample) and the versions of the libraries that compute the tokens (:func:`library_tag`).
    The generation cache namespaces samples by it and the stages' cache keys hold it
    (:func:`key_config`), so a sample or an artifact made by another decoder is never reused."""
    target = IDENTITIES.get(str(llm_cfg.get("backend")))
    return _resolve(target)(dict(llm_cfg)) if target else identity_of(llm_cfg)


def key_config(llm_cfg: Any) -> Any:
    """An llm config as a stage's cache key holds it: every key but those its backend's config
    dataclass marks ``not_keyed`` (thread counts, progress bars, HTTP concurrency, timeouts and
    retries: they cannot change a sample), plus ``backend_identity``. Not a mapping (null: no
    model): as it is."""
    if not isinstance(llm_cfg, dict) or not llm_cfg:
        return llm_cfg
    from kohaku.core.config import unkeyed_fields

    target = CONFIGS.get(str(llm_cfg.get("backend")))
    dropped = unkeyed_fields(_resolve(target)) if target else frozenset()
    out = {k: v for k, v in llm_cfg.items() if k not in dropped}
    out["backend_identity"] = backend_identity(llm_cfg)
    return out


def library_tag(names: tuple[str, ...]) -> str:
    """``"#torch-2.13.0+cpu,transformers-5.24.0"``: the installed versions of the distributions
    ``names`` (those not installed are left out; "" when none is), for a backend's identity."""
    found = [(name, _dist_version(name)) for name in names]
    tag = ",".join(f"{name}-{version}" for name, version in found if version)
    return f"#{tag}" if tag else ""


@functools.lru_cache(maxsize=64)
def _dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


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


# backend name -> "module:function" of ``f(llm_cfg) -> identity`` (see backend_identity).
IDENTITIES: dict[str, str] = {
    "hf": "kohaku.llm.hf.backend:config_identity",
    "vllm": "kohaku.llm.vllm_backend:config_identity",
    "openai": "kohaku.llm.openai_backend:config_identity",
    "fake": "kohaku.llm.fake:config_identity",
}

# backend name -> "module:class" of its config dataclass (its not_keyed fields leave the keys).
CONFIGS: dict[str, str] = {
    "hf": "kohaku.llm.hf.backend:HFConfig",
    "vllm": "kohaku.llm.vllm_backend:VLLMConfig",
    "openai": "kohaku.llm.openai_backend:OpenAIConfig",
    "fake": "kohaku.llm.fake:FakeConfig",
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
