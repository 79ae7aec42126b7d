"""How tests/data/financebench_amount_labels.csv was made (kept so the set can be read and
re-made; the CSV is the test data, this script is not run by the tests).

FinanceBench's public questions (``data/financebench_open_source.jsonl`` of
patronus-ai/financebench; never its ``results/`` folder). For each question whose gold states
one figure that answers it (the 52 bare amounts, the 2 golds that start with an amount, and 47
sentence golds whose figure was picked by hand: ``KEY`` below, the figure the question turns
on), three answers are written the way answering systems write them: sentences, hedges, units
(USD millions written as billions, percent as fraction), accounting negatives, computations,
refusals, and the usual mistakes (5 % off, off just past the gold's rounding, 100x/1000x slips,
the sign, a neighbouring year's figure). Each answer's label (``correct``/``incorrect``) is what
a person grading the answer against the gold says, and ``why`` says why. The styles are drawn
per question with a fixed seed. No kohaku code decides a label.

Usage: python tests/data/make_financebench_amount_labels.py FINANCEBENCH_JSONL OUT.csv
"""

from __future__ import annotations

import csv
import json
import random
import re
import sys
from decimal import Decimal

# the figure of a sentence gold, read by hand (financebench_id -> the figure as written)
KEY = {
    "financebench_id_01226": ("-1.7%", "operating margin decreased by 1.7%"),
    "financebench_id_01865": ("-0.9%", "the consumer segment shrunk by 0.9%"),
    "financebench_id_00807": ("0.96", "quick ratio 0.96"),
    "financebench_id_00540": ("9.5", "inventory turned 9.5 times"),
    "financebench_id_00799": ("0.69", "quick ratio 0.69 in FY2023"),
    "financebench_id_00684": ("-0.8%", "gross margin declined by 0.8%"),
    "financebench_id_01928": ("$2018 million", "Adj. EBITDA $2,018mn"),
    "financebench_id_00222": ("1.57", "quick ratio 1.57"),
    "financebench_id_00757": ("16%", "one customer 16% of revenue"),
    "financebench_id_00070": ("-$1561 million", "working capital -$1561M"),
    "financebench_id_00685": ("-1.1%", "gross margin declined 1.1%"),
    "financebench_id_00288": ("-42%", "cash declined ~42%"),
    "financebench_id_00460": ("-1.32%", "store count declined 1.32%"),
    "financebench_id_00585": ("0.62%", "FY2022 effective tax rate 0.62%"),
    "financebench_id_00005": ("$831 million", "working capital $831 million"),
    "financebench_id_00790": ("1.82%", "FY2022 ROA 1.82%"),
    "financebench_id_01244": ("$0.55", "quarterly dividend $0.55 a share"),
    "financebench_id_00956": ("1.3%", "sales grew 1.3%"),
    "financebench_id_00711": ("2.7", "inventory turned 2.7 times"),
    "financebench_id_00651": ("3.5%", "adjusted EPS growth 3.5% in FY2023"),
    "financebench_id_01490": ("$20 billion", "a gain of about $20 billion"),
    "financebench_id_01491": ("$13.2 billion", "cash proceeds $13.2 billion"),
    "financebench_id_01487": ("20.1%", "net earnings 20.1% of sales"),
    "financebench_id_00299": ("-$473 million", "Corporate, net revenue -$473 million"),
    "financebench_id_02119": ("$66.56", "$66.56 a share"),
    "financebench_id_00394": ("$3725 million", "CIB net income $3725 million"),
    "financebench_id_01254": ("$0.01", "dividend $0.01 a share"),
    "financebench_id_00382": ("90%", "Las Vegas ~90% of EBITDAR"),
    "financebench_id_01912": ("-44%", "MGM China revenue declined 44%"),
    "financebench_id_00407": ("82%", "corporate bonds ~82% of the investments"),
    "financebench_id_00552": ("-$2.5 billion", "debt decreased by $2.5bn"),
    "financebench_id_00080": ("$1.6 billion", "working capital $1.6Bn"),
    "financebench_id_01328": ("$411 million", "restructuring costs $411 million"),
    "financebench_id_00882": ("$8,400,000,000", "may borrow $8,400,000,000"),
    "financebench_id_01476": ("1 percentage point", "guidance raised by 1 percentage point"),
    "financebench_id_00859": ("$32,502 million", "cross currency swaps, notional $32,502 million"),
    "financebench_id_00216": ("0.54", "quick ratio ~0.54"),
    "financebench_id_00215": ("2.77", "capital intensity 2.774729, i.e. 2.77"),
    "financebench_id_00566": ("-$229 million", "debt decreased by $229 million"),
    "financebench_id_01290": ("40%", "US government 40% of revenue"),
    "financebench_id_01351": ("-3.0 percentage points", "ETR from 24.6% to 21.6%: -3.0 points"),
    "financebench_id_01346": ("3 percentage points", "ETR from 20% to 23%: +3 points"),
    "financebench_id_00438": ("34.6%", "FY2022 operating margin 34.6%"),
    "financebench_id_00591": ("156%", "FY2022 FCF conversion 156%"),
    "financebench_id_01484": ("3.0%", "US sales grew 3.0%"),
    "financebench_id_02024": ("$1097 million", "pension benefits $1097 million"),
    "financebench_id_01275": ("$1.8 billion", "operating cash flow $1.8 bn"),
}

