"""A competition's own scoring script, adopted as it is: the ``adopted`` metric.

A competition's scorer is the truth its leaderboard is computed by; porting it rule by rule
gives a number that differs somewhere. The metric ``adopted`` (``score.metrics[].fn: adopted``)
calls a function of the competition's script, unedited, wherever it is on disk::

    - name: f1
      fn: adopted
      params:
        file: ${oc.env:KOHAKU_TATQA_DIR}/tatqa_eval.py   # or relative to the task file, ~ and $VARS expanded
        function: TaTQAEmAndF1            # a function, or a class: made, called, then `result`
        result: get_overall_metric
        args:                             # the function's keyword -> where its value comes from
          ground_truth: {solution: "*"}   # the whole solutions record
          prediction: {submission: answer}
          pred_scale: {submission: scale}
        returns: mapping                  # value | mapping | printed
        names: [em, f1, scale, op]        # a tuple's items
        score: f1                         # the item that is this component's value

**Arguments** (``args``: keyword -> source): ``{solution: COLUMN}`` (a solutions cell; ``"*"``
the whole record; a list of columns a dict of them), ``{submission: COLUMN}`` (the same of the
submission's row; None when it has no row for the question), ``{kind: true}`` (the question's
answer kind, ``task.answer.kinds.column``), ``{qid: true}``, ``{const: VALUE}`` (a fresh copy
per call) and ``{file: solutions}`` / ``{file: submission}`` (the path of the file scored, for a
function that reads the files itself). A cell of a file read with a ``shape``
(kohaku.tasks.files.shapes) comes with its JSON type (a list stays a list); ``as: json`` parses a
CSV cell's text as JSON, ``as: text`` gives the cell as written.

**Levels**: ``level: question`` calls the function once per question (a class: a fresh
instance per question) and takes one value per question; ``level: set`` calls it once with
every question: each argument the per-question values gathered as ``shape`` says: ``list``
(in solutions order), ``by_id`` (qid -> value; questions the submission has no row for left
out) or ``columns`` (for a list of columns: column -> list of values); an argument may set its
own ``shape``.

**Returns**: ``value`` (a number or a bool; None: the question is not covered), ``mapping``
(a dict, or a tuple or list whose items ``names`` names: ``score`` names the item that is the
component's value; the other numbers become components beside it, weight 0, named
``<name>_<key>``, or those listed in ``components``), or ``printed`` (the value is the last line
the call printed that reads as a Python or JSON literal: a number, or a dict read as a mapping:
for a script that prints its figures and returns nothing, e.g. HotpotQA's ``eval``).

**Loading safely**: the file is imported under a unique module name (so a ``if __name__ ==
"__main__":`` block does not run), with its own folder first on ``sys.path`` (it imports its
sibling files; a sibling whose name is already imported elsewhere is imported fresh and put
back after; the standard library's modules are never displaced) and ``sys.argv`` set to ``[file]`` (argparse at import sees no options); what it
prints at import and in each call is captured and logged at debug level. An import that exits
(``sys.exit``) or raises is refused with an error naming the file and why. The file's code and
the code of the sibling files it imports (found by reading its imports) are in the score's
cache key (:func:`code_key`), so editing any of them re-scores.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import hashlib
import importlib.util
import inspect
import io
import json
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

from kohaku.core.config import ConfigError, build
from kohaku.core.errors import MetricError
from kohaku.tasks.files.shapes import ORIGINAL, original

log = logging.getLogger("kohaku.score.adopted")

RETURNS = ("value", "mapping", "printed")
SHAPES = ("list", "by_id", "columns")
SOURCES = ("solution", "submission", "kind", "qid", "const", "file")
READS = ("auto", "json", "text")


class ScriptError(ConfigError):
    """An adopted scoring script cannot be loaded (not found, exits or fails at import, lacks the
    function); the message names the file and why."""


@dataclass
class AdoptedParams:
    """The ``adopted`` metric's ``params`` (module doc)."""

    file: str = ""                    # the script: absolute, relative to the task file, ~ and $VARS expanded
    function: str = ""                # a function or class of the script (dotted: Class.method)
    # the function's keyword -> its source: {solution: COLUMN} ("*": the record; a list: a dict
    # of those), {submission: COLUMN}, {kind: true}, {qid: true}, {const: VALUE}, {file:
    # solutions|submission} (the path); optional as: auto|json|text, shape (level set)
    args: dict[str, Any] = field(default_factory=dict)
    init: dict[str, Any] = field(default_factory=dict)    # a class: its constructor's keywords -> source (constants)
    result: str | None = None         # a class: the method (no arguments) whose return is the value
    returns: str = "value"            # value | mapping | printed
    names: list[str] = field(default_factory=list)        # mapping: the names of a tuple's items
    score: str | None = None          # mapping, printed dict: the key that is the component's value
    components: list[str] | None = None   # keys reported beside it (weight 0); null: every other number
    shape: str = "list"               # level set: how each argument gathers the questions: list | by_id | columns
    # level question: call the function for a question the submission has no row for, or no
    # value in a column an argument reads (None); false: not called, it scores
    # task.score.unanswered as every metric does
    call_missing: bool = False

    def validate(self) -> None:
        if not self.file or not self.function:
            raise ConfigError("the adopted metric needs params.file (the scoring script) and "
                              "params.function (the function or class to call)")
        if self.returns not in RETURNS:
            raise ConfigError(f"returns={self.returns!r}; use one of {', '.join(RETURNS)}")
        if self.shape not in SHAPES:
            raise ConfigError(f"shape={self.shape!r}; use one of {', '.join(SHAPES)}")
        if self.returns != "value" and self.score is None and self.returns == "mapping":
            raise ConfigError("returns=mapping needs params.score: the key (or name of params.names) "
                              "that is the component's value")
        for key, source in {**self.args, **self.init}.items():
            _check_source(key, source)


