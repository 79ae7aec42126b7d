#!/usr/bin/env python
"""Encoding throughput per backend and dtype, side by side: plain sentence-transformers vs the
embed stage's path on the same texts, in one run.

    python scripts/bench_embed.py [--n 2000] [--rounds 3] [--dtypes float32 bfloat16 int8] [--csv out.csv]

Texts: the leaves (sentences) of the WattBot hierarchical tree (parse + tree stage functions,
or --nodes, a tree stage's nodes.parquet), a seeded random sample of --n of them (--n 0 = every
leaf). The stage rows use conf/embed/<--embed>.yaml (batch_size, batch_tokens, ...) on --device
with each dtype of --dtypes. Rows:

- naive:           ``SentenceTransformer(path).encode(texts)`` with default settings (torch
                   float32, batch 32, batches sorted by character length): the 1.0x baseline
- stage <dtype>:   kohaku.retrieval.embedding.encode_texts (dedup, token-budget batches), cold encoding
                   cache, with embed.dtype=<dtype>: float32 and bfloat16 run torch, int8 runs
                   the quantized ONNX export in onnxruntime (scripts/export_embed.py);
                   --int8-dirs adds one int8 row per other export folder (recipe comparisons)
- stage fixed batches (--ablate): the config's dtype with batch_tokens 0 and batch_size 64,
                   i.e. sentence-transformers' own batching
- stage warm cache: the default dtype's path again over its now-filled encoding cache

``default`` marks the dtype that ``embed.dtype=auto`` picks on this machine. The methods run
interleaved for --rounds rounds (the machine may be shared) and each reports its fastest round
(all rounds are listed too); the header gives the load average and the CPU's SIMD flags.
Faithfulness against the naive float32 vectors: mean and min cosine per text, and
top10_overlap, the mean share of the exact inner-product top 10 leaves that each WattBot
question (train + test, encoded by the same method) keeps.
"""

from __future__ import annotations

import argparse
import logging
import os
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
    from kohaku.core.config import build
    from kohaku.ingest.corpus import read_metadata
    from kohaku.ingest.parsing import ParseConfig, parse_corpus
    from kohaku.ingest.tree import TreeConfig, build_tree

    documents, blocks = parse_corpus(data, read_metadata(data / "metadata.csv"),
                                     build(ParseConfig, {"workers": 1}, "parse"))
    nodes = build_tree(documents, blocks, build(TreeConfig, {}, "tree"))
    has_children = set(nodes["parent_id"].drop_nulls().to_list())
    return [t for n, t in zip(nodes["node_id"].to_list(), nodes["text"].to_list())
            if n not in has_children]


def question_texts(data: Path) -> list[str]:
    from kohaku.tasks.files.io import read_questions

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


