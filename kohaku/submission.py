"""The WattBot submission format: reading, writing and checking submission CSVs.

Schema (kohaku_spec.md §8.3): ``id, question, answer, answer_value, answer_unit, ref_id, ref_url,
supporting_materials, explanation``. Every non-applicable field holds the literal ``is_blank``;
``ref_id``/``ref_url`` are Python-style lists (``['a','b']``); ranges are ``[a,b]``; true/false
are 1/0; every row has a non-empty explanation.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Iterable, Sequence

import polars as pl

from kohaku import csvfile
from kohaku.artifacts import atomic_write
from kohaku.errors import KohakuError
from kohaku.values import BLANK, is_blank_value

SUBMISSION_COLUMNS: tuple[str, ...] = (
    "id",
    "question",
    "answer",
    "answer_value",
    "answer_unit",
    "ref_id",
    "ref_url",
    "supporting_materials",
    "explanation",
)
BLANK_ANSWER = "Unable to answer with confidence based on the provided documents."


class SubmissionError(KohakuError, ValueError):
    """A submission or solutions file is malformed; the message names the file, row and column."""


def read_csv_str(path: str | Path) -> pl.DataFrame:
    """A submission or solutions CSV, every column a string (kohaku.csvfile); raises
    FileNotFoundError / SubmissionError naming the file."""
    return csvfile.read_csv_strings(path, "CSV", SubmissionError)


def require_columns(df: pl.DataFrame, columns: Iterable[str], where: str) -> None:
    csvfile.require_columns(df, columns, where, "the file", SubmissionError)


def check_ids(df: pl.DataFrame, where: str, column: str = "id") -> None:
    """Every row has a non-empty, unique id; errors name the rows (1-based data rows)."""
    csvfile.check_ids(df, where, "the file", SubmissionError, column)


# ---------------------------------------------------------------------------------------------
# ref lists


def parse_ref_list(text: object) -> list[str]:
    """Doc ids from a ref field, leniently: ``['a','b']``, ``["a"]``, ``a``, ``a, b``.

    Blank tokens (``is_blank``, ``""``) give ``[]``; ``is_blank`` items are dropped; order kept,
    duplicates removed. Never raises.
    """
    if text is None:
        return []
    if isinstance(text, (list, tuple)):
        items = [str(x) for x in text]
    else:
        s = str(text).strip()
        if is_blank_value(s):
            return []
        items = None
        if s.startswith("[") and s.endswith("]"):
            for parse in (ast.literal_eval, lambda t: json.loads(t.replace("'", '"'))):
                try:
                    value = parse(s)
                except Exception:  # noqa: BLE001 - try the next reader
                    continue
                if isinstance(value, (list, tuple)):
                    items = [str(x) for x in value]
                    break
            if items is None:
                items = s[1:-1].split(",")
        else:
            items = s.replace(";", ",").split(",")
    out: list[str] = []
    for item in items:
        token = item.strip().strip("'\"").strip()
        if token.lower().startswith("ref_id="):
            token = token[len("ref_id=") :].strip()
        if token and not is_blank_value(token) and token not in out:
            out.append(token)
    return out


def format_ref_list(ids: Sequence[str] | None) -> str:
    """``['a','b']``, or ``is_blank`` for no ids."""
    ids = [str(i) for i in (ids or []) if str(i).strip() and not is_blank_value(i)]
    if not ids:
        return BLANK
    return "[" + ",".join("'" + i.replace("'", "") + "'" for i in ids) + "]"


# ---------------------------------------------------------------------------------------------
# building and writing


def _text(value: object) -> str:
    text = "" if value is None else str(value).strip()
    return text if text else BLANK


def answers_to_submission(answers: pl.DataFrame, questions: pl.DataFrame) -> pl.DataFrame:
    """Submission rows (SUBMISSION_COLUMNS, all strings) in the order of ``questions``.

    answers:   qid, answer, answer_value, ref_id list, ref_url list, explanation, is_blank and
               optionally supporting_materials, answer_unit.
    questions: qid, question, answer_unit. A question without an answer row becomes blank.
    """
    by_qid = {r["qid"]: r for r in answers.to_dicts()}
    rows = []
    for q in questions.select("qid", "question", "answer_unit").to_dicts():
        a = by_qid.get(q["qid"])
        unit = _text(q.get("answer_unit"))
        if a is None or a.get("is_blank") or is_blank_value(a.get("answer_value")):
            rows.append(_blank_row(q["qid"], q["question"], unit))
            continue
        value = _text(a.get("answer_value"))
        answer = (a.get("answer") or "").strip()
        if not answer or is_blank_value(answer):
            answer = value if unit == BLANK else f"{value} {unit}"
        rows.append(
            {
                "id": q["qid"],
                "question": q["question"] or "",
                "answer": answer,
                "answer_value": value,
                "answer_unit": unit,
                "ref_id": format_ref_list(a.get("ref_id")),
                "ref_url": format_ref_list(a.get("ref_url")),
                "supporting_materials": _text(a.get("supporting_materials")),
                "explanation": _text(a.get("explanation")),
            }
        )
    return pl.DataFrame(rows, schema={c: pl.String for c in SUBMISSION_COLUMNS})


def _blank_row(qid: str, question: str, unit: str) -> dict[str, str]:
    row = {c: BLANK for c in SUBMISSION_COLUMNS}
    row.update(id=qid, question=question or "", answer=BLANK_ANSWER, answer_unit=unit)
    return row


def write_submission(df: pl.DataFrame, path: str | Path) -> Path:
    """Write a submission CSV (columns in SUBMISSION_COLUMNS order); refuses an invalid one."""
    problems = validate_submission(df)
    if problems:
        raise SubmissionError(f"{path}: refusing to write an invalid submission: " + "; ".join(problems[:5]))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write(path, df.select(SUBMISSION_COLUMNS).write_csv)


def validate_submission(df: pl.DataFrame, where: str = "submission") -> list[str]:
    """Problems with a submission table, each naming the row and column; [] when valid."""
    missing = [c for c in SUBMISSION_COLUMNS if c not in df.columns]
    if missing:
        return [f"{where}: missing column(s) {missing}"]
    problems: list[str] = []
    seen: dict[str, int] = {}
    for i, row in enumerate(df.select(SUBMISSION_COLUMNS).to_dicts(), start=1):
        qid = (row["id"] or "").strip()
        if qid in seen:
            problems.append(f"{where}: rows {seen[qid]} and {i}, column 'id': duplicate id '{qid}'")
        seen[qid] = i
        for col in SUBMISSION_COLUMNS:
            if col == "question":
                continue
            if not (row[col] or "").strip():
                problems.append(f"{where}: row {i} (id '{qid}'), column '{col}': empty (write is_blank)")
        for col in ("ref_id", "ref_url"):
            text = (row[col] or "").strip()
            if text and not is_blank_value(text) and not parse_ref_list(text):
                problems.append(f"{where}: row {i} (id '{qid}'), column '{col}': not a list: {text!r}")
    return problems
