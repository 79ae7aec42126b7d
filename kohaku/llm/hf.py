"""transformers backend (CPU or GPU): per-prompt prefill, batched decode, a JSON grammar.

- Each request is rendered with the model's chat template. Its ``n`` samples become ``n`` rows
  (rows of different requests may have different sampling settings). Rows are sorted by length
  and cut into batches of ``llm.batch_size`` rows.
- ``llm.decoder=loop`` (the default where transformers has ``StaticCache``): each distinct prompt
  of a batch is prefilled once, alone (no padding, no batch-wide attention matrix), and its keys
  and values are copied into every row that samples from it, so ``n`` samples cost one prefill.
  The rows then decode together over a preallocated kv cache (left-padded, explicit 4-D mask,
  per-row positions) written in place; rows that finish drop out of the cache. On a CPU the
  prefill dominates and is linear in prompt tokens, so batching wins only in decode: there a
  step of 16 rows costs a few times one row's step, not 16 times (bench_llm.py).
  ``llm.decoder=generate`` uses ``model.generate`` on a left-padded batch instead (one prefill
  per row); both give the same tokens (tests/test_llm_hf_decode.py).
- Decoding is done by :class:`RowSampler`, a logits processor: per row it applies the JSON
  grammar (an xgrammar matcher per row), then either keeps the logits (greedy, temperature 0) or
  samples with temperature/top_p from the row's own ``torch.Generator`` seeded with
  ``seed + sample_index`` and leaves only the chosen token. transformers then runs in greedy
  mode. So a sample does not depend on which other rows share its batch (up to float rounding of
  padded batches).
- JSON answers always close: in the last tokens of its budget (what the smallest instance of the
  schema takes) a row is steered to end its open string/array/object and to write the keys the
  grammar still requires in as few tokens as possible, so a long answer is cut short, never left
  as broken JSON.
- Token counts come from the tensors: prompt length without padding, generated tokens up to and
  including the end-of-sequence token.
- ``llm.threads`` sets torch's thread count while generating only (restored afterwards): on a
  busy 2-core machine one thread was 4x faster than two (OpenMP oversubscription).
- Each generate call (one infer round) shows a bar of prompts done / total with prefill and
  decode tokens/s and the time left, and logs its prefill/decode split at the end;
  ``timings`` sums that split over all calls (the infer stage reports it in run.json).
- GGUF models (the default SmolLM2-135M-Instruct) load through transformers' GGUF support, with
  the tokenizer from the same file; the file is fetched on first use (kohaku/llm/fetch.py).
  Parsing a GGUF is slow pure Python (~15 s for SmolLM2 on an idle 2-core box, over a minute on
  a busy one), so the first load saves the dequantised model and tokenizer next to the file
  (``<file>.<dtype>.hf/``, safetensors, stamped with the GGUF's SHA-256); later loads read that.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

from kohaku.config import ConfigError, build
from kohaku.llm.base import BackendError, ChatRequest, Completion, identity_of
from kohaku.llm.fetch import GGUFSource, ensure_gguf

log = logging.getLogger(__name__)

# Bump when RowSampler's decoding changes what a sample is: it is part of the cache identity.
DECODER_VERSION = "4"   # 4: the decode kv cache grows (bf16 rounding differs from 3)
# Positions the decode loop's kv cache grows by when it is full (see HFBackend._decode_loop).
CACHE_GROW = 64
# File in a converted-GGUF folder naming the GGUF it was made from (see HFBackend._save_converted).
CONVERTED_STAMP = "kohaku_gguf.json"


@dataclass
class HFConfig:
    """``llm`` config of the hf backend."""

    name: str
    backend: str
    model: str                      # hub id or local folder (the gguf file's base model for GGUF)
    revision: str = "main"
    gguf: dict[str, str] | None = None   # {pip, member, sha256}: a GGUF shipped in a PyPI wheel
    device: str = "auto"            # auto | cpu | cuda | cuda:1
    dtype: str = "auto"             # auto (bfloat16 on GPU and bf16-capable CPUs, else float32) | float32 | float16 | bfloat16
    batch_size: int = 8             # rows (prompt x sample) per forward batch
    max_context: int | None = None  # tokens; null: the model config's max_position_embeddings
    threads: int | None = None      # torch CPU threads while generating; null: torch's default
    json_close_margin: int = 4      # extra tokens kept to close a JSON answer (see RowSampler)
    trust_remote_code: bool = False
    decoder: str = "auto"           # auto | loop | generate (see the module docstring)

    def validate(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.dtype not in ("auto", "float32", "float16", "bfloat16"):
            raise ValueError(f"dtype must be auto/float32/float16/bfloat16, got {self.dtype!r}")
        if self.decoder not in ("auto", "loop", "generate"):
            raise ValueError(f"decoder must be auto, loop or generate, got {self.decoder!r}")


def _torch_dtype(name: str, device: str):
    """``auto``: bfloat16 on GPUs and on CPUs with native bf16 (AVX512-BF16/AMX: on a 2-core
    AMD EPYC with AVX512-BF16, SmolLM2-135M prefilled 1.8x and decoded 1.6x faster than in
    float32, ``bench_llm.py --dtypes``), float32 on other CPUs."""
    import torch

    from kohaku.devices import cpu_has_native_bf16

    if name == "auto":
        native = device.startswith("cuda") or (device == "cpu" and cpu_has_native_bf16())
        return torch.bfloat16 if native else torch.float32
    return getattr(torch, name)


class HFBackend:
    """See the module docstring. The tokenizer loads on first use, the model on first generate."""

    def __init__(self, cfg: HFConfig, raw_cfg: dict[str, Any] | None = None):
        self.cfg = cfg
        self._identity = identity_of(raw_cfg or {"backend": "hf", "model": cfg.model,
                                                 "revision": cfg.revision, "gguf": cfg.gguf})
        self._gguf = GGUFSource(**cfg.gguf) if cfg.gguf else None
        self._tok = None
        self._model = None
        self._grammar_compiler = None
        self._grammars: dict[str, Any] = {}
        self._eos_ids: list[int] = []
        self._closing = None
        self._loop_ok: bool | None = None    # transformers has the static kv cache (decoder=auto)
        self._cache_kw: str | None = None    # forward()'s keyword for the kv cache
        self.load_seconds = 0.0
        # where generation time went, summed over every generate call (see ``timings``)
        self._timings = {"prefill_seconds": 0.0, "decode_seconds": 0.0, "prefill_tokens": 0,
                         "decode_steps": 0, "decoded_tokens": 0}
        import torch

        self.device = cfg.device
        if self.device == "auto":
            self.device = "cuda" if torch.cuda.is_available() else "cpu"
        # outputs differ between float32 and bfloat16 weights: keep them apart in the cache
        self._identity += f"#{str(_torch_dtype(cfg.dtype, self.device)).replace('torch.', '')}"
        self._identity += f"#dec{DECODER_VERSION}"

    @classmethod
    def from_config(cls, llm_cfg: dict[str, Any]) -> "HFBackend":
        cfg = build(HFConfig, llm_cfg, "llm")
        if cfg.gguf is not None:
            missing = {"pip", "member", "sha256"} - set(cfg.gguf)
            if missing:
                raise ConfigError(f"llm.gguf needs keys pip, member, sha256; missing {sorted(missing)}")
        return cls(cfg, llm_cfg)

    # -- loading ---------------------------------------------------------------------------

    def _converted_dir(self):
        """Folder of the GGUF model converted once to safetensors + tokenizer files, next to
        the GGUF file, per weight dtype (None without a GGUF)."""
        if self._gguf is None:
            return None
        from pathlib import Path

        path = Path(ensure_gguf(self._gguf, self.cfg.name))
        dtype = str(_torch_dtype(self.cfg.dtype, self.device)).replace("torch.", "")
        return path.parent / f"{path.stem}.{dtype}.hf"

    def _converted_ok(self) -> bool:
        folder = self._converted_dir()
        stamp = folder / CONVERTED_STAMP if folder is not None else None
        if stamp is None or not stamp.is_file():
            return False
        try:
            return json.loads(stamp.read_text()).get("gguf_sha256") == self._gguf.sha256
        except (OSError, ValueError):
            return False

    def _save_converted(self, model) -> None:
        """Write the dequantised model and its tokenizer next to the GGUF (safetensors, no
        pickles), so later loads skip parsing the GGUF: ~70 s -> ~1 s on a busy 2-core box.
        A failure to write only costs that saving."""
        import shutil

        folder = self._converted_dir()
        tmp = folder.with_name(f"{folder.name}.tmp{os.getpid()}")
        # the weights are already dense: save them as a plain model, not as a GGUF-quantized one
        quantizer = getattr(model, "hf_quantizer", None)
        qcfg = model.config.__dict__.pop("quantization_config", None)
        try:
            model.hf_quantizer = None
            model.save_pretrained(tmp, safe_serialization=True)
            self.tokenizer.save_pretrained(tmp)
            (tmp / CONVERTED_STAMP).write_text(json.dumps(
                {"gguf_sha256": self._gguf.sha256, "gguf": self._gguf.member}, indent=1))
            if folder.exists():
                shutil.rmtree(folder)
            os.replace(tmp, folder)
            log.info("saved %s converted from its GGUF to %s (later loads read it)",
                     self.cfg.name, folder)
        except OSError as exc:
            log.warning("could not save %s converted from its GGUF to %s: %s", self.cfg.name,
                        folder, exc)
        finally:
            model.hf_quantizer = quantizer
            if qcfg is not None:
                model.config.quantization_config = qcfg
            shutil.rmtree(tmp, ignore_errors=True)

    def _source(self) -> tuple[str, dict[str, Any]]:
        """(path or id, from_pretrained kwargs)."""
        if self._gguf is not None:
            if self._converted_ok():
                return str(self._converted_dir()), {}
            path = ensure_gguf(self._gguf, self.cfg.name)
            return str(path.parent), {"gguf_file": path.name}
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
            if "gguf_file" in kwargs:
                self._save_converted(model)
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

    def _closers(self) -> "_Closers":
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
            self._closing = _Closers(texts=texts, ids=ids, lengths=lengths)
        return self._closing

    def generate(self, requests: list[ChatRequest]) -> list[Completion]:
        if not requests:
            return []
        import torch

        if not self.cfg.threads:
            return self._generate(requests)
        before = torch.get_num_threads()   # the thread count is process-wide: restore it after
        torch.set_num_threads(self.cfg.threads)
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
        rows = [_Row(req=i, sample=k, ids=prompts[i], seed=r.seed + k, temperature=r.temperature,
                     top_p=r.top_p, max_tokens=r.max_tokens,
                     grammar=self._grammar(r.json_schema) if r.json_schema else None,
                     reserve=reserves[i])
                for i, r in enumerate(requests) for k in range(r.n)]
        order = sorted(range(len(rows)), key=lambda j: (rows[j].max_tokens, len(rows[j].ids)))
        bs = self.cfg.batch_size
        batches = [order[s:s + bs] for s in range(0, len(order), bs)]
        progress = _Progress(self.cfg.name, rows, batches, len(requests))
        try:
            self._generate_batches(rows, batches, progress)
        finally:
            progress.close()
        for key, value in progress.timings().items():
            self._timings[key] += value
        results: list[Completion] = []
        total = time.perf_counter() - t_start
        for i, r in enumerate(requests):
            mine = [row for row in rows if row.req == i]
            mine.sort(key=lambda row: row.sample)
            results.append(Completion(
                texts=[row.text for row in mine], prompt_tokens=len(prompts[i]),
                completion_tokens=[row.completion_tokens for row in mine],
                finish_reasons=[row.finish for row in mine],
                seconds=total * len(mine) / len(rows),
            ))
        return results

    def _generate_batches(self, rows: list["_Row"], batches: list[list[int]],
                          progress: "_Progress") -> None:
        """Decode every batch of rows, filling each row's text, token count and finish reason."""
        import torch

        model = self.model
        bs = self.cfg.batch_size
        for batch in batches:
            brows = [rows[j] for j in batch]
            closing = self._closers() if any(r.grammar is not None for r in brows) else None
            sampler = RowSampler(brows, self._eos_ids, vocab_size=int(model.config.vocab_size),
                                 closing=closing)
            t0 = time.perf_counter()
            try:
                if self._use_loop():
                    gen = self._decode_loop(brows, sampler, progress)
                else:
                    gen = self._decode_generate(brows, sampler, progress)
            except torch.cuda.OutOfMemoryError as exc:  # pragma: no cover - GPU only
                raise BackendError(
                    f"out of GPU memory generating with {self.cfg.name}: lower llm.batch_size "
                    f"(now {bs}) or infer.max_tokens"
                ) from exc
            dt = time.perf_counter() - t0
            progress.batch_done(brows, gen)
            for b, r in enumerate(brows):
                toks = gen[b]
                end = next((t for t, tok in enumerate(toks) if tok in self._eos_ids), None)
                forced = b in sampler.forced
                body = toks if end is None else toks[:end]
                # the end-of-sequence token counts as generated unless the length limit forced it
                r.completion_tokens = len(body) + (1 if end is not None and not forced else 0)
                r.finish = "length" if end is None or forced else "stop"
                r.text = self.tokenizer.decode(body, skip_special_tokens=True)
                r.seconds = dt / len(brows)

    # -- decoding a batch of rows ------------------------------------------------------------

    def _use_loop(self) -> bool:
        """The kv-cache decode loop needs transformers >= 5 (``StaticCache(config=...)``)."""
        if self.cfg.decoder != "auto":
            return self.cfg.decoder == "loop"
        if self._loop_ok is None:
            import inspect

            try:
                from transformers import StaticCache
            except ImportError:  # pragma: no cover - very old transformers
                self._loop_ok = False
            else:
                params = inspect.signature(StaticCache.__init__).parameters
                self._loop_ok = ("config" in params and "max_cache_len" in params
                                 and self._cache_keyword() is not None)
            if not self._loop_ok:  # pragma: no cover - depends on the installed transformers
                log.info("transformers lacks the static kv-cache API: decoding with generate()")
        return self._loop_ok

    def _cache_keyword(self) -> str | None:
        """The model forward's keyword for the kv cache: ``cache`` in transformers >= 5.2x,
        ``past_key_values`` before; None if it takes neither."""
        if self._cache_kw is None:
            import inspect

            params = inspect.signature(self.model.forward).parameters
            self._cache_kw = next((k for k in ("cache", "past_key_values") if k in params), "")
        return self._cache_kw or None

    def _forward(self, cache, **kwargs):
        """One model forward with ``cache``; returns (logits, cache)."""
        out = self.model(**{self._cache_keyword(): cache}, use_cache=True, **kwargs)
        got = getattr(out, "cache", None)
        return out.logits, got if got is not None else getattr(out, "past_key_values", cache)

    def _decode_loop(self, brows: list["_Row"], sampler: "RowSampler",
                     progress: "_Progress | None" = None) -> list[list[int]]:
        """Generated token ids per row: prefill each distinct prompt once, then decode all rows
        together over one kv cache.

        - Prefill runs per prompt (no padding, no batch-wide attention matrix) and its keys and
          values are copied into every row that shares the prompt: the ``n`` samples of a request
          cost one prefill, not ``n``.
        - Decoding writes each step's keys/values in place into a ``StaticCache`` (rows
          left-padded, padding masked by an explicit 4-D mask, positions per row), so a step does
          not re-copy the cache as a growing ``DynamicCache`` does; batching then pays off in
          decode. The cache holds ``width`` + up to ``CACHE_GROW`` positions and grows by
          ``CACHE_GROW`` when full, so a step attends over what is written, not over the whole
          ``max_new`` budget that most answers never use.
        """
        import torch
        from transformers import DynamicCache, StaticCache

        model = self.model
        dev = self.device
        n_rows = len(brows)
        width = max(len(r.ids) for r in brows)
        max_new = max(r.max_tokens for r in brows)
        groups: dict[int, list[int]] = {}
        for b, r in enumerate(brows):
            groups.setdefault(r.req, []).append(b)
        keys: list[Any] = []
        values: list[Any] = []
        logits = None
        progress = progress or _Progress.silent(brows)
        with torch.inference_mode():
            for members in groups.values():
                t0 = time.perf_counter()
                ids = brows[members[0]].ids
                out_logits, cache = self._forward(
                    DynamicCache(config=model.config),
                    input_ids=torch.tensor([ids], dtype=torch.long, device=dev), logits_to_keep=1)
                if logits is None:
                    logits = torch.empty((n_rows, out_logits.shape[-1]), dtype=torch.float32, device=dev)
                logits[members] = out_logits[0, -1].float()
                start = width - len(ids)
                for layer_idx, layer in enumerate(cache.layers):
                    k, v = layer.keys, layer.values
                    if layer_idx == len(keys):
                        keys.append(k.new_zeros((n_rows, k.shape[1], width, k.shape[3])))
                        values.append(v.new_zeros((n_rows, v.shape[1], width, v.shape[3])))
                    keys[layer_idx][members, :, start:] = k[0]
                    values[layer_idx][members, :, start:] = v[0]
                del cache
                progress.prefilled(len(ids), time.perf_counter() - t0)
            t0 = time.perf_counter()
            # the cache grows by CACHE_GROW positions when full: every step attends over the
            # positions written so far (+ < CACHE_GROW), not over width + max_new from the start
            cap = width + min(max_new, CACHE_GROW)
            static = StaticCache(config=model.config, max_cache_len=cap)
            progress.decoding(n_rows)
            for layer_idx in range(len(keys)):
                static.update(keys[layer_idx], values[layer_idx], layer_idx)
                keys[layer_idx] = values[layer_idx] = None   # free as we go
            mask = torch.zeros((n_rows, 1, 1, cap), dtype=torch.bool, device=dev)
            for b, r in enumerate(brows):
                mask[b, 0, 0, width - len(r.ids):width] = True
            pos = torch.tensor([len(r.ids) for r in brows], dtype=torch.long, device=dev)
            gen: list[list[int]] = [[] for _ in brows]
            finished = [False] * n_rows
            alive = list(range(n_rows))    # rows still in the kv cache (finished ones drop out)
            rows_idx = torch.arange(n_rows, device=dev)
            full = logits                  # the sampler always sees every row of the batch
            last = None
            for step in range(max_new):
                scores = sampler(last, full)
                nxt = scores.argmax(dim=-1)
                new = 0
                for b, tok in enumerate(nxt.tolist()):
                    if not finished[b]:
                        gen[b].append(tok)
                        new += 1
                        finished[b] = tok in self._eos_ids
                        if finished[b]:
                            progress.row_done(brows[b], len(gen[b]))
                t1 = time.perf_counter()
                progress.stepped(t1 - t0, new)
                t0 = t1
                if all(finished) or step == max_new - 1:
                    break
                last = nxt[:, None]
                running = [i for i, b in enumerate(alive) if not finished[b]]
                if len(running) <= 0.75 * len(alive):
                    # drop finished rows from the cache: later steps attend over fewer rows
                    idx = torch.tensor(running, dtype=torch.long, device=dev)
                    for layer in static.layers:
                        layer.keys = layer.keys.index_select(0, idx)
                        layer.values = layer.values.index_select(0, idx)
                    mask, pos = mask.index_select(0, idx), pos.index_select(0, idx)
                    alive = [alive[i] for i in running]
                    rows_idx = torch.tensor(alive, dtype=torch.long, device=dev)
                if width + step >= cap:
                    grow = min(CACHE_GROW, width + max_new - cap)
                    for layer in static.layers:
                        for name in ("keys", "values"):
                            t = getattr(layer, name)
                            more = t.new_zeros((t.shape[0], t.shape[1], grow, t.shape[3]))
                            setattr(layer, name, torch.cat([t, more], dim=2))
                        layer.max_cache_len = cap + grow
                    mask = torch.cat([mask, mask.new_zeros((mask.shape[0], 1, 1, grow))], dim=3)
                    cap += grow
                mask[:, 0, 0, width + step] = True
                out_logits, static = self._forward(
                    static, input_ids=last.index_select(0, rows_idx), attention_mask=mask,
                    position_ids=(pos + step)[:, None])
                full = torch.zeros_like(full)
                full[rows_idx] = out_logits[:, -1].float()
        for b, r in enumerate(brows):        # rows cut at the batch's last step
            progress.row_done(r, len(gen[b]))
        return gen

    def _decode_generate(self, brows: list["_Row"], sampler: "RowSampler",
                         progress: "_Progress | None" = None) -> list[list[int]]:
        """Generated token ids per row through ``model.generate`` on a left-padded batch (one
        prefill per row; the fallback for transformers without the static-cache API). Its time
        counts as decode: ``generate`` does not say how much of it was prefill."""
        import torch
        from transformers import GenerationConfig

        pad = self.tokenizer.pad_token_id
        width = max(len(r.ids) for r in brows)
        input_ids = torch.full((len(brows), width), pad, dtype=torch.long)
        mask = torch.zeros((len(brows), width), dtype=torch.long)
        for b, r in enumerate(brows):
            input_ids[b, width - len(r.ids):] = torch.tensor(r.ids, dtype=torch.long)
            mask[b, width - len(r.ids):] = 1
        gen_cfg = GenerationConfig(
            max_new_tokens=max(r.max_tokens for r in brows), do_sample=False, num_beams=1,
            pad_token_id=pad, eos_token_id=self._eos_ids,
        )
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = self.model.generate(
                input_ids=input_ids.to(self.device), attention_mask=mask.to(self.device),
                generation_config=gen_cfg, logits_processor=[sampler],
            )
        gen = out[:, width:].tolist()
        if progress is not None:
            eos = set(self._eos_ids)
            written = sum(next((t + 1 for t, tok in enumerate(g) if tok in eos), len(g)) for g in gen)
            progress.stepped(time.perf_counter() - t0, written, steps=sampler.step)
        return gen

    def close(self) -> None:
        self._model = None
        self._grammars.clear()
        try:
            import torch

            if torch.cuda.is_available():  # pragma: no cover - GPU only
                torch.cuda.empty_cache()
        except ImportError:  # pragma: no cover
            pass


