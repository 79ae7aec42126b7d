"""Hand-made submissions in the shapes real ones take, scored per the two reference scorers.

The references are ``scripts/score.py`` of the KohakuRAG_UI repository at its first commit
(variant ``wattbot``, called FIRST below) and at its latest (``wattbot-recall``, LATEST). Each
test names the rule of the reference it exercises: the function of that file and what it does.
Both read the CSVs with ``pandas.read_csv`` and ``astype(str)``, so the reading rules (empty and
NA-token cells become the text ``nan``; blank lines are skipped) are part of the metric.
Expected numbers are worked out by hand in each test.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from kohaku.tasks.rooms.wattbot.metric import MetricError, ref_score, score_files, value_ok
from kohaku.tasks.rooms.wattbot.submission import PANDAS_NA_TOKENS, read_csv_str, scoring_issues

BOTH = ("wattbot", "wattbot-recall")
UNABLE = "Unable to answer with confidence based on the provided documents."
HEADER = ["id", "answer_value", "answer_unit", "ref_id", "explanation"]
TRUTH = [
    ["q1", "10000", "MWh", "['a2020']", "e"],
    ["q2", "is_blank", "is_blank", "is_blank", "e"],
    ["q3", "[80,90]", "%", "['b2021','c2022']", "e"],
    ["q4", "Hivemind", "is_blank", "['d2023']", "e"],
]


def write(path: Path, rows: list[list[str]], tail: str = "") -> Path:
    with path.open("w", newline="") as f:
        csv.writer(f).writerows([HEADER, *rows])
        f.write(tail)
    return path


@pytest.fixture
def sol(tmp_path: Path) -> Path:
    return write(tmp_path / "solutions.csv", TRUTH)


def sub_with(tmp_path: Path, changes: dict[tuple[str, str], str], tail: str = "") -> Path:
    """The truth as a submission, with {(id, column): text} changed."""
    rows = [[changes.get((r[0], c), v) for c, v in zip(HEADER, r)] for r in TRUTH]
    return write(tmp_path / "submission.csv", rows, tail)


def score(weights_value: float, ref: float, na: float) -> float:
    return 0.75 * weights_value + 0.15 * ref + 0.10 * na


def kinds(result) -> list[tuple[int, str, str]]:
    return [(i.row, i.column, i.kind) for i in result.issues]


# ---------------------------------------------------------------------------------------------
# explanations: FIRST and LATEST score(): `submission["explanation"].str.strip().eq("")` refuses


@pytest.mark.parametrize("variant", BOTH)
def test_empty_explanation_is_a_warning_not_a_refusal(tmp_path: Path, sol: Path, variant: str) -> None:
    """score(): pandas reads an empty explanation as NaN ('nan'), so the references score the
    file; kohaku scores it too, warns with the row, and refuses only with strict."""
    sub = sub_with(tmp_path, {("q1", "explanation"): "", ("q3", "explanation"): "NA"})
    r = score_files(sol, sub, variant)
    assert r.score == 1.0
    assert kinds(r) == [(1, "explanation", "empty explanation"), (3, "explanation", "empty explanation")]
    assert any("row 1 (id 'q1'), column 'explanation'" in w for w in r.warnings)
    with pytest.raises(MetricError, match=r"row 1 \(id 'q1'\), column 'explanation'.*--strict"):
        score_files(sol, sub, variant, strict=True)


def test_whitespace_explanation_is_scored_too(tmp_path: Path, sol: Path) -> None:
    """score(): the references refuse an explanation of spaces (it is not NaN to pandas and
    strips to ""); kohaku is more lenient here: a warning, a score, strict refuses."""
    sub = sub_with(tmp_path, {("q2", "explanation"): "   "})
    assert score_files(sol, sub).score == 1.0
    assert kinds(score_files(sol, sub)) == [(2, "explanation", "empty explanation")]
    with pytest.raises(MetricError, match=r"row 2 \(id 'q2'\)"):
        score_files(sol, sub, strict=True)


# ---------------------------------------------------------------------------------------------
# NaN / empty cells: pd.read_csv + astype(str) -> 'nan'; is_blank() does not know 'nan'


def test_nan_cells_read_as_the_text_nan(tmp_path: Path, sol: Path) -> None:
    """is_blank() + row_bits() + canon_refs(): an empty answer_value on the unanswerable q2 is
    'nan', not blank (NA fails; value is right anyway, the truth being blank); an empty ref_id is
    the one id 'nan' (Jaccard 0 with 'is_blank'); 'NA' on q4 is 'nan' too (value wrong)."""
    sub = sub_with(tmp_path, {("q2", "answer_value"): "", ("q2", "ref_id"): "", ("q4", "answer_value"): "NA"})
    first = score_files(sol, sub, "wattbot")
    # value: q4 wrong -> 3/4; ref: q2 0 -> 3/4; NA (FIRST: mean over rows): q2 wrong -> 3/4
    assert (first.value, first.ref, first.na) == (0.75, 0.75, 0.75)
    assert first.score == pytest.approx(score(0.75, 0.75, 0.75))
    latest = score_files(sol, sub, "wattbot-recall")
    # LATEST: NA recall over the one truly-NA row, which failed
    assert latest.na == 0.0 and latest.score == pytest.approx(score(0.75, 0.75, 0.0))
    assert kinds(first) == [(2, "answer_value", "empty cell"), (2, "ref_id", "empty cell"),
                            (4, "answer_value", "empty cell")]
    with pytest.raises(MetricError, match=r"row 2 \(id 'q2'\), column 'answer_value'"):
        score_files(sol, sub, "wattbot-recall", strict=True)


@pytest.mark.parametrize("variant", BOTH)
@pytest.mark.parametrize("token, abstains", [
    ("is_blank", True), ("IS_BLANK", True), ("na", True), ("n/a ", True), (UNABLE, True),  # _BLANK_TOKENS
    ("", False), ("NA", False), ("N/A", False), ("n/a", False), ("null", False), ("None", False),
    ("NaN", False),  # pandas NA tokens: 'nan' to the references, not blank
])
def test_which_submitted_tokens_abstain(tmp_path: Path, sol: Path, variant: str, token: str,
                                        abstains: bool) -> None:
    """is_blank(): {'', 'na', 'n/a', 'is_blank'} after strip/lower, or the 'Unable to answer'
    prefix; but a cell pandas reads as missing never reaches it as text ('nan')."""
    sub = sub_with(tmp_path, {("q2", "answer_value"): token})
    r = score_files(sol, sub, variant)
    na_ok = r.table.filter(r.table["qid"] == "q2")["na_ok"].item()
    assert na_ok is abstains
    assert r.na == (1.0 if abstains else (0.75 if variant == "wattbot" else 0.0))


def test_pandas_na_tokens_are_pandas_defaults() -> None:
    """pd.read_csv's default na_values (pandas 2.x and 3.x), exact and case-sensitive."""
    assert {"", "NA", "N/A", "n/a", "NaN", "nan", "null", "NULL", "None", "<NA>", "#N/A"} <= PANDAS_NA_TOKENS
    assert "na" not in PANDAS_NA_TOKENS and " NA" not in PANDAS_NA_TOKENS and "is_blank" not in PANDAS_NA_TOKENS


