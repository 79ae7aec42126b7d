"""Fake vllm.sampling_params (0.33 field names; keyword-only like the msgspec struct)."""

from __future__ import annotations

from typing import Any

from vllm.exceptions import VLLMValidationError

_SAMPLING_EPS = 1e-5


class StructuredOutputsParams:
    def __init__(self, *, json: Any = None, regex: str | None = None, choice: list | None = None,
                 grammar: str | None = None, json_object: bool | None = None,
                 structural_tag: str | None = None, disable_any_whitespace: bool = False,
                 disable_additional_properties: bool = False, whitespace_pattern: str | None = None):
        set_ = [n for n, v in (("json", json), ("regex", regex), ("choice", choice),
                               ("grammar", grammar), ("json_object", json_object),
                               ("structural_tag", structural_tag)) if v is not None]
        if len(set_) != 1:
            raise ValueError(f"exactly one of json/regex/choice/grammar/json_object/structural_tag "
                             f"must be set, got {set_}")
        self.json = json
        self.regex = regex
        self.choice = choice
        self.grammar = grammar
        self.json_object = json_object


class SamplingParams:
    def __init__(self, *, n: int = 1, temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
                 min_p: float = 0.0, seed: int | None = None, stop: Any = None,
                 stop_token_ids: Any = None, max_tokens: int | None = 16, min_tokens: int = 0,
                 presence_penalty: float = 0.0, frequency_penalty: float = 0.0,
                 repetition_penalty: float = 1.0, logprobs: int | None = None,
                 include_stop_str_in_output: bool = False, ignore_eos: bool = False,
                 skip_special_tokens: bool = True,
                 structured_outputs: StructuredOutputsParams | None = None, logit_bias: Any = None,
                 allowed_token_ids: Any = None, bad_words: Any = None, extra_args: Any = None,
                 thinking_token_budget: int | None = None, repetition_detection: Any = None):
        if n < 1:
            raise ValueError("n must be at least 1")
        if not 0 < top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")
        if temperature < 0:
            raise ValueError("temperature must be non-negative")
        if max_tokens is not None and max_tokens < 1:   # the real _verify_args
            raise VLLMValidationError(f"max_tokens must be at least 1, got {max_tokens}.")
        if temperature < _SAMPLING_EPS and n > 1:      # the real _verify_greedy_sampling
            raise VLLMValidationError(f"n must be 1 when using greedy sampling, got {n}.")
        if structured_outputs is not None and not isinstance(structured_outputs, StructuredOutputsParams):
            raise TypeError("structured_outputs must be StructuredOutputsParams")
        self.n = n
        self.temperature = temperature
        self.top_p = top_p
        self.top_k = top_k
        self.seed = seed
        self.max_tokens = max_tokens
        self.structured_outputs = structured_outputs
