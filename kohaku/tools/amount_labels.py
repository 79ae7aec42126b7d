"""A labelled set of amount answers, built from FinanceBench's public questions and gold only
(``scripts/make_amount_labels.py``; issue 58).

For each question of ``data/financebench_open_source.jsonl`` whose gold is an amount, or text
that begins with one (:func:`kohaku.tasks.score.amounts.gold_amount`), answers are written in the
styles graders meet, each with the label its construction gives it: what a careful person
grading against the gold accepts. No kohaku metric decides a label; the answer's ground truth
is how it was made:

correct (the gold's figure, written another way):
  ``exact``             the gold's figure in a sentence;
  ``rounded_inputs``    a computed figure (ratio, percent, days: not a currency amount) from
                        inputs rounded as filings round them: the gold's figure moved by 0.02 %
                        to 0.1 % (the issue's "within about 0.1 %") and written to the gold's
                        decimals or one more (``42.67`` for ``42.69``);
  ``percent_for_ratio`` a ratio gold's value as a percent of the same precision, converted from a
                        value that rounds to the gold (near the edge of its rounding interval)
                        moved by at most 0.1 % (``7.8%`` for ``0.079``: the issue's human calls),
                        or a percent gold as its fraction;
  ``units``             a currency amount written in full dollars or another unit than the
                        question's (``$5,466,312,000`` for ``5466`` asked in USD millions),
                        the dollars any point of the gold's rounding interval;
  ``chain``             a computation whose final figure is the gold's (its inputs before it,
                        with or without ``therefore``);
  ``text_gold``         a text gold's leading number said in a sentence, after other figures or
                        in words;
incorrect (wrong twins of the same shape):
  ``other_figure``      another figure: the gold's value moved 4 % to 25 % (at least 3 units of
                        its last digit), written as the gold is; a text gold's with another number;
  ``other_quantity``    a figure of another quantity: 1,000x (a unit slip) for an amount, the
                        ratio read as a percent (``0.66%`` for ``0.66``), the inverse ratio,
                        or, for a ratio gold asked to two decimals written with one significant
                        digit, the unrounded ratio as a finer percent (``-1.53%`` for ``-0.02``,
                        the issue's human call);
  ``chain_intermediate`` a computation where the gold's figure is an input and the final figure
                        another;
  ``refusal``           an answer that says the figure is not disclosed and cannot be determined,
                        and still ends with a number (the gold's, or 0).

The draws use a fixed seed: the same snapshot gives the same file. The CSV has ``id``,
``financebench_id``, ``question``, ``gold``, ``answer``, ``label`` (correct/incorrect),
``style`` and ``why``; ``scripts/calibrate_metric.py FILE --task financebench --metric numeric``
reads it. Nothing of FinanceBench is committed: the snapshot is read where it is and the set
written where the caller says.
"""

from __future__ import annotations

import csv
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from kohaku.tasks.score.amounts import Amount, gold_amount, parse_amount, question_unit

_ASKED = re.compile(r"round(?:ed)?\b[^.?]{0,40}?\bto (one|two|three|1|2|3) decimal")
_ASKED_WORDS = {"one": 1, "two": 2, "three": 3, "1": 1, "2": 2, "3": 3}
FIELDS = ("id", "financebench_id", "question", "gold", "answer", "label", "style", "why")
_WORDS = {0: "zero", 1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight",
          9: "nine", 10: "ten", 11: "eleven", 12: "twelve", 13: "thirteen", 14: "fourteen", 15: "fifteen",
          16: "sixteen", 17: "seventeen", 18: "eighteen", 19: "nineteen"}
_TENS = {2: "twenty", 3: "thirty", 4: "forty", 5: "fifty", 6: "sixty", 7: "seventy", 8: "eighty", 9: "ninety"}


