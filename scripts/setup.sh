#!/usr/bin/env bash
# Create .venv and install kohaku with the CPU build of torch (README command 1 and 2 call this),
# every dependency at the version pinned in requirements/cpu-lock.txt (refresh: scripts/lock.sh).
# GPU machines: see docs/guides/gpu-vllm.md (pip install -e '.[gpu]' picks the CUDA torch that vllm pins).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
# torch==2.13.0 first: on CPU-only machines it is the CPU wheel; a bare 'torch' could pull CUDA.
# -c: the lock pins every other distribution (an existing .venv is moved to the pinned versions).
.venv/bin/python -m pip install -q -c requirements/cpu-lock.txt "torch==2.13.0" -e ".[dev]"
# the int8 ONNX export of the default embedding model (embed.dtype auto on CPUs without bf16), made
# once from the bundled weights, offline, into models/embed/ (kept while its recipe is unchanged)
HF_HUB_OFFLINE=1 .venv/bin/python scripts/export_embed.py
