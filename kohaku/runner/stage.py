"""The stage contract (runner layer).

A stage is a thin adapter from upstream tables (plus its typed config) to tables: it reads
tables, calls the library, returns tables. Each module in ``kohaku/stages/`` defines one
module-level ``STAGE = Stage(...)``; the runner (``kohaku/runner/pipeline.py``) orders stages from
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

from kohaku.core.artifacts import artifact_key, fingerprint_files
from kohaku.core.config import ConfigError, as_dict, build, key_data


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


def optional_config(cfg: DictConfig, key: str, cls: type) -> Any:
    """The dataclass ``cls`` built from the section at ``key`` (its errors name the key), or None
    where the config has no such section or it is empty (a run without a task group, a task
    without ``gold``)."""
    try:
        value = plain(cfg, key)
    except ConfigError:
        return None
    return build(cls, value, key) if value else None


@dataclass(frozen=True)
class Stage:
    """Declaration of one pipeline stage.

    name:        stage name, also the cache folder name (``<cache.dir>/<name>/<key>/``).
    version:     bump when the code changes what the stage produces (invalidates old artifacts).
    inputs:      upstream stage names whose artifacts ``compute`` reads; the run order comes
                 from them.
    config_keys: dotted config paths that form the hashed config slice. The slice says exactly
                 what can change the output: typed keys hash their built dataclass without the
                 fields made by ``kohaku.core.config.not_keyed`` (worker and thread counts),
                 ``unkeyed`` leaves out more, ``llm_configs`` hash an llm config as
                 ``kohaku.llm.base.key_config`` gives it (the backend's identity in, its thread
                 counts, progress bars, HTTP concurrency, timeouts and retries out).
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
    unkeyed:     dotted paths under ``config_keys`` that cannot change the output and that no
                 ``not_keyed`` field declares (a key of an untyped group, a cache-use flag of a
                 config class the stage does not own): left out of the slice.
    llm_configs: dotted paths under ``config_keys`` holding an llm config (``llm``,
                 ``planner.llm``...): hashed as ``kohaku.llm.base.key_config`` gives it, so an
                 artifact made by another decoder or library version is not reused.
    key_functions: (dotted path, function) pairs: the slice's value at the path is hashed as
                 the function returns it (``parse.ocr`` adds the OCR engine's name, version and
                 language, which no config key holds).

    A stage whose summary holds ``retry`` (a list of item ids that failed for a cause that may
    not recur: a worker died, a time limit) is computed again on the next run under the same key
    with ``ctx.previous`` set to that artifact, so it can redo those items and reuse the rest;
    it reports an empty ``retry`` when an item fails the same way again.
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
    unkeyed: tuple[str, ...] = ()
    llm_configs: tuple[str, ...] = ()
    key_functions: tuple[tuple[str, Callable[[Any], Any]], ...] = ()

    def __post_init__(self) -> None:
        for path in (*self.unkeyed, *self.llm_configs, *(p for p, _ in self.key_functions)):
            self._locate(path)

    def config_slice(self, cfg: DictConfig) -> dict[str, Any]:
        """What the cache key hashes: each config key's value, typed keys as their built
        dataclass (so a default changed only in code changes the key) without its ``not_keyed``
        fields; then ``unkeyed`` left out and ``llm_configs`` as ``key_config`` gives them."""
        slice_ = {key: self._keyed(cfg, key) for key in self.config_keys}
        for path in self.unkeyed:
            parent, name = self._parent(slice_, path)
            if isinstance(parent, dict):
                parent.pop(name, None)
        if self.llm_configs:
            from kohaku.llm.base import key_config

            for path in self.llm_configs:
                parent, name = self._parent(slice_, path)
                if isinstance(parent, dict) and name in parent:
                    parent[name] = key_config(parent[name])
        for path, function in self.key_functions:
            parent, name = self._parent(slice_, path)
            if isinstance(parent, dict) and name in parent:
                parent[name] = function(parent[name])
        return slice_

    def _keyed(self, cfg: DictConfig, key: str) -> Any:
        value = plain(cfg, key)
        cls = self.configs.get(key)
        return key_data(build(cls, value, key)) if cls is not None else value

    def _locate(self, path: str) -> tuple[str, list[str]]:
        """(config key, the path's parts below it) of a dotted path under ``config_keys``."""
        for key in sorted(self.config_keys, key=len, reverse=True):
            if path == key or path.startswith(key + "."):
                return key, [p for p in path[len(key):].split(".") if p]
        raise ValueError(f"stage '{self.name}': '{path}' is under none of config_keys={self.config_keys}")

    def _parent(self, slice_: dict[str, Any], path: str) -> tuple[Any, str]:
        """(the mapping holding ``path``'s last part, that part); (None, "") where the slice
        has no such mapping (a group without that key)."""
        key, parts = self._locate(path)
        if not parts:
            return slice_, key
        node: Any = slice_.get(key)
        for part in parts[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        return (node, parts[-1]) if isinstance(node, dict) else (None, "")

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
    # the cached artifact of this key when the runner computes it again to retry the items its
    # summary's ``retry`` list names (failed for a cause that may not recur); None otherwise
    previous: Path | None = None
    key: str = ""   # the cache key being computed (names a stage's own resume folder)

    @property
    def partial_dir(self) -> Path | None:
        """``<cache.dir>/<stage>/.partial-<key>``: where a stage may keep what it has finished
        so far, so a run killed in the middle resumes (the stage removes it when complete);
        None without a cache dir."""
        if self.cache_dir is None or not self.key:
            return None
        return self.cache_dir / self.stage.name / f".partial-{self.key}"

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

    def ray(self) -> Any:
        """The run's Ray session (kohaku.core.executors.RaySession, one per run, joined on first
        use) when ``run.executor=ray``, else None: the stage then computes on this machine."""
        from kohaku.core.executors import RunConfig, ray_session

        node = OmegaConf.select(self.cfg, "run", default=None)
        values = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else {}
        run = build(RunConfig, values, "run")  # type: ignore[arg-type]
        return self.services.get("ray", as_dict(run), ray_session) if run.executor == "ray" else None

    def report(self, **values: Any) -> None:
        """Record summary figures; they go into the artifact's manifest.json and run.json."""
        self.summary.update(values)
