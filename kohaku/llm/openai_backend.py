"""OpenAI-compatible HTTP backend (``POST {base_url}/chat/completions``): vllm serve, llama.cpp
server, hosted APIs.

- Standard library only (urllib), a thread pool bounds the requests in flight
  (``llm.max_concurrency``).
- Retries with exponential backoff and jitter on 408/409/429/5xx and connection errors; a
  ``Retry-After`` header (seconds or HTTP date) is honoured. Other 4xx fail at once with the
  server's message.
- JSON schema via ``response_format={"type": "json_schema", ...}`` (``llm.json_mode``: schema,
  object or none, for servers that lack one of them).
- ``llm.per_sample_seed`` (default true): one HTTP request per sample with seed ``seed + k`` (the
  per-sample contract of kohaku/llm/base.py, so the generation cache stays exact); false sends one
  request with ``n`` (cheaper on paid APIs, but a cached sample then depends on n).
- base_url and api key come from environment variables named in the config
  (``llm.base_url_env``, ``llm.api_key_env``); ``llm.base_url`` may also be set directly.
- Token counts come from the response's ``usage``; ``count_tokens`` is the model-free estimate of
  kohaku.text.tokens (there is no tokenizer to call), so keep ``llm.max_context`` conservative.
"""

from __future__ import annotations

import email.utils
import json
import logging
import os
import random
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from kohaku.config import build
from kohaku.llm.base import BackendError, ChatRequest, Completion, identity_of
from kohaku.text.tokens import count_tokens

log = logging.getLogger(__name__)

RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}


@dataclass
class OpenAIConfig:
    name: str
    backend: str
    model: str
    revision: str | None = None
    base_url: str | None = None            # overrides the variable named by base_url_env
    base_url_env: str = "OPENAI_BASE_URL"
    api_key_env: str = "OPENAI_API_KEY"
    default_base_url: str = "https://api.openai.com/v1"
    max_concurrency: int = 8               # requests in flight
    max_retries: int = 6                   # per HTTP request
    backoff_base: float = 1.0              # seconds; doubles per retry, with +-50 % jitter
    backoff_max: float = 60.0
    timeout: float = 300.0                 # seconds per HTTP request
    max_context: int = 32768               # tokens the served model accepts
    json_mode: str = "schema"              # schema | object | none
    per_sample_seed: bool = True
    drop_schema_keys: list[str] = field(default_factory=lambda: ["maxLength", "minLength"])
    extra_body: dict[str, Any] = field(default_factory=dict)  # merged into every request body

    def validate(self) -> None:
        if self.json_mode not in ("schema", "object", "none"):
            raise ValueError(f"json_mode must be schema, object or none, got {self.json_mode!r}")
        if self.max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")


class HTTPStatusError(Exception):
    def __init__(self, status: int, body: str, retry_after: float | None):
        super().__init__(f"HTTP {status}: {body[:500]}")
        self.status = status
        self.body = body
        self.retry_after = retry_after


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _strip_keys(obj: Any, keys: set[str]) -> Any:
    if isinstance(obj, dict):
        return {k: _strip_keys(v, keys) for k, v in obj.items() if k not in keys}
    if isinstance(obj, list):
        return [_strip_keys(v, keys) for v in obj]
    return obj


