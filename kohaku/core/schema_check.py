"""JSON Schema checks for answers and submissions: the subset of draft 2020-12 kohaku writes.

``jsonschema`` is not among kohaku's dependencies; answers and submission documents need only
the keywords below, and a schema that uses any other one is refused (:func:`unsupported`), so
a check never passes by ignoring a rule. The same subset is what the constrained decoders of
the hf backend (xgrammar) and vLLM's structured outputs enforce; tests/test_kinds.py checks
that xgrammar accepts and rejects what :func:`problems` does for every per-kind schema.

Keywords: ``type`` (a name or a list), ``properties``, ``required``, ``additionalProperties``
(a boolean or a schema), ``items``, ``minItems``, ``maxItems``, ``uniqueItems``, ``enum``,
``const``, ``anyOf``, ``oneOf``, ``minLength``, ``maxLength``, ``pattern``, ``format`` (``date``
only), ``minimum``, ``maximum``; annotations (``$schema``, ``$id``, ``title``, ``description``,
``examples``, ``default``, ``$comment``) are ignored.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

from kohaku.core.errors import KohakuError

CHECKED = frozenset({
    "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
    "uniqueItems", "enum", "const", "anyOf", "oneOf", "minLength", "maxLength", "pattern",
    "format", "minimum", "maximum",
})
ANNOTATIONS = frozenset({"$schema", "$id", "title", "description", "examples", "default", "$comment"})
FORMATS = ("date",)


class SchemaError(KohakuError, ValueError):
    """A JSON schema file is unreadable or uses keywords kohaku cannot check."""


def unsupported(schema: Any, where: str = "#") -> list[str]:
    """Keywords (with their JSON pointer) that :func:`problems` would not check; [] when none."""
    out: list[str] = []
    if isinstance(schema, bool):
        return out
    if not isinstance(schema, dict):
        return [f"{where}: a schema is an object or a boolean, not {type(schema).__name__}"]
    for key, value in schema.items():
        if key in ANNOTATIONS:
            continue
        if key not in CHECKED:
            out.append(f"{where}/{key}")
        elif key == "format" and value not in FORMATS:
            out.append(f"{where}/format={value!r}")
        elif key == "properties":
            for name, sub in value.items():
                out += unsupported(sub, f"{where}/properties/{name}")
        elif key in ("items", "additionalProperties") and not isinstance(value, bool):
            out += unsupported(value, f"{where}/{key}")
        elif key in ("anyOf", "oneOf"):
            for i, sub in enumerate(value):
                out += unsupported(sub, f"{where}/{key}/{i}")
    return out


_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool))
    or (isinstance(v, float) and v.is_integer()),
}


def _equal(a: Any, b: Any) -> bool:
    # JSON equality: true is not 1
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


def problems(instance: Any, schema: Any, where: str = "$") -> list[str]:
    """What is wrong with ``instance`` under ``schema``, each naming the JSON path; [] when valid.
    Raises SchemaError for a schema with keywords outside the checked subset."""
    bad = unsupported(schema)
    if bad:
        raise SchemaError(f"the schema uses keyword(s) kohaku does not check: {', '.join(bad)}")
    return _problems(instance, schema, where)


def _problems(v: Any, s: Any, at: str) -> list[str]:
    if s is True:
        return []
    if s is False:
        return [f"{at}: no value is allowed here"]
    out: list[str] = []
    kind = s.get("type")
    if kind is not None:
        names = kind if isinstance(kind, list) else [kind]
        if not any(_TYPES[n](v) for n in names):
            return [f"{at}: {json.dumps(v)[:60]} is not of type {' or '.join(names)}"]
    if "const" in s and not _equal(v, s["const"]):
        out.append(f"{at}: {json.dumps(v)[:60]} is not {json.dumps(s['const'])}")
    if "enum" in s and not any(_equal(v, e) for e in s["enum"]):
        out.append(f"{at}: {json.dumps(v)[:60]} is not one of {json.dumps(s['enum'])[:120]}")
    for key in ("anyOf", "oneOf"):
        if key in s:
            n = sum(not _problems(v, sub, at) for sub in s[key])
            if n == 0 or (key == "oneOf" and n > 1):
                out.append(f"{at}: {json.dumps(v)[:60]} matches {n} of the {key} schemas")
    if isinstance(v, dict):
        props = s.get("properties", {})
        out += [f"{at}: missing key {k!r}" for k in s.get("required", []) if k not in v]
        extra = s.get("additionalProperties", True)
        for k, item in v.items():
            if k in props:
                out += _problems(item, props[k], f"{at}.{k}")
            elif extra is False:
                out.append(f"{at}: key {k!r} is not allowed")
            elif isinstance(extra, dict):
                out += _problems(item, extra, f"{at}.{k}")
    if isinstance(v, list):
        if "minItems" in s and len(v) < s["minItems"]:
            out.append(f"{at}: {len(v)} item(s), fewer than {s['minItems']}")
        if "maxItems" in s and len(v) > s["maxItems"]:
            out.append(f"{at}: {len(v)} item(s), more than {s['maxItems']}")
        if s.get("uniqueItems") and len({json.dumps(x, sort_keys=True) for x in v}) < len(v):
            out.append(f"{at}: items repeat")
        if isinstance(s.get("items"), (dict, bool)):
            for i, item in enumerate(v):
                out += _problems(item, s["items"], f"{at}[{i}]")
    if isinstance(v, str):
        if "minLength" in s and len(v) < s["minLength"]:
            out.append(f"{at}: shorter than {s['minLength']} characters")
        if "maxLength" in s and len(v) > s["maxLength"]:
            out.append(f"{at}: longer than {s['maxLength']} characters")
        if "pattern" in s and not re.search(s["pattern"], v):
            out.append(f"{at}: {v[:60]!r} does not match {s['pattern']!r}")
        if s.get("format") == "date" and not is_iso_date(v):
            out.append(f"{at}: {v[:60]!r} is not a date (YYYY-MM-DD)")
    if _TYPES["number"](v):
        if "minimum" in s and v < s["minimum"]:
            out.append(f"{at}: {v} is less than {s['minimum']}")
        if "maximum" in s and v > s["maximum"]:
            out.append(f"{at}: {v} is more than {s['maximum']}")
    return out


def is_iso_date(text: str) -> bool:
    """``YYYY-MM-DD`` naming a real day."""
    if not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", text):
        return False
    try:
        dt.date.fromisoformat(text)
    except ValueError:
        return False
    return True


def load_schema(path: str | Path, where: str) -> dict[str, Any]:
    """A JSON schema file, checked to use only the keywords kohaku checks; errors name the file
    and ``where`` (the config key that named it)."""
    path = Path(path)
    if not path.is_file():
        raise SchemaError(f"{path}: schema file not found ({where}); fix the path")
    try:
        schema = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise SchemaError(f"{path}: not valid JSON ({exc}) ({where})") from exc
    bad = unsupported(schema)
    if bad:
        raise SchemaError(f"{path}: keyword(s) kohaku does not check: {', '.join(bad)} ({where}); "
                          f"use only {', '.join(sorted(CHECKED))}")
    return schema
