"""Fake vllm.v1.engine.exceptions."""

from __future__ import annotations

from vllm.exceptions import VLLMServerError


class EngineDeadError(VLLMServerError):
    """Raised when the EngineCore dies (the real one says exactly this)."""

    def __init__(self, *args, suppress_context: bool = False):
        super().__init__("EngineCore encountered an issue. See stack trace (above) for the root cause.", *args)
        self.__suppress_context__ = suppress_context
