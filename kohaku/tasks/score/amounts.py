"""Amounts as filings and reports write them: reading them, and judging a prediction against a
gold one as a person does (any task: the per-kind ``kind_value`` metric, the classes of a
numeric miss, FinanceBench's room, which these rules were first written for).

Gold answers are written like ``$1577.00``, ``2.8%``, ``-3.7``, ``(1.2)``, ``$0.52``, ``1.52``,
``USD 1.5 billion``, ``$400,000,000 increase.`` or are words and sentences; real systems answer
with sentences (``The FY2018 capex was $1,577 million.``), hedges, units and accounting forms.

**What is an amount** (:func:`parse_amount`). The whole cell must be one amount; case, surrounding
whitespace (non-breaking spaces too) and one trailing ``.`` do not matter. In order:

1. an optional hedge: ``~``, ``≈``, ``about``, ``approximately``, ``approx.``, ``around``,
   ``roughly``, ``nearly``, ``almost``;
2. an optional sign ``-`` / ``+`` (also the Unicode minus ``−`` and the en dash ``–``) and/or
   accounting parentheses, meaning negative: around the whole cell ``(1.2)``, ``($1.2)``,
   ``(-$546 million)`` (a minus inside parentheses is the same negative, not a double one), or
   around the number before its magnitude ``($546) million``; two sign characters (``-$-1``)
   are not an amount;
3. an optional currency prefix: ``$``, ``€``, ``£``, ``US$``, ``USD``, ``EUR``, ``GBP`` (a space
   after it is allowed); after it, again an optional sign or parentheses around the number;
4. the number: digits with optional thousands commas in groups of three (``1,577``; ``1,5`` is
   not a number) and an optional decimal part (``.5`` too); no exponent;
5. an optional magnitude: the words ``thousand``, ``million``, ``billion``, ``trillion``, ``mn``,
   ``bn`` (attached or after a space), or a letter ``k``, ``m``, ``mm``, ``b``, ``t`` attached to
   the number when a currency prefix is written (``$3M``) or the number has two or more digits
   or a decimal point (``1577M``, ``2.5B``); a bare ``3M`` (the company), ``3 M`` or ``3M
   Company`` is not an amount;
6. an optional kind: percent ``%``, ``percent``, ``per cent``; percentage points ``percentage
   point(s)``, ``pp`` (read as a percent); a multiple ``x`` (attached) or ``times`` (``1.52x``,
   ``1.52 times``: the number 1.52). A percent or a multiple takes no currency and no magnitude;
7. an optional currency suffix: ``USD``, ``US$``, ``dollar(s)``, ``US dollar(s)``, ``EUR``,
   ``euro(s)``, ``GBP`` (``1.5 million USD``); it must agree with a prefix when both are written.

Anything else (a word, a sentence, a list, two numbers, a date) is not an amount: ``None``.
:func:`parse_amount` never raises. ``$`` is read as USD.

**Amounts in a sentence** (:func:`find_amounts`): every span of a text that reads as an amount
by the rules above, in order. Not amounts there: years (a bare whole number 1900-2100 with no
comma, currency, decimals or unit), a day after a month name, digits inside a word (``FY2018``,
``Q2``, ``10-K``).

**The gold amount** (:func:`gold_amount`): the whole cell, or the amount a cell starts with when
words follow it (``$400,000,000 increase.``, ``36%. The answer here assumes ...``).

**Which amount of an answer counts** (:func:`answer_amounts`): an answer that is one amount is
that amount. A sentence is read for its amounts; when it shows a computation, only the amounts
after its last conclusion marker count (``=``, ``≈``, ``therefore``, ``thus``, ``hence``,
``so the``, ``which gives``, ``resulting in``, ``comes to``, ``equals``, ``answer is``), since the
figures before it are the inputs, not the answer. Among the amounts that count, the answer
matches when one of them matches: people mark ``$1,577 million in FY2018, up from $1,373
million in FY2017`` as stating the right figure, and the comparison year beside it is context,
not a second answer.

**When a prediction matches a gold amount** (:func:`numeric_match`): two different written
currencies never match. Otherwise, for one reading of the pair (below), ``|p - t| <= tol`` where
``tol`` is half a unit of the gold's last written digit in the gold's own unit (``2.8%`` accepts
2.75 to 2.85; ``42.69`` accepts 42.685 to 42.695; ``$0.40`` in USD billions accepts $395 to $405
million); a currency gold's ``.00`` is the cents of a whole amount, so ``$1577.00`` is rounded to
the unit (1576.5 to 1577.5). A prediction written with fewer digits than the gold is its rounding
when it keeps at least two significant digits: then half a unit of the prediction's last digit
is the tolerance (``24.3`` and ``24`` for ``24.26``, ``$1.58 billion`` for ``$1577.00`` in
millions; ``2%`` for ``1.9%`` is not). A gold of zero matches only zero. ``rel_tol`` (default 0)
adds a relative tolerance for competitions that give one.

Readings, never a percent reading and a scale reading at once:

- **as written**, when both or neither side is a percent and both or neither write a magnitude;
- **percent**: a percent gold accepts a bare prediction as the percent (``2.8`` for ``2.8%``,
  the sign left out) or as a fraction (``0.028``); a percent prediction of a bare gold is read
  as a fraction only (``83%`` for ``0.83``; ``0.83%`` is a 100x slip). A percent never matches an
  amount with a currency or a magnitude (``40%`` is no answer to ``$0.40``);
- **scale**: when exactly one side writes a magnitude, the other side's number is read in each
  unit 1, 1e3, 1e6 and 1e9 (a gold ``$1577.00`` for a question "in USD millions" matches
  ``$1,577 million`` and ``$1.577 billion``; ``$1.5 billion`` matches ``1500`` and ``1.5``).
  When both or neither write one, the values are compared as they are: ``1577`` against
  ``1577000`` is a 1,000x slip.

**A careful grader's readings** (:class:`AmountRules`, each a named option, all off by default
so that strict competitions and the per-kind metrics keep the rules above; FinanceBench's task
turns them on: ``conf/task/financebench.yaml``, ``score.metrics[numeric].params``):

- ``rounded_inputs_tol`` (a relative tolerance, e.g. 0.002): an answer computed from rounded
  inputs is the gold's figure when it is within the gold's half unit plus
  ``rounded_inputs_tol * |gold|`` (``42.67`` days for ``42.69``, ``93.89`` for ``93.86``,
  ``24.25`` for ``24.26``; not ``2.7%`` for ``2.8%``, 3.6 % off, nor ``42.57`` for ``42.69``).
  Only figures computed by division get it: a ratio, a percent, days (a gold without a
  currency, a magnitude or a question's unit); a currency amount is a sum of reported figures
  and stays exact. 0: off (the gold's precision only).
- ``ratio_percent``: a ratio and a percent are the same quantity at the same precision. A
  percent answer of a ratio gold is read as its fraction (``7.8%`` is 0.078), a fraction
  answer of a percent gold as its percent, as the strict rules do; a conversion rounds twice,
  so the two figures match when they are roundings of values at most ``rounded_inputs_tol``
  apart: ``|p - t| <= half a unit of each one's last digit + rounded_inputs_tol * |t|``, both
  keeping two significant digits (``7.8%`` for ``0.079``, ``65.3%`` for ``0.654``, ``101.4%``
  for ``1.015``; not ``0.5%`` for ``0.004``). A percent written finer than the ratio gold
  (its decimals + 2 exceed the gold's: ``-1.53%`` for a gold ``-0.02`` asked to two decimals)
  answers another rounding than the one asked and matches only when its fraction is the
  gold's figure within ``rounded_inputs_tol``.
- ``unit_conversion``: an amount written out in full (no magnitude, at least one unit of the
  question's: ``$5,466,312,000``) is converted to the unit the question asks for (``in USD
  millions``: 5466.312) and compared at the gold's precision (``5466``, ``$5466.00``);
  ``$381.603 million`` for ``382`` is compared in millions too (the strict rules already do).
  :func:`question_unit` reads the question's unit.
- ``final_figure``: in an answer that shows a computation (an operator ``=``, ``/``, ``*``,
  ``+``, ``-`` between figures, or the words ``divide``/``dividing``, ``multiplied``,
  ``subtract``, ``minus``, ``plus``, ``averaging``, ``calculated``, ``computed``, ``step 1``),
  the figure that counts is the final one: after the last conclusion marker (also ``gives``,
  ``yields``, ``we get``, ``final answer``, ``Answer:``; Markdown ``**`` is no operator), in
  the last sentence that states a figure, the first figure that is neither an operand of the
  computation (next to an operator, or after ``divided by`` ... in the same clause) nor a
  comparison (``than`` ..., ``from``, ``versus``). ``Average inventory is 8,376 ...
  Therefore, the ratio is approximately 3.45`` states 3.45, not the inventory; a computation
  whose inputs include the gold's figure and whose final figure is another states the other.
- ``refusals``: an answer that says the figure is not there (``not disclosed``, ``does not
  provide``, ``cannot be determined``, ``unable to``, ``insufficient information``, ...) is no
  answer, even when it ends with a number (``... not disclosed, so the amount is 0`` against a
  gold of 0 is wrong).
- ``text_gold``: a gold that is text beginning with a number (``87% of the total restructuring
  liability is related Employee liabilities``) is matched by an answer that says that number
  anywhere (a figure of the gold's kind, not only the first), in digits or in words
  (``eighty-seven percent``).
- ``asked_precision``: a question that asks for a number of decimals (``Round your answer to
  two decimal places``, ``round to one decimal place``: :func:`question_decimals`) sets the
  precision of a gold that is not a currency amount when its written form has fewer (a gold
  ``0.8`` is 0.80: ``0.85`` is another figure, ``0.80`` and ``80%`` are the gold's).

:data:`CAREFUL` holds FinanceBench's settings (every rule on, ``rounded_inputs_tol=0.002``).

:func:`same_amount` is the symmetric version for grouping votes: both sides must be whole-cell
amounts, and after the readings above (a bare number against a percent read either way)
``|a - b| <= rel_tol * max(|a|, |b|)``. :func:`normalize_text` groups free-text answers (SQuAD
normalisation: lower case, punctuation and articles out, whitespace collapsed).
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass, fields, replace
from typing import Iterator

from kohaku.tasks.score.text_match import normalize_answer

#: the units a number written without a magnitude is read in, against one that writes one
IMPLICIT_UNITS = (1.0, 1e3, 1e6, 1e9)

_WORDS = {"thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12, "mn": 1e6, "bn": 1e9}
_LETTERS = {"k": 1e3, "m": 1e6, "mm": 1e6, "b": 1e9, "t": 1e12}
_PREFIX = {"$": "USD", "us$": "USD", "usd": "USD", "€": "EUR", "eur": "EUR", "£": "GBP", "gbp": "GBP"}
_SUFFIX = {"usd": "USD", "us$": "USD", "dollar": "USD", "dollars": "USD", "us dollar": "USD",
           "us dollars": "USD", "eur": "EUR", "euro": "EUR", "euros": "EUR", "gbp": "GBP"}

_HEDGE = re.compile(r"^(?:~|≈|about\b|approximately\b|approx\.|approx\b|around\b|roughly\b"
                    r"|nearly\b|almost\b)\s*")
_PRE = re.compile(r"^(?:us\$|\$|€|£|(?:usd|eur|gbp)(?![a-z]))\s*")
_NUMBER = re.compile(r"^(?P<sign>[-+])?\s*(?P<open>\()?\s*(?P<sign2>[-+])?\s*"
                     r"(?P<int>\d{1,3}(?:,\d{3})+|\d+)?(?:\.(?P<dec>\d+))?(?P<close>\))?")
_REST = re.compile(
    r"^(?P<space>\s*)(?:(?P<mag>thousand|million|billion|trillion|mn|bn|mm|k|m|b|t)(?![a-z]))?"
    r"(?P<tsp>\s*)(?:(?P<pct>%|percent\b|per cent\b|percentage points?\b|pp\b)|(?P<times>x\b|times\b))?"
    r"\s*(?P<post>us dollars?|dollars?|us\$|usd|eur|euros?|gbp)?$"
)
# a leading "(...)" that closes before the rest of the cell: "($546) million"
_LEAD_PAREN = re.compile(r"^\((?P<inner>[^()]*)\)(?P<rest>.+)$")


@dataclass(frozen=True)
class Amount:
    """An amount read from text.

    value:     the signed value with the magnitude applied (``$1.5B`` → 1.5e9); a percent keeps
               its written number (``2.8%`` → 2.8)
    decimals:  digits after the decimal point as written (``$1577.00`` → 2, ``1,577`` → 0)
    percent:   written with ``%`` / ``percent`` / ``percentage points``
    currency:  ``USD`` / ``EUR`` / ``GBP``, or None when none is written
    magnitude: 1e3 / 1e6 / 1e9 / 1e12 when a word or an attached letter gave one
    """

    value: float
    decimals: int
    percent: bool = False
    currency: str | None = None
    magnitude: float | None = None

    @property
    def number(self) -> float:
        """The written number, without its sign and magnitude (``$1.5 billion`` → 1.5)."""
        return abs(self.value) / (self.magnitude or 1.0)

    @property
    def significant(self) -> int:
        """Significant digits as written (``0.03`` → 1, ``24.3`` → 3, ``1,577`` → 4)."""
        return len(f"{self.number:.{self.decimals}f}".replace(".", "").lstrip("0"))

    @property
    def precision_decimals(self) -> int:
        """The decimals that carry precision: a currency amount's ``.00`` (cents of a whole
        amount, ``$1577.00``) counts as none."""
        if self.currency and self.decimals and float(self.number).is_integer():
            return 0
        return self.decimals


@dataclass(frozen=True)
class AmountRules:
    """A careful grader's readings (module docstring), each a named option; the defaults are the
    strict rules (every option off)."""

    rounded_inputs_tol: float = 0.0   # relative slack between two roundings (0.002: 0.2 %); 0: off
    ratio_percent: bool = False       # a percent finer than a ratio gold must be its figure
    unit_conversion: bool = False     # an amount written in full is read in the question's unit
    final_figure: bool = False        # a computation's final figure, not its inputs
    refusals: bool = False            # "not disclosed ... is 0" is no answer
    text_gold: bool = False           # a text gold's leading number, said anywhere (or in words)
    asked_precision: bool = False     # "round to two decimal places": a gold "0.8" is 0.80

    def validate(self) -> None:
        """Raise ValueError for a tolerance that is negative or not a number."""
        tol = self.rounded_inputs_tol
        if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not math.isfinite(tol) or tol < 0:
            raise ValueError(f"rounded_inputs_tol must be a number >= 0 (e.g. 0.002), got {tol!r}")
        for f in fields(self):
            if f.name != "rounded_inputs_tol" and not isinstance(getattr(self, f.name), bool):
                raise ValueError(f"{f.name} must be true or false, got {getattr(self, f.name)!r}")


#: the strict rules (every option off)
STRICT = AmountRules()
#: FinanceBench's careful grader: every rule on, answers from rounded inputs within 0.2 %
CAREFUL = AmountRules(rounded_inputs_tol=0.002, ratio_percent=True, unit_conversion=True,
                      final_figure=True, refusals=True, text_gold=True, asked_precision=True)


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
        return _parse(_normalize(text))
    except Exception:  # noqa: BLE001 - never raises, whatever the input
        return None


def _from_number(x: int | float) -> Amount | None:
    if not math.isfinite(x):
        return None
    text = repr(x)
    decimals = len(text.split(".", 1)[1]) if "." in text and "e" not in text.lower() else 0
    return Amount(float(x), decimals)


def _normalize(text: str) -> str:
    s = unicodedata.normalize("NFKC", text).replace("\u2212", "-").replace("\u2013", "-")
    return " ".join(s.split()).lower()


def _parse(s: str) -> Amount | None:
    if s.endswith("."):
        s = s[:-1].rstrip()
    m = _HEDGE.match(s)
    if m:
        s = s[m.end():]
    negative, signs, parens = False, 0, 0
    if s.startswith("(") and s.endswith(")"):   # accounting parentheses around the whole cell
        negative, parens, s = True, 1, s[1:-1].strip()
    else:
        m = _LEAD_PAREN.match(s)                # "($546) million": around the number only
        if m and (m.group("rest")[:1] in " %" or m.group("rest")[:1].isalpha()):
            negative, parens, s = True, 1, (m.group("inner").strip() + m.group("rest"))
    if s[:1] in ("-", "+"):
        negative = negative or s[0] == "-"
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
    for key in ("sign", "sign2"):
        if m.group(key):
            signs += 1
            negative = negative or m.group(key) == "-"
    if m.group("open"):
        parens += 1
        negative = True
    if signs > 1 or parens > 1:   # "-$-1.2", "((1.2))" are not amounts; "(-1.2)" is -1.2
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
        elif not rest.group("space") and (currency is not None or len(digits) >= 2 or dec):
            magnitude = _LETTERS[mag]
        else:  # a bare letter (3M, 3 m) is not a magnitude
            return None
    percent = rest.group("pct") is not None
    times = rest.group("times") is not None
    if rest.group("times") == "x" and (rest.group("tsp") or mag or rest.group("space")):
        return None   # "1.2 x": only an attached x is a multiple
    post = rest.group("post")
    if post:
        code = _SUFFIX[post]
        if currency is not None and code != currency:
            return None
        currency = code
    if (percent or times) and (currency is not None or magnitude is not None):
        return None
    value = number * (magnitude or 1.0)
    return Amount(-value if negative else value, len(dec), percent, currency, magnitude)


# -- amounts in a text ----------------------------------------------------------------------

_CORE = re.compile(r"(?<![\w.'])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\d])")
_LEAD = re.compile(r"(?:\(\s*)?(?:[-+]\s*)?(?:\(\s*)?(?:(?:us\$|\$|€|£|usd|eur|gbp)\s*)?"
                   r"(?:\(\s*)?(?:[-+]\s*)?$")
_TAIL = re.compile(
    r"(?:\s*\))?"
    r"(?:\s*(?:thousand|million|billion|trillion|mn|bn)(?![a-z])|(?:mm|k|m|b|t)(?![a-z]))?"
    r"(?:\s*\))?"
    r"(?:\s*(?:%|percent(?:age points?)?(?![a-z])|per cent(?![a-z])|pp(?![a-z])|(?<=\d)x(?![a-z])"
    r"|times(?![a-z])))?"
    r"(?:\s*(?:us dollars?|dollars?|usd|eur|euros?|gbp)(?![a-z]))?"
    r"(?:\s*\))?"
)
_MONTHS = re.compile(r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|"
                     r"aug(?:ust)?|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?\s*$")
_COMPARISON = re.compile(
    r"(?:\bfrom|\bcompared (?:with|to)|\bversus|\bvs\.?|\bagainst|\b(?:prior|previous|last) "
    r"year'?s?(?: figure)?(?: was| were| of|:)?)(?:\s+(?:about|approximately|around|roughly|~))?\s*$")
# what may stand before accounting parentheses that mean a negative amount in a sentence
_NEGATIVE_PAREN = re.compile(r"(?:^|\b(?:was|were|is|are|of|at|to|by|totall?ed|amounted to)|[:=])\s*$")
_SIGN_WORD = re.compile(r"\b(?:decreased?|declined?|decline of|fell|dropped|drop of|down|lower|negative|"
                        r"loss of|shrunk|shrank|reduction of|reduced)(?: by)?\s*$")
_CONCLUSION = re.compile(r"=|≈|\btherefore\b|\bthus\b|\bhence\b|\bso the\b|\bwhich gives\b"
                         r"|\bresulting in\b|\bresults in\b|\bcomes to\b|\bequals\b|\banswer is\b")

# -- a careful grader's readings (AmountRules) --
_CAREFUL_CONCLUSION = re.compile(_CONCLUSION.pattern + r"|\bgives?\b|\bgiving\b|\byields?\b|\bwe get\b"
                                 r"|\bfinal answer\b|\banswer\s*:")
# Markdown emphasis and code marks ("**Answer:** 3.45"): not operators
_MARKDOWN = re.compile(r"\*\*|__|`")
_REFUSAL = re.compile(
    r"\bnot (?:been |be )?(?:disclosed|provided|available|stated|reported|specified|given|found)\b"
    r"|\bnot (?:possible|able) to (?:determine|calculate|compute|find)\b"
    r"|\b(?:does|do|did|can) ?not (?:disclose|provide|state|report|specify|give|contain|mention|"
    r"determine|calculate|compute|find|answer)\b"
    r"|\b(?:doesn't|don't|didn't|can't|cannot) (?:disclose|provide|state|report|specify|give|contain|"
    r"mention|determine|calculate|compute|find|answer|be (?:determined|calculated|computed|found))\b"
    r"|\bcannot be (?:determined|calculated|computed|found)\b|\bunable to\b"
    r"|\b(?:insufficient|not enough) (?:data|information|details)\b"
    r"|\bno (?:data|information|figures?|details) (?:is |are )?(?:available|provided|given|disclosed)\b"
    r"|\bnothing (?:is )?disclosed\b")
# a computation shown: an operator between figures, or the words of one
_CHAIN = re.compile(r"\d[\d,.%)]*\s*(?:[=/*×÷+]|-\s)\s*[-($€£]*\s*\d|\bdivid(?:e|ed|ing)\b|\bmultipl"
                    r"|\bsubtract|\bminus\b|\bplus\b|\baveraging\b|\bcalculat|\bcomput|\bstep \d")
_OPERAND_AFTER = re.compile(r"\s*\)?\s*(?:[/*×÷+]|-\s|x\s|divided by\b|multiplied by\b|minus\b|plus\b|less\b)")
_OPERAND_BEFORE = re.compile(r"(?:[/*×÷+]|\s-|\bdivided by|\bmultiplied by|\bminus|\bplus|\bless|\bover)"
                             r"[a-z\s&'()\-]{0,40}$")
_THAN = re.compile(r"\bthan\b[a-z\s'&\-]{0,40}$")
_SENTENCE_END = re.compile(r"[.!?;](?=\s|$)")
_WORD_UNITS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen".split())}
_WORD_TENS = {w: 10 * (i + 2) for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split())}
_WORD_PERCENT = re.compile(
    r"\b(?:(?P<tens>" + "|".join(_WORD_TENS) + r")(?:[- ](?P<unit>" + "|".join(list(_WORD_UNITS)[1:10]) + r"))?"
    r"|(?P<small>" + "|".join(_WORD_UNITS) + r"))\s*(?:%|percent\b|per cent\b)")


def _balanced(span: str) -> str:
    """``span`` without parentheses that have no partner."""
    span = span.strip()
    while span.count("(") > span.count(")") and "(" in span:
        i = span.index("(")
        span = (span[:i] + span[i + 1:]).strip()
    while span.count(")") > span.count("(") and ")" in span:
        i = span.rindex(")")
        span = (span[:i] + span[i + 1:]).strip()
    return span


def _spans(s: str) -> Iterator[tuple[int, int, Amount]]:
    """(start, end, amount) of every amount in the normalised text ``s``."""
    for m in _CORE.finditer(s):
        i, j = m.span()
        head = s[max(0, i - 12):i]
        lead = _LEAD.search(head)
        start = i - (len(lead.group(0)) if lead else 0)
        # a "-" right after a letter or digit is a hyphen ("2019-2020", "10-K"), not a sign
        while start < i and s[start] in "-+(" and start > 0 and s[start - 1].isalnum():
            start += 1
        if s[j:j + 2] in ("-k", "-q") or (j < len(s) and s[j] == "-" and j + 1 < len(s) and s[j + 1].isalpha()):
            continue
        tail = _TAIL.match(s, j)
        end = tail.end() if tail else j
        if end < len(s) and s[end].isalnum():
            end = j
            if end < len(s) and s[end].isalpha():    # "1st", "12months": no amount
                continue
        core = m.group(0)
        amount = None
        shorter = (s[start:j], core) if not s[j:j + 1].isalpha() else ()   # "3M" is no 3
        for span in (s[start:end], s[i:end], *shorter):
            amount = _parse(_balanced(span))
            if amount is not None:
                break
        if amount is None:
            continue
        if s[start] == "(" and amount.value < 0 and amount.currency is None and core.isdigit() and len(core) == 1:
            continue                                      # "(1)", "(2)": an enumeration
        if s[start] == "(" and amount.value < 0 and not _NEGATIVE_PAREN.search(s[max(0, start - 20):start]):
            amount = Amount(-amount.value, amount.decimals, amount.percent, amount.currency,
                            amount.magnitude)             # "in FY 2023 ($1.8 bn)": an aside
        bare = (amount.magnitude is None and not amount.percent and amount.currency is None
                and "," not in core and "." not in core)
        if bare and 1900 <= abs(amount.value) <= 2100:
            continue                                      # a year
        if bare and _MONTHS.search(s[max(0, i - 11):start]):
            continue                                      # a day after a month name
        yield start, end, amount


def find_amounts(text: object) -> list[Amount]:
    """Every amount a text states, in order (module docstring); [] for no text."""
    if not isinstance(text, str):
        return []
    try:
        return [a for _, _, a in _spans(_normalize(text))]
    except Exception:  # noqa: BLE001 - never raises
        return []


def gold_amount(truth: object) -> Amount | None:
    """The gold amount of a cell: the whole cell, or the amount it starts with when words
    follow (``$400,000,000 increase.``); None when the gold is no amount."""
    if isinstance(truth, Amount):
        return truth
    whole = parse_amount(truth)
    if whole is not None or not isinstance(truth, str):
        return whole
    s = _normalize(truth)
    for start, _, amount in _spans(s):
        return amount if start == 0 else None
    return None


def _compatible(gold: Amount | None, a: Amount) -> bool:
    """Whether ``a`` is an amount of the gold's kind: no percent for a dollar gold, no dollar
    amount for a percent gold."""
    if gold is None:
        return True
    if gold.percent:
        return a.percent or (a.currency is None and a.magnitude is None)
    if gold.currency is not None or gold.magnitude is not None:
        return not a.percent
    return True


def answer_amounts(pred: object, gold: Amount | None = None, rules: AmountRules | None = None,
                   every: bool = False) -> list[Amount]:
    """The amount of an answer that counts (module docstring): the whole cell when it is one
    amount; in a sentence, after its last conclusion marker, the first amount of the gold's
    kind that is not a comparison's (after ``from``, ``compared with``, ``versus``, ``the prior
    year's``), and its negative too when a word gives its sign (``declined by 1.7%``).
    ``rules`` (:class:`AmountRules`): ``refusals`` makes a refusal state none; ``final_figure``
    takes a computation's final figure. ``every``: every amount of the gold's kind that is not a
    comparison's, and percents said in words (``text_gold``)."""
    rules = rules or STRICT
    if isinstance(pred, Amount):
        return [pred]
    whole = parse_amount(pred)
    if whole is not None:
        return [whole]
    if not isinstance(pred, str):
        return []
    s = _normalize(pred)
    if rules.refusals and _REFUSAL.search(s):
        return []
    spans = list(_spans(s))
    if every:
        out = [a for start, _, a in spans
               if _compatible(gold, a) and not _COMPARISON.search(s[max(0, start - 60):start])]
        return out + _percent_words(s)
    chosen: list[tuple[int, Amount]] = []
    if rules.final_figure and _CHAIN.search(_MARKDOWN.sub(" ", s)):
        plain = _MARKDOWN.sub(lambda m: " " * len(m.group(0)), s)   # same offsets as the spans
        chosen = _final_figure(plain, spans, gold)
    if not chosen:
        for mark in reversed([m.end() for m in _CONCLUSION.finditer(s)]):
            after = [x for x in spans if x[0] >= mark]
            if after:
                spans = after
                break
        stated = [(start, a) for start, _, a in spans if not _COMPARISON.search(s[max(0, start - 60):start])]
        chosen = [(start, a) for start, a in stated if _compatible(gold, a)][:1]
    out = [a for _, a in chosen]
    for start, a in chosen:       # "declined by 1.7%": the sign written as a word, either sign
        if a.value > 0 and _SIGN_WORD.search(s[max(0, start - 40):start]):
            out.append(Amount(-a.value, a.decimals, a.percent, a.currency, a.magnitude))
    return out


