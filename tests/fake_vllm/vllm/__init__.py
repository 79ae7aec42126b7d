"""Fake vLLM 0.33 for tests: strict signatures, canned outputs, recorded calls."""

from __future__ import annotations

import json
from typing import Any

from vllm.outputs import CompletionOutput, RequestOutput
from vllm.sampling_params import SamplingParams, StructuredOutputsParams

__version__ = "0.33.0+fake"

# EngineArgs that LLM(**kwargs) accepts in 0.33 (the subset kohaku may pass, plus neighbours)
ENGINE_ARGS = {
    "max_model_len", "max_num_seqs", "max_num_batched_tokens", "pipeline_parallel_size",
    "data_parallel_size", "distributed_executor_backend", "nnodes", "node_rank", "master_addr",
    "enable_prefix_caching", "disable_log_stats", "generation_config", "enable_sleep_mode",
    "download_dir", "load_format", "revision", "tokenizer_revision", "block_size",
}


class _Tokenizer:
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(range(len(text.split())))


class _Model:
    def __init__(self, max_model_len: int):
        self.max_model_len = max_model_len


class _Engine:
    def __init__(self, max_model_len: int):
        self.model_config = _Model(max_model_len)


class LLM:
    instances: list["LLM"] = []

    def __init__(self, model: str, *, tokenizer: str | None = None, trust_remote_code: bool = False,
                 tensor_parallel_size: int = 1, dtype: str = "auto", quantization: str | None = None,
                 seed: int = 0, gpu_memory_utilization: float = 0.92,
                 kv_cache_memory_bytes: int | None = None, cpu_offload_gb: float = 0,
                 enforce_eager: bool = False, chat_template: str | None = None,
                 hf_overrides: Any = None, structured_outputs_config: Any = None,
                 compilation_config: Any = None, attention_config: Any = None,
                 logits_processors: Any = None, **kwargs: Any) -> None:
        unknown = set(kwargs) - ENGINE_ARGS
        if unknown:
            raise TypeError(f"EngineArgs.__init__() got unexpected keyword argument(s) {sorted(unknown)}")
        if kwargs.get("data_parallel_size", 1) > 1 and kwargs.get("distributed_executor_backend") != "external_launcher":
            raise ValueError("data_parallel_size > 1 is not supported by LLM; use separate processes")
        if dtype not in ("auto", "half", "float16", "bfloat16", "float", "float32"):
            raise ValueError(f"bad dtype {dtype}")
        if gpu_memory_utilization > 0.99:
            raise RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB")
        self.model = model
        self.init_kwargs = dict(model=model, tokenizer=tokenizer, trust_remote_code=trust_remote_code,
                                tensor_parallel_size=tensor_parallel_size, dtype=dtype,
                                quantization=quantization, seed=seed,
                                gpu_memory_utilization=gpu_memory_utilization,
                                enforce_eager=enforce_eager,
                                structured_outputs_config=structured_outputs_config, **kwargs)
        self.llm_engine = _Engine(kwargs.get("max_model_len") or 4096)
        self.chat_calls: list[dict[str, Any]] = []
        LLM.instances.append(self)

    def get_tokenizer(self) -> _Tokenizer:
        return _Tokenizer()

    def chat(self, messages, sampling_params=None, use_tqdm=True, chat_template=None,
             chat_template_content_format="auto", add_generation_prompt=True,
             continue_final_message=False, tools=None, chat_template_kwargs=None,
             mm_processor_kwargs=None, lora_request=None) -> list[RequestOutput]:
        if not isinstance(messages, list) or not messages:
            raise TypeError("messages must be a conversation or a list of conversations")
        convs = messages if isinstance(messages[0], list) else [messages]
        for conv in convs:
            for m in conv:
                if set(m) - {"role", "content"} or m.get("role") not in ("system", "user", "assistant"):
                    raise ValueError(f"bad message {m}")
        if sampling_params is None:
            params = [SamplingParams()] * len(convs)
        elif isinstance(sampling_params, list):
            if len(sampling_params) != len(convs):
                raise ValueError("the lengths of prompts and sampling_params must be the same")
            params = sampling_params
        else:
            params = [sampling_params] * len(convs)
        for p in params:
            if not isinstance(p, SamplingParams):
                raise TypeError(f"sampling_params must be SamplingParams, got {type(p)}")
        self.chat_calls.append({"conversations": convs, "params": params, "use_tqdm": use_tqdm,
                                "chat_template_kwargs": chat_template_kwargs})
        outs = []
        for i, (conv, p) in enumerate(zip(convs, params)):
            prompt_len = sum(len(m["content"].split()) + 4 for m in conv)
            completions = []
            for k in range(p.n):
                seed = None if p.seed is None else p.seed + k
                text = canned_text(conv, p, seed)
                ntok = min(len(text.split()), p.max_tokens)
                completions.append(CompletionOutput(index=k, text=text, token_ids=list(range(ntok)),
                                                    cumulative_logprob=None, logprobs=None,
                                                    finish_reason="stop", stop_reason=None))
            outs.append(RequestOutput(request_id=str(i), prompt=None,
                                      prompt_token_ids=list(range(prompt_len)), outputs=completions,
                                      finished=True, num_cached_tokens=0))
        return outs


def canned_text(conv, p: SamplingParams, seed: int | None) -> str:
    """JSON that follows the request's schema (strings name the key and the sample seed)."""
    schema = p.structured_outputs.json if p.structured_outputs is not None else None
    if isinstance(schema, str):
        schema = json.loads(schema)
    if not schema:
        return f"plain answer seed={seed}"
    out = {}
    for key, prop in schema.get("properties", {}).items():
        if prop.get("type") == "array":
            enum = (prop.get("items") or {}).get("enum") or []
            out[key] = enum[:1]
        else:
            out[key] = f"{key}-{seed}"
    return json.dumps(out)


__all__ = ["LLM", "SamplingParams", "StructuredOutputsParams", "RequestOutput", "CompletionOutput"]
