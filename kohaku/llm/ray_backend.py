"""Inference on a Ray cluster (``run.executor=ray``): the prompts of one ``generate`` sharded over
Ray actors, each holding the backend of ``llm_cfg`` (a vLLM engine, the HF model, the fake).

One actor per GPU (or per ``llm.tensor_parallel_size`` GPUs) where the cluster has GPUs, else
``run.ray_actors`` (default: one per ``run.ray_num_cpus`` of the cluster). A call cuts the
requests into contiguous shards of about equal samples (several per actor, so a lost actor
costs one shard), gives them to the actors in turn, and hands each shard's completions to
``on_complete`` as it comes back: the generation cache (kohaku/llm/cache.py, which wraps this
backend as any other) is consulted before and filled as shards finish, so a rerun on one machine
reuses the cluster's work. An actor whose process or node is lost is restarted and its pending
shards rerun (Ray's actor task retries). Ray is imported only inside the functions.
"""

from __future__ import annotations

import logging
from typing import Any

from kohaku.llm.base import Backend, BackendError, ChatRequest, Completion, OnComplete, load_backend
from kohaku.llm.parallel import LocalFront, shard_bounds, take_shard

log = logging.getLogger(__name__)


class _LLMActor:
    """A Ray actor: the backend loaded once; generate() takes and returns plain dicts."""

    def __init__(self, llm_cfg: dict[str, Any]) -> None:
        self.backend = load_backend(llm_cfg)

    def generate(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        comps = self.backend.generate([ChatRequest.from_dict(r) for r in requests])
        return [c.to_dict() for c in comps]


class _LLMBatchActor:
    """A Ray Data actor (``map_batches``): the backend loaded once; each batch row is one shard
    (its first request's index, the requests as JSON) -> the shard's completions as JSON."""

    def __init__(self, llm_cfg: dict[str, Any]) -> None:
        self.backend = load_backend(llm_cfg)

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        import json

        import numpy as np

        starts, outs = [], []
        for start, requests in zip(batch["start"], batch["requests"]):
            comps = self.backend.generate([ChatRequest.from_dict(r) for r in json.loads(str(requests))])
            starts.append(int(start))
            outs.append(json.dumps([c.to_dict() for c in comps]))
        return {"start": np.asarray(starts, np.int64), "completions": np.asarray(outs, dtype=object)}


class RayBackend(LocalFront):
    """A backend whose ``generate`` runs on the Ray actors of ``session``
    (kohaku.core.executors.RaySession); ``local`` (kohaku.llm.parallel.LocalFront) answers
    identity, max_context and count_tokens in the driver."""

    def __init__(self, session: Any, llm_cfg: dict[str, Any], local: Backend | None = None,
                 shards_per_actor: int = 4) -> None:
        self.session = session
        self.llm_cfg = dict(llm_cfg)
        self._local = local
        self.shards_per_actor = shards_per_actor
        self._actors: list[Any] = []

    def _start(self) -> None:
        if self._actors:
            return
        import ray

        cfg = self.session.cfg
        n, gpus_per = self._plan()
        actor = ray.remote(_LLMActor).options(num_cpus=float(cfg.ray_num_cpus), num_gpus=gpus_per,
                                              max_restarts=-1, max_task_retries=int(cfg.ray_max_retries))
        self._actors = [actor.remote(self.llm_cfg) for _ in range(n)]
        log.info("infer: %d Ray actor(s) of %s (%g GPU each)", n, self.identity, gpus_per)

    def _plan(self) -> tuple[int, float]:
        """(actors, GPUs each): one per GPU or tensor_parallel_size GPUs, else run.ray_actors
        (default one per run.ray_num_cpus of the cluster)."""
        cfg = self.session.cfg
        gpus_per = float(self.llm_cfg.get("tensor_parallel_size") or 1) if self.session.gpus else 0.0
        if gpus_per:
            return max(1, int(self.session.gpus // gpus_per)), gpus_per
        return (int(cfg.ray_actors) if cfg.ray_actors else self.session.slots), 0.0

    def generate(self, requests: list[ChatRequest],
                 on_complete: OnComplete | None = None) -> list[Completion]:
        """Completions in input order; ``on_complete`` gets each shard's as it is done."""
        if not requests:
            return []
        if self.session.cfg.ray_infer == "data":
            return self._generate_data(requests, on_complete)
        import ray

        self._start()
        n_shards = min(len(requests), len(self._actors) * self.shards_per_actor)
        pending: dict[Any, tuple[int, int]] = {}
        for s, (start, end) in enumerate(shard_bounds([r.n for r in requests], n_shards)):
            if end > start:
                ref = self._actors[s % len(self._actors)].generate.remote(
                    [r.to_dict() for r in requests[start:end]])
                pending[ref] = (start, end)
        merged: list[Completion | None] = [None] * len(requests)
        errors: list[str] = []
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                start, end = pending.pop(ref)
                try:
                    comps = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - lost after every retry: named, the rest kept
                    errors.append(f"requests {start}-{end - 1}: {type(exc).__name__}: {exc}")
                    continue
                take_shard(merged, start, end, comps, on_complete, errors, f"requests {start}-{end - 1}")
        if errors:
            raise BackendError("Ray actors: " + "; ".join(errors))
        return merged  # type: ignore[return-value]

    def _generate_data(self, requests: list[ChatRequest],
                       on_complete: OnComplete | None) -> list[Completion]:
        """run.ray_infer=data: the shards as the rows of a Ray Data dataset, through
        ``map_batches`` to a pool of :class:`_LLMBatchActor` (the backend loaded once per actor
        for this call); each shard's completions handed to ``on_complete`` as they stream back."""
        import json

        import ray

        cfg = self.session.cfg
        n, gpus_per = self._plan()
        bounds = [(a, b) for a, b in shard_bounds([r.n for r in requests],
                                                  min(len(requests), n * self.shards_per_actor)) if b > a]
        ends = dict(bounds)
        logging.getLogger("ray.data").setLevel(logging.WARNING)
        ds = ray.data.from_items([{"start": a, "requests": json.dumps([r.to_dict() for r in requests[a:b]])}
                                  for a, b in bounds], override_num_blocks=len(bounds))
        out = ds.map_batches(
            _LLMBatchActor, fn_constructor_args=(self.llm_cfg,), batch_size=1, batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=min(n, len(bounds))),
            num_cpus=float(cfg.ray_num_cpus), num_gpus=gpus_per,
            # a lost actor is restarted and the shard it held rerun (only that shard)
            max_restarts=-1, max_task_retries=int(cfg.ray_max_retries),
        )
        log.info("infer: %d Ray Data actor(s) of %s (%g GPU each), %d shard(s)", min(n, len(bounds)),
                 self.identity, gpus_per, len(bounds))
        merged: list[Completion | None] = [None] * len(requests)
        errors: list[str] = []
        for batch in out.iter_batches(batch_size=None, batch_format="numpy"):
            for start, comps in zip(batch["start"], batch["completions"]):
                start = int(start)
                end = ends.pop(start)
                take_shard(merged, start, end, json.loads(str(comps)), on_complete, errors,
                           f"requests {start}-{end - 1}")
        if ends:
            errors.append(f"Ray Data returned no completions for {len(ends)} shard(s)")
        if errors:
            raise BackendError("Ray Data actors: " + "; ".join(errors))
        return merged  # type: ignore[return-value]

    def close(self) -> None:
        if self._actors:
            import ray

            if ray.is_initialized():   # else the session's shutdown has ended them
                for actor in self._actors:
                    ray.kill(actor)
            self._actors = []
        if self._local is not None:
            self._local.close()
