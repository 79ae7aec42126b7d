"""recall stage: the retrieve stage's contexts scored per question, no model answering
(kohaku.tasks.analysis.recall): against the task's gold evidence when ``task.gold`` names a file
(doc, page, page±1 and evidence-text hits) and against the answer values of ``corpus.solutions``
(answer-value evidence and doc hits); ``recall.primary`` says which figure is the run's score.

Writes the per-question table ``recall`` (nulls where a question has no truth of that kind) and
``recall.json`` (the figures, the components and ``metric``: the sweep reports read a run
without a score stage through it, so a sweep of retrieval keys gets a leaderboard, intervals
and a selection report). Not in the default ``stages`` list: ``stages=[recall]``.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from omegaconf import DictConfig, OmegaConf

from kohaku.core.config import ConfigError
from kohaku.ingest.corpus import CorpusConfig, solutions_file
from kohaku.retrieval.gold import GoldSpec, check_gold_pages, gold_path, read_gold
from kohaku.runner.stage import Stage, StageContext, optional_config
from kohaku.tasks.analysis.recall import (RecallConfig, primary_measure, recall_figures, recall_metric,
                                          recall_shares, recall_table)
from kohaku.tasks.score.scoring import read_solutions
from kohaku.tasks.spec import build_task


def compute(ctx: StageContext) -> dict[str, pl.DataFrame]:
    cfg: RecallConfig = ctx.config("recall")
    questions = ctx.table("questions", "questions")
    qids = questions["qid"].cast(pl.String).to_list()
    spec = optional_config(ctx.cfg, "task.gold", GoldSpec)
    root = str(ctx.section("corpus.root"))
    gold = None
    if spec is not None and spec.file:
        gold = read_gold(spec, root)
        check_gold_pages(gold, ctx.table("parse", "documents"), gold_path(spec, root), spec.page_base)
    path = solutions_file(ctx.config("corpus")) if cfg.evidence else None
    answers = None
    if path is not None:
        task = build_task(ctx.section("task"))
        if task.solutions.refs:
            sol = read_solutions(path, task)
            answers = sol.select(pl.col(task.solutions.id).cast(pl.String).alias("id"),
                                 pl.col(task.solutions.answer).cast(pl.String).alias("answer_value"),
                                 pl.col(task.solutions.refs).cast(pl.String).alias("ref_id"))
            answers = answers.join(questions.select(pl.col("qid").cast(pl.String).alias("id"),
                                                    pl.col("question").cast(pl.String)), on="id", how="left")
    table = recall_table(ctx.table("retrieve", "contexts"), ctx.table("tree", "nodes"), qids, gold,
                         answers, cfg.attempt, ctx.table("retrieve", "ranking"))
    try:
        primary = primary_measure(table, cfg.primary)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    metric = recall_metric(table, primary)
    shares = recall_shares(table, metric)
    figures = recall_figures(table)
    summary = {"primary": primary, "score": shares[primary], "components": shares,
               "figures": figures, "gold": spec.file if spec is not None else None,
               "solutions": str(path) if answers is not None else None, "metric": metric}
    (ctx.out_dir / "recall.json").write_text(json.dumps(summary, indent=2, allow_nan=False))
    ctx.log.info("recall %s %.4f (%s)", primary, shares[primary] or 0.0,
                 ", ".join(f"{k} {v:.4f}" for k, v in shares.items() if v is not None))
    ctx.report(score=shares[primary], primary=primary, components=shares, n=len(qids),
               **{k: v for k, v in figures.items() if k != "questions"})
    return {"recall": table}


def _file_inputs(cfg: DictConfig) -> list[Path]:
    """The gold evidence file and the solutions (their content is part of the key)."""
    spec = optional_config(cfg, "task.gold", GoldSpec)
    root = str(OmegaConf.select(cfg, "corpus.root", default="."))
    gold = gold_path(spec, root) if spec is not None and spec.file else None
    sol = solutions_file(STAGE.typed(cfg, "corpus"), must_exist=False)
    return [p for p in (gold, sol) if p is not None and p.is_file()]


STAGE = Stage(
    name="recall",
    version="1",
    inputs=("retrieve", "tree", "questions", "parse"),   # parse: the gold pages' check
    config_keys=("recall", "corpus.solutions", "corpus.root", "task.gold", "task.solutions"),
    compute=compute,
    file_inputs=_file_inputs,
    outputs=("recall",),
    configs={"recall": RecallConfig, "corpus": CorpusConfig, "task.gold": GoldSpec},
    run_dir_files=("recall.json", "recall.parquet"),
)