class _Progress:
    """Progress of one generate call (one infer round): a bar of prompts done / total with
    prompt and output tokens/s and an estimate of the time left, and the prefill/decode split.

    A prompt is done when all its rows (samples) have finished. The time left is the prompt
    tokens still to prefill at the prefill rate so far plus the tokens still to decode at the
    decode rate so far. A row of a later batch is expected to write as many tokens as the
    finished rows did on average; a row decoding now that has written ``w`` tokens, as many
    more as the finished rows that went past ``w`` wrote after it (half of what its
    ``max_tokens`` leaves when none did). Before the first decode step the estimate covers the
    prefill only and shows as a lower bound (``eta >12s``).
    """

    def __init__(self, name: str, rows: list["_Row"], batches: list[list[int]], n_prompts: int,
                 show: bool = True):
        self.name = name
        self.left = {}                      # request -> rows not finished yet
        for r in rows:
            self.left[r.req] = self.left.get(r.req, 0) + 1
        # each batch prefills each of its distinct prompts once
        self.prompt_total = sum(len(rows[j].ids) for b in batches
                                for j in {rows[i].req: i for i in b}.values())
        self.max_tokens = {id(r): r.max_tokens for r in rows}
        self.rows_total = len(rows)
        self.n_prompts = n_prompts
        self.done_rows: set[int] = set()
        self.finished_tokens = 0            # tokens written by finished rows
        self.finished_lengths: list[int] = []
        self.decoded = 0                    # tokens written so far, finished rows or not
        self.live = 0                       # rows of the batch decoding now, not finished
        self.prefill_s = self.decode_s = 0.0
        self.prefill_tok = self.steps = 0
        self.t_start = time.perf_counter()
        self._shown = 0.0
        self.bar = None
        if show:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=n_prompts, desc=f"{name} generate", unit="prompt",
                            bar_format="{desc}: {n_fmt}/{total_fmt} prompts [{elapsed}{postfix}]")

    @classmethod
    def silent(cls, rows: list["_Row"]) -> "_Progress":
        return cls("", rows, [list(range(len(rows)))], len({r.req for r in rows}), show=False)

    def prefilled(self, tokens: int, seconds: float) -> None:
        self.prefill_tok += tokens
        self.prefill_s += seconds
        self._show()

    def decoding(self, n_rows: int) -> None:
        """A batch of ``n_rows`` rows starts decoding."""
        self.live = n_rows

    def stepped(self, seconds: float, tokens: int, steps: int = 1) -> None:
        self.decode_s += seconds
        self.steps += steps
        self.decoded += tokens
        self._show()

    def row_done(self, row: "_Row", generated: int) -> None:
        if id(row) in self.done_rows:
            return
        self.done_rows.add(id(row))
        self.finished_tokens += generated
        self.finished_lengths.append(generated)
        self.live = max(self.live - 1, 0)
        self.left[row.req] -= 1
        if self.left[row.req] == 0 and self.bar is not None:
            self.bar.update(1)

    def batch_done(self, brows: list["_Row"], gen: list[list[int]]) -> None:
        for r, toks in zip(brows, gen):
            self.row_done(r, len(toks))
        self._show(force=True)

    def eta(self) -> float | None:
        """Seconds left (None before any rate is known)."""
        if not self.prefill_tok:
            return None
        budget = sum(self.max_tokens.values()) / max(len(self.max_tokens), 1)
        done = self.finished_lengths
        per_row = sum(done) / len(done) if done else budget
        later = self.rows_total - len(self.done_rows) - self.live
        tokens = later * per_row
        if self.live:
            w = (self.decoded - self.finished_tokens) / self.live   # written per live row
            past = [n - w for n in done if n > w]
            tokens += self.live * (sum(past) / len(past) if past else max(budget - w, 0) / 2)
        left = max(self.prompt_total - self.prefill_tok, 0) * self.prefill_s / self.prefill_tok
        if self.decoded and self.decode_s:
            left += tokens * self.decode_s / self.decoded
        return left

    def _show(self, force: bool = False) -> None:
        if self.bar is None:
            return
        now = time.perf_counter()
        if not force and now - self._shown < 1.0:
            return
        self._shown = now
        parts = []
        if self.prefill_s:
            parts.append(f"prefill {self.prefill_tok}/{self.prompt_total} tok "
                         f"{self.prefill_tok / self.prefill_s:.0f} tok/s")
        if self.decode_s:
            parts.append(f"decode {self.steps} steps {self.decoded / self.decode_s:.1f} tok/s")
        eta = self.eta()
        if eta is not None:   # before any decode step the decode time is unknown: a lower bound
            parts.append(f"eta {'' if self.decoded else '>'}{eta:.0f}s")
        self.bar.set_postfix_str(", ".join(parts))

    def timings(self) -> dict[str, float]:
        return {"prefill_seconds": self.prefill_s, "decode_seconds": self.decode_s,
                "prefill_tokens": self.prefill_tok, "decode_steps": self.steps,
                "decoded_tokens": self.decoded}

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        log.info("%s: %d prompt(s), %d row(s) in %.1f s: prefill %d tokens in %.1f s (%.0f tok/s), "
                 "decode %d tokens in %d steps in %.1f s (%.1f tok/s)", self.name, self.n_prompts,
                 self.rows_total, time.perf_counter() - self.t_start, self.prefill_tok,
                 self.prefill_s, self.prefill_tok / max(self.prefill_s, 1e-9), self.decoded,
                 self.steps, self.decode_s, self.decoded / max(self.decode_s, 1e-9))