def _check_source(key: str, source: Any) -> None:
    if not isinstance(source, dict):
        raise ConfigError(f"args.{key}={source!r}; give a source such as {{solution: answer}}, "
                          f"{{submission: answer}}, {{const: 3}} (one of {', '.join(SOURCES)})")
    named = [s for s in SOURCES if s in source]
    unknown = sorted(set(source) - set(SOURCES) - {"as", "shape"})
    if len(named) != 1 or unknown:
        raise ConfigError(f"args.{key}={source}: give exactly one of {', '.join(SOURCES)} (and "
                          f"optionally as: {'|'.join(READS)}, shape: {'|'.join(SHAPES)})"
                          + (f"; unknown key(s) {unknown}" if unknown else ""))
    if source.get("as", "auto") not in READS:
        raise ConfigError(f"args.{key}.as={source['as']!r}; use one of {', '.join(READS)}")
    if source.get("shape", "list") not in SHAPES:
        raise ConfigError(f"args.{key}.shape={source['shape']!r}; use one of {', '.join(SHAPES)}")
    if "file" in source and source["file"] not in ("solutions", "submission"):
        raise ConfigError(f"args.{key}.file={source['file']!r}; use solutions or submission")


@dataclass
class MetricParts:
    """A metric's value with named parts beside it: per question (``values`` and each part a
    list, one per row) or for the set (numbers). The scorer reports each part as a component of
    weight 0 named ``<metric>_<part>`` (kohaku.tasks.score.scoring)."""

    values: Any
    parts: dict[str, Any] = field(default_factory=dict)


# -- the script's file --------------------------------------------------------------------


def script_path(value: str, base: Path | None = None) -> Path:
    """``params.file`` as a path: ``~`` and ``$VARS`` expanded; absolute; else relative to ``base``
    (the task file's folder) when given, else under conf/task/ where it is there, else relative
    to the working directory."""
    path = Path(os.path.expandvars(os.path.expanduser(str(value))))
    if path.is_absolute():
        return path
    if base is not None:
        return (base / path).resolve()
    return (TASK_DIR / path) if (TASK_DIR / path).is_file() else path.resolve()


