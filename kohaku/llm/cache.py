"""The generation cache: one row per generated sample, so no sample is ever generated twice.

Layout: ``<cache.dir>/llm/<identity hash>/identity.json`` plus ``part-*.parquet`` files. A row is
keyed by (backend identity, request parameters, effective seed, prompt hash). The request
parameters are those the backend actually sends (``request_params`` in kohaku/llm/base.py: the
sampling fields, the JSON schema as sent, response format, extra body fields), so every setting
that can change an output changes the key and nothing else does. The effective seed of sample
``k`` of a request with seed ``s`` is ``s + k`` (see kohaku/llm/base.py), so a sample cached from
a request with ``n=4`` is found again by a request with ``n=8`` or by a single-sample request with
seed ``s + k``. With temperature 0 (greedy) the seed does not change the output and is left out
of the key.

``generate_cached`` looks every (request, sample) up first and sends only the missing ones. The
missing samples of a request are grouped into runs of consecutive indices, each sent as one
request with ``n = run length`` and ``seed = s + first index`` (one prefill for the run on vLLM).
A backend that reports completions as they finish (``on_complete``, the openai and data-parallel
backends) has each one written at once, so a call that fails part-way keeps every sample that
completed and a re-run sends only the others; for the other backends the new rows are written
after every backend call (``chunk_size`` requests, default: everything in one call). Each write is
one part file (temporary name, then rename). Many small parts are merged: those this process
wrote once there are ``COMPACT_AFTER`` of them, all of them when the cache is opened.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from kohaku.core.artifacts import atomic_write
from kohaku.llm.base import (
    Backend,
    BackendError,
    ChatRequest,
    Completion,
    Counters,
    accepts_on_complete,
    request_params,
    sent_params,
    short_hash,
)

log = logging.getLogger(__name__)

SCHEMA = {
    "key": pl.String,
    "prompt_hash": pl.String,
    "params_hash": pl.String,
    "seed": pl.Int64,
    "text": pl.String,
    "prompt_tokens": pl.Int64,
    "completion_tokens": pl.Int64,
    "finish_reason": pl.String,
    "seconds": pl.Float64,
    "created": pl.Float64,
}

COMPACT_AFTER = 64


def prompt_hash(messages: list[dict[str, str]]) -> str:
    data = json.dumps(messages, ensure_ascii=False, sort_keys=True).encode()
    return hashlib.sha256(data).hexdigest()


def params_hash(req: ChatRequest, backend: Backend | None = None) -> str:
    """Hash of everything but the messages, n and the seed that ``backend`` sends for ``req``
    (``request_params``; without a backend: the request's own fields)."""
    params = request_params(backend, req) if backend is not None else sent_params(req)
    return short_hash(params, 32)


def effective_seed(req: ChatRequest, sample_idx: int) -> int:
    return 0 if req.temperature == 0 else req.seed + sample_idx


def sample_key(identity: str, p_hash: str, pa_hash: str, seed: int) -> str:
    return hashlib.sha256(f"{identity}\x00{pa_hash}\x00{seed}\x00{p_hash}".encode()).hexdigest()[:40]


@dataclass
class Sample:
    """One sample of one request, generated now or read from the cache."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str
    seconds: float
    cached: bool
    prompt_hash: str


class GenerationCache:
    """Rows of generated samples for one backend identity (see the module docstring)."""

    def __init__(self, root: str | os.PathLike, identity: str):
        self.identity = identity
        self.dir = Path(root) / "llm" / hashlib.sha256(identity.encode()).hexdigest()[:16]
        self.dir.mkdir(parents=True, exist_ok=True)
        ident = self.dir / "identity.json"
        if not ident.exists():
            atomic_write(ident, lambda tmp: tmp.write_text(json.dumps({"identity": identity}, indent=1)))
        self._rows: dict[str, dict[str, Any]] = {}
        self._own_parts: list[Path] = []      # parts this object wrote (merged past COMPACT_AFTER)
        self._own_keys: list[str] = []
        self._lock = threading.Lock()
        self._load()

    def _parts(self) -> list[Path]:
        return sorted(self.dir.glob("part-*.parquet"))

    def _load(self) -> None:
        parts = self._parts()
        for part in parts:
            try:
                df = pl.read_parquet(part)
            except Exception as exc:  # a foreign or damaged file: skip it, never crash
                log.warning("generation cache: cannot read %s (%s); ignoring it", part, exc)
                continue
            for row in df.iter_rows(named=True):
                self._rows.setdefault(row["key"], row)
        if len(parts) > COMPACT_AFTER:
            self._compact(parts)

    def _compact(self, parts: list[Path]) -> None:
        """Rewrite all rows as one part, then remove the parts that were read."""
        if not self._rows:
            return
        self._write(list(self._rows.values()))
        for part in parts:
            part.unlink(missing_ok=True)
        log.info("generation cache: compacted %d parts in %s", len(parts), self.dir)

    def __len__(self) -> int:
        return len(self._rows)

    def get(self, key: str) -> dict[str, Any] | None:
        return self._rows.get(key)

    def _write(self, rows: list[dict[str, Any]]) -> Path:
        df = pl.DataFrame(rows, schema=SCHEMA)
        name = f"part-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.parquet"
        return atomic_write(self.dir / name, df.write_parquet)

    def add(self, rows: list[dict[str, Any]]) -> None:
        """Store new rows (one part file, written atomically). Once this object has written
        ``COMPACT_AFTER`` parts, they are merged into one, so storing samples one at a time
        leaves a bounded number of files."""
        with self._lock:
            new = [r for r in rows if r["key"] not in self._rows]
            if not new:
                return
            self._own_parts.append(self._write(new))
            for r in new:
                self._rows[r["key"]] = r
                self._own_keys.append(r["key"])
            if len(self._own_parts) >= COMPACT_AFTER:
                merged = self._write([self._rows[k] for k in self._own_keys])
                for part in self._own_parts:
                    part.unlink(missing_ok=True)
                self._own_parts = [merged]


def generate_cached(
    backend: Backend,
    requests: list[ChatRequest],
    cache: GenerationCache | None,
    counters: Counters,
    chunk_size: int | None = None,
) -> list[list[Sample]]:
    """All samples of all requests, generating only those the cache lacks.

    Returns, per request, its ``n`` samples in order. Identical (prompt, params, seed) pairs in
    one call are generated once (with temperature 0 that includes the n samples of a request).
    ``counters`` gets model_calls, prompts (requests sent to the model), samples (generated),
    cache_hits (samples read from the cache), deduped (copies of a sample generated in the same
    call), tokens and seconds.
    """
    identity = backend.identity
    out: list[list[Sample | None]] = [[None] * r.n for r in requests]
    # key -> list of (request index, sample index) waiting for it
    waiting: dict[str, list[tuple[int, int]]] = {}
    phashes = [prompt_hash(r.messages) for r in requests]
    pahashes = [params_hash(r, backend) for r in requests]
    keys: list[list[str]] = []
    for i, r in enumerate(requests):
        ks = [sample_key(identity, phashes[i], pahashes[i], effective_seed(r, k)) for k in range(r.n)]
        keys.append(ks)
        for k, key in enumerate(ks):
            row = cache.get(key) if cache is not None else None
            if row is not None:
                out[i][k] = Sample(row["text"], row["prompt_tokens"], row["completion_tokens"],
                                   row["finish_reason"], row["seconds"], True, phashes[i])
                counters.cache_hits += 1
            else:
                waiting.setdefault(key, []).append((i, k))

    # one sub-request per run of consecutive missing samples of a request (first claim wins)
    todo: list[tuple[ChatRequest, int, int]] = []  # (request, request index, first sample)
    claimed: set[str] = set()
    for i, r in enumerate(requests):
        k = 0
        while k < r.n:
            key = keys[i][k]
            if out[i][k] is not None or key in claimed or waiting[key][0] != (i, k):
                k += 1
                continue
            start = k
            while (k < r.n and out[i][k] is None and keys[i][k] not in claimed
                   and waiting[keys[i][k]][0] == (i, k)):
                claimed.add(keys[i][k])
                k += 1
            greedy = r.temperature == 0
            sub = ChatRequest(messages=r.messages, n=k - start, temperature=r.temperature,
                              top_p=r.top_p, max_tokens=r.max_tokens,
                              seed=r.seed if greedy else r.seed + start, json_schema=r.json_schema)
            todo.append((sub, i, start))

    def rows_of(sub: ChatRequest, i: int, start: int, first: int, comp: Completion,
                seconds: float) -> list[dict[str, Any]]:
        """Cache rows of samples ``first, first + 1, ...`` of sub-request ``sub``."""
        now = time.time()
        return [{
            "key": keys[i][start + first + j], "prompt_hash": phashes[i], "params_hash": pahashes[i],
            "seed": effective_seed(sub, first + j), "text": comp.texts[j],
            "prompt_tokens": comp.prompt_tokens, "completion_tokens": comp.completion_tokens[j],
            "finish_reason": comp.finish_reasons[j], "seconds": seconds, "created": now,
        } for j in range(len(comp.texts))]

    streaming = cache is not None and accepts_on_complete(backend)
    size = chunk_size or len(todo) or 1
    for c in range(0, len(todo), size):
        chunk = todo[c:c + size]
        stored = [0]  # samples of this call written to the cache as they completed

        def on_complete(index: int, first: int, comp: Completion, chunk=chunk, stored=stored) -> None:
            sub, i, start = chunk[index]
            n = len(comp.texts)
            if not (0 <= first and first + n <= sub.n and len(comp.completion_tokens) == n
                    and len(comp.finish_reasons) == n):
                raise RuntimeError(f"backend {identity} reported samples {first}..{first + n - 1} "
                                   f"of a request with n={sub.n}")
            cache.add(rows_of(sub, i, start, first, comp, comp.seconds / max(n, 1)))  # type: ignore[union-attr]
            stored[0] += n

        t0 = time.perf_counter()
        try:
            subs = [sub for sub, _, _ in chunk]
            completions = (backend.generate(subs, on_complete=on_complete) if streaming  # type: ignore[call-arg]
                           else backend.generate(subs))
        except BackendError as exc:
            if not streaming or not stored[0]:
                raise
            total = sum(sub.n for sub, _, _ in chunk)
            raise BackendError(
                f"{exc}; {stored[0]} of the {total} samples of this call had finished and are "
                f"cached, so a re-run sends only the other {total - stored[0]}"
            ) from exc
        except Exception as exc:  # name the model; what finished before is already cached
            raise BackendError(
                f"{identity}: generation failed ({type(exc).__name__}: {exc}); the samples finished "
                f"before it are cached and a re-run resumes from them; if it fails again, check the "
                f"llm config (llm=..., llm.model) or lower infer.chunk_size"
            ) from exc
        dt = time.perf_counter() - t0
        if len(completions) != len(chunk):
            raise RuntimeError(
                f"backend {identity} returned {len(completions)} completions for {len(chunk)} requests"
            )
        counters.model_calls += 1
        counters.seconds += dt
        rows = []
        for (sub, i, start), comp in zip(chunk, completions):
            _check_completion(comp, sub, identity)
            counters.prompts += 1
            counters.prompt_tokens += comp.prompt_tokens
            per_sample = comp.seconds / max(sub.n, 1)
            for j in range(sub.n):
                k = start + j
                key = keys[i][k]
                counters.samples += 1
                counters.completion_tokens += comp.completion_tokens[j]
                sample = Sample(comp.texts[j], comp.prompt_tokens, comp.completion_tokens[j],
                                comp.finish_reasons[j], per_sample, False, phashes[i])
                for (ri, rk) in waiting[key]:
                    # other requests (or greedy samples) with the same key share this sample
                    out[ri][rk] = sample if (ri, rk) == (i, k) else _shared(sample)
                    if (ri, rk) != (i, k):
                        counters.deduped += 1
            rows += rows_of(sub, i, start, 0, comp, per_sample)
        if cache is not None:
            cache.add(rows)   # rows stored as they completed are skipped
    missing = [(i, k) for i, s in enumerate(out) for k, x in enumerate(s) if x is None]
    if missing:  # pragma: no cover - defensive
        raise RuntimeError(f"generation cache: samples {missing[:5]} were never generated")
    return out  # type: ignore[return-value]


def _shared(s: Sample) -> Sample:
    return Sample(s.text, s.prompt_tokens, s.completion_tokens, s.finish_reason, 0.0, False,
                  s.prompt_hash)


def _check_completion(comp: Completion, req: ChatRequest, identity: str) -> None:
    n = req.n
    if not (len(comp.texts) == len(comp.completion_tokens) == len(comp.finish_reasons) == n):
        raise RuntimeError(
            f"backend {identity} returned {len(comp.texts)} texts / {len(comp.completion_tokens)} "
            f"token counts for a request with n={n}"
        )


def open_generation_cache(root: str | os.PathLike | None, identity: str,
                          enabled: bool = True) -> GenerationCache | None:
    """The generation cache of ``identity`` under ``root`` (the run's ``cache.dir``); None when
    caching is off or there is no cache folder."""
    return GenerationCache(root, identity) if enabled and root else None
