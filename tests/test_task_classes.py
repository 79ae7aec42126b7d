"""kohaku.tasks.analysis.classes: error classes of a non-WattBot task on hand-made rows."""

from __future__ import annotations

import polars as pl
import pytest

from kohaku.tasks.analysis.classes import CLASSES, ERROR_CLASSES, KINDS, classify, classify_row, error_summary

# (qid, truth, pred, pred_blank, missing, correct, f1) -> (kind, class, detail)
ROWS = [
    ("m1", "$1577.00", None, False, True, False, None, "number", "missing", ""),
    ("m2", "KPMG", "KPMG", False, True, True, 1.0, "text", "missing", ""),        # missing wins
    ("b1", "2.8%", "is_blank", True, False, False, None, "number", "needless_abstention", ""),
    ("b2", "KPMG", None, False, False, False, None, "text", "needless_abstention", ""),  # null pred
    ("c1", "$1577.00", "1577", False, False, True, None, "number", "correct", ""),
    ("c2", "Yes", "yes", False, False, True, 1.0, "text", "correct", ""),
    ("f1", "$1577.00", "$1,577 million", False, False, False, None, "number", "wrong_number", "format"),
    ("s1", "-3.7", "3.7", False, False, False, None, "number", "sign", ""),
    ("s2", "(1.2)", "$1.2", False, False, False, None, "number", "sign", ""),
    ("s3", "2.8%", "-0.028", False, False, False, None, "number", "sign", ""),
    ("k1", "$1577.00", "1577000", False, False, False, None, "number", "scale", "x1e3"),
    ("k2", "0.83", "83", False, False, False, None, "number", "scale", "x1e2"),
    ("k3", "1,577", "1.6", False, False, False, None, "number", "scale", "x1e-3"),
    ("k4", "-2", "-2000", False, False, False, None, "number", "scale", "x1e3"),
    ("n1", "100", "104.2", False, False, False, None, "number", "near_miss", "+4.2%"),
    ("n2", "2.8%", "2.6%", False, False, False, None, "number", "near_miss", "-7.1%"),
    ("n3", "2.8%", "0.029", False, False, False, None, "number", "near_miss", "+3.6%"),
    ("n4", "$1577.00", "$1.55 billion", False, False, False, None, "number", "near_miss", "-1.7%"),
    ("w1", "100", "Yes", False, False, False, None, "number", "wrong_number", "not a number"),
    ("w2", "100", "3M", False, False, False, None, "number", "wrong_number", "not a number"),
    ("w3", "100", "150", False, False, False, None, "number", "wrong_number", ""),
    ("w4", "10", "80", False, False, False, None, "number", "wrong_number", ""),  # no unit factors
    ("w5", "0", "5", False, False, False, None, "number", "wrong_number", ""),
    ("w6", "$5", "€5", False, False, False, None, "number", "wrong_number", "currency"),
    ("p1", "Ernst & Young", "Ernst Young LLP", False, False, False, 0.8, "text", "partial", "f1 0.80"),
    ("p2", "Jane Doe", "Jane", False, False, False, 0.5, "text", "partial", "f1 0.50"),
    ("t1", "Jane Doe", "John Roe", False, False, False, 0.0, "text", "wrong_text", ""),
    ("t2", "Jane Doe", "Doe family", False, False, False, 0.49, "text", "wrong_text", ""),
    ("t3", "3M", "3M Company", False, False, False, None, "text", "wrong_text", ""),   # no f1
    ("t4", "The revenue grew by 2.8%", "It fell", False, False, False, None, "text", "wrong_text", ""),
]


def _table(rows=ROWS) -> pl.DataFrame:
    return pl.DataFrame(
        [r[:7] for r in rows],
        schema={"qid": pl.String, "truth": pl.String, "pred": pl.String, "pred_blank": pl.Boolean,
                "missing": pl.Boolean, "correct": pl.Boolean, "f1": pl.Float64},
        orient="row",
    )