#: conf/task/, where a relative script of a task composed by Hydra (no task file) is looked for
TASK_DIR = Path(__file__).resolve().parents[3] / "conf" / "task"


def anchor_files(data: dict[str, Any], base: Path) -> dict[str, Any]:
    """A task file's values with each adopted metric's relative ``params.file`` made absolute
    against ``base`` (the task file's folder), so the task scores the same script from any
    working directory (kohaku.tasks.read_task_yaml). Left as written: a file under conf/task/
    (found there when used, as Hydra composes it), one starting with ``~`` or ``$`` (expanded
    when used) and an interpolation."""
    if base.resolve() == TASK_DIR.resolve():
        return data
    score = data.get("score")
    for m in (score.get("metrics") or []) if isinstance(score, dict) else []:
        params = m.get("params") if isinstance(m, dict) and m.get("fn") in ADOPTED else None
        file = params.get("file") if isinstance(params, dict) else None
        if isinstance(file, str) and file and not file.startswith(("~", "$")) and not Path(file).is_absolute():
            params["file"] = str(script_path(file, base))
    return data


def check_params(params: Any, where: str, solutions: list[str] | None = None) -> AdoptedParams:
    """The adopted metric's params checked before anything runs (kohaku.tasks.whole): the keys
    and sources, the script's file, and the solutions columns its arguments read (``solutions``:
    the file's columns, where known); errors name the key."""
    p = build(AdoptedParams, params, where)
    path = script_path(p.file)
    if not path.is_file():
        raise ConfigError(f"{where}.file={p.file!r}: no such file ({path}); give the scoring script's "
                          "path (absolute, relative to the task file, ~ and $VARS expanded)")
    for key, source in {**p.args, **p.init}.items():
        column = source.get("solution")
        named = [column] if isinstance(column, str) and column != "*" else column if isinstance(column, list) else []
        missing = [c for c in named if solutions is not None and c not in solutions]
        if missing:
            raise ConfigError(f"{where}.args.{key}: the solutions file has no column(s) {missing}; it "
                              f"has {', '.join(solutions or [])}")
    return p


def _local_modules(path: Path) -> set[str]:
    """The top-level names of the sibling modules the script imports (:func:`script_files`),
    except the standard library's (a folder's ``json.py`` does not displace the ``json`` every
    other module of the process uses)."""
    names = {q.relative_to(path.parent).parts[0].removesuffix(".py") for q in script_files(path)[1:]}
    return names - set(sys.stdlib_module_names) - set(sys.builtin_module_names)


def _candidates(folder: Path, dotted: str) -> list[Path]:
    parts = dotted.split(".")
    out = []
    for i in range(1, len(parts) + 1):
        base = folder.joinpath(*parts[:i])
        out += [p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()]
    return out


def script_files(path: Path) -> list[Path]:
    """The script and the files of its own folder it imports, directly or through each other
    (read from their import statements, not run)."""
    folder = path.parent
    seen: dict[Path, None] = {}
    todo = [path]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen[p] = None
        try:
            tree = ast.parse(p.read_text(encoding="utf-8"), filename=str(p))
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    todo += _candidates(folder, alias.name)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    here = p.parent
                    for _ in range(node.level - 1):
                        here = here.parent
                    base = node.module or ""
                    todo += _candidates(here, base) if base else []
                    todo += [c for a in node.names for c in _candidates(here, f"{base}.{a.name}".strip("."))]
                elif node.module:
                    todo += _candidates(folder, node.module)
                    todo += [c for a in node.names for c in _candidates(folder, f"{node.module}.{a.name}")]
    return sorted(seen, key=lambda q: (q != path, str(q)))


