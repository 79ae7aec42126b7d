"""Cells of submission and solutions CSVs every task reads: the file as strings, its id and
column checks (errors name the file and row), and reference lists (``['a','b']``).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any, Iterable, Sequence

import polars as pl

from kohaku.core import csvfile
from kohaku.core.errors import SubmissionError
from kohaku.core.values import BLANK, is_blank_value


def read_csv_str(path: str | Path) -> pl.DataFrame:
    """A submission or solutions CSV, every column a string (kohaku.core.csvfile); blank lines are
    skipped as the reference scorers' pandas reader does. Raises FileNotFoundError /
    SubmissionError naming the file."""
    return csvfile.read_csv_strings(path, "CSV", SubmissionError, skip_blank_lines=True)


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
                    # a '\ud800' escape parses to half a surrogate pair, no character: kept as written
                    items = [str(x).encode("utf-8", "backslashreplace").decode("utf-8") for x in value]
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


def json_cell(value: Any) -> str:
    """A JSON value as a string cell: null empty, booleans lower-case, lists and objects as
    compact JSON, the rest as written (the questions, solutions and shaped readers' cells)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return str(value)
