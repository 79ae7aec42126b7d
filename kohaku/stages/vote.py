"""vote stage: generations -> ``answers`` and ``submission.csv`` (kohaku.voting)."""

from __future__ import annotations

import polars as pl

from kohaku.stage import Stage, StageContext
from kohaku.submission import write_submission
from kohaku.voting import VoteConfig, vote_generations


def compute(ctx: StageContext) -> dict[str, pl.DataFrame]:
    answers, submission, summary = vote_generations(
        ctx.table("infer", "generations"), ctx.table("questions", "questions"),
        ctx.table("parse", "documents"), ctx.config("vote"))
    write_submission(submission, ctx.out_dir / "submission.csv")
    ctx.report(**summary)
    return {"answers": answers}


STAGE = Stage(
    name="vote",
    version="1",
    inputs=("questions", "infer", "parse"),
    config_keys=("vote",),
    compute=compute,
    outputs=("answers",),
    configs={"vote": VoteConfig},
    run_dir_files=("submission.csv",),
)
