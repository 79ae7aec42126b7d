"""The WattBot submission format: reading, writing and checking submission CSVs.

Schema (kohaku_spec.md §8.3): ``id, question, answer, answer_value, answer_unit, ref_id, ref_url,
supporting_materials, explanation``. Every non-applicable field holds the literal ``is_blank``;
``ref_id``/``ref_url`` are Python-style lists (``['a','b']``); ranges are ``[a,b]``; true/false
are 1/0; every row has a non-empty explanation.

Reading for scoring follows the competition's reference scorers, which read CSVs with pandas:
a cell that pandas reads as missing (empty, or one of :data:`PANDAS_NA_TOKENS` such as ``NA``,
``N/A``, ``null``, ``None``, ``NaN``) is the text ``nan`` to them, which is neither blank nor a
ref id; blank lines are skipped. :func:`scoring_issues` lists the rows a strict reader would
question (each a :class:`RowIssue` naming the file, row, id and column); the scorer reports them
as warnings and refuses them only with ``strict``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import polars as pl

from kohaku.core import csvfile
from kohaku.core.artifacts import atomic_write
from kohaku.core.cells import check_ids, format_ref_list, parse_ref_list, read_csv_str, require_columns  # noqa: F401
from kohaku.core.errors import SubmissionError
from kohaku.core.values import BLANK, BLANK_ANSWER, is_blank_value  # noqa: F401 - BLANK_ANSWER re-exported

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


# ---------------------------------------------------------------------------------------------
# reading for scoring: the reference scorers' pandas rules, and what a strict reader questions

#: The strings ``pandas.read_csv`` reads as missing by default (pandas 2.x and 3.x); the
#: reference scorers turn such a cell into the text ``nan``.
PANDAS_NA_TOKENS = frozenset({
    "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
    "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null",
})


def reference_cell(text: str | None) -> str:
    """A cell as the reference scorers see it: ``nan`` for a missing cell, else the text as is
    (no stripping: pandas keeps surrounding spaces, and ``" NA"`` is not missing)."""
    return "nan" if text is None or text in PANDAS_NA_TOKENS else text


#: Per kind of :class:`RowIssue`: how the reference scorers read such a cell, and the fix.
ISSUE_ADVICE = {
    "empty id": "the row cannot match a question",
    "duplicate id": "every row of the id is scored, as the reference scorers' join does; keep one row per question",
    "empty explanation": "every row needs an explanation; write is_blank",
    "empty cell": "read as 'nan' (pandas), which is neither blank nor an answer or id; write is_blank",
    "blank item in a list": "the blank item counts: a value list is compared with it (it cannot match "
                            "a single value), a ref list has one more id; drop it",
    "malformed ref list": "not a JSON list after ' -> \", so read as ONE id; write ['id1','id2'] "
                          "without outer quotes",
}


@dataclass(frozen=True)
class RowIssue:
    """One cell a strict reader would question. ``row`` is the 1-based data row of ``where``."""

    where: str
    row: int
    qid: str
    column: str
    kind: str  # a key of ISSUE_ADVICE
    found: str  # what the cell holds

    def cell(self) -> str:
        return f"row {self.row} (id '{self.qid}'), column '{self.column}': {self.found}"

    def __str__(self) -> str:
        return f"{self.where}: {self.cell()} ({self.kind}: {ISSUE_ADVICE[self.kind]})"


def _json_list(text: str) -> list | None:
    """``text`` read as the reference reads a ``[...]`` cell (JSON after ' -> "); None if not."""
    try:
        value = json.loads(text.replace("'", '"'))
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, list) else None


def _blank_items(items: list) -> list[str]:
    return [str(x) for x in items if x is None or is_blank_value(str(x))]


def scoring_issues(df: pl.DataFrame, where: str = "submission") -> list[RowIssue]:
    """Rows of a submission (all-string, as read by :func:`read_csv_str`) that a strict reader
    would question; the reference scorers score all of them (see :mod:`kohaku.tasks.rooms.wattbot.metric`).

    - ``empty id`` / ``duplicate id``: every row of a duplicated id is scored, as the
      reference's join of the submission on the solutions does.
    - ``empty explanation``: empty, whitespace or a pandas NA token (write ``is_blank``).
    - ``empty cell``: ``answer_value`` or ``ref_id`` holds a pandas NA token (empty, NA, N/A,
      null, None, NaN, ...), which the reference reads as ``nan``: not blank, not an id.
    - ``blank item in a list``: ``[10000,is_blank]`` in ``answer_value`` is compared as a list
      with its blank item (it does not match ``10000``); ``['a','is_blank']`` or ``['a','']``
      in ``ref_id`` counts the blank item as one more id.
    - ``malformed ref list``: a ``ref_id`` starting with ``[`` that is not a JSON list after
      ' -> " is read as ONE id; so is a quoted list such as ``"['a','b']"``.
    """
    issues: list[RowIssue] = []
    cols = [c for c in ("id", "answer_value", "ref_id", "explanation") if c in df.columns]
    seen: dict[str, int] = {}
    for i, row in enumerate(df.select(cols).to_dicts(), start=1):
        qid = (row.get("id") or "").strip()

        def add(column: str, kind: str, found: str) -> None:
            issues.append(RowIssue(where, i, qid, column, kind, found))

        if "id" in row:
            if not qid:
                add("id", "empty id", "empty id")
            elif qid in seen:
                add("id", "duplicate id", f"duplicate id (also row {seen[qid]})")
            else:
                seen[qid] = i
        if "explanation" in row:
            text = row["explanation"] or ""
            if not text.strip() or text in PANDAS_NA_TOKENS:
                add("explanation", "empty explanation", repr(text))
        for col in ("answer_value", "ref_id"):
            text = row.get(col)
            if text is not None and text in PANDAS_NA_TOKENS:
                add(col, "empty cell", repr(text))
        value = (row.get("answer_value") or "").strip()
        if value.startswith("[") and value.endswith("]"):
            items = _json_list(value)
            if items is None:
                items = value[1:-1].split(",")
            blanks = _blank_items(items)
            if blanks:
                add("answer_value", "blank item in a list", repr(value))
        refs = (row.get("ref_id") or "").strip()
        if refs.startswith("["):
            items = _json_list(refs)
            if items is None:
                add("ref_id", "malformed ref list", repr(refs))
            elif _blank_items(items):
                add("ref_id", "blank item in a list", repr(refs))
        elif refs[:1] in ("'", '"') and refs[1:].lstrip().startswith("["):
            add("ref_id", "malformed ref list", repr(refs) + " (a quoted list)")
    return issues
