"""vote stage: generations -> ``answers`` and ``submission.csv`` (kohaku.voting, the task's
grouping and submission writer)."""

from __future__ import annotations

import polars as pl

from kohaku.stage import Stage, StageContext
from kohaku.tasks import registry
from kohaku.tasks.spec import SubmissionSpec, VoteSpec
from kohaku.voting import VoteConfig, vote_generations, with_ref_pages


def compute(ctx: StageContext) -> dict[str, pl.DataFrame]:
    spec: VoteSpec = ctx.config("task.vote")
    submission: SubmissionSpec = ctx.config("task.submission")
    grouping = registry.lookup("group", spec.group, "task.vote.group")(spec)
    writer = registry.lookup("writer", submission.writer, "task.submission.writer")
    never = ctx.config("task.answer.abstention") == "never"
    questions = ctx.table("questions", "questions")
    generations = ctx.table("infer", "generations")
    answers, summary = vote_generations(
        generations, questions, ctx.table("parse", "documents"),
        ctx.config("vote"), grouping, spec.keep_surface,
        ctx.config("task.answer.fallback") if never else None, ctx.config("task.answer.value"))
    if ctx.config("task.references") == "doc_page":   # the cited documents' pages in the context
        answers = with_ref_pages(answers, generations, ctx.table("retrieve", "contexts"),
                                 ctx.table("tree", "nodes"))
    writer(answers, questions, submission, ctx.out_dir / "submission.csv")
    ctx.report(**summary)
    return {"answers": answers}


STAGE = Stage(
    name="vote",
    version="1",
    # retrieve and tree: the pages of task.references=doc_page (infer's key holds them already)
    inputs=("questions", "infer", "parse", "retrieve", "tree"),
    config_keys=("vote", "task.vote", "task.answer.value", "task.answer.abstention", "task.answer.fallback",
                 "task.references",
                 "task.submission"),
    compute=compute,
    outputs=("answers",),
    configs={"vote": VoteConfig, "task.vote": VoteSpec, "task.submission": SubmissionSpec},
    run_dir_files=("submission.csv",),
)
