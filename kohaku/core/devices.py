"""Facts about the compute device that several components share."""

from __future__ import annotations

import platform
from pathlib import Path

# CPU feature flags (as /proc/cpuinfo spells them) of instructions that compute in bfloat16
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> frozenset[str] | None:
    """The feature flags of the first CPU in ``cpuinfo`` (Linux), or None where there is no such
    file or it lists no flags (other systems)."""
    try:
        text = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return None


def cpu_has_native_bf16(flags: frozenset[str] | None = None) -> bool:
    """True when this CPU computes bfloat16 natively (AVX512-BF16 or AMX-BF16 among its flags);
    False elsewhere and where the flags cannot be read (every non-Linux system).

    torch's own check (``torch.ops.mkldnn._is_mkldnn_bf16_supported``) is not used: it answers
    True for any AVX512 CPU, where oneDNN emulates bf16 and matmuls are slower than in float32.
    Whether bf16 is faster on a CPU that has the instructions is a separate, measured question
    (``scripts/bench_llm.py --dtypes``, ``scripts/bench_embed.py``).
    """
    if flags is None:
        if platform.system() != "Linux":
            return False
        flags = cpu_flags()
    return bool(flags and BF16_FLAGS & flags)
