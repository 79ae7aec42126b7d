"""The ``adopted`` metric (kohaku.tasks.score.adopted): a competition's own scoring script, written
here as a competition would write it (argv parsed and prints at import, a ``__main__`` block,
a sibling module imported, a per-question function, a whole-file function and a stateful class),
adopted by a task YAML with no Python of the user's, scored through scripts/score.py."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kohaku.tasks import load_task
from kohaku.tasks.score.adopted import ScriptError, code_key, script_files
from kohaku.tasks.score.check import check_submissions
from kohaku.tasks.score.scoring import score_code_key, score_submission

ROOT = Path(__file__).resolve().parents[1]

HELPER = '''\
def norm(text):
    return " ".join(str(text).lower().replace(".", " ").split())
'''

SCORER = '''\
"""A competition's scorer: python myscorer.py SOLUTIONS SUBMISSION prints per-question CSV."""
import argparse
import csv
import sys

from helper import norm

print("my scorer, loading")                       # prints at import
parser = argparse.ArgumentParser()
parser.add_argument("files", nargs="*")
parser.add_argument("--verbose", action="store_true")
ARGS = parser.parse_args()                        # parses argv at import


def score_one(prediction, gold, bonus=0.0):
    exact = norm(prediction) == norm(gold)
    p, g = set(norm(prediction).split()), set(norm(gold).split())
    overlap = len(p & g) / len(p | g) if p | g else 1.0
    print("scored", prediction)
    return {"exact": exact, "overlap": overlap, "bonus": bonus}


def score_file(predictions, golds):
    hits = sum(norm(predictions.get(g["id"], "")) == norm(g["answer"]) for g in golds)
    print("accuracy", hits / len(golds))
    return {"accuracy": hits / len(golds), "answered": len(predictions)}


class Meter:
    def __init__(self, weight=1.0):
        self.weight, self.total, self.count = weight, 0.0, 0

    def __call__(self, prediction, gold):
        self.total += self.weight * (norm(prediction)[:3] == norm(gold)[:3])
        self.count += 1

    def get_metric(self):
        return self.total / self.count


def report_file(answers, truths):
    hits = sum(norm(a) == norm(t) for a, t in zip(answers, truths) if a is not None)
    print("scoring done")
    print({"accuracy": hits / len(truths)})


def main(solutions, submission):
    golds = {r["id"]: r["answer"] for r in csv.DictReader(open(solutions))}
    preds = {r["id"]: r["answer"] for r in csv.DictReader(open(submission))}
    print("id,exact")
    for qid, gold in golds.items():
        print(f"{qid},{float(norm(preds.get(qid, '')) == norm(gold)) if qid in preds else 0.0}")
    return 0


if __name__ == "__main__":
    open(ARGS.files[0] + ".main-ran", "w").write("ran")
    sys.exit(main(*ARGS.files[:2]))
'''

TASK = '''\
name: mine
submission:
  writer: columns
  columns: {id: qid, answer: value}
solutions: {id: id, answer: answer, refs: null}
score:
  scorer: components
  metrics:
    - name: exact
      fn: adopted
      params:
        file: myscorer.py
        function: score_one
        args:
          prediction: {submission: answer}
          gold: {solution: answer}
          bonus: {const: 0.5}
        returns: mapping
        score: exact
        components: [overlap]
    - name: prefix
      fn: adopted
      weight: 0
      params:
        file: myscorer.py
        function: Meter
        init: {weight: {const: 1.0}}
        result: get_metric
        args: {prediction: {submission: answer}, gold: {solution: answer}}
    - name: accuracy
      fn: adopted
      level: set
      weight: 0
      params:
        file: myscorer.py
        function: score_file
        args:
          predictions: {submission: answer, shape: by_id}
          golds: {solution: "*"}
        returns: mapping
        score: accuracy
    - name: printed
      fn: adopted
      level: set
      weight: 0
      params:
        file: myscorer.py
        function: report_file
        args: {answers: {submission: answer}, truths: {solution: answer}}
        returns: printed
        score: accuracy
  classes: generic