def code_key(params: Any, base: Path | None = None) -> str:
    """sha256 of the adopted script's code and of the sibling files it imports (their names and
    text), for the score's cache key; a file that cannot be read hashes as its error."""
    try:
        path = script_path(str((params or {}).get("file", "")), base)
        files = script_files(path)
        text = "".join(f"{p.relative_to(path.parent)}\n{p.read_text(encoding='utf-8', errors='replace')}\n"
                       for p in files)
    except (OSError, ValueError) as exc:
        return f"unresolved: {exc}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@contextlib.contextmanager
def _script_context(folder: Path, argv0: str, saved_names: set[str]) -> Iterator[None]:
    """The script's folder first on sys.path, argv [file], and the modules of the same names as
    its siblings set aside (put back on exit)."""
    old_path, old_argv = list(sys.path), list(sys.argv)
    aside = {n: m for n, m in sys.modules.items() if n.split(".")[0] in saved_names}
    for n in aside:
        del sys.modules[n]
    before = set(sys.modules)
    sys.path.insert(0, str(folder))
    sys.argv = [argv0]
    try:
        yield
    finally:
        sys.path[:] = old_path
        sys.argv[:] = old_argv
        for n in [n for n in sys.modules if n not in before]:   # the script's own, and what it
            file = getattr(sys.modules[n], "__file__", None) or ""   # loaded from its folder
            if n.split(".")[0] in saved_names or (file and Path(file).resolve().is_relative_to(folder.resolve())):
                del sys.modules[n]
        sys.modules.update(aside)


