"""Named functions a task can refer to: a small registry, no Hydra.

A task YAML names code by a short name (``vote.group: amounts``, ``score.metrics[].fn:
token_f1``, ``submission.writer: columns``) or, for a competition whose code lives outside
kohaku, by an import path ``package.module:function``. Each kind of function has its own
table; :func:`lookup` resolves a name and fails with the config key and the known names.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from kohaku.core.config import ConfigError

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


#: the library code kohaku's own named functions run (their module and what it calls)
_KOHAKU_SCORING = ("kohaku/tasks/**/*.py", "kohaku/answer/values.py", "kohaku/core/csvfile.py")


def code_hash(kind: str, name: str) -> str:
    """sha256 of the code the function ``name`` of ``kind`` runs: for a function of a module of
    your own (``package.module:function``) that module's source; for one of kohaku's, the
    sources of kohaku's scoring modules (kohaku/tasks/, metrics, diagnosis, values, submission).
    A name that does not resolve hashes as its error (the stage reports it when it runs)."""
    import hashlib
    import inspect
    from pathlib import Path

    try:
        fn = lookup(kind, name, f"{kind} {name}")
        module = inspect.getmodule(fn)
        if module is None:
            return hashlib.sha256(inspect.getsource(fn).encode()).hexdigest()
        if module.__name__.split(".")[0] == "kohaku":
            root = Path(__file__).resolve().parents[2]
            files = sorted({p for pattern in _KOHAKU_SCORING for p in root.glob(pattern)})
            text = "".join(f"{p.relative_to(root)}\n{p.read_text(encoding='utf-8')}" for p in files)
        else:
            text = inspect.getsource(module)
    except (ConfigError, OSError, TypeError) as exc:
        return f"unresolved: {exc}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _load_builtins() -> None:
    # the modules that register kohaku's own functions (imported on first use: no cycles)
    from kohaku.tasks import builtin  # noqa: F401