'''

SOLUTIONS = "id,question,answer\nq1,Who?,Ada Lovelace\nq2,Where?,the Alps\nq3,What?,blue whale\nq4,When?,1923\n"
SUBMISSIONS = {
    "good.csv": "id,answer\nq1,ada lovelace.\nq2,the alps\nq3,blue whale\nq4,1923\n",
    "half.csv": "id,answer\nq1,Ada Byron\nq2,the Alps\nq3,grey whale\n",     # q4 missing
    "empty.csv": "id,answer\nq1,\nq2,Alps\nq3,blue\nq4,1924\n",
}


def _norm(text: str) -> str:
    return " ".join(text.lower().replace(".", " ").split())


def _expected(sub: str) -> dict[str, dict[str, float]]:
    """Each question's exact and overlap, as the script computes them (written again here)."""
    gold = {line.split(",")[0]: line.split(",")[2] for line in SOLUTIONS.splitlines()[1:]}
    pred = {line.split(",")[0]: line.split(",")[1] for line in sub.splitlines()[1:]}
    out = {}
    for qid, g in gold.items():
        p = pred.get(qid, "")
        a, b = set(_norm(p).split()), set(_norm(g).split())
        answered = bool(p.strip())
        out[qid] = {"exact": float(answered and _norm(p) == _norm(g)),
                    "overlap": (len(a & b) / len(a | b)) if answered else 0.0}
    return out


@pytest.fixture
def comp(tmp_path: Path) -> Path:
    (tmp_path / "scorer").mkdir()
    (tmp_path / "scorer" / "helper.py").write_text(HELPER)
    (tmp_path / "scorer" / "myscorer.py").write_text(SCORER)
    (tmp_path / "scorer" / "unrelated.py").write_text("X = 1\n")
    (tmp_path / "scorer" / "task.yaml").write_text(TASK)
    (tmp_path / "solutions.csv").write_text(SOLUTIONS)
    for name, text in SUBMISSIONS.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def _score(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "score.py"), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_score_py_scores_with_the_adopted_script(comp: Path, tmp_path: Path) -> None:
    # run from another folder: the task's relative file is the task file's neighbour
    out = tmp_path / "one.json"
    proc = _score(str(comp / "solutions.csv"), str(comp / "half.csv"), "--task", str(comp / "scorer" / "task.yaml"),
                  "--json", str(out), cwd=tmp_path / "scorer" / "..")
    assert proc.returncode == 0, proc.stderr
    assert "my scorer, loading" not in proc.stdout           # the import's prints are captured
    assert not list(comp.glob("*.main-ran"))                 # the __main__ block did not run
    result = json.loads(out.read_text())
    expected = _expected(SUBMISSIONS["half.csv"])
    rows = {r["qid"]: r for r in result["rows"]}
    for qid, e in expected.items():
        assert rows[qid]["exact"] == e["exact"], qid
        assert rows[qid]["exact_overlap"] == pytest.approx(e["overlap"], abs=1e-12), qid
    c = result["components"]
    assert c["exact"] == pytest.approx(1 / 4)                # q2 only
    assert c["exact_overlap"] == pytest.approx((1 / 3 + 1 + 1 / 3 + 0) / 4)
    assert c["prefix"] == pytest.approx(2 / 4)               # "ada", "the" agree; "gre" vs "blu"; q4 missing
    assert c["accuracy"] == pytest.approx(1 / 4)             # the whole-file function
    assert c["accuracy_answered"] == 3.0                     # its other figure, beside it
    assert c["printed"] == pytest.approx(1 / 4)              # read from what it printed
    assert result["score"] == pytest.approx(1 / 4)
    assert result["n_missing"] == 1


def test_score_py_batch(comp: Path) -> None:
    subs = [str(comp / n) for n in SUBMISSIONS]
    proc = _score(str(comp / "solutions.csv"), *subs, "--task", str(comp / "scorer" / "task.yaml"),
                  "--format", "json", cwd=comp)
    assert proc.returncode == 0, proc.stderr
    by_file = {Path(r["submission"]).name: r for r in json.loads(proc.stdout)}
    for name, text in SUBMISSIONS.items():
        e = _expected(text)
        assert by_file[name]["score"] == pytest.approx(sum(v["exact"] for v in e.values()) / 4), name
    assert by_file["good.csv"]["score"] == 1.0


def test_in_process_leaves_no_trace(comp: Path) -> None:
    argv, path, had = list(sys.argv), list(sys.path), "helper" in sys.modules
    task = load_task(comp / "scorer" / "task.yaml")
    r = score_submission(task, comp / "solutions.csv", comp / "good.csv")
    assert r.score == 1.0 and r.components["exact_overlap"] == 1.0
    assert sys.argv == argv and sys.path == path
    assert ("helper" in sys.modules) == had
    assert not any(n.startswith("kohaku_adopted_") for n in sys.modules)


def test_a_sibling_named_like_a_loaded_module_is_the_scripts_own(comp: Path) -> None:
    import types

    impostor = types.ModuleType("helper")
    impostor.norm = lambda text: "always the same"   # type: ignore[attr-defined]
    sys.modules["helper"] = impostor
    try:
        task = load_task(comp / "scorer" / "task.yaml")
        r = score_submission(task, comp / "solutions.csv", comp / "half.csv")
        assert r.components["exact"] == pytest.approx(1 / 4)    # its helper.norm, not the impostor's
        assert sys.modules["helper"] is impostor                # put back
    finally:
        del sys.modules["helper"]


def test_a_script_that_exits_at_import_is_refused(comp: Path) -> None:
    bad = comp / "scorer" / "bad.py"
    bad.write_text("import sys\nif len(sys.argv) < 3:\n    sys.exit('usage: bad.py GOLD PRED')\n"
                   "def score_one(prediction, gold):\n    return 1\n")
    (comp / "scorer" / "bad.yaml").write_text(TASK.replace("myscorer.py", "bad.py"))
    proc = _score(str(comp / "solutions.csv"), str(comp / "good.csv"), "--task", str(comp / "scorer" / "bad.yaml"),
                  cwd=comp)
    assert proc.returncode == 2
    assert f"{bad}: the script exits when imported (SystemExit('usage: bad.py GOLD PRED'))" in proc.stderr
    with pytest.raises(ScriptError, match=r"bad\.py: the script exits when imported"):
        score_submission(load_task(comp / "scorer" / "bad.yaml"), comp / "solutions.csv", comp / "good.csv")
    broken = comp / "scorer" / "broken.py"
    broken.write_text("import no_such_module_here\n")
    (comp / "scorer" / "broken.yaml").write_text(TASK.replace("myscorer.py", "broken.py"))
    with pytest.raises(ScriptError, match=r"broken\.py: the script fails when imported \(ModuleNotFoundError"):
        score_submission(load_task(comp / "scorer" / "broken.yaml"), comp / "solutions.csv", comp / "good.csv")
    (comp / "scorer" / "nofn.yaml").write_text(TASK.replace("function: score_one", "function: score_won"))
    with pytest.raises(ScriptError, match=r"no 'score_won' \(params.function\); it defines .*score_one"):
        score_submission(load_task(comp / "scorer" / "nofn.yaml"), comp / "solutions.csv", comp / "good.csv")


def test_the_cache_key_holds_the_script_and_the_siblings_it_imports(comp: Path) -> None:
    task_values = load_task(comp / "scorer" / "task.yaml").score
    values = {"scorer": "components", "metrics": task_values.metrics, "classes": "generic"}
    script = comp / "scorer" / "myscorer.py"
    assert [p.name for p in script_files(script)] == ["myscorer.py", "helper.py"]
    params = task_values.metrics[0]["params"]
    before, key_before = code_key(params), score_code_key(values)["code"]
    (comp / "scorer" / "unrelated.py").write_text("X = 2\n")        # not imported: same key
    assert code_key(params) == before
    (comp / "scorer" / "helper.py").write_text(HELPER + "\n# a changed rule\n")
    assert code_key(params) != before
    assert score_code_key(values)["code"] != key_before
    after = code_key(params)
    script.write_text(SCORER.replace("overlap = len", "overlap = 0.5 * len"))
    assert code_key(params) != after
    assert code_key({"file": str(comp / "nowhere.py")}).startswith("unresolved:")


def test_check_scorer_runs_the_script_beside_kohaku(comp: Path, tmp_path: Path) -> None:
    task = load_task(comp / "scorer" / "task.yaml")
    command = f"{sys.executable} {comp / 'scorer' / 'myscorer.py'} {{solutions}} {{submission}}"
    checks = check_submissions(task, comp / "solutions.csv", command, [comp / n for n in SUBMISSIONS],
                               tmp_path / "perturbed")
    assert len(checks) == 3 + 8
    assert all(c.columns == ["exact"] for c in checks)
    assert sum(c.agree for c in checks) == sum(c.rows for c in checks) == 11 * 4 - 1   # half.csv lacks q4
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_scorer.py"), str(comp / "solutions.csv"),
                           *[str(comp / n) for n in SUBMISSIONS], "--scorer", command,
                           "--task", str(comp / "scorer" / "task.yaml")],
                          capture_output=True, text=True, timeout=120, cwd=comp,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.rstrip().endswith("rows agree: 43 / 43")


def test_ensemble_writes_the_competitions_own_json(comp: Path, tmp_path: Path) -> None:
    task_file = comp / "scorer" / "keyed.yaml"
    task_file.write_text(TASK.replace("  columns: {id: qid, answer: value}\n",
                                      "  columns: {id: qid, answer: value}\n  shape: {keyed: {answers: [answer]}}\n")
                         + "vote: {group: text, keep_surface: true}\n")
    for name, text in SUBMISSIONS.items():        # the same answers as {"answers": {id: answer}}
        rows = [line.split(",") for line in text.splitlines()[1:]]
        (comp / f"{name}.json").write_text(json.dumps({"answers": {q: a for q, a in rows}}))
    inputs = [str(comp / f"{n}.json") for n in ("good.csv", "half.csv", "good.csv")]
    out = tmp_path / "ens.json"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "ensemble.py"), "--task", str(task_file),
                           "--out", str(out), *inputs], capture_output=True, text=True, timeout=120, cwd=comp,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text()) == {"answers": {"q1": "ada lovelace.", "q2": "the alps",
                                                       "q3": "blue whale", "q4": "1923"}}
    assert score_submission(load_task(task_file), comp / "solutions.csv", out).score == 1.0


SOURCES_SCRIPT = '''\
import json

