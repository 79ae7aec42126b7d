"""The stage contract (runner layer).

A stage is a thin adapter from upstream tables (plus its typed config) to tables: it reads
tables, calls the library, returns tables. Each module in ``kohaku/stages/`` defines one
module-level ``STAGE = Stage(...)``; the runner (``kohaku/pipeline.py``) orders stages from
their declared inputs, computes the cache key and either reuses the cached artifact or calls
``compute``. Stages never import each other; what two stages share lives in the library.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import polars as pl
from omegaconf import DictConfig, OmegaConf

from kohaku.artifacts import artifact_key, fingerprint_files
from kohaku.config import ConfigError, as_dict, build


def select(cfg: DictConfig, key: str) -> Any:
    """``cfg`` at dotted ``key``; raises ConfigError naming the key when it is absent."""
    node = OmegaConf.select(cfg, key, throw_on_missing=True, default=_MISSING)
    if node is _MISSING:
        raise ConfigError(f"config key '{key}' is not set")
    return node


_MISSING = object()


def plain(cfg: DictConfig, key: str) -> Any:
    """The resolved value at ``key`` as plain data (dicts and lists, not OmegaConf nodes)."""
    node = select(cfg, key)
    if isinstance(node, DictConfig):
        return OmegaConf.to_container(node, resolve=True)
    return node


@dataclass(frozen=True)
class Stage:
    """Declaration of one pipeline stage.

    name:        stage name, also the cache folder name (``<cache.dir>/<name>/<key>/``).
    version:     bump when the code changes what the stage produces (invalidates old artifacts).
    inputs:      upstream stage names whose artifacts ``compute`` reads; the run order comes
                 from them.
    config_keys: dotted config paths that form the hashed config slice.
    compute:     ``compute(ctx) -> {table_name: DataFrame}``; each table is written as
                 ``<table_name>.parquet``. Extra files may be written into ``ctx.out_dir``.
    file_inputs: optional ``f(cfg) -> [Path]``: external files (corpus, CSVs) whose content is
                 hashed into the key, so editing a file invalidates the artifact.
    outputs:     the tables ``compute`` must return.
    configs:     config key -> dataclass for the keys that have one: the key hashes the built
                 dataclass (defaults in code count) and ``ctx.config(key)`` returns it.
    summary_events: summary counters that mean "something went wrong but the run went on",
                 with the words the end-of-run problem lines use for them.
    run_dir_files: files of the artifact copied into the run dir (for people and reports).
    """

    name: str
    version: str
    inputs: tuple[str, ...]
    config_keys: tuple[str, ...]
    compute: Callable[["StageContext"], Mapping[str, pl.DataFrame]]
    file_inputs: Callable[[DictConfig], list[Path]] | None = None
    outputs: tuple[str, ...] = ()
    configs: Mapping[str, type] = field(default_factory=dict)
    summary_events: Mapping[str, str] = field(default_factory=dict)
    run_dir_files: tuple[str, ...] = ()

    def config_slice(self, cfg: DictConfig) -> dict[str, Any]:
        """What the cache key hashes: each config key's value, typed keys as their built
        dataclass (so a default changed only in code changes the key)."""
        return {key: self.typed(cfg, key, as_data=True) for key in self.config_keys}

    def cache_identity(self, cfg: DictConfig, inputs: Mapping[str, str],
                       fingerprint: Callable[[list[Path]], dict[str, str]] = fingerprint_files,
                       ) -> tuple[str, dict[str, Any]]:
        """(cache key, what it hashes: config slice, upstream keys, input file hashes, version).
        The runner keys artifacts with it and the sweeper predicts keys with it."""
        slice_ = self.config_slice(cfg)
        files = fingerprint(self.file_inputs(cfg)) if self.file_inputs else {}
        identity = {"config": slice_, "inputs": dict(inputs), "files": files, "version": self.version}
        return artifact_key(self.name, self.version, slice_, dict(inputs), files), identity

    def typed(self, cfg: DictConfig, key: str, as_data: bool = False) -> Any:
        value = plain(cfg, key)
        cls = self.configs.get(key)
        if cls is None:
            return value
        built = build(cls, value, key)
        return as_dict(built) if as_data else built


@dataclass
class StageContext:
    """What a running stage may see: its config, its inputs, a scratch output folder."""

    stage: Stage
    cfg: DictConfig
    input_dirs: dict[str, Path]
    out_dir: Path
    services: Any
    log: logging.Logger
    summary: dict[str, Any] = field(default_factory=dict)

    def config(self, key: str) -> Any:
        """The stage's config at ``key``: the built dataclass for keys declared in
        ``Stage.configs``, else the plain resolved value. The one way stages read config."""
        return self.stage.typed(self.cfg, key)

    def section(self, key: str) -> Any:
        """Resolved config at ``key`` as plain data (for untyped groups such as ``llm``)."""
        return plain(self.cfg, key)

    @property
    def cache_dir(self) -> Path | None:
        """``cache.dir`` (encodings and generations are cached under it); not part of any key."""
        value = OmegaConf.select(self.cfg, "cache.dir", default=None)
        return Path(str(value)) if value else None

    def path(self, stage: str) -> Path:
        """Artifact folder of an upstream stage (for non-table files such as indexes)."""
        if stage not in self.input_dirs:
            raise KeyError(
                f"stage '{self.stage.name}' reads '{stage}' but does not declare it in inputs="
                f"{self.stage.inputs}"
            )
        return self.input_dirs[stage]

    def table(self, stage: str, name: str | None = None) -> pl.DataFrame:
        """Read table ``name`` (default: the stage's only table) of an upstream stage."""
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
