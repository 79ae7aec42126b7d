"""Named functions a task can refer to: a small registry, no Hydra.

A task YAML names code by a short name (``vote.group: amounts``, ``score.metrics[].fn:
token_f1``, ``submission.writer: columns``) or, for a competition whose code lives outside
kohaku, by an import path ``package.module:function``. Each kind of function has its own
table in :mod:`kohaku.tasks.named.catalog` (name -> ``module:function``), read here; the function's
module is imported when it is looked up, so nothing registers by being imported and the
registry imports none of the modules it names. :func:`lookup` resolves a name and fails with
the config key and the known names.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from kohaku.core.config import ConfigError
from kohaku.tasks.named.catalog import CATALOG, declared_params

KINDS = tuple(CATALOG)


def _import(path: str, where: str, name: str) -> Callable[..., Any]:
    module, _, attr = path.partition(":")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{where}={name!r}: cannot import {attr!r} from module {module!r} "
                          f"({exc}); check the module is importable (PYTHONPATH)") from exc
    if not callable(fn):
        raise ConfigError(f"{where}={name!r} is not a function")
    return fn


def names(kind: str) -> list[str]:
    return sorted(CATALOG[kind])


def lookup(kind: str, name: str, where: str) -> Callable[..., Any]:
    """The function named ``name`` in the table of ``kind`` (or imported from
    ``module:function``); ``where`` is the config key that named it, for the error."""
    if ":" in name:
        return _import(name, where, name)
    table = CATALOG[kind]
    if name not in table:
        raise ConfigError(f"{where}={name!r} is unknown; known: {', '.join(sorted(table))}, "
                          "or an import path 'package.module:function'")
    return _import(table[name], where, name)


def accepted_params(kind: str, name: str) -> tuple[str, ...] | None:
    """The params the function ``name`` of ``kind`` accepts: a catalog function's declaration
    (kohaku.tasks.named.catalog.PARAMS; none when it declares none), or for ``package.module:function``
    its ``PARAMS`` attribute (a tuple of names, or a dataclass whose fields are its keys); None
    when a function of your own declares nothing (or cannot be imported: looking it up reports
    that), so its params are not checked."""
    if ":" not in name:
        return declared_params(kind, name) if name in CATALOG.get(kind, {}) else None
    try:
        fn = _import(name, kind, name)
    except ConfigError:
        return None
    declared = getattr(fn, "PARAMS", None)
    if declared is None:
        return None
    import dataclasses

    if dataclasses.is_dataclass(declared):
        return tuple(f.name for f in dataclasses.fields(declared))
    if isinstance(declared, str) or not all(isinstance(k, str) for k in declared):
        raise ConfigError(f"{name}.PARAMS must be a tuple of param names or a dataclass; it is "
                          f"{declared!r}")
    return tuple(declared)


def check_params(kind: str, name: str, params: Any, where: str) -> None:
    """Refuse a param ``name`` does not accept (``where``: the config key of the params), naming
    the valid ones; a function that declares nothing of its own is not checked."""
    accepted = accepted_params(kind, name)
    if accepted is None or params is None:
        return
    if not isinstance(params, dict):
        raise ConfigError(f"{where} must be a mapping of param -> value; it is {params!r}")
    unknown = sorted(set(map(str, params)) - set(accepted))
    if unknown:
        valid = ", ".join(sorted(accepted)) if accepted else "none (it takes no params)"
        raise ConfigError(f"unknown param(s) {', '.join(f'{where}.{k}' for k in unknown)} of the {kind} "
                          f"{name!r}; valid params: {valid}")


#: the library code kohaku's own named functions run (their module and what it calls)
_KOHAKU_SCORING = ("kohaku/tasks/**/*.py", "kohaku/core/values.py", "kohaku/core/cells.py", "kohaku/core/csvfile.py")


def code_hash(kind: str, name: str) -> str:
    """sha256 of the code the function ``name`` of ``kind`` runs: for a function of a module of
    your own (``package.module:function``) that module's source; for one of kohaku's, the
    sources of kohaku's scoring modules (kohaku/tasks/ and its rooms, core values and cells).
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
            root = Path(__file__).resolve().parents[3]
            files = sorted({p for pattern in _KOHAKU_SCORING for p in root.glob(pattern)})
            text = "".join(f"{p.relative_to(root)}\n{p.read_text(encoding='utf-8')}" for p in files)
        else:
            text = inspect.getsource(module)
    except (ConfigError, OSError, TypeError) as exc:
        return f"unresolved: {exc}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