def per_question(kind, qid, gold, items, path):
    assert isinstance(items, list), items          # as: json
    assert path.endswith("solutions.csv")
    return {"kind_is_number": kind == "number", "n_items": len(items), "qid_ok": qid.startswith("q"),
            "gold_len": len(gold)}

def whole(table, by_id, golds):
    # table: column -> list (shape columns); by_id: qid -> answer (submitted rows only)
    return {"rows": len(table["id"]), "answered": len(by_id), "first": float(golds[0] == "3")}
'''


def test_every_source_and_shape(tmp_path: Path) -> None:
    (tmp_path / "s.py").write_text(SOURCES_SCRIPT)
    (tmp_path / "solutions.csv").write_text('id,kind,answer,items\nq1,number,3,"[1,2]"\nq2,name,Ada,"[]"\n'
                                            'q3,number,7,"[1]"\n')
    (tmp_path / "sub.csv").write_text("id,answer\nq1,3\nq2,Ada\n")
    task = {
        "name": "sources",
        "answer": {"kinds": {"column": "kind", "types": {"number": {"type": "number"}, "name": {"type": "name"}}}},
        "submission": {"writer": "columns", "columns": {"id": "qid", "answer": "value"}},
        "solutions": {"id": "id", "answer": "answer", "refs": None},
        "score": {"scorer": "components", "classes": "generic", "metrics": [
            {"name": "k", "fn": "adopted", "params": {
                "file": str(tmp_path / "s.py"), "function": "per_question", "returns": "mapping",
                "score": "kind_is_number",
                "args": {"kind": {"kind": True}, "qid": {"qid": True}, "gold": {"solution": "answer"},
                         "items": {"solution": "items", "as": "json"}, "path": {"file": "solutions"}}}},
            {"name": "w", "fn": "adopted", "level": "set", "weight": 0, "params": {
                "file": str(tmp_path / "s.py"), "function": "whole", "returns": "mapping", "score": "rows",
                "args": {"table": {"solution": ["id", "answer"], "shape": "columns"},
                         "by_id": {"submission": "answer", "shape": "by_id"},
                         "golds": {"solution": "answer"}}}}]},
    }
    from kohaku.tasks.spec import build_task

    r = score_submission(build_task(task), tmp_path / "solutions.csv", tmp_path / "sub.csv")
    rows = {t["qid"]: t for t in r.table.to_dicts()}
    assert [rows[q]["k"] for q in ("q1", "q2", "q3")] == [1.0, 0.0, 0.0]      # q3: no row, not called
    assert [rows[q]["k_n_items"] for q in ("q1", "q2", "q3")] == [2.0, 0.0, 0.0]
    assert rows["q1"]["k_gold_len"] == 1.0 and rows["q2"]["k_gold_len"] == 3.0
    assert r.components["w"] == 3.0 and r.components["w_answered"] == 2.0 and r.components["w_first"] == 1.0
    bad = {**task, "score": {**task["score"], "metrics": [
        {**task["score"]["metrics"][0], "params": {**task["score"]["metrics"][0]["params"],
                                                  "args": {"kind": {"kidn": True}}}}]}}
    with pytest.raises(Exception, match=r"args.kind=\{'kidn': True\}: give exactly one of solution, submission"):
        score_submission(build_task(bad), tmp_path / "solutions.csv", tmp_path / "sub.csv")
    typo = {**task, "score": {**task["score"], "metrics": [
        {**task["score"]["metrics"][0], "params": {**task["score"]["metrics"][0]["params"], "retruns": "value"}}]}}
    with pytest.raises(Exception, match=r"unknown param\(s\) .*params.retruns of the metric 'adopted'; valid params: .*returns"):
        score_submission(build_task(typo), tmp_path / "solutions.csv", tmp_path / "sub.csv")


def test_a_keyed_value_the_submission_lacks_is_not_passed_to_the_script(tmp_path: Path) -> None:
    """HotpotQA-like: {"answer": {id: a}, "note": {id: n}}; q2 has an answer and no note: the
    script, which would fail on None, is not called for it, and q2 scores task.score.unanswered
    on the metric and on its parts (call_missing: true passes the None instead)."""
    (tmp_path / "s.py").write_text("def f(note, gold):\n    return {'hit': note.lower() == gold, 'len': len(note)}\n")
    (tmp_path / "solutions.csv").write_text("id,answer\nq1,x\nq2,y\nq3,z\n")
    (tmp_path / "sub.json").write_text(json.dumps({"answer": {"q1": "x", "q2": "y", "q3": "z"},
                                                   "note": {"q1": "X", "q3": "w"}}))
    metric = {"name": "m", "fn": "adopted", "params": {
        "file": str(tmp_path / "s.py"), "function": "f", "returns": "mapping", "score": "hit",
        "args": {"note": {"submission": "note"}, "gold": {"solution": "answer"}}}}
    task = {"name": "keyed", "score": {"scorer": "components", "classes": "generic", "unanswered": 0.25,
                                       "metrics": [metric]},
            "submission": {"writer": "columns", "columns": {"id": "qid", "answer": "value", "note": "note"},
                           "shape": {"keyed": {"answer": ["answer"], "note": ["note"]}}},
            "solutions": {"id": "id", "answer": "answer", "refs": None}}
    from kohaku.tasks.spec import build_task

    r = score_submission(build_task(task), tmp_path / "solutions.csv", tmp_path / "sub.json")
    assert r.table["m"].to_list() == [1.0, 0.25, 0.0]
    assert r.table["m_len"].to_list() == [1.0, 0.25, 1.0]
    metric["params"]["call_missing"] = True
    with pytest.raises(Exception, match=r"s\.py: f \(question q2\): AttributeError"):
        score_submission(build_task(task), tmp_path / "solutions.csv", tmp_path / "sub.json")
