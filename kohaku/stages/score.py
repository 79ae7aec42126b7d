"""Stage ``score``: the WattBot metric of the vote stage's submission against a solutions CSV.

Reads ``<vote artifact>/submission.csv`` and ``corpus.solutions`` (resolved like the corpus
readers: relative to ``corpus.root`` when the file is there, else to the working directory).
Writes the per-question table ``scores`` and ``scores.json`` (variant, score, components,
per-evidence value accuracy, per-Usage components, n). Without solutions
(``corpus.solutions=null``) it writes an empty table and ``{"skipped": "no solutions"}``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import polars as pl
from omegaconf import DictConfig, OmegaConf

from kohaku.config import ConfigError, build
from kohaku.corpus import resolve_against_root
from kohaku.metrics import VARIANTS, score_files
from kohaku.stage import Stage, StageContext


@dataclass
class ScoreConfig:
    variant: str = "wattbot"  # wattbot (competition file) | wattbot-recall (UI fork scorer)
    subset: bool = False  # score only questions present in the submission (question subsets)

    def validate(self) -> None:
        if self.variant not in VARIANTS:
            raise ConfigError(f"score.variant='{self.variant}'; use one of {', '.join(VARIANTS)}")


EMPTY_SCORES = {
    "qid": pl.String,
    "value_ok": pl.Boolean,
    "ref_score": pl.Float64,
    "na_ok": pl.Boolean,
    "unit_ok": pl.Boolean,
}


def solutions_path(cfg: DictConfig) -> Path | None:
    """The solutions CSV named by ``corpus.solutions`` (None when null or unset)."""
    value = OmegaConf.select(cfg, "corpus.solutions", default=None)
    root = OmegaConf.select(cfg, "corpus.root", default=None) or "."
    return resolve_against_root(Path(str(root)).expanduser(), value)


def _file_inputs(cfg: DictConfig) -> list[Path]:
    path = solutions_path(cfg)
    return [path] if path is not None else []


def compute(ctx: StageContext) -> dict[str, pl.DataFrame]:
    cfg = build(ScoreConfig, ctx.section("score"), "score")
    path = solutions_path(ctx.cfg)
    out_json = ctx.out_dir / "scores.json"
    if path is None:
        ctx.log.info("corpus.solutions is null: nothing to score")
        out_json.write_text(json.dumps({"skipped": "no solutions"}, indent=2))
        ctx.report(skipped="no solutions")
        return {"scores": pl.DataFrame(schema=EMPTY_SCORES)}
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: solutions file not found (config key corpus.solutions); "
            "fix the path or set corpus.solutions=null"
        )
    submission = ctx.path("vote") / "submission.csv"
    result = score_files(path, submission, cfg.variant, subset=cfg.subset)
    summary = {"solutions": str(path), **result.summary()}
    out_json.write_text(json.dumps(summary, indent=2, allow_nan=False))
    ctx.log.info(
        "score %.4f (value %.4f, ref %.4f, na %.4f; %s, n=%d)",
        result.score, result.value, result.ref, result.na, cfg.variant, result.n,
    )
    ctx.report(
        score=result.score,
        value=result.value,
        ref=result.ref,
        na=result.na,
        unit=result.unit,
        variant=cfg.variant,
        n=result.n,
        n_missing=result.n_missing,
        n_extra=result.n_extra,
        n_malformed_refs=result.n_malformed_refs,
        warnings=result.warnings,
    )
    return {"scores": result.table}


STAGE = Stage(
    name="score",
    version="1",
    inputs=("vote",),
    config_keys=("corpus.solutions", "score"),
    compute=compute,
    file_inputs=_file_inputs,
    outputs=("scores",),
)
