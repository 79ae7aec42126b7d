"""score stage: the vote stage's submission against ``corpus.solutions`` with the task's metric
(kohaku.tasks.score.scoring: a competition's exact metric from its room, or a task's weighted components, an LLM judge
among them through the generation cache).

Writes the per-question table ``scores`` (with each question's error class) and
``scores.json`` (the components, the error classes' counts and ``metric``: what the reports
recompute on resamples); without solutions (``corpus.solutions=null``) an empty table and
``{"skipped": "no solutions"}``.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from omegaconf import DictConfig

from kohaku.ingest.corpus import CorpusConfig, solutions_file
from kohaku.llm.base import load_backend
from kohaku.llm.cache import open_generation_cache
from kohaku.runner.stage import Stage, StageContext
from kohaku.tasks.score.scoring import EMPTY_SCORES, ScoreConfig, score_code_key, score_submission
from kohaku.tasks.spec import build_task

SUMMARY_EVENTS = {
    "n_missing": "questions missing from the submission",
    "n_malformed_refs": "malformed ref lists",
    "judge_invalid": "judge outputs that were not a verdict (scored 0)",
}


def compute(ctx: StageContext) -> dict[str, pl.DataFrame]:
    cfg: ScoreConfig = ctx.config("score")
    task = build_task(ctx.section("task"))
    path = solutions_file(ctx.config("corpus"))
    out_json = ctx.out_dir / "scores.json"
    if path is None:
        ctx.log.info("corpus.solutions is null: nothing to score")
        out_json.write_text(json.dumps({"skipped": "no solutions"}, indent=2))
        ctx.report(skipped="no solutions")
        return {"scores": pl.DataFrame(schema=EMPTY_SCORES)}
    loaded = {}
    judge_llm = cfg.judge_llm or ctx.section("llm")    # score.judge_llm, else the run's llm

    def backend():   # loaded only when a metric needs a model (the LLM judge)
        if "llm" not in loaded:
            loaded["llm"] = ctx.services.get("llm", judge_llm, load_backend)
        return loaded["llm"]

    cache = None
    if any(m.fn == "llm_judge" for m in task.score.metric_specs):
        identity = backend().identity
        cache = open_generation_cache(ctx.cache_dir, identity, True)
    result = score_submission(task, path, ctx.path("vote") / "submission.csv", variant=cfg.variant,
                              subset=cfg.subset, backend=backend, cache=cache)
    summary = {"solutions": str(path), **result.summary()}
    out_json.write_text(json.dumps(summary, indent=2, allow_nan=False))
    parts = ", ".join(f"{k} {v:.4f}" for k, v in result.components.items() if v is not None)
    ctx.log.info("score %.4f (%s; %s, n=%d)", result.score, parts,
                 result.details.get("variant", task.name), result.n)
    figures = {k: v for k, v in result.details.items() if k in ("variant", "n_malformed_refs", "judge_invalid")}
    ctx.report(score=result.score, **result.components, **figures, task=task.name, n=result.n,
               n_missing=result.n_missing, n_extra=result.n_extra, warnings=result.warnings,
               errors=result.errors["counts"])
    ctx.log.info("error classes: %s", ", ".join(f"{k} {v}" for k, v in result.errors["counts"].items() if v))
    return {"scores": result.table}


def _file_inputs(cfg: DictConfig) -> list[Path]:
    path = solutions_file(STAGE.typed(cfg, "corpus"), must_exist=False)
    return [path] if path is not None else []


STAGE = Stage(
    name="score",
    # 4: score.unanswered for every metric; page_pools repeats and page bases; a task's table
    # holds the cited pages (truth_refs, pred_refs) and a set-level metric's counts; its metric
    # says how components combine (sum) and which are set statistics
    version="4",
    inputs=("vote",),
    # llm: the judge metric's model (the run's; infer's key holds it already, so no extra misses)
    # task.answer.kinds: the kind_value metric scores each value by its kind
    config_keys=("corpus.solutions", "score", "task.name", "task.solutions", "task.score",
                 "task.submission", "task.answer.kinds", "llm"),
    llm_configs=("llm", "score.judge_llm"),
    # the code of every metric and classes function the task names: editing one re-scores
    key_functions=(("task.score", score_code_key),),
    compute=compute,
    file_inputs=_file_inputs,
    outputs=("scores",),
    configs={"corpus": CorpusConfig, "score": ScoreConfig},
    summary_events=SUMMARY_EVENTS,
    run_dir_files=("scores.json", "scores.parquet"),
)
