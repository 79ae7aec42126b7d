"""Readers for the corpus description files: metadata.csv, questions and solutions CSVs.

Every column is read as a string (ids such as ``q003`` or years must not become numbers), a
UTF-8 byte-order mark is accepted, and each problem is reported with the file and the row at
fault (row numbers count data rows from 1, as a spreadsheet shows them below the header).
"""

from __future__ import annotations

import io
import logging
import re
from dataclasses import dataclass
from pathlib import Path

import polars as pl

METADATA_COLUMNS = ("id", "type", "title", "year", "citation", "url")
QUESTION_COLUMNS = ("id", "question", "answer_unit")
SOLUTION_COLUMNS = ("id", "answer_value", "ref_id")

log = logging.getLogger(__name__)


class CorpusError(ValueError):
    """A corpus file is missing, unreadable or malformed; the message names file and row."""


@dataclass
class CorpusConfig:
    """The ``corpus`` config group.

    root:      folder with metadata.csv and the documents (pdfs/, corpus/, docs/, or loose files).
    metadata:  metadata CSV, relative to root.
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


def _read_csv_strings(path: Path, what: str, warnings: list[str] | None = None) -> pl.DataFrame:
    path = Path(path)
    if not path.exists():
        raise CorpusError(f"{path}: {what} file not found; check the corpus config (corpus.root / the path)")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        # Spreadsheet exports are often cp1252, sometimes mixed with UTF-8 cells: keep valid
        # UTF-8 sequences and read the stray bytes as cp1252.
        text = _decode_mixed(raw)
        message = (
            f"{path}: {what} is not valid UTF-8 ({exc.reason} at byte {exc.start}); stray bytes "
            "read as cp1252 (save the file as UTF-8 to silence this)"
        )
        log.warning("%s", message)
        if warnings is not None:
            warnings.append(message)
    if not text.strip():
        raise CorpusError(f"{path}: {what} file is empty")
    try:
        df = pl.read_csv(
            io.BytesIO(text.replace("\r\n", "\n").encode("utf-8")),
            infer_schema=False,
            empty_string_is_null=False,
        )
    except Exception as exc:  # polars raises ComputeError and friends for malformed CSV
        raise CorpusError(f"{path}: cannot parse {what} as CSV: {exc}") from exc
    names = [c.strip() for c in df.columns]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise CorpusError(f"{path}: duplicate column name(s) {duplicated} in the {what} header; rename them")
    df = df.rename(dict(zip(df.columns, names)))
    return df.with_columns(pl.col(c).fill_null("") for c in df.columns)


def _decode_mixed(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="surrogateescape")
    if text.startswith("\ufeff"):
        text = text[1:]
    return re.sub(
        "[\udc80-\udcff]",
        lambda m: bytes([ord(m.group()) - 0xDC00]).decode("cp1252", errors="replace"),
        text,
    )


def _require_columns(df: pl.DataFrame, required: tuple[str, ...], path: Path, what: str) -> None:
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise CorpusError(
            f"{path}: {what} lacks column(s) {missing}; found {df.columns}. "
            f"Expected at least {list(required)}."
        )


def _check_ids(df: pl.DataFrame, col: str, path: Path, what: str) -> None:
    ids = df[col].to_list()
    for i, value in enumerate(ids, start=1):
        if value.strip() == "":
            raise CorpusError(f"{path}: row {i} of {what} has an empty '{col}'; give every row an id")
    seen: dict[str, int] = {}
    for i, value in enumerate(ids, start=1):
        key = value.strip()
        if key in seen:
            raise CorpusError(
                f"{path}: duplicate {col} '{key}' in rows {seen[key]} and {i} of {what}; ids must be unique"
            )
        seen[key] = i


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
    df = _read_csv_strings(path, "metadata", warnings)
    _require_columns(df, METADATA_COLUMNS, path, "metadata")
    df = df.with_columns(pl.col(c).str.strip_chars() for c in METADATA_COLUMNS)
    _check_ids(df, "id", path, "metadata")
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


def read_questions(path: str | Path, warnings: list[str] | None = None) -> pl.DataFrame:
    """Questions CSV as qid (from ``id``), question, answer_unit and the other columns, all str.

    Encoding problems are logged and appended to ``warnings``."""
    path = Path(path)
    df = _read_csv_strings(path, "questions", warnings)
    _require_columns(df, QUESTION_COLUMNS, path, "questions")
    df = df.with_columns(pl.col("id").str.strip_chars())
    _check_ids(df, "id", path, "questions")
    for i, q in enumerate(df["question"].to_list(), start=1):
        if q.strip() == "":
            raise CorpusError(
                f"{path}: row {i} (id '{df['id'][i - 1]}') has an empty question; write the "
                "question or delete the row"
            )
    df = df.rename({"id": "qid"})
    rest = [c for c in df.columns if c not in ("qid", "question", "answer_unit")]
    return df.select("qid", "question", "answer_unit", *rest)


def read_solutions(path: str | Path) -> pl.DataFrame:
    """Solutions CSV as qid (from ``id``), answer_value, ref_id and the other columns, all str."""
    path = Path(path)
    df = _read_csv_strings(path, "solutions")
    _require_columns(df, SOLUTION_COLUMNS, path, "solutions")
    df = df.with_columns(pl.col("id").str.strip_chars())
    _check_ids(df, "id", path, "solutions")
    df = df.rename({"id": "qid"})
    rest = [c for c in df.columns if c not in ("qid", "answer_value", "ref_id")]
    return df.select("qid", "answer_value", "ref_id", *rest)
