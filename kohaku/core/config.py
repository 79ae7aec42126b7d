"""Typed configs: dataclasses built from plain mappings, with errors that name the key.

Every config group's dataclass is the single source of its keys and defaults (the Hydra YAML
files under ``conf/`` only override them; kohaku/conf_store.py registers the dataclasses as
Hydra schemas). ``build`` turns a plain mapping into the dataclass: an unknown or missing key
fails with a message that names the config path. This module is library code: it knows
nothing of Hydra or OmegaConf.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import typing
from typing import Any, Iterator, Mapping, TypeVar

from kohaku.core.errors import KohakuError

T = TypeVar("T")

#: ``dataclasses.field`` metadata key: False on a field that cannot change any output (worker and
#: thread counts, progress bars), which the stages' cache keys leave out (:func:`key_data`).
KEYED = "key"


class ConfigError(KohakuError, ValueError):
    """A configuration value is missing, unknown or invalid; the message names the key."""


class ConfigFileNotFound(ConfigError, FileNotFoundError):
    """A file named by a config key does not exist; the message names the key."""


def build(cls: type[T], values: Mapping[str, Any] | None, where: str) -> T:
    """Instantiate dataclass ``cls`` from ``values``; ``where`` is the config path for errors.

    Nested dataclass fields are built recursively from nested mappings.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls} is not a dataclass")
    values = dict(values or {})
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ConfigError(
            f"unknown key(s) {', '.join(f'{where}.{k}' for k in unknown)}; "
            f"valid keys: {', '.join(sorted(names))}"
        )
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in values:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ConfigError(f"config key '{where}.{f.name}' is required")
            continue
        value = values[f.name]
        hint = hints.get(f.name)
        if isinstance(value, Mapping) and dataclasses.is_dataclass(hint):
            value = build(hint, value, f"{where}.{f.name}")
        elif dataclasses.is_dataclass(hint) and not isinstance(value, hint):
            raise ConfigError(f"config key '{where}.{f.name}' holds {type(value).__name__} {str(value)[:60]!r}; "
                              "expected a mapping of its keys (or leave it out for the defaults)")
        kwargs[f.name] = value
    obj = cls(**kwargs)
    check = getattr(obj, "validate", None)
    if callable(check):
        try:
            check()
        except ConfigError:
            raise
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from exc
    return obj


def as_dict(cfg: Any) -> dict[str, Any]:
    """A built config as plain data (code defaults included)."""
    return dataclasses.asdict(cfg)


def not_keyed(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING) -> Any:
    """A dataclass field that cannot change any output (a worker or thread count, a progress
    bar): the cache keys leave it out, so changing it reuses the cached artifacts.
    ``workers: int | None = not_keyed(None)``. Only for what truly cannot change an output: a
    setting that changes batch shapes or the order of float sums in a way the results show is
    keyed."""
    return dataclasses.field(default=default, default_factory=default_factory, metadata={KEYED: False})


def is_keyed(f: dataclasses.Field) -> bool:
    """Whether a dataclass field is part of the cache key (every field not made by :func:`not_keyed`)."""
    return f.metadata.get(KEYED, True) is not False


def unkeyed_fields(cls: type) -> frozenset[str]:
    """The names of ``cls``'s fields made by :func:`not_keyed` (none for a non-dataclass)."""
    if not dataclasses.is_dataclass(cls):
        return frozenset()
    return frozenset(f.name for f in dataclasses.fields(cls) if not is_keyed(f))


def key_data(cfg: Any) -> Any:
    """A built config as the cache key hashes it: :func:`as_dict` without the fields made by
    :func:`not_keyed`, in nested dataclasses too (and inside lists and dicts)."""
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        return {f.name: key_data(getattr(cfg, f.name)) for f in dataclasses.fields(cfg) if is_keyed(f)}
    if isinstance(cfg, Mapping):
        return {k: key_data(v) for k, v in cfg.items()}
    if isinstance(cfg, (list, tuple)):
        return [key_data(v) for v in cfg]
    return cfg


def available_cpus() -> int:
    """The CPU cores this process may run on: its affinity mask (a container's or ``taskset``'s
    limit, not the machine's count), at most ``$OMP_NUM_THREADS`` where that is set (joblib's
    loky workers of ``hydra/launcher=local`` get cores // n_jobs there, so parallel sweep points
    do not oversubscribe the cores); the default of every thread and worker count."""
    try:
        cores = max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - no sched_getaffinity (macOS, Windows)
        cores = max(1, os.cpu_count() or 1)
    omp = os.environ.get("OMP_NUM_THREADS", "").strip()
    return min(cores, int(omp)) if omp.isdigit() and int(omp) > 0 else cores


@contextlib.contextmanager
def environment(values: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` with ``values`` set inside the block, and as it was after it (a variable
    that was not set is removed again)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
