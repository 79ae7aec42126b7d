"""questions: the questions CSV -> the ``questions`` table.

Columns: qid (the CSV's ``id``), question, answer_unit and every other column of the CSV, all as
strings. The CSV is named by ``corpus.questions`` (relative paths resolve against
``corpus.root`` when the file is there, else against the working directory).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
from omegaconf import DictConfig, OmegaConf

from kohaku.config import ConfigError
from kohaku.corpus import read_questions, resolve_against_root
from kohaku.stage import Stage, StageContext


def questions_path(cfg: DictConfig) -> Path:
    value = OmegaConf.select(cfg, "corpus.questions", default=None)
    root = OmegaConf.select(cfg, "corpus.root", default=None) or "."
    path = resolve_against_root(Path(str(root)), value)
    if path is None:
        raise ConfigError("config key 'corpus.questions' is not set; give the questions CSV path")
    if not path.is_file():
        raise ConfigError(
            f"{path}: questions file not found (config key corpus.questions); fix the path, "
            "e.g. corpus.questions=test_Q.csv"
        )
    return path


def question_files(cfg: DictConfig) -> list[Path]:
    """file_inputs: the questions CSV."""
    return [questions_path(cfg)]


def compute(ctx: StageContext) -> dict[str, pl.DataFrame]:
    path = questions_path(ctx.cfg)
    warnings: list[str] = []
    questions = read_questions(path, warnings)
    ctx.log.info("%d questions from %s", questions.height, path)
    ctx.report(n_questions=questions.height, source=str(path), warnings=warnings)
    return {"questions": questions}


STAGE = Stage(
    name="questions",
    version="1",
    inputs=(),
    config_keys=("corpus.questions",),
    compute=compute,
    file_inputs=question_files,
    outputs=("questions",),
)