def _final_figure(s: str, spans: list[tuple[int, int, Amount]], gold: Amount | None) -> list[tuple[int, Amount]]:
    """The final figure of a computation (``final_figure``, module docstring): after the last
    conclusion marker, in the last sentence that states one, the first amount of the gold's kind
    that is neither an operand nor a comparison; [] when there is none."""
    marks = [m.end() for m in _CAREFUL_CONCLUSION.finditer(s)]
    for mark in reversed(marks):
        if any(x[0] >= mark for x in spans):
            spans = [x for x in spans if x[0] >= mark]
            break
    ends = [m.end() for m in _SENTENCE_END.finditer(s)]
    kept = []
    for start, end, a in spans:
        head = s[max(0, start - 60):start]
        if _COMPARISON.search(head) or _THAN.search(head) or not _compatible(gold, a):
            continue
        if _OPERAND_AFTER.match(s, end) or _OPERAND_BEFORE.search(head):
            continue
        kept.append((sum(e <= start for e in ends), start, a))
    if not kept:
        return []
    last = max(k[0] for k in kept)
    return [next((start, a) for n, start, a in kept if n == last)]


def _percent_words(s: str) -> list[Amount]:
    """Percents said in words (``eighty-seven percent``), for ``text_gold``."""
    out = []
    for m in _WORD_PERCENT.finditer(s):
        if m.group("small"):
            value = _WORD_UNITS[m.group("small")]
        else:
            value = _WORD_TENS[m.group("tens")] + (_WORD_UNITS[m.group("unit")] if m.group("unit") else 0)
        out.append(Amount(float(value), 0, percent=True))
    return out


