"""Hydra override text from plain values: ``key=value`` as a command line or a sweep's points
file writes it, so a value read from YAML (a string with quotes, ``${...}``, a list, a mapping,
null) reaches the composed config unchanged. Plain string formatting: the library writes the
text, the runner and the commands hand it to Hydra."""

from __future__ import annotations

import re
from typing import Any


def override_text(key: str, value: Any) -> str:
    """``key=value`` as a Hydra override: numbers and booleans as written, null, lists and
    mappings in Hydra's flow form (``[1,2]``, ``{name:judge,weight:1.0}``), a string quoted
    where Hydra's grammar needs it."""
    return f"{key}={_hydra_value(value)}"


def _hydra_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_hydra_value(v)}" for k, v in value.items()) + "}"
    text = str(value)
    if text and all(c.isalnum() or c in "_-./:" for c in text) and text not in ("null", "true", "false"):
        return text
    # Hydra's quoted value: a quote is escaped, and so are the backslashes before a quote or at the end
    text = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", text)
    text = text.replace("${", "\\${")     # a literal ${...}, not an interpolation
    return "'%s'" % re.sub(r"(\\+)$", lambda m: m.group(1) * 2, text)
