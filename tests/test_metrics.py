"""The WattBot metric (kohaku/tasks/rooms/wattbot/metric.py): every rule of kohaku_spec.md §8, both variants."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kohaku.tasks.rooms.wattbot.metric import MetricError, parse_refs, ref_score, score_files, score_frames, value_ok
from kohaku.tasks.rooms.wattbot.submission import PANDAS_NA_TOKENS

BOTH = ("wattbot", "wattbot-recall")
UNABLE = "Unable to answer with confidence based on the provided documents."
PUBLIC = Path(__file__).resolve().parents[2] / "shared" / "data" / "wattbot" / "solutions_public.csv"


def table(rows: list[dict[str, str]]) -> pl.DataFrame:
    base = {"answer_unit": "unit", "ref_id": "['d1']", "explanation": "because"}
    cols = ["id", "answer_value", "answer_unit", "ref_id", "explanation"]
    extra = [k for r in rows for k in r if k not in cols]
    cols += list(dict.fromkeys(extra))
    data = [{**base, **r} for r in rows]
    return pl.DataFrame({c: [d.get(c, "") for d in data] for c in cols}, schema={c: pl.String for c in cols})


# ---------------------------------------------------------------------------------------------
# value


@pytest.mark.parametrize("variant", BOTH)
@pytest.mark.parametrize(
    "truth, pred, ok",
    [
        ("100", "100.1", True),  # within 0.1 %
        ("100", "100.2", False),
        ("0", "0.001", True),  # abs tolerance 1e-3
        ("0", "0.002", False),
        ("1000", "1000.0", True),  # floats on both sides
        ("1.25E+12", "1250000000000", True),
        ("[1.2,4]", "[4,1.2]", True),  # list order does not matter
        ("[1.2,4]", "[1.2, 4.0]", True),
        ("[1.2,4]", "[1.2,4,5]", False),  # lengths must match
        ("[1.2,4]", "[1.2,4.1]", False),
        ("[1.2,4]", "2", True),  # scalar inside a numeric 2-list truth
        ("[1.2,4]", "4.001", True),  # hi + 1e-3
        ("[1.2,4]", "4.002", False),
        ("[1.2,4]", "1.1", False),
        ("[0.06,3,426]", "3", False),  # a scalar only matches a 2-list
        ("['a','b']", "[B, A]", True),  # string lists: sorted, lowercase
        ("['a','b']", "a", False),  # non-numeric list vs scalar
        ("5", "[5, 6]", False),  # scalar truth vs list submission
        ("Hivemind", "hivemind", True),
        ("Hivemind", " HIVEMIND ", True),
        ("Hivemind", "Hive mind", False),
        ("24", "is_blank", False),
        ("is_blank", "24", True),  # blank truth: value always correct
        ("is_blank", "is_blank", True),
        ("", "anything", True),
    ],
)
def test_value_rules_shared_by_both_variants(variant: str, truth: str, pred: str, ok: bool) -> None:
    assert value_ok(truth, pred, variant) is ok


@pytest.mark.parametrize("variant", BOTH)
def test_set_answers_are_lowercased_before_comparison(variant: str) -> None:
    """``{...}`` is a lowercase set: case and order never matter, against a set or a list
    (mutation survivor: the set parse without .lower() still passed every other test)."""
    assert value_ok("{A, B}", "{b,a}", variant) is True
    assert value_ok("{A,B}", "['b', 'a']", variant) is True  # lists are lowercased too
    assert value_ok("['A', 'B']", "{b, a}", variant) is True
    assert value_ok("{A,B}", "{a,c}", variant) is False
    assert value_ok("{A,B}", "{a}", variant) is False


@pytest.mark.parametrize(
    "truth, pred",
    [
        ("1000", "1,000"), ("1000", "about 1000"), ("1000", "~1k"), ("2000000000", "2B"),
        ("1", "True"), ("0", "no"), ("[80,90]", "80-90"), ("[80,90]", "from 80 to 90"),
        ("50", "more than 50"),
    ],
)
def test_only_recall_variant_normalises_the_submission(truth: str, pred: str) -> None:
    assert value_ok(truth, pred, "wattbot") is False
    assert value_ok(truth, pred, "wattbot-recall") is True


def test_recall_normalisation_cannot_make_a_wrong_value_right() -> None:
    assert value_ok("1000", "1,100", "wattbot-recall") is False
    assert value_ok("24", "n/a", "wattbot-recall") is False


# ---------------------------------------------------------------------------------------------
# ref


@pytest.mark.parametrize(
    "truth, pred, expected",
    [
        ("['a']", "['a']", 1.0),
        ("['a', 'b']", "['a']", 0.5),
        ("['a']", "['b']", 0.0),
        ("['A']", "[\"a\"]", 1.0),  # JSON double quotes, case-insensitive
        ("['a','b']", "['b','a']", 1.0),  # order
        ("luccioni2025b", "['luccioni2025b']", 1.0),  # bare id is one token
        ("[]", "[]", 1.0),  # both empty
        ("", "[]", 1.0),
        ("[]", "['a']", 0.0),  # one empty
        ("['a']", "", 0.0),
        ("is_blank", "is_blank", 1.0),  # is_blank is a token
        ("is_blank", "['a']", 0.0),
        ("is_blank", "[]", 0.0),
        ("['a', 'is_blank']", "['a']", 0.5),
    ],
)
def test_ref_jaccard(truth: str, pred: str, expected: float) -> None:
    assert ref_score(truth, pred) == pytest.approx(expected)


def test_malformed_ref_list_is_one_token_and_counted() -> None:
    refs, bad = parse_refs("['a', 'b'")
    assert bad and refs == frozenset({"['a', 'b'"})
    sol = table([{"id": "q1", "answer_value": "1", "ref_id": "['a']"}])
    sub = table([{"id": "q1", "answer_value": "1", "ref_id": "['a'"}])
    result = score_frames(sol, sub)
    assert result.n_malformed_refs == 1 and result.ref == 0.0
    assert any("malformed" in w for w in result.warnings)


# ---------------------------------------------------------------------------------------------
# NA and totals


def na_case() -> tuple[pl.DataFrame, pl.DataFrame]:
    sol = table([
        {"id": "q1", "answer_value": "is_blank", "ref_id": "is_blank"},
        {"id": "q2", "answer_value": "is_blank", "ref_id": "is_blank"},
        {"id": "q3", "answer_value": "10"},
        {"id": "q4", "answer_value": "20"},
    ])
    sub = table([
        {"id": "q1", "answer_value": UNABLE, "ref_id": "is_blank"},  # correct abstention
        {"id": "q2", "answer_value": "7", "ref_id": "['d1']"},  # answered an NA question
        {"id": "q3", "answer_value": "10"},
        {"id": "q4", "answer_value": "is_blank", "ref_id": "is_blank"},  # abstained on answerable
    ])
    return sol, sub


def test_na_mean_over_all_rows_in_wattbot_variant() -> None:
    r = score_frames(*na_case(), variant="wattbot")
    # na_ok: q1 yes, q2 no, q3/q4 non-NA count as correct (even q4, which abstained)
    assert r.na == pytest.approx(3 / 4)
    assert r.value == pytest.approx(3 / 4)  # q1, q2 blank truth always right; q3 right; q4 wrong
    assert r.ref == pytest.approx((1 + 0 + 1 + 0) / 4)
    assert r.score == pytest.approx(0.75 * 0.75 + 0.15 * 0.5 + 0.10 * 0.75)
    assert r.n == 4 and r.n_na == 2


def test_na_recall_in_recall_variant() -> None:
    r = score_frames(*na_case(), variant="wattbot-recall")
    assert r.na == pytest.approx(1 / 2)  # recall over the two NA questions
    assert r.score == pytest.approx(0.75 * 0.75 + 0.15 * 0.5 + 0.10 * 0.5)


@pytest.mark.parametrize("token", ["na", "n/a ", "IS_BLANK", UNABLE, UNABLE.upper() + " extra"])
@pytest.mark.parametrize("variant", BOTH)
def test_blank_tokens_count_as_abstention(variant: str, token: str) -> None:
    sol = table([{"id": "q1", "answer_value": "is_blank", "ref_id": "is_blank"}])
    sub = table([{"id": "q1", "answer_value": token, "ref_id": "is_blank"}])
    r = score_frames(sol, sub, variant)
    assert r.na == 1.0 and r.score == pytest.approx(1.0)


@pytest.mark.parametrize("token", ["", "N/A", "NA", "null"])
@pytest.mark.parametrize("variant", BOTH)
def test_empty_and_pandas_na_cells_do_not_abstain(variant: str, token: str) -> None:
    """The references read these cells with pandas as NaN, i.e. the text 'nan', not blank."""
    sol = table([{"id": "q1", "answer_value": "is_blank", "ref_id": "is_blank"}])
    sub = table([{"id": "q1", "answer_value": token, "ref_id": "is_blank"}])
    r = score_frames(sol, sub, variant)
    assert r.na == 0.0 and r.score == pytest.approx(0.75 + 0.15)
    assert [i.kind for i in r.issues] == ["empty cell"]


def test_recall_without_na_questions_is_one() -> None:
    sol = table([{"id": "q1", "answer_value": "3"}])
    sub = table([{"id": "q1", "answer_value": "is_blank"}])
    assert score_frames(sol, sub, "wattbot-recall").na == 1.0
    assert score_frames(sol, sub, "wattbot").na == 1.0  # a non-NA row counts as correct


def test_unit_is_reported_but_not_weighted() -> None:
    sol = table([{"id": "q1", "answer_value": "3", "answer_unit": "kWh"}])
    sub = table([{"id": "q1", "answer_value": "3", "answer_unit": "MWh"}])
    r = score_frames(sol, sub)
    assert r.unit == 0.0 and r.score == pytest.approx(1.0)
    assert score_frames(sol, table([{"id": "q1", "answer_value": "3", "answer_unit": " kwh "}])).unit == 1.0


def test_per_evidence_and_usage_breakdowns() -> None:
    sol = table([
        {"id": "q1", "answer_value": "1", "Quote": "1", "Table": "0", "is_NA": "0", "Usage": "Public"},
        {"id": "q2", "answer_value": "2", "Quote": "0", "Table": "1", "is_NA": "0", "Usage": "Private"},
        {"id": "q3", "answer_value": "is_blank", "ref_id": "is_blank", "Quote": "0", "Table": "0",
         "is_NA": "1", "Usage": "Public"},
    ])
    sub = table([
        {"id": "q1", "answer_value": "1"},
        {"id": "q2", "answer_value": "3"},
        {"id": "q3", "answer_value": "is_blank", "ref_id": "is_blank"},
    ])
    r = score_frames(sol, sub)
    assert r.per_evidence["Quote"] == {"n": 1, "value": 1.0}
    assert r.per_evidence["Table"] == {"n": 1, "value": 0.0}
    assert r.per_evidence["is_NA"] == {"n": 1, "value": 1.0}
    assert set(r.per_usage) == {"Public", "Private"}
    assert r.per_usage["Public"]["score"] == pytest.approx(1.0)
    assert r.per_usage["Private"]["value"] == 0.0 and r.per_usage["Private"]["n"] == 1


# ---------------------------------------------------------------------------------------------
# malformed input


def test_missing_ids_count_as_wrong_and_warn() -> None:
    sol = table([{"id": "q1", "answer_value": "1"}, {"id": "q2", "answer_value": "is_blank", "ref_id": "is_blank"}])
    sub = table([{"id": "q1", "answer_value": "1"}, {"id": "q9", "answer_value": "5"}])
    r = score_frames(sol, sub)
    assert r.n_missing == 1 and r.n_extra == 1
    row = r.table.filter(pl.col("qid") == "q2").to_dicts()[0]
    assert row["missing"] and not row["value_ok"] and row["ref_score"] == 0.0 and not row["na_ok"]
    assert r.score == pytest.approx(0.5)
    assert any("q2" in w for w in r.warnings) and any("q9" in w for w in r.warnings)
    sub_only = score_frames(sol, sub, subset=True)
    assert sub_only.n == 1 and sub_only.score == pytest.approx(1.0)


def test_missing_column_is_named() -> None:
    sol = table([{"id": "q1", "answer_value": "1"}])
    with pytest.raises(MetricError, match="submission: the file lacks column.*'ref_id'"):
        score_frames(sol, sol.drop("ref_id"))
    with pytest.raises(MetricError, match="solutions: the file lacks column.*'answer_value'"):
        score_frames(sol.drop("answer_value"), sol)


def test_duplicate_and_empty_ids_warn_and_strict_refuses() -> None:
    sol = table([{"id": "q1", "answer_value": "1"}, {"id": "q2", "answer_value": "2"}])
    dup = table([{"id": "q1", "answer_value": "1"}, {"id": "q2", "answer_value": "2"}, {"id": "q1", "answer_value": "1"}])
    r = score_frames(sol, dup)
    assert r.n == 3 and r.score == pytest.approx(1.0)  # both q1 rows scored, as the references join
    assert any("row 3 (id 'q1'), column 'id': duplicate id (also row 1)" in w for w in r.warnings)
    with pytest.raises(MetricError, match=r"row 3 \(id 'q1'\), column 'id': duplicate id \(also row 1\)"):
        score_frames(sol, dup, strict=True)
    empty = table([{"id": "q1", "answer_value": "1"}, {"id": " ", "answer_value": "2"}])
    r = score_frames(sol, empty)
    assert r.n_missing == 1 and [(i.row, i.kind) for i in r.issues] == [(2, "empty id")]
    with pytest.raises(MetricError, match="row 2 .*column 'id': empty id"):
        score_frames(sol, empty, strict=True)


def test_empty_explanation_is_a_warning_naming_the_row_and_strict_refuses() -> None:
    sol = table([{"id": "q1", "answer_value": "1"}, {"id": "q2", "answer_value": "2"}])
    sub = table([{"id": "q1", "answer_value": "1"}, {"id": "q2", "answer_value": "2", "explanation": " "}])
    r = score_frames(sol, sub)
    assert r.score == pytest.approx(1.0)
    assert any("row 2 (id 'q2'), column 'explanation'" in w for w in r.warnings)
    assert r.summary()["row_issues"] == [str(i) for i in r.issues] and len(r.issues) == 1
    with pytest.raises(MetricError, match=r"row 2 \(id 'q2'\), column 'explanation'"):
        score_frames(sol, sub, strict=True)


def test_unknown_variant() -> None:
    sol = table([{"id": "q1", "answer_value": "1"}])
    with pytest.raises(MetricError, match="unknown metric variant"):
        score_frames(sol, sol, "kaggle")


# ---------------------------------------------------------------------------------------------
# files and properties


@pytest.mark.skipif(not PUBLIC.is_file(), reason="WattBot data not present")
@pytest.mark.parametrize("variant", BOTH)
def test_public_solutions_self_score(variant: str) -> None:
    r = score_files(PUBLIC, PUBLIC, variant)
    assert r.score == 1.0 and r.n == 187 and r.n_na == 8
    assert r.per_evidence["Quote"]["n"] == 136 and r.per_usage["Public"]["n"] == 187


cell = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["is_blank", "", "N/A", UNABLE, "[1,2]", "['a','b']", "1,000", "1e3", "[", "{a}", "nan"]),
)
# A truth that reads as NaN ('', 'N/A', 'nan', '[nan]', ...) matches nothing, itself included
# (the references' isclose); the self-score property holds for every other value.
no_nan = cell.filter(lambda v: v not in PANDAS_NA_TOKENS and "nan" not in v.lower())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(no_nan, cell, cell), min_size=1, max_size=6), st.sampled_from(BOTH))
def test_self_score_is_one_and_never_raises(rows: list[tuple[str, str, str]], variant: str) -> None:
    sol = table([
        {"id": f"q{i}", "answer_value": v, "ref_id": r, "answer_unit": u} for i, (v, r, u) in enumerate(rows)
    ])
    r = score_frames(sol, sol, variant)
    assert r.ref == 1.0 and r.na == 1.0
    if variant == "wattbot":
        assert r.score == pytest.approx(1.0)
    else:  # the recall reference normalises the submission only: '0,' -> '0' no longer matches '0,'
        assert r.value == pytest.approx(sum(value_ok(v, v, variant) for v, _, _ in rows) / len(rows))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(cell, cell, cell, cell), min_size=1, max_size=6), st.sampled_from(BOTH))
def test_scorer_never_raises_on_arbitrary_values(rows: list[tuple[str, str, str, str]], variant: str) -> None:
    sol = table([{"id": f"q{i}", "answer_value": a, "ref_id": b} for i, (a, b, _, _) in enumerate(rows)])
    sub = table([{"id": f"q{i}", "answer_value": c, "ref_id": d} for i, (_, _, c, d) in enumerate(rows)])
    r = score_frames(sol, sub, variant)
    assert 0.0 <= r.score <= 1.0 + 1e-12
    assert r.n == len(rows)


@pytest.mark.parametrize(
    "truth, pred, ok",
    [
        ("[true, 1e999]", "['TRUE', 'INF']", True),  # booleans and non-finite numbers: lowercase words
        ("[' 5 ', 'B']", "[5.0, 'b']", True),  # stripped numbers are numbers, words lowercase
        ("['5','6']", "[5.0004, 6]", True),  # quoted numbers compare as numbers
        ("['a, b', 'c']", "['c', 'a, b']", True),  # JSON first: a comma inside quotes stays
        ("['a, b', 'c']", "['a', 'b', 'c']", False),
        ("['a', b]", "[a, 'b']", False),  # not JSON: split on commas, quotes kept (as the references)
        ("['a', 5]", "[5.0, 'A']", True),  # mixed lists: numbers rendered, then sorted
        ("x]", "y]", False),  # a list needs both brackets
        ("{a", "{b", False),  # and a set both braces
        ("{}", "[]", True),  # empty set = empty list
        ("{'A', \"b\"}", "{a, b}", False),  # quotes kept in set members (as the references)
        ("{A, B}", "{b,a}", True),
        ("[1000, 2000]", "[1000.5, 2000]", True),  # lists: relative tolerance 1e-3
        ("[0, 1]", "[0.0005, 1]", True),  # and absolute 1e-3
        ("[1.2,4]", "1.1995", True),  # lo - 1e-3 <= x
        ("[1,4]", "0.999", True),  # the bound itself is inside
        ("[1,4]", "0.998", False),
        ("", None, True),  # a missing prediction is the empty string
        ("xxxx", None, False),
        ("['Xa', b]", "[a, b]", False),  # only quotes are stripped from list members
        ("{Xa, b}", "{a, b}", False),  # and from set members
    ],
)
def test_value_match_parsing_rules(truth: str, pred: str, ok: bool) -> None:
    from kohaku.tasks.rooms.wattbot.metric import value_matches

    assert value_matches(truth, pred) is ok


@pytest.mark.parametrize(
    "text, refs, malformed",
    [
        ("", set(), False),
        ("doc1", {"doc1"}, False),  # one token, not malformed
        ('["Doc1", true]', {"doc1", "true"}, False),  # JSON first (ast would reject true)
        ("['Doc1', true]", {"doc1", "true"}, False),  # after ' -> "
        ("['a', 'b',]", {"['a', 'b',]"}, True),  # not JSON: the whole field is one id, malformed
        ("['a', '']", {"a", ""}, False),  # empty items count as ids (as the references)
    ],
)
def test_parse_refs_readers(text: str, refs: set[str], malformed: bool) -> None:
    assert parse_refs(text) == (frozenset(refs), malformed)


def test_evidence_flags() -> None:
    from kohaku.tasks.rooms.wattbot.metric import _flag

    assert [_flag(x) for x in ["1", "1.0", "TRUE", " Yes ", "true", "yes"]] == [True] * 6
    assert [_flag(x) for x in ["0", "no", "", None, "2"]] == [False] * 5


# ---------------------------------------------------------------------------------------------
# whole results: every figure and message (pinned by the mutation run, docs/mutation.md)

BAD_CELL = "['d1'"
BAD_REF_ADVICE = "not a JSON list after ' -> \", so read as ONE id; write ['id1','id2'] without outer quotes"


def test_summary_breakdowns_and_table_of_one_scoring() -> None:
    sol = table([
        {"id": "q1", "answer_value": "1", "ref_id": "['a'", "Quote": "1", "Table": "yes", "Usage": "Public"},
        {"id": "q2", "answer_value": "is_blank", "ref_id": "is_blank", "Quote": "0", "Table": "TRUE", "Usage": " "},
        {"id": "q3", "answer_value": "5", "Quote": "1.0", "Table": "no", "Usage": "Public"},
    ])
    sub = table([
        {"id": "q1", "answer_value": "1", "ref_id": "['a'"},
        {"id": "q2", "answer_value": "is_blank", "ref_id": "is_blank"},
        {"id": "q3", "answer_value": "6"},
    ])
    r = score_frames(sol, sub, "wattbot-recall")
    bad_sub = "row 1 (id 'q1'), column 'ref_id': \"['a'\""
    warnings = [
        f"submission: 1 row(s) with malformed ref list, scored anyway ({BAD_REF_ADVICE}): {bad_sub}",
        f"1 malformed ref list(s) read as one token each (write them as ['id1','id2']): solutions {bad_sub}",
    ]
    assert r.summary() == {
        "variant": "wattbot-recall",
        "score": pytest.approx(0.75),  # 0.75 * 2/3 + 0.15 + 0.10
        "components": {"value": pytest.approx(2 / 3), "ref": 1.0, "na": 1.0, "unit": 1.0},
        "weights": {"value": 0.75, "ref": 0.15, "na": 0.10},
        "n": 3, "n_na": 1, "n_missing": 0, "n_extra": 0, "n_malformed_refs": 2,
        "per_evidence": {"Quote": {"n": 2, "value": 0.5}, "Table": {"n": 2, "value": 1.0}},
        "per_usage": {
            "(none)": {"score": pytest.approx(1.0), "value": 1.0, "ref": 1.0, "na": 1.0, "n": 1},
            "Public": {"score": pytest.approx(0.625), "value": 0.5, "ref": 1.0, "na": 1.0, "n": 2},
        },
        "warnings": warnings,
        "row_issues": [f"submission: {bad_sub} (malformed ref list: {BAD_REF_ADVICE})"],
    }
    assert r.table.columns == [
        "qid", "truth_value", "truth_ref", "truth_blank", "pred_value", "pred_ref", "pred_blank", "value_ok",
        "ref_score", "na_ok", "unit_ok", "missing", "ref_malformed", "usage", "Quote", "Table"]
    assert r.table.row(0) == ("q1", "1", "['a'", False, "1", "['a'", False, True, 1.0, True, True, False, True,
                              "Public", True, True)
    assert r.table.row(1) == ("q2", "is_blank", "is_blank", True, "is_blank", "is_blank", True, True, 1.0, True,
                              True, False, False, "", False, True)
    assert r.table["value_ok"].to_list() == [True, True, False]


def test_long_lists_of_problems_are_cut_in_the_messages() -> None:
    sol = table([{"id": f"q{i:02d}", "answer_value": str(i)} for i in range(25)])
    sub = table(
        [{"id": f"q{i:02d}", "answer_value": str(i), "explanation": "" if i < 7 else "e",
          "ref_id": "['d1'" if i < 6 else "['d1']"} for i in range(12)]
        + [{"id": f"x{i:02d}", "answer_value": "1"} for i in range(11)]
    )
    r = score_frames(sol, sub)

    def rows(n, column, cell):
        return "; ".join(f"row {i + 1} (id 'q{i:02d}'), column '{column}': {cell}" for i in range(n))

    assert r.warnings == [
        "submission: 7 row(s) with empty explanation, scored anyway (every row needs an explanation; write "
        f"is_blank): {rows(5, 'explanation', repr(''))}; ... 2 more",
        f"submission: 6 row(s) with malformed ref list, scored anyway ({BAD_REF_ADVICE}): "
        f"{rows(5, 'ref_id', chr(34) + BAD_CELL + chr(34))}; ... 1 more",
        "13 solution id(s) missing from submission, scored as wrong (the reference scorers drop them; --subset "
        "scores that way): " + ", ".join(f"q{i}" for i in range(12, 22)) + " ...",
        "11 submission id(s) not in solutions, ignored: " + ", ".join(f"x{i:02d}" for i in range(10)) + " ...",
    ]
    assert (r.n, r.n_missing, r.n_extra, r.n_malformed_refs) == (25, 13, 11, 6)
    with pytest.raises(MetricError) as info:
        score_frames(sol, sub, strict=True)
    message = str(info.value)
    assert message.startswith("submission: 13 questionable row(s) refused (--strict): row 1 (id 'q00'), column "
                              "'explanation': '' (empty explanation); row 1 (id 'q00'), column 'ref_id': ")
    assert message.endswith("row 5 (id 'q04'), column 'ref_id': \"['d1'\" (malformed ref list); ... 3 more; fix "
                            "them, or score without --strict to get warnings")
    assert message.count(" (empty explanation)") == 5 and message.count(" (malformed ref list)") == 5


def test_few_problems_are_all_named() -> None:
    sol = table([{"id": f"q{i}", "answer_value": "1"} for i in range(3)])
    sub = table([{"id": "q0", "answer_value": "1", "explanation": ""}, {"id": "x", "answer_value": "1"}])
    r = score_frames(sol, sub)
    assert r.warnings == [
        "submission: 1 row(s) with empty explanation, scored anyway (every row needs an explanation; write "
        "is_blank): row 1 (id 'q0'), column 'explanation': ''",
        "2 solution id(s) missing from submission, scored as wrong (the reference scorers drop them; --subset "
        "scores that way): q1, q2",
        "1 submission id(s) not in solutions, ignored: x",
    ]
    with pytest.raises(MetricError) as info:
        score_frames(sol, sub, strict=True)
    assert str(info.value) == ("submission: 1 questionable row(s) refused (--strict): row 1 (id 'q0'), column "
                               "'explanation': '' (empty explanation); fix them, or score without --strict to get "
                               "warnings")


def test_nothing_to_score_and_no_unit_column() -> None:
    sol = table([{"id": "q1", "answer_value": "1", "Quote": "1"}]).drop("answer_unit")
    r = score_frames(sol, table([{"id": "q1", "answer_value": "1"}]), subset=True)
    assert (r.score, r.unit, r.n) == (pytest.approx(1.0), None, 1)
    assert "unit_ok" in r.table.columns and r.table["unit_ok"].to_list() == [None]
    empty = score_frames(sol, table([{"id": "x", "answer_value": "1"}]), subset=True)
    assert (empty.score, empty.value, empty.ref, empty.na, empty.n, empty.n_na) == (0.0, 0.0, 0.0, 0.0, 0, 0)
    assert empty.per_evidence == {"Quote": {"n": 0, "value": None}} and empty.table.height == 0
    assert empty.table.schema["value_ok"] == pl.Boolean and empty.table.schema["Quote"] == pl.Boolean


def test_score_files_names_the_files(tmp_path: Path) -> None:
    from kohaku.core.config import ConfigError
    from kohaku.core.csvfile import CsvFileNotFound
    from kohaku.tasks.score.scoring import ScoreConfig

    sol_file, sub_file = tmp_path / "sol.csv", tmp_path / "sub.csv"
    table([{"id": "q1", "answer_value": "1"}, {"id": "q2", "answer_value": "2"}]).write_csv(sol_file)
    table([{"id": "q1", "answer_value": "1"}]).write_csv(sub_file)
    r = score_files(sol_file, sub_file, "wattbot")
    assert r.warnings == [f"1 solution id(s) missing from {sub_file}, scored as wrong (the reference scorers drop "
                          "them; --subset scores that way): q2"]
    assert score_files(sol_file, sub_file, subset=True).score == pytest.approx(1.0)
    with pytest.raises(CsvFileNotFound, match="nope.csv: CSV file not found"):
        score_files(sol_file, tmp_path / "nope.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text('id,answer_value\n"q1,1\n')
    with pytest.raises(MetricError, match="bad.csv: cannot parse CSV"):
        score_files(sol_file, bad)
    with pytest.raises(MetricError, match="bad.csv: cannot parse CSV"):
        score_files(bad, sol_file)
    table([{"id": "q1", "answer_value": "1", "explanation": ""}]).write_csv(sub_file)
    with pytest.raises(MetricError, match=f"{sub_file}: 1 questionable row"):
        score_files(sol_file, sub_file, strict=True)
    ScoreConfig().validate()
    ScoreConfig(variant="wattbot-recall").validate()
    with pytest.raises(ConfigError, match="score.variant='kaggle'; use one of wattbot, wattbot-recall"):
        ScoreConfig(variant="kaggle").validate()
    with pytest.raises(MetricError, match="unknown metric variant 'kaggle'; use one of wattbot, wattbot-recall"):
        score_frames(table([]), table([]), "kaggle")


@pytest.mark.parametrize("variant", BOTH)
def test_a_list_of_numbers_never_matches_a_list_with_a_text_item(variant: str) -> None:
    assert value_ok("[1, 2]", "[1, 'a']", variant) is False
    assert value_ok("[1, 'a']", "[1, 2]", variant) is False


def test_recall_normalisation_keeps_fractions() -> None:
    assert value_ok("[1.5,2.5]", "1.5-2.5", "wattbot-recall") and not value_ok("[1,2]", "1.5-2.5", "wattbot-recall")
    assert value_ok("1.5", "0.0015k", "wattbot-recall") and not value_ok("1", "0.0015k", "wattbot-recall")
    assert not value_ok("XXXX", "", "wattbot-recall")  # an empty submission matches no text


@pytest.mark.parametrize("pred, truth", [("Yes", "1"), ("TRUE", "1"), ("no", "0"), ("False", "0")])
def test_recall_reads_yes_no_true_false_as_one_and_zero(pred: str, truth: str) -> None:
    assert value_ok(truth, pred, "wattbot-recall") and not value_ok(truth, pred, "wattbot")


def test_null_cells_are_empty_and_missing_rows_count_against_the_unit() -> None:
    sol = pl.DataFrame({"id": ["q1", "q2"], "answer_value": ["is_blank", "5"], "answer_unit": ["kWh", "kWh"],
                        "ref_id": ["is_blank", "['a']"], "explanation": ["e", "e"], "Usage": ["Public", "Public"]})
    sub = pl.DataFrame({"id": ["q1"], "answer_value": [None], "answer_unit": ["kWh"], "ref_id": [None],
                        "explanation": ["e"]}, schema={c: pl.String for c in SUB_COLUMNS})
    r = score_frames(sol, sub)
    row = r.table.row(0, named=True)
    # a null cell is an empty one, read as the text 'nan' as pandas does: no abstention
    assert (row["pred_value"], row["pred_ref"], row["pred_blank"], row["na_ok"]) == ("", "", False, False)
    assert r.unit == 0.5 and r.table["unit_ok"].to_list() == [True, False]  # the missing q2 has the wrong unit
    answered = pl.DataFrame({"id": ["q1", "q2"], "answer_value": ["7", "5"], "answer_unit": ["kWh", "kWh"],
                             "ref_id": ["['a']", "['a']"], "explanation": ["e", "e"]})
    assert score_frames(sol, answered).per_usage["Public"]["na"] == 0.5  # over all rows: q2 is right
    assert score_frames(sol, answered, "wattbot-recall").per_usage["Public"]["na"] == 0.0  # NA rows only
    empty = score_frames(sol, answered.filter(pl.col("id") == "x"), subset=True)
    assert empty.table.schema["usage"] == pl.String and empty.per_usage == {}


SUB_COLUMNS = ["id", "answer_value", "answer_unit", "ref_id", "explanation"]


@pytest.mark.parametrize("n, more", [(5, ""), (6, "; ... 1 more")])
def test_a_group_of_five_issues_is_named_in_full(n: int, more: str) -> None:
    sol = table([{"id": f"q{i}", "answer_value": "1"} for i in range(n)])
    sub = table([{"id": f"q{i}", "answer_value": "1", "explanation": ""} for i in range(n)])
    assert score_frames(sol, sub).warnings[0].endswith(f"row 5 (id 'q4'), column 'explanation': ''{more}")


@pytest.mark.parametrize("n, more", [(10, ""), (11, "; ... 1 more")])
def test_ten_of_everything_are_named_in_full(n: int, more: str) -> None:
    sol = table([{"id": f"q{i:02d}", "answer_value": "1", "ref_id": "['a'"} for i in range(n)])
    sub = table([{"id": f"q{i:02d}", "answer_value": "1", "explanation": ""} for i in range(n)]
                + [{"id": f"x{i:02d}", "answer_value": "1"} for i in range(n)])
    with pytest.raises(MetricError) as info:
        score_frames(sol, sub, strict=True)
    assert str(info.value).endswith(f"(empty explanation){more}; fix them, or score without --strict to get warnings")
    r = score_frames(sol, sub.head(0))
    dots = " ..." if more else ""
    assert r.warnings[0].endswith(", ".join(f"q{i:02d}" for i in range(10)) + dots)  # missing ids
    extra = [w for w in score_frames(sol, sub).warnings if "not in" in w]
    assert extra[0].endswith(", ".join(f"x{i:02d}" for i in range(10)) + dots)
    bad = "; ".join(f"solutions row {i} (id 'q{i - 1:02d}'), column 'ref_id': \"['a'\"" for i in range(1, 6))
    assert r.warnings[-1] == (f"{n} malformed ref list(s) read as one token each (write them as ['id1','id2']): "
                              + bad)


def test_score_files_uses_its_variant_and_names_both_files(tmp_path: Path) -> None:
    sol_file, sub_file = tmp_path / "sol.csv", tmp_path / "sub.csv"
    table([{"id": "q1", "answer_value": "1000"}, {"id": "q1", "answer_value": "1000"}]).write_csv(sol_file)
    table([{"id": "q1", "answer_value": "about 1k", "explanation": ""}, {"id": "x", "answer_value": "1"}]).write_csv(sub_file)
    r = score_files(sol_file, sub_file, "wattbot-recall")  # not strict by default: warnings
    assert r.value == 1.0 and score_files(sol_file, sub_file).value == 0.0
    assert r.warnings[0].startswith(f"{sub_file}: 1 row(s) with empty explanation")
    assert r.warnings[1].startswith(f"{sol_file}: 1 row(s) with duplicate id")
    assert r.warnings[2] == f"1 {sub_file} id(s) not in {sol_file}, ignored: x"


def test_null_solution_cells_read_as_empty_and_a_missing_row_has_no_unit_verdict_without_units() -> None:
    # null cells in the solutions are empty ones: a null answer_value is no abstention (the text is
    # '' not 'is_blank'), a null ref_id an empty ref list, exactly as the same table with "" cells
    cols = ["id", "answer_value", "ref_id", "explanation", "Usage"]
    nulls = pl.DataFrame({"id": ["q1", "q2"], "answer_value": [None, "5"], "ref_id": [None, "['a']"],
                          "explanation": ["e", None], "Usage": [None, "Public"]}, schema={c: pl.String for c in cols})
    blanks = nulls.with_columns(pl.all().fill_null(""))
    sub = pl.DataFrame({"id": ["q1"], "answer_value": ["is_blank"], "ref_id": ["is_blank"], "explanation": ["e"]})
    a, b = score_frames(nulls, sub), score_frames(blanks, sub)
    assert a.table.drop("truth_value", "truth_ref").equals(b.table.drop("truth_value", "truth_ref"))
    row = a.table.row(0, named=True)
    assert (row["truth_blank"], row["value_ok"], row["ref_score"], row["na_ok"]) == (False, False, 0.0, True)
    assert sorted(a.per_usage) == ["(none)", "Public"]  # a null Usage is the unnamed split
    # no answer_unit column: the missing q2 has no unit verdict (null), not a wrong one
    missing = a.table.row(1, named=True)
    assert (missing["qid"], missing["missing"], missing["unit_ok"], a.unit) == ("q2", True, None, None)
