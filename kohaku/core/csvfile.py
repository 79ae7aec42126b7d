"""Reading CSV files as strings, with errors that name the file, row and column.

One reader for every CSV kohaku reads (metadata, questions, solutions, submissions): every
column a string (ids such as ``q003`` or years must not become numbers), the bytes decoded by
kohaku.core.readfile (a byte-order mark's encoding: UTF-8, UTF-16 or UTF-32; else UTF-8 with
stray bytes read as cp1252 and a warning; binary data, files and cells over the size limits
refused naming the place), header names stripped, nulls as ``""``. Row numbers count data rows from 1, as a spreadsheet shows them below the header.
Cells are kept as written, spaces included (an answer cell is not stripped); the readers of
ids (questions, solutions, metadata, submissions) strip the id cells.
"""

from __future__ import annotations

import io
from collections import Counter
import logging
from pathlib import Path
from typing import Iterable

import polars as pl

from kohaku.core import readfile
from kohaku.core.errors import KohakuError

log = logging.getLogger("kohaku.csv")


class CsvFileNotFound(KohakuError, FileNotFoundError):
    """A CSV file named by the user does not exist."""


def read_csv_strings(path: str | Path, what: str, error: type[KohakuError],
                     warnings: list[str] | None = None,
                     not_found: type[FileNotFoundError] = CsvFileNotFound,
                     skip_blank_lines: bool = False) -> pl.DataFrame:
    """The CSV at ``path`` (``what`` names it in messages); problems raise ``error``, a missing
    file ``not_found`` (a FileNotFoundError), both naming the file. ``skip_blank_lines`` drops
    lines with no cell at all (as pandas, and so the competition's scorers, do)."""
    path = Path(path)
    if not path.is_file():
        raise not_found(f"{path}: {what} file not found; check the path (or the corpus "
                                "config: corpus.root and the file's key)")
    # bytes -> text: a byte-order mark's encoding, else UTF-8 with stray bytes read as cp1252
    # (spreadsheet exports often are cp1252, sometimes mixed with UTF-8 cells); binary data,
    # a file over the size limit: a named error (kohaku.core.readfile)
    text = readfile.read_text(path, what, error, not_found, fallback="cp1252", warnings=warnings)
    if not text.strip():
        raise error(f"{path}: {what} file is empty")
    try:
        df = pl.read_csv(
            io.BytesIO(text.replace("\r\n", "\n").encode("utf-8")),
            infer_schema=False,
            empty_string_is_null=skip_blank_lines,
        )
    except (Exception, pl.exceptions.PanicException) as exc:  # ComputeError and friends for malformed CSV
        raise error(f"{path}: cannot parse {what} as CSV ({str(exc)[:300]}); check quoting and that "
                    "every row has as many fields as the header") from exc
    names = [c.lstrip("\ufeff").strip() for c in df.columns]
    counts = Counter(names)
    duplicated = sorted(n for n, k in counts.items() if k > 1)
    if duplicated:
        raise error(f"{path}: duplicate column name(s) {duplicated} in the {what} header; rename them")
    df = df.rename(dict(zip(df.columns, names)))
    readfile.check_cells(df, path, what, error)
    if skip_blank_lines and df.width:  # a blank line reads as a row of nulls
        df = df.filter(~pl.all_horizontal(pl.all().is_null()))
    return df.with_columns(pl.col(c).fill_null("") for c in df.columns)


def require_columns(df: pl.DataFrame, columns: Iterable[str], label: str, what: str,
                    error: type[KohakuError]) -> None:
    """``label`` names the file (its path, or a short name such as ``submission``)."""
    required = list(columns)
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise error(f"{label}: {what} lacks column(s) {missing}; found {df.columns}. "
                    f"Expected at least {required}.")


def check_ids(df: pl.DataFrame, label: str, what: str, error: type[KohakuError],
              column: str = "id") -> None:
    """Every row has a non-empty, unique ``column``; errors name the file and the rows
    (1-based data rows)."""
    seen: dict[str, int] = {}
    for i, raw in enumerate(df[column].to_list(), start=1):
        key = (raw or "").strip()
        if not key:
            raise error(f"{label}: row {i} of {what} has an empty '{column}'; give every row an id")
        if key in seen:
            raise error(f"{label}: duplicate {column} '{key}' in rows {seen[key]} and {i} of {what}; "
                        "ids must be unique")
        seen[key] = i
