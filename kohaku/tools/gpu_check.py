"""GPU check: the KohakuRAG recipe's speed on this machine, in one command.

  python scripts/gpu_check.py MODEL_DIR [--llm vllm_qwen2_5_7b] [--compare-sequential]
                              [--sequential-questions N] [--corpus-root DIR] [--out DIR]
                              [OVERRIDE ...]

The run: scripts/run.py +experiment=kohaku_wattbot on the WattBot public split (the 282
test_Q.csv questions, scored against the 187 answers of solutions_public.csv; 4 LLM planner
queries, 3 retrieval attempts, 5 samples per question, up to 2 retry rounds) with
llm.model=MODEL_DIR, a local Hugging Face model folder (nothing is fetched from a hub), and a
fresh, empty cache: every stage is computed. OVERRIDEs (key=value) go to that run, e.g.
llm.max_model_len=16384 or llm.tensor_parallel_size=2.

It prints:
  - wall seconds per stage (the plan stage includes the vLLM engine start: the LLM planner uses
    the answering model first) and of the whole run;
  - infer: prompts, samples, prompts/s, prefill tokens/s (prompt tokens of the prompts sent /
    model seconds) and decode tokens/s (output tokens / model seconds), over the batched rounds;
  - peak GPU memory per GPU (nvidia-smi, MiB, every process) and the score.

--compare-sequential: afterwards the same prompts (the run's own questions and contexts) are
answered one question at a time, one request per engine call with 1 sample and the same retry
rounds, by the same model in a new engine (warmed up first; its start is shown apart): the way
KohakuRAG's local-model fork answers (9.8 s a question for Qwen2.5-7B, 2,760 s for the 282 test
questions). It prints s/question for both ways and the batch speed-up (sequential s/question over
batch s/question; the batch run also draws 5 samples where the sequential one draws 1).
--sequential-questions N times only the first N questions (the total is extrapolated).

--out DIR keeps the run dir (run.json, run.log, submission.csv), the cache and report.json there
(DIR must be new or empty); by default they go to a temporary folder that is removed at the end.

Exits 1 with one line on stderr when there is no CUDA GPU, vllm is not installed, or the model
folder, the llm config or the corpus is missing; 0 after printing the report.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[2]

from kohaku.core.errors import KohakuError  # noqa: E402
from kohaku.tasks.named.catalog import DEFAULT_VARIANT  # noqa: E402
from kohaku.tools.defaults import EXPERIMENT, TASK, corpus_root  # noqa: E402  (the default task's)

DEFAULT_LLM = "vllm_qwen2_5_7b"
STAGES = ("parse", "questions", "tree", "embed", "index", "plan", "retrieve", "infer", "vote", "score")
ENGINE_READY = re.compile(r"vLLM engine for .* ready in ([0-9.]+) s")
# KohakuRAG's local-model fork, one question at a time (Qwen2.5-7B, 1 sample, 282 test questions)
KOHAKU_FORK = {"seconds_per_question": 9.8, "seconds": 2760, "questions": 282}


class CheckError(Exception):
    """A reason to stop with exit 1 and one line."""


# ------------------------------------------------------------------ arguments


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpu_check.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?", help="local Hugging Face model folder (config.json, weights, tokenizer)")
    p.add_argument("overrides", nargs="*", metavar="OVERRIDE",
                   help="extra key=value overrides for the run (not llm.model, cache.dir, hydra.run.dir)")
    p.add_argument("--llm", default=DEFAULT_LLM, help=f"llm config (conf/llm/NAME.yaml; default {DEFAULT_LLM})")
    p.add_argument("--corpus-root", type=Path, default=None,
                   help=f"the default task's corpus folder (default {corpus_root()})")
    p.add_argument("--compare-sequential", action="store_true",
                   help="also time one-question-at-a-time answering with the same model")
    p.add_argument("--sequential-questions", type=int, default=None, metavar="N",
                   help="with --compare-sequential: time the first N questions only (default: all)")
    p.add_argument("--out", type=Path, default=None,
                   help="keep the run dir, cache and report.json here (new or empty folder)")
    return p


RESERVED = ("llm.model=", "cache.dir=", "hydra.run.dir=", "experiment=", "+experiment=", "llm=")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The arguments; usage errors (exit 2) for what argparse alone cannot see."""
    p = parser()
    args = p.parse_args(argv)
    for o in args.overrides:
        if "=" not in o:
            p.error(f"override {o!r} is not key=value")
        if o.startswith(RESERVED):
            p.error(f"override {o!r}: gpu_check sets {o.split('=', 1)[0]} itself (MODEL_DIR, --llm, --out)")
    if args.sequential_questions is not None:
        if not args.compare_sequential:
            p.error("--sequential-questions needs --compare-sequential")
        if args.sequential_questions < 1:
            p.error("--sequential-questions must be >= 1")
    return args


