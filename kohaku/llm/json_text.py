"""Finding the JSON answer in a model's output (``json.loads`` only, never eval)."""

from __future__ import annotations

import json
from typing import Any

_DECODER = json.JSONDecoder()


def first_json_object(raw: str) -> dict[str, Any] | None:
    """The first ``{...}`` object in ``raw`` that parses as JSON, else None (never eval)."""
    start = raw.find("{")
    while start != -1:
        try:
            obj, _ = _DECODER.raw_decode(raw, start)
            if isinstance(obj, dict):
                return obj
        except json.JSONDecodeError:
            pass
        start = raw.find("{", start + 1)
    return None
