"""Sweep scheduling: launch the points that bring new work first.

Hydra's basic sweeper launches points in cartesian-product order, so neighbours tend to share
their expensive upstream artifacts: with ``infer.prompt_order=a,b vote.n_samples=1,3`` the first
two points need the same infer artifact, and with two workers the second one waits on the cache
lock for the whole generation instead of generating for ``b``. The sweeper
``hydra/sweeper=kohaku`` (the default in ``conf/config.yaml``; its class lives in
``hydra_plugins/kohaku_plugins/`` because Hydra loads plugins only from there) predicts every
point's cache keys from its composed config, without computing anything, and reorders the points
so that each next one shares as short a prefix of the stage chain as possible with the points
before it: distinct upstream work fans out to the workers first, and points that only differ
downstream of a shared artifact come last, when that artifact is (nearly) done and they are cache
hits.

Only the order changes (and with it the numbered point dirs); every point still runs, and a
failure to predict keys falls back to Hydra's order with a warning. This module belongs to the
runner side (it uses ``kohaku.runner.pipeline``); the library does not import it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, Iterable, Sequence

from omegaconf import DictConfig

from kohaku.core.artifacts import fingerprint_files
from kohaku.core.overrides import override_text
from kohaku.core.config import ConfigError
from kohaku.runner.pipeline import Registry, plan_stages

log = logging.getLogger("kohaku.sweep")


def cached_fingerprint() -> Callable[[Iterable[Path]], dict[str, str]]:
    """``fingerprint_files`` that hashes each file once per (path, size, mtime) for a whole
    sweep: every point names the same corpus files."""
    memo: dict[tuple[str, int, int], dict[str, str]] = {}

    def fingerprint(paths: Iterable[Path]) -> dict[str, str]:
        out: dict[str, str] = {}
        for path in sorted(Path(p) for p in paths):
            try:
                stat = path.stat()
                token = (str(path), stat.st_size, stat.st_mtime_ns)
            except OSError:
                out.update(fingerprint_files([path]))
                continue
            if token not in memo:
                memo[token] = fingerprint_files([path])
            out.update(memo[token])
        return out

    return fingerprint


def predict_keys(
    cfg: DictConfig,
    registry: Registry | None = None,
    fingerprint: Callable[[Iterable[Path]], dict[str, str]] = fingerprint_files,
) -> dict[str, str]:
    """Stage name -> the cache key a run of ``cfg`` will use, in pipeline order, computed the way
    the runner computes it (config slice, upstream keys, input file hashes) without running
    anything. tests/test_sweep.py checks these against the keys in run.json."""
    keys: dict[str, str] = {}
    for stage in plan_stages(list(cfg.get("stages") or []), registry):
        inputs = {name: keys[name] for name in stage.inputs}
        keys[stage.name], _ = stage.cache_identity(cfg, inputs, fingerprint)
    return keys


def order_points(chains: Sequence[dict[str, str]]) -> list[int]:
    """Launch order for points with these stage -> key chains (pipeline order).

    Greedy: the next point is the one whose first not-yet-scheduled artifact comes earliest in
    its chain, i.e. the one that brings the most new work and shares the shortest prefix with
    the points already placed (ties keep the given order). Points that bring no new artifact
    before their last stages go last."""
    scheduled: set[tuple[str, str]] = set()
    remaining = list(range(len(chains)))
    order: list[int] = []

    def first_new(i: int) -> int:
        for pos, item in enumerate(chains[i].items()):
            if item not in scheduled:
                return pos
        return len(chains[i])

    while remaining:
        best = min(remaining, key=lambda i: (first_new(i), i))
        remaining.remove(best)
        order.append(best)
        scheduled.update(chains[best].items())
    return order


def order_sweep(points: list[list[str]], compose: Callable[[list[str]], DictConfig]) -> list[list[str]]:
    """``points`` (each a list of overrides) in :func:`order_points` order; ``compose(point)`` gives
    a point's config. Ordering is an optimisation: on any error the given order is kept."""
    if len(points) < 2:
        return points
    try:
        fingerprint = cached_fingerprint()
        registry = Registry()
        chains = [predict_keys(compose(point), registry, fingerprint) for point in points]
    except Exception as exc:  # noqa: BLE001 - never fail a sweep over its launch order
        log.warning("sweep: could not predict the points' cache keys (%s: %s); launching them in "
                    "Hydra's order", type(exc).__name__, exc)
        return points
    order = order_points(chains)
    if order != list(range(len(points))):
        swept = [i for i in range(len(points[0])) if len({p[i] for p in points}) > 1]
        shown = "; ".join(" ".join(points[n][i] for i in swept) for n in order[:6])
        log.info("sweep: %d points, %d distinct artifacts; launching distinct upstream work first: "
                 "%s%s", len(points), len({item for c in chains for item in c.items()}), shown,
                 " ..." if len(order) > 6 else "")
    return [points[i] for i in order]


def read_points(path: str | Path) -> list[list[str]]:
    """The points of ``hydra.sweeper.points``: a YAML (or JSON) file holding a list, each item one
    point: a list of overrides (``["retrieve.top_k=8", "retrieve.window=0"]``) or a mapping of
    keys to values (``{retrieve.top_k: 8, retrieve.window: 0}``); ``[]`` or ``{}`` is a point
    with no override of its own. Every point gets the sweep's other overrides too. ConfigError
    naming the file and the item for anything else."""
    import yaml

    file = Path(path)
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"hydra.sweeper.points={path}: cannot read the points file ({exc})") from exc
    if not isinstance(data, list) or not data:
        raise ConfigError(f"hydra.sweeper.points={path}: give a list of points, each a list of "
                          "overrides or a mapping of keys to values")
    points: list[list[str]] = []
    for i, item in enumerate(data):
        if isinstance(item, dict):
            points.append([override_text(str(k), v) for k, v in item.items()])
        elif isinstance(item, list) and all(isinstance(x, str) and "=" in x for x in item):
            points.append([str(x) for x in item])
        else:
            raise ConfigError(f"hydra.sweeper.points={path}: item {i} ({item!r}) is neither a list of "
                              "KEY=VALUE overrides nor a mapping of keys to values")
    return points
