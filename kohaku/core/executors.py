"""Where the heavy stages run: this machine's processes (``local``) or a Ray cluster (``ray``).

``run.executor`` changes where parse jobs and embedding batches are computed, never what they
produce, so no cache key holds it. Ray is an optional import (``pip install -e '.[ray]'``,
scripts/setup_cluster.sh): nothing here imports it before a run asks for ``executor=ray``.

:class:`RaySession` joins a cluster (``run.ray_address``: ``ray start --head``'s host:port, or
``auto``) or starts a private instance on 127.0.0.1, and leaves it (stopping only an instance it
started) on :meth:`RaySession.close`. :meth:`RaySession.map` runs a module-level function over
items as Ray tasks, a bounded number in flight: a task whose worker process or node is lost is
rerun by Ray (``run.ray_max_retries``), so only that item's work is done again; the results come
back as they complete, each with its item, for the caller to put in order.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, TypeVar

from kohaku.core.config import ConfigError, not_keyed

log = logging.getLogger("kohaku.executors")

EXECUTORS = ("local", "ray")
T = TypeVar("T")


@dataclass
class RunConfig:
    """The ``run`` config group: where the heavy stages run. No cache key holds it (the
    artifacts are the same either way)."""

    # local: parse jobs in this machine's worker processes (parse.workers), embedding in this
    # process; ray: parse jobs as Ray tasks and embedding batches through Ray Data actors
    executor: str = not_keyed("local")
    # the Ray cluster to join: host:port of `ray start --head`, or auto (RAY_ADDRESS, or the
    # cluster started on this machine); null = start a private Ray instance on 127.0.0.1
    ray_address: str | None = not_keyed(None)
    # CPUs one Ray parse task or embedding actor asks for
    ray_num_cpus: float = not_keyed(1.0)
    # embedding actors (each loads the model once); null = one per ray_num_cpus of the cluster
    ray_actors: int | None = not_keyed(None)
    # times Ray reruns a task (or an actor's batch) whose worker process or node was lost
    ray_max_retries: int = not_keyed(3)
    # parse tasks in flight per cluster CPU (bounds the driver's memory on a large corpus)
    ray_in_flight: int = not_keyed(4)
    # how infer runs on the cluster: actors = Ray actors holding the model for the whole run
    # (loaded once); data = each backend call's shards through Ray Data map_batches actors
    # (loaded once per actor and call: per retry round, per infer.chunk_size)
    ray_infer: str = not_keyed("actors")

    def validate(self) -> None:
        if self.executor not in EXECUTORS:
            raise ValueError(f"executor={self.executor!r}: use one of {', '.join(EXECUTORS)}")
        if float(self.ray_num_cpus) <= 0:
            raise ValueError(f"ray_num_cpus={self.ray_num_cpus}: use a positive number")
        if self.ray_actors is not None and int(self.ray_actors) < 1:
            raise ValueError(f"ray_actors={self.ray_actors}: use a positive number or null")
        if self.ray_infer not in ("actors", "data"):
            raise ValueError(f"ray_infer={self.ray_infer!r}: use actors or data")
        if int(self.ray_max_retries) < 0 or int(self.ray_in_flight) < 1:
            raise ValueError("ray_max_retries must be >= 0 and ray_in_flight >= 1")


def import_ray() -> Any:
    """The ``ray`` module, or a ConfigError saying how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise ConfigError("run.executor=ray needs Ray: pip install -e '.[ray]' (or bash "
                          "scripts/setup_cluster.sh, which makes .venv-cluster)") from exc
    return ray


class RaySession:
    """A connection to a Ray cluster for one run (``ctx.services.get("ray", ...)`` makes one)."""

    def __init__(self, cfg: RunConfig) -> None:
        ray = import_ray()
        self.cfg = cfg
        self.started = not ray.is_initialized()
        if self.started:
            kwargs: dict[str, Any] = {"log_to_driver": True, "include_dashboard": False}
            if cfg.ray_address:
                kwargs["address"] = cfg.ray_address
            else:   # a private instance, on loopback only
                kwargs.update(_node_ip_address="127.0.0.1", num_gpus=0)
            ray.init(**kwargs)
        resources = ray.cluster_resources()
        self.cpus = float(resources.get("CPU", 1))
        self.gpus = float(resources.get("GPU", 0))
        self.nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
        log.info("Ray cluster: %d node(s), %g CPUs, %g GPUs (%s)", self.nodes, self.cpus,
                 resources.get("GPU", 0), cfg.ray_address or "private instance on 127.0.0.1")

    @property
    def slots(self) -> int:
        """How many tasks of ``ray_num_cpus`` the cluster runs at once."""
        return max(1, int(self.cpus // float(self.cfg.ray_num_cpus)))

    def map(self, fn: Callable[[T], Any], items: Iterable[T]) -> Iterator[tuple[T, Any]]:
        """(item, fn(item)) for every item, as the Ray tasks complete; an item whose task failed
        after every retry (its worker killed each time, the function raising) comes back with
        the exception as its result."""
        ray = import_ray()
        remote = ray.remote(fn).options(num_cpus=float(self.cfg.ray_num_cpus),
                                        max_retries=int(self.cfg.ray_max_retries))
        todo = iter(items)
        in_flight: dict[Any, T] = {}
        limit = self.slots * int(self.cfg.ray_in_flight)
        try:
            while True:
                for item in todo:
                    in_flight[remote.remote(item)] = item
                    if len(in_flight) >= limit:
                        break
                if not in_flight:
                    return
                done, _ = ray.wait(list(in_flight), num_returns=1)
                for ref in done:
                    item = in_flight.pop(ref)
                    try:
                        result = ray.get(ref)
                    except Exception as exc:  # noqa: BLE001 - the caller records it for that item
                        result = exc
                    yield item, result
        finally:
            for ref in in_flight:   # a stop of the run cancels what is still queued
                ray.cancel(ref, force=True)

    def close(self) -> None:
        """Leave the cluster (a private instance this session started stops with it); a
        connection the caller made before (ray.init) is left open."""
        ray = import_ray()
        if self.started and ray.is_initialized():
            ray.shutdown()


def ray_session(values: dict[str, Any]) -> RaySession:
    """Factory for ``services.get("ray", values, ray_session)``: the ``run`` group's values."""
    from kohaku.core.config import build

    return RaySession(build(RunConfig, values, "run"))
