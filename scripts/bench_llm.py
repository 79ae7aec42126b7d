"""Throughput of an LLM backend on answer prompts with ~1,500 context tokens (not a test).

    python scripts/bench_llm.py                                  # default CPU model (llm=smollm2_cpu)
    python scripts/bench_llm.py --batches 1 4 16 --max-tokens 64
    python scripts/bench_llm.py --backend vllm --model Qwen/Qwen2.5-7B-Instruct --batches 1 64 256

    python scripts/bench_llm.py --decoders loop generate --rounds 2   # hf: both decode paths
    python scripts/bench_llm.py --dtypes float32 bfloat16 --rounds 2  # hf: both dtypes, one process

For each batch size B it sends B prompts in ONE backend.generate call (greedy, JSON schema of the
infer stage) and reports prompts/s, output tokens/s and the ratio to the first row. With the hf
backend, --decoders compares decode paths (llm.decoder) and --dtypes compares weight dtypes
(llm.dtype; one model per dtype, loaded side by side), and the table splits the time into prefill
and decode (prompt and output tokens/s of each part). With --rounds R every (dtype, decoder, batch)
cell runs R times, interleaved, and its fastest round counts (the machine may be shared). Contexts are cut from the WattBot corpus JSON (read in place, never copied) or,
if it is absent, from a generated filler text. Prints a table and writes a CSV (default
outputs/bench/llm_<name>.csv).
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import sys
import time
from pathlib import Path

from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kohaku.config import build  # noqa: E402
from kohaku.llm import ChatRequest, load_backend  # noqa: E402
from kohaku.stages.infer import InferConfig, answer_schema, build_messages, first_json_object  # noqa: E402

WATTBOT = REPO.parent / "shared" / "data" / "wattbot"


def corpus_passages() -> list[tuple[str, str]]:
    """(doc_id, paragraph text) pairs from the WattBot corpus, or filler text."""
    out = []
    folder = WATTBOT / "corpus"
    for path in sorted(folder.glob("*.json"))[:12] if folder.is_dir() else []:
        doc = json.loads(path.read_text())
        for sec in doc.get("sections", []):
            for para in sec.get("paragraphs", []):
                text = " ".join(para.get("text", "").split())
                if len(text) > 400:
                    out.append((doc.get("document_id", path.stem), text))
    if not out:
        words = ("energy training inference carbon emissions GPU hours data center efficiency "
                 "model parameters throughput power usage kilowatt water").split()
        out = [(f"doc{i}", " ".join(words[(i * 7 + j) % len(words)] for j in range(300)))
               for i in range(40)]
    return out


def questions(n: int) -> list[tuple[str, str]]:
    path = WATTBOT / "test_Q.csv"
    rows = []
    if path.is_file():
        with open(path, newline="", encoding="utf-8-sig") as f:
            rows = [(r["question"], r.get("answer_unit") or "is_blank") for r in csv.DictReader(f)]
    if not rows:
        rows = [("How much energy did training use?", "kWh")]
    return [rows[i % len(rows)] for i in range(n)]


def make_requests(backend, cfg: InferConfig, n: int, context_tokens: int, offset: int) -> list[ChatRequest]:
    passages = corpus_passages()
    reqs = []
    for i, (question, unit) in enumerate(questions(n + offset)[offset:]):
        blocks, doc_ids, used, j = [], [], 0, (i * 5 + offset) % len(passages)
        while used < context_tokens:
            doc, text = passages[j % len(passages)]
            block = f"[ref_id={doc}] {text}"
            t = backend.count_tokens(block)
            if used + t > context_tokens:
                words = block.split()
                block = " ".join(words[: max(8, int(len(words) * (context_tokens - used) / t))])
                t = backend.count_tokens(block)
            blocks.append(block)
            doc_ids.append(doc)
            used += t
            j += 1
        msgs = build_messages(cfg.templates, context="\n---\n".join(blocks), question=question,
                              answer_unit=unit, qid=f"b{i}")
        reqs.append(ChatRequest(messages=msgs, n=1, temperature=0.0, max_tokens=cfg.max_tokens,
                                seed=0, json_schema=answer_schema(doc_ids, cfg)))
    return reqs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llm", default=None, help="llm config name (default: smollm2_cpu, or "
                    "vllm_qwen2_5_7b with --backend vllm)")
    ap.add_argument("--backend", choices=["hf", "vllm", "openai"], default=None)
    ap.add_argument("--model", help="override llm.model")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--context-tokens", type=int, default=1500)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--decoders", nargs="+", default=[None],
                    help="hf only: llm.decoder values to compare (loop, generate)")
    ap.add_argument("--dtypes", nargs="+", default=[None],
                    help="hf only: llm.dtype values to compare (auto, float32, bfloat16)")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved rounds; the fastest counts")
    ap.add_argument("--out", help="CSV path (default outputs/bench/llm_<name>.csv)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    name = args.llm or ("vllm_qwen2_5_7b" if args.backend == "vllm" else
                        "openai" if args.backend == "openai" else "smollm2_cpu")
    llm_cfg = OmegaConf.to_container(OmegaConf.load(REPO / "conf" / "llm" / f"{name}.yaml"), resolve=True)
    if args.model:
        llm_cfg["model"] = args.model
    if llm_cfg["backend"] == "hf":
        llm_cfg["batch_size"] = max(args.batches)   # each batch is one forward batch
    elif args.decoders != [None] or args.dtypes != [None]:
        ap.error("--decoders and --dtypes apply to the hf backend only")
    if llm_cfg["backend"] == "vllm":
        llm_cfg["use_tqdm"] = False
    root = OmegaConf.create({"seed": 0, "infer": OmegaConf.load(REPO / "conf" / "infer" / "default.yaml")})
    infer_values = OmegaConf.to_container(root.infer, resolve=True)
    infer_values["max_tokens"] = args.max_tokens
    cfg = build(InferConfig, infer_values, "infer")

    backends, load_s = {}, {}
    for dtype in args.dtypes:
        t0 = time.perf_counter()
        backend = load_backend({**llm_cfg, "dtype": dtype} if dtype else llm_cfg)
        warm = make_requests(backend, cfg, 1, 64, offset=999)
        backend.generate(warm)                           # loads the model, warms the kernels
        load_s[dtype] = time.perf_counter() - t0
        backends[dtype] = backend
        print(f"backend {backend.identity}: load + warm-up {load_s[dtype]:.1f} s")

    # the same prompts for every decoder; each batch size gets its own prompts
    offsets = {b: sum(args.batches[:i]) for i, b in enumerate(args.batches)}
    cells = [(t, d, b) for b in args.batches for d in args.decoders for t in args.dtypes]
    best: dict[tuple, dict] = {}
    for rnd in range(args.rounds):
        for dtype, decoder, b in cells:
            backend = backends[dtype]
            if decoder is not None:
                backend.cfg.decoder = decoder
            reqs = make_requests(backend, cfg, b, args.context_tokens, offsets[b])
            before = dict(getattr(backend, "timings", None) or {})
            t = time.perf_counter()
            comps = backend.generate(reqs)
            dt = time.perf_counter() - t
            spent = {k: v - before.get(k, 0) for k, v in (getattr(backend, "timings", None) or {}).items()}
            out_tok = sum(sum(c.completion_tokens) for c in comps)
            in_tok = sum(c.prompt_tokens for c in comps)
            valid = sum(first_json_object(x) is not None for c in comps for x in c.texts)
            pre_s, dec_s = spent.get("prefill_seconds", 0.0), spent.get("decode_seconds", 0.0)
            print(f"round {rnd + 1} dtype={dtype or '-'} decoder={decoder or '-'} batch={b}: "
                  f"{dt:.1f} s (prefill {pre_s:.1f} s, decode {dec_s:.1f} s), "
                  f"{out_tok / dt:.2f} output tok/s", flush=True)
            row = {"backend": llm_cfg["backend"], "model": llm_cfg["model"],
                   "dtype": backend.identity.split("#")[-2] if llm_cfg["backend"] == "hf" else "",
                   "decoder": decoder or "", "batch": b,
                   "prompt_tokens": in_tok, "output_tokens": out_tok, "seconds": round(dt, 2),
                   "prompts_per_s": round(b / dt, 3), "output_tok_per_s": round(out_tok / dt, 2),
                   "prefill_s": round(pre_s, 2), "decode_s": round(dec_s, 2),
                   "prefill_tok_per_s": round(spent.get("prefill_tokens", 0) / pre_s, 1) if pre_s else "",
                   "decode_tok_per_s": round(spent.get("decoded_tokens", 0) / dec_s, 2) if dec_s else "",
                   "total_tok_per_s": round((in_tok + out_tok) / dt, 1), "valid_json": valid,
                   "rounds": args.rounds}
            if (dtype, decoder, b) not in best or row["seconds"] < best[(dtype, decoder, b)]["seconds"]:
                best[(dtype, decoder, b)] = row
    results = [best[c] for c in cells]
    base = results[0]["output_tok_per_s"] or 1e-9
    for r in results:
        r["speedup_vs_first"] = round(r["output_tok_per_s"] / base, 2)
    for (dtype, _, _), r in zip(cells, results):
        r["load_seconds"] = round(load_s[dtype], 1)

    cols = ["dtype", "decoder", "batch", "prompt_tokens", "output_tokens", "seconds", "prefill_s",
            "decode_s", "prefill_tok_per_s", "decode_tok_per_s", "output_tok_per_s",
            "speedup_vs_first", "valid_json"]
    print(" | ".join(f"{c:>12}" for c in cols))
    for r in results:
        print(" | ".join(f"{r[c]!s:>12}" for c in cols))
    out = Path(args.out) if args.out else REPO / "outputs" / "bench" / f"llm_{name}.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(results[0]))
        w.writeheader()
        w.writerows(results)
    print(f"wrote {out}")
    for backend in backends.values():
        backend.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
