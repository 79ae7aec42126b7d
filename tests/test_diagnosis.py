"""Error classes (kohaku/tasks/rooms/wattbot/diagnosis.py): one hand-made question per class, the partition and its
agreement with the metric, the finer details, the splits."""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl
import pytest

from kohaku.tasks.rooms.wattbot.diagnosis import CLASSES, answer_kind, classify, error_lines, error_summary, scale_factor
from kohaku.tasks.rooms.wattbot.metric import score_frames

SOLUTIONS = Path(__file__).resolve().parents[2] / "shared" / "data" / "wattbot" / "solutions_public.csv"

# (id, question, truth value, truth ref, submitted value, submitted ref, class, detail)
CASES = [
    ("c1", "How many?", "24", "['a']", "24", "['a']", "correct", ""),
    ("c2", "How many?", "24", "['a']", None, None, "missing", ""),
    ("c3", "What is it?", "is_blank", "is_blank", "12", "['a']", "answered_na", ""),
    ("c4", "How many?", "24", "['a']", "is_blank", "is_blank", "needless_abstention", ""),
    ("c5", "How many?", "24", "['a', 'b']", "24", "['a']", "wrong_ref", "ref jaccard 0.50"),
    ("c6", "How much energy?", "2000000000", "['a']", "2", "['a']", "scale", "x1e-9"),
    ("c7", "How many?", "100", "['a']", "104", "['a']", "near_miss", "+4.0%"),
    ("c8", "How many?", "100", "['a']", "130", "['a']", "wrong_number", ""),
    ("c9", "What range?", "[29,49]", "['a']", "[10,20]", "['a']", "wrong_range", "disjoint"),
    ("c10", "Which model?", "Hivemind", "['a']", "Petals", "['a']", "wrong_name", ""),
    ("c11", "Which ones?", "['ABC', 'DEF', 'GHI']", "['a']", "['ABC', 'XYZ']", "['a']", "wrong_list", "1 of 3 items"),
    # more than one case per class where the rule has branches
    ("d1", "What is it?", "is_blank", "is_blank", "is_blank", "is_blank", "correct", ""),
    ("d2", "What is it?", "is_blank", "is_blank", "is_blank", "['a']", "wrong_ref", "ref jaccard 0.00"),
    ("d3", "How long?", "60", "['a']", "1", "['a']", "scale", "unit /60"),
    ("d4", "How long?", "2", "['a']", "120", "['a']", "scale", "unit x60"),
    ("d5", "True or False: it rains.", "1", "['a']", "0", "['a']", "wrong_name", "bool"),
    ("d6", "How much energy?", "2000000000", "['a']", "2B", "['a']", "wrong_number", "format"),
    ("d7", "How many?", "24", "['a']", "many", "['a']", "wrong_number", "not a number"),
    ("d8", "What range?", "[29,49]", "['a']", "[30,60]", "['a']", "wrong_range", "overlap"),
    ("d9", "What range?", "[29,49]", "['a']", "55", "['a']", "wrong_range", "number outside the range"),
    ("d10", "What range?", "[1,4]", "['a']", "[1000,4000]", "['a']", "scale", "x1e3"),
    ("d11", "How much?", "100", "['a']", "90.5", "['a']", "near_miss", "-9.5%"),
    ("d12", "How much?", "100", "['a']", "89", "['a']", "wrong_number", ""),
]


def frames(cases=CASES) -> tuple[pl.DataFrame, pl.DataFrame]:
    sol = pl.DataFrame({
        "id": [c[0] for c in cases], "question": [c[1] for c in cases], "answer_value": [c[2] for c in cases],
        "ref_id": [c[3] for c in cases],
    })
    present = [c for c in cases if c[4] is not None]
    sub = pl.DataFrame({
        "id": [c[0] for c in present], "answer_value": [c[4] for c in present],
        "ref_id": [c[5] for c in present], "explanation": ["e"] * len(present),
    })
    return sol, sub


def classified(variant: str = "wattbot") -> pl.DataFrame:
    sol, sub = frames()
    return classify(score_frames(sol, sub, variant).table)


def test_one_hand_made_question_per_class():
    table = classified()
    got = {r["qid"]: (r["error_class"], r["error_detail"]) for r in table.iter_rows(named=True)}
    assert got == {c[0]: (c[6], c[7]) for c in CASES}
    assert {c[6] for c in CASES} == set(CLASSES)  # every class has its case


def test_counts_partition_the_questions_and_agree_with_the_metric():
    for variant in ("wattbot", "wattbot-recall"):
        result = score_frames(*frames(), variant)
        table = classify(result.table)
        summary = error_summary(table)
        assert sum(summary["counts"].values()) == summary["n"] == table.height == len(CASES)
        value_right = table.filter(
            (pl.col("value_ok") & ~pl.col("truth_blank")) | (pl.col("truth_blank") & pl.col("pred_blank").fill_null(False))
        ).height
        assert summary["counts"]["correct"] + summary["counts"]["wrong_ref"] == value_right
        assert summary["n_errors"] == len(CASES) - summary["counts"]["correct"]
        assert sum(summary["error_share"].values()) == pytest.approx(1.0)


