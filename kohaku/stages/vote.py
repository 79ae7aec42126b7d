"""vote stage: generations -> ``answers`` and ``submission.csv`` (kohaku.answer.voting, the task's
grouping and submission writer; with answer kinds each question's grouping, typed value and
cited pages from kohaku.tasks.kinds, references as objects from kohaku.tasks.files.documents)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
from omegaconf import DictConfig

from kohaku.ingest.corpus import resolve_against_root
from kohaku.runner.stage import Stage, StageContext, plain
from kohaku.tasks.files import documents
from kohaku.tasks import kinds
from kohaku.tasks.named import registry
from kohaku.tasks.spec import KindsSpec, SubmissionSpec, VoteSpec
from kohaku.answer.voting import VoteConfig, task_vote, vote_generations, with_ref_pages


def compute(ctx: StageContext) -> dict[str, pl.DataFrame]:
    spec: VoteSpec = ctx.config("task.vote")
    submission: SubmissionSpec = ctx.config("task.submission")
    answer_kinds: KindsSpec = ctx.config("task.answer.kinds")
    writer = registry.lookup("writer", submission.writer, "task.submission.writer")
    questions = ctx.table("questions", "questions")
    generations = ctx.table("infer", "generations")
    how = task_vote(spec, answer_kinds, questions, ctx.config("task.answer.abstention"),
                    ctx.config("task.answer.fallback"))
    answers, summary = vote_generations(
        generations, questions, ctx.table("parse", "documents"),
        ctx.config("vote"), how.grouping, how.keep_surface, how.fallback, ctx.config("task.answer.value"),
        by_qid=how.by_qid)
    if ctx.config("task.references") == "doc_page":   # the cited documents' pages in the context
        answers = with_ref_pages(answers, generations, ctx.table("retrieve", "contexts"),
                                 ctx.table("tree", "nodes"))
    answers = kinds.limit_pages(kinds.with_kinds(answers, questions, answer_kinds), answer_kinds)
    if submission.reference:
        table = None
        if documents.metadata_columns(submission):
            table = documents.read_reference_table(reference_file(ctx.cfg), submission)
        answers = documents.with_references(answers, table, submission)
    writer(answers, questions, submission, ctx.out_dir / "submission.csv")
    ctx.report(**summary)
    return {"answers": answers}


def reference_file(cfg: DictConfig) -> Path:
    """The reference table: ``task.submission.metadata`` under ``corpus.root``, else the corpus
    metadata file."""
    name = plain(cfg, "task.submission.metadata") or plain(cfg, "corpus.metadata")
    return resolve_against_root(Path(str(plain(cfg, "corpus.root"))).expanduser(), name)  # type: ignore[return-value]


def files(cfg: DictConfig) -> list[Path]:
    """file_inputs: the reference table, where the references use its columns (the schema file
    only refuses or passes a submission: no output depends on it, so it is not hashed)."""
    sub: SubmissionSpec = STAGE.typed(cfg, "task.submission")
    return [reference_file(cfg)] if sub.reference and documents.metadata_columns(sub) else []


STAGE = Stage(
    name="vote",
    version="2",   # 2: answers rendered by kind with keep_surface; CSV pages from submission.page_base
    # retrieve and tree: the pages of task.references=doc_page (infer's key holds them already)
    inputs=("questions", "infer", "parse", "retrieve", "tree"),
    config_keys=("vote", "task.vote", "task.answer.value", "task.answer.abstention", "task.answer.fallback",
                 "task.answer.kinds", "task.references", "task.submission"),
    compute=compute,
    file_inputs=files,
    outputs=("answers",),
    configs={"vote": VoteConfig, "task.vote": VoteSpec, "task.submission": SubmissionSpec,
             "task.answer.kinds": KindsSpec},
    run_dir_files=("submission.csv", "submission.json"),
)
