"""Reading a task's question and solution files (CSV, JSON lines or a JSON array of objects) as
all-string tables.

A JSON file is JSON lines, one JSON array of objects, or one JSON object keyed by id (or by
question text, as some competitions write their gold): ``{"q1": {"answer": 42}, ...}`` (a row
per key, the key in the id column) or ``{"q1": 42, ...}`` (the value in the answer column).

Every cell becomes a string, as the CSV reader does (ids such as ``q003`` must not become
numbers): JSON numbers as written in the file, booleans ``true``/``false``, lists and objects as
compact JSON, null as ``""``. Errors name the file and the line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from kohaku.core import csvfile, readfile
from kohaku.core.cells import json_cell
from kohaku.core.errors import CorpusError, CorpusFileNotFound
from kohaku.tasks.spec import FORMATS, QuestionsSpec


def file_format(path: Path, declared: str | None) -> str:
    """``declared`` or the format the extension says (``.jsonl``/``.json`` -> jsonl, else csv);
    ``json`` is read as ``jsonl`` is (JSON lines or one JSON array of objects)."""
    if declared:
        return "jsonl" if declared == "json" else declared
    return "jsonl" if path.suffix.lower() in (".jsonl", ".json", ".ndjson") else "csv"


def _kind(value: Any) -> str:
    return {dict: "objects", list: "lists", str: "strings", bool: "booleans", type(None): "nulls"}.get(
        type(value), "numbers")


def _keyed(document: dict[str, Any], path: Path, what: str, key: str | None,
           value: str | None) -> list[tuple[str, Any]] | None:
    """The rows of one JSON object keyed by id (or by question text): ``{"q1": {...}, ...}``
    gives a row per key, the key in column ``key`` (unless the object has its own); ``{"q1":
    "42", ...}`` (values no objects, the file no one row: it lacks column ``key``) a row per key
    with the value in column ``value``. None: the object is one row (JSON lines of one line)."""
    values = list(document.values())
    if not values:
        raise CorpusError(f"{path}: {what} is an empty JSON object; expected rows: a JSON array of "
                          "objects, JSON lines, or an object keyed by id")
    shapes = sorted({_kind(v) for v in values})
    if shapes == ["objects"]:
        if key is None:
            raise CorpusError(f"{path}: {what} is a JSON object keyed by id, but no id column is "
                              "known to put the keys in")
        return [(f"key {k!r}", {key: k, **v}) for k, v in document.items()]
    if key is None or value is None or key in document:
        if "objects" in shapes:
            raise CorpusError(f"{path}: {what} is a JSON object whose values are {' and '.join(shapes)}; "
                              "expected a JSON array of objects, JSON lines, or an object keyed by id "
                              "whose values are all objects (or all answers)")
        return None
    if "objects" in shapes:
        raise CorpusError(f"{path}: {what} is a JSON object keyed by id whose values are "
                          f"{' and '.join(shapes)}; expected all objects (one row per key) or all "
                          f"answers (the key's {value!r})")
    return [(f"key {k!r}", {key: k, value: v}) for k, v in document.items()]


def _objects(path: Path, what: str, key: str | None = None,
             value: str | None = None) -> list[tuple[str, Any]]:
    """(where, object) of a JSON array of objects (the whole file starts with ``[``), of one
    JSON object keyed by id or by question text (:func:`_keyed`) or of JSON lines; errors name
    the file and the line or item, and the shape found."""
    text = readfile.read_text(path, what, CorpusError, CorpusFileNotFound)
    head = text.lstrip()[:1]
    if head == "{":
        try:
            document = readfile.load_json(text, path, what, CorpusError)
        except CorpusError:
            document = None     # JSON lines (several objects), each line read (and named) below
        if isinstance(document, dict):
            keyed = _keyed(document, path, what, key, value)
            if keyed is not None:
                return keyed
            return [("line 1", document)]
    elif head and head not in "[":
        try:
            found = readfile.load_json(text, path, what, CorpusError)
        except CorpusError:
            found = None
        if found is not None and not isinstance(found, (dict, list)):
            raise CorpusError(f"{path}: {what} is a JSON {_kind(found)[:-1]}; expected a JSON array of "
                              "objects, JSON lines, or an object keyed by id")
    if head == "[":
        items = readfile.load_json(text, path, what, CorpusError)
        if not isinstance(items, list):
            raise CorpusError(f"{path}: {what} is no JSON array of objects")
        return [(f"item {i}", obj) for i, obj in enumerate(items)]
    out = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        out.append((f"line {n}", readfile.load_json(
            line, path, what, CorpusError, where=f"line {n} of {what}",
            hint="; write one JSON object per line, or one JSON array of objects")))
    return out


def read_jsonl(path: Path, what: str, key: str | None = None, value: str | None = None) -> pl.DataFrame:
    """JSON lines (one object per line), one JSON array of objects, or one JSON object keyed by
    id or question text (the key in column ``key``; values that are answers in column
    ``value``) -> all-string columns (first-seen column order)."""
    if not path.is_file():
        raise CorpusFileNotFound(f"{path}: {what} file not found; check the path (or the corpus "
                                 "config: corpus.root and the file's key)")
    rows: list[dict[str, str]] = []
    columns: dict[str, None] = {}
    for where, obj in _objects(path, what, key, value):
        if not isinstance(obj, dict):
            raise CorpusError(f"{path}: {where} of {what} is a JSON {type(obj).__name__}, "
                              "not an object; expected an array of objects, JSON lines of objects, "
                              "or an object keyed by id")
        row = {str(k): json_cell(v) for k, v in obj.items()}
        columns.update(dict.fromkeys(row))
        rows.append(row)
    if not rows:
        raise CorpusError(f"{path}: {what} file is empty")
    cols = list(columns)
    df = pl.DataFrame([[r.get(c, "") for c in cols] for r in rows], schema={c: pl.String for c in cols},
                      orient="row")
    readfile.check_cells(df, path, what, CorpusError)
    return df


def read_rows(path: str | Path, fmt: str | None, what: str, warnings: list[str] | None = None,
              skip_blank_lines: bool = False, key: str | None = None,
              value: str | None = None) -> pl.DataFrame:
    """A questions or solutions file of format ``fmt`` (csv | jsonl | None: by extension); a
    JSON object keyed by id puts its keys in column ``key`` (:func:`read_jsonl`)."""
    path = Path(path)
    fmt = file_format(path, fmt)
    if fmt not in FORMATS:
        raise CorpusError(f"{path}: unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    if fmt == "jsonl":
        return read_jsonl(path, what, key, value)
    return csvfile.read_csv_strings(path, what, CorpusError, warnings, CorpusFileNotFound,
                                    skip_blank_lines=skip_blank_lines)


def read_questions(path: str | Path, spec: QuestionsSpec | None = None,
                   warnings: list[str] | None = None) -> pl.DataFrame:
    """The questions file as ``qid``, ``question``, the task's prompt fields, then the other
    columns, all strings. The id, question and field columns must exist (the error names the
    file and the task key); ids must be unique and questions non-empty (the error names the row).
    ``spec`` None: the default ``QuestionsSpec`` (the default task's questions CSV: qid from ``id``,
    question, answer_unit). Encoding problems are logged and appended to ``warnings``."""
    path = Path(path)
    spec = spec or QuestionsSpec()
    df = read_rows(path, spec.format, "questions", warnings)
    missing = [c for c in (spec.id, spec.question, *spec.fields) if c not in df.columns]
    if missing:
        keys = {spec.id: "task.questions.id", spec.question: "task.questions.question"}
        named = ", ".join(f"{keys.get(c, 'task.questions.fields')}: '{c}'" for c in missing)
        raise CorpusError(f"{path}: questions lacks column(s) {missing}; found {df.columns}. The task "
                          f"names them ({named}): fix the file or the task's questions section")
    clash = [c for c in ("qid", "question") if c in df.columns and c not in (spec.id, spec.question)]
    if clash:
        raise CorpusError(f"{path}: column(s) {clash} would clash with the question id/text kohaku "
                          f"names qid/question (task.questions.id={spec.id!r}, question={spec.question!r}); "
                          "rename them in the file")
    df = df.with_columns(pl.col(spec.id).str.strip_chars())
    csvfile.check_ids(df, str(path), "questions", CorpusError, spec.id)
    for i, q in enumerate(df[spec.question].to_list(), start=1):
        if q.strip() == "":
            raise CorpusError(f"{path}: row {i} (id '{df[spec.id][i - 1]}') has an empty question; "
                              f"write the question or delete the row (column '{spec.question}')")
    df = df.rename({spec.id: "qid", spec.question: "question"})
    head = ["qid", "question", *[f for f in dict.fromkeys(spec.fields) if f not in ("qid", "question")]]
    return df.select(*head, *[c for c in df.columns if c not in head])
