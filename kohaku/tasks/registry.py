"""Named functions a task can refer to: a small registry, no Hydra.

A task YAML names code by a short name (``vote.group: amounts``, ``score.metrics[].fn:
token_f1``, ``submission.writer: columns``) or, for a competition whose code lives outside
kohaku, by an import path ``package.module:function``. Each kind of function has its own
table; :func:`lookup` resolves a name and fails with the config key and the known names.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from kohaku.config import ConfigError

KINDS = ("group", "writer", "metric", "classes")
_TABLES: dict[str, dict[str, Callable[..., Any]]] = {kind: {} for kind in KINDS}


def register(kind: str, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: make ``fn`` known as ``name`` among the functions of ``kind``."""
    if kind not in _TABLES:
        raise ValueError(f"unknown registry kind {kind!r}; kinds: {', '.join(KINDS)}")

    def add(fn: Callable[..., Any]) -> Callable[..., Any]:
        _TABLES[kind][name] = fn
        return fn

    return add


def names(kind: str) -> list[str]:
    _load_builtins()
    return sorted(_TABLES[kind])


def lookup(kind: str, name: str, where: str) -> Callable[..., Any]:
    """The function registered as ``name`` (or imported from ``module:function``); ``where`` is
    the config key that named it, for the error."""
    _load_builtins()
    if ":" in name:
        module, _, attr = name.partition(":")
        try:
            fn = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"{where}={name!r}: cannot import {attr!r} from module {module!r} "
                              f"({exc}); check the module is importable (PYTHONPATH)") from exc
        if not callable(fn):
            raise ConfigError(f"{where}={name!r} is not a function")
        return fn
    table = _TABLES[kind]
    if name not in table:
        raise ConfigError(f"{where}={name!r} is unknown; known: {', '.join(sorted(table))}, "
                          "or an import path 'package.module:function'")
    return table[name]


def _load_builtins() -> None:
    # the modules that register kohaku's own functions (imported on first use: no cycles)
    from kohaku.tasks import builtin  # noqa: F401
