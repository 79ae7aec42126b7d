"""Canonical answer values: numbers, ranges, lists, booleans and names.

WattBot answers are compared with a tolerance (``isclose``, rel 1e-3, abs 1e-3) but written
in many surface forms: ``1,000``, ``1000.0``, ``1e3``, ``~1k``, ``about 1 thousand``.
KohakuRAG voted on raw strings, so these split the vote (kohaku_spec.md §11.14). Here every
value is turned into a :class:`Canonical` first:

- ``blank``: ``""``, ``na``, ``n/a``, ``is_blank`` (any case) or a string starting with
  "Unable to answer with confidence based on the provided documents".
- ``number``: one float. Handles thousands separators (``1,000``), leading hedges
  (about, approximately, ~, >, more than, ...), currency signs, magnitude suffixes (k, M, B,
  bn, T and the words thousand/million/billion/trillion), percent signs, trailing ``x``,
  scientific notation (``1e3``, ``3.14 x 10^23``), true/false/yes/no (1/0).
- ``range``: a sorted tuple of numbers, from ``[a,b]``, ``a-b``, ``a – b``, ``a to b``,
  ``from a to b``, ``between a and b`` (also longer numeric lists such as ``[0.06,3,426]``).
- ``list``: a sorted tuple of normalised strings (``[a, b]`` with a non-numeric element).
- ``name``: anything else, compared case- and whitespace-insensitively.

``canonical`` never raises. ``same`` applies the competition tolerance; ``render`` writes the
form used in submissions (``1000`` not ``1000.0``, ranges as ``[a,b]``).
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass
from typing import Union

REL_TOL = 1e-3
ABS_TOL = 1e-3

BLANK = "is_blank"
#: the answer text of a question left blank
BLANK_ANSWER = "Unable to answer with confidence based on the provided documents."
UNABLE_PREFIX = "unable to answer with confidence based on the provided documents"
# The competition's blank tokens (compared lower-cased and stripped). A model's answer_value is
# also blank when it writes "none" or "null" (a JSON null as text): MODEL_BLANK_TOKENS, the
# default of infer.blank_values.
BLANK_TOKENS = frozenset({"", "na", "n/a", "is_blank"})
MODEL_BLANK_TOKENS = ("is_blank", "", "n/a", "na", "none", "null")


def is_blank_value(value: object) -> bool:
    """True for the competition's blank tokens (case-insensitive) and the 'Unable to answer' text."""
    if value is None:
        return True
    text = str(value).strip().lower()
    return text in BLANK_TOKENS or text.startswith(UNABLE_PREFIX)


@dataclass(frozen=True)
class Canonical:
    """A canonical answer value.

    kind:    ``blank`` | ``number`` | ``range`` | ``list`` | ``name``.
    numbers: the value (``number``: one element) or the sorted numbers (``range``).
    items:   sorted normalised strings (``list``) or the one normalised string (``name``).
    display: how to write it back (original spelling for names and list items).
    """

    kind: str
    numbers: tuple[float, ...] = ()
    items: tuple[str, ...] = ()
    display: tuple[str, ...] = ()

    @property
    def key(self) -> tuple:
        """Exact (tolerance-free) identity, for raw grouping and hashing."""
        return (self.kind, self.numbers, self.items)


BLANK_VALUE = Canonical("blank")

# ---------------------------------------------------------------------------------------------
# numbers

_MAGNITUDE_WORDS = {
    "thousand": 1e3,
    "million": 1e6,
    "mn": 1e6,
    "billion": 1e9,
    "bn": 1e9,
    "trillion": 1e12,
}
_MAGNITUDE_LETTERS = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}

# Leading words/signs that hedge a number; removed before parsing (longest first).
_HEDGES = sorted(
    [
        "about", "approximately", "approx.", "approx", "around", "roughly", "nearly", "almost",
        "circa", "ca.", "~", "≈", "≃", "more than", "less than", "greater than", "fewer than",
        "over", "under", "at least", "at most", "up to", "just over", "just under", "some",
        "an estimated", "estimated", "est.", ">=", "<=", ">", "<", "≥", "≤",
    ],
    key=len,
    reverse=True,
)
_HEDGE_RE = re.compile(
    r"^(?:" + "|".join(re.escape(h) + (r"\b" if h[-1].isalpha() else "") for h in _HEDGES) + r")\s*"
)

