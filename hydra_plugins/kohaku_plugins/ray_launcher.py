"""Hydra's Ray launcher with the checks a sweep needs (``hydra/launcher=ray|ray_gpu|ray_cluster``).

On top of ``hydra_plugins.hydra_ray_launcher`` (pip install -e '.[ray]'):

- ``ray.init`` gets only the keys that are set, and when it joins a running cluster
  (``init.address=HOST:PORT`` or ``auto``) none of those that describe a new local instance
  (object store size, CPUs, dashboard, ...), which Ray refuses there.
- A local instance asked for on ``_node_ip_address: 127.0.0.1`` stays on loopback (as does a
  driver joining a head at 127.0.0.1:PORT): Ray on Linux otherwise swaps 127.0.0.1 for the
  machine's outward address and listens on every interface.
  It sends no usage statistics (unless RAY_USAGE_STATS_ENABLED says otherwise) and is shut down
  when the sweep ends, also when it fails.
- Before any point is submitted, the per-point resources (``hydra.launcher.ray.remote``) are
  compared with the nodes Ray reports. A request no node can meet (``num_gpus: 1`` on a CPU-only
  machine) would make Ray wait for ever; for an instance this sweep started it is an error naming
  the setting, for a running cluster (which may still grow) a warning.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Sequence

from hydra.plugins.launcher import Launcher
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger("kohaku.ray")

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
# ray.init arguments that only describe a new local instance; Ray refuses them when joining a
# running cluster, so they are dropped there (hydra/launcher=ray ...init.address=HOST:PORT works).
LOCAL_ONLY = ("num_cpus", "num_gpus", "resources", "object_store_memory", "include_dashboard",
              "dashboard_host", "dashboard_port", "_temp_dir", "_system_config")
DEFAULT_OBJECT_STORE = 78_643_200  # the plugin's default, 75 MiB: points exchange only configs and results


def per_point_request(remote: dict[str, Any]) -> dict[str, float]:
    """Ray resources one sweep point asks for (a Ray task's default is 1 CPU, no GPU)."""
    need = {"CPU": remote.get("num_cpus", 1), "GPU": remote.get("num_gpus", 0)}
    if remote.get("memory"):
        need["memory"] = remote["memory"]
    need.update(remote.get("resources") or {})
    return {name: float(value) for name, value in need.items() if value}


def unmet_request(nodes: list[dict[str, Any]], need: dict[str, float]) -> str | None:
    """None if some alive node has every resource in ``need``; else what is missing."""
    alive = [node.get("Resources", {}) for node in nodes if node.get("Alive", True)]
    if any(all(res.get(k, 0.0) >= v for k, v in need.items()) for res in alive):
        return None
    most = {k: max((res.get(k, 0.0) for res in alive), default=0.0) for k in need}
    asked = ", ".join(f"{k} {v:g}" for k, v in need.items())
    have = ", ".join(f"{k} {v:g}" for k, v in most.items())
    return (f"each point asks for {asked}, but no node has that (the most any of the {len(alive)} "
            f"node(s) has: {have})")


def _keep_ray_on_loopback() -> None:
    """Have Ray use 127.0.0.1 as this node's address (its single-machine switch; without it Ray
    resolves 127.0.0.1 to the outward address and its servers listen on every interface)."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # inherited by the processes Ray starts
    try:
        from ray._private import ray_constants

        ray_constants.ENABLE_RAY_CLUSTER = False  # read at import, so also set it here
    except (ImportError, AttributeError):  # pragma: no cover - other Ray versions
        log.warning("could not keep Ray on loopback; its servers may listen on every interface")


try:
    from hydra_plugins.hydra_ray_launcher.ray_launcher import RayLauncher as _PluginRayLauncher
except ImportError as _exc:  # the ray extra is not installed
    _MISSING = f"{type(_exc).__name__}: {_exc}"

    class RayLauncher(Launcher):  # type: ignore[no-redef]
        def __init__(self, ray: DictConfig) -> None:
            raise ImportError(
                f"hydra/launcher=ray* needs the Ray extra ({_MISSING}): pip install -e '.[ray]' "
                "(or bash scripts/setup_cluster.sh for a separate .venv-cluster)"
            )

        def setup(self, **kwargs: Any) -> None:  # pragma: no cover - never constructed
            raise NotImplementedError

        def launch(self, job_overrides: Any, initial_job_idx: int) -> Any:  # pragma: no cover
            raise NotImplementedError

else:

    class RayLauncher(_PluginRayLauncher):  # type: ignore[no-redef]
        def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Any:
            import ray

            from kohaku.core.config import ConfigError

            init = {k: v for k, v in (OmegaConf.to_container(self.ray_cfg.init, resolve=True) or {}).items()
                    if v is not None}
            remote = OmegaConf.to_container(self.ray_cfg.remote, resolve=True) or {}
            address = init.get("address")
            local = address in (None, "local")
            started = False
            if not ray.is_initialized():
                if local:
                    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
                    if str(init.get("_node_ip_address", "")) in LOOPBACK:
                        _keep_ray_on_loopback()
                    init.setdefault("object_store_memory", DEFAULT_OBJECT_STORE)
                else:
                    dropped = [k for k in LOCAL_ONLY if init.pop(k, None) is not None]
                    if dropped:
                        log.info("joining the Ray cluster at %s: ignoring ray.init %s (they describe a "
                                 "new local instance)", address, ", ".join(dropped))
                    if str(address).rsplit(":", 1)[0] in LOOPBACK:  # a head on this machine's loopback
                        _keep_ray_on_loopback()
                log.info("ray.init(%s)", ", ".join(f"{k}={v!r}" for k, v in init.items()))
                ray.init(**init)
                started = True
            try:
                problem = unmet_request(ray.nodes(), per_point_request(remote))
                if problem:
                    fix = ("lower hydra.launcher.ray.remote.num_gpus / num_cpus, or use "
                           "hydra/launcher=ray (1 CPU, no GPU per point)")
                    if started and local:
                        raise ConfigError(f"hydra.launcher.ray.remote: {problem}; Ray would wait for ever. {fix}")
                    log.warning("hydra.launcher.ray.remote: %s; Ray holds the points until such a node "
                                "joins (%s)", problem, fix)
                # Ray is running now, so the plugin's own ray.init (and its defaults) are skipped.
                return super().launch(job_overrides, initial_job_idx)
            finally:
                if started:
                    ray.shutdown()
