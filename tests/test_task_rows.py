"""Metrics over whole rows (issue 40): the built-in reference metrics on cited documents and
pages, set-level metrics, points combined as sums with the competition's rounding, a
scoring-only task, and the example task ``pages_example`` checked against a scorer written
here from its rules alone (no kohaku code)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from kohaku.core.config import ConfigError
from kohaku.tasks import load_task
from kohaku.tasks.score import refs
from kohaku.tasks.score.scoring import round_score, score_submission

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "data" / "sample" / "pages_example"


# -- an independent scorer of pages_example, from the rules in conf/task/pages_example.yaml ------

def _squad_norm(s: str) -> str:
    import re
    import string
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def independent_scores(solutions: Path, submission: Path) -> tuple[dict[str, tuple[Fraction, Fraction]], str]:
    """{qid: (answer points, page points)} and the total printed with one decimal, half up."""
    with solutions.open(newline="") as fh:
        gold = {r["id"]: r for r in csv.DictReader(fh)}
    with submission.open(newline="") as fh:
        sub = {r["id"]: r for r in csv.DictReader(fh)}
    per_q = {}
    gold_na, pred_na = [], []
    for qid, g in gold.items():
        s = sub.get(qid, {"answer": "", "pages": ""})
        answer = Fraction(int(_squad_norm(s["answer"]) == _squad_norm(g["answer"]) and s["answer"].strip() != ""))
        cited = {int(p) + 1 for p in json.loads(s["pages"] or "[]")}       # from 0 -> from 1
        pools = [set(p) for p in json.loads(g["pools"])]
        uncited = sum(1 for p in pools if not (p & cited))
        stray = sum(1 for c in cited if not any(c in p for p in pools))
        pages = max(Fraction(0), 1 - Fraction(1, 2) * uncited - Fraction(1, 4) * stray)
        per_q[qid] = (answer, pages)
        gold_na.append(g["answer"].strip().lower() == "n/a")
        pred_na.append(s["answer"].strip().lower() == "n/a" or not s["answer"].strip())
    tp = sum(a and b for a, b in zip(gold_na, pred_na))
    fp = sum(b and not a for a, b in zip(gold_na, pred_na))
    fn = sum(a and not b for a, b in zip(gold_na, pred_na))
    f1 = Fraction(1) if tp + fp + fn == 0 else Fraction(2 * tp, 2 * tp + fp + fn)
    total = sum(a + p for a, p in per_q.values()) + Fraction(1, 2) * f1
    tenths = (total * 10 + Fraction(1, 2)).__floor__()     # half up, exactly
    return per_q, f"{tenths // 10}.{tenths % 10}"


@pytest.mark.parametrize("name,total", [("submission_a.csv", "12.3"), ("submission_b.csv", "11.3")])
def test_example_task_matches_an_independent_scorer(name, total):
    task = load_task("pages_example")
    sol, sub = EXAMPLE / "solutions.csv", EXAMPLE / name
    result = score_submission(task, sol, sub)
    per_q, printed = independent_scores(sol, sub)
    assert printed == total                                      # both totals end in .25 unrounded
    assert f"{result.score:.1f}" == printed
    got = {r["qid"]: (Fraction(r["answer"]), Fraction(r["pages"])) for r in result.table.to_dicts()}
    assert got == per_q
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "score.py"), str(sol), str(sub),
                          "--task", "pages_example"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == f"score: {total}"
    na = {"submission_a.csv": "0.5", "submission_b.csv": "1.0"}[name]     # the N/A F1
    assert f"na              0.50      {na}   (set)" in out.stdout


def test_the_tie_is_rounded_as_the_task_says():
    assert round_score(12.25, 1, "half_up") == 12.3
    assert round_score(12.25, 1, "half_even") == 12.2
    assert round_score(2.675, 2, "python") == 2.67          # the binary float is below .675
    assert round_score(2.675, 2, "half_up") == 2.68         # as printed
    assert round_score(-0.25, 1, "half_up") == -0.3
    task = load_task("pages_example")
    task.score.rounding = "half_even"
    assert score_submission(task, EXAMPLE / "solutions.csv", EXAMPLE / "submission_a.csv").score == 12.2


def test_components_as_means_without_rounding():
    task = load_task("pages_example")
    task.score.combine, task.score.round = "mean", None
    r = score_submission(task, EXAMPLE / "solutions.csv", EXAMPLE / "submission_a.csv")
    assert r.components == {"answer": 0.75, "pages": 0.75, "na": 0.5}
    assert r.score == pytest.approx(0.75 + 0.75 + 0.25)


def test_scoring_only_task_needs_no_prompts_but_cannot_run():
    task = load_task("pages_example")
    assert task.answer.scoring_only
    with pytest.raises(ConfigError, match="only scores files"):
        task.answer.require()


def test_metrics_see_whole_rows(tmp_path):
    (tmp_path / "sol.csv").write_text("id,answer,ref_id,kind\nq1,10,\"['a','b']\",number\nq2,x,['c'],name\n")
    (tmp_path / "sub.csv").write_text("id,answer,ref_id,extra\nq1,10,['a'],p\nq2,y,['c'],r\n")
    mod = tmp_path / "rowmetric.py"
    mod.write_text("def kind_of(rows, params, env):\n"
                   "    return [1.0 if r['solution']['kind'] == 'number' and r['submission']['extra'] == 'p'"
                   " else 0.0 for r in rows]\n")
    sys.path.insert(0, str(tmp_path))
    try:
        from kohaku.tasks import build_task
        task = build_task({"name": "t", "submission": {"writer": "columns",
                           "columns": {"id": "qid", "answer": "value", "ref_id": "refs"}},
                           "solutions": {"id": "id", "answer": "answer", "refs": "ref_id"},
                           "score": {"scorer": "components", "classes": "generic", "metrics": [
                               {"name": "k", "fn": "rowmetric:kind_of"},
                               {"name": "docs", "fn": "doc_jaccard", "weight": 0.0}]}})
        r = score_submission(task, tmp_path / "sol.csv", tmp_path / "sub.csv")
    finally:
        sys.path.remove(str(tmp_path))
    assert r.table["k"].to_list() == [1.0, 0.0]
    assert r.table["docs"].to_list() == [0.5, 1.0]                # WattBot's Jaccard


def test_pages_and_pools():
    assert refs.parse_pages("[0, 3]", base=0) == {(None, 1), (None, 4)}
    assert refs.parse_pages("doc1:3;doc2:4") == {("doc1", 3), ("doc2", 4)}
    assert refs.parse_pools("3|4;10") == [{(None, 3), (None, 4)}, {(None, 10)}]
    p, r, f = refs.page_prf({(None, 1), (None, 2)}, {(None, 2), (None, 3), (None, 4)}, beta=2.0)
    assert (p, r) == (0.5, 1 / 3)
    assert f == pytest.approx(5 * 0.5 * (1 / 3) / (4 * 0.5 + 1 / 3))
    pools = [{(None, 3), (None, 4)}, {(None, 10)}]
    assert refs.pools_score({(None, 4)}, pools) == 0.5                      # one pool uncited
    assert refs.pools_score({(None, 4), (None, 10), (None, 7)}, pools) == 0.75
    assert refs.pools_score({(None, 1), (None, 2), (None, 5)}, pools) == 0.0  # floor 0
    assert refs.na_f1([True, False, True], [True, True, False]) == 0.5
    assert refs.na_f1([True, False], [True, False], "macro") == 1.0


def test_score_py_resolves_interpolations_and_writes_rows(tmp_path):
    text = (ROOT / "conf" / "task" / "pages_example.yaml").read_text()
    task = tmp_path / "mine.yaml"
    task.write_text(text.replace("name: pages_example", "name: ${corpus.root}_task"))
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "score.py"), str(EXAMPLE / "solutions.csv"),
                          str(EXAMPLE / "submission_b.csv"), "--task", str(task), "--set", "corpus.root=zz",
                          "--json", str(tmp_path / "s.json")], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("task: zz_task")
    data = json.loads((tmp_path / "s.json").read_text())
    assert [r["qid"] for r in data["rows"]] == [f"q{i}" for i in range(1, 9)]
    assert data["rows"][0]["pages"] == 0.5 and data["score"] == 11.3


# -- the score key holds the code of every function the task names ---------------------------

def test_editing_a_metric_changes_the_score_key_and_nothing_else(tmp_path, monkeypatch):
    """A task naming ``mymetrics:score_it``: the score stage's key changes when the function's
    module is edited, stays when it is not, and no other stage's key moves."""
    from omegaconf import OmegaConf

    from conftest import compose
    from kohaku.runner.sweep import predict_keys

    mod = tmp_path / "mymetrics_issue40.py"
    mod.write_text("def score_it(rows, params, env):\n    return [1.0 for r in rows]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    metrics = "[{name: m, fn: 'mymetrics_issue40:score_it', weight: 1.0}]"
    overrides = ["task=short_answer", f"task.score.metrics={metrics}"]

    def keys():
        import importlib
        import sys as _sys
        _sys.modules.pop("mymetrics_issue40", None)
        importlib.invalidate_caches()
        return predict_keys(compose(overrides), fingerprint=lambda paths: {str(p): "-" for p in paths})

    first, again = keys(), keys()
    assert first == again                                             # no edit: the same key
    mod.write_text("def score_it(rows, params, env):\n    return [0.0 for r in rows]\n")
    edited = keys()
    assert [s for s in first if first[s] != edited[s]] == ["score"]   # an edit: only score moves
    assert OmegaConf is not None


def test_code_hash_of_builtins_and_unresolved_names():
    from kohaku.tasks.named.registry import code_hash

    assert code_hash("metric", "token_f1") == code_hash("metric", "exact_match")   # kohaku's scoring code
    assert len(code_hash("metric", "token_f1")) == 64
    assert code_hash("metric", "no_such_module_x:fn").startswith("unresolved: ")
