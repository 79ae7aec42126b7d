"""questions stage: the questions file -> the ``questions`` table (kohaku.tasks.files.io.read_questions).

The file (CSV or JSON lines, as ``task.questions`` says) is named by ``corpus.questions`` (relative paths resolve against ``corpus.root`` when
the file is there, else against the working directory).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
from omegaconf import DictConfig

from kohaku.ingest.corpus import CorpusConfig, questions_file
from kohaku.runner.stage import Stage, StageContext
from kohaku.tasks.files.io import read_questions
from kohaku.tasks.spec import QuestionsSpec


def compute(ctx: StageContext) -> dict[str, pl.DataFrame]:
    path = questions_file(ctx.config("corpus"))
    warnings: list[str] = []
    questions = read_questions(path, ctx.config("task.questions"), warnings)
    ctx.log.info("%d questions from %s", questions.height, path)
    ctx.report(n_questions=questions.height, source=str(path), warnings=warnings)
    return {"questions": questions}


def question_files(cfg: DictConfig) -> list[Path]:
    """file_inputs: the questions CSV."""
    return [questions_file(STAGE.typed(cfg, "corpus"))]


STAGE = Stage(
    name="questions",
    version="1",
    inputs=(),
    config_keys=("corpus.questions", "task.questions"),
    compute=compute,
    file_inputs=question_files,
    outputs=("questions",),
    configs={"corpus": CorpusConfig, "task.questions": QuestionsSpec},
)