# -- comparing amounts ------------------------------------------------------------------------

def _pairs(a: Amount, b: Amount, gold: bool) -> Iterator[tuple[float, float, float, float]]:
    """(a's value, b's value, a's unit, b's unit) for each reading of the pair: never a
    percent reading and a scale reading at once. ``gold``: ``a`` is a gold answer (a percent
    ``b`` of a bare ``a`` is then read as a fraction only)."""
    if a.percent != b.percent:
        other = b if a.percent else a
        if other.currency is not None or other.magnitude is not None:
            return
        if a.percent:        # b bare: as the percent (sign left out) or as a fraction
            yield a.value, b.value, 1.0, 1.0
            yield a.value, b.value * 100.0, 1.0, 100.0
        else:                # b a percent: a fraction of a bare a
            if not gold:
                yield a.value, b.value, 1.0, 1.0
            yield a.value, b.value * 0.01, 1.0, 0.01
        return
    if (a.magnitude is None) == (b.magnitude is None):
        yield a.value, b.value, a.magnitude or 1.0, b.magnitude or 1.0
        return
    # a number written out to a million or more is read as written ("$1,800,000")
    if a.magnitude is None:
        for u in IMPLICIT_UNITS if abs(a.value) < 1e6 else (1.0,):
            yield a.value * u, b.value, u, b.magnitude or 1.0
    else:
        for u in IMPLICIT_UNITS if abs(b.value) < 1e6 else (1.0,):
            yield a.value, b.value * u, a.magnitude or 1.0, u


