"""Heavy objects shared by the stages of one run (encoders, LLM engines), created on first use.

A stage asks ``ctx.services.get("llm", llm_cfg, load_backend)``; a second stage asking with an
equal config gets the same object, so a model is loaded once per process and only when a stage
actually computes (a cache hit never loads anything).
"""

from __future__ import annotations

import json
import logging
from typing import Any, Callable, TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)


class Services:
    def __init__(self) -> None:
        self._objects: dict[tuple[str, str], Any] = {}

    def get(self, kind: str, cfg: dict[str, Any], factory: Callable[[dict[str, Any]], T]) -> T:
        key = (kind, json.dumps(cfg, sort_keys=True, default=str))
        if key not in self._objects:
            log.info("loading %s %s", kind, cfg.get("name") or cfg.get("model") or "")
            self._objects[key] = factory(cfg)
        return self._objects[key]

    def close(self) -> None:
        for obj in self._objects.values():
            closer = getattr(obj, "close", None)
            if callable(closer):
                closer()
        self._objects.clear()
