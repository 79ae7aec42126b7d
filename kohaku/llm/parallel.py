"""Data parallelism for a model that fits on one GPU (or one TP group): one process per replica.

``DataParallelBackend(llm_cfg, devices)`` starts, on its first ``generate``, one worker process per
entry of ``devices`` (spawned, so CUDA is initialised in the child after CUDA_VISIBLE_DEVICES is
set to that entry). Each worker builds the backend of ``llm_cfg`` and serves requests over a
pipe. A call shards the requests into contiguous slices with about equal numbers of samples,
runs the slices at the same time and merges the completions back in input order. vLLM's own
``data_parallel_size`` is not used: in 0.33 ``LLM(data_parallel_size>1)`` raises.

It works with any backend config (the tests use the fake backend).
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import time
from typing import Any

from kohaku.llm.base import (
    Backend,
    BackendError,
    ChatRequest,
    Completion,
    OnComplete,
    backend_identity,
    request_params,
)

log = logging.getLogger(__name__)


def shard_bounds(weights: list[int], n_shards: int) -> list[tuple[int, int]]:
    """Contiguous [start, end) slices of ``weights`` with about equal sums (empty ones allowed).

    An item goes to the shard in which its midpoint (on the cumulative scale) falls.
    """
    total = sum(weights)
    bounds = []
    start = 0
    cum = 0.0
    for s in range(n_shards):
        target = total * (s + 1) / n_shards
        end = start
        while end < len(weights) and cum + weights[end] / 2 <= target:
            cum += weights[end]
            end += 1
        if s == n_shards - 1:
            end = len(weights)
        bounds.append((start, end))
        start = end
    return bounds


def _worker(conn, llm_cfg: dict[str, Any], devices: str) -> None:  # pragma: no cover - subprocess
    os.environ["CUDA_VISIBLE_DEVICES"] = devices
    try:
        from kohaku.llm.base import load_backend

        backend = load_backend(llm_cfg)
    except BaseException as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", {"pid": os.getpid(), "devices": os.environ.get("CUDA_VISIBLE_DEVICES")}))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            break
        op = msg[0]
        try:
            if op == "generate":
                reqs = [ChatRequest.from_dict(d) for d in msg[1]]
                comps = backend.generate(reqs)
                conn.send(("ok", {"completions": [c.to_dict() for c in comps],
                                  "devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                                  "pid": os.getpid()}))
            elif op == "close":
                backend.close()
                conn.send(("ok", None))
                break
            else:
                conn.send(("error", f"unknown op {op!r}"))
        except BaseException as exc:
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
    conn.close()


def take_shard(merged: list[Completion | None], start: int, end: int, comps: list[dict[str, Any]],
               on_complete: OnComplete | None, errors: list[str], who: str) -> bool:
    """Put a shard's completions (plain dicts) at ``merged[start:end]`` and hand each to
    ``on_complete``; a wrong count or a failing ``on_complete`` is added to ``errors`` naming
    ``who`` (so every other shard's reply is still read). False when the count is wrong."""
    if len(comps) != end - start:
        errors.append(f"{who} returned {len(comps)} completions for {end - start}")
        return False
    for j, c in enumerate(comps):
        merged[start + j] = Completion.from_dict(c)
        if on_complete is not None:
            try:  # read every shard's reply first, whatever happens here
                on_complete(start + j, 0, merged[start + j])  # type: ignore[arg-type]
            except Exception as exc:  # noqa: BLE001
                errors.append(f"storing the completions of {who}: {exc}")
    return True


class LocalFront:
    """What a backend that generates elsewhere (replica processes, Ray actors) answers in this
    process: identity without loading anything; max_context, count_tokens and the cache
    parameters from ``local`` (built from ``llm_cfg`` on first use unless given; vLLM: the
    tokenizer only). Needs ``self.llm_cfg`` and ``self._local``."""

    llm_cfg: dict[str, Any]
    _local: Backend | None

    @property
    def local(self) -> Backend:
        if self._local is None:
            from kohaku.llm.base import load_backend

            self._local = load_backend(self.llm_cfg)
        return self._local

    @property
    def identity(self) -> str:
        return self._local.identity if self._local is not None else backend_identity(self.llm_cfg)

    @property
    def max_context(self) -> int:
        return self.local.max_context

    def count_tokens(self, text: str) -> int:
        return self.local.count_tokens(text)

    def cache_params(self, req: ChatRequest) -> dict[str, Any]:
        """The replicas send what the local backend would (kohaku/llm/base.py)."""
        return request_params(self.local, req)


class DataParallelBackend(LocalFront):
    """Shards each ``generate`` over worker processes (see the module docstring).

    ``local`` answers identity / max_context / count_tokens in this process without loading the
    model (vLLM: tokenizer only); it defaults to a backend built from ``llm_cfg`` here.
    """

    def __init__(self, llm_cfg: dict[str, Any], devices: list[str], local: Backend | None = None,
                 start_timeout: float = 3600.0):
        if not devices:
            raise BackendError("data parallelism needs at least one device (llm.data_parallel_size)")
        self.llm_cfg = dict(llm_cfg)
        self.devices = list(devices)
        self._local = local
        self.start_timeout = start_timeout
        self._workers: list[tuple[Any, Any]] = []  # (process, connection)
        self.last_shards: list[dict[str, Any]] = []

    def _start(self) -> None:
        if self._workers:
            return
        ctx = mp.get_context("spawn")
        for dev in self.devices:
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(child, self.llm_cfg, dev), daemon=True)
            proc.start()
            child.close()
            self._workers.append((proc, parent))
        deadline = time.monotonic() + self.start_timeout
        for i, (proc, conn) in enumerate(self._workers):
            if not conn.poll(max(0.0, deadline - time.monotonic())):
                self.close()
                raise BackendError(f"data-parallel worker {i} (CUDA_VISIBLE_DEVICES="
                                   f"{self.devices[i]}) did not start in {self.start_timeout:.0f} s")
            status, info = conn.recv()
            if status != "ready":
                self.close()
                raise BackendError(f"data-parallel worker {i} (CUDA_VISIBLE_DEVICES="
                                   f"{self.devices[i]}) failed to load {self.identity}: {info}")
        log.info("started %d data-parallel workers on devices %s", len(self.devices), self.devices)

    def generate(self, requests: list[ChatRequest],
                 on_complete: OnComplete | None = None) -> list[Completion]:
        """Completions in input order; ``on_complete`` gets each replica's share as soon as that
        replica is done, so a failing replica does not lose the others' samples."""
        if not requests:
            return []
        self._start()
        bounds = shard_bounds([r.n for r in requests], len(self._workers))
        busy = []
        for w, (start, end) in enumerate(bounds):
            if end > start:
                self._workers[w][1].send(("generate", [r.to_dict() for r in requests[start:end]]))
                busy.append((w, start, end))
        merged: list[Completion | None] = [None] * len(requests)
        self.last_shards = []
        errors = []
        for w, start, end in busy:
            proc, conn = self._workers[w]
            try:
                status, payload = conn.recv()
            except EOFError:
                status, payload = "error", f"worker process {proc.pid} died (exit {proc.exitcode})"
            if status != "ok":
                errors.append(f"worker {w} (CUDA_VISIBLE_DEVICES={self.devices[w]}): {payload}")
                continue
            if not take_shard(merged, start, end, payload["completions"], on_complete, errors, f"worker {w}"):
                continue
            self.last_shards.append({"worker": w, "devices": payload["devices"],
                                     "pid": payload["pid"], "start": start, "end": end})
        if errors:
            raise BackendError("; ".join(errors))
        return merged  # type: ignore[return-value]

    def close(self) -> None:
        for proc, conn in self._workers:
            try:
                if proc.is_alive():
                    conn.send(("close",))
                    if conn.poll(60):
                        conn.recv()
            except (OSError, EOFError, BrokenPipeError):
                pass
        for proc, conn in self._workers:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
            conn.close()
        self._workers = []
        if self._local is not None:
            self._local.close()
