"""OpenAI-compatible HTTP backend (``POST {base_url}/chat/completions``): vLLM's OpenAI-compatible
server, llama.cpp server, hosted APIs.

- Standard library only (urllib); a thread pool bounds the requests in flight
  (``llm.max_concurrency``). Completed requests are reported as they finish (``on_complete``, see
  kohaku/llm/base.py), so the generation cache keeps every finished sample of a failed round.
- Retries with exponential backoff and jitter on 408/409/429/5xx, connection errors and read
  timeouts; a ``Retry-After`` header (seconds or HTTP date) is honoured. Other 4xx fail at once
  with the server's message. Once one request has failed for good, no other is retried or sent.
- Hangs are visible and bounded: a progress bar and a log line every ``llm.stall_seconds`` while
  requests are in flight; ``llm.connect_timeout`` bounds connecting and ``llm.timeout`` the wait
  for an answer. When no request has finished for ``llm.stall_seconds``, the server is probed
  (``GET {base_url}/models``); if the probe fails, the open connections are closed and the round
  stops with a message naming the server and the setting that chose it.
- JSON schema via ``response_format={"type": "json_schema", ...}`` (``llm.json_mode``: schema,
  object or none, for servers that lack one of them); ``llm.drop_schema_keys`` are removed from
  the schema first (hosted strict modes reject maxLength/minLength; vLLM enforces them, so
  ``llm=openai_vllm`` keeps them).
- ``llm.per_sample_seed`` (default true): one HTTP request per sample with seed ``seed + k`` (the
  per-sample contract of kohaku/llm/base.py, so the generation cache stays exact); false sends one
  request with ``n`` (cheaper on paid APIs; vLLM servers give child ``k`` the seed ``seed + k``
  too, other servers may not, and then a cached sample depends on n).
- The generation-cache key (``cache_params``) is the request body as sent, less the messages,
  ``n``, the seed and the model (those are keyed apart): the schema after ``drop_schema_keys``,
  the response format of ``json_mode``, ``extra_body`` and the sampling fields.
- The server: ``llm.base_url``, else the environment variable named by ``llm.base_url_env``, else
  ``llm.default_base_url``; the API key comes from the variable named by ``llm.api_key_env``.
- ``llm.max_context: null`` reads the served model's context length from ``GET /models``
  (``max_model_len``, reported by vLLM), less ``llm.estimate_margin`` because ``count_tokens`` is
  the model-free estimate of kohaku.core.tokens (there is no tokenizer to call).
"""

from __future__ import annotations

import email.utils
import http.client
import json
import logging
import os
import random
import socket
import threading
import time
import urllib.error
import urllib.request
import weakref
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from tqdm.auto import tqdm

from kohaku.core.config import build, not_keyed
from kohaku.llm.base import (
    BackendError,
    ChatRequest,
    Completion,
    OnComplete,
    content_text,
    identity_of,
    sent_params,
)
from kohaku.core.tokens import count_tokens

log = logging.getLogger(__name__)

# Bump when what kohaku sends or how it reads the answer back changes what a sample is: part of
# the identity (kohaku.llm.base.backend_identity; the server's own version is the server's).
DECODER_VERSION = "1"

RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}
FALLBACK_CONTEXT = 32768     # tokens, when llm.max_context is null and the server reports none