def number_words(n: int) -> str:
    """0-99 in words (``87`` → ``eighty-seven``)."""
    if n < 20:
        return _WORDS[n]
    tens, unit = divmod(n, 10)
    return _TENS[tens] + ("-" + _WORDS[unit] if unit else "")


@dataclass
class Gold:
    """A question's gold amount, as the generator writes figures for it."""

    qid: str
    question: str
    text: str               # the gold cell
    amount: Amount
    unit: float | None      # the question's unit (USD millions: 1e6)
    whole: bool             # the whole cell is the amount (else text that begins with one)
    company: str = ""       # the question's company ("3M": a name, not an amount)

    @property
    def year(self) -> str:
        m = re.search(r"\bFY ?\d{4}\b", self.question)
        return m.group(0) if m else "the period asked"

    @property
    def decimals(self) -> int:
        """The gold's precision: its written decimals, or the decimals the question asks for
        when more ("0.8" asked to two decimal places is 0.80)."""
        written = self.amount.precision_decimals
        m = _ASKED.search(self.question.lower())
        if m and self.kind != "currency":
            return max(written, _ASKED_WORDS.get(m.group(1), 0))
        return written

    @property
    def value(self) -> float:
        """The figure in the unit it is written in (a percent's number, a currency in the
        question's unit or as written)."""
        return self.amount.value / (self.amount.magnitude or 1.0)

    @property
    def kind(self) -> str:
        a = self.amount
        if a.percent:
            return "percent"
        if a.currency is not None or a.magnitude is not None or self.unit is not None:
            return "currency"
        return "ratio"


