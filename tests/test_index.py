"""index stage: hnswlib vs exact, persistence, determinism, BM25."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from omegaconf import OmegaConf

from kohaku.core.config import ConfigError, build
from kohaku.retrieval.search import (
    ExactSearcher,
    IndexConfig,
    build_hnsw,
    load_searchers,
    read_meta,
    write_index,
)
from kohaku.runner.services import Services
from kohaku.runner.stage import StageContext
from kohaku.stages import index as index_stage


def unit(n: int, d: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_hnsw_agrees_with_exact():
    data, queries = unit(2000, 32, 0), unit(100, 32, 1)
    exact = ExactSearcher(data, np.arange(2000))
    cfg = IndexConfig(M=16, ef_construction=200, ef=100)
    from kohaku.retrieval.search import HnswSearcher

    hnsw = HnswSearcher(build_hnsw(data, cfg), np.arange(2000), cfg.ef)
    el, es = exact.search(queries, 10)
    hl, hs = hnsw.search(queries, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(el, hl)])
    assert recall >= 0.98
    # scores are inner products, sorted descending
    np.testing.assert_allclose(es[:, 0], np.max(queries @ data.T, axis=1), rtol=1e-5)
    assert np.all(np.diff(hs, axis=1) <= 1e-6)
    # k beyond the index size is clamped
    small = HnswSearcher(build_hnsw(data[:5], cfg), np.arange(5), 10)
    assert small.search(queries[:2], 50)[0].shape == (2, 5)


def test_exact_top_k_matches_full_sort():
    data, queries = unit(300, 8, 2), unit(7, 8, 3)
    labels, scores = ExactSearcher(data, np.arange(300) + 1000, chunk=3).search(queries, 5)
    full = np.argsort(-(queries @ data.T), axis=1)[:, :5] + 1000
    np.testing.assert_array_equal(labels, full)


def nodes_and_embeddings(n_docs: int = 3, dim: int = 16):
    rows, vecs = [], []
    rng = np.random.default_rng(5)
    words = ["water", "carbon", "emissions", "energy", "gpu", "training", "cooling", "grid"]
    for d in range(n_docs):
        doc = f"doc{d}"
        rows.append((doc, None, 0, "", 0))
        rows.append((f"{doc}#s1", doc, 1, "", 0))
        for p in range(1, 3):
            pid = f"{doc}#s1.p{p}"
            sents = [f"{words[(d + p + t) % 8]} {words[(d * 3 + t) % 8]} text" for t in range(3)]
            rows.append((pid, f"{doc}#s1", 2, " ".join(sents), 9))
            for t, s in enumerate(sents, 1):
                rows.append((f"{pid}.t{t}", pid, 3, s, 3))
    for _ in rows:
        v = rng.standard_normal(dim).astype(np.float32)
        vecs.append(v / np.linalg.norm(v))
    nodes = pl.DataFrame(
        {"node_id": [r[0] for r in rows], "doc_id": [r[0].split("#")[0] for r in rows],
         "parent_id": [r[1] for r in rows], "level": [r[2] for r in rows],
         "text": [r[3] for r in rows], "n_tokens": [r[4] for r in rows]},
        schema_overrides={"parent_id": pl.String},
    )
    emb = pl.DataFrame({"node_id": nodes["node_id"], "level": nodes["level"],
                        "vector": pl.Series(np.stack(vecs), dtype=pl.Array(pl.Float32, dim))})
    return nodes, emb


@pytest.mark.parametrize("kind", ["hnsw", "exact"])
def test_write_and_load_index(tmp_path: Path, kind: str):
    nodes, emb = nodes_and_embeddings()
    cfg = IndexConfig(kind=kind, levels=[3, 2], ef=64)
    meta = write_index(tmp_path, nodes, emb, cfg)
    assert meta["counts"] == {"3": 18, "2": 6}
    assert (tmp_path / "ids_3.parquet").exists() and (tmp_path / "bm25_2").is_dir()
    assert (tmp_path / "hnsw_3.bin").exists() == (kind == "hnsw")
    dense, sparse, meta2 = load_searchers(tmp_path, nodes, None, emb if kind == "exact" else None)
    assert sorted(dense) == [2, 3] and sorted(sparse) == [2, 3]
    vecs = emb["vector"].to_numpy()
    # searching with a node's own vector finds that node first, at the right level only
    for row in (5, 7, 3):
        level = int(nodes["level"][row])
        rows, scores = dense[level].search(vecs[row : row + 1], 3)
        assert rows[0, 0] == row and scores[0, 0] == pytest.approx(1.0, abs=1e-5)
        assert set(nodes["level"].gather(rows[0]).to_list()) == {level}
    if kind == "hnsw":
        assert dense[3].index.ef == 64  # ef is set again after loading
    # bm25 with stemming: "emission" matches "emissions"
    rows, scores = sparse[3].search(["emission"], 5)
    hit_texts = [nodes["text"][int(r)] for r in rows[0] if r >= 0]
    assert hit_texts and all("emissions" in t for t in hit_texts)
    assert meta2["bm25_stemmer"] in ("english", None)


def test_hnsw_build_is_deterministic(tmp_path: Path):
    data = unit(500, 16, 9)
    cfg = IndexConfig(num_threads=1, random_seed=7)
    build_hnsw(data, cfg).save_index(str(tmp_path / "a.bin"))
    build_hnsw(data, cfg).save_index(str(tmp_path / "b.bin"))
    assert (tmp_path / "a.bin").read_bytes() == (tmp_path / "b.bin").read_bytes()


def test_index_errors(tmp_path: Path):
    nodes, emb = nodes_and_embeddings()
    with pytest.raises(ValueError, match="same node_ids"):
        write_index(tmp_path, nodes, emb.reverse(), IndexConfig())
    with pytest.raises(ConfigError, match="index.efc"):
        build(IndexConfig, {"efc": 3}, "index")
    with pytest.raises(ConfigError, match="kind"):
        build(IndexConfig, {"kind": "faiss"}, "index")
    write_index(tmp_path, nodes, emb, IndexConfig(levels=[3], bm25=False))
    with pytest.raises(ValueError, match="not indexed"):
        load_searchers(tmp_path, nodes, [2])
    with pytest.raises(FileNotFoundError, match="index stage"):
        read_meta(tmp_path / "nope")


def test_index_stage_compute(tmp_path: Path):
    nodes, emb = nodes_and_embeddings()
    (tmp_path / "tree").mkdir()
    (tmp_path / "embed").mkdir()
    (tmp_path / "out").mkdir()
    nodes.write_parquet(tmp_path / "tree" / "nodes.parquet")
    emb.write_parquet(tmp_path / "embed" / "embeddings.parquet")
    cfg = OmegaConf.create({"index": {"kind": "hnsw", "levels": [3, 2], "bm25": False}})
    ctx = StageContext(index_stage.STAGE, cfg, {"tree": tmp_path / "tree", "embed": tmp_path / "embed"},
                       tmp_path / "out", Services(), logging.getLogger("t"))
    assert index_stage.compute(ctx) == {}
    assert read_meta(tmp_path / "out")["counts"] == {"3": 18, "2": 6}
    assert ctx.summary["bm25"] is False and ctx.summary["dim"] == 16


def test_bm25_search_ranks_matching_documents_only_with_ties_in_document_order():
    from kohaku.retrieval.search import build_bm25

    texts = ["carbon emissions of training", "water use of data centers", "carbon carbon carbon",
             "GPU hours", "water use of data centers", "unrelated words here"]
    searcher = build_bm25(texts, np.arange(100, 106), IndexConfig(levels=[3]))
    rows, scores = searcher.search(["carbon", "water use", "zebra"], k=3)
    # query 0: only the two carbon texts match; the third slot stays empty (-1, score 0)
    assert rows[0].tolist() == [102, 100, -1] and scores[0, 0] > scores[0, 1] > 0 == scores[0, 2]
    # query 1: two identical texts tie: document order breaks the tie
    assert rows[1, :2].tolist() == [101, 104] and scores[1, 0] == scores[1, 1] > 0
    assert rows[2].tolist() == [-1, -1, -1]
    # k larger than the number of matches, and k cut to the corpus size
    rows, _ = searcher.search(["carbon"], k=50)
    assert rows.shape == (1, 6) and rows[0, :2].tolist() == [102, 100]