def check_inputs(args: argparse.Namespace) -> None:
    """The model folder, llm config, corpus and --out folder exist as needed (CheckError if not)."""
    if not args.model:
        raise CheckError("give the local model folder: python scripts/gpu_check.py MODEL_DIR (see --help)")
    model = Path(args.model)
    if not (model / "config.json").is_file():
        raise CheckError(f"model folder {model} has no config.json: give a local Hugging Face model "
                         f"folder (gpu_check fetches nothing from a hub)")
    if not (REPO / "conf" / "llm" / f"{args.llm}.yaml").is_file():
        raise CheckError(f"--llm {args.llm}: no conf/llm/{args.llm}.yaml")
    root = args.corpus_root or corpus_root()
    for name in ("test_Q.csv", "solutions_public.csv", "metadata.csv"):
        if not (root / name).is_file():
            raise CheckError(f"corpus root {root} has no {name} (--corpus-root: the default task's corpus folder)")
    if args.out is not None and args.out.exists() and any(args.out.iterdir()):
        raise CheckError(f"--out {args.out} is not empty: the check needs a fresh cache")


def run_overrides(args: argparse.Namespace, work: Path) -> list[str]:
    """The scripts/run.py arguments of the batch run."""
    out = [f"+experiment={EXPERIMENT}", f"llm={args.llm}", f"llm.model={Path(args.model).resolve()}",
           f"cache.dir={work / 'cache'}", f"hydra.run.dir={work / 'run'}"]
    if args.corpus_root is not None:
        out.append(f"corpus.root={args.corpus_root.resolve()}")
    return out + list(args.overrides)


# ------------------------------------------------------------------ the machine


def require_gpu() -> tuple[Any, Any]:
    """(torch, vllm), or CheckError when there is no CUDA GPU or no vllm."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")    # torch warns on a CUDA build without a driver
        try:
            import torch
        except ImportError as exc:
            raise CheckError(f"torch is not installed ({exc}); pip install -e '.[gpu,dev]'") from exc
        if not torch.cuda.is_available():
            raise CheckError(f"no CUDA GPU visible (torch {torch.__version__}: torch.cuda.is_available() "
                             f"is False); this check needs a CUDA GPU and pip install -e '.[gpu,dev]'")
    try:
        import vllm
    except ImportError as exc:
        raise CheckError(f"vllm is not installed ({exc}); pip install -e '.[gpu,dev]'") from exc
    return torch, vllm


def gpu_memory_used_mib() -> list[int]:
    """Memory used on each GPU (nvidia-smi; every process); [] where nvidia-smi is missing."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, check=True, timeout=20,
        ).stdout
        return [int(x) for x in out.split()]
    except (OSError, subprocess.SubprocessError, ValueError):
        return []


class PeakMemory:
    """Samples GPU memory in a thread while a phase runs (``with PeakMemory() as m:``); ``m.peak``
    is the most seen on each GPU, in MiB ([] without nvidia-smi)."""

    def __init__(self, interval: float = 0.5, read: Callable[[], list[int]] = gpu_memory_used_mib):
        self.interval, self.read = interval, read
        self.peak: list[int] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        now = self.read()
        if now:
            self.peak = [max(a, b) for a, b in zip(self.peak, now)] if self.peak else list(now)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> "PeakMemory":
        self.sample()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()


# ------------------------------------------------------------------ figures


def _rate(count: float, seconds: float) -> float | None:
    return count / seconds if seconds > 0 else None


def batch_figures(run: dict[str, Any], log_text: str = "") -> dict[str, Any]:
    """The batch run's figures from its run.json (and run.log for the engine start)."""
    if run.get("status") != "ok":
        raise CheckError(f"the run failed in stage {run.get('failed_stage')}: {run.get('error')}")
    stages = run.get("stages") or {}
    missing = [s for s in ("questions", "retrieve", "infer", "score") if s not in stages]
    if missing:
        raise CheckError(f"run.json has no stage(s) {missing}")
    infer = stages["infer"]
    summary = infer.get("summary") or {}
    model_s = float(summary.get("seconds") or 0.0)
    questions = int(summary.get("questions") or 0)
    ready = ENGINE_READY.findall(log_text)
    return {
        "run_seconds": float(run.get("seconds") or 0.0),
        "stages": [{"name": name, "seconds": float(rec.get("seconds") or 0.0),
                    "cache_hit": bool(rec.get("cache_hit"))} for name, rec in stages.items()],
        "engine_start_seconds": float(ready[0]) if ready else None,
        "infer": {
            "questions": questions,
            **_counts(summary),
            "model_seconds": model_s,
            "stage_seconds": float(infer.get("seconds") or 0.0),
        },
        "score": (stages["score"].get("summary") or {}).get("score"),
        "score_variant": (stages["score"].get("summary") or {}).get("variant"),
        "scored": (stages["score"].get("summary") or {}).get("n"),
    }