AMOUNT = re.compile(r"^\(?-?\$?-?[\d,]*\.?\d+\)?%?$")


def decimal_places(text: str) -> int:
    m = re.search(r"\.(\d+)", text)
    return len(m.group(1)) if m else 0


def parse_gold(text: str) -> tuple[Decimal, str, int, float]:
    """(number, kind: percent|money|plain, decimals, magnitude) of a gold figure as written."""
    s = text.strip().rstrip(".").replace(",", "")
    s = re.sub(r"\s*increase$", "", s)
    s = s.split(". ")[0]
    kind = "percent" if ("%" in s or "percentage point" in s) else "money" if "$" in s else "plain"
    mag = 1.0
    for word, m in (("million", 1e6), ("billion", 1e9)):
        if word in s:
            mag, s = m, s.replace(word, "")
    neg = s.strip().startswith("-") or s.strip().startswith("(")
    num = re.search(r"\d*\.?\d+", s).group(0)
    return (Decimal(num) * (-1 if neg else 1)), kind, decimal_places(num), mag


def question_unit(q: str) -> float:
    m = re.search(r"usd (millions|billions)", q.lower())
    return {"millions": 1e6, "billions": 1e9}[m.group(1)] if m else 1.0


def fmt(x: float, places: int, commas: bool = True) -> str:
    s = f"{abs(x):,.{places}f}" if commas else f"{abs(x):.{places}f}"
    return ("-" if x < 0 else "") + s


def money_forms(value: float, places: int, unit: float) -> list[str]:
    """Ways to write a dollar figure (value in `unit` dollars)."""
    usd = value * unit
    out = []
    if unit >= 1e6 or abs(usd) >= 1e6:
        m = usd / 1e6
        out.append(f"${fmt(m, 0 if abs(m) >= 100 else max(places, 1))} million")
        if abs(usd) >= 1e9:
            out.append(f"${fmt(usd / 1e9, 3 if abs(usd) < 1e10 else 2)} billion")
        out.append(f"{fmt(m, 0 if abs(m) >= 100 else 1, commas=False)}M")
    else:
        out.append(f"${fmt(usd, 2)}")
    return out


def render(value: float, kind: str, places: int, unit: float, style: int = 0) -> str:
    if kind == "percent":
        return [f"{fmt(value, places)}%", f"{fmt(value, places)} percent"][style % 2]
    if kind == "money":
        forms = money_forms(value, places, unit)
        return forms[style % len(forms)]
    return fmt(value, places, commas=False)


