"""Reading a competition's own JSON files as they come: records nested inside a document, or
objects keyed by question id (``solutions.shape``, ``submission.shape``).

A competition whose scorer reads its own JSON (TAT-QA's gold is a list of contexts each holding
its ``questions``; its predictions are ``{uid: [answer, scale]}``; HotpotQA's predictions are
``{"answer": {id: text}, "sp": {id: facts}}``) is read into kohaku's flat table without
converting the files:

- ``records``: the path of the list of record objects, keys joined by dots, ``*`` for every
  item of a list: ``"*.questions"`` (each item's ``questions``), ``data`` (the list under
  ``data``), ``""`` (the document is the list). Each record is a row, its keys the columns.
- ``keyed``: where the document maps question ids to values: location (dotted keys, ``""`` the
  document itself) -> the column names its values fill. One name takes the whole value; several
  name the items of a list value (``[answer, scale]`` for ``[["a", "b"], "million"]``) or the
  keys of an object value. Several locations are joined by id (``{answer: [answer], sp: [sp]}``).
  The id column is ``id`` (``shape.id``).

Every cell is a string as kohaku's readers make them (kohaku.tasks.files.io: strings as they are,
numbers as written, lists and objects as compact JSON, null empty); the record as it was in the
file is kept, as JSON, in the column :data:`ORIGINAL`, so an adopted scorer
(kohaku.tasks.score.adopted) gets the values with their JSON types. Errors name the file and where.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from kohaku.core.cells import json_cell
from kohaku.core.config import ConfigError
from kohaku.core.errors import CorpusError, CorpusFileNotFound

#: the column that keeps each record as the file had it (compact JSON)
ORIGINAL = "__json__"


@dataclass
class JsonShape:
    """``solutions.shape`` / ``submission.shape``: where the rows are in a JSON document (module doc)."""

    records: str | None = None        # dotted path of the list of records ("*" every item); null: keyed
    keyed: dict[str, list[str]] = field(default_factory=dict)   # location -> columns of its values
    id: str = "id"                    # keyed: the column of the question id

    @property
    def enabled(self) -> bool:
        return self.records is not None or bool(self.keyed)

    def validate(self) -> None:
        if self.records is not None and self.keyed:
            raise ConfigError("give records (a list of record objects) or keyed (objects keyed by "
                              "id), not both")
        for where, columns in self.keyed.items():
            if not isinstance(columns, list) or not columns or not all(isinstance(c, str) for c in columns):
                name = where or "(the document)"
                raise ConfigError(f"keyed.{name}: give the list of column names its values fill")


def _walk(node: Any, parts: list[str], path: Path, seen: str) -> list[Any]:
    if not parts:
        return [node]
    head, rest = parts[0], parts[1:]
    if head == "*":
        if not isinstance(node, list):
            raise CorpusError(f"{path}: {seen or 'the document'} is a JSON {type(node).__name__}, not "
                              "the list the shape's '*' walks")
        return [x for i, item in enumerate(node) for x in _walk(item, rest, path, f"{seen}[{i}]")]
    if not isinstance(node, dict) or head not in node:
        found = list(node)[:10] if isinstance(node, dict) else f"a JSON {type(node).__name__}"
        raise CorpusError(f"{path}: no key {head!r} at {seen or 'the top'} (found {found}); check the "
                          "shape's path")
    return _walk(node[head], rest, path, f"{seen}.{head}" if seen else head)


def _parts(where: str) -> list[str]:
    return [p for p in where.split(".") if p] if where else []


def read_shaped(path: str | Path, shape: JsonShape, what: str) -> pl.DataFrame:
    """The rows of the JSON document at ``path`` as ``shape`` says (module doc): all-string
    columns in first-seen order, and :data:`ORIGINAL`."""
    path = Path(path)
    if not path.is_file():
        raise CorpusFileNotFound(f"{path}: {what} file not found")
    try:
        document = json.loads(path.read_text(encoding="utf-8-sig"))
    except json.JSONDecodeError as exc:
        raise CorpusError(f"{path}: {what} is not JSON ({exc.msg} at line {exc.lineno}, column "
                          f"{exc.colno})") from exc
    records: list[dict[str, Any]] = []
    if shape.records is not None:
        for i, obj in enumerate(_walk(document, _parts(shape.records), path, "")):
            items = obj if isinstance(obj, list) else [obj]
            for j, rec in enumerate(items):
                if not isinstance(rec, dict):
                    raise CorpusError(f"{path}: record {i}.{j} at {shape.records!r} is a JSON "
                                      f"{type(rec).__name__}, not an object")
                records.append(rec)
    else:
        by_id: dict[str, dict[str, Any]] = {}
        for where, columns in shape.keyed.items():
            (mapping,) = _walk(document, _parts(where), path, "")
            if not isinstance(mapping, dict):
                raise CorpusError(f"{path}: {where or 'the document'} is a JSON "
                                  f"{type(mapping).__name__}, not an object keyed by question id")
            for qid, value in mapping.items():
                rec = by_id.setdefault(str(qid), {shape.id: str(qid)})
                if len(columns) == 1:
                    rec[columns[0]] = value
                elif isinstance(value, list) and len(value) == len(columns):
                    rec.update(zip(columns, value))
                elif isinstance(value, dict):
                    rec.update({c: value.get(c) for c in columns})
                else:
                    raise CorpusError(f"{path}: {where + '.' if where else ''}{qid} is {json_cell(value)[:80]!r}; "
                                      f"the shape reads {len(columns)} items ({', '.join(columns)})")
        every = [c for columns in shape.keyed.values() for c in columns]
        records = [{**dict.fromkeys(every), **rec} for rec in by_id.values()]   # absent: null
    if not records:
        raise CorpusError(f"{path}: {what} has no records where the shape says ({shape})")
    columns: dict[str, None] = {}
    for rec in records:
        columns.update(dict.fromkeys(str(k) for k in rec))
    cols = [c for c in columns if c != ORIGINAL]
    rows = [[json_cell(rec.get(c)) for c in cols] + [json.dumps(rec, ensure_ascii=False)] for rec in records]
    return pl.DataFrame(rows, schema={**{c: pl.String for c in cols}, ORIGINAL: pl.String}, orient="row")


def read_shaped_submission(path: str | Path, values: dict[str, Any]) -> pl.DataFrame:
    """A submission read as ``task.submission.shape`` (``values``) says; errors are the
    submission's (kohaku.core.errors.SubmissionError), naming the file."""
    from kohaku.core.config import build
    from kohaku.core.errors import SubmissionError

    shape = build(JsonShape, values, "task.submission.shape")
    try:
        return read_shaped(path, shape, "submission")
    except CorpusFileNotFound as exc:
        raise FileNotFoundError(str(exc)) from exc
    except CorpusError as exc:
        raise SubmissionError(str(exc)) from exc


