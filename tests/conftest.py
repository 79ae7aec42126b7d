"""Shared test set-up: offline model hubs, repo paths, GPU skipping, composed configs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
SAMPLE = REPO / "data" / "sample"
WATTBOT = REPO.parent / "shared" / "data" / "wattbot"


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # pragma: no cover - torch missing
        return False


def pytest_collection_modifyitems(config, items):
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def compose(overrides: list[str] | None = None, return_hydra_config: bool = False):
    """The project config as scripts/run.py would compose it (no run dir, no chdir)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from kohaku.runner.pipeline import register_config_schemas

    register_config_schemas()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF), job_name="test"):
        return hydra_compose("config", overrides=overrides or [], return_hydra_config=return_hydra_config)


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture
def sample_root() -> Path:
    return SAMPLE


@pytest.fixture
def wattbot_root() -> Path:
    if not (WATTBOT / "metadata.csv").is_file():
        pytest.skip(f"WattBot data not found at {WATTBOT}")
    return WATTBOT
