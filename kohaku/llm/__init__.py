"""LLM backends (hf, vllm, openai, fake), the generation cache and model fetching.

Heavy libraries (torch, transformers, vllm) are imported only by the backend that needs them.
"""

from kohaku.llm.base import (
    Backend,
    BackendError,
    ChatRequest,
    Completion,
    Counters,
    identity_of,
    load_backend,
)

__all__ = [
    "Backend",
    "BackendError",
    "ChatRequest",
    "Completion",
    "Counters",
    "identity_of",
    "load_backend",
]