def _counts(summary: dict[str, Any]) -> dict[str, int]:
    """The infer summary's counters (0 where absent)."""
    keys = ("rounds", "prompts", "samples", "model_calls", "prompt_tokens", "completion_tokens", "invalid")
    return {k: int(summary.get(k) or 0) for k in keys}


def throughput(f: dict[str, Any]) -> dict[str, float | None]:
    """prompts/s, samples/s, prefill and decode tokens/s over the model seconds; s/question over
    the stage (batch) or answering (sequential) seconds."""
    s = f["model_seconds"]
    return {
        "prompts_per_s": _rate(f["prompts"], s),
        "samples_per_s": _rate(f["samples"], s),
        "prefill_tok_per_s": _rate(f["prompt_tokens"], s),
        "decode_tok_per_s": _rate(f["completion_tokens"], s),
        "s_per_question": (f["stage_seconds"] / f["questions"]) if f["questions"] else None,
    }


def sequential_figures(summary: dict[str, Any], wall: float, engine_start: float,
                       total_questions: int) -> dict[str, Any]:
    """The one-question-at-a-time figures from run_infer's summary and the answering wall time."""
    questions = int(summary.get("questions") or 0)
    return {
        "questions": questions,
        "total_questions": total_questions,
        **_counts(summary),
        "model_seconds": float(summary.get("seconds") or 0.0),
        "stage_seconds": wall,
        "engine_start_seconds": engine_start,
        "extrapolated_seconds": (wall / questions * total_questions) if questions else None,
    }


# ------------------------------------------------------------------ the report


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def format_report(report: dict[str, Any]) -> str:
    """The printed report (see the module docstring)."""
    b = report["batch"]
    lines = [f"gpu_check: vllm {report['vllm']}, torch {report['torch']}, {report['gpu']}",
             f"model {report['model']} (llm={report['llm']}), +experiment={EXPERIMENT}, fresh cache",
             "", f"{'stage':<10} {'wall s':>9}"]
    lines += [f"{s['name']:<10} {s['seconds']:>9.1f}" + ("  (cache hit)" if s["cache_hit"] else "")
              for s in b["stages"]]
    lines.append(f"{'run':<10} {b['run_seconds']:>9.1f}")
    if b.get("engine_start_seconds") is not None:
        lines.append(f"(vLLM engine start {b['engine_start_seconds']:.1f} s, "
                     f"inside the first stage that uses the model)")
    rows = [("batch", b["infer"], b["infer"]["stage_seconds"])]
    seq = report.get("sequential")
    if seq:
        rows.append(("sequential", seq, seq["stage_seconds"]))
    lines += ["", f"{'answering':<11} {'questions':>9} {'prompts':>8} {'samples':>8} {'calls':>6} {'seconds':>9} "
                  f"{'s/question':>10} {'prompts/s':>9} {'prefill tok/s':>13} {'decode tok/s':>12}"]
    for name, f, seconds in rows:
        t = throughput(f)
        lines.append(f"{name:<11} {f['questions']:>9} {f['prompts']:>8} {f['samples']:>8} {f['model_calls']:>6} "
                     f"{seconds:>9.1f} {_num(t['s_per_question'], '.2f'):>10} {_num(t['prompts_per_s'], '.2f'):>9} "
                     f"{_num(t['prefill_tok_per_s'], ',.0f'):>13} {_num(t['decode_tok_per_s'], ',.0f'):>12}")
    lines.append("(tokens/s: prompt tokens and output tokens over the model seconds of the engine calls)")
    peak = b.get("peak_gpu_mib") or []
    lines += ["", "peak GPU memory: " + (", ".join(f"GPU{i} {m:,} MiB" for i, m in enumerate(peak))
                                          if peak else "- (no nvidia-smi)")]
    if seq and seq.get("peak_gpu_mib"):
        lines[-1] += "; sequential: " + ", ".join(f"GPU{i} {m:,} MiB" for i, m in enumerate(seq["peak_gpu_mib"]))
    score = b.get("score")
    lines.append(f"score: {score:.4f} ({b.get('score_variant') or DEFAULT_VARIANT}, public split, "
                 f"{b.get('scored')} questions scored)" if score is not None else "score: -")
    if seq:
        bt, st = throughput(b["infer"]), throughput(seq)
        lines.append("")
        if seq["questions"] < seq["total_questions"] and seq["extrapolated_seconds"] is not None:
            lines.append(f"sequential: {seq['questions']} of {seq['total_questions']} questions timed; all of them "
                         f"would take about {seq['extrapolated_seconds']:.0f} s")
        lines.append(f"sequential engine start {seq['engine_start_seconds']:.1f} s (not counted above)")
        if bt["s_per_question"] and st["s_per_question"]:
            lines.append(f"batch speed-up: {st['s_per_question'] / bt['s_per_question']:.1f}x per question "
                         f"({st['s_per_question']:.2f} s one at a time, 1 sample; {bt['s_per_question']:.2f} s "
                         f"batched, {b['infer']['samples']} samples for {b['infer']['questions']} questions)")
        lines.append(f"KohakuRAG's local-model fork: {KOHAKU_FORK['seconds_per_question']} s a question "
                     f"(Qwen2.5-7B, {KOHAKU_FORK['seconds']:,} s for {KOHAKU_FORK['questions']} questions)")
    return "\n".join(lines)


