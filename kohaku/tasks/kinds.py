"""Answer kinds (``task.answer.kinds``): one question column picks, per question, what its value is.

A kind's type decides

- the JSON schema of the value field (what a constrained decoder lets the model write): number
  a JSON number, boolean true/false, name a string, names a list of strings, date an ISO string
  ``YYYY-MM-DD``, text a string of at most ``max_chars``; with ``kinds.not_answerable`` (e.g.
  ``N/A``) the value may also be that token (``anyOf``: xgrammar, which the hf backend and vLLM's
  structured outputs use, and the guidance backend accept it);
- the prompt's ``{kind_instruction}`` (the kind's ``instruction``, else the type's default);
- which samples agree in the vote (:func:`grouping`): numbers within ``vote.tolerance``
  (``1,577`` = ``1577.0``), booleans by the task's true/false words (``TRUE`` = ``true`` =
  ``Yes``), a name case- and space-insensitively, names as a set (``['A', 'B']`` = ``['b',
  'a']``), dates by the day (``2023-03-01`` = ``March 1, 2023``), free text by token F1 at the
  kind's ``similarity`` or else the first non-blank sample; the not-answerable token agrees only
  with itself and is voted like any other value;
- how the value is written (:func:`render`): numbers without ``.0``, booleans as ``kinds.write_true``
  / ``kinds.write_false``, lists in ``kinds.list_format``, dates ISO; and as a typed JSON value in a
  JSON submission (:func:`typed_value`);
- how many of the cited pages the answer keeps (``max_pages``; a not-answerable answer keeps
  none): :func:`limit_pages`.

This module is library code: no stages, no Hydra.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import polars as pl

from kohaku.core.config import ConfigError
from kohaku.core.cells import format_ref_list
from kohaku.tasks.spec import KindSpec, KindsSpec
from kohaku.tasks.score.text_match import normalize_answer, token_f1
from kohaku.core.values import format_number, parse_number, split_list
from kohaku.tasks.grouping import Grouping

DEFAULT_INSTRUCTIONS = {
    "number": "The value is a JSON number in the unit the question asks for: digits only, no "
              "unit, no thousands separators.",
    "boolean": "The value is true or false.",
    "name": "The value is the name exactly as the context writes it.",
    "names": "The value is a JSON list of the names, each exactly as the context writes it.",
    "date": "The value is the date as YYYY-MM-DD.",
    "text": "The value is a short answer of at most {max_chars} characters.",
}


@dataclass(frozen=True)
class NotAnswerable:
    """A sample's not-answerable token, parsed: agrees only with itself."""


NOT_ANSWERABLE = NotAnswerable()


# -- the kind of each question ------------------------------------------------------------

def kind_of(questions: pl.DataFrame, kinds: KindsSpec, where: str = "questions") -> dict[str, str]:
    """qid -> kind name from the questions column ``kinds.column``; errors name the row and the
    value (an empty cell takes ``kinds.default``)."""
    col = kinds.column
    if col is None:
        return {}
    if col not in questions.columns:
        raise ConfigError(f"{where}: no column {col!r} (task.answer.kinds.column); the questions "
                          f"file has {questions.columns}")
    out = {}
    for i, (qid, cell) in enumerate(zip(questions["qid"], questions[col]), start=1):
        name = (cell or "").strip() or kinds.default
        if name is None or name not in kinds.types:
            raise ConfigError(f"{where}: row {i} (id {qid!r}), column {col!r}: kind {cell!r} is not "
                              f"one of task.answer.kinds.types ({', '.join(kinds.types)})"
                              + ("" if kinds.default else " and task.answer.kinds.default is null"))
        out[qid] = name
    return out


# -- schema and prompt --------------------------------------------------------------------

def value_schema(kind: KindSpec, kinds: KindsSpec) -> dict[str, Any]:
    """The JSON schema of the value field for a question of this kind."""
    text = {"type": "string", "maxLength": kind.max_chars}
    if kind.type == "number":
        schema: dict[str, Any] = {"type": "number"}
    elif kind.type == "boolean":
        schema = {"type": "boolean"}
    elif kind.type == "names":
        schema = {"type": "array", "items": text}
        if kind.max_items is not None:
            schema["maxItems"] = kind.max_items
    elif kind.type == "date":
        schema = {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}
    else:   # name, text
        schema = text
    if kinds.not_answerable is not None:
        schema = {"anyOf": [schema, {"type": "string", "enum": [kinds.not_answerable]}]}
    return schema


def instruction(kind: KindSpec, kinds: KindsSpec) -> str:
    """The prompt's ``{kind_instruction}`` for this kind."""
    text = kind.instruction if kind.instruction is not None else DEFAULT_INSTRUCTIONS[kind.type]
    text = text.replace("{max_chars}", str(kind.max_chars))
    if kinds.not_answerable is not None and kind.instruction is None:
        text += (f' If the context does not answer the question, the value is "{kinds.not_answerable}".')
    return text