@dataclass
class _Row:
    req: int
    sample: int
    ids: list[int]
    seed: int
    temperature: float
    top_p: float
    max_tokens: int
    grammar: Any = None
    reserve: int = 0                # last tokens in which the row is steered to close its JSON
    text: str = ""
    completion_tokens: int = 0
    finish: str = "stop"
    seconds: float = 0.0


def minimal_instance(schema: dict[str, Any]) -> Any:
    """The smallest value a JSON schema accepts (required keys only, empty strings and lists)."""
    if "enum" in schema and schema["enum"]:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties", {})
        return {k: minimal_instance(props.get(k, {})) for k in schema.get("required", [])}
    if kind == "array":
        item = minimal_instance(schema.get("items", {}))
        return [item] * int(schema.get("minItems", 0))
    if kind == "string":
        return "x" * int(schema.get("minLength", 0))
    if kind in ("number", "integer"):
        return 0
    if kind == "boolean":
        return False
    return None


@dataclass
class _Closers:
    texts: list[str]          # decoded text of every token id
    ids: dict[str, int]       # '"', ']', '}', ',' -> the id of the token that is just that character
    lengths: Any = None       # tensor: characters per token


class _JsonState:
    """Where a row is in its JSON text: inside a string or not, and the open brackets."""

    def __init__(self) -> None:
        self.in_string = False
        self.escape = False
        self.stack: list[str] = []

    def feed(self, text: str) -> None:
        for ch in text:
            if self.in_string:
                if self.escape:
                    self.escape = False
                elif ch == "\\":
                    self.escape = True
                elif ch == '"':
                    self.in_string = False
            elif ch == '"':
                self.in_string = True
            elif ch in "[{":
                self.stack.append(ch)
            elif ch in "]}" and self.stack:
                self.stack.pop()