SIMD_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "wattbot")
    p.add_argument("--nodes", type=Path, help="a tree stage's nodes.parquet (instead of parsing --data)")
    p.add_argument("--n", type=int, default=2000, help="texts to encode (0 = every leaf)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--embed", default="minilm", help="conf/embed/<name>.yaml for the stage rows")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtypes", nargs="+", default=None,
                   help="stage rows (default: float32, bfloat16 where the CPU has native bf16, "
                        "int8 where its export exists)")
    p.add_argument("--int8-dirs", nargs="*", default=[], type=Path,
                   help="more int8 rows, one per exports folder (embed.export_dir)")
    p.add_argument("--ablate", action="store_true", help="add the 'stage fixed batches' row")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds; fastest round counts")
    p.add_argument("--csv", type=Path, default=REPO / "outputs" / "bench" / "bench_embed.csv")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    import torch
    from sentence_transformers import SentenceTransformer

    from kohaku.core.config import available_cpus, build
    from kohaku.core.devices import cpu_flags, cpu_has_native_bf16
    from kohaku.retrieval.embedding import (EmbedConfig, EncodeStats, encode_texts, load_encoder,
                                  pick_dtype, read_export, resolve_model)
    from kohaku.runner.pipeline import option_values

    torch.set_num_threads(available_cpus())
    cfg = option_values("embed", args.embed)
    cfg["device"] = args.device
    ecfg = build(EmbedConfig, cfg, "embed")
    default_dtype = pick_dtype(ecfg.dtype, args.device, ecfg.cpu_fallback)
    dtypes = args.dtypes or (["float32"] + (["bfloat16"] if cpu_has_native_bf16() else [])
                             + (["int8"] if args.device == "cpu" and read_export(ecfg) else []))
    if args.nodes:
        nodes = pl.read_parquet(args.nodes)
        parents = set(nodes["parent_id"].drop_nulls().to_list())
        texts = [t for n, t in zip(nodes["node_id"].to_list(), nodes["text"].to_list())
                 if n not in parents]
    else:
        texts = leaf_texts(args.data)
    if args.n and args.n < len(texts):
        texts = random.Random(args.seed).sample(texts, args.n)
    questions = question_texts(args.data)
    n_unique = len(set(texts))
    flags = cpu_flags() or frozenset()
    try:
        import onnxruntime

        ort_version = onnxruntime.__version__
    except ImportError:
        ort_version = "not installed"
    print(f"{len(texts)} leaf texts ({n_unique} distinct), mean {np.mean([len(t) for t in texts]):.0f} "
          f"chars, {len(questions)} questions; stage: conf/embed/{args.embed}.yaml batch_size "
          f"{cfg['batch_size']} batch_tokens {cfg.get('batch_tokens')}; dtype auto = {default_dtype} here"
          + (f", {ecfg.cpu_fallback} on a CPU without native bf16 (embed.cpu_fallback)"
             if args.device == "cpu" and ecfg.dtype == "auto" else ""))
    print(f"cores {available_cpus()}, torch threads {torch.get_num_threads()}, torch {torch.__version__}, "
          f"onnxruntime {ort_version}; CPU flags: "
          f"{' '.join(f for f in SIMD_FLAGS if f in flags) or 'unknown'}; "
          f"load average at start {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

    naive_model = SentenceTransformer(resolve_model(cfg["model"]), device=args.device)
    naive_model.encode(texts[:32])  # warm-up
    variants: dict[str, dict] = {f"stage {d}": {"dtype": d} for d in dtypes}
    for folder in args.int8_dirs:
        variants[f"stage int8 {folder.name}"] = {"dtype": "int8", "export_dir": str(folder)}
    if args.ablate:
        variants["stage fixed batches"] = {"dtype": default_dtype, "batch_tokens": 0, "batch_size": 64}
    default_label = f"stage {default_dtype}" if f"stage {default_dtype}" in variants else None
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
            info["naive"] = {"backend": "torch", "dtype": "float32", "encoded": len(texts)}
        for label, enc in encoders.items():
            caches[label] = Path(tempfile.mkdtemp(dir=tmp_root.name))  # cold every round
            stats = EncodeStats()
            t0 = time.perf_counter()
            vectors[label] = encode_texts(enc, texts, "document", caches[label], progress=False,
                                          stats=stats)
            times.setdefault(label, []).append(time.perf_counter() - t0)
            info[label] = {"backend": "onnxruntime" if enc.dtype == "int8" else enc.cfg.backend,
                           "dtype": enc.dtype, "encoded": stats.n_encoded}
    if default_label:  # warm: the last round's cache again (what a re-run of the embed stage costs)
        stats = EncodeStats()
        t0 = time.perf_counter()
        encode_texts(encoders[default_label], texts, "document", caches[default_label],
                     progress=False, stats=stats)
        times["stage warm cache"] = [time.perf_counter() - t0]
        info["stage warm cache"] = {**info[default_label], "encoded": stats.n_encoded}
        vectors["stage warm cache"] = vectors[default_label]

    ref = vectors["naive"]
    q_ref = np.asarray(naive_model.encode(questions, normalize_embeddings=True), np.float32)
    q_vecs = {label: encode_texts(enc, questions, "query", None, progress=False)
              for label, enc in encoders.items()}
    q_vecs["naive"] = q_ref
    if default_label:
        q_vecs["stage warm cache"] = q_vecs[default_label]
    for label, vecs in vectors.items():
        cos = np.sum(vecs * ref, axis=1)
        info[label].update(mean_cos=float(cos.mean()), min_cos=float(cos.min()),
                           top10_overlap=top10_overlap(ref, q_ref, vecs, q_vecs[label]))
    rows = [{"method": m, "default": m in (default_label, "stage warm cache"), "texts": len(texts),
             **info[m], "seconds": min(ts), "all_rounds_s": " ".join(f"{t:.1f}" for t in ts)}
            for m, ts in times.items()]
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
    print(f"load average at end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
