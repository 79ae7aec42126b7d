"""scripts/ensemble.py --task: submissions of any task voted with the task's grouping, written
in its format (issue 40)."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import polars as pl

from kohaku.tasks import load_task
from kohaku.answer.ensemble import ensemble_task

ROOT = Path(__file__).resolve().parents[1]
HEAD = ["financebench_id", "question", "answer", "doc_name", "pages", "explanation"]


def _write(path: Path, rows: list[list[str]]) -> Path:
    with path.open("w", newline="") as fh:
        csv.writer(fh).writerows([HEAD, *rows])
    return path


def test_financebench_three_submissions(tmp_path):
    a = _write(tmp_path / "a.csv", [["q1", "Capex?", "$1,577.00", "3M_2018_10K", "3M_2018_10K:60", "e1"],
                                    ["q2", "Capital intensive?", "Yes", "3M_2022_10K", "", "e2"],
                                    ["q3", "Margin?", "N/A", "", "", "e3"]])
    b = _write(tmp_path / "b.csv", [["q1", "Capex?", "$1.577 billion", "3M_2018_10K", "", "x"],
                                    ["q2", "Capital intensive?", "yes", "3M_2022_10K", "", "x"],
                                    ["q3", "Margin?", "12%", "", "", "x"]])
    c = _write(tmp_path / "c.csv", [["q1", "Capex?", "1577", "3M_2018_10K;3M_2017_10K", "", "y"],
                                    ["q2", "Capital intensive?", "No", "", "", "y"],
                                    ["q3", "Margin?", "N/A", "", "", "y"]])
    out = tmp_path / "ens.csv"
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "ensemble.py"), "--task", "financebench",
                          "--out", str(out), str(a), str(b), str(c)], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    rows = list(csv.DictReader(out.open()))
    assert [r["answer"] for r in rows] == ["$1,577.00", "Yes", "N/A"]   # as written; N/A an answer
    assert rows[0]["doc_name"] == "3M_2018_10K" and rows[0]["explanation"] == "e1"
    assert list(rows[0]) == HEAD                                       # the task's columns
    answers, _ = ensemble_task([pl.read_csv(p, infer_schema=False) for p in (a, b, c)], load_task("financebench"))
    assert answers["agreement"].to_list()[0] == 1.0                     # $1.577 billion = 1577 = $1,577.00
    assert answers["n_votes"].to_list() == [3, 3, 3]


def test_a_task_that_abstains_drops_its_blank_tokens():
    task = load_task("short_answer")
    task.answer.abstention = "allowed"
    frames = [pl.DataFrame({"id": ["s1"], "answer": [v]}) for v in ("n/a", "Kestrel", "the Kestrel")]
    answers, sub = ensemble_task(frames, task)
    assert sub["answer"].to_list() == ["Kestrel"]                       # text grouping: Kestrel = the Kestrel
    assert answers["n_blank"].to_list() == [1]