@dataclass
class OpenAIConfig:
    name: str                       # the option's label (conf/llm/<name>.yaml)
    backend: str                    # openai
    model: str                      # the model name the server serves
    revision: str | None = None     # the model's version, for the cache identity (null: none)
    base_url: str | None = None            # overrides the variable named by base_url_env
    # the server's url is in the identity (config_identity), whichever setting named it
    base_url_env: str = not_keyed("OPENAI_BASE_URL")
    api_key_env: str = not_keyed("OPENAI_API_KEY")  # environment variable holding the API key
    # url when neither base_url nor base_url_env gives one
    default_base_url: str = "https://api.openai.com/v1"
    # how requests travel, not what they ask: a request that fails for good fails the stage
    # (each sample is one request with its own seed, whatever is in flight beside it)
    max_concurrency: int = not_keyed(8)    # requests in flight
    max_retries: int = not_keyed(6)        # per HTTP request
    backoff_base: float = not_keyed(1.0)   # seconds; doubles per retry, with +-50 % jitter
    backoff_max: float = not_keyed(60.0)  # seconds: the longest wait between retries
    connect_timeout: float = not_keyed(10.0)   # seconds to open a connection
    timeout: float = not_keyed(300.0)      # seconds to wait for the answer of one request
    stall_seconds: float = not_keyed(30.0)     # no request finished this long: log and probe the server
    progress: bool = not_keyed(True)       # progress bar while requests are in flight
    max_context: int | None = 32768        # tokens the served model accepts; null: ask the server
    estimate_margin: float = 0.10          # share of a server-reported context kept free
    json_mode: str = "schema"              # schema | object | none
    per_sample_seed: bool = True    # one request per sample, seed + k (false: n samples in one request)
    # JSON schema keys removed for vLLM servers
    drop_schema_keys: list[str] = field(default_factory=lambda: ["maxLength", "minLength"])
    extra_body: dict[str, Any] = field(default_factory=dict)  # merged into every request body

    def validate(self) -> None:
        if self.json_mode not in ("schema", "object", "none"):
            raise ValueError(f"json_mode must be schema, object or none, got {self.json_mode!r}")
        if self.max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")
        for key in ("connect_timeout", "timeout", "stall_seconds"):
            if getattr(self, key) <= 0:
                raise ValueError(f"{key} must be > 0 seconds")
        if not 0 <= self.estimate_margin < 1:
            raise ValueError("estimate_margin must be in [0, 1)")
        if self.max_context is not None and self.max_context < 1:
            raise ValueError("max_context must be >= 1 or null (ask the server)")


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


class _Flight:
    """The connections of one ``generate`` call: a stop flag that ends retries, and the open
    sockets, so a stuck round can be ended from the main thread."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.reason = ""
        self.first: BackendError | None = None    # the failure that stopped the call
        self._conns: "weakref.WeakSet[http.client.HTTPConnection]" = weakref.WeakSet()
        self._lock = threading.Lock()

    def track(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            self._conns.add(conn)
        if self.stop.is_set():  # opened after the abort: close it too
            self._shut(conn)

    def fail(self, exc: BackendError) -> BackendError:
        """Record the first failure and stop every other request from being sent or retried."""
        with self._lock:
            if self.first is None:
                self.first = exc
                self.reason = f"stopped after an earlier failure: {exc}"
        self.stop.set()
        return exc

    def abort(self, exc: BackendError) -> None:
        """``fail``, and close the open connections (their requests end at once)."""
        self.fail(exc)
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            self._shut(conn)

    @staticmethod
    def _shut(conn: http.client.HTTPConnection) -> None:
        sock = conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _opener(flight: _Flight, read_timeout: float) -> urllib.request.OpenerDirector:
    """A urllib opener (proxies as usual) whose connections switch to ``read_timeout`` once
    connected and are tracked by ``flight``."""

    def tracked(base: type[http.client.HTTPConnection]) -> type[http.client.HTTPConnection]:
        class Conn(base):  # type: ignore[valid-type, misc]
            def connect(self) -> None:
                super().connect()
                self.sock.settimeout(read_timeout)
                flight.track(self)
        return Conn

    http_conn, https_conn = tracked(http.client.HTTPConnection), tracked(http.client.HTTPSConnection)

    class HTTP(urllib.request.HTTPHandler):
        def http_open(self, req):
            return self.do_open(http_conn, req)

    class HTTPS(urllib.request.HTTPSHandler):
        def https_open(self, req):
            return self.do_open(https_conn, req, context=self._context)

    return urllib.request.build_opener(HTTP, HTTPS)


def _base_url(cfg: OpenAIConfig) -> str:
    return (cfg.base_url or os.environ.get(cfg.base_url_env) or cfg.default_base_url).rstrip("/")


def config_identity(llm_cfg: dict[str, Any]) -> str:
    """The backend's identity (kohaku.llm.base.backend_identity) without a request:
    identity_of + the server's url + DECODER_VERSION."""
    cfg = build(OpenAIConfig, llm_cfg, "llm")
    return f"{identity_of(llm_cfg)}#{_base_url(cfg)}#dec{DECODER_VERSION}"


