"""score stage: the vote stage's submission against ``corpus.solutions`` (kohaku.metrics).

Writes the per-question table ``scores`` (with each question's error class, kohaku.diagnosis)
and ``scores.json`` (the components and the error classes' counts); without solutions
(``corpus.solutions=null``) an empty table and ``{"skipped": "no solutions"}``.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from omegaconf import DictConfig

from kohaku.corpus import CorpusConfig, solutions_file
from kohaku.diagnosis import classify, error_summary
from kohaku.metrics import EMPTY_SCORES, ScoreConfig, score_files
from kohaku.stage import Stage, StageContext

SUMMARY_EVENTS = {
    "n_missing": "questions missing from the submission",
    "n_malformed_refs": "malformed ref lists",
}


def compute(ctx: StageContext) -> dict[str, pl.DataFrame]:
    cfg: ScoreConfig = ctx.config("score")
    path = solutions_file(ctx.config("corpus"))
    out_json = ctx.out_dir / "scores.json"
    if path is None:
        ctx.log.info("corpus.solutions is null: nothing to score")
        out_json.write_text(json.dumps({"skipped": "no solutions"}, indent=2))
        ctx.report(skipped="no solutions")
        return {"scores": pl.DataFrame(schema=EMPTY_SCORES)}
    result = score_files(path, ctx.path("vote") / "submission.csv", cfg.variant, subset=cfg.subset)
    table = classify(result.table)
    errors = error_summary(table)
    summary = {"solutions": str(path), **result.summary(), "errors": errors}
    out_json.write_text(json.dumps(summary, indent=2, allow_nan=False))
    ctx.log.info("score %.4f (value %.4f, ref %.4f, na %.4f; %s, n=%d)",
                 result.score, result.value, result.ref, result.na, cfg.variant, result.n)
    ctx.report(score=result.score, value=result.value, ref=result.ref, na=result.na,
               unit=result.unit, variant=cfg.variant, n=result.n, n_missing=result.n_missing,
               n_extra=result.n_extra, n_malformed_refs=result.n_malformed_refs,
               warnings=result.warnings, errors=errors["counts"])
    ctx.log.info("error classes: %s", ", ".join(f"{k} {v}" for k, v in errors["counts"].items() if v))
    return {"scores": table}


def _file_inputs(cfg: DictConfig) -> list[Path]:
    path = solutions_file(STAGE.typed(cfg, "corpus"), must_exist=False)
    return [path] if path is not None else []


STAGE = Stage(
    name="score",
    version="2",
    inputs=("vote",),
    config_keys=("corpus.solutions", "score"),
    compute=compute,
    file_inputs=_file_inputs,
    outputs=("scores",),
    configs={"corpus": CorpusConfig, "score": ScoreConfig},
    summary_events=SUMMARY_EVENTS,
    run_dir_files=("scores.json", "scores.parquet"),
)
