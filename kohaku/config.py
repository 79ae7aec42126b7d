"""Typed configs: dataclasses built from plain mappings, with errors that name the key.

Every config group's dataclass is the single source of its keys and defaults (the Hydra YAML
files under ``conf/`` only override them; kohaku/conf_store.py registers the dataclasses as
Hydra schemas). ``build`` turns a plain mapping into the dataclass: an unknown or missing key
fails with a message that names the config path. This module is library code: it knows
nothing of Hydra or OmegaConf.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Mapping, TypeVar

from kohaku.errors import KohakuError

T = TypeVar("T")


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
    """A built config as plain data (what the cache key hashes: code defaults included)."""
    return dataclasses.asdict(cfg)