def test_recall_variant_reads_the_value_normalised():
    # wattbot-recall normalises "2B" to 2000000000, so it is right there (and not a format slip)
    got = {r["qid"]: r["error_class"] for r in classified("wattbot-recall").iter_rows(named=True)}
    assert got["d6"] == "correct"


@pytest.mark.skipif(not SOLUTIONS.is_file(), reason="needs shared/data/wattbot")
def test_partition_on_perturbed_public_solutions():
    sol = pl.read_csv(SOLUTIONS, infer_schema=False)
    rng = random.Random(7)

    def perturb(value: str) -> str:
        roll = rng.random()
        try:
            x = float(value)
        except ValueError:
            return "is_blank" if roll < 0.2 else value if roll < 0.6 else "something else"
        if roll < 0.15:
            return "is_blank"
        if roll < 0.3:
            return str(x * 1000)
        if roll < 0.45:
            return str(x * 1.05)
        if roll < 0.6:
            return str(x + 7.3)
        return value

    for _ in range(5):
        sub = sol.with_columns(
            pl.Series("answer_value", [perturb(v) for v in sol["answer_value"]]),
            pl.Series("ref_id", [r if rng.random() < 0.8 else "['nobody2020']" for r in sol["ref_id"]]),
        ).head(170)  # 17 questions missing
        table = classify(score_frames(sol, sub).table)
        s = error_summary(table)
        assert sum(s["counts"].values()) == sol.height
        assert s["counts"]["missing"] == sol.height - 170
        right = table.filter((pl.col("value_ok") & ~pl.col("truth_blank"))
                             | (pl.col("truth_blank") & pl.col("pred_blank").fill_null(False))).height
        assert s["counts"]["correct"] + s["counts"]["wrong_ref"] == right
        assert s["counts"]["scale"] > 0 and s["counts"]["near_miss"] > 0
        for split in ("by_kind", "by_evidence", "by_usage"):
            assert s[split], split
        assert sum(sum(c.values()) for c in s["by_kind"].values()) == sol.height
        assert sum(s["by_usage"]["Public"].values()) == sol.height
        quote = sol.filter(pl.col("Quote") == "1").height
        assert sum(s["by_evidence"]["Quote"].values()) == quote


def test_scale_factor_rules():
    assert scale_factor(2.0, 2e9) == "x1e-9"
    assert scale_factor(2.09e9, 2.0) == "x1e9"          # within 5 %
    assert scale_factor(2.2e9, 2.0) is None              # 10 % off a power of ten
    assert scale_factor(-2e3, 2.0) is None               # sign flip is no scale slip
    assert scale_factor(0.0, 5.0) is None
    assert scale_factor(5.0, 5.0) is None                # k = 0 is not a slip
    assert scale_factor(80.0, 10.0) == "unit x8"         # bits/bytes
    assert scale_factor(36.0, 10.0) == "unit x3.6"       # kWh/MJ


def test_answer_kinds():
    assert [answer_kind(q, v) for q, v in [
        ("How many?", "24"), ("Which?", "GPT-4"), ("Range?", "[1,2]"), ("True or false: x", "0"),
        ("How many?", "is_blank"), ("How many?", "1,000"), ("How many?", " "), (None, "N/A")]] == \
        ["number", "name", "list", "bool", "blank", "number", "blank", "blank"]


def test_summary_splits_details_and_text_report():
    sol, sub = frames()
    sol = sol.with_columns(pl.Series("Table", ["1" if i % 2 else "0" for i in range(sol.height)]),
                           pl.Series("Usage", ["Public"] * 20 + ["Private"] * (sol.height - 20)))
    table = classify(score_frames(sol, sub).table)
    s = error_summary(table)
    assert s["by_evidence"]["Table"]["correct"] == 1  # d1 (12th row) is a Table row, c1 (1st) is not
    assert sum(s["by_evidence"]["Table"].values()) == sol.height // 2
    assert sum(s["by_usage"]["Private"].values()) == sol.height - 20
    assert s["details"]["scale"] == {"unit /60": 1, "unit x60": 1, "x1e-9": 1, "x1e3": 1}
    assert s["details"]["near_miss"] == {"within 10%": 2}
    assert s["by_kind"]["bool"]["wrong_name"] == 1
    lines = error_lines(s, table)
    text = "\n".join(lines)
    assert lines[0] == f"error classes ({sol.height} questions, {sol.height - 2} not correct):"
    assert "  scale                    4    17.4%      19.0%  unit /60: 1, unit x60: 1, x1e-9: 1, x1e3: 1" in lines
    assert "by evidence:" in text and "by usage:" in text
    assert "c6       truth 2000000000" in text and "(x1e-9)" in text