_NUM_CORE = r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?(?:e[-+]?\d+)?|[-+]?\.\d+(?:e[-+]?\d+)?"
_NUMBER_RE = re.compile(
    r"^(?P<cur>[$€£¥])?\s*(?P<num>" + _NUM_CORE + r")"
    r"(?:\s*(?:x|×|\*)\s*10\s*(?:\^|\*\*)\s*(?P<exp>[-+]?\d+))?"
    r"\s*(?P<mag>thousand|million|billion|trillion|mn|bn|k|m|b|t)?"
    r"\s*(?P<tail>%|percent|x|×|\+)?$"
)
_BOOLS = {"true": 1.0, "yes": 1.0, "false": 0.0, "no": 0.0}
_RANGE_RES = [
    re.compile(r"^(?:from\s+)?(?P<a>.+?)\s+(?:to|through)\s+(?P<b>.+)$"),
    re.compile(r"^between\s+(?P<a>.+?)\s+and\s+(?P<b>.+)$"),
    re.compile(r"^(?P<a>.*?\d[^-–—]*?)\s*(?:-|–|—|‒|‑)\s*(?P<b>[-+]?[$€£¥]?\s*[\d.].*)$"),
]


def _clean(text: str) -> str:
    text = text.replace("\u2212", "-").replace("\u00a0", " ").replace("\u202f", " ")
    return " ".join(text.split())


def _strip_quotes(text: str) -> str:
    while len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"`":
        text = text[1:-1].strip()
    return text


def parse_number(text: str) -> tuple[float, bool] | None:
    """Parse one number; returns (value, has_magnitude) or None. Never raises."""
    num = _number(text)
    return None if num is None else (num[0], num[1] is not None)


def _number(text: str) -> tuple[float, float | None] | None:
    """(value, the magnitude factor it was multiplied by, None without one) or None."""
    s = _norm_name(str(text)).lower()
    if not s:
        return None
    if s in _BOOLS:
        return _BOOLS[s], None
    for _ in range(3):  # "approximately ~5", "more than about 5"
        stripped = _HEDGE_RE.sub("", s, count=1)
        if stripped == s:
            break
        s = stripped
    m = _NUMBER_RE.match(s)
    if not m:
        return None
    try:
        digits = m.group("num").replace(",", "")
        if m.group("exp") is not None:  # "3.14 x 10^23" -> "3.14e23" (exact, no 10.0**n error)
            mantissa, _, exp1 = digits.partition("e")
            digits = f"{mantissa}e{int(exp1 or 0) + int(m.group('exp'))}"
        value = float(digits)
    except (ValueError, OverflowError):
        return None
    mag = m.group("mag")
    factor = (_MAGNITUDE_WORDS.get(mag) or _MAGNITUDE_LETTERS[mag]) if mag else None
    if factor:
        value *= factor
    if not math.isfinite(value):
        return None
    if value == 0:
        value = 0.0  # no "-0"
    return value, factor


def _parse_range(s: str) -> tuple[float, float] | None:
    low = s.lower()
    for pattern in _RANGE_RES:
        m = pattern.match(low)
        if not m:
            continue
        a, b = _number(m.group("a")), _number(m.group("b"))
        if a is None or b is None:
            continue
        (x, xmag), (y, ymag) = a, b
        if ymag and not xmag:  # "1-2 million": the magnitude applies to both ends
            x *= ymag
        return (min(x, y), max(x, y))
    return None


# ---------------------------------------------------------------------------------------------
# lists


def split_list(text: str) -> list[str] | None:
    """Elements of a bracketed list ``[a, b]`` or ``{a, b}``; None if ``text`` is not one."""
    s = text.strip()
    if len(s) < 2 or (s[0], s[-1]) not in {("[", "]"), ("{", "}")}:
        return None
    inner = s[1:-1].strip()
    if not inner:
        return []
    parsed = None
    for attempt in (lambda: json.loads("[" + inner + "]"), lambda: ast.literal_eval("[" + inner + "]")):
        try:
            parsed = attempt()
            break
        except Exception:  # noqa: BLE001 - any parse failure falls back to splitting
            continue
    if isinstance(parsed, list) and all(isinstance(x, (str, int, float)) for x in parsed):
        return [str(x).strip() for x in parsed if str(x).strip()]
    parts = [_strip_quotes(p.strip()) for p in inner.split(",")]
    return [p for p in parts if p]