def value_text(value: Any) -> str:
    """A sample's JSON value as the text the generations table keeps: ``true``/``false``, a
    number as JSON writes it, a list as compact JSON, a string stripped."""
    if value is None:
        return ""
    if isinstance(value, (bool, list, dict)):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return str(value).strip()


# -- reading values -----------------------------------------------------------------------

_MONTHS = {m: i for i, m in enumerate(
    ["january", "february", "march", "april", "may", "june", "july", "august", "september",
     "october", "november", "december"], start=1)}
_MONTHS.update({m[:3]: i for m, i in list(_MONTHS.items())})
_MONTHS["sept"] = 9
_DATE_RES = (
    (re.compile(r"^(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})$"), ("y", "m", "d")),
    (re.compile(r"^([a-z]+)\.?\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4})$"), ("mon", "d", "y")),
    (re.compile(r"^(\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?([a-z]+)\.?,?\s+(\d{4})$"), ("d", "mon", "y")),
)


def parse_date(text: str) -> dt.date | None:
    """``2023-03-01``, ``2023/3/1``, ``March 1, 2023``, ``Mar. 1st 2023``, ``1 March 2023``;
    None for anything else (no numeric day/month orders: ``01/03/2023`` is ambiguous)."""
    s = " ".join((text or "").strip().lower().split())
    for pattern, parts in _DATE_RES:
        m = pattern.match(s)
        if not m:
            continue
        got = dict(zip(parts, m.groups()))
        month = int(got["m"]) if "m" in got else _MONTHS.get(got["mon"])
        if month is None:
            return None
        try:
            return dt.date(int(got["y"]), month, int(got["d"]))
        except ValueError:
            return None
    return None


def _norm(text: str) -> str:
    return " ".join((text or "").strip().strip("'\"").lower().split())


def parse_names(text: str, delimiter: str | None = None, list_text: bool = True) -> list[str]:
    """The items of a list value: JSON ``["a","b"]``, Python ``['a', 'b']``, ``a;b``, or one
    name. ``delimiter``: a text that is no list is split on it (None: on ``;`` when it has
    one); ``list_text`` false: a text that looks like a list is not read as one (it is split
    on ``delimiter``, else one name)."""
    s = (text or "").strip()
    items = split_list(s) if list_text else None
    if items is None:
        sep = delimiter if delimiter is not None else ";"
        items = [p for p in s.split(sep)] if sep in s else [s]
    return [i.strip().strip("'\"").strip() for i in items if i.strip().strip("'\"").strip()]


def _is_token(raw: str, kinds: KindsSpec) -> bool:
    return kinds.not_answerable is not None and raw.strip().lower() == kinds.not_answerable.strip().lower()


def parser(kind: KindSpec, kinds: KindsSpec) -> Callable[[str], Any]:
    """raw value -> what the vote compares: a float, a bool, a frozenset of names, a date,
    normalised text, :data:`NOT_ANSWERABLE`; "" for an empty value. Text a kind cannot read
    (``many`` for a number) becomes its normalised form, so equal texts still agree."""
    truth = {v.strip().lower() for v in kinds.true_values} | {kinds.write_true.strip().lower()}
    falsity = {v.strip().lower() for v in kinds.false_values} | {kinds.write_false.strip().lower()}

    def read(raw: str) -> Any:
        raw = (raw or "").strip()
        if not raw:
            return ""
        if _is_token(raw, kinds):
            return NOT_ANSWERABLE
        t = kind.type
        if t == "number":
            num = parse_number(raw)
            return num[0] if num is not None else _norm(raw)
        if t == "boolean":
            low = raw.lower().strip("'\"")
            return True if low in truth else False if low in falsity else _norm(raw)
        if t == "names":
            return frozenset(_norm(n) for n in parse_names(raw))
        if t == "date":
            return parse_date(raw) or _norm(raw)
        if t == "text":
            return raw
        return _norm(raw)   # name

    return read


def same_fn(kind: KindSpec, tolerance: float) -> Callable[[Any, Any], bool]:
    """Whether two parsed values are the same answer."""
    def same(a: Any, b: Any) -> bool:
        if isinstance(a, NotAnswerable) or isinstance(b, NotAnswerable):
            return a == b
        if kind.type == "number" and isinstance(a, float) and isinstance(b, float):
            return math.isclose(a, b, rel_tol=tolerance, abs_tol=1e-12)
        if kind.type == "text":
            if kind.similarity is None:
                return False      # each sample on its own: the tie-break keeps the first
            return token_f1(a, [b]) >= kind.similarity or normalize_answer(a) == normalize_answer(b)
        return type(a) is type(b) and a == b

    return same