CORRECT = ["bare", "sentence", "compute", "hedge", "context", "alt_unit", "round", "accounting",
           "words"]
WRONG = ["off5", "near", "scale", "sign", "refusal", "refusal_num", "input_only", "context_wrong"]


def make_rows(q: dict, gold_text: str, figure: str, key_note: str | None, rng: random.Random) -> list[dict]:
    number, kind, places, mag = parse_gold(figure)
    unit = mag if mag != 1.0 else (question_unit(q["question"]) if kind == "money" else 1.0)
    if kind == "money" and mag == 1.0 and unit == 1.0 and abs(number) >= 1000:
        unit = 1e6 if "millions" in q["question"].lower() else 1.0
    g = float(number)
    company = q["company"]
    period = (re.search(r"FY ?\d{4}|20\d\d", q["question"]) or re.search(r"", "")).group(0) or "the period"
    show = lambda v, st=0: render(v, kind, places, unit, st)  # noqa: E731

    def show_other(v: float, st: int = 0) -> str:
        """A figure other than the gold, written with enough decimals to differ from it."""
        for p in range(places, places + 4):
            if round(v, p) != round(g, p):
                return render(v, kind, p, unit, st)
        return render(v, kind, places + 4, unit, st)

    base = f"gold {gold_text!r}" + (f" (the figure: {key_note})" if key_note else "")
    rows = []
    styles = rng.sample(CORRECT, 2) + rng.sample(WRONG, 2)
    rng.shuffle(styles)
    negative = g < 0
    for style in styles[:3]:
        if style == "accounting" and not negative:
            style = "bare"
        if style == "words" and not negative:
            style = "sentence"
        if style == "sign" and g == 0:
            style = "off5"
        if style in ("near", "round") and len(str(abs(number)).replace(".", "").lstrip("0")) < 3:
            style = "hedge" if style == "round" else "off5"
        if style == "round" and places < 2:
            style = "hedge"
        if style == "off5" and g == 0:
            style = "refusal"
        label, why = "correct", ""
        if style == "bare":
            ans, why = show(g, rng.randrange(3)), "the gold figure, in another notation"
        elif style == "sentence":
            ans = rng.choice([f"{company}'s figure for {period} was {show(g, 1)}.",
                              f"Based on the filing, it is {show(g)}.",
                              f"The answer is {show(g, 1)} for {period}."])
            why = "a sentence stating the gold figure"
        elif style == "compute":
            b = round(rng.uniform(1500, 9000), 0)
            a = round(g * b, 1) if kind != "percent" else round(g * b / 100, 1)
            ans = f"Using the reported figures, {a:,.1f} / {b:,.0f} = {show(g)}."
            why = "a computation whose result is the gold figure"
        elif style == "hedge":
            ans = f"Approximately {show(g, 1)}, based on the figures in the filing."
            why = "a hedged answer with the gold figure"
        elif style == "context":
            other = g * rng.choice([0.82, 0.9, 1.12, 1.25])
            ans = f"{show(g)} in {period}, compared with {show_other(other, 0)} a year earlier."
            why = "the gold figure for the period asked, a prior-year figure beside it"
        elif style == "alt_unit":
            if kind == "percent":
                ans, why = f"{g / 100:.{places + 2}f}", "the gold percent written as a fraction"
            elif kind == "money":
                forms = money_forms(g, places, unit)
                ans, why = forms[-1] if len(forms) > 1 else forms[0], "the gold amount in another unit"
            else:
                ans, why = f"{fmt(g, places, False)}x", "the gold ratio written as a multiple"
        elif style == "round":
            p2 = max(places - 1, 0) if places else 0
            if places == 0:   # round a whole number to its hundreds in a larger unit
                ans = show(g, 1)
                why = "the gold figure in a larger unit"
            else:
                ans = render(round(g, p2), kind, p2, unit)
                why = f"the gold figure rounded to {p2} decimals"
        elif style == "words":
            ans = rng.choice([f"It declined by {show(-g)} in {period}.", f"A decrease of {show(-g)}.",
                              f"{company} reported a negative figure of {show(-g)}."])
            why = "the negative gold figure, its sign written as a word"
        elif style == "accounting":
            ans = f"({render(-g, kind, places, unit)})"
            why = "the negative gold figure in accounting parentheses"
        else:
            label = "incorrect"
            if style == "off5":
                v = g * rng.choice([0.95, 1.05])
                ans, why = show_other(v, 1), "5 % off the gold figure"
                if round(v, places) == round(g, places):
                    label = "correct"
                    why = (f"5 % off, but the gold is written to {places} decimals and this rounds "
                           "to it: a person reads it as the gold figure")
            elif style == "near":
                v = g * rng.choice([0.994, 1.006])
                step = 10 ** -places * (unit if kind == "money" and mag != 1.0 else 1)
                if abs(v - g) < 1.5 * (step if mag == 1.0 else step / mag):
                    v = g + 3 * 10 ** -places * (1 if rng.random() < 0.5 else -1)
                ans = render(v, kind, places, unit)
                why = "a different figure just past the gold's rounding"
            elif style == "scale":
                if kind == "percent":
                    ans, why = f"{fmt(g / 100, places + 2)}%", "a 100x slip: the fraction written with %"
                elif kind == "money":
                    number_text = fmt(g * unit / (mag if mag != 1.0 else unit), places)
                    smaller = {1e9: "million", 1e6: "thousand"}
                    if mag != 1.0:
                        ans = f"${number_text} {smaller.get(mag, 'thousand')}"
                    elif unit == 1e6:
                        ans = f"${number_text} billion"
                    elif unit == 1e9:
                        ans = f"${number_text} million"
                    else:
                        ans = f"${fmt(g * 1000, 0)}"
                    why = "a 1,000x slip in the unit"
                else:
                    ans, why = f"{fmt(g, places)}%", "a 100x slip: the ratio written as a percent"
            elif style == "sign":
                ans, why = show(-g), "the sign reversed"
            elif style == "refusal":
                ans = rng.choice(["The provided excerpts do not contain enough information to answer.",
                                  "I cannot determine this from the documents given.",
                                  "Not disclosed in the filing."])
                why = "a refusal"
            elif style == "refusal_num":
                ans = (f"The filing does not give the {period} figure directly; the prior year's "
                       f"was {show_other(g * 0.87)}.")
                why = "a refusal that quotes another year's figure"
            elif style == "input_only":
                v = g * 1.31
                ans = f"{show(g)} + {show_other(g * 0.31)} = {show_other(v)}."
                why = "the gold figure is an input of a computation whose result is wrong"
            else:  # context_wrong
                v = g * 1.17
                ans = f"{show_other(v)} in {period}, compared with {show(g)} a year earlier."
                why = ("the figure given for the period asked is wrong; the gold figure appears as "
                       "the prior year's")
        rows.append({"financebench_id": q["financebench_id"], "question": q["question"], "gold": gold_text,
                     "gold_figure": figure, "answer": ans, "label": label, "style": style,
                     "why": f"{why}; {base}"})
    return rows


def main(src: str, out: str) -> None:
    qs = [json.loads(line) for line in open(src, encoding="utf-8")]
    rows = []
    for q in qs:
        gold = q["answer"].strip()
        first = gold.split(". ")[0].rstrip(".").replace(" increase", "")
        if AMOUNT.match(first.replace(" ", "")):
            figure, note = first, None
        elif q["financebench_id"] in KEY:
            figure, note = KEY[q["financebench_id"]]
        else:
            continue
        rng = random.Random(q["financebench_id"])
        rows += make_rows(q, gold.splitlines()[0][:160], figure, note, rng)
    with open(out, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, ["financebench_id", "question", "gold", "gold_figure", "answer", "label", "style", "why"])
        w.writeheader()
        w.writerows(rows)
    print(f"{len(rows)} answers over {len({r['financebench_id'] for r in rows})} questions -> {out}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
