"""Reading a task's submission files, in whatever format its writer writes them.

A task's writer writes a flat CSV (``submission.columns``: output column -> source) and, with
``submission.writer: json``, a JSON document of answer objects (kohaku.tasks.files.documents). The
scripts that score, compare and ensemble submissions read either: :func:`read_submission` gives
the flat table of ``submission.columns`` for both, so a metric reads the same cells from the CSV
and from the JSON document of one run.

The format is the one given (``csv`` | ``json``) or detected: a ``.json`` file, or a file whose
first non-space character is ``{`` or ``[``, is a JSON document; anything else is CSV. A JSON
document is an object holding the answer objects under ``submission.answers_key`` (or a bare list
of answer objects). Each flat column is read from the answer object's key with the same source
(``submission.answer``: key -> source); where the document writes a typed value or reference
objects instead:

- ``value`` from ``typed_value``: the typed value written as the CSV writes it (with answer
  kinds the kind's rendering: ``True``/``False`` from ``true``/``false``, ``7`` from ``7.0``, a
  list in ``answer.kinds.list_format``, the not-answerable token as itself; without kinds the
  value's text), kohaku.tasks.kinds.render;
- ``ref_pages`` from ``references``: one ``doc:page`` per reference object, the document as the
  object names it (its ``doc_id`` key, else its first key that is not the page) and the page as
  written (counted from ``submission.page_base``);
- ``refs`` from ``references``: the documents of the reference objects.

A null value is the writer's blank cell. Errors name the file and the answer (its position and id).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from kohaku.core import csvfile, readfile
from kohaku.core.errors import SubmissionError
from kohaku.tasks.spec import SubmissionSpec, Task

FORMATS = ("csv", "json")


@dataclass
class SubmissionFile:
    """One submission file, read: ``rows`` are the flat table (string cells; the task's
    ``submission.columns`` for a JSON document, the file's own columns for a CSV); a JSON
    document also keeps its ``objects`` (the answer objects, in ``rows`` order) and its other
    top-level keys (``header``)."""

    path: Path
    format: str
    rows: pl.DataFrame
    objects: list[dict[str, Any]] | None = None
    header: dict[str, Any] = field(default_factory=dict)


def detect_format(path: str | Path, given: str | None = None) -> str:
    """``given``, else ``json`` for a ``.json`` file or one that starts with ``{`` or ``[``, else
    ``csv``. Raises FileNotFoundError naming the file."""
    path = Path(path)
    if given is not None:
        if given not in FORMATS:
            raise SubmissionError(f"submission format {given!r}; use one of {', '.join(FORMATS)}")
        return given
    if not path.is_file():
        raise FileNotFoundError(f"{path}: submission file not found")
    if path.suffix.lower() == ".json":
        return "json"
    return "json" if readfile.first_char(path) in ("{", "[") else "csv"


def _is_token(text: str, kinds: Any) -> bool:
    token = kinds.not_answerable
    return token is not None and text.strip().lower() == token.strip().lower()


def _key_of(mapping: dict[str, str], source: str) -> str | None:
    return next((k for k, s in mapping.items() if s == source), None)


def _text(value: Any, spec: SubmissionSpec) -> str:
    """A JSON value as the columns writer writes a cell."""
    from kohaku.tasks.kinds import list_cell, value_text

    if value is None:
        return spec.blank
    if isinstance(value, list):
        return list_cell([value_text(v) for v in value], spec.list_format) if value else spec.blank
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = value_text(value)
    return text if text.strip() else spec.blank


class _Reader:
    """Turns a task's answer objects into its flat rows (see the module doc)."""

    def __init__(self, task: Task, kinds_by_qid: dict[str, str] | None):
        spec = task.submission
        self.task, self.spec = task, spec
        self.kinds_by_qid = kinds_by_qid or {}
        self.keys = {source: _key_of(spec.answer, source) for source in set(spec.answer.values())}
        ref = spec.reference
        self.page_key = _key_of(ref, "page")
        self.doc_key = _key_of(ref, "doc_id") or next((k for k in ref if k != self.page_key), None)
        kinds = task.answer.kinds   # built once: KindsSpec.specs builds its specs on every call
        self.kind_specs = kinds.specs if kinds.enabled else {}
        self.parsers: dict[str, Any] = {}

    def _kind(self, obj: dict[str, Any], qid: str) -> str | None:
        key = self.keys.get("kind")
        name = obj.get(key) if key else None
        return str(name) if name else self.kinds_by_qid.get(qid)

    def _value(self, typed: Any, obj: dict[str, Any], qid: str) -> str:
        from kohaku.tasks.kinds import parser, render, value_text

        if typed is None or typed == [] or (isinstance(typed, str) and not typed.strip()):
            return self.spec.blank      # an empty value ("value": [], "", null), of any kind
        kinds = self.task.answer.kinds
        name = self._kind(obj, qid) if kinds.enabled else None
        if name is None or name not in self.kind_specs:
            return _text(typed, self.spec)
        kind, raw = self.kind_specs[name], value_text(typed)
        if isinstance(typed, str) and (kind.strict or not kind.list_text or kind.delimiter is not None):
            # a string read as strictly as the kind says (answer.kinds.types.<kind>): a strict
            # number kept as written (its metric reads it with float()); a names string split
            # on the delimiter, a list-looking string a list only with list_text
            from kohaku.tasks.kinds import list_cell, parse_names

            if kind.type == "number" and kind.strict:
                return typed.strip() or self.spec.blank
            if kind.type == "names" and not _is_token(typed, kinds):
                items = parse_names(typed, kind.delimiter, kind.list_text)
                return list_cell(items, kinds.list_format) if items else self.spec.blank
        if name not in self.parsers:
            self.parsers[name] = parser(kind, kinds)
        return render(kind, kinds, self.parsers[name](raw), raw) or self.spec.blank

    def _references(self, obj: dict[str, Any], where: str) -> list[tuple[str, Any]]:
        refs = obj.get(self.keys["references"]) or []
        if not isinstance(refs, list) or not all(isinstance(r, dict) for r in refs):
            raise SubmissionError(f"{where}: {self.keys['references']!r} is not a list of reference "
                                  f"objects ({self.spec.reference})")
        return [(str(r.get(self.doc_key, "")) if self.doc_key else "", r.get(self.page_key)) for r in refs]

    def row(self, obj: dict[str, Any], where: str) -> dict[str, str]:
        qid = str(obj.get(self.keys["qid"]) or "").strip() if self.keys.get("qid") else ""
        out: dict[str, str] = {}
        for column, source in self.spec.columns.items():
            key = self.keys.get(source)
            if key is not None and key in obj:
                out[column] = _text(obj[key], self.spec)
            elif source == "value" and self.keys.get("typed_value") in obj:
                out[column] = self._value(obj[self.keys["typed_value"]], obj, qid)
            elif source in ("ref_pages", "refs") and self.keys.get("references") in obj:
                refs = self._references(obj, where)
                items = ([f"{d}:{p}" if d else str(p) for d, p in refs] if source == "ref_pages"
                         else list(dict.fromkeys(d for d, _ in refs if d)))
                out[column] = _text(items, self.spec)
        return out


def answer_objects(document: Any, spec: SubmissionSpec, path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(answer objects, the document's other top-level keys) of a submission document."""
    if isinstance(document, list):
        items, header = document, {}
    elif isinstance(document, dict) and isinstance(document.get(spec.answers_key), list):
        items = document[spec.answers_key]
        header = {k: v for k, v in document.items() if k != spec.answers_key}
    else:
        found = list(document) if isinstance(document, dict) else type(document).__name__
        raise SubmissionError(f"{path}: no list of answers under {spec.answers_key!r} "
                              f"(task.submission.answers_key); the document has {found}")
    for i, obj in enumerate(items, start=1):
        if not isinstance(obj, dict):
            raise SubmissionError(f"{path}: answer {i} is a JSON {type(obj).__name__}, not an object")
    return items, header


def read_submission(path: str | Path, task: Task, fmt: str | None = None,
                    kinds_by_qid: dict[str, str] | None = None) -> SubmissionFile:
    """A submission file of ``task`` (CSV, or its JSON writer's document; ``fmt`` or detected).
    ``kinds_by_qid`` (qid -> answer kind) renders typed values of a document whose answers do not
    name their kind. Raises FileNotFoundError / SubmissionError naming the file."""
    path = Path(path)
    fmt = detect_format(path, fmt)
    if task.submission.shape and fmt == "json":   # the competition's own JSON (kohaku.tasks.files.shapes)
        from kohaku.tasks.files.shapes import read_shaped_submission

        return SubmissionFile(path, "json", read_shaped_submission(path, task.submission.shape))
    if fmt == "csv":
        return SubmissionFile(path, "csv", csvfile.read_csv_strings(path, "submission", SubmissionError,
                                                                    skip_blank_lines=True))
    spec = task.submission
    if not spec.answer:
        raise SubmissionError(f"{path} is a JSON document, but task {task.name} writes no JSON "
                              "(task.submission.answer is empty): give its CSV, or a task whose "
                              "writer is json")
    text = readfile.read_text(path, "submission", SubmissionError, FileNotFoundError)
    document = readfile.load_json(text, path, "submission", SubmissionError)
    items, header = answer_objects(document, spec, path)
    reader = _Reader(task, kinds_by_qid)
    rows = [reader.row(obj, f"{path}: answer {i}") for i, obj in enumerate(items, start=1)]
    columns = [c for c in spec.columns if any(c in r for r in rows)] or list(spec.columns)
    df = pl.DataFrame([{c: r.get(c, spec.blank) for c in columns} for r in rows],
                      schema={c: pl.String for c in columns})
    readfile.check_cells(df, path, "submission", SubmissionError)
    return SubmissionFile(path, "json", df, items, header)


def require_csv(path: str | Path, reader: str) -> Path:
    """``path``, refused with an error naming it when it is a JSON document (``reader`` reads
    only CSV: the default task's scorer and ensemble)."""
    if detect_format(path) == "json":
        raise SubmissionError(f"{path} is a JSON document; {reader} reads the default task's CSV: "
                              "give --task with the task whose writer wrote it")
    return Path(path)