def _decoded(cell: Any) -> Any:
    """A flat cell as a JSON value: a list or object written as JSON decoded, else the text."""
    if isinstance(cell, str) and cell.strip()[:1] in ("[", "{"):
        try:
            return json.loads(cell)
        except ValueError:
            return cell
    return cell


def write_shaped(df: pl.DataFrame, values: dict[str, Any], path: str | Path) -> Path:
    """The flat submission ``df`` written as the competition's JSON that ``task.submission.shape``
    (``values``) reads (kohaku.tasks.score.check's perturbed submissions): keyed objects, or a list of
    records (``records: ""``); cells holding JSON lists or objects written as such."""
    from kohaku.core.config import build

    shape = build(JsonShape, values, "task.submission.shape")
    rows = df.drop(ORIGINAL, strict=False).to_dicts()
    if shape.records is not None:
        if _parts(shape.records):
            raise ConfigError(f"task.submission.shape.records={shape.records!r}: kohaku writes only a "
                              "top-level list of records (records: \"\") or keyed objects")
        document: Any = [{k: _decoded(v) for k, v in r.items()} for r in rows]
    else:
        document = {}
        for where, columns in shape.keyed.items():
            node = document
            for part in _parts(where):
                node = node.setdefault(part, {})
            for r in rows:
                qid = str(r[shape.id])
                if all(r.get(c) is None for c in columns):
                    continue
                node[qid] = (_decoded(r.get(columns[0])) if len(columns) == 1
                             else [_decoded(r.get(c)) for c in columns])
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
    return path


def original(row: dict[str, Any] | None) -> dict[str, Any] | None:
    """A row's record as its file had it (:data:`ORIGINAL`), or None for a row of a flat file."""
    text = (row or {}).get(ORIGINAL)
    return json.loads(text) if text else None
