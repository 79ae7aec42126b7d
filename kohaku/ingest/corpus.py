"""Readers for the corpus description files: metadata.csv, questions and solutions CSVs.

Every column is read as a string (ids such as ``q003`` or years must not become numbers), a
UTF-8 byte-order mark is accepted, and each problem is reported with the file and the row at
fault (row numbers count data rows from 1, as a spreadsheet shows them below the header).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from kohaku.core.config import ConfigError, ConfigFileNotFound
from kohaku.core.csvfile import check_ids, read_csv_strings, require_columns
from kohaku.core.errors import CorpusError, CorpusFileNotFound  # noqa: F401 - raised and re-exported here

METADATA_COLUMNS = ("id", "type", "title", "year", "citation", "url")
SOLUTION_COLUMNS = ("id", "answer_value", "ref_id")

log = logging.getLogger(__name__)


@dataclass
class CorpusConfig:
    """The ``corpus`` config group.

    root:      folder with metadata.csv and the documents (pdfs/, corpus/, docs/, or loose files).
    metadata:  metadata CSV (id,type,title,year,citation,url), relative to root.
    questions: questions CSV; a relative path resolves against root when the file exists
               there, else against the working directory.
    solutions: answers CSV for scoring (same resolution), or null when there are none.
    name:      short label used in reports.
    """

    root: str = "data/sample"
    metadata: str = "metadata.csv"
    questions: str | None = "questions.csv"
    solutions: str | None = None
    name: str = "sample"

    @property
    def root_path(self) -> Path:
        return Path(self.root).expanduser()

    @property
    def metadata_path(self) -> Path:
        path = Path(self.metadata).expanduser()
        return path if path.is_absolute() else self.root_path / path

    @property
    def questions_path(self) -> Path | None:
        return resolve_against_root(self.root_path, self.questions)

    @property
    def solutions_path(self) -> Path | None:
        return resolve_against_root(self.root_path, self.solutions)


def resolve_against_root(root: Path, value: str | None) -> Path | None:
    """``value`` as a path: absolute as is; relative under ``root`` when it exists there, else
    relative to the working directory (so ``corpus.questions=my/file.csv`` works from the shell)."""
    if value is None or str(value).strip() == "":
        return None
    path = Path(str(value)).expanduser()
    if path.is_absolute():
        return path
    under_root = root / path
    if under_root.exists() or not path.exists():
        return under_root
    return path


def questions_file(corpus: CorpusConfig) -> Path:
    """The questions CSV named by ``corpus.questions``; fails naming the key when it is unset
    or missing."""
    path = corpus.questions_path
    if path is None:
        raise ConfigError("config key 'corpus.questions' is not set; give the questions CSV path")
    if not path.is_file():
        raise ConfigFileNotFound(
            f"{path}: questions file not found (config key corpus.questions); fix the path, "
            "e.g. corpus.questions=test_Q.csv"
        )
    return path


def solutions_file(corpus: CorpusConfig, must_exist: bool = True) -> Path | None:
    """The solutions CSV named by ``corpus.solutions`` (None when null or unset)."""
    path = corpus.solutions_path
    if path is not None and must_exist and not path.is_file():
        raise ConfigFileNotFound(
            f"{path}: solutions file not found (config key corpus.solutions); "
            "fix the path or set corpus.solutions=null"
        )
    return path


# A document id becomes a file name (<id>.pdf), the head of node ids (<id>#s1.p2), a
# [ref_id=<id>] marker in prompts and an item of ['a','b'] ref lists: no path separators,
# brackets, quotes, commas, '#', spaces or leading dots.
_SAFE_DOC_ID = re.compile(r"\w[\w.+-]*")


def check_doc_id(doc_id: str) -> str | None:
    """Why ``doc_id`` is not usable as a document id, or None when it is."""
    if not _SAFE_DOC_ID.fullmatch(doc_id):
        bad = sorted({c for c in doc_id if not re.fullmatch(r"[\w.+-]", c)})
        if doc_id.startswith((".", "-", "+")) and not bad:
            return "starts with '.', '-' or '+'"
        return "contains " + ", ".join(repr(c) for c in bad)
    if ".." in doc_id:
        return "contains '..'"
    return None


def read_metadata(path: str | Path, warnings: list[str] | None = None) -> pl.DataFrame:
    """metadata.csv as (id, type, title, year, citation, url, ...) strings, ids stripped.

    Ids must be unique and safe as file names (letters, digits, ``_ . + -``; see
    :func:`check_doc_id`), so a row such as ``../evil`` can never reach outside the corpus.
    Encoding problems are logged and appended to ``warnings``.
    """
    path = Path(path)
    df = read_csv_strings(path, "metadata", CorpusError, warnings, CorpusFileNotFound)
    require_columns(df, METADATA_COLUMNS, str(path), "metadata", CorpusError)
    df = df.with_columns(pl.col(c).str.strip_chars() for c in METADATA_COLUMNS)
    check_ids(df, str(path), "metadata", CorpusError)
    for i, doc_id in enumerate(df["id"].to_list(), start=1):
        reason = check_doc_id(doc_id)
        if reason:
            raise CorpusError(
                f"{path}: row {i} of metadata has id {doc_id!r}, which {reason}; document ids may "
                "use only letters, digits, '_', '.', '+' and '-' (not first, no '..'); rename the "
                "id and its file"
            )
    rest = [c for c in df.columns if c not in METADATA_COLUMNS]
    return df.select(*METADATA_COLUMNS, *rest)


def read_solutions(path: str | Path) -> pl.DataFrame:
    """Solutions CSV as qid (from ``id``), answer_value, ref_id and the other columns, all str."""
    path = Path(path)
    df = read_csv_strings(path, "solutions", CorpusError, None, CorpusFileNotFound)
    require_columns(df, SOLUTION_COLUMNS, str(path), "solutions", CorpusError)
    df = df.with_columns(pl.col("id").str.strip_chars())
    check_ids(df, str(path), "solutions", CorpusError)
    df = df.rename({"id": "qid"})
    rest = [c for c in df.columns if c not in ("qid", "answer_value", "ref_id")]
    return df.select("qid", "answer_value", "ref_id", *rest)
