"""The byte boundary of every file kohaku reads from a user: any bytes in, a named error out.

Every reader of a user's file (questions, solutions, submissions as CSV, JSON or JSON lines,
metadata, gold evidence, task YAML) reads its bytes here. Whatever the bytes are, the reader
either gets text (and, for JSON and YAML, parsed data) or raises the ``error`` class it passes
(a :class:`~kohaku.core.errors.KohakuError`) whose message names the file, where in it (byte,
line and column, row) and what was expected. What is read and what is refused:

- **size**: a file over :data:`MAX_FILE_BYTES` (128 MiB) is refused before it is read; a cell
  (a CSV cell, a JSON value read as a cell) over :data:`MAX_CELL_CHARS` characters (1 Mi) is
  refused naming its row and column (:func:`check_cells`);
- **encoding**: a byte-order mark says the encoding: UTF-8 (the mark dropped), UTF-16 and
  UTF-32, little or big endian, are read as such; without one the text must be UTF-8. Bytes
  that are not valid in the encoding are named with their byte offset; a CSV reader may ask for
  its spreadsheet fallback instead (stray bytes read as cp1252, with a warning);
- **binary data**: a NUL byte (UTF-16 or UTF-32 saved without a byte-order mark, or not text
  at all) is refused with its byte offset, and so is a control character other than tab, line
  feed, carriage return, vertical tab and form feed in JSON or YAML; a CSV cell may hold such a
  character (pandas, which the reference scorers read with, reads it), unless the file is not
  UTF-8 and more than 5 % of its first 8 Ki characters are control characters (binary data);
- **JSON** (:func:`load_json`): nesting deeper than :data:`MAX_JSON_DEPTH` (64) is refused
  with its line and column before the parser sees it (a scan of the brackets outside strings,
  linear in the file's size, so no ``RecursionError``); ``NaN``, ``Infinity`` and numbers too
  large for a float (``1e999``) are refused where a number is expected; integers with more
  digits than Python converts are refused too;
- **YAML** (:func:`load_yaml`): the same depth limit, and at most :data:`MAX_YAML_NODES`
  values with every alias expanded (aliases of aliases, "a billion laughs"), both counted on
  the parser's events before the document is built.

The limits are keyword arguments with these defaults, so a caller (or a test) can state
others.
"""

from __future__ import annotations

import json
import logging
import math
import re
from itertools import accumulate
from pathlib import Path
from typing import Any

import polars as pl

from kohaku.core.errors import KohakuError

log = logging.getLogger("kohaku.read")

MAX_FILE_BYTES = 128 * 2**20   # a file larger than this is refused before it is read
MAX_CELL_CHARS = 2**20         # a cell longer than this (in characters) is refused
MAX_JSON_DEPTH = 64            # nesting of JSON arrays/objects (and YAML collections)
MAX_YAML_NODES = 1_000_000     # values a YAML file stands for, its aliases expanded

#: byte-order marks, longest first (UTF-32-LE's starts with UTF-16-LE's)
BOMS = (
    (b"\xff\xfe\x00\x00", "utf-32-le", "UTF-32 (little endian)"),
    (b"\x00\x00\xfe\xff", "utf-32-be", "UTF-32 (big endian)"),
    (b"\xef\xbb\xbf", "utf-8", "UTF-8"),
    (b"\xff\xfe", "utf-16-le", "UTF-16 (little endian)"),
    (b"\xfe\xff", "utf-16-be", "UTF-16 (big endian)"),
)

_CONTROL = re.compile("[\x00-\x08\x0e-\x1f]")
# a JSON string (possessive: linear even when it never ends; an unterminated one runs to the end)
_STRING = r'"(?:[^"\\]|\\.)*+"?'
_STRINGS = re.compile(_STRING, re.S)
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_BRACKETS = re.compile(_STRING + r"|([\[{])|([\]}])", re.S)
_CONSTANTS = re.compile(_STRING + r"|(-?Infinity|NaN|-?\d+(?:\.\d+)?[eE][+-]?\d+)", re.S)
_DEPTH = {"[": 1, "{": 1, "]": -1, "}": -1}
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


class InputError(KohakuError, ValueError):
    """A file's bytes are not what its reader reads (encoding, binary data, size, nesting);
    the message names the file, the place and what was expected. Readers pass their own error
    class; this is the default."""


def _where(text: str, index: int) -> str:
    """``line L, column C`` of character ``index`` of ``text`` (both from 1)."""
    line = text.count("\n", 0, index) + 1
    return f"line {line}, column {index - (text.rfind(chr(10), 0, index) + 1) + 1}"