class OpenAIBackend:
    """See the module docstring. ``retries`` counts the retried HTTP attempts; ``requests_sent``
    the HTTP attempts made."""

    def __init__(self, cfg: OpenAIConfig, raw_cfg: dict[str, Any] | None = None):
        self.cfg = cfg
        self.base_url = _base_url(cfg)
        self.api_key = os.environ.get(cfg.api_key_env, "")
        self._identity = (f"{identity_of(raw_cfg or {'backend': 'openai', 'model': cfg.model, 'revision': cfg.revision})}"
                          f"#{self.base_url}#dec{DECODER_VERSION}")
        self.retries = 0
        self.requests_sent = 0
        self._lock = threading.Lock()
        self._models: list[dict[str, Any]] | None = None
        self._max_context: int | None = cfg.max_context
        self._checked = False

    @classmethod
    def from_config(cls, llm_cfg: dict[str, Any]) -> "OpenAIBackend":
        return cls(build(OpenAIConfig, llm_cfg, "llm"), llm_cfg)

    @property
    def identity(self) -> str:
        return self._identity

    # -- where the server came from, and what it says about itself ---------------------

    def url_setting(self) -> str:
        """The setting that chose ``base_url``, for messages."""
        env_name = self.cfg.base_url_env
        env = (os.environ.get(env_name) or "").rstrip("/")
        if self.cfg.base_url:
            if env and env == self.cfg.base_url.rstrip("/"):
                return f"${env_name} (read into llm.base_url)"
            return "llm.base_url"
        if env:
            return f"${env_name} (llm.base_url_env)"
        return (f"llm.base_url or ${env_name} (neither is set, so the default "
                f"{self.cfg.default_base_url} was used)")

    def _get(self, path: str, timeout: float) -> Any:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        req = urllib.request.Request(f"{self.base_url}{path}", headers=headers)
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read().decode())

    def served_models(self) -> list[dict[str, Any]]:
        """``GET {base_url}/models`` (``data``), read once; raises OSError/ValueError."""
        if self._models is None:
            data = self._get("/models", min(self.cfg.timeout, 30.0))
            self._models = [m for m in (data.get("data") or []) if isinstance(m, dict)]
        return self._models

    def _served_ids(self) -> list[str]:
        try:
            return [str(m.get("id")) for m in self.served_models()]
        except (OSError, ValueError, http.client.HTTPException):
            return []

    @property
    def max_context(self) -> int:
        if self._max_context is None:
            try:
                models = self.served_models()
            except urllib.error.HTTPError as exc:     # it answers, but has no model list
                log.info("%s/models: %s", self.base_url, exc)
                models = []
            except (OSError, ValueError, http.client.HTTPException) as exc:
                raise BackendError(
                    f"llm.max_context is null, so kohaku asks {self.base_url}/models for the context "
                    f"length of {self.cfg.model}, and that failed ({getattr(exc, 'reason', exc)}); "
                    f"is the server running? It is set by {self.url_setting()}; or set "
                    f"llm.max_context"
                ) from exc
            entry = next((m for m in models if m.get("id") == self.cfg.model), None)
            reported = (entry or {}).get("max_model_len")
            if reported:
                self._max_context = max(1, int(int(reported) * (1 - self.cfg.estimate_margin)))
                log.info("%s at %s: max_model_len %s, so contexts are fit to %d tokens "
                         "(llm.estimate_margin=%s)", self.cfg.model, self.base_url, reported,
                         self._max_context, self.cfg.estimate_margin)
            else:
                self._max_context = FALLBACK_CONTEXT
                log.warning("%s reports no max_model_len for %s; assuming %d tokens: set "
                            "llm.max_context to the served model's context length", self.base_url,
                            self.cfg.model, FALLBACK_CONTEXT)
        return self._max_context

    def _check_server(self) -> None:
        """Once, before the first round: warn about a model the server does not list and about
        schema keys dropped although the server (vLLM) enforces them. Never fails."""
        if self._checked:
            return
        self._checked = True
        try:
            models = self.served_models()
        except (OSError, ValueError, http.client.HTTPException) as exc:
            log.info("%s/models did not answer (%s); the requests will say more", self.base_url, exc)
            return
        ids = [str(m.get("id")) for m in models]
        if ids and self.cfg.model not in ids:
            log.warning("llm.model=%s is not among the models %s serves (%s); set llm.model to one "
                        "of them", self.cfg.model, self.base_url, ", ".join(ids[:10]))
        is_vllm = any(m.get("owned_by") == "vllm" for m in models)
        if is_vllm and self.cfg.json_mode == "schema" and self.cfg.drop_schema_keys:
            log.warning("%s is a vLLM server, which enforces the schema keys that "
                        "llm.drop_schema_keys=%s removes (small models then write to max_tokens); "
                        "use llm=openai_vllm or llm.drop_schema_keys=[]", self.base_url,
                        list(self.cfg.drop_schema_keys))

    def count_tokens(self, text: str) -> int:
        return count_tokens(text)

    # -- the request as sent --------------------------------------------------------------

    def _fields(self, req: ChatRequest) -> dict[str, Any]:
        """The body of ``req`` less messages, n, seed and model (before ``extra_body``)."""
        out: dict[str, Any] = {"temperature": req.temperature, "top_p": req.top_p,
                               "max_tokens": req.max_tokens}
        if req.json_schema is not None and self.cfg.json_mode == "schema":
            schema = _strip_keys(req.json_schema, set(self.cfg.drop_schema_keys))
            out["response_format"] = {"type": "json_schema", "json_schema": {
                "name": "answer", "schema": schema, "strict": True}}
        elif req.json_schema is not None and self.cfg.json_mode == "object":
            out["response_format"] = {"type": "json_object"}
        return out

    def body(self, req: ChatRequest, n: int, seed: int) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.cfg.model, "messages": req.messages, "n": n,
                                "seed": seed, **self._fields(req)}
        body.update(self.cfg.extra_body)
        return body

    def cache_params(self, req: ChatRequest) -> dict[str, Any]:
        """Generation-cache parameters: what the body carries besides the messages, n, seed and
        model (kohaku/llm/base.py); top_p is normalised under greedy decoding."""
        fields = self._fields(req)
        sent = {
            "response_format": fields.get("response_format", {"type": "text"}),
            # an empty extra_body adds nothing, so adding the option changed no key
            "extra_body": dict(self.cfg.extra_body) or None,
        }
        params = sent_params(req, **sent)
        del params["json_schema"]       # what the server sees is response_format
        return params

    # -- HTTP -------------------------------------------------------------------------------

    def _post(self, body: dict[str, Any], opener: urllib.request.OpenerDirector) -> dict[str, Any]:
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(f"{self.base_url}/chat/completions", data=data,
                                     headers=headers, method="POST")
        with self._lock:
            self.requests_sent += 1
        try:
            with opener.open(req, timeout=self.cfg.connect_timeout) as resp:
                raw = resp.read().decode()
        except urllib.error.HTTPError as exc:
            text = exc.read().decode(errors="replace") if exc.fp else ""
            raise HTTPStatusError(exc.code, text, parse_retry_after(exc.headers.get("Retry-After"))) from exc
        try:
            return json.loads(raw)
        except json.JSONDecodeError as exc:
            raise BackendError(f"{self.cfg.model} at {self.base_url} answered with something that "
                               f"is not JSON: {raw[:200]!r}") from exc

    def _status_hint(self, exc: HTTPStatusError) -> str:
        low = exc.body.lower()
        if "context" in low and "length" in low or "max_model_len" in low:
            setting = ("llm.estimate_margin" if self.cfg.max_context is None else "llm.max_context")
            return f"; the prompt is too long: raise {setting} or lower the retrieve budget"
        if exc.status in (401, 403):
            return f"; check the API key in ${self.cfg.api_key_env} (llm.api_key_env)"
        if exc.status == 404:
            served = self._served_ids()
            where = f"; the server serves: {', '.join(served[:10])}" if served else ""
            return f"; check llm.model and the server ({self.base_url}, from {self.url_setting()}){where}"
        return ""

    def _post_with_retry(self, body: dict[str, Any], flight: _Flight,
                         opener: urllib.request.OpenerDirector) -> tuple[dict[str, Any], float]:
        attempt = 0
        t0 = time.perf_counter()
        while True:
            if flight.stop.is_set():
                raise BackendError(flight.reason)
            try:
                return self._post(body, opener), time.perf_counter() - t0
            except BackendError as exc:
                raise flight.fail(exc)
            except HTTPStatusError as exc:
                if exc.status not in RETRY_STATUS or attempt >= self.cfg.max_retries:
                    raise flight.fail(BackendError(f"{self.cfg.model} at {self.base_url}: {exc}"
                                                   f"{self._status_hint(exc)}")) from exc
                wait_s = exc.retry_after
            except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
                if flight.stop.is_set():
                    raise BackendError(flight.reason) from exc
                reason = getattr(exc, "reason", exc)
                timed_out = isinstance(reason, TimeoutError) or isinstance(exc, TimeoutError)
                if attempt >= self.cfg.max_retries:
                    if timed_out:
                        raise flight.fail(BackendError(
                            f"{self.base_url} gave {self.cfg.model} no answer within "
                            f"llm.timeout={self.cfg.timeout:g} s ({attempt + 1} tries): the server "
                            f"is stuck or overloaded; restart it, raise llm.timeout or lower "
                            f"llm.max_concurrency (the server is set by {self.url_setting()})"
                        )) from exc
                    raise flight.fail(BackendError(
                        f"cannot reach {self.base_url} for {self.cfg.model} after {attempt + 1} "
                        f"tries: {reason}; is the server running? It is set by {self.url_setting()}"
                    )) from exc
                wait_s = None
            if wait_s is None:
                wait_s = min(self.cfg.backoff_max, self.cfg.backoff_base * 2 ** attempt)
                wait_s *= random.uniform(0.5, 1.5)
            attempt += 1
            with self._lock:
                self.retries += 1
            log.info("retrying %s at %s in %.2f s (try %d of %d)", self.cfg.model, self.base_url,
                     wait_s, attempt + 1, self.cfg.max_retries + 1)
            if flight.stop.wait(wait_s):
                raise BackendError(flight.reason)

    def _probe(self) -> str | None:
        """None when the server answers ``GET /models`` in time, else why not."""
        try:
            req = urllib.request.Request(f"{self.base_url}/models")
            with urllib.request.urlopen(req, timeout=min(self.cfg.connect_timeout, self.cfg.stall_seconds)):
                return None
        except urllib.error.HTTPError:
            return None          # it answered, if only with an error status
        except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
            return f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"

    def _completion(self, resp: dict[str, Any], n: int) -> Completion:
        choices = sorted(resp.get("choices") or [], key=lambda c: c.get("index", 0))
        if len(choices) != n:
            raise BackendError(f"{self.cfg.model} at {self.base_url} returned {len(choices)} "
                               f"choices for n={n}")
        usage = resp.get("usage") or {}
        total_c = int(usage.get("completion_tokens") or 0)
        comp = Completion(texts=[], prompt_tokens=int(usage.get("prompt_tokens") or 0),
                          completion_tokens=[], finish_reasons=[])
        for c in choices:
            text = (c.get("message") or {}).get("content") or ""
            comp.texts.append(text)
            comp.finish_reasons.append(c.get("finish_reason") or "stop")
            comp.completion_tokens.append(total_c // len(choices) if total_c else count_tokens(text))
        return comp

    def generate(self, requests: list[ChatRequest],
                 on_complete: OnComplete | None = None) -> list[Completion]:
        if not requests:
            return []
        self._check_server()
        calls: list[tuple[int, int, dict[str, Any]]] = []   # (request, first sample, body)
        for i, req in enumerate(requests):
            if self.cfg.per_sample_seed:
                calls += [(i, k, self.body(req, 1, req.seed + k)) for k in range(req.n)]
            else:
                calls.append((i, 0, self.body(req, req.n, req.seed)))
        n_total = sum(r.n for r in requests)
        flight = _Flight()
        opener = _opener(flight, self.cfg.timeout)
        parts: list[dict[int, Completion]] = [{} for _ in requests]
        log.info("sending %d request(s) for %d sample(s) to %s (%s), %d at a time", len(calls),
                 n_total, self.base_url, self.cfg.model, self.cfg.max_concurrency)
        t0 = time.perf_counter()
        pool = ThreadPoolExecutor(max_workers=self.cfg.max_concurrency, thread_name_prefix="openai")
        futures: dict[Future, int] = {pool.submit(self._post_with_retry, body, flight, opener): c
                                      for c, (_, _, body) in enumerate(calls)}
        pending = set(futures)
        bar = tqdm(total=n_total, desc=f"{self.cfg.model} @ {self.base_url}", unit="sample",
                   disable=None if self.cfg.progress else True, leave=False)
        failure: BaseException | None = None
        done_samples = 0
        last_done = time.monotonic()
        next_probe = next_log = last_done + self.cfg.stall_seconds
        try:
            while pending:
                done, pending = wait(pending, timeout=self.cfg.stall_seconds / 3,
                                     return_when=FIRST_COMPLETED)
                now = time.monotonic()
                for fut in done:
                    if fut.cancelled():
                        continue
                    i, first, body = calls[futures[fut]]
                    try:
                        resp, seconds = fut.result()
                        comp = self._completion(resp, body["n"])
                    except BackendError as exc:
                        flight.fail(exc)
                        failure = flight.first
                        for other in pending:
                            other.cancel()
                        continue
                    comp.seconds = seconds
                    parts[i][first] = comp
                    done_samples += len(comp.texts)
                    bar.update(len(comp.texts))
                    if on_complete is not None:
                        on_complete(i, first, comp)
                if done:
                    last_done = now
                    next_probe = now + self.cfg.stall_seconds
                if not pending:
                    break
                in_flight = sum(1 for f in pending if f.running())
                if now >= next_probe:       # nothing finished for stall_seconds: is it there?
                    why = self._probe()
                    if why is not None:
                        stuck = BackendError(
                            f"the server at {self.base_url} stopped answering: no request for "
                            f"{self.cfg.model} finished in {now - last_done:.0f} s and GET "
                            f"{self.base_url}/models failed ({why}). Restart the server or point "
                            f"{self.url_setting()} at a running one (a stuck but reachable server "
                            f"is bounded by llm.timeout={self.cfg.timeout:g} s per request)")
                        flight.abort(stuck)
                        failure = flight.first
                        for other in pending:
                            other.cancel()
                        continue
                    log.info("%s: no request finished for %.0f s (%d in flight, %d waiting, %d of "
                             "%d samples done); the server answers GET /models, so kohaku waits up "
                             "to llm.timeout=%g s per request", self.base_url, now - last_done,
                             in_flight, len(pending) - in_flight, done_samples, n_total,
                             self.cfg.timeout)
                    next_probe = next_log = now + self.cfg.stall_seconds
                elif now >= next_log:
                    log.info("%s: %d of %d samples done, %d request(s) in flight, %.0f s",
                             self.base_url, done_samples, n_total, in_flight,
                             time.perf_counter() - t0)
                    next_log = now + self.cfg.stall_seconds
        except BaseException as exc:     # KeyboardInterrupt, or a failing on_complete
            flight.abort(BackendError(f"stopped: {type(exc).__name__}"))
            for other in pending:
                other.cancel()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            bar.close()
        if failure is not None:
            raise failure
        dt = time.perf_counter() - t0
        out = []
        for r, got in zip(requests, parts):
            comp = Completion(texts=[], prompt_tokens=0, completion_tokens=[], finish_reasons=[],
                              seconds=dt * r.n / n_total)
            for first in sorted(got):
                comp.texts += got[first].texts
                comp.completion_tokens += got[first].completion_tokens
                comp.finish_reasons += got[first].finish_reasons
                comp.prompt_tokens = comp.prompt_tokens or got[first].prompt_tokens
            if not comp.prompt_tokens:
                comp.prompt_tokens = sum(count_tokens(content_text(m.get("content"))) for m in r.messages)
            out.append(comp)
        return out

    def close(self) -> None:
        pass