def test_blank_lines_are_skipped(tmp_path: Path, sol: Path) -> None:
    """pd.read_csv(skip_blank_lines=True): a blank line is no row (no empty-id warning)."""
    sub = sub_with(tmp_path, {}, tail="\n\n")
    assert read_csv_str(sub).height == 4
    r = score_files(sol, sub)
    assert r.score == 1.0 and r.issues == [] and r.n_extra == 0


# ---------------------------------------------------------------------------------------------
# lists: parse_listish() / compare_lists(); blank items are items


@pytest.mark.parametrize("variant", BOTH)
def test_value_list_with_a_blank_item_is_a_list(tmp_path: Path, sol: Path, variant: str) -> None:
    """row_bits(): a submitted list against a scalar truth goes to the scalar branch and fails
    (both_numeric is False, the texts differ); LATEST's _normalize_sub_value leaves '[...]'
    alone, so [10000,is_blank] is wrong in both (the reference does not drop blank items)."""
    sub = sub_with(tmp_path, {("q1", "answer_value"): "[10000,is_blank]",
                              ("q3", "answer_value"): "[90,80,is_blank]"})
    r = score_files(sol, sub, variant)
    # q1: list vs scalar -> wrong; q3: [80,90] vs [90,80,'is_blank']: not all numeric ->
    # sorted texts ['80.0','90.0'] vs ['80.0','90.0','is_blank'] -> wrong
    assert r.value == 0.5 and r.score == pytest.approx(score(0.5, 1.0, 1.0))
    assert kinds(r) == [(1, "answer_value", "blank item in a list"),
                                     (3, "answer_value", "blank item in a list")]


