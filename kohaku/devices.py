"""Facts about the compute device that several components share."""

from __future__ import annotations


def cpu_has_native_bf16() -> bool:
    """True when this CPU computes bfloat16 natively (AVX512-BF16 or AMX), where bf16 matmuls
    run about twice as fast as float32; False elsewhere or on torch builds that cannot tell."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # pragma: no cover - old or unusual torch builds
        return False
