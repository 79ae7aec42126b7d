"""Submissions as JSON documents and references as objects (``task.submission.writer: json``).

A competition that takes a JSON document gets ``submission.json``::

    {<submission.document's constant keys>,
     <answers_key>: [{<submission.answer: key -> source>}, ...]}     # question order

Answer object sources: ``qid``, ``question``, ``value`` (the value as written in the CSV),
``typed_value`` (a JSON number, boolean, list, date string, or the not-answerable token, from
the question's answer kind; the written text without kinds), ``kind``, ``references`` (objects,
below), ``refs``, ``ref_pages``, ``answer``, ``explanation``, ``agreement``, any answer field,
any questions column.

A reference object has ``submission.reference``'s keys, each from ``doc_id``, ``page`` (the
cited page, counted from ``submission.page_base``: 0 for a ``page_index``) or a column of the
reference table (``submission.metadata``, else the corpus metadata; e.g. a document's
``pdf_sha1``); the CSV's ``ref_pages`` cells write the same references as ``doc:page`` with
the document as the reference names it (:func:`written_pages`). The pages are the answer's
``ref_pages`` (the context blocks of the cited documents, deduplicated, cut to the kind's
``max_pages``: kohaku.tasks.kinds.limit_pages).

Before writing, the document must pass ``submission.schema`` (a JSON schema file,
kohaku.core.schema_check); the columns writer checks each row against it the same way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

from kohaku.core import csvfile
from kohaku.core.artifacts import atomic_write
from kohaku.core.config import ConfigError
from kohaku.core.schema_check import load_schema, problems
from kohaku.core.errors import SubmissionError
from kohaku.tasks.spec import SubmissionSpec

REFERENCE_SOURCES = ("doc_id", "page")


def metadata_columns(spec: SubmissionSpec) -> list[str]:
    """The reference table's columns the reference objects use (none: no table is read)."""
    return [s for s in spec.reference.values() if s not in REFERENCE_SOURCES]


def read_reference_table(path: str | Path, spec: SubmissionSpec) -> dict[str, dict[str, str]]:
    """doc id -> its row of the reference table (``id`` and the columns the references use);
    errors name the file and the missing column."""
    df = csvfile.read_csv_strings(path, "reference metadata", SubmissionError)
    need = ["id", *metadata_columns(spec)]
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise SubmissionError(f"{path}: no column(s) {missing} for task.submission.reference "
                              f"({spec.reference}); the file has {df.columns}")
    return {r["id"].strip(): r for r in df.select(need).to_dicts()}


def split_page(ref: str) -> tuple[str, int]:
    """``doc:page`` (a ``ref_pages`` item) -> (doc, page counted from 1)."""
    doc, _, page = ref.rpartition(":")
    return doc, int(page)


def based_pages(items: list[str], base: int) -> list[str]:
    """``doc:page`` items (pages from 1, as ``ref_pages`` holds them) numbered from ``base``
    (``task.submission.page_base``), as every writer writes them."""
    out = []
    for item in items:
        doc, page = split_page(item)
        out.append(f"{doc}:{page - 1 + base}")
    return out


def written_pages(a: dict[str, Any], page_base: int) -> list[str]:
    """An answer's cited pages as every writer writes them: its ``reference_pages`` where the
    references name the document (:func:`with_references`), else ``ref_pages`` from
    ``page_base``."""
    if a.get("reference_pages") is not None:
        return list(a["reference_pages"])
    return based_pages(list(a.get("ref_pages") or []), page_base)


def document_key(spec: SubmissionSpec) -> str | None:
    """The reference object's key that names the document (the one key besides the page's:
    ``doc_id`` or a column of the reference table such as ``pdf_sha1``), else None."""
    keys = [k for k, source in spec.reference.items() if source != "page"]
    return keys[0] if len(keys) == 1 and "page" in spec.reference.values() else None


def with_references(answers: pl.DataFrame, table: dict[str, dict[str, str]] | None,
                    spec: SubmissionSpec) -> pl.DataFrame:
    """``references``: each answer's ``ref_pages`` as a JSON list of objects with
    ``submission.reference``'s keys; a document missing from the table is an error naming it.
    ``reference_pages``: the same references as ``doc:page`` cells, the document as the
    reference names it (:func:`document_key`: ``<pdf_sha1>:0``), which the CSV's ``ref_pages``
    writes, so the CSV and the document cite the same pages."""
    out, cells = [], []
    doc_key = document_key(spec)
    page_key = next((k for k, source in spec.reference.items() if source == "page"), None)
    for qid, pages in answers.select("qid", "ref_pages").iter_rows():
        refs = []
        for item in pages or []:
            doc, page = split_page(item)
            obj: dict[str, Any] = {}
            for key, source in spec.reference.items():
                if source == "doc_id":
                    obj[key] = doc
                elif source == "page":
                    obj[key] = page - 1 + spec.page_base
                else:
                    row = (table or {}).get(doc)
                    if row is None:
                        raise SubmissionError(f"question {qid!r} cites document {doc!r}, which the "
                                              "reference table (task.submission.metadata) lacks; add "
                                              "its row")
                    obj[key] = row[source]
            refs.append(obj)
        out.append(json.dumps(refs, ensure_ascii=False))
        cells.append(None if doc_key is None else [f"{r[doc_key]}:{r[page_key]}" for r in refs])
    return answers.with_columns(pl.Series("references", out, dtype=pl.String),
                                pl.Series("reference_pages", cells, dtype=pl.List(pl.String)))


