"""Helpers for the corpus / parse / tree tests: PDFs built on the fly, a hand-made StageContext."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from kohaku.runner.stage import Stage, StageContext

REPO = Path(__file__).resolve().parents[1]


def _load_pdf_script():
    spec = importlib.util.spec_from_file_location("make_sample_pdf", REPO / "kohaku" / "tools" / "sample_pdf.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def write_two_column_pdf(path: Path, *args: Any, **kwargs: Any) -> Path:
    """scripts/make_sample_pdf.write_two_column_pdf (needs fpdf2)."""
    return _load_pdf_script().write_two_column_pdf(path, *args, **kwargs)


def make_ctx(stage: Stage, cfg: dict[str, Any], out_dir: Path, inputs: dict[str, Path] | None = None) -> StageContext:
    return StageContext(
        stage=stage,
        cfg=OmegaConf.create(cfg),
        input_dirs=dict(inputs or {}),
        out_dir=out_dir,
        services=None,
        log=logging.getLogger(f"test.{stage.name}"),
    )


def write_tables(folder: Path, tables: dict[str, Any]) -> Path:
    """Write a stage's output tables as the runner would (``<name>.parquet``)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, df in tables.items():
        df.write_parquet(folder / f"{name}.parquet")
    return folder


LEFT = [
    ("h", "1 Introduction"),
    ("p", "Left column text comes first. Cooling systems in machine rooms remove the heat that "
          "servers produce, and their power adds to the facility overhead."),
    ("h", "2 Method"),
    ("p", "We logged inlet temperatures at every rack for three months and compared them with "
          "the power drawn by the chillers."),
]
RIGHT = [
    ("h", "3 Results"),
    ("p", "Right column text comes second. The chillers used less power once the set point "
          "was raised by two degrees."),
    ("h", "4 Conclusion"),
    ("p", "Raising set points is the cheapest saving available to most operators."),
]
TABLE = [
    ["Set point (C)", "Chiller power (kW)", "PUE"],
    ["18", "140", "1.45"],
    ["20", "121", "1.38"],
    ["22", "104", "1.31"],
]