def test_classify_hand_rows():
    out = classify(_table())
    assert out.columns[-3:] == ["answer_kind", "error_class", "error_detail"]
    got = list(zip(out["qid"], out["answer_kind"], out["error_class"], out["error_detail"]))
    want = [(r[0], r[7], r[8], r[9]) for r in ROWS]
    assert got == want
    assert out.height == len(ROWS)
    assert set(out["error_class"]) <= set(CLASSES)


@pytest.mark.parametrize("row", ROWS, ids=[r[0] for r in ROWS])
def test_classify_row(row):
    qid, truth, pred, blank, missing, correct, f1, kind, cls, detail = row
    got = classify_row({"qid": qid, "truth": truth, "pred": pred, "pred_blank": blank,
                        "missing": missing, "correct": correct, "f1": f1})
    assert got == (kind, cls, detail)


def test_optional_columns():
    t = pl.DataFrame({"qid": ["a", "b", "c", "d"], "truth": ["Jane Doe", "5", "5", "x"],
                      "pred": ["Jane", "", "N/A", "y"], "correct": [False, False, False, True]})
    out = classify(t)
    # no f1: no partial; no pred_blank: blank tokens read from pred; no missing: none missing
    assert out["error_class"].to_list() == ["wrong_text", "needless_abstention",
                                            "needless_abstention", "correct"]


def test_token_f1_column_serves_as_f1():
    t = pl.DataFrame({"qid": ["a", "b"], "truth": ["Jane Doe", "Jane Doe"], "pred": ["Jane", "Bob"],
                      "correct": [False, False], "token_f1": [0.67, 0.0]})
    out = classify(t)
    assert out["error_class"].to_list() == ["partial", "wrong_text"]
    assert out["error_detail"].to_list() == ["f1 0.67", ""]


def test_explicit_pred_blank_wins_over_text():
    row = {"qid": "a", "truth": "5", "pred": "n/a", "pred_blank": False, "missing": False,
           "correct": False}
    assert classify_row(row) == ("number", "wrong_number", "not a number")


def test_missing_column_is_named():
    with pytest.raises(ValueError, match="correct"):
        classify(pl.DataFrame({"qid": ["a"], "truth": ["1"], "pred": ["1"]}))


def test_empty_table():
    out = classify(_table([]))
    assert out.height == 0 and out["error_class"].dtype == pl.String
    s = error_summary(out)
    assert s["n"] == 0 and s["counts"] == {c: 0 for c in CLASSES}


def test_error_summary():
    s = error_summary(_table())           # classified on the way
    assert list(s["counts"]) == list(CLASSES)
    assert s["counts"] == {"correct": 2, "missing": 2, "needless_abstention": 2, "sign": 3,
                           "scale": 4, "near_miss": 4, "wrong_number": 7, "partial": 2,
                           "wrong_text": 4}
    assert s["n"] == len(ROWS) and s["n_errors"] == len(ROWS) - 2
    assert list(s["by_kind"]) == list(KINDS)
    assert s["by_kind"]["text"] == {"correct": 1, "missing": 1, "needless_abstention": 1,
                                    "sign": 0, "scale": 0, "near_miss": 0, "wrong_number": 0,
                                    "partial": 2, "wrong_text": 4}
    assert sum(s["by_kind"]["number"].values()) + sum(s["by_kind"]["text"].values()) == len(ROWS)
    assert s["details"]["wrong_number"] == {"currency": 1, "format": 1, "not a number": 2}
    assert s["details"]["near_miss"] == {"within 10%": 4}
    assert s["details"]["scale"] == {"x1e-3": 1, "x1e2": 1, "x1e3": 2}
    assert s["details"]["partial"] == {"f1 >= 0.5": 2}
    assert error_summary(classify(_table())) == s


def test_class_tuple():
    assert CLASSES[0] == "correct" and ERROR_CLASSES == CLASSES[1:]
    assert len(set(CLASSES)) == len(CLASSES)
