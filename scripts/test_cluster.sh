#!/usr/bin/env bash
# The launcher tests with every plugin installed: makes .venv-cluster (scripts/setup_cluster.sh),
# then runs the launcher and sweep tests there (joblib, submitit's local executor, Ray: a local
# instance and a `ray start --head`), and one run's parse, embed and infer with run.executor=ray
# on two `ray start` nodes against the local run (tests/test_ray_executor.py). Ray stays on
# 127.0.0.1, every process a test starts is stopped, and a sweep that hangs fails after 300 s.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_cluster.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0
.venv-cluster/bin/python -m pytest -q tests/test_launchers.py tests/test_sweep.py tests/test_sweep_order.py \
    tests/test_ray_executor.py "$@"