class OpenAIBackend:
    """See the module docstring. ``retries`` counts the retried HTTP attempts."""

    def __init__(self, cfg: OpenAIConfig, raw_cfg: dict[str, Any] | None = None):
        self.cfg = cfg
        self.base_url = (cfg.base_url or os.environ.get(cfg.base_url_env) or cfg.default_base_url).rstrip("/")
        self.api_key = os.environ.get(cfg.api_key_env, "")
        self._identity = identity_of(raw_cfg or {"backend": "openai", "model": cfg.model,
                                                 "revision": cfg.revision})
        self._identity += f"#{self.base_url}"
        self.retries = 0
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, llm_cfg: dict[str, Any]) -> "OpenAIBackend":
        return cls(build(OpenAIConfig, llm_cfg, "llm"), llm_cfg)

    @property
    def identity(self) -> str:
        return self._identity

    @property
    def max_context(self) -> int:
        return self.cfg.max_context

    def count_tokens(self, text: str) -> int:
        return count_tokens(text)

    def body(self, req: ChatRequest, n: int, seed: int) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.cfg.model, "messages": req.messages, "n": n,
            "temperature": req.temperature, "top_p": req.top_p,
            "max_tokens": req.max_tokens, "seed": seed,
        }
        if req.json_schema is not None and self.cfg.json_mode == "schema":
            schema = _strip_keys(req.json_schema, set(self.cfg.drop_schema_keys))
            body["response_format"] = {"type": "json_schema", "json_schema": {
                "name": "answer", "schema": schema, "strict": True}}
        elif req.json_schema is not None and self.cfg.json_mode == "object":
            body["response_format"] = {"type": "json_object"}
        body.update(self.cfg.extra_body)
        return body

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(f"{self.base_url}/chat/completions", data=data,
                                     headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.cfg.timeout) as resp:
                return json.loads(resp.read().decode())
        except urllib.error.HTTPError as exc:
            text = exc.read().decode(errors="replace") if exc.fp else ""
            raise HTTPStatusError(exc.code, text, parse_retry_after(exc.headers.get("Retry-After"))) from exc

    def _post_with_retry(self, body: dict[str, Any]) -> dict[str, Any]:
        attempt = 0
        while True:
            try:
                return self._post(body)
            except HTTPStatusError as exc:
                if exc.status not in RETRY_STATUS or attempt >= self.cfg.max_retries:
                    hint = ""
                    if "context" in exc.body.lower() and "length" in exc.body.lower():
                        hint = "; the prompt is too long: lower llm.max_context or the retrieve budget"
                    elif exc.status in (401, 403):
                        hint = f"; check the API key in ${self.cfg.api_key_env}"
                    elif exc.status == 404:
                        hint = f"; check llm.model and the base url ({self.base_url})"
                    raise BackendError(f"{self.cfg.model} at {self.base_url}: {exc}{hint}") from exc
                wait = exc.retry_after
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as exc:
                if attempt >= self.cfg.max_retries:
                    raise BackendError(
                        f"cannot reach {self.base_url} for {self.cfg.model} after {attempt + 1} "
                        f"tries: {exc}; check ${self.cfg.base_url_env} (llm.base_url_env)"
                    ) from exc
                wait = None
            if wait is None:
                wait = min(self.cfg.backoff_max, self.cfg.backoff_base * 2 ** attempt)
                wait *= random.uniform(0.5, 1.5)
            attempt += 1
            with self._lock:
                self.retries += 1
            log.info("retrying %s in %.2f s (try %d of %d)", self.cfg.model, wait, attempt + 1,
                     self.cfg.max_retries + 1)
            time.sleep(wait)

    def generate(self, requests: list[ChatRequest]) -> list[Completion]:
        if not requests:
            return []
        calls: list[tuple[int, dict[str, Any]]] = []
        for i, req in enumerate(requests):
            if self.cfg.per_sample_seed:
                calls += [(i, self.body(req, 1, req.seed + k)) for k in range(req.n)]
            else:
                calls.append((i, self.body(req, req.n, req.seed)))
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=self.cfg.max_concurrency) as pool:
            responses = list(pool.map(lambda c: self._post_with_retry(c[1]), calls))
        dt = time.perf_counter() - t0
        out = [Completion(texts=[], prompt_tokens=0, completion_tokens=[], finish_reasons=[])
               for _ in requests]
        for (i, body), resp in zip(calls, responses):
            choices = sorted(resp.get("choices") or [], key=lambda c: c.get("index", 0))
            if len(choices) != body["n"]:
                raise BackendError(f"{self.cfg.model} at {self.base_url} returned {len(choices)} "
                                   f"choices for n={body['n']}")
            usage = resp.get("usage") or {}
            comp = out[i]
            comp.prompt_tokens = int(usage.get("prompt_tokens") or comp.prompt_tokens)
            total_c = int(usage.get("completion_tokens") or 0)
            for c in choices:
                text = (c.get("message") or {}).get("content") or ""
                comp.texts.append(text)
                comp.finish_reasons.append(c.get("finish_reason") or "stop")
                comp.completion_tokens.append(total_c // len(choices) if total_c else count_tokens(text))
        n_total = sum(r.n for r in requests)
        for r, comp in zip(requests, out):
            comp.seconds = dt * r.n / n_total
            if not comp.prompt_tokens:
                comp.prompt_tokens = sum(count_tokens(m.get("content", "")) for m in r.messages)
        return out

    def close(self) -> None:
        pass