def _byte(text: str, index: int, encoding: str = "utf-8", bom: int = 0) -> int:
    """The byte offset of character ``index`` of ``text`` as ``encoding`` writes it."""
    return bom + len(text[:index].encode(encoding, errors="surrogatepass"))


def check_size(size: int, path: str | Path, what: str, error: type[KohakuError] = InputError,
               limit: int = MAX_FILE_BYTES) -> None:
    """Refuse ``size`` bytes over ``limit``."""
    if size > limit:
        raise error(f"{path}: {what} is {size:,} bytes, over the limit of {limit:,} bytes "
                    "(kohaku.core.readfile.MAX_FILE_BYTES); split the file or cut it down")


def read_bytes(path: str | Path, what: str, error: type[KohakuError] = InputError,
               not_found: type[Exception] | None = None, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of ``path``; a missing file raises ``not_found`` (default ``error``), a file over
    ``limit`` bytes or one that cannot be read raises ``error``, both naming the file."""
    path = Path(path)
    if not path.is_file():
        raise (not_found or error)(f"{path}: {what} file not found; check the path")
    try:
        check_size(path.stat().st_size, path, what, error, limit)
        return path.read_bytes()
    except OSError as exc:
        raise error(f"{path}: cannot read the {what} file ({exc.strerror or exc})") from exc


def decode(raw: bytes, path: str | Path, what: str, error: type[KohakuError] = InputError,
           fallback: str | None = None, warnings: list[str] | None = None) -> str:
    """``raw`` as text (see the module doc): a byte-order mark's encoding, else UTF-8. Without a
    mark, bytes that are not UTF-8 raise ``error`` naming the byte offset, unless ``fallback``
    names an encoding (``cp1252`` for the CSV readers): then valid UTF-8 sequences are kept, the
    stray bytes read in ``fallback``, and a warning logged and appended to ``warnings``."""
    encoding, name, bom = "utf-8", "UTF-8", 0
    for mark, codec, label in BOMS:
        if raw.startswith(mark):
            encoding, name, bom = codec, label, len(mark)
            break
    if not bom and b"\x00" in raw:
        at = raw.index(b"\x00")
        guess = _nul_guess(raw)
        raise error(f"{path}: {what} holds a NUL byte at byte {at}: {guess}; expected UTF-8 text "
                    "(save the file as UTF-8)")
    try:
        text = raw[bom:].decode(encoding)
    except UnicodeDecodeError as exc:
        if encoding != "utf-8" or fallback is None:
            raise error(f"{path}: {what} is not valid {name} ({exc.reason} at byte {exc.start + bom}); "
                        "save the file as UTF-8") from exc
        text = _decode_mixed(raw[bom:], fallback)
        message = (f"{path}: {what} is not valid UTF-8 ({exc.reason} at byte {exc.start + bom}); stray bytes "
                   f"read as {fallback} (save the file as UTF-8 to silence this)")
        log.warning("%s", message)
        if warnings is not None:
            warnings.append(message)
        encoding = None
    bad = _CONTROL.search(text)
    # a CSV cell may hold a control character (the reference scorers' pandas reads it); bytes
    # that are not UTF-8 and hold many control characters are binary data
    if bad and (fallback is None or (encoding is None and
                                     len(_CONTROL.findall(text, 0, 8192)) > 0.05 * min(len(text), 8192))):
        at = _byte(text, bad.start(), encoding or "utf-8", bom)
        raise error(f"{path}: {what} holds the control character {ord(bad.group()):#04x} at "
                    f"{_where(text, bad.start())} (byte {'~' if encoding is None else ''}{at}): binary "
                    f"data, not text; expected {name} text")
    return text


def _nul_guess(raw: bytes) -> str:
    """What NUL bytes in ``raw`` suggest."""
    head = raw[:4096]
    odd, even = head[1::2].count(0), head[0::2].count(0)
    half = len(head) // 2 or 1
    if len(head) >= 4 and head[2::4].count(0) >= 0.9 * (len(head) // 4) and head[3::4].count(0) >= 0.9 * (len(head) // 4):
        return "it looks like UTF-32 saved without a byte-order mark"
    if odd >= 0.9 * half and even < 0.1 * half:
        return "it looks like UTF-16 (little endian) saved without a byte-order mark"
    if even >= 0.9 * half and odd < 0.1 * half:
        return "it looks like UTF-16 (big endian) saved without a byte-order mark"
    return "binary data, not text"


def first_char(path: str | Path, size: int = 512) -> str:
    """The first character of ``path`` that is not white space (its byte-order mark's encoding,
    else UTF-8; undecodable bytes skipped), "" for none: enough to tell JSON from CSV."""
    with Path(path).open("rb") as fh:
        head = fh.read(size)
    encoding, bom = "utf-8", 0
    for mark, codec, _ in BOMS:
        if head.startswith(mark):
            encoding, bom = codec, len(mark)
            break
    text = head[bom:].decode(encoding, errors="ignore").lstrip()
    return text[:1]


def _decode_mixed(raw: bytes, fallback: str) -> str:
    text = raw.decode("utf-8", errors="surrogateescape")
    return re.sub("[\udc80-\udcff]",
                  lambda m: bytes([ord(m.group()) - 0xDC00]).decode(fallback, errors="replace"), text)


def read_text(path: str | Path, what: str, error: type[KohakuError] = InputError,
              not_found: type[Exception] | None = None, fallback: str | None = None,
              warnings: list[str] | None = None, limit: int = MAX_FILE_BYTES) -> str:
    """The text of ``path`` (:func:`read_bytes`, then :func:`decode`)."""
    raw = read_bytes(path, what, error, not_found, limit)
    return decode(raw, path, what, error, fallback, warnings)


def check_json_depth(text: str, path: str | Path, what: str, error: type[KohakuError] = InputError,
                     limit: int = MAX_JSON_DEPTH, where: str | None = None) -> None:
    """Refuse JSON ``text`` nested deeper than ``limit`` arrays/objects, naming the line and
    column where it goes deeper (``where``, e.g. ``line 7 of questions``, names the text in
    place of ``what``: one line of a JSON lines file). Brackets inside strings do not count;
    linear in the text's length, no recursion."""
    if text.count("[") + text.count("{") <= limit:
        return
    brackets = _NOT_BRACKETS.sub("", _STRINGS.sub("", text))
    if not brackets or max(accumulate(map(_DEPTH.__getitem__, brackets))) <= limit:
        return
    depth = 0
    for m in _BRACKETS.finditer(text):
        depth += 1 if m.group(1) else -1 if m.group(2) else 0
        if depth > limit:
            raise error(f"{path}: {where or what} nests arrays/objects deeper than {limit} levels at "
                        f"{_place(text, m.start(), where)}; expected at most {limit} "
                        "(kohaku.core.readfile.MAX_JSON_DEPTH)")


class _Constant(ValueError):
    pass


def _constant(name: str) -> Any:
    raise _Constant(name)


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Constant(text)
    return value


def _place(text: str, index: int, where: str | None) -> str:
    """Line and column of ``index``; only the column within one line of a JSON lines file."""
    return f"column {index + 1}" if where else _where(text, index)


def load_json(text: str, path: str | Path, what: str, error: type[KohakuError] = InputError,
              limit: int = MAX_JSON_DEPTH, where: str | None = None, hint: str = "") -> Any:
    """``text`` parsed as JSON (after :func:`check_json_depth`); errors name the file, the line
    and column (``where``, e.g. ``line 7 of questions``, names one line of a JSON lines file in
    place of ``what``) and what was expected (``hint`` is appended to a syntax error): malformed
    JSON, ``NaN``/``Infinity`` or a number out of a float's range, an integer with too many
    digits."""
    subject = where or what
    check_json_depth(text, path, what, error, limit, where)
    try:
        data = json.loads(text, parse_constant=_constant, parse_float=_float)
        if _SURROGATE_ESCAPE.search(text):   # "\ud800" alone parses, but is no character
            json.dumps(data, ensure_ascii=False).encode("utf-8")
        return data
    except json.JSONDecodeError as exc:
        place = _place(text, exc.pos, where)
        raise error(f"{path}: {subject} is not JSON ({exc.msg} at {place}){hint}") from exc
    except _Constant as exc:
        found = next((m for m in _CONSTANTS.finditer(text) if m.group(1) == str(exc)), None)
        place = f" at {_place(text, found.start(), where)}" if found else ""
        raise error(f"{path}: {subject} holds {str(exc)[:40]}{place}, which is no finite number; "
                    "expected a number (JSON has no NaN or Infinity; write null for a missing value)") from exc
    except UnicodeEncodeError as exc:
        found = next((m for m in _SURROGATE_ESCAPE.finditer(text) if not _pair(text, m.start())), None)
        place = f"the escape {found.group()} at {_place(text, found.start(), where)}" if found else "an escape"
        raise error(f"{path}: {subject} holds {place}, half of a UTF-16 surrogate pair and no "
                    "character; expected text") from exc
    except (ValueError, RecursionError) as exc:  # e.g. an integer of more than 4300 digits
        raise error(f"{path}: {subject} cannot be read as JSON ({str(exc)[:200]})") from exc


def _pair(text: str, at: int) -> bool:
    """Whether the ``\\uXXXX`` escape at ``at`` is half of a high/low surrogate pair."""
    code = int(text[at + 2:at + 6], 16)
    if code < 0xDC00:
        after = _SURROGATE_ESCAPE.match(text, at + 6)
        return bool(after) and int(after.group()[2:], 16) >= 0xDC00
    before = _SURROGATE_ESCAPE.match(text, at - 6) if at >= 6 else None
    return bool(before) and int(before.group()[2:], 16) < 0xDC00


def load_yaml(text: str, path: str | Path, what: str, error: type[KohakuError] = InputError,
              limit: int = MAX_JSON_DEPTH, max_nodes: int = MAX_YAML_NODES) -> Any:
    """``text`` parsed as YAML (safe loader) after counting, on the parser's events (no
    recursion), its nesting and the nodes it stands for with every alias expanded (aliases of
    aliases grow exponentially: a few lines can stand for billions of values, which whoever
    copies the data, OmegaConf included, would build); errors name the file, the line and column
    and what was expected."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    def refuse(event: Any, problem: str, expected: str) -> KohakuError:
        mark = event.start_mark
        return error(f"{path}: {what} {problem} at line {mark.line + 1}, column {mark.column + 1}; {expected}")

    try:
        sizes: dict[str, int] = {}          # anchor -> nodes it stands for
        stack: list[list[Any]] = [[None, 0]]   # [anchor, nodes so far] of the open collections
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                stack.append([event.anchor, 1])
                if len(stack) - 1 > limit:
                    raise refuse(event, f"nests mappings/lists deeper than {limit} levels", f"expected at most {limit}")
                continue
            if isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                anchor, size = stack.pop()
            elif isinstance(event, yaml.ScalarEvent):
                anchor, size = event.anchor, 1
            elif isinstance(event, yaml.AliasEvent):
                anchor, size = None, sizes.get(event.anchor, 1)
            else:
                continue
            if anchor is not None:
                sizes[anchor] = size
            stack[-1][1] += size
            if stack[-1][1] > max_nodes:
                raise refuse(event, f"stands for more than {max_nodes:,} values with its aliases expanded",
                             "expected at most that many (kohaku.core.readfile.MAX_YAML_NODES)")
        return yaml.load(text, Loader=loader)
    except KohakuError:
        raise
    except yaml.YAMLError as exc:
        raise error(f"{path}: {what} is not valid YAML ({exc})") from exc
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        # a value the safe constructor cannot build (a date such as 2024-13-40, an unhashable key)
        raise error(f"{path}: {what} holds a value YAML cannot build ({str(exc)[:200]})") from exc


def check_cells(df: pl.DataFrame, path: str | Path, what: str, error: type[KohakuError] = InputError,
                limit: int = MAX_CELL_CHARS, first_row: int = 1) -> None:
    """Refuse a string cell of ``df`` longer than ``limit`` characters, naming its row (data rows
    counted from ``first_row``) and column."""
    columns = [c for c, t in df.schema.items() if t == pl.String]
    if not columns or df.height == 0:
        return
    longest = df.select(pl.col(c).str.len_chars().max() for c in columns).row(0)
    for column, n in zip(columns, longest):
        if n is not None and n > limit:
            row = int(df[column].str.len_chars().arg_max() or 0) + first_row
            raise error(f"{path}: row {row}, column {column!r} of the {what} holds {n:,} characters, "
                        f"over the limit of {limit:,} (kohaku.core.readfile.MAX_CELL_CHARS); cut the cell")


def debug_wanted(flag: bool = False, environ: dict[str, str] | None = None) -> bool:
    """Whether a command should re-raise errors with their traceback: its ``--debug`` flag, or
    ``KOHAKU_DEBUG`` set to anything but empty or ``0`` in the environment."""
    import os

    value = (os.environ if environ is None else environ).get("KOHAKU_DEBUG", "")
    return flag or value.strip() not in ("", "0")


class FilesRefused(InputError):
    """Some files of a batch cannot be read; ``lines`` has one line per file (its error)."""

    def __init__(self, lines: list[str], total: int):
        self.lines = lines
        super().__init__(f"{len(lines)} of {total} files cannot be read: " + "; ".join(lines))


def read_each(paths: list, read: Any, debug: bool = False) -> list:
    """``read(path)`` of every path, in order. Every file is tried: when any fails,
    :class:`FilesRefused` names each that did (kohaku.core.errors.one_line: a named error, or a
    bug said to be one); ``debug`` re-raises the first failure with its traceback instead."""
    from kohaku.core.errors import one_line

    out, bad = [], []
    for path in paths:
        try:
            out.append(read(path))
        except Exception as exc:   # one file's fault (or a bug): named, the others still read
            if debug:
                raise
            bad.append(one_line(exc, str(path)))
    if bad:
        raise FilesRefused(bad, len(paths))
    return out
