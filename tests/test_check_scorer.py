"""scripts/check_scorer.py: kohaku's metric against a competition's own scorer, row by row
(issue 40). The scorer here is written independently from pages_example's rules (no kohaku
code); a scorer with one rule wrong shows its disagreeing rows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kohaku.tasks import load_task
from kohaku.tasks.score.check import perturbations

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "data" / "sample" / "pages_example"

SCORER = '''
import csv, json, re, string, sys
def norm(s):
    s = "".join(ch for ch in s.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\\b(a|an|the)\\b", " ", s).split())
gold = {r["id"]: r for r in csv.DictReader(open(sys.argv[1]))}
print("id,answer,pages")
for r in csv.DictReader(open(sys.argv[2])):
    g = gold[r["id"]]
    answer = float(bool(r["answer"].strip()) and norm(r["answer"]) == norm(g["answer"]))
    try:
        cited = {int(p) + OFFSET for p in json.loads(r["pages"] or "[]")}
    except ValueError:
        cited = set()
    pools = [set(p) for p in json.loads(g["pools"])]
    miss = sum(1 for p in pools if not p & cited)
    stray = sum(1 for c in cited if not any(c in p for p in pools))
    print(f"{r['id']},{answer},{max(0.0, 1 - 0.5 * miss - 0.25 * stray)}")
'''


def _run(tmp_path: Path, offset: int) -> subprocess.CompletedProcess:
    scorer = tmp_path / f"scorer{offset}.py"
    scorer.write_text(SCORER.replace("OFFSET", str(offset)))
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "check_scorer.py"), str(EXAMPLE / "solutions.csv"),
                           str(EXAMPLE / "submission_a.csv"), str(EXAMPLE / "submission_b.csv"),
                           "--task", "pages_example", "--out-dir", str(tmp_path / "out"),
                           "--scorer", f"{sys.executable} {scorer} {{solutions}} {{submission}}"],
                          capture_output=True, text=True, cwd=ROOT)


def test_every_row_agrees_with_an_independent_scorer(tmp_path):
    out = _run(tmp_path, 1)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().splitlines()[-1] == "rows agree: 80 / 80"      # 2 real + 8 perturbed, 8 rows each
    assert "gold:na_swapped" in out.stdout and "answer,pages" in out.stdout


def test_a_wrong_rule_shows_its_rows(tmp_path):
    out = _run(tmp_path, 0)      # reads the submission's pages from 1 instead of 0
    assert out.returncode == 1
    assert "q1: pages: kohaku 1 vs scorer 0" in out.stdout
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith("rows agree: ") and last != "rows agree: 80 / 80"


def test_perturbations_change_what_they_say():
    subs = perturbations(load_task("wattbot"), ROOT / "data" / "sample" / "solutions.csv")
    exact, na = subs["exact"], subs["na_swapped"]
    assert exact.columns == ["id", "answer_value", "answer_unit", "ref_id", "explanation"]
    blank = [v == "is_blank" for v in exact["answer_value"].to_list()]
    assert [v == "is_blank" for v in na["answer_value"].to_list()] == [not b for b in blank]
    off = subs["off_5pct"]["answer_value"].to_list()
    assert any(a != b for a, b in zip(off, exact["answer_value"].to_list()))