class RowSampler:
    """Logits processor: per-row grammar mask, per-row length limit, per-row seeded sampling.

    Used with greedy decoding: for a sampling row it leaves only the sampled token finite.
    A row whose grammar is complete can only emit end-of-sequence; a row that reaches its own
    ``max_tokens`` is forced to end (``forced``, finish reason "length").

    Closing the JSON in time: in the last ``reserve`` tokens of a grammar row (what the smallest
    instance of its schema takes, at most half its max_tokens) the row is steered to finish: an open string gets its closing quote, an
    open array its ']', an object its '}' (or ',' to move on to the next required key) whenever
    the grammar allows that token; the grammar itself writes the remaining keys. So an answer
    that would run past max_tokens still ends as valid JSON, with shorter fields.
    """

    def __init__(self, rows: list[_Row], eos_ids: list[int], vocab_size: int, closing=None):
        import torch

        self.closing = closing
        self.states = [_JsonState() for _ in rows]
        self.rows = rows
        self.eos = eos_ids[0] if eos_ids else 0
        self.eos_ids = set(eos_ids)
        self.vocab_size = vocab_size
        self.step = 0
        self.done = [False] * len(rows)
        self.forced: set[int] = set()
        self.matchers = []
        self.bitmask = None
        if any(r.grammar is not None for r in rows):
            import xgrammar as xgr

            self.matchers = [xgr.GrammarMatcher(r.grammar) if r.grammar is not None else None
                             for r in rows]
            self.bitmask = xgr.allocate_token_bitmask(len(rows), vocab_size)
        self.generators = []
        for r in rows:
            g = torch.Generator()
            g.manual_seed(int(r.seed) & 0xFFFF_FFFF_FFFF)
            self.generators.append(g)

    def __call__(self, input_ids, scores):
        import torch

        if self.step > 0:
            last = input_ids[:, -1].tolist()
            for b, tok in enumerate(last):
                if self.done[b]:
                    continue
                if tok in self.eos_ids:
                    self.done[b] = True
                    continue
                m = self.matchers[b] if self.matchers else None
                if m is not None and not m.is_terminated() and not m.accept_token(tok):
                    log.warning("grammar rejected token %d in row %d; ending the row", tok, b)
                    self.forced.add(b)
                    self.done[b] = True
                elif self.closing is not None and tok < len(self.closing.texts):
                    self.states[b].feed(self.closing.texts[tok])
        self.step += 1
        scores = scores.float()
        if self.matchers:
            import xgrammar as xgr

            active = []
            for b, m in enumerate(self.matchers):
                if m is not None and not self.done[b] and not m.is_terminated():
                    m.fill_next_token_bitmask(self.bitmask, b)
                    active.append(b)
            if active:
                cpu = scores.device.type != "cuda"
                target = scores.cpu() if cpu else scores
                xgr.apply_token_bitmask_inplace(target, self.bitmask.to(target.device),
                                                vocab_size=self.vocab_size, indices=active)
                scores = target.to(scores.device) if cpu else target
        neg = torch.finfo(scores.dtype).min
        for b, r in enumerate(self.rows):
            if self.done[b] or self.step > r.max_tokens:
                if not self.done[b]:
                    self.forced.add(b)
                    self.done[b] = True
                scores[b].fill_(neg)
                scores[b, self.eos] = 0.0
                continue
            if (self.closing is not None and r.grammar is not None
                    and self.step > r.max_tokens - min(r.reserve, r.max_tokens // 2)):
                choice = self._closing_token(b, scores[b], neg)
                if choice is not None:
                    keep = scores[b, choice].clone()
                    scores[b].fill_(neg)
                    scores[b, choice] = keep
            if r.temperature > 0:
                logits = scores[b] / r.temperature
                probs = torch.softmax(logits, dim=-1)
                if r.top_p < 1.0:
                    sp, si = torch.sort(probs, descending=True)
                    keep = torch.cumsum(sp, dim=-1) - sp < r.top_p
                    keep[0] = True
                    filtered = torch.zeros_like(probs)
                    filtered[si[keep]] = sp[keep]
                    probs = filtered / filtered.sum()
                gen = self.generators[b]
                choice = int(torch.multinomial(probs.cpu(), 1, generator=gen).item())
                scores[b].fill_(neg)
                scores[b, choice] = 0.0
        return scores

    def _closing_token(self, b: int, row_scores, neg: float) -> int | None:
        """The token that brings row ``b`` closest to a complete JSON value: the closing quote,
        bracket, brace or comma when the grammar allows it, else the longest allowed token."""
        st = self.states[b]
        ids = self.closing.ids

        def allowed(ch: str) -> int | None:
            tok = ids.get(ch)
            return tok if tok is not None and tok < row_scores.shape[0] and row_scores[tok] > neg / 2 else None

        choice = None
        if st.in_string and not st.escape:
            choice = allowed('"')
        elif not st.in_string:
            top = st.stack[-1] if st.stack else None
            if top == "[":
                choice = allowed("]")
            elif top == "{":
                choice = allowed("}") if allowed("}") is not None else allowed(",")
        if choice is None:
            # text the grammar dictates (key names, separators): take it in the fewest tokens
            import torch

            mask = row_scores > neg / 2
            lengths = self.closing.lengths[: row_scores.shape[0]].to(row_scores.device)
            if bool(mask.any()):
                choice = int(torch.where(mask, lengths, torch.full_like(lengths, -1.0)).argmax())
        return choice