def readings(a: Amount, b: Amount) -> Iterator[tuple[float, float, float]]:
    """(a's value, b's value, a's unit) for each reading of a gold ``a`` and a prediction ``b``
    (module docstring)."""
    for av, bv, au, _ in _pairs(a, b, gold=True):
        yield av, bv, au


def _currencies_clash(a: Amount, b: Amount) -> bool:
    return a.currency is not None and b.currency is not None and a.currency != b.currency


def _close(diff: float, tol: float) -> bool:
    return diff <= tol * (1 + 1e-9) + 1e-12


def amount_matches(t: Amount, p: Amount, rel_tol: float = 0.0, rules: AmountRules | None = None) -> bool:
    """Whether the prediction amount ``p`` states the gold amount ``t`` (module docstring;
    ``rules``: ``rounded_inputs_tol`` and ``ratio_percent`` of :class:`AmountRules`)."""
    rules = rules or STRICT
    if _currencies_clash(t, p):
        return False
    for tv, pv, tu, pu in _pairs(t, p, gold=True):
        diff = abs(pv - tv)
        if tv == 0:
            if _close(diff, rel_tol * abs(tv)):
                return True
            continue
        half_t = 0.5 * 10.0 ** -t.precision_decimals * tu
        half_p = 0.5 * 10.0 ** -p.decimals * pu
        # a currency amount is a sum of reported figures: exact; ratios, percents, days are computed
        slack = rules.rounded_inputs_tol * abs(tv) if t.currency is None and t.magnitude is None else 0.0
        if rules.ratio_percent and p.percent and not t.percent and p.decimals + 2 > t.precision_decimals:
            tol = half_p + slack           # a percent finer than the ratio gold: its own figure
        elif rules.ratio_percent and p.percent != t.percent and p.significant >= 2 and t.significant >= 2:
            tol = half_t + half_p + slack  # converted: two roundings of values within the slack
        else:
            tol = half_t
            if half_p > tol and p.significant >= 2:
                tol = half_p
            tol += slack
        if _close(diff, max(tol, rel_tol * abs(tv))):
            return True
    return False