def read_questions(source: str | Path) -> list[dict]:
    """The public questions of a FinanceBench copy: a checkout, a git directory (never its
    ``results/`` folder) or the JSON-lines file itself."""
    path = Path(source)
    if path.is_file():
        text = path.read_text(encoding="utf-8")
    else:
        from kohaku.tools.fetch_financebench import QUESTIONS, Source

        text = Source.open(path).read(QUESTIONS).decode("utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def golds(questions: list[dict]) -> list[Gold]:
    """The questions whose gold is an amount or begins with one."""
    out = []
    for q in questions:
        a = gold_amount(q.get("answer") or "")
        if a is None:
            continue
        out.append(Gold(q["financebench_id"], q["question"], q["answer"], a, question_unit(q["question"]),
                        parse_amount(q["answer"]) is not None, q.get("company") or ""))
    return out


# -- writing figures ---------------------------------------------------------------------------

def _num(x: float, d: int, commas: bool = True) -> str:
    d = max(d, 0)
    s = f"{abs(x):,.{d}f}" if commas else f"{abs(x):.{d}f}"
    return ("-" if x < 0 and float(s.replace(",", "")) != 0 else "") + s


def write(g: Gold, x: float, d: int | None = None) -> str:
    """The figure ``x`` (in the gold's written unit) written as the gold writes it."""
    d = g.decimals if d is None else d
    a = g.amount
    if a.percent:
        return _num(x, d) + "%"
    if g.kind == "currency":
        mag = a.magnitude or g.unit
        word = {1e3: " thousand", 1e6: " million", 1e9: " billion"}.get(mag or 0, "")
        sign = "-" if x < 0 else ""
        return f"{sign}${_num(abs(x), d)}{word}"
    return _num(x, d, commas=False)


def _unrounded(rng: random.Random, g: Gold, edge: bool) -> float:
    """A value the gold is the rounding of: any point of its rounding interval (near an edge
    when ``edge``)."""
    h = 0.5 * 10.0 ** -g.decimals
    u = rng.uniform(0.6, 0.999) if edge else rng.uniform(0.0, 0.999)
    return g.value + rng.choice((-1, 1)) * u * h


def _rounded_inputs(rng: random.Random, x: float) -> float:
    """``x`` as computed from rounded inputs: moved by 0.02 % to 0.1 %."""
    return x * (1 + rng.choice((-1, 1)) * rng.uniform(0.0002, 0.001))


def _other(rng: random.Random, g: Gold) -> float:
    """Another figure: 4 % to 25 % away and at least 3 units of the gold's last digit."""
    unit = 10.0 ** -g.decimals
    if g.value == 0:
        return rng.choice((1, 2, 5)) * unit * rng.choice((3, 10, 40))
    for _ in range(100):
        y = g.value * (1 + rng.choice((-1, 1)) * rng.uniform(0.04, 0.25))
        if abs(round(y, g.decimals) - g.value) >= 3 * unit - 1e-12:
            return y
    return g.value + rng.choice((-1, 1)) * 5 * unit


# -- the answers -------------------------------------------------------------------------------

def answers(g: Gold, rng: random.Random) -> Iterator[tuple[str, bool, str, str]]:
    """(answer, label, style, why) for one gold."""
    ex = write(g, g.value)
    yield (rng.choice([f"The answer is {ex}.", f"{ex}", f"It was {ex} for the period asked.",
                       f"Based on the filing, the figure is {ex}."]), True, "exact", "the gold's figure")
    if g.kind in ("ratio", "percent") and g.whole:
        for extra in (0, 0, 1):
            fig = write(g, _rounded_inputs(rng, g.value), g.decimals + extra)
            yield (rng.choice([fig, f"The result is approximately {fig}.", f"About {fig}."]), True,
                   "rounded_inputs", "the gold's unrounded value from inputs rounded (<= 0.1 %), rounded")
    if g.kind == "ratio" and g.value != 0 and abs(g.value) <= 2 and g.decimals >= 1:
        for edge in (True, False):
            x = _rounded_inputs(rng, _unrounded(rng, g, edge))
            fig = _num(100 * x, max(g.decimals - 2, 0)) + "%"
            yield (rng.choice([fig, f"The ratio is {fig}.", f"Approximately {fig}."]), True, "percent_for_ratio",
                   "the ratio as a percent of the same precision")
    if g.kind == "percent" and g.whole and g.value != 0:
        x = _rounded_inputs(rng, _unrounded(rng, g, False)) / 100
        fig = _num(x, g.decimals + 2, commas=False)
        yield (f"As a fraction, {fig}.", True, "percent_for_ratio", "the percent as its fraction")
    if g.kind == "currency" and g.whole and g.value != 0:
        scale = g.amount.magnitude or g.unit or 1.0
        if scale >= 1e3:
            dollars = round(_unrounded(rng, g, rng.random() < 0.5) * scale)
            if g.decimals == 0 or rng.random() < 0.5:
                dollars = round(dollars, -3) if abs(dollars) >= 1e6 else dollars
            full = ("-" if dollars < 0 else "") + f"${abs(dollars):,}"
            yield (rng.choice([full, f"The amount was {full}.", f"{full} in total."]), True, "units",
                   "the amount written in full dollars")
            x = _unrounded(rng, g, True) * scale
            sign = "-" if x < 0 else ""
            if scale == 1e6:
                other = f"{sign}${abs(x) / 1e6:,.3f} million"
            elif scale == 1e9:
                other = f"{sign}${abs(x) / 1e6:,.0f} million"
            else:
                other = f"{sign}${abs(x):,.0f}"
            yield (f"It comes to about {other}.", True, "units",
                   "the amount in another unit or more precise than the gold")
        else:                          # "$0.52" a share, "$400,000,000": written in millions
            if abs(g.value) >= 1e6:
                fig = f"${g.value / 1e6:,.{max(0, g.decimals)}f} million"
                yield (f"An increase of {fig}.", True, "units", "the amount in millions")
    yield from _chains(g, rng)
    if not g.whole:
        n = int(round(g.value))
        if g.amount.percent and 0 < n < 100:
            yield (f"Of the figures shown (Q2, {rng.randint(3, 9)} line items), {n}% is the part asked about.",
                   True, "text_gold", "the text gold's leading number after other figures")
            yield (f"Roughly {number_words(n)} percent of the total.", True, "text_gold",
                   "the text gold's leading number in words")
            yield (f"The part asked about is {n} percent of it.", True, "text_gold",
                   "the text gold's leading number with the word percent")
            yield (f"Out of ${rng.randint(40, 900)} million, the part asked about ({n}%) dominates.", True,
                   "text_gold", "the text gold's leading number in parentheses after an amount")
            yield (f"{100 - n}% of the total is the other part.", False, "other_quantity",
                   "the rest's share, another quantity")
            m = min(99, max(1, n + rng.choice((-1, 1)) * rng.randint(5, 15)))
            yield (f"About {m}% of the total.", False, "other_figure", "another number than the gold's")
            yield (f"Roughly {number_words(m)} percent of the total.", False, "other_figure",
                   "another number in words")
    who = g.company or "The company"
    yield (f"In {g.year}, {who} reported {ex}.", True, "exact", "the gold's figure with the company and year")
    # the wrong twins
    y = _other(rng, g)
    yield (f"In {g.year}, {who} reported {write(g, y)}.", False, "other_figure",
           "another figure, with the company and year")
    yield (rng.choice([f"The answer is {write(g, y)}.", write(g, y), f"It was {write(g, y)}."]), False,
           "other_figure", "another figure (4-25 % off)")
    yield from _other_quantities(g, rng)
    what = rng.choice(["this figure", "the figure needed", "the amount asked for", "the line item"])
    tail = ex if g.value != 0 and rng.random() < 0.6 else "0"
    yield (rng.choice([f"The excerpts do not disclose {what}, so it cannot be determined; the value is {tail}.",
                       f"{what.capitalize()} is not disclosed in the filing. Therefore the answer is {tail}.",
                       f"Unable to determine {what} from the provided documents: {tail}"]), False, "refusal",
           "a refusal that ends with a number")


def _inputs(rng: random.Random, g: Gold, x: float) -> tuple[str, str, str]:
    """Two inputs and the operator of a computation whose result is ``x``."""
    if g.kind == "currency":
        scale = g.amount.magnitude or g.unit or 1.0
        base = x * scale / 1e6 if scale >= 1e6 else x
        a = round(abs(base) * rng.uniform(1.1, 1.6))
        b = a - round(base)
        return f"{a:,}", f"{b:,}", "-"
    b = rng.randint(1200, 48000)
    a = (x / 100 if g.kind == "percent" else x) * b
    return f"{a:,.0f}", f"{b:,}", "/"


def _chains(g: Gold, rng: random.Random) -> Iterator[tuple[str, bool, str, str]]:
    if not g.whole or g.value == 0:
        return
    x = g.value
    fig = write(g, x)
    a, b, op = _inputs(rng, g, x)
    if op == "/":              # the quotient of the rounded inputs, to two more decimals
        q = float(a.replace(",", "")) / float(b.replace(",", "")) * (100 if g.kind == "percent" else 1)
        more = write(g, q, g.decimals + 2)
    else:
        more = fig
    yield (f"Step 1: the first figure is {a}. Step 2: the second is {b}. Step 3: {a} {op} {b} = {more}. "
           f"Therefore, the answer is approximately {fig}.", True, "chain", "a computation ending with the gold's figure")
    yield (f"The filing gives {a} and {b}. Dividing and rounding as asked, the result is approximately {fig}."
           if op == "/" else f"The filing gives {a} and {b}; subtracting the second from the first, the result is {fig}.",
           True, "chain", "a computation without a conclusion marker, ending with the gold's figure")
    yield (f"The result is approximately {fig} ({a} {op} {b}).", True, "chain",
           "the figure first, its inputs after it")
    yield (f"**Step 1**: the inputs are {a} and {b}.\n**Step 2**: {a} {op} {b}\n**Answer:** {fig}", True, "chain",
           "steps on separate lines, the answer last")
    y = _other(rng, g)
    a2, b2, op2 = _inputs(rng, g, y)
    yield (f"**Step 1**: the prior period gives {a} {op} {b} = {fig}.\n**Step 2**: the period asked gives "
           f"{a2} {op2} {b2}.\n**Answer:** {write(g, y)}", False, "chain_intermediate",
           "steps on separate lines: the gold's figure an intermediate, the answer another")
    yield (f"Using the prior period's figures, {a} {op} {b} = {fig}. For the period asked, "
           f"{a2} {op2} {b2} = {write(g, y)}.", False, "chain_intermediate",
           "the gold's figure is an input of the prior period; the final figure is another")
    yield (f"First, {a} {op} {b} gives {fig} for the prior year. Dividing the current year's figures, "
           f"the result is approximately {write(g, y)}." if op == "/" else
           f"First, {a} {op} {b} gives {fig} for the prior year; the year asked, subtracting its figures, "
           f"comes out at {write(g, y)}.", False, "chain_intermediate",
           "the gold's figure is an intermediate; the final figure is another")


def _other_quantities(g: Gold, rng: random.Random) -> Iterator[tuple[str, bool, str, str]]:
    if g.value == 0:
        return
    if g.kind == "currency" and g.whole:
        scale = g.amount.magnitude or g.unit or 1.0
        slip = {1e6: " billion", 1e9: " trillion", 1e3: " million"}.get(scale)
        if slip:
            yield (f"${_num(abs(g.value), g.decimals)}{slip}", False, "other_quantity", "a 1,000x unit slip")
        elif scale == 1.0 and abs(g.value) >= 1e6:
            yield (f"${abs(g.value) / 1e3:,.0f}", False, "other_quantity", "dollars read as thousands")
    elif g.kind == "ratio":
        yield (f"{write(g, g.value)}%", False, "other_quantity", "the ratio's number read as a percent (100x)")
        if abs(g.value) > 0.05 and abs(1 / g.value - g.value) > 0.1 * abs(g.value):
            yield (f"The inverse is {_num(1 / g.value, max(g.decimals, 2), commas=False)}.", False, "other_quantity",
                   "the inverse ratio")
        if g.amount.significant == 1 and g.decimals == 2 and "two decimal" in g.question.lower():
            lo, hi = sorted((abs(g.value) - 0.0049, abs(g.value) * 0.85 if abs(g.value) > 0.01 else 0.0149))
            x = rng.uniform(min(lo, hi), max(lo, hi))
            x = x if abs(abs(x) - abs(g.value)) > 0.1 * abs(g.value) else abs(g.value) * 0.76
            x = -x if g.value < 0 else x
            yield (f"The ratio is {100 * x:.2f}%.", False, "other_quantity",
                   "the unrounded ratio as a percent to two decimals, not the ratio asked to two decimals")
    elif g.kind == "percent" and g.whole:
        yield (f"{_num(g.value / 100, g.decimals + 2, commas=False)}%", False, "other_quantity",
               "the percent's fraction written as a percent (100x)")


def build_rows(questions: list[dict], seed: int = 58) -> list[dict[str, str]]:
    """The labelled answers (module docstring), in the order of the questions."""
    rng = random.Random(seed)
    rows: list[dict[str, str]] = []
    for g in golds(questions):
        seen = set()
        for item in answers(g, rng):
            answer, label, style, why = item
            if answer in seen:
                continue
            seen.add(answer)
            rows.append({"id": f"{g.qid}-{len(seen)}", "financebench_id": g.qid, "question": g.question,
                         "gold": g.text, "answer": answer, "label": "correct" if label else "incorrect",
                         "style": style, "why": f"{why}; gold {g.text[:40]!r}"})
    return rows


def write_csv(rows: list[dict[str, str]], out: str | Path) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    return out
