"""Submission format: ref lists, building, writing, validating, round trip (kohaku/tasks/rooms/wattbot/submission.py)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from kohaku.tasks.rooms.wattbot.metric import score_files
from kohaku.tasks.rooms.wattbot.submission import (
    SUBMISSION_COLUMNS,
    SubmissionError,
    answers_to_submission,
    format_ref_list,
    parse_ref_list,
    read_csv_str,
    validate_submission,
    write_submission,
)


@pytest.mark.parametrize(
    "text, ids",
    [
        ("['a','b']", ["a", "b"]), ("['a', 'b']", ["a", "b"]), ('["a"]', ["a"]), ("a", ["a"]),
        ("a, b", ["a", "b"]), ("is_blank", []), ("", []), ("[]", []), ("['is_blank']", []),
        ("['a','a']", ["a"]), ("[ref_id=a]", ["a"]), (["x", "is_blank", "y"], ["x", "y"]), (None, []),
    ],
)
def test_parse_ref_list(text: object, ids: list[str]) -> None:
    assert parse_ref_list(text) == ids


def test_format_ref_list() -> None:
    assert format_ref_list(["a", "b"]) == "['a','b']"
    assert format_ref_list([]) == "is_blank"
    assert format_ref_list(None) == "is_blank"
    assert parse_ref_list(format_ref_list(["cottier2025", "li2025a"])) == ["cottier2025", "li2025a"]


def answers() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "qid": ["q2", "q1"],
            "answer": ["", "The Hivemind system"],
            "answer_value": ["[80,90]", "Hivemind"],
            "ref_id": [["d1", "d2"], ["d3"]],
            "ref_url": [["https://1", "https://2"], []],
            "explanation": ["Table 2 gives 80-90.", ""],
            "is_blank": [False, False],
        }
    )


def questions() -> pl.DataFrame:
    return pl.DataFrame({
        "qid": ["q1", "q2", "q3"], "question": ["Which, exactly?", 'Range "quoted"?', "None?"],
        "answer_unit": ["is_blank", "percent", "kWh"],
    })


def test_answers_to_submission_fills_every_field() -> None:
    sub = answers_to_submission(answers(), questions())
    assert sub.columns == list(SUBMISSION_COLUMNS)
    assert sub["id"].to_list() == ["q1", "q2", "q3"]  # question order
    q1, q2, q3 = sub.to_dicts()
    assert q1["explanation"] == "is_blank" and q1["ref_url"] == "is_blank" and q1["ref_id"] == "['d3']"
    assert q2["answer"] == "[80,90] percent"  # empty answer rebuilt from value and unit
    assert q2["ref_id"] == "['d1','d2']" and q2["ref_url"] == "['https://1','https://2']"
    assert q3["answer_value"] == "is_blank" and q3["answer_unit"] == "kWh"
    assert validate_submission(sub) == []


def test_round_trip_through_csv_and_scorer(tmp_path: Path) -> None:
    sub = answers_to_submission(answers(), questions())
    path = write_submission(sub, tmp_path / "sub.csv")
    back = read_csv_str(path)
    assert back.equals(sub)
    # a submission scored against itself is perfect
    assert score_files(path, path).score == pytest.approx(1.0)
    assert score_files(path, path, "wattbot-recall").score == pytest.approx(1.0)


def test_validate_names_row_and_column() -> None:
    sub = answers_to_submission(answers(), questions())
    bad = sub.with_columns(pl.when(pl.col("id") == "q2").then(pl.lit("")).otherwise(pl.col("explanation"))
                           .alias("explanation"))
    problems = validate_submission(bad)
    assert problems == ["submission: row 2 (id 'q2'), column 'explanation': empty (write is_blank)"]
    with pytest.raises(SubmissionError, match="column 'explanation'"):
        write_submission(bad, Path("/nonexistent/never-written.csv"))
    assert "missing column" in validate_submission(sub.drop("ref_url"))[0]
    dup = pl.concat([sub, sub.head(1)])
    assert any("rows 1 and 4, column 'id': duplicate id 'q1'" in p for p in validate_submission(dup))


def test_read_csv_str_strips_bom_and_keeps_ids_as_text(tmp_path: Path) -> None:
    path = tmp_path / "bom.csv"
    path.write_bytes("\ufeffid,answer_value,ref_id\n007,1.50,\n".encode())
    df = read_csv_str(path)
    assert df.columns == ["id", "answer_value", "ref_id"]
    assert df.row(0) == ("007", "1.50", "")
    with pytest.raises(FileNotFoundError, match="missing.csv"):
        read_csv_str(tmp_path / "missing.csv")