def _as_amount(x: object) -> Amount | None:
    return x if isinstance(x, Amount) else parse_amount(x)


_QUESTION_UNIT = re.compile(
    r"(?:\busd|\bus\$|\$|\bdollars?)\s?(thousands?|millions?|billions?)\b"
    r"|\bin (?:(?:usd|us\$|\$)\s?)?(thousands?|millions?|billions?)\b")


def question_unit(question: str | None) -> float | None:
    """The unit a question asks amounts in (``in USD millions`` → 1e6, ``USD billions``,
    ``in USD million``, ``in $ millions``, ``in thousands``), or None."""
    m = _QUESTION_UNIT.search((question or "").lower())
    if not m:
        return None
    word = (m.group(1) or m.group(2)).rstrip("s")
    return {"thousand": 1e3, "million": 1e6, "billion": 1e9}[word]


_ASKED_DECIMALS = re.compile(r"\bround(?:ed|ing)?\b[^.?]{0,40}?\bto (one|two|three|four|[1-4]) decimal")


def question_decimals(question: str | None) -> int | None:
    """The decimals a question asks an answer rounded to (``Round your answer to two decimal
    places`` → 2), or None."""
    m = _ASKED_DECIMALS.search((question or "").lower())
    if not m:
        return None
    return {"one": 1, "two": 2, "three": 3, "four": 4}.get(m.group(1)) or int(m.group(1))