def render(kind: KindSpec, kinds: KindsSpec, parsed: Any, raw: str) -> str:
    """The value as the submission writes it."""
    if isinstance(parsed, NotAnswerable):
        return kinds.not_answerable or raw.strip()
    if kind.type == "number" and isinstance(parsed, float):
        return format_number(parsed)
    if kind.type == "boolean" and isinstance(parsed, bool):
        return kinds.write_true if parsed else kinds.write_false
    if kind.type == "names":
        return list_cell(parse_names(raw), kinds.list_format)
    if kind.type == "date" and isinstance(parsed, dt.date):
        return parsed.isoformat()
    return raw.strip()


def list_cell(items: list[str], list_format: str) -> str:
    """A list in the task's syntax: json ``["a", "b"]``, python ``['a','b']``, semicolon ``a;b``."""
    if list_format == "json":
        return json.dumps(items, ensure_ascii=False)
    if list_format == "semicolon":
        return ";".join(items)
    return format_ref_list(items) if items else "[]"


def grouping(kind: KindSpec, kinds: KindsSpec, tolerance: float) -> Grouping:
    """The vote's grouping for questions of this kind."""
    return Grouping(parse=parser(kind, kinds), same=same_fn(kind, tolerance),
                    render=lambda parsed, raw: render(kind, kinds, parsed, raw),
                    blank_raw=lambda raw: not (raw or "").strip(), blank_parsed=lambda p: p == "")


def groupings(questions: pl.DataFrame, kinds: KindsSpec, tolerance: float) -> dict[str, Grouping]:
    """qid -> the grouping of its kind (empty without kinds)."""
    if not kinds.enabled:
        return {}
    specs = kinds.specs
    by_kind = {name: grouping(spec, kinds, tolerance) for name, spec in specs.items()}
    return {qid: by_kind[name] for qid, name in kind_of(questions, kinds).items()}


# -- answers ------------------------------------------------------------------------------

def typed_value(kind: KindSpec, kinds: KindsSpec, text: str) -> Any:
    """A written value as a typed JSON value (JSON submissions): a number, a boolean, a list of
    strings, an ISO date string, a string; the not-answerable token as itself."""
    parsed = parser(kind, kinds)(text)
    if isinstance(parsed, NotAnswerable) or parsed == "":
        return kinds.not_answerable if isinstance(parsed, NotAnswerable) else None
    if kind.type == "number" and isinstance(parsed, float):
        return int(parsed) if parsed.is_integer() and abs(parsed) < 2 ** 53 else parsed
    if kind.type == "boolean" and isinstance(parsed, bool):
        return parsed
    if kind.type == "names":
        return parse_names(text)
    if kind.type == "date" and isinstance(parsed, dt.date):
        return parsed.isoformat()
    return text.strip()


def with_kinds(answers: pl.DataFrame, questions: pl.DataFrame, kinds: KindsSpec) -> pl.DataFrame:
    """``kind`` (each question's kind) and ``value_json`` (its value as typed JSON, ``null`` for
    a blank answer) on the answers, and ``answer_value`` in the kind's rendering (:func:`render`:
    ``7`` not ``7.0``, booleans as ``write_true``/``write_false``), also where the vote kept the
    winner's surface (``vote.keep_surface``), so every writer writes the same value; unchanged
    without kinds."""
    if not kinds.enabled:
        return answers
    of = kind_of(questions, kinds)
    specs = kinds.specs
    readers = {name: parser(spec, kinds) for name, spec in specs.items()}
    names, values, texts = [], [], []
    for qid, text, blank in answers.select("qid", "answer_value", "is_blank").iter_rows():
        name = of[qid]
        names.append(name)
        text = text or ""
        if not blank and text.strip():
            text = render(specs[name], kinds, readers[name](text), text)
        texts.append(text)
        value = None if blank else typed_value(specs[name], kinds, text)
        values.append(json.dumps(value, ensure_ascii=False))
    return answers.with_columns(pl.Series("kind", names, dtype=pl.String),
                                pl.Series("value_json", values, dtype=pl.String),
                                pl.Series("answer_value", texts, dtype=pl.String))


def limit_pages(answers: pl.DataFrame, kinds: KindsSpec) -> pl.DataFrame:
    """``ref_pages`` cut to each kind's ``max_pages`` (in context order, already deduplicated);
    a not-answerable or blank answer cites no page. Needs :func:`with_kinds` first."""
    if not kinds.enabled or "ref_pages" not in answers.columns:
        return answers
    specs = kinds.specs
    out = []
    for kind, text, blank, pages in answers.select("kind", "answer_value", "is_blank",
                                                   "ref_pages").iter_rows():
        pages = list(pages or [])
        limit = specs[kind].max_pages
        if blank or _is_token(text or "", kinds):
            pages = []
        elif limit is not None:
            pages = pages[:limit]
        out.append(pages)
    return answers.with_columns(pl.Series("ref_pages", out, dtype=pl.List(pl.String)))


def request_schema(base: Mapping[str, Any], value_field: str, schema: dict[str, Any]) -> dict[str, Any]:
    """``base`` (the task's answer schema) with the value field's schema replaced."""
    props = dict(base["properties"])
    props[value_field] = schema
    return {**base, "properties": props}