# ------------------------------------------------------------------ the runs


def run_batch(args: argparse.Namespace, work: Path) -> tuple[dict[str, Any], list[int]]:
    """scripts/run.py with the recipe; (run.json, peak GPU MiB)."""
    cmd = [sys.executable, str(REPO / "scripts" / "run.py"), *run_overrides(args, work)]
    print("gpu_check: " + " ".join(cmd[1:]), file=sys.stderr, flush=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    with PeakMemory() as memory:
        code = subprocess.run(cmd, cwd=REPO, env=env).returncode
    run_json = work / "run" / "run.json"
    if not run_json.is_file():
        raise CheckError(f"the run wrote no {run_json} (exit {code}); see the log above")
    run = json.loads(run_json.read_text(encoding="utf-8"))
    if code != 0 and run.get("status") == "ok":
        raise CheckError(f"scripts/run.py exited {code}; see the log above")
    return run, memory.peak


def run_sequential(run: dict[str, Any], limit: int | None) -> dict[str, Any]:
    """Answer the run's questions one at a time with its model (a new engine, warmed up first)."""
    import polars as pl

    from kohaku.answer.answering import InferConfig, run_infer
    from kohaku.tasks import build_task, load_task
    from kohaku.core.config import build
    from kohaku.llm.base import ChatRequest, load_backend

    stages, config = run["stages"], run["config"]
    questions = pl.read_parquet(Path(stages["questions"]["path"]) / "questions.parquet")
    contexts = pl.read_parquet(Path(stages["retrieve"]["path"]) / "contexts.parquet")
    total = questions.height
    if limit is not None:
        questions = questions.head(limit)
    cfg = build(InferConfig, {**config["infer"], "n": 1, "chunk_size": 1, "generation_cache": False}, "infer")
    backend = load_backend(dict(config["llm"]))
    try:
        with PeakMemory() as memory:
            t0 = time.perf_counter()
            backend.generate([ChatRequest(messages=[{"role": "user", "content": "Say OK."}], max_tokens=2)])
            started = time.perf_counter() - t0
            t1 = time.perf_counter()
            task = build_task(config["task"]) if "task" in config else load_task(TASK)
            _, summary = run_infer(questions, contexts, backend, cfg, task.answer, task.questions.fields, cache=None)
            wall = time.perf_counter() - t1
    finally:
        backend.close()
    figures = sequential_figures(summary, wall, started, total)
    figures["peak_gpu_mib"] = memory.peak
    return figures


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        torch, vllm = require_gpu()
        check_inputs(args)
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="gpu_check-") as tmp:
            work = args.out.resolve() if args.out is not None else Path(tmp)
            run, peak = run_batch(args, work)
            log_file = work / "run" / "run.log"
            batch = batch_figures(run, log_file.read_text(encoding="utf-8") if log_file.is_file() else "")
            batch["peak_gpu_mib"] = peak
            report = {"vllm": vllm.__version__, "torch": f"{torch.__version__} (CUDA {torch.version.cuda})",
                      "gpu": f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}",
                      "model": str(args.model), "llm": args.llm, "batch": batch, "sequential": None}
            if args.compare_sequential:
                report["sequential"] = run_sequential(run, args.sequential_questions)
            if args.out is not None:
                (work / "report.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    except CheckError as exc:
        print(f"gpu_check: {exc}", file=sys.stderr)
        return 1
    except KohakuError as exc:      # e.g. the sequential engine failed: the message names the model
        print(f"gpu_check: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(format_report(report))
    return 0


if __name__ == "__main__":   # the vLLM engine starts its workers with spawn
    sys.exit(main())