@pytest.mark.parametrize("variant", BOTH)
@pytest.mark.parametrize("truth, pred, ok, rule", [
    ("[80,90]", "[90, 80.0]", True, "compare_lists: all numeric, sorted, isclose"),
    ("[80,90]", "[80,90,90]", False, "compare_lists: lengths must match"),
    ("[80,90]", "85", True, "row_bits: numeric 2-list truth holds a scalar within tol"),
    ("[80,90]", "90.001", True, "row_bits: hi + 1e-3"),
    ("[0.06,3,426]", "3", False, "row_bits: only a 2-list is a range"),
    ("['a','b']", "[B, A]", True, "parse_listish: JSON fails -> split, lower; sorted texts"),
    ("[a, b]", "[a, 'b']", False, "parse_listish: the split fallback keeps quotes"),
    ("['x',1]", "['X',1.0]", True, "compare_lists: mixed list -> str(float) texts, '1.0' both"),
    ("['x',1]", "['x',1.0004]", False, "compare_lists: no tolerance inside a mixed list"),
    ("{a, b}", "{B,a}", True, "parse_listish: {..} is a lowercase set"),
    ("{a, b}", "[a, b]", True, "compare_lists: a set and a text list compare as sorted texts"),
    ("[]", "[]", True, "compare_lists: two empty lists are equal"),
    ("['a']", "a", False, "row_bits: categorical list truth vs a scalar is wrong"),
    ("5", "[5]", False, "row_bits: a list against a scalar truth is compared as text"),
    ("nan", "nan", False, "both_numeric + isclose: NaN never matches"),
    ("inf", "INF", True, "both_numeric + isclose: inf == inf"),
    ("1_000", "1000", True, "both_numeric: Python float() reads '1_000'"),
    ("Hivemind", " HIVEMIND ", True, "row_bits: stripped lowercase text"),
])
def test_value_rules(variant: str, truth: str, pred: str, ok: bool, rule: str) -> None:
    assert value_ok(truth, pred, variant) is ok, rule


# ---------------------------------------------------------------------------------------------
# refs: canon_refs() / ref_overlap_score()


@pytest.mark.parametrize("variant", BOTH)
def test_quoted_json_and_blank_item_ref_lists(tmp_path: Path, sol: Path, variant: str) -> None:
    """canon_refs(): a field starting with '[' is JSON after ' -> " (so a double-quoted JSON list
    reads fine); anything else, a quoted list "['a2020']" included, is ONE lowercase id; blank
    items of a list are ids like any other."""
    sub = sub_with(tmp_path, {
        ("q1", "ref_id"): "\"['a2020']\"",  # quoted list: one id -> Jaccard 0
        ("q3", "ref_id"): '["B2021", "c2022"]',  # JSON, double quotes, case-insensitive -> 1
        ("q4", "ref_id"): "['d2023','is_blank']",  # {'d2023','is_blank'} vs {'d2023'} -> 0.5
    })
    r = score_files(sol, sub, variant)
    assert r.ref == pytest.approx((0 + 1 + 1 + 0.5) / 4)
    assert r.score == pytest.approx(score(1.0, 0.625, 1.0))
    assert kinds(r) == [(1, "ref_id", "malformed ref list"), (4, "ref_id", "blank item in a list")]


@pytest.mark.parametrize("truth, pred, expected, rule", [
    ("['a']", "['a', null]", 0.5, "canon_refs: JSON null is _s(None) = '' , one more id"),
    ("['a']", "['a','']", 0.5, "canon_refs: an empty item is an id"),
    ("['d2023']", "[\"d2023\", \"it's\"]", 0.0, "canon_refs: ' -> \" breaks the JSON: ONE id"),
    ("['d2023']", "[d2023]", 0.0, "canon_refs: unquoted items are not JSON: ONE id"),
    ("is_blank", "is_blank", 1.0, "canon_refs: is_blank is one id"),
    ("is_blank", "[]", 0.0, "ref_overlap_score: one empty set -> 0"),
    ("['a2020']", "is_blank", 0.0, "canon_refs: is_blank is an id, not 'no refs'"),
    ("[]", "[]", 1.0, "ref_overlap_score: both empty -> 1"),
    ("['a','b']", " ['B'] ", 0.5, "canon_refs: strip, lower; Jaccard"),
])
def test_ref_rules(truth: str, pred: str, expected: float, rule: str) -> None:
    assert ref_score(truth, pred) == pytest.approx(expected), rule


