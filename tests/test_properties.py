"""Property tests (hypothesis) for the value canonicaliser, the ref-list readers, the scorer and the
input readers. tests/test_values.py and tests/test_metrics.py already check that arbitrary strings
never raise, that render keeps a value's meaning and that a solutions table scores 1.0 against
itself in memory; these add what they do not cover: non-string values, symmetry, render as a fixed
point, ref lists round-tripping, self-scoring through real CSV files with arbitrary text, row
order, and readers of arbitrary bytes failing only with their own named errors."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kohaku.ingest.corpus import CorpusError, check_doc_id, read_metadata
from kohaku.tasks.files.io import read_questions
from kohaku.tasks.rooms.wattbot.metric import MetricError, parse_refs, score_files, score_frames, value_ok
from kohaku.answer.voting import VoteConfig, vote
from kohaku.tasks.rooms.wattbot.submission import (PANDAS_NA_TOKENS, SUBMISSION_COLUMNS, SubmissionError, format_ref_list,
                               parse_ref_list, read_csv_str)
from kohaku.core.values import canonical, is_blank_value, render, same

KINDS = {"blank", "number", "range", "list", "name"}
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                         HealthCheck.function_scoped_fixture])

# values that look like answers, mixed with arbitrary text
answer_like = st.one_of(
    st.text(max_size=30),
    st.from_regex(r"[~>]?\s?-?\d{1,4}([.,]\d{1,3})?\s?(k|M|%|x|kWh|J)?", fullmatch=True),
    st.from_regex(r"\[?-?\d{1,3}(\.\d)?\s?(,|-|to)\s?-?\d{1,3}(\.\d)?\]?", fullmatch=True),
    st.sampled_from(["is_blank", "N/A", "TRUE", "false", "['a','b']", "[b, a]", "Site A", "1e3",
                     "about 1 thousand", "[", "]", "''", "nan", "inf", "-0", "1,000"]),
)
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True),
                    st.floats(allow_infinity=True))


@FAST
@given(scalars)
def test_canonical_accepts_non_string_values(value) -> None:
    c = canonical(value)
    assert c.kind in KINDS
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        assert c.kind == "blank"
    else:
        assert c.kind == "number" and same(c, float(value))


@FAST
@given(answer_like, answer_like)
def test_same_is_symmetric_and_reflexive(a: str, b: str) -> None:
    assert same(a, b) == same(b, a)
    assert same(a, a) and same(b, b)


@FAST
@given(answer_like)
def test_render_is_a_fixed_point(text: str) -> None:
    once = render(text)
    assert render(once) == once
    assert canonical(once).kind == canonical(text).kind


@FAST
@given(answer_like)
def test_surrounding_whitespace_never_changes_a_value(text: str) -> None:
    assert same(f"  {text}\t", text)
    assert is_blank_value(f" {text} ") == is_blank_value(text)


doc_ids = st.from_regex(r"[a-z][a-z0-9_.+-]{0,11}", fullmatch=True).filter(lambda s: ".." not in s)


@FAST
@given(st.lists(doc_ids, max_size=5, unique=True))
def test_ref_lists_round_trip_for_every_valid_doc_id(ids: list[str]) -> None:
    assert all(check_doc_id(i) is None for i in ids)
    text = format_ref_list(ids)
    keep = [i for i in ids if not is_blank_value(i)]
    assert parse_ref_list(text) == keep
    refs, malformed = parse_refs(text)
    assert not malformed
    assert refs == (frozenset(keep) if keep else frozenset({"is_blank"}))


@FAST
@given(st.text(max_size=40))
def test_ref_readers_never_raise_and_return_strings(text: str) -> None:
    assert all(isinstance(i, str) and i for i in parse_ref_list(text))
    refs, malformed = parse_refs(text)
    assert isinstance(malformed, bool) and all(isinstance(r, str) for r in refs)


# ---------------------------------------------------------------------------------- scorer

# (no NUL: a file holding one is binary data, refused by kohaku.core.readfile)
cell_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\x00"),
                    max_size=25)
# A value that reads as NaN to the reference scorers ('', 'N/A', 'nan', ...) matches nothing, itself
# included, so the self-score property is for the other values.
value_text = (answer_like | cell_text).filter(
    lambda v: v not in PANDAS_NA_TOKENS and "nan" not in v.lower() and "\x00" not in v)
row = st.tuples(value_text, st.one_of(cell_text, st.lists(doc_ids, max_size=3).map(
    format_ref_list)), cell_text, cell_text.filter(lambda s: s.strip() != ""))


def _rows(rows: list[tuple[str, str, str, str]]) -> pl.DataFrame:
    data = {c: [] for c in SUBMISSION_COLUMNS}
    for i, (value, refs, unit, explanation) in enumerate(rows):
        for c in SUBMISSION_COLUMNS:
            data[c].append({"id": f"q{i:03d}", "answer_value": value, "ref_id": refs, "answer_unit": unit,
                            "explanation": explanation}.get(c, "x"))
    return pl.DataFrame(data)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.lists(row, min_size=1, max_size=6), st.sampled_from(["wattbot", "wattbot-recall"]))
def test_a_solutions_file_scores_one_against_itself_through_csv(tmp_path: Path, rows, variant) -> None:
    path = tmp_path / "solutions.csv"
    _rows(rows).write_csv(path)
    result = score_files(path, path, variant)
    assert result.n == len(rows) and result.n_missing == 0
    assert result.unit == pytest.approx(1.0) and result.ref == 1.0 and result.na == 1.0
    if variant == "wattbot":
        assert result.score == pytest.approx(1.0)
    else:  # the recall reference normalises the submission only ('<' -> '', '0,' -> '0')
        expected = sum(value_ok(v, v, variant) for v, *_ in rows) / len(rows)
        assert result.value == pytest.approx(expected)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(row, min_size=2, max_size=6), st.lists(row, min_size=2, max_size=6),
       st.randoms(use_true_random=False))
def test_score_does_not_depend_on_row_order(truth_rows, pred_rows, rnd) -> None:
    n = min(len(truth_rows), len(pred_rows))
    truth, pred = _rows(truth_rows[:n]), _rows(pred_rows[:n])
    order = list(range(n))
    rnd.shuffle(order)
    a = score_frames(truth, pred, "wattbot")
    b = score_frames(truth, pred[order], "wattbot")
    assert a.score == pytest.approx(b.score) and 0.0 <= a.score <= 1.0 + 1e-12


# ---------------------------------------------------------------------------------- vote

candidate = st.tuples(st.sampled_from(["q1", "q2"]), answer_like, st.lists(doc_ids, max_size=2))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(candidate, min_size=1, max_size=8))
def test_vote_never_raises_and_picks_a_candidate_value(cands) -> None:
    df = pl.DataFrame({
        "qid": [c[0] for c in cands],
        "source_idx": [0] * len(cands),
        "answer": [c[1] for c in cands],
        "answer_value": [c[1] for c in cands],
        "ref_id": [c[2] for c in cands],
        "explanation": ["e"] * len(cands),
        "is_blank": [is_blank_value(c[1]) or not c[2] for c in cands],
    }, schema_overrides={"ref_id": pl.List(pl.String)})
    answers = vote(df, VoteConfig())
    assert sorted(answers["qid"].to_list()) == sorted({c[0] for c in cands})
    for r in answers.iter_rows(named=True):
        offered = [c[1] for c in cands if c[0] == r["qid"]]
        assert is_blank_value(r["answer_value"]) or any(same(r["answer_value"], v) for v in offered)


# ---------------------------------------------------------------------------------- readers


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(st.one_of(st.binary(max_size=200),
                 st.lists(st.lists(cell_text, min_size=1, max_size=4), max_size=4).map(
                     lambda rows: "\n".join(",".join(r) for r in rows).encode("utf-8")),
                 st.sampled_from([b"id,question,answer_unit\n", b"\xff\xfe\x00i\x00d",
                                  b"id,question,answer_unit\nq1,\"unclosed,W\n",
                                  b"id,type,title,year,citation,url\n../x,a,b,c,d,e\n"])))
def test_readers_fail_only_with_their_own_named_errors(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "input.csv"
    path.write_bytes(data)
    for reader, error in ((read_questions, CorpusError), (read_metadata, CorpusError),
                          (read_csv_str, SubmissionError)):
        try:
            df = reader(path)
        except error as exc:
            assert str(path) in str(exc)
        else:
            assert all(dtype == pl.String for dtype in df.schema.values())
    if data.startswith(b"id,type,title,year,citation,url\n../x"):
        with pytest.raises(CorpusError, match="which contains '/'"):
            read_metadata(path)


def test_metric_errors_are_submission_errors() -> None:
    """score_files reports malformed files as MetricError, which the runner shows without a
    traceback (a SubmissionError)."""
    assert issubclass(MetricError, SubmissionError)
