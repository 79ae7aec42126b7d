"""Small vector helpers shared by the encoders and the tree's parent aggregation."""

from __future__ import annotations

import numpy as np


def l2_normalise(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (x / norms).astype(np.float32, copy=False)