def test_malformed_ref_is_counted_and_warned(tmp_path: Path, sol: Path) -> None:
    """canon_refs(): json.loads fails -> [s.lower()] (no second reader)."""
    sub = sub_with(tmp_path, {("q4", "ref_id"): "[\"d2023\", \"it's\"]"})
    r = score_files(sol, sub)
    assert r.n_malformed_refs == 1 and r.ref == 0.75
    assert kinds(r) == [(4, "ref_id", "malformed ref list")]


# ---------------------------------------------------------------------------------------------
# rows: score()'s `sol.join(sub, how="inner")`


@pytest.mark.parametrize("variant", BOTH)
def test_duplicate_ids_are_scored_row_by_row(tmp_path: Path, sol: Path, variant: str) -> None:
    """score(): the inner join keeps every submission row of a duplicated id."""
    rows = [list(r) for r in TRUTH] + [["q1", "5", "MWh", "['a2020']", "e"]]
    sub = write(tmp_path / "submission.csv", rows)
    r = score_files(sol, sub, variant)
    assert r.n == 5 and r.value == pytest.approx(4 / 5) and r.score == pytest.approx(score(0.8, 1.0, 1.0))
    assert kinds(r) == [(5, "id", "duplicate id")]
    with pytest.raises(MetricError, match=r"row 5 \(id 'q1'\), column 'id': duplicate id \(also row 1\)"):
        score_files(sol, sub, variant, strict=True)


def test_missing_ids_wrong_by_default_dropped_with_subset(tmp_path: Path, sol: Path) -> None:
    """score(): the inner join drops solution ids the submission lacks (subset=True); kohaku's
    default counts them wrong on every component, with a warning naming them."""
    sub = write(tmp_path / "submission.csv", [list(r) for r in TRUTH[:3]])
    default = score_files(sol, sub)
    assert default.n_missing == 1 and default.score == pytest.approx(score(0.75, 0.75, 0.75))
    assert any("q4" in w and "--subset" in w for w in default.warnings)
    assert score_files(sol, sub, subset=True).score == 1.0


# ---------------------------------------------------------------------------------------------
# LATEST only: _normalize_sub_value(), and NA recall


@pytest.mark.parametrize("truth, pred, rule", [
    ("10000", "10,000", "commas dropped when the rest is a float"),
    ("10000", "about 10,000", "a hedge, then commas"),
    ("10000", "~10k", "a hedge, then a magnitude suffix"),
    ("2000000000", "2B", "magnitude suffix k/M/B/T"),
    ("50", "more than 50", "hedge words"),
    ("50", "> 50", "hedge signs"),
    ("1", "True", "true/yes -> 1"),
    ("0", "no", "false/no -> 0"),
    ("[80,90]", "80-90", "a-b -> [a,b]"),
    ("[80,90]", "from 90 to 80", "from a to b, sorted"),
    ("[80,90]", "85", "scalar in range (also FIRST)"),
])
def test_latest_normalises_the_submitted_value(truth: str, pred: str, rule: str) -> None:
    assert value_ok(truth, pred, "wattbot-recall") is True, rule
    if rule != "scalar in range (also FIRST)":
        assert value_ok(truth, pred, "wattbot") is False, rule


@pytest.mark.parametrize("truth, pred, rule", [
    ("3500000", "3.5 million", "no magnitude words"),
    ("5", "[5]", "a one-item list stays a list"),
    ("ML.ENERGY Benchmark", "ML.ENERGY  Benchmark", "no whitespace collapsing"),
    ("10000", "10000 MWh", "no unit stripping"),
    ("1000", "1,100", "normalising cannot make a wrong value right"),
    ("1,2", "1,2", "only the normalised form is compared (commas dropped: '12')"),
])
def test_latest_normalisation_goes_no_further(truth: str, pred: str, rule: str) -> None:
    assert value_ok(truth, pred, "wattbot-recall") is False, rule


def test_first_and_latest_differ_on_na(tmp_path: Path, sol: Path) -> None:
    """FIRST: NA = mean of na_ok over all rows; LATEST: recall over truly-NA rows."""
    sub = sub_with(tmp_path, {("q2", "answer_value"): "7", ("q4", "answer_value"): "is_blank"})
    first, latest = score_files(sol, sub, "wattbot"), score_files(sol, sub, "wattbot-recall")
    assert first.na == 0.75 and latest.na == 0.0  # q4's abstention is not an NA error in either
    assert first.value == latest.value == 0.75


def test_scoring_issues_on_a_clean_submission_is_empty(tmp_path: Path) -> None:
    assert scoring_issues(read_csv_str(write(tmp_path / "s.csv", TRUTH)), "s.csv") == []
