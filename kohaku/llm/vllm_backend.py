"""vLLM offline backend (written against vLLM 0.33; see shared/docs/reference/deps.md section 1).

- One ``vllm.LLM`` per process, created on the first ``generate`` (vllm is imported only then).
- All requests of a call go into ONE ``LLM.chat(list_of_conversations, sampling_params=[...])``;
  vLLM schedules them with continuous batching and returns outputs in input order.
- ``SamplingParams(n, temperature, top_p, max_tokens, seed,
  structured_outputs=StructuredOutputsParams(json=schema))``. With ``n > 1`` vLLM gives child
  sample ``k`` the seed ``seed + k``, which is the per-sample seed contract of kohaku/llm/base.py,
  so the generation cache sends one request with ``n`` = the number of missing consecutive
  samples (they share one prefill) instead of one request per sample.
- Token counts: ``len(out.prompt_token_ids)`` and ``len(o.token_ids)`` per sample.
- ``count_tokens`` and ``max_context`` need only the tokenizer / model config (transformers),
  so trimming contexts for prompts that are all cached never starts the engine.
- ``llm.data_parallel_size > 1``: one worker process per replica, each pinned to its GPUs with
  CUDA_VISIBLE_DEVICES (kohaku/llm/parallel.py), requests sharded and merged in input order.
"""

from __future__ import annotations

import gc
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

from kohaku.config import build
from kohaku.llm.base import BackendError, ChatRequest, Completion, identity_of

log = logging.getLogger(__name__)


@dataclass
class VLLMConfig:
    """``llm`` config of the vllm backend (keys map 1:1 onto ``vllm.LLM`` arguments)."""

    name: str
    backend: str
    model: str                                  # hub id or local folder
    revision: str | None = None
    tokenizer: str | None = None                # default: the model's
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1                 # >1: one process per replica (kohaku/llm/parallel.py)
    gpu_memory_utilization: float = 0.92
    max_model_len: int | None = None            # default: the model config's
    seed: int = 0
    dtype: str = "auto"
    quantization: str | None = None
    enable_prefix_caching: bool | None = None   # None: vLLM's default (on)
    trust_remote_code: bool = False
    enforce_eager: bool = False
    max_num_seqs: int | None = None
    distributed_executor_backend: str | None = None  # mp | ray | uni | external_launcher
    download_dir: str | None = None
    structured_outputs_backend: str | None = None    # auto | xgrammar | guidance | outlines
    enable_thinking: bool | None = None         # False: chat_template_kwargs={"enable_thinking": False}
    use_tqdm: bool = True
    engine_kwargs: dict[str, Any] = field(default_factory=dict)  # any other EngineArgs

    def validate(self) -> None:
        for key in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key} must be >= 1")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError("gpu_memory_utilization must be in (0, 1]")

    def engine_args(self) -> dict[str, Any]:
        args: dict[str, Any] = {
            "model": self.model,
            "tokenizer": self.tokenizer,
            "trust_remote_code": self.trust_remote_code,
            "tensor_parallel_size": self.tensor_parallel_size,
            "dtype": self.dtype,
            "quantization": self.quantization,
            "seed": self.seed,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "enforce_eager": self.enforce_eager,
        }
        if self.structured_outputs_backend:
            args["structured_outputs_config"] = {"backend": self.structured_outputs_backend}
        optional = {
            "revision": self.revision,
            "pipeline_parallel_size": self.pipeline_parallel_size if self.pipeline_parallel_size > 1 else None,
            "max_model_len": self.max_model_len,
            "enable_prefix_caching": self.enable_prefix_caching,
            "max_num_seqs": self.max_num_seqs,
            "distributed_executor_backend": self.distributed_executor_backend,
            "download_dir": self.download_dir,
        }
        args.update({k: v for k, v in optional.items() if v is not None})
        args.update(self.engine_kwargs)
        return args


def _hints(cfg: VLLMConfig, exc: BaseException) -> str:
    msg = str(exc)
    low = msg.lower()
    if "out of memory" in low or "no available memory" in low or "cache blocks" in low:
        util = cfg.gpu_memory_utilization
        util_hint = (f"lower llm.gpu_memory_utilization (now {util}: other processes may hold GPU "
                     f"memory)" if util >= 0.95 else f"raise llm.gpu_memory_utilization (now {util})")
        return (f"out of GPU memory for {cfg.model}: lower llm.max_model_len (now "
                f"{cfg.max_model_len}) or {util_hint}, or spread the model with "
                f"llm.tensor_parallel_size (now {cfg.tensor_parallel_size}); {msg}")
    if "max_model_len" in low or "max_position_embeddings" in low or "maximum model length" in low:
        return (f"{cfg.model}: context length problem, set llm.max_model_len to at most the "
                f"model's limit (now {cfg.max_model_len}); {msg}")
    if "world size" in low or ("gpus" in low and "available" in low):
        return (f"{cfg.model}: not enough GPUs for llm.tensor_parallel_size="
                f"{cfg.tensor_parallel_size} x llm.pipeline_parallel_size="
                f"{cfg.pipeline_parallel_size}; lower them; {msg}")
    return f"vLLM failed for {cfg.model} (llm={cfg.name}): {msg}"


