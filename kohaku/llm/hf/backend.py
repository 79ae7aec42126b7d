"""The hf backend: transformers models on CPU or GPU (the default CPU model, SmolLM2-135M).

- Loading: a GGUF model (the default SmolLM2-135M-Instruct) is fetched on first use and turned
  once into a verified Hugging Face folder (kohaku/llm/fetch.py ``ensure_hf_folder``, the folder
  the vLLM backend loads too); the model and its tokenizer load from that folder in ``llm.dtype``.
- Each request is rendered with the model's chat template; its ``n`` samples become ``n`` rows
  (rows of different requests may have different sampling settings), queued by max_tokens and
  prompt length.
- Decoding (kohaku/llm/hf/decode.py): ``llm.decoder=loop`` (default) decodes with continuous
  batching over ``llm.batch_size`` slots: finished rows leave and waiting rows join at every
  step, each distinct prompt is prefilled once for all its samples, and the kv cache keeps each
  row's own length. ``llm.decoder=generate`` runs ``model.generate`` on fixed left-padded
  batches instead (used automatically for models with sliding-window layers).
- Token choice (kohaku/llm/hf/sampler.py): the JSON grammar per row through xgrammar, per-row
  seeded sampling (``seed + sample_index``), the length limit, and the closing of a JSON answer
  in its last tokens, so an answer cut at max_tokens is still valid JSON.
- Token counts come from the tensors: prompt length without padding, generated tokens up to and
  including the end-of-sequence token.
- ``llm.threads`` sets torch's thread count while generating only (restored afterwards); null
  (the default) is the cores this process may run on (kohaku.core.config.available_cpus): on the
  2-core machine at rest 2 threads prefilled 273 tok/s against 182 with 1. It is not part of any
  cache key: float32 logits differ by at most ~1e-6 between thread counts (bfloat16: not at
  all), the order of rounding that another CPU's kernels give too.
- Progress (kohaku/llm/hf/progress.py): each generate call (one infer round) shows a bar of
  prompts done / total with prefill and decode tokens/s and the time left; ``timings`` sums the
  prefill/decode split and the decode's kv reads over all calls (the infer stage reports it in
  run.json, scripts/bench_llm.py compares it with the memory-bandwidth limit).
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

from kohaku.core.config import ConfigError, available_cpus, build, not_keyed
from kohaku.llm.base import BackendError, ChatRequest, Completion, identity_of, library_tag
from kohaku.llm.fetch import GGUFSource, ensure_hf_folder
from kohaku.llm.hf.decode import decode_continuous, decode_generate, full_attention_only, packed_attention
from kohaku.llm.hf.progress import TIMING_KEYS, Progress
from kohaku.llm.hf.sampler import Closers, Row, RowSampler, RowState, minimal_instance

log = logging.getLogger(__name__)

# Bump when decoding changes what a sample is: it is part of the cache identity (the generation
# cache's and every stage key holding this llm config, kohaku.llm.base.backend_identity).
DECODER_VERSION = "5"   # 5: continuous batching, packed grouped-query attention (float rounding)
# the libraries that compute the tokens: their versions are part of the identity too
LIBRARIES = ("torch", "transformers", "xgrammar")

@dataclass
class HFConfig:
    """``llm`` config of the hf backend."""

    name: str                       # the option's label (conf/llm/<name>.yaml)
    backend: str                    # hf
    model: str                      # hub id or local folder (the gguf file's base model for GGUF)
    revision: str = "main"          # hub revision (branch, tag or commit) of the model
    gguf: dict[str, str] | None = None   # {pip, member, sha256}: a GGUF shipped in a PyPI wheel
    device: str = "auto"            # auto | cpu | cuda | cuda:1
    dtype: str = "auto"             # auto (bfloat16 on GPU and bf16-capable CPUs, else float32) | float32 | float16 | bfloat16
    batch_size: int = 8             # slots: rows (prompt x sample) decoded together
    max_context: int | None = None  # tokens; null: the model config's max_position_embeddings
    threads: int | None = not_keyed(None)   # torch CPU threads while generating; null: the cores available
    json_close_margin: int = 4      # extra tokens kept to close a JSON answer (see RowSampler)
    trust_remote_code: bool = False  # let a hub model run its own modelling code
    decoder: str = "auto"           # auto | loop (continuous batching) | generate (see the module docstring)

    def validate(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.dtype not in ("auto", "float32", "float16", "bfloat16"):
            raise ValueError(f"dtype must be auto/float32/float16/bfloat16, got {self.dtype!r}")
        if self.decoder not in ("auto", "loop", "generate"):
            raise ValueError(f"decoder must be auto, loop or generate, got {self.decoder!r}")


def _dtype_name(name: str, device: str) -> str:
    """``auto``: bfloat16 on GPUs and on CPUs with native bf16 (AVX512-BF16/AMX: on a 2-core
    AMD EPYC with AVX512-BF16, SmolLM2-135M prefilled 1.8x and decoded 1.6x faster than in
    float32, ``bench_llm.py --dtypes``), float32 on other CPUs."""
    from kohaku.core.devices import cpu_has_native_bf16

    if name == "auto":
        native = device.startswith("cuda") or (device == "cpu" and cpu_has_native_bf16())
        return "bfloat16" if native else "float32"
    return name


def _torch_dtype(name: str, device: str):
    import torch

    return getattr(torch, _dtype_name(name, device))


def _device(name: str) -> str:
    """``auto``: cuda when torch sees a GPU, else cpu."""
    if name != "auto":
        return name
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def config_identity(llm_cfg: dict[str, Any], device: str | None = None) -> str:
    """The backend's identity (kohaku.llm.base.backend_identity) without loading the model:
    identity_of + the dtype resolved on ``device`` (default: ``llm.device`` resolved here) +
    DECODER_VERSION + the versions of LIBRARIES."""
    device = device or _device(str(llm_cfg.get("device") or "auto"))
    # outputs differ between float32 and bfloat16 weights: keep them apart in the cache
    dtype = _dtype_name(str(llm_cfg.get("dtype") or "auto"), device)
    return f"{identity_of(llm_cfg)}#{dtype}#dec{DECODER_VERSION}{library_tag(LIBRARIES)}"


class HFBackend:
    """See the module docstring. The tokenizer loads on first use, the model on first generate."""

    def __init__(self, cfg: HFConfig, raw_cfg: dict[str, Any] | None = None):
        self.cfg = cfg
        self._gguf = GGUFSource(**cfg.gguf) if cfg.gguf else None
        self._tok = None
        self._model = None
        self._grammar_compiler = None
        self._grammars: dict[str, Any] = {}
        self._eos_ids: list[int] = []
        self._closing = None
        self._cache_kw: str | None = None    # forward()'s keyword for the kv cache
        self.load_seconds = 0.0
        # where generation time went, summed over every generate call (see ``timings``)
        self._timings = dict.fromkeys(TIMING_KEYS, 0)
        self.device = _device(cfg.device)
        self._identity = config_identity(raw_cfg or {"backend": "hf", "model": cfg.model, "revision": cfg.revision,
                                                     "gguf": cfg.gguf, "dtype": cfg.dtype}, self.device)

    @classmethod
    def from_config(cls, llm_cfg: dict[str, Any]) -> "HFBackend":
        cfg = build(HFConfig, llm_cfg, "llm")
        if cfg.gguf is not None:
            missing = {"pip", "member", "sha256"} - set(cfg.gguf)
            if missing:
                raise ConfigError(f"llm.gguf needs keys pip, member, sha256; missing {sorted(missing)}")
        return cls(cfg, llm_cfg)

    # -- loading ---------------------------------------------------------------------------

    def _source(self) -> tuple[str, dict[str, Any]]:
        """(path or id, from_pretrained kwargs)."""
        if self._gguf is not None:
            return str(ensure_hf_folder(self._gguf, self.cfg.name)), {}
        kwargs: dict[str, Any] = {"trust_remote_code": self.cfg.trust_remote_code}
        if not os.path.isdir(self.cfg.model):
            kwargs["revision"] = self.cfg.revision
        return self.cfg.model, kwargs

    @property
    def tokenizer(self):
        if self._tok is None:
            from transformers import AutoTokenizer

            t0 = time.perf_counter()
            src, kwargs = self._source()
            try:
                tok = AutoTokenizer.from_pretrained(src, **kwargs)
            except OSError as exc:
                raise BackendError(
                    f"cannot load the tokenizer of {self.cfg.model} ({src}): {exc}; put the model "
                    f"in a local folder and set llm.model to it, or pick another llm=..."
                ) from exc
            tok.padding_side = "left"
            if tok.pad_token_id is None:
                tok.pad_token = tok.eos_token
            self._tok = tok
            self.load_seconds += time.perf_counter() - t0
        return self._tok

    @property
    def model(self):
        if self._model is None:
            import torch
            from transformers import AutoModelForCausalLM

            t0 = time.perf_counter()
            src, kwargs = self._source()
            dtype = _torch_dtype(self.cfg.dtype, self.device)
            try:
                model = AutoModelForCausalLM.from_pretrained(src, dtype=dtype, **kwargs)
                model.to(self.device)
            except torch.cuda.OutOfMemoryError as exc:  # pragma: no cover - GPU only
                raise BackendError(
                    f"out of GPU memory loading {self.cfg.model}: lower llm.dtype (float16/"
                    f"bfloat16) or pick a smaller llm=..."
                ) from exc
            except OSError as exc:
                raise BackendError(
                    f"cannot load model {self.cfg.model} ({src}): {exc}; set llm.model to a local "
                    f"folder or pick another llm=..."
                ) from exc
            model.eval()
            self._model = model
            gen = model.generation_config
            eos = gen.eos_token_id if gen is not None else None
            ids = eos if isinstance(eos, list) else ([eos] if eos is not None else [])
            if self.tokenizer.eos_token_id is not None:
                ids.append(self.tokenizer.eos_token_id)
            self._eos_ids = sorted(set(ids))
            self.load_seconds += time.perf_counter() - t0
            log.info("loaded %s on %s (%s) in %.1f s", self.cfg.name, self.device, dtype,
                     self.load_seconds)
        return self._model

    # -- Backend protocol ------------------------------------------------------------------

    @property
    def identity(self) -> str:
        return self._identity

    @property
    def timings(self) -> dict[str, float]:
        """Seconds and tokens of prefill (prompt forwards) and decode (one-token steps with
        sampling) summed over every generate call; a caller takes the difference around its calls."""
        return dict(self._timings)

    @property
    def max_context(self) -> int:
        if self.cfg.max_context:
            return int(self.cfg.max_context)
        return int(getattr(self.model.config, "max_position_embeddings", 2048))

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def render(self, messages: list[dict[str, str]]) -> list[int]:
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        return list(ids)

    def _grammar(self, schema: dict[str, Any]):
        import xgrammar as xgr

        key = json.dumps(schema, sort_keys=True)
        if key not in self._grammars:
            if self._grammar_compiler is None:
                vocab = int(self.model.config.vocab_size)
                info = xgr.TokenizerInfo.from_huggingface(
                    self.tokenizer, vocab_size=vocab, stop_token_ids=self._eos_ids
                )
                self._grammar_compiler = xgr.GrammarCompiler(info)
            try:
                # property order matters (the grammar emits keys in schema order): no sort_keys
                self._grammars[key] = self._grammar_compiler.compile_json_schema(
                    json.dumps(schema), any_whitespace=False
                )
            except Exception as exc:
                raise BackendError(f"JSON schema does not compile for {self.cfg.name}: {exc}") from exc
        return self._grammars[key]

    def _close_reserve(self, schema: dict[str, Any]) -> int:
        """Tokens needed to write the smallest valid instance of ``schema`` (+ margin): an upper
        bound on what finishing a JSON answer takes from any point inside it."""
        text = json.dumps(minimal_instance(schema), separators=(", ", ": "))
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"]) + self.cfg.json_close_margin

    def _closers(self) -> Closers:
        """Token texts and the ids of the one-character tokens that close JSON (see RowSampler)."""
        if self._closing is None:
            tok = self.tokenizer
            vocab = int(self.model.config.vocab_size)
            texts = [tok.decode([i]) if i < len(tok) else "" for i in range(vocab)]
            ids = {}
            for ch in ('"', "]", "}", ","):
                enc = tok.encode(ch, add_special_tokens=False)
                if len(enc) == 1:
                    ids[ch] = enc[0]
            import torch

            lengths = torch.tensor([float(len(t)) for t in texts])
            self._closing = Closers(texts=texts, ids=ids, lengths=lengths)
        return self._closing

    def generate(self, requests: list[ChatRequest]) -> list[Completion]:
        if not requests:
            return []
        import torch

        before = torch.get_num_threads()   # the thread count is process-wide: restore it after
        torch.set_num_threads(self.cfg.threads or available_cpus())
        try:
            return self._generate(requests)
        finally:
            torch.set_num_threads(before)

    def _generate(self, requests: list[ChatRequest]) -> list[Completion]:
        self.model                        # load it now: its load time is not generation time
        t_start = time.perf_counter()
        prompts = [self.render(r.messages) for r in requests]
        limit = self.max_context
        for i, (r, p) in enumerate(zip(requests, prompts)):
            if len(p) + r.max_tokens > limit:
                raise BackendError(
                    f"request {i}: prompt of {len(p)} tokens + max_tokens {r.max_tokens} exceeds "
                    f"the context of {self.cfg.name} ({limit} tokens, llm.max_context); lower "
                    f"infer.max_tokens or the retrieve token budget"
                )
        reserves = [self._close_reserve(r.json_schema) if r.json_schema else 0 for r in requests]
        rows = [Row(req=i, sample=k, ids=prompts[i], seed=r.seed + k, temperature=r.temperature,
                    top_p=r.top_p, max_tokens=r.max_tokens,
                    grammar=self._grammar(r.json_schema) if r.json_schema else None,
                    reserve=reserves[i])
                for i, r in enumerate(requests) for k in range(r.n)]
        # neighbours in the queue have similar prompts: a step's rows are of similar length
        order = sorted(range(len(rows)), key=lambda j: (rows[j].max_tokens, len(rows[j].ids)))
        progress = Progress(self.cfg.name, rows)
        t0 = time.perf_counter()
        try:
            states = self._decode(rows, order, progress)
        except Exception as exc:
            import torch

            if isinstance(exc, torch.cuda.OutOfMemoryError):  # pragma: no cover - GPU only
                raise BackendError(
                    f"out of GPU memory generating with {self.cfg.name}: lower llm.batch_size "
                    f"(now {self.cfg.batch_size}) or infer.max_tokens"
                ) from exc
            raise
        finally:
            progress.close()
        for key, value in progress.timings().items():
            self._timings[key] += value
        per_row = (time.perf_counter() - t0) / max(len(rows), 1)
        for st in states:
            self._finish(st, per_row)
        results: list[Completion] = []
        total = time.perf_counter() - t_start
        for i, r in enumerate(requests):
            mine = sorted((row for row in rows if row.req == i), key=lambda row: row.sample)
            results.append(Completion(
                texts=[row.text for row in mine], prompt_tokens=len(prompts[i]),
                completion_tokens=[row.completion_tokens for row in mine],
                finish_reasons=[row.finish for row in mine],
                seconds=total * len(mine) / len(rows),
            ))
        return results

    def _finish(self, st: RowState, seconds: float) -> None:
        """Fill a decoded row's text, token count and finish reason from its tokens."""
        r, toks = st.row, st.tokens
        end = next((t for t, tok in enumerate(toks) if tok in self._eos_ids), None)
        body = toks if end is None else toks[:end]
        # the end-of-sequence token counts as generated unless the length limit forced it
        r.completion_tokens = len(body) + (1 if end is not None and not st.forced else 0)
        r.finish = "length" if end is None or st.forced else "stop"
        r.text = self.tokenizer.decode(body, skip_special_tokens=True)
        r.seconds = seconds

    def _sampler(self, rows: list[Row]) -> RowSampler:
        closing = self._closers() if any(r.grammar is not None for r in rows) else None
        return RowSampler(self._eos_ids, vocab_size=int(self.model.config.vocab_size),
                          closing=closing, slots=self.cfg.batch_size)

    def _decode(self, rows: list[Row], order: list[int], progress: Progress) -> list[RowState]:
        """Every row's final decoding state, in ``rows`` order."""
        sampler = self._sampler(rows)
        if self._use_loop():
            return self._decode_loop(rows, order, sampler, progress)
        bs = self.cfg.batch_size
        states: list[RowState | None] = [None] * len(rows)
        for s in range(0, len(order), bs):
            batch = order[s:s + bs]
            got = decode_generate(self.model, [rows[j] for j in batch], sampler,
                                  self.tokenizer.pad_token_id, self._eos_ids, self.device, progress)
            for j, st in zip(batch, got):
                states[j] = st
        return states

    # -- the continuous-batching loop (kohaku/llm/hf/decode.py) --------------------------------

    def _use_loop(self) -> bool:
        """``decoder=auto``: the loop, unless the model has sliding-window layers (the slot
        cache holds every position) or its forward takes no kv cache keyword."""
        if self.cfg.decoder != "auto":
            return self.cfg.decoder == "loop"
        ok = full_attention_only(self.model.config) and self._cache_keyword() is not None
        if not ok:  # pragma: no cover - depends on the model
            log.info("%s: decoding with generate() (sliding-window layers or no cache keyword)",
                     self.cfg.name)
        return ok

    def _cache_keyword(self) -> str | None:
        """The model forward's keyword for the kv cache: ``cache`` in transformers >= 5.2x,
        ``past_key_values`` before; None if it takes neither."""
        if self._cache_kw is None:
            import inspect

            params = inspect.signature(self.model.forward).parameters
            self._cache_kw = next((k for k in ("cache", "past_key_values") if k in params), "")
        return self._cache_kw or None

    def _prefill(self, ids: list[int]):
        """(last position's logits, [(keys, values)] per layer) of one prompt."""
        import torch
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)
        out = self.model(**{self._cache_keyword(): cache}, use_cache=True, logits_to_keep=1,
                         input_ids=torch.tensor([ids], dtype=torch.long, device=self.device))
        got = getattr(out, "cache", None) or getattr(out, "past_key_values", None) or cache
        return out.logits[0, -1].float(), [(layer.keys, layer.values) for layer in got.layers]

    def _step(self, ids, mask, positions, cache):
        """Logits ``[rows, vocab]`` of one decode step over the slot cache."""
        with packed_attention(self.model):
            out = self.model(**{self._cache_keyword(): cache}, use_cache=True, input_ids=ids,
                             attention_mask=mask, position_ids=positions)
        return out.logits[:, -1].float()

    def _decode_loop(self, rows: list[Row], order: list[int], sampler: RowSampler,
                     progress: Progress | None = None) -> list[RowState]:
        return decode_continuous(rows, order, sampler, self.cfg.batch_size, self._step,
                                 self._prefill, self.device, progress)

    # -- memory traffic of a decode step (scripts/bench_llm.py) --------------------------------

    def _attention_shape(self) -> tuple[int, int, int, int]:
        """(layers, query heads, key/value heads, head dim) of the model."""
        cfg = self.model.config
        heads = int(cfg.num_attention_heads)
        kv_heads = int(getattr(cfg, "num_key_value_heads", None) or heads)
        head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)
        return int(cfg.num_hidden_layers), heads, kv_heads, head_dim

    def kv_bytes_per_position(self) -> int:
        """Bytes of keys and values one cached position of one row takes over all layers."""
        layers, _, kv_heads, head_dim = self._attention_shape()
        size = next(self.model.parameters()).element_size()
        return layers * 2 * kv_heads * head_dim * size

    @property
    def weight_dtype(self) -> str:
        """The weights' dtype name (``float32``, ``bfloat16``...)."""
        return str(next(self.model.parameters()).dtype).replace("torch.", "")

    def step_flops(self, rows: float, kv_positions: float) -> float:
        """Floating-point operations of one decode step of ``rows`` rows whose attention reads
        ``kv_positions`` cached positions in all: every weight once per row (multiply and add;
        a tied embedding counts once, as the output projection; an untied input embedding is
        counted too, a slight overestimate), and per position and layer the query-key and
        probability-value products of every query head."""
        layers, heads, _, head_dim = self._attention_shape()
        params = self.weight_bytes() / next(self.model.parameters()).element_size()
        return 2.0 * params * rows + 4.0 * heads * head_dim * layers * kv_positions

    def weight_bytes(self) -> int:
        """Bytes of the model's parameters (each decode step reads them once)."""
        seen, total = set(), 0
        for p in self.model.parameters():   # tied weights (embeddings = lm_head) count once
            if p.data_ptr() not in seen:
                seen.add(p.data_ptr())
                total += p.numel() * p.element_size()
        return total

    def close(self) -> None:
        self._model = None
        self._grammars.clear()
        try:
            import torch

            if torch.cuda.is_available():  # pragma: no cover - GPU only
                torch.cuda.empty_cache()
        except ImportError:  # pragma: no cover
            pass
