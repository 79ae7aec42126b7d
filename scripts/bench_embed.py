#!/usr/bin/env python
"""Encoding throughput: plain sentence-transformers vs the embed stage's path, same texts.

    python scripts/bench_embed.py [--n 2000] [--rounds 3] [--embed minilm] [--ablate] [--csv out.csv]

Texts: the leaves (sentences) of the WattBot hierarchical tree (parse + tree stage functions),
a seeded random sample of --n of them (--n 0 = every leaf). The stage rows use the settings of
conf/embed/<--embed>.yaml (batch_size, batch_tokens, dtype, ...) on --device. Rows:

- naive:        ``SentenceTransformer(path).encode(texts)`` with default settings (fp32, batch 32,
                batches sorted by character length)
- stage fp32:   kohaku.embedding.encode_texts with dtype float32 (dedup, token-budget batches),
                cold encoding cache
- stage:        the same with the configured dtype (auto = bf16 on CPUs with native bf16)
- stage fixed batches (--ablate): the configured dtype with batch_tokens 0 and batch_size 64,
                i.e. sentence-transformers' own batching, the stage path before token budgets
- stage warm cache: the stage path again over the now-filled encoding cache (what a re-run costs)

The methods run interleaved for --rounds rounds (the machine may be shared) and each reports its
fastest round (all rounds are listed too). Faithfulness against the naive fp32 vectors: mean and
min cosine per text, and top10_overlap, the mean share of the exact inner-product top 10 leaves
that each WattBot question (train + test, encoded by the same method) keeps.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kohaku.report.tables import print_and_save  # noqa: E402


def leaf_texts(data: Path) -> list[str]:
    from kohaku.config import build
    from kohaku.corpus import read_metadata
    from kohaku.parsing import ParseConfig, parse_corpus
    from kohaku.tree import TreeConfig, build_tree

    documents, blocks = parse_corpus(data, read_metadata(data / "metadata.csv"),
                                     build(ParseConfig, {"workers": 1}, "parse"))
    nodes = build_tree(documents, blocks, build(TreeConfig, {}, "tree"))
    has_children = set(nodes["parent_id"].drop_nulls().to_list())
    return [t for n, t in zip(nodes["node_id"].to_list(), nodes["text"].to_list())
            if n not in has_children]


def question_texts(data: Path) -> list[str]:
    from kohaku.corpus import read_questions

    out: list[str] = []
    for name in ("train_QA.csv", "test_Q.csv"):
        if (data / name).exists():
            out += read_questions(data / name)["question"].to_list()
    return out


def top10_overlap(docs_a: np.ndarray, q_a: np.ndarray, docs_b: np.ndarray, q_b: np.ndarray) -> float:
    """Mean |top10_a & top10_b| / 10 over the queries (exact inner-product search)."""
    if len(q_a) == 0:
        return float("nan")
    k = min(10, len(docs_a))
    ta = np.argsort(-(q_a @ docs_a.T), axis=1, kind="stable")[:, :k]
    tb = np.argsort(-(q_b @ docs_b.T), axis=1, kind="stable")[:, :k]
    return float(np.mean([len(set(a) & set(b)) / k for a, b in zip(ta, tb)]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "wattbot")
    p.add_argument("--n", type=int, default=2000, help="texts to encode (0 = every leaf)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--embed", default="minilm", help="conf/embed/<name>.yaml for the stage rows")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default=None, help="dtype of the 'stage' row (default: the config's)")
    p.add_argument("--ablate", action="store_true", help="add the 'stage fixed batches' row")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds; fastest round counts")
    p.add_argument("--csv", type=Path, default=REPO / "outputs" / "bench" / "bench_embed.csv")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    import torch
    from sentence_transformers import SentenceTransformer

    from kohaku.pipeline import option_values
    from kohaku.embedding import EncodeStats, encode_texts, load_encoder, resolve_model

    cfg = option_values("embed", args.embed)
    cfg["device"] = args.device
    if args.dtype:
        cfg["dtype"] = args.dtype
    texts = leaf_texts(args.data)
    if args.n and args.n < len(texts):
        texts = random.Random(args.seed).sample(texts, args.n)
    questions = question_texts(args.data)
    n_unique = len(set(texts))
    print(f"{len(texts)} leaf texts ({n_unique} distinct), mean {np.mean([len(t) for t in texts]):.0f} "
          f"chars, {len(questions)} questions; torch threads {torch.get_num_threads()}; stage: "
          f"conf/embed/{args.embed}.yaml batch_size {cfg['batch_size']} batch_tokens "
          f"{cfg.get('batch_tokens')}")

    naive_model = SentenceTransformer(resolve_model(cfg["model"]), device=args.device)
    naive_model.encode(texts[:32])  # warm-up
    variants = {"stage fp32": {"dtype": "float32"}, "stage": {}}
    if args.ablate:
        variants["stage fixed batches"] = {"batch_tokens": 0, "batch_size": 64}
    encoders = {}
    for label, override in variants.items():
        encoders[label] = load_encoder({**cfg, **override})
        encoders[label].encode_documents(texts[:32])  # warm-up

    # The machine may be shared: the methods run interleaved for --rounds rounds and each keeps
    # its fastest round (the least disturbed one).
    times: dict[str, list[float]] = {}
    info: dict[str, dict] = {}
    vectors: dict[str, np.ndarray] = {}
    caches: dict[str, Path] = {}
    tmp_root = tempfile.TemporaryDirectory(prefix="bench_embed_")  # removed at exit
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        out = np.asarray(naive_model.encode(texts), np.float32)
        times.setdefault("naive", []).append(time.perf_counter() - t0)
        if "naive" not in vectors:
            vectors["naive"] = out / np.linalg.norm(out, axis=1, keepdims=True)
            info["naive"] = {"dtype": "float32", "encoded": len(texts)}
        for label, enc in encoders.items():
            caches[label] = Path(tempfile.mkdtemp(dir=tmp_root.name))  # cold every round
            stats = EncodeStats()
            t0 = time.perf_counter()
            vectors[label] = encode_texts(enc, texts, "document", caches[label], progress=False,
                                          stats=stats)
            times.setdefault(label, []).append(time.perf_counter() - t0)
            info[label] = {"dtype": enc.dtype, "encoded": stats.n_encoded}
    # warm: the last round's cache again (what a re-run of the embed stage costs)
    stats = EncodeStats()
    t0 = time.perf_counter()
    encode_texts(encoders["stage"], texts, "document", caches["stage"], progress=False, stats=stats)
    times["stage warm cache"] = [time.perf_counter() - t0]
    info["stage warm cache"] = {**info["stage"], "encoded": stats.n_encoded}
    vectors["stage warm cache"] = vectors["stage"]

    ref = vectors["naive"]
    q_ref = np.asarray(naive_model.encode(questions, normalize_embeddings=True), np.float32)
    q_vecs = {label: encode_texts(enc, questions, "query", None, progress=False)
              for label, enc in encoders.items()}
    q_vecs["naive"] = q_ref
    q_vecs["stage warm cache"] = q_vecs["stage"]
    for label, vecs in vectors.items():
        cos = np.sum(vecs * ref, axis=1)
        info[label].update(mean_cos=float(cos.mean()), min_cos=float(cos.min()),
                           top10_overlap=top10_overlap(ref, q_ref, vecs, q_vecs[label]))
    rows = [{"method": m, "texts": len(texts), **info[m], "seconds": min(ts),
             "all_rounds_s": " ".join(f"{t:.1f}" for t in ts)} for m, ts in times.items()]
    naive_s = min(times["naive"])
    table = pl.DataFrame(rows).with_columns(
        (pl.col("texts") / pl.col("seconds")).round(1).alias("texts_per_s"),
        (naive_s / pl.col("seconds")).round(2).alias("speedup"),
        pl.col("seconds").round(2),
        pl.col("mean_cos").round(6),
        pl.col("min_cos").round(5),
        pl.col("top10_overlap").round(4),
    )
    print_and_save(table, args.csv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
