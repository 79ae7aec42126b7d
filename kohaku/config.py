"""Typed views over the Hydra config.

Stages receive their config slice as plain dicts and turn them into dataclasses with
``build``; an unknown or missing key fails with a message that names the config path.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Mapping, TypeVar

from omegaconf import DictConfig, OmegaConf

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration value is missing, unknown or invalid; the message names the key."""


def select(cfg: DictConfig, key: str) -> Any:
    """``cfg`` at dotted ``key``; raises ConfigError naming the key when it is absent."""
    node = OmegaConf.select(cfg, key, throw_on_missing=True, default=_MISSING)
    if node is _MISSING:
        raise ConfigError(f"config key '{key}' is not set")
    return node


_MISSING = object()


def build(cls: type[T], values: Mapping[str, Any] | None, where: str) -> T:
    """Instantiate dataclass ``cls`` from ``values``; ``where`` is the config path for errors.

    Nested dataclass fields are built recursively from nested mappings.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls} is not a dataclass")
    values = dict(values or {})
    if isinstance(values, DictConfig):  # pragma: no cover - defensive
        values = OmegaConf.to_container(values, resolve=True)
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
