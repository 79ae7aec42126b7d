#!/usr/bin/env bash
# Create .venv-cluster: kohaku with the cluster launcher extras (Ray, SLURM/submitit) and dev tools.
# A venv of its own because hydra-ray-launcher pins cloudpickle<3 and moves joblib and
# python-dateutil; the default .venv keeps the versions it was tested with.
# Used by scripts/test_cluster.sh (CI), for running sweeps with hydra/launcher=ray|slurm* and one
# run's parse, embed and infer on a Ray cluster (run.executor=ray: docs/guides/ray-cluster.md).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${KOHAKU_CLUSTER_VENV:-.venv-cluster}
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
# torch==2.13.0 first, as in scripts/setup.sh: the CPU wheel on CPU-only machines.
"$VENV/bin/python" -m pip install -q "torch==2.13.0" -e ".[dev,ray,slurm]"