def _source(source: str, a: dict[str, Any], q: dict[str, Any], fields: dict[str, Any],
            fixed: dict[str, Any], page_base: int) -> Any:
    if source == "typed_value":
        return json.loads(a["value_json"]) if a.get("value_json") else (
            None if a["is_blank"] else a["answer_value"])
    if source == "references":
        return json.loads(a.get("references") or "[]")
    if source == "kind":
        return a.get("kind") or ""
    if source == "ref_pages":
        return written_pages(a, page_base)
    if source in fixed:
        return fixed[source](a, q)
    if source in fields:
        return fields[source]
    if source in q:
        return q[source]
    raise ConfigError(f"task.submission.answer: source {source!r} is no answer field, question "
                      f"column or one of typed_value, references, kind, {', '.join(fixed)}")


def json_document(answers: pl.DataFrame, questions: pl.DataFrame, spec: SubmissionSpec,
                  fixed: dict[str, Any]) -> dict[str, Any]:
    """The submission document (question order); ``fixed`` are the columns writer's named
    sources (kohaku.tasks.named.builtin.COLUMN_SOURCES)."""
    by_qid = {r["qid"]: r for r in answers.to_dicts()}
    items = []
    for q in questions.to_dicts():
        a = by_qid[q["qid"]]
        fields = json.loads(a.get("fields") or "{}")
        items.append({key: _source(src, a, q, fields, fixed, spec.page_base) for key, src in spec.answer.items()})
    return {**spec.document, spec.answers_key: items}


def schema_path(value: str) -> Path:
    """``submission.schema`` as a path: absolute; else under conf/task/ where it is there, else
    relative to the working directory."""
    from kohaku.tasks import TASK_DIR

    path = Path(value).expanduser()
    if path.is_absolute() or not (TASK_DIR / path).is_file():
        return path
    return TASK_DIR / path


def check_schema(instances: list[tuple[str, Any]], spec: SubmissionSpec, path: Path) -> None:
    """Refuse to write unless every ``(what, instance)`` passes ``submission.schema`` (no
    schema: nothing checked); the error names the file, the instance and the JSON path."""
    if not spec.schema:
        return
    file = schema_path(spec.schema)
    schema = load_schema(file, "task.submission.schema")
    for what, instance in instances:
        bad = problems(instance, schema)
        if bad:
            raise SubmissionError(f"{path}: refusing to write a {what} that does not follow {file}: "
                                  + "; ".join(bad[:5]) + (f" (and {len(bad) - 5} more)" if len(bad) > 5 else ""))


def write_json(document: dict[str, Any], spec: SubmissionSpec, path: Path,
               ensure_ascii: bool | None = None) -> Path:
    """``document`` as indented UTF-8 JSON at ``path``, after the schema check; non-ASCII
    escaped as ``\\uXXXX`` with ``ensure_ascii`` (None: ``submission.ensure_ascii``), for a
    reader that decodes the file in another encoding."""
    check_schema([("submission document", document)], spec, path)
    path.parent.mkdir(parents=True, exist_ok=True)
    escape = spec.ensure_ascii if ensure_ascii is None else ensure_ascii
    text = json.dumps(document, ensure_ascii=escape, indent=2) + "\n"
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def check_rows(rows: list[dict[str, str]], spec: SubmissionSpec, path: Path) -> None:
    """The columns writer's checks: one row per question id, each row passing
    ``submission.schema`` (an object of string cells)."""
    id_col = next(c for c, s in spec.columns.items() if s == "qid")
    seen: dict[str, int] = {}
    for i, row in enumerate(rows, start=1):
        if row[id_col] in seen:
            raise SubmissionError(f"{path}: rows {seen[row[id_col]]} and {i}, column {id_col!r}: "
                                  f"duplicate id {row[id_col]!r}")
        seen[row[id_col]] = i
    check_schema([(f"row {i} (id {row[id_col]!r})", row) for i, row in enumerate(rows, start=1)], spec, path)


def escapes_non_ascii(path: Path) -> bool | None:
    """Whether a JSON file was written with non-ASCII escaped: True when its bytes are all ASCII
    and it holds a ``\\u`` escape of a non-ASCII character, False when it holds raw non-ASCII
    text, None when it holds no non-ASCII character either way (nothing to tell)."""
    data = Path(path).read_bytes()
    if any(b > 127 for b in data):
        return False
    import re

    return True if re.search(rb"\\u(?!00[0-7])[0-9a-fA-F]{4}", data) else None