def _norm_name(text: str) -> str:
    """Whitespace collapsed, surrounding quotes and trailing periods removed (until stable)."""
    s = _clean(text)
    while True:
        t = _strip_quotes(s).rstrip(".").strip()
        if t == s:
            return s
        s = t


# ---------------------------------------------------------------------------------------------
# public API


def canonical(value: object) -> Canonical:
    """The canonical form of one answer value. Never raises."""
    if isinstance(value, Canonical):
        return value
    try:
        return _canonical(value)
    except Exception:  # noqa: BLE001 - defensive: arbitrary input must not break a vote
        text = _clean(str(value)) if value is not None else ""
        return Canonical("name", items=(text.lower(),), display=(text,)) if text else BLANK_VALUE


def _canonical(value: object) -> Canonical:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return BLANK_VALUE
    if isinstance(value, bool):
        return Canonical("number", numbers=(float(value),))
    if isinstance(value, (int, float)):
        return Canonical("number", numbers=(float(value),)) if math.isfinite(value) else BLANK_VALUE
    text = _norm_name(str(value))
    if is_blank_value(text):
        return BLANK_VALUE
    elements = split_list(text)
    if elements is not None:
        return _from_elements(elements)
    num = parse_number(text)
    if num is not None:
        return Canonical("number", numbers=(num[0],))
    rng = _parse_range(text)
    if rng is not None:
        return Canonical("range", numbers=rng)
    return Canonical("name", items=(text.lower(),), display=(text,))


def _from_elements(elements: list[str]) -> Canonical:
    elements = [_norm_name(e) for e in elements]
    elements = [e for e in elements if not is_blank_value(e)]
    if not elements:
        return BLANK_VALUE
    numbers = [parse_number(e) for e in elements]
    if all(n is not None for n in numbers):
        values = sorted(n[0] for n in numbers)  # type: ignore[index]
        if len(values) == 1:  # "[5]" is the number 5
            return Canonical("number", numbers=(values[0],))
        return Canonical("range", numbers=tuple(values))
    if len(elements) == 1:  # "['Hivemind']" is the name Hivemind
        return _canonical(elements[0])
    names = sorted((e.lower(), e) for e in elements)
    return Canonical("list", items=tuple(k for k, _ in names), display=tuple(d for _, d in names))


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)


ValueLike = Union[Canonical, str, int, float, None]


def same(a: ValueLike, b: ValueLike) -> bool:
    """Whether two values are the same answer under the competition tolerance."""
    ca, cb = canonical(a), canonical(b)
    if ca.kind != cb.kind:
        return False
    if ca.kind == "blank":
        return True
    if ca.kind in ("number", "range"):
        return len(ca.numbers) == len(cb.numbers) and all(
            _close(x, y) for x, y in zip(ca.numbers, cb.numbers)
        )
    return ca.items == cb.items


def format_number(x: float) -> str:
    """``1000`` not ``1000.0``; up to 15 significant digits; no ``-0``."""
    if x == 0:
        return "0"
    text = f"{x:.15g}"
    if "e" in text:
        mantissa, exp = text.split("e")
        if abs(x) < 1e16 and float(x).is_integer():
            return str(int(x))
        return f"{mantissa}e{int(exp)}"
    return text


def render(value: ValueLike) -> str:
    """The submission form of a value: ``is_blank``, ``1000``, ``[a,b]`` or the name."""
    c = canonical(value)
    if c.kind == "blank":
        return BLANK
    if c.kind == "number":
        return format_number(c.numbers[0])
    if c.kind == "range":
        return "[" + ",".join(format_number(x) for x in c.numbers) + "]"
    if c.kind == "list":
        if any(ch in d for d in c.display for ch in ",[]{}'\""):
            return json.dumps(list(c.display), ensure_ascii=False)
        return "[" + ",".join(c.display) + "]"
    return c.display[0]