class VLLMBackend:
    """See the module docstring."""

    def __init__(self, cfg: VLLMConfig, raw_cfg: dict[str, Any] | None = None):
        self.cfg = cfg
        self._identity = identity_of(raw_cfg or {"backend": "vllm", "model": cfg.model,
                                                 "revision": cfg.revision})
        self._llm = None
        self._tok = None
        self._max_context: int | None = cfg.max_model_len
        self.load_seconds = 0.0

    @property
    def identity(self) -> str:
        return self._identity

    @property
    def llm(self):
        if self._llm is None:
            try:
                import vllm
            except ImportError as exc:
                raise BackendError(
                    f"llm.backend=vllm needs the vllm package (CUDA only): pip install vllm, or "
                    f"pick llm=smollm2_cpu / llm=openai ({exc})"
                ) from exc
            t0 = time.perf_counter()
            try:
                self._llm = vllm.LLM(**self.cfg.engine_args())
            except Exception as exc:
                raise BackendError(_hints(self.cfg, exc)) from exc
            self.load_seconds = time.perf_counter() - t0
            log.info("vLLM engine for %s ready in %.1f s", self.cfg.model, self.load_seconds)
            self._tok = None
            try:
                self._max_context = int(self._llm.llm_engine.model_config.max_model_len)
            except AttributeError:
                pass
        return self._llm

    @property
    def tokenizer(self):
        if self._tok is None:
            if self._llm is not None:
                self._tok = self._llm.get_tokenizer()
            else:
                from transformers import AutoTokenizer

                name = self.cfg.tokenizer or self.cfg.model
                kwargs: dict[str, Any] = {"trust_remote_code": self.cfg.trust_remote_code}
                if self.cfg.revision and not os.path.isdir(name):
                    kwargs["revision"] = self.cfg.revision
                try:
                    self._tok = AutoTokenizer.from_pretrained(name, **kwargs)
                except OSError as exc:
                    raise BackendError(
                        f"cannot load the tokenizer of {name} (llm.tokenizer / llm.model): {exc}"
                    ) from exc
        return self._tok

    def cache_params(self, req: ChatRequest) -> dict[str, Any]:
        """Generation-cache parameters (kohaku/llm/base.py): the request's sampling fields and
        schema plus the chat-template options that ``generate`` sends with it."""
        from kohaku.llm.base import sent_params

        thinking = self.cfg.enable_thinking
        return sent_params(req, chat_template_kwargs=None if thinking is None
                           else {"enable_thinking": thinking})

    @property
    def max_context(self) -> int:
        if self._max_context is None:
            from transformers import AutoConfig

            conf = AutoConfig.from_pretrained(self.cfg.model, trust_remote_code=self.cfg.trust_remote_code,
                                              **({"revision": self.cfg.revision} if self.cfg.revision else {}))
            text = getattr(conf, "text_config", conf)
            self._max_context = int(getattr(text, "max_position_embeddings", 4096))
        return self._max_context

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def sampling_params(self, req: ChatRequest):
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        structured = StructuredOutputsParams(json=req.json_schema) if req.json_schema else None
        return SamplingParams(n=req.n, temperature=req.temperature, top_p=req.top_p,
                              max_tokens=req.max_tokens, seed=req.seed,
                              structured_outputs=structured)

    def generate(self, requests: list[ChatRequest]) -> list[Completion]:
        if not requests:
            return []
        llm = self.llm
        conversations = [r.messages for r in requests]
        params = [self.sampling_params(r) for r in requests]
        kwargs: dict[str, Any] = {"use_tqdm": self.cfg.use_tqdm}
        if self.cfg.enable_thinking is not None:
            kwargs["chat_template_kwargs"] = {"enable_thinking": self.cfg.enable_thinking}
        t0 = time.perf_counter()
        try:
            outs = llm.chat(conversations, sampling_params=params, **kwargs)
        except Exception as exc:
            raise BackendError(_hints(self.cfg, exc)) from exc
        dt = time.perf_counter() - t0
        if len(outs) != len(requests):
            raise BackendError(f"vLLM returned {len(outs)} outputs for {len(requests)} requests")
        total = sum(r.n for r in requests)
        result = []
        for r, out in zip(requests, outs):
            samples = sorted(out.outputs, key=lambda o: getattr(o, "index", 0))
            result.append(Completion(
                texts=[o.text for o in samples],
                prompt_tokens=len(out.prompt_token_ids or []),
                completion_tokens=[len(o.token_ids) for o in samples],
                finish_reasons=[str(o.finish_reason or "stop") for o in samples],
                seconds=dt * r.n / total,
            ))
        return result

    def close(self) -> None:
        if self._llm is None:
            return
        llm, self._llm = self._llm, None
        try:
            llm.llm_engine.engine_core.shutdown()
        except Exception:  # best effort: the engine may already be down
            pass
        del llm
        gc.collect()
        try:
            from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

            cleanup_dist_env_and_memory()
        except Exception:  # pragma: no cover - best effort
            pass
        try:
            import torch

            if torch.cuda.is_available():  # pragma: no cover - GPU only
                torch.cuda.empty_cache()
        except ImportError:  # pragma: no cover
            pass


def from_config(llm_cfg: dict[str, Any]):
    cfg = build(VLLMConfig, llm_cfg, "llm")
    if cfg.data_parallel_size > 1:
        from kohaku.llm.parallel import DataParallelBackend

        per = cfg.tensor_parallel_size * cfg.pipeline_parallel_size
        devices = [",".join(str(d) for d in range(i * per, (i + 1) * per))
                   for i in range(cfg.data_parallel_size)]
        inner = dict(llm_cfg, data_parallel_size=1)
        return DataParallelBackend(inner, devices, local=VLLMBackend(build(VLLMConfig, inner, "llm"), inner))
    return VLLMBackend(cfg, llm_cfg)
