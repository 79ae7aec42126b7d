"""scripts/compare.py and kohaku/report/compare.py: sources, seeds, subsets, flips, JSON."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import polars as pl
import pytest

from kohaku.report.compare import CompareError, Config, flips, parse_source, score_matrix, score_source, submission_of

REPO = Path(__file__).resolve().parents[1]
IDS = [f"q{i}" for i in range(10)]
TRUTH = ["1", "2", "3", "4", "5", "6", "7", "8", "is_blank", "Hivemind"]


def load_script():
    spec = importlib.util.spec_from_file_location("compare_script", REPO / "scripts" / "compare.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def write_solutions(path: Path) -> Path:
    pl.DataFrame({"id": IDS, "question": [f"Question {i}?" for i in range(10)], "answer_value": TRUTH,
                  "ref_id": ["['a']"] * 9 + ["['b']"]}).write_csv(path)
    return path


def write_submission(path: Path, values: list[str], ids: list[str] = IDS, refs: list[str] | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pl.DataFrame({"id": ids, "answer_value": values, "ref_id": refs or (["['a']"] * 9 + ["['b']"])[:len(ids)],
                  "explanation": ["e"] * len(ids)}).write_csv(path)
    return path


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    sol = write_solutions(tmp_path / "sol.csv")
    a = write_submission(tmp_path / "a.csv", ["1", "2", "3", "4", "x", "x", "x", "x", "is_blank", "Petals"])
    # b fixes q4, q5 (q5 by a scale slip corrected) and breaks q0
    b = write_submission(tmp_path / "run_b" / "submission.csv",
                         ["1000", "2", "3", "4", "5", "6", "x", "x", "is_blank", "Petals"])
    return {"sol": sol, "a": a, "b": b.parent}


def test_compare_cli_prints_the_table_and_writes_the_json(files, tmp_path, capsys):
    out = tmp_path / "cmp.json"
    rc = load_script().main(["--solutions", str(files["sol"]), str(files["a"]), str(files["b"]),
                             "--resamples", "2000", "--json", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0
    data = json.loads(out.read_text())
    pair = data["pairs"][0]
    assert (pair["a"], pair["b"]) == (str(files["a"]), str(files["b"]))  # names as given
    assert pair["n"] == 10 and (pair["fixed"], pair["broken"]) == (2, 1)
    # a: value right on q0-q3, q8 (blank) -> 5; b: q1-q5, q8 -> 6; refs and NA all right
    assert pair["delta"] == pytest.approx(0.75 * (6 - 5) / 10)
    assert pair["ci"][0] <= pair["delta"] <= pair["ci"][1] and pair["p_holm"] == pair["p"]
    assert set(pair) >= {"a", "b", "delta", "ci", "p", "p_holm", "fixed", "broken", "n"}
    assert data["errors"][str(files["a"])]["wrong_number"] == 4
    assert data["errors"][str(files["b"])]["scale"] == 1 and data["errors"][str(files["b"])]["correct"] == 6
    flipped = data["flips"][f"{files['a']} vs {files['b']}"]
    assert [(f["qid"], f["change"]) for f in flipped] == [("q4", "fixed"), ("q5", "fixed"), ("q0", "broken")]
    assert flipped[2] == {"qid": "q0", "change": "broken", "delta": -0.75, "question": "Question 0?",
                          "truth": "1", "truth_ref": "['a']", "a_answer": "1", "a_ref": "['a']",
                          "a_class": "correct", "b_answer": "1000", "b_ref": "['a']", "b_class": "scale",
                          "kind": "number"}
    assert "delta = B - A" in printed and "flipped questions" in printed and "scale" in printed


def test_all_pairs_holm_and_seed_groups(files, tmp_path):
    c1 = write_submission(tmp_path / "c1.csv", ["1", "2", "3", "4", "5", "6", "7", "8", "is_blank", "Hivemind"])
    c2 = write_submission(tmp_path / "c2.csv", ["1", "2", "3", "4", "5", "6", "7", "x", "is_blank", "Hivemind"])
    out = tmp_path / "all.json"
    rc = load_script().main(["--solutions", str(files["sol"]), f"A={files['a']}", f"B={files['b']}",
                             f"C={c1},{c2}", "--all-pairs", "--resamples", "1000", "--json", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    assert [(p["a"], p["b"]) for p in data["pairs"]] == [("A", "B"), ("A", "C"), ("B", "C")]
    ps = sorted(p["p"] for p in data["pairs"])
    assert min(p["p_holm"] for p in data["pairs"]) == pytest.approx(min(1.0, 3 * ps[0]))
    c = next(i for i in data["intervals"] if i["name"] == "C")
    # C's seeds score 1.0 and 0.925 (one value wrong of 10): averaged per question -> 0.9625
    assert c["n_seeds"] == 2 and c["score"] == pytest.approx(0.9625)
    assert c["seed_sd"] == pytest.approx(0.075 / 2 ** 0.5)
    assert data["errors"]["C"]["correct"] == 9.5
    # three sources: the selection section; C is the in-sample best (0.9625 against 0.625, 0.7)
    sel = data["selection"]
    assert sel["in_sample_best"] == "C" and sel["in_sample_score"] == pytest.approx(0.9625)
    assert sel["optimism"] == pytest.approx(sel["in_sample_score"] - sel["estimate"])
    assert sel["estimate_lo"] <= sel["estimate"] <= sel["estimate_hi"]
    assert [r["config"] for r in sel["configs"]] == ["A", "B", "C"]
    assert sum(r["p_best"] for r in sel["configs"]) == pytest.approx(1.0)
    assert sel["configs"][2]["p_best"] > 0.5 and sel["pick"] in ("A", "B", "C")


def test_subset_keeps_the_questions_every_source_answered(files, tmp_path):
    sol = pl.read_csv(files["sol"], infer_schema=False)
    short = write_submission(tmp_path / "short.csv", ["1", "2", "3"], ids=IDS[:3])
    tables = [score_source(sol, p, "wattbot") for p in (files["a"], short)]
    configs = [Config("a", [tables[0]], ["a"]), Config("s", [tables[1]], ["s"])]
    full = score_matrix(configs, "wattbot")
    assert full.n == 10 and full.scores()[1] == pytest.approx((0.75 * 3 + 0.15 * 3 + 0.10 * 3) / 10 + 0.10 * 0)
    sub = score_matrix(configs, "wattbot", subset=True)
    assert sub.qids == IDS[:3] and list(sub.scores()) == pytest.approx([1.0, 1.0])
    rows = flips(configs, full, 0, 1)
    assert {r["qid"] for r in rows} == set(IDS[3:]) and all(r["b_answer"] is None for r in rows)


def test_sources_and_their_errors(files, tmp_path):
    assert submission_of(files["b"]) == files["b"] / "submission.csv"
    assert parse_source("base=x.csv,y.csv") == ("base", ["x.csv", "y.csv"])
    assert parse_source(str(files["a"])) == (str(files["a"]), [str(files["a"])])
    sweep = tmp_path / "sweep"
    for n in (0, 1):
        (sweep / str(n)).mkdir(parents=True)
        (sweep / str(n) / "run.json").write_text("{}")
    with pytest.raises(CompareError, match="a sweep dir, not a run; pass its points \\(0, 1\\)"):
        submission_of(sweep)
    with pytest.raises(CompareError, match="no submission.csv"):
        submission_of(sweep / "0")
    with pytest.raises(CompareError, match="no such file"):
        submission_of(tmp_path / "nope")
    with pytest.raises(CompareError, match="no path after"):
        parse_source("name=")
    other = write_solutions(tmp_path / "other.csv")
    sol_other = pl.read_csv(other, infer_schema=False).with_columns(pl.col("id").str.replace("q", "z"))
    sol = pl.read_csv(files["sol"], infer_schema=False)
    t1, t2 = score_source(sol, files["a"], "wattbot"), score_source(sol_other, files["a"], "wattbot")
    with pytest.raises(CompareError, match="scored on other questions"):
        score_matrix([Config("x", [t1], ["x"]), Config("y", [t2], ["y"])], "wattbot")


def test_cli_errors_exit_2(files, tmp_path, capsys):
    script = load_script()
    assert script.main(["--solutions", str(files["sol"]), str(files["a"])]) == 2
    assert "at least two sources" in capsys.readouterr().err
    assert script.main(["--solutions", str(files["sol"]), str(files["a"]), str(tmp_path / "missing.csv")]) == 2
    assert "no such file or run dir" in capsys.readouterr().err
    assert script.main(["--solutions", str(files["sol"]), f"x={files['a']}", f"x={files['a']}"]) == 2
    assert "share a name" in capsys.readouterr().err


def test_duplicate_rows_are_averaged(files, tmp_path, caplog):
    dup = write_submission(tmp_path / "dup.csv", ["1", "9"] + ["x"] * 8 + ["wrong"],
                           ids=IDS + ["q0"], refs=["['a']"] * 11)
    sol = pl.read_csv(files["sol"], infer_schema=False)
    t = score_source(sol, dup, "wattbot")
    m = score_matrix([Config("d", [t], ["d"])], "wattbot")
    assert m.n == 10 and m.value[0][0] == 0.5 and m.value[0][1] == 0.0  # q0: one right row of two
    assert "duplicate question row(s) averaged" in caplog.text
