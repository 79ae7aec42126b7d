"""The stage contract.

A stage is a pure function from upstream tables (plus its slice of the config) to tables.
Each stage module in ``kohaku/stages/`` defines one module-level ``STAGE = Stage(...)``;
the runner (``kohaku/pipeline.py``) resolves dependencies, computes the cache key and either
reuses the cached artifact or calls ``compute``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import polars as pl
from omegaconf import DictConfig, OmegaConf

from kohaku.config import select


@dataclass(frozen=True)
class Stage:
    """Declaration of one pipeline stage.

    name:        stage name, also the cache folder name (``outputs/cache/<name>/<key>/``).
    version:     bump when the code changes what the stage produces (invalidates old artifacts).
    inputs:      upstream stage names whose artifacts ``compute`` reads.
    config_keys: dotted config paths whose resolved values form the hashed config slice.
    compute:     ``compute(ctx) -> {table_name: DataFrame}``; each table is written as
                 ``<table_name>.parquet``. Extra files may be written into ``ctx.out_dir``.
    file_inputs: optional ``f(cfg) -> [Path]``: external files (corpus, CSVs) whose content is
                 hashed into the key, so editing a file invalidates the artifact.
    """

    name: str
    version: str
    inputs: tuple[str, ...]
    config_keys: tuple[str, ...]
    compute: Callable[["StageContext"], Mapping[str, pl.DataFrame]]
    file_inputs: Callable[[DictConfig], list[Path]] | None = None
    outputs: tuple[str, ...] = ()


@dataclass
class StageContext:
    """What a running stage may see: its config slice, its inputs, a scratch output folder."""

    stage: Stage
    cfg: DictConfig
    input_dirs: dict[str, Path]
    out_dir: Path
    services: Any
    log: logging.Logger
    summary: dict[str, Any] = field(default_factory=dict)

    def section(self, key: str) -> dict[str, Any]:
        """Resolved config at ``key`` as a plain dict (or scalar)."""
        node = select(self.cfg, key)
        if isinstance(node, DictConfig):
            return OmegaConf.to_container(node, resolve=True)  # type: ignore[return-value]
        return node

    def path(self, stage: str) -> Path:
        """Artifact folder of an upstream stage (for non-table files such as indexes)."""
        if stage not in self.input_dirs:
            raise KeyError(
                f"stage '{self.stage.name}' reads '{stage}' but does not declare it in inputs="
                f"{self.stage.inputs}"
            )
        return self.input_dirs[stage]

    def table(self, stage: str, name: str | None = None) -> pl.DataFrame:
        """Read table ``name`` (default: the stage's first output) of an upstream stage."""
        folder = self.path(stage)
        if name is None:
            files = sorted(folder.glob("*.parquet"))
            if len(files) != 1:
                raise ValueError(f"{folder}: name the table to read, found {[f.name for f in files]}")
            return pl.read_parquet(files[0])
        file = folder / f"{name}.parquet"
        if not file.exists():
            raise FileNotFoundError(f"{file}: stage '{stage}' has no table '{name}'")
        return pl.read_parquet(file)

    def report(self, **values: Any) -> None:
        """Record summary figures; they go into the artifact's manifest.json and run.json."""
        self.summary.update(values)
