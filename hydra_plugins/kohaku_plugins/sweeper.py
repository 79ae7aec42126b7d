"""``hydra/sweeper=kohaku``: Hydra's basic sweeper that launches distinct upstream work first."""

from __future__ import annotations

from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from omegaconf import DictConfig, open_dict


class KeyOrderedSweeper(BasicSweeper):
    """Hydra's basic sweeper (same overrides, ``params`` and ``max_batch_size``) whose points are
    launched in ``kohaku.runner.sweep.order_points`` order: points with distinct upstream artifacts first,
    points that only differ downstream of an artifact another point computes last. Only the launch
    order (and so the numbering of point dirs) changes. ``order: given`` keeps Hydra's order.
    ``points: FILE`` lists the points themselves (kohaku.runner.sweep.read_points; a point may set
    several keys, e.g. a named retrieval variant), each with the command line's overrides."""

    def __init__(
        self, max_batch_size: int | None = None, params: dict[str, str] | None = None, order: str = "keys",
        points: str | None = None,
    ) -> None:
        super().__init__(max_batch_size=max_batch_size, params=params)
        if order not in ("keys", "given"):
            raise ValueError(f"hydra.sweeper.order={order!r}: use keys or given")
        self.order = order
        self.points = points

    # BasicSweeper.sweep calls self.split_arguments(overrides, max_batch_size); a staticmethod
    # there, a method here so that it can compose the points' configs.
    def split_arguments(self, overrides: Any, max_batch_size: int | None) -> list[list[list[str]]]:  # type: ignore[override]
        points = BasicSweeper.split_arguments(overrides, None)[0]
        if self.points:
            from kohaku.runner.sweep import read_points

            listed = read_points(self.points)
            points = [[*common, *own] for common in points for own in listed]
        if self.order == "keys":
            from kohaku.runner.sweep import order_sweep

            points = order_sweep(points, self._compose)
        if max_batch_size is None:
            return [points]
        return [points[i : i + max_batch_size] for i in range(0, len(points), max_batch_size)]

    def _compose(self, point: list[str]) -> DictConfig:
        assert self.hydra_context is not None and self.config is not None
        cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(point))
        with open_dict(cfg):
            del cfg["hydra"]
        return cfg
