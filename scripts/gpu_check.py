"""GPU check: run the vLLM backend on a small model over the sample questions, print throughput.

Usage (on a machine with a CUDA GPU and `pip install -e '.[gpu]'`):
  python scripts/gpu_check.py [--model Qwen/Qwen2.5-0.5B-Instruct] [--n 3] [--questions 10]

Prints prompts/s, output tokens/s and peak GPU memory, then exits 0. Exits 1 with a clear
message when there is no GPU or vllm is not installed. The model is read from a local path or
the Hugging Face cache / hub as vLLM does (the only command in kohaku that may reach a hub).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def fail(message: str) -> None:
    print(f"gpu_check: {message}", file=sys.stderr)
    raise SystemExit(1)


def gpu_memory_used_mib() -> list[int]:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, check=True, timeout=20,
        ).stdout
        return [int(x) for x in out.split()]
    except (OSError, subprocess.SubprocessError, ValueError):
        return []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="Qwen/Qwen2.5-0.5B-Instruct")
    parser.add_argument("--n", type=int, default=3, help="samples per question")
    parser.add_argument("--max-model-len", type=int, default=8192)
    args = parser.parse_args()

    try:
        import torch
    except ImportError:
        fail("torch is not installed; pip install -e '.[gpu]'")
    if not torch.cuda.is_available():
        fail("no CUDA GPU visible (torch.cuda.is_available() is False)")
    try:
        import vllm
    except ImportError:
        fail("vllm is not installed; pip install -e '.[gpu]'")

    with tempfile.TemporaryDirectory() as tmp:
        overrides = [
            "llm=vllm_qwen2_5_7b",
            f"llm.model={args.model}",
            f"llm.max_model_len={args.max_model_len}",
            "llm.tensor_parallel_size=1",
            f"infer.n={args.n}",
            f"cache.dir={tmp}/cache",
            f"hydra.run.dir={tmp}/run",
        ]
        before = gpu_memory_used_mib()
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, str(REPO / "scripts" / "run.py"), *overrides], cwd=REPO)
        peak = before
        while proc.poll() is None:
            now = gpu_memory_used_mib()
            peak = [max(a, b) for a, b in zip(peak, now)] if peak else now
            time.sleep(0.5)
        wall = time.perf_counter() - started
        if proc.returncode != 0:
            fail(f"the pipeline failed (exit {proc.returncode}); see the log above")
        run = json.loads((Path(tmp) / "run" / "run.json").read_text())
    infer = run["stages"]["infer"]
    summary = infer["summary"]
    gen_seconds = max(float(summary.get("seconds", infer["seconds"])), 1e-9)
    print(f"vllm {vllm.__version__}  model {args.model}  GPU {torch.cuda.get_device_name(0)}")
    print(f"{'prompts':>8} {'samples':>8} {'gen s':>8} {'prompts/s':>10} {'out tok/s':>10} {'peak MiB':>9} {'wall s':>7}")
    print(
        f"{summary.get('prompts', 0):>8} {args.n:>8} {gen_seconds:>8.2f} "
        f"{summary.get('prompts', 0) / gen_seconds:>10.2f} "
        f"{summary.get('completion_tokens', 0) / gen_seconds:>10.1f} "
        f"{max(peak) if peak else -1:>9} {wall:>7.1f}"
    )


if __name__ == "__main__":
    main()