@contextlib.contextmanager
def _captured(what: str) -> Iterator[io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            yield out
    finally:
        for stream, text in (("stdout", out.getvalue()), ("stderr", err.getvalue())):
            if text.strip():
                log.debug("%s printed on %s:\n%s", what, stream, text.rstrip()[-4000:])


class Script:
    """A scoring script, loaded (module doc): use as a context manager; the script and its
    siblings leave ``sys.modules`` on exit."""

    def __init__(self, path: Path):
        self.path = path
        self.folder = path.parent
        self.local = _local_modules(path)
        self.module: ModuleType | None = None
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> "Script":
        path = self.path
        if not path.is_file():
            raise ScriptError(f"{path}: scoring script not found (task.score.metrics[].params.file); "
                              "give its path (absolute, or relative to the task file)")
        digest = hashlib.sha256(str(path).encode()).hexdigest()[:12]
        name = f"kohaku_adopted_{path.stem}_{digest}"
        self.local.add(name)
        self._stack.enter_context(_script_context(self.folder, str(path), self.local))
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            self._stack.close()
            raise ScriptError(f"{path}: cannot be loaded as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            with _captured(f"{path} (import)"):
                spec.loader.exec_module(module)
        except SystemExit as exc:
            self._stack.close()
            raise ScriptError(f"{path}: the script exits when imported (SystemExit({exc.code!r})), "
                              "e.g. it parses its command line or calls sys.exit outside a "
                              "`if __name__ == \"__main__\":` block; kohaku imports it to call one "
                              "of its functions, so it cannot be adopted as it is") from exc
        except BaseException as exc:  # noqa: BLE001 - any failure of third-party code at import
            self._stack.close()
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise ScriptError(f"{path}: the script fails when imported ({type(exc).__name__}: {exc}); "
                              "check it runs with this Python (its imports installed)") from exc
        self.module = module
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stack.close()

    def target(self, dotted: str) -> Any:
        obj: Any = self.module
        for part in dotted.split("."):
            if not hasattr(obj, part):
                known = sorted(n for n, v in vars(self.module).items()
                               if not n.startswith("_") and callable(v)
                               and getattr(v, "__module__", None) not in (None, "typing"))
                raise ScriptError(f"{self.path}: no {dotted!r} (params.function); it defines "
                                  f"{', '.join(known[:30])}")
            obj = getattr(obj, part)
        if not callable(obj):
            raise ScriptError(f"{self.path}: {dotted!r} is not a function or class")
        return obj

    def call(self, fn: Any, kwargs: dict[str, Any], what: str) -> tuple[Any, str]:
        """``fn(**kwargs)`` with the script's folder on the path and its prints captured:
        (return, printed text). Its exceptions become a MetricError naming ``what``."""
        try:
            with _captured(what) as out:
                value = fn(**kwargs)
        except SystemExit as exc:
            raise MetricError(f"{what}: the script exited (SystemExit({exc.code!r}))") from exc
        except Exception as exc:  # noqa: BLE001 - third-party code
            raise MetricError(f"{what}: {type(exc).__name__}: {exc}") from exc
        return value, out.getvalue()


# -- the metric ---------------------------------------------------------------------------


def _value_of(row: dict[str, Any] | None, column: Any, read: str, where: str, qid: str) -> Any:
    if row is None:
        return None
    orig = original(row) if read == "auto" else None
    record = orig if orig is not None else {k: v for k, v in row.items() if k != ORIGINAL}

    def one(col: str) -> Any:
        if col not in record:
            raise MetricError(f"{where}: question {qid}: no column {col!r}; the row has "
                              f"{', '.join(k for k in record if k != ORIGINAL)}")
        value = record[col]
        if read == "json" and isinstance(value, str):
            try:
                return json.loads(value)
            except ValueError:
                return value
        return value

    if column == "*":
        return {k: one(k) for k in record}
    if isinstance(column, list):
        return {c: one(c) for c in column}
    return one(str(column))


def _source(source: dict[str, Any], row: dict[str, Any], env: Any, where: str) -> Any:
    read = source.get("as", "auto")
    if "const" in source:
        return copy.deepcopy(source["const"])
    if "qid" in source:
        return row["qid"]
    if "file" in source:
        path = getattr(env, "solutions" if source["file"] == "solutions" else "submission", None)
        if path is None:
            raise MetricError(f"{where}: the {source['file']} file's path is not known here; score "
                              "through kohaku.tasks.score.scoring")
        return str(path)
    if "kind" in source:
        task = getattr(env, "task", None)
        column = task.answer.kinds.column if task is not None else None
        if column is None:
            raise ConfigError(f"{where}: {{kind: ...}} needs task.answer.kinds.column")
        return (row["solution"].get(column) or "").strip() or task.answer.kinds.default
    side = "solution" if "solution" in source else "submission"
    return _value_of(row[side], source[side], read, where, row["qid"])


def _number(value: Any, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError) as exc:
        raise MetricError(f"{what} returned {value!r}, not a number (params.returns: value | "
                          "mapping | printed)") from exc


def _printed(text: str, what: str) -> Any:
    for line in reversed([ln.strip() for ln in text.splitlines() if ln.strip()]):
        for parse in (json.loads, ast.literal_eval):
            try:
                value = parse(line)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
            if isinstance(value, (dict, int, float)):
                return value
    raise MetricError(f"{what}: printed no line that reads as a number or a dict (params.returns="
                      f"printed); it printed: {text.strip()[-300:]!r}")


def _reading(p: AdoptedParams, value: Any, printed: str, what: str) -> tuple[float | None, dict[str, float]]:
    """(the component's value, the parts beside it) of one call's return."""
    if p.returns == "printed":
        value = _printed(printed, what)
        if not isinstance(value, dict):
            return _number(value, what), {}
    elif p.returns == "value":
        return _number(value, what), {}
    if isinstance(value, (tuple, list)):
        if len(p.names) != len(value):
            raise MetricError(f"{what} returned {len(value)} items; params.names names "
                              f"{len(p.names)} ({p.names})")
        value = dict(zip(p.names, value))
    if not isinstance(value, dict):
        raise MetricError(f"{what} returned {type(value).__name__}, not a dict or tuple (params.returns="
                          f"{p.returns})")
    if p.score not in value:
        raise MetricError(f"{what}: params.score={p.score!r} is not in what it returned "
                          f"({', '.join(map(str, value))})")
    keys = p.components if p.components is not None else [
        k for k, v in value.items() if k != p.score and isinstance(v, (int, float))]
    missing = [k for k in keys if k not in value]
    if missing:
        raise MetricError(f"{what}: params.components {missing} not in what it returned "
                          f"({', '.join(map(str, value))})")
    return _number(value[p.score], what), {str(k): _number(value[k], what) for k in keys}


def _gather(values: list[Any], rows: list[dict[str, Any]], shape: str, source: dict[str, Any]) -> Any:
    if shape == "by_id":
        side_missing = "submission" in source
        return {r["qid"]: v for r, v in zip(rows, values) if not (side_missing and r["submission"] is None)}
    if shape == "columns":
        keys = list(dict.fromkeys(k for v in values if isinstance(v, dict) for k in v))
        return {k: [(v or {}).get(k) for v in values] for k in keys}
    return values


def adopted_metric(rows: list[dict[str, Any]], params: dict[str, Any], env: Any) -> Any:
    """A function of the competition's own scoring script (``params.file``, unedited), called
    with the arguments ``params.args`` maps from solution and submission columns, the question's
    kind or constants: per question (a value each), or once for the whole set at ``level: set``;
    a number, a bool or a dict of named figures back (each a component beside it). The
    script's code and the sibling files it imports are in the score's cache key
    (kohaku.tasks.score.adopted; docs/guides/adopt-a-scorer.md)."""
    where = "task.score.metrics[adopted].params"
    p = build(AdoptedParams, params, where)
    level = getattr(env, "level", "question") or "question"
    path = script_path(p.file)
    with Script(path) as script:
        target = script.target(p.function)
        is_class = inspect.isclass(target)
        init = {k: _source(s, rows[0] if rows else {}, env, where) for k, s in p.init.items()} if is_class else {}

        def run(kwargs: dict[str, Any], what: str) -> tuple[Any, str]:
            if not is_class:
                return script.call(target, kwargs, what)
            obj, _ = script.call(target, init, f"{what} (making {p.function})")
            value, printed = script.call(obj, kwargs, what)
            if p.result:
                method = getattr(obj, p.result, None)
                if not callable(method):
                    raise ScriptError(f"{path}: {p.function} has no method {p.result!r} (params.result)")
                value, more = script.call(method, {}, f"{what} ({p.result})")
                printed += more
            return value, printed

        if level == "set":
            kwargs = {}
            for key, source in p.args.items():
                if any(s in source for s in ("const", "file")):
                    kwargs[key] = _source(source, rows[0] if rows else {"qid": ""}, env, where)
                    continue
                values = [_source(source, r, env, where) for r in rows]
                kwargs[key] = _gather(values, rows, source.get("shape", p.shape), source)
            value, printed = run(kwargs, f"{path}: {p.function} (all {len(rows)} questions)")
            score, parts = _reading(p, value, printed, f"{path}: {p.function}")
            if score is None:
                raise MetricError(f"{path}: {p.function} returned None for the set; a set-level "
                                  "metric gives one number")
            return MetricParts(score, parts) if parts else score
        values: list[float | None] = []
        parts: dict[str, list[float | None]] = {}
        task = getattr(env, "task", None)
        unanswered = task.score.unanswered if task is not None else 0.0
        skipped: set[int] = set()
        for i, r in enumerate(rows):
            kwargs = {} if r["submission"] is None and not p.call_missing else {
                key: _source(source, r, env, where) for key, source in p.args.items()}
            if not p.call_missing and (r["submission"] is None or any(
                    kwargs[k] is None for k, source in p.args.items() if "submission" in source)):
                values.append(unanswered)          # no row, or no value where the script reads one
                skipped.add(i)
                for k in parts:
                    parts[k][i] = unanswered
                continue
            what = f"{path}: {p.function} (question {r['qid']})"
            value, printed = run(kwargs, what)
            score, extra = _reading(p, value, printed, what)
            values.append(score)
            for k, v in extra.items():
                parts.setdefault(k, [unanswered if j in skipped else None for j in range(len(rows))])[i] = v
        return MetricParts(values, parts) if parts else values


#: the catalog names of this metric (kohaku.tasks.named.catalog), for the score key and file anchors
ADOPTED = ("adopted",)