def _unit_readings(t: Amount, p: Amount, unit: float | None, rules: AmountRules) -> Iterator[Amount]:
    """``p``, and with ``unit_conversion`` an amount written out in full read in the question's
    unit (``$5,466,312,000`` in millions: 5466.312, to the dollar)."""
    yield p
    if (rules.unit_conversion and unit and t.magnitude is None and not t.percent and p.magnitude is None
            and not p.percent and abs(p.value) >= min(unit, 1e6)):
        yield Amount(p.value / unit, p.decimals + round(math.log10(unit)), False, p.currency, None)


def numeric_match(truth: object, pred: object, rel_tol: float = 0.0, unit: float | None = None,
                  rules: AmountRules | None = None, decimals: int | None = None) -> bool | None:
    """Whether the answer ``pred`` (an amount, or a sentence read for the amount it states)
    states the gold amount ``truth`` (module docstring); None when ``truth`` is not an amount
    (the metric does not cover the question), False when ``pred`` states none. ``unit``: the
    unit the question asks in (:func:`question_unit`): a gold written without a magnitude is in
    that unit, against an answer that writes one. ``rules``: a careful grader's readings
    (:class:`AmountRules`; None: the strict rules). ``decimals``: the decimals the question asks
    for (:func:`question_decimals`), read with ``asked_precision``."""
    rules = rules or STRICT
    t = gold_amount(truth)
    if t is None:
        return None
    if (rules.asked_precision and decimals is not None and decimals > t.decimals and t.currency is None
            and t.magnitude is None and unit is None):
        t = Amount(t.value, decimals, t.percent, None, None)
    every = rules.text_gold and isinstance(truth, str) and parse_amount(truth) is None
    if unit and rules.rounded_inputs_tol:      # an amount asked in USD millions: no rounded-inputs slack
        rules = replace(rules, rounded_inputs_tol=0.0)
    for p in answer_amounts(pred, t, rules, every=every):
        for q in _unit_readings(t, p, unit, rules):
            gold = t
            if unit and t.magnitude is None and not t.percent and q.magnitude is not None:
                gold = Amount(t.value * unit, t.decimals, False, t.currency, unit)
            if amount_matches(gold, q, rel_tol, rules):
                return True
    return False


def same_amount(a: object, b: object, rel_tol: float = 0.01) -> bool:
    """Whether two answers state the same amount, for grouping votes: symmetric, both must be
    amounts, ``|a - b| <= rel_tol * max(|a|, |b|)`` after the readings of :func:`numeric_match`
    (a bare number against a percent read either way)."""
    x, y = _as_amount(a), _as_amount(b)
    if x is None or y is None or _currencies_clash(x, y):
        return False
    for xv, yv, _, _ in _pairs(x, y, gold=False):
        if _close(abs(xv - yv), rel_tol * max(abs(xv), abs(yv))):
            return True
    return False


def normalize_text(s: str | None) -> str:
    """A free-text answer's grouping key: lower case, punctuation and articles out, whitespace
    collapsed (:func:`kohaku.tasks.score.text_match.normalize_answer`)."""
    return normalize_answer(s)
