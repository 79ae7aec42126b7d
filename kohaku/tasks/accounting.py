"""FinanceBench-style answer values: reading an amount, and comparing a prediction with a gold one.

Gold answers are written like ``$1577.00``, ``2.8%``, ``-3.7``, ``(1.2)``, ``$0.52``,
``USD 1.5 billion``, ``1,577``, ``0.83``, or are words (``Yes``) and sentences.

**What is an amount** (:func:`parse_amount`). The whole cell must be one amount; case, surrounding
whitespace (non-breaking spaces too) and one trailing ``.`` do not matter. In order:

1. an optional hedge: ``~``, ``≈``, ``about``, ``approximately``, ``approx.``, ``around``,
   ``roughly``;
2. an optional sign ``-`` / ``+`` (also the Unicode minus ``−`` and the en dash ``–``), or
   accounting parentheses around the rest, meaning negative: ``(1.2)``, ``($1.2)``, ``(1.2%)``;
3. an optional currency prefix: ``$``, ``€``, ``£``, ``US$``, ``USD``, ``EUR``, ``GBP`` (a space
   after it is allowed); after it, again an optional sign or parentheses around the number:
   ``$-1.2``, ``$(1.2)``;
4. the number: digits with optional thousands commas in groups of three (``1,577``; ``1,5`` is
   not a number) and an optional decimal part (``.5`` too); no exponent;
5. an optional magnitude: the words ``thousand``, ``million``, ``billion``, ``trillion``, ``mn``,
   ``bn`` (attached or after a space: ``1.5bn``, ``1.5 billion``), or a letter ``k``, ``m``, ``mm``,
   ``b``, ``t`` **only attached to a number with a currency prefix** (``$3M`` = 3e6,
   ``$1.5B``); a bare ``3M`` (the company), ``3 M`` or ``3M Company`` is not an amount;
6. an optional percent: ``%``, ``percent``, ``per cent`` (not with a currency or a magnitude);
7. an optional currency suffix: ``USD``, ``US$``, ``dollar(s)``, ``US dollar(s)``, ``EUR``,
   ``euro(s)``, ``GBP`` (``1.5 million USD``); it must agree with a prefix when both are written.

Anything else (a word, a sentence, a list, two numbers, a date) is not an amount: ``None``.
:func:`parse_amount` never raises. ``$`` is read as USD.

**When a prediction matches a gold amount** (:func:`numeric_match`): the prediction must be an
amount too; two different written currencies never match. Otherwise it matches when

    |p - t| <= max(0.5 * 10**-decimals(truth) * unit(truth), rel_tol * |t|)

for one of the readings below (a small float epsilon is added). ``decimals`` is the number of
digits after the point as the gold answer writes them and ``unit`` its magnitude (1 without
one), so the half-unit of the last written digit is always accepted: ``2.8%`` accepts 2.75 to
2.85, ``$1577.00`` accepts ``1,577.4`` through the 1 % relative tolerance, ``$1.5 billion``
accepts ``$1.54 billion``. The sign matters (``(1.2)`` and ``1.2`` differ by 2.4).

- **percent**: when one side is a percent and the other is not, the other is also read as a
  fraction (``2.8%`` matches ``0.028``, and ``83%`` matches a gold ``0.83``) besides as it is
  (``2.8%`` matches ``2.8``).
- **magnitude**: when exactly one side writes a magnitude, the other side's number is read in
  each implicit unit 1, 1e3, 1e6, 1e9, 1e12 (a gold ``$1577.00`` in a question "in USD millions"
  matches ``$1,577 million`` and ``$1.577 billion``; a gold ``$1.5 billion`` matches ``1500`` and
  ``1.5``). When both or neither write one, the values are compared as they are (``1577`` does
  not match ``1577000``: that is a scale error).

:func:`same_amount` is the symmetric version for grouping votes: both sides must be amounts,
and after the same percent and magnitude readings ``|a - b| <= rel_tol * max(|a|, |b|)``.
:func:`normalize_text` groups free-text answers (SQuAD normalisation: lower case, punctuation
and articles out, whitespace collapsed).
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass
from typing import Iterator

from kohaku.tasks.squad import normalize_answer

IMPLICIT_UNITS = (1.0, 1e3, 1e6, 1e9, 1e12)

_WORDS = {"thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12, "mn": 1e6, "bn": 1e9}
_LETTERS = {"k": 1e3, "m": 1e6, "mm": 1e6, "b": 1e9, "t": 1e12}
_PREFIX = {"$": "USD", "us$": "USD", "usd": "USD", "€": "EUR", "eur": "EUR", "£": "GBP", "gbp": "GBP"}
_SUFFIX = {"usd": "USD", "us$": "USD", "dollar": "USD", "dollars": "USD", "us dollar": "USD",
           "us dollars": "USD", "eur": "EUR", "euro": "EUR", "euros": "EUR", "gbp": "GBP"}

_HEDGE = re.compile(r"^(?:~|≈|about\b|approximately\b|approx\.|approx\b|around\b|roughly\b)\s*")
_PRE = re.compile(r"^(?:us\$|\$|€|£|(?:usd|eur|gbp)(?![a-z]))\s*")
_NUMBER = re.compile(r"^(?P<sign>[-+])?\s*(?P<open>\()?\s*"
                     r"(?P<int>\d{1,3}(?:,\d{3})+|\d+)?(?:\.(?P<dec>\d+))?(?P<close>\))?")
_REST = re.compile(
    r"^(?P<space>\s*)(?P<mag>thousand|million|billion|trillion|mn|bn|mm|k|m|b|t)?(?![a-z])"
    r"\s*(?P<pct>%|percent\b|per cent\b)?"
    r"\s*(?P<post>us dollars?|dollars?|us\$|usd|eur|euros?|gbp)?$"
)


@dataclass(frozen=True)
class Amount:
    """An amount read from text.

    value:     the signed value with the magnitude applied (``$1.5B`` → 1.5e9); a percent keeps
               its written number (``2.8%`` → 2.8)
    decimals:  digits after the decimal point as written (``$1577.00`` → 2, ``1,577`` → 0)
    percent:   written with ``%`` / ``percent``
    currency:  ``USD`` / ``EUR`` / ``GBP``, or None when none is written
    magnitude: 1e3 / 1e6 / 1e9 / 1e12 when a word or a currency-prefixed letter gave one
    """

    value: float
    decimals: int
    percent: bool = False
    currency: str | None = None
    magnitude: float | None = None


def parse_amount(text: object) -> Amount | None:
    """The amount a whole cell states, or None (the rules are in the module docstring).
    An int or float is read as its value. Never raises."""
    try:
        if isinstance(text, bool) or text is None:
            return None
        if isinstance(text, (int, float)):
            return _from_number(text)
        if not isinstance(text, str):
            return None
        return _parse(text)
    except Exception:  # noqa: BLE001 - never raises, whatever the input
        return None


def _from_number(x: int | float) -> Amount | None:
    if not math.isfinite(x):
        return None
    text = repr(x)
    decimals = len(text.split(".", 1)[1]) if "." in text and "e" not in text.lower() else 0
    return Amount(float(x), decimals)


def _parse(text: str) -> Amount | None:
    s = unicodedata.normalize("NFKC", text).replace("\u2212", "-").replace("\u2013", "-")
    s = " ".join(s.split()).lower()
    if s.endswith("."):
        s = s[:-1].rstrip()
    m = _HEDGE.match(s)
    if m:
        s = s[m.end():]
    negative, signs = False, 0
    if s.startswith("(") and s.endswith(")"):   # accounting parentheses around the whole cell
        negative, signs, s = True, 1, s[1:-1].strip()
    if s[:1] in ("-", "+"):
        negative ^= s[0] == "-"
        signs += 1
        s = s[1:].lstrip()
    currency = None
    m = _PRE.match(s)
    if m:
        currency = _PREFIX[m.group(0).strip()]
        s = s[m.end():]
    m = _NUMBER.match(s)
    if not m or (m.group("int") is None and m.group("dec") is None):
        return None
    if bool(m.group("open")) != bool(m.group("close")):
        return None
    if m.group("sign"):
        signs += 1
        negative ^= m.group("sign") == "-"
    if m.group("open"):
        signs += 1
        negative = not negative
    if signs > 1:   # one sign at most: "-(1.2)", "(-1.2)", "-$-1" are not amounts
        return None
    digits = (m.group("int") or "0").replace(",", "")
    dec = m.group("dec") or ""
    number = float(f"{digits}.{dec}" if dec else digits)
    rest = _REST.match(s[m.end():])
    if not rest:
        return None
    magnitude = None
    mag = rest.group("mag")
    if mag:
        if mag in _WORDS:
            magnitude = _WORDS[mag]
        elif currency is not None and not rest.group("space"):
            magnitude = _LETTERS[mag]
        else:  # a bare letter (3M, 3 m) is not a magnitude
            return None
    percent = rest.group("pct") is not None
    post = rest.group("post")
    if post:
        code = _SUFFIX[post]
        if currency is not None and code != currency:
            return None
        currency = code
    if percent and (currency is not None or magnitude is not None):
        return None
    value = number * (magnitude or 1.0)
    return Amount(-value if negative else value, len(dec), percent, currency, magnitude)


def readings(a: Amount, b: Amount) -> Iterator[tuple[float, float, float]]:
    """(a's value, b's value, a's unit) for each reading of the pair: the percent/fraction forms
    when one side is a percent, each implicit unit on the side without a magnitude when exactly
    one side has one."""
    pct = [1.0]
    if a.percent and not b.percent:
        pct = [1.0, 100.0]          # b as it is, and b as a fraction
    elif b.percent and not a.percent:
        pct = [1.0, 0.01]
    a_units, b_units = [1.0], [1.0]
    if (a.magnitude is None) != (b.magnitude is None):
        if a.magnitude is None:
            a_units = list(IMPLICIT_UNITS)
        else:
            b_units = list(IMPLICIT_UNITS)
    a_unit = a.magnitude or 1.0
    for f in pct:
        for ua in a_units:
            for ub in b_units:
                yield a.value * ua, b.value * f * ub, a_unit * ua


def _currencies_clash(a: Amount, b: Amount) -> bool:
    return a.currency is not None and b.currency is not None and a.currency != b.currency


def _as_amount(x: str | Amount | None) -> Amount | None:
    return x if isinstance(x, Amount) else parse_amount(x)


def numeric_match(truth: str | Amount | None, pred: str | Amount | None,
                  rel_tol: float = 0.01) -> bool | None:
    """Whether ``pred`` states the gold amount ``truth`` (rounding-aware, module docstring);
    None when ``truth`` is not an amount (the metric does not cover the question), False when
    ``pred`` is not one."""
    t = _as_amount(truth)
    if t is None:
        return None
    p = _as_amount(pred)
    if p is None or _currencies_clash(t, p):
        return False
    half = 0.5 * 10.0 ** -t.decimals
    for tv, pv, unit in readings(t, p):
        tol = max(half * unit, rel_tol * abs(tv))
        if abs(pv - tv) <= tol * (1 + 1e-9) + 1e-12:
            return True
    return False


def same_amount(a: str | Amount | None, b: str | Amount | None, rel_tol: float = 0.01) -> bool:
    """Whether two answers state the same amount, for grouping votes: symmetric, both must be
    amounts, ``|a - b| <= rel_tol * max(|a|, |b|)`` after the readings of :func:`numeric_match`."""
    x, y = _as_amount(a), _as_amount(b)
    if x is None or y is None or _currencies_clash(x, y):
        return False
    for xv, yv, _ in readings(x, y):
        if abs(xv - yv) <= rel_tol * max(abs(xv), abs(yv)) * (1 + 1e-9) + 1e-12:
            return True
    return False


def normalize_text(s: str | None) -> str:
    """A free-text answer's grouping key: lower case, punctuation and articles out, whitespace
    collapsed (:func:`kohaku.tasks.squad.normalize_answer`)."""
    return normalize_answer(s)
