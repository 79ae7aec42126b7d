"""Two benchmarks' official scoring scripts, adopted unedited by a task YAML (conf/task/tatqa.yaml,
conf/task/hotpotqa.yaml; 0 lines of Python of the user's), give per question and in total what
the script itself gives when run beside kohaku, in a subprocess as its README says.

The scripts and data are never committed: each test reads a copy of the benchmark's repository
from the folder an environment variable names and skips without it:

- ``KOHAKU_TATQA_DIR``: NExTplusplus/TAT-QA (tatqa_eval.py, tatqa_metric.py, tatqa_utils.py,
  sample_prediction.json, dataset_raw/tatqa_dataset_dev.json); its imports need pandas and scipy.
- ``KOHAKU_HOTPOT_DIR``: hotpotqa/hotpot (hotpot_evaluate_v1.py; it imports ujson). The
  snapshot holds no data: the test writes a small gold file and predictions of its own.

Made with ``git -C <snapshot> archive HEAD <files> | tar -x -C <dir>``. The submissions: the
benchmark's sample (TAT-QA), the gold perturbed by kohaku's check_scorer machinery
(kohaku.tasks.score.check.perturbations, written in the benchmark's JSON by kohaku.tasks.files.shapes), and
perturbations made here.
"""

from __future__ import annotations

import ast
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kohaku.tasks import load_task
from kohaku.tasks.score.check import perturbations
from kohaku.tasks.score.scoring import score_submission
from kohaku.tasks.files.shapes import write_shaped

ROOT = Path(__file__).resolve().parents[1]
TATQA = os.environ.get("KOHAKU_TATQA_DIR")
HOTPOT = os.environ.get("KOHAKU_HOTPOT_DIR")


def _needs(folder: str | None, var: str, files: list[str], modules: list[str]) -> Path:
    if not folder:
        pytest.skip(f"set {var} to a copy of the benchmark's repository")
    path = Path(folder)
    missing = [f for f in files if not (path / f).is_file()]
    if missing:
        pytest.skip(f"{var}={folder} lacks {missing}")
    for m in modules:
        pytest.importorskip(m, reason=f"the official script imports {m}")
    return path


def _run(args: list[str], cwd: Path) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


# -- TAT-QA: per question ---------------------------------------------------------------------

#: the official evaluate_json's loop, run in a subprocess on the official modules, printing each
#: question's em and f1 (TaTQAEmAndF1.get_raw) and the totals (get_overall_metric)
TATQA_DRIVER = """
import json, sys
sys.path.insert(0, sys.argv[1])
from tatqa_metric import TaTQAEmAndF1
gold = json.load(open(sys.argv[2], encoding="utf-8"))
pred = json.load(open(sys.argv[3], encoding="utf-8"))
m = TaTQAEmAndF1()
for qas in gold:
    for qa in qas["questions"]:
        pa, ps = None, None
        if qa["uid"] in pred:
            pa, ps = pred[qa["uid"]]
        m(ground_truth=qa, prediction=pa, pred_scale=ps)
print(json.dumps({"rows": {d["uid"]: [d["em"], d["f1"]] for d in m.get_raw()},
                  "total": list(m.get_overall_metric())}))
"""


def _tatqa_submissions(folder: Path, task, out: Path) -> dict[str, Path]:
    gold = folder / "dataset_raw" / "tatqa_dataset_dev.json"
    subs = {"sample": folder / "sample_prediction.json"}
    for name, df in perturbations(task, gold).items():
        subs[f"gold:{name}"] = write_shaped(df, task.submission.shape, out / f"gold_{name}.json")
    sample = json.loads(subs["sample"].read_text(encoding="utf-8"))
    rng = random.Random(54)
    made = {
        "sample_every_4th_dropped": {k: v for i, (k, v) in enumerate(sample.items()) if i % 4},
        "sample_no_scale": {k: [v[0], ""] for k, v in sample.items()},
        "sample_joined_strings": {k: [" ".join(map(str, v[0])) if isinstance(v[0], list) else v[0], v[1]]
                                  for k, v in sample.items()},
        "sample_shuffled_scales": {k: [v[0], rng.choice(["", "thousand", "million", "percent"])]
                                   for k, v in sample.items()},
        "sample_first_item_only": {k: [v[0][:1] if isinstance(v[0], list) else v[0], v[1]] for k, v in sample.items()},
    }
    for name, doc in made.items():
        subs[name] = out / f"{name}.json"
        subs[name].write_text(json.dumps(doc), encoding="utf-8")
    return subs


def test_tatqa_per_question_and_totals_equal_the_official_script(tmp_path: Path) -> None:
    folder = _needs(TATQA, "KOHAKU_TATQA_DIR", ["tatqa_eval.py", "tatqa_metric.py", "tatqa_utils.py",
                                                "sample_prediction.json", "dataset_raw/tatqa_dataset_dev.json"],
                    ["numpy", "scipy", "pandas"])
    task = load_task("tatqa")
    gold = folder / "dataset_raw" / "tatqa_dataset_dev.json"
    subs = _tatqa_submissions(folder, task, tmp_path)
    assert len(subs) >= 12
    (tmp_path / "driver.py").write_text(TATQA_DRIVER)
    figures = {}
    for name, path in subs.items():
        ours = score_submission(task, gold, path)
        theirs = json.loads(_run([str(tmp_path / "driver.py"), str(folder), str(gold), str(path)], tmp_path))
        rows = {r["qid"]: (r["f1_em"], r["f1"]) for r in ours.table.to_dicts()}
        assert set(rows) == set(theirs["rows"]), name
        differ = [q for q, (em, f1) in theirs["rows"].items() if rows[q] != (float(em), float(f1))]
        assert differ == [], f"{name}: {len(differ)} questions differ, e.g. {differ[:3]}"
        em, f1, scale, _ = theirs["total"]
        assert (ours.components["f1_em"], ours.score, ours.components["f1_scale"]) == pytest.approx(
            (em, f1, scale), abs=1e-12), name
        # the README's command, its printed figures (2 decimals)
        printed = _run([str(folder / "tatqa_eval.py"), "--gold_path", str(gold), "--pred_path", str(path)], folder)
        shown = dict(re.findall(r"^(Exact-match accuracy|F1 score|Scale score) ([\d.]+)$", printed, re.M))
        assert shown == {"Exact-match accuracy": f"{ours.components['f1_em'] * 100:.2f}",
                         "F1 score": f"{ours.score * 100:.2f}",
                         "Scale score": f"{ours.components['f1_scale'] * 100:.2f}"}, name
        figures[name] = (len(rows), len(rows) - len(differ), shown["F1 score"])
    print("\nTAT-QA (dev): submission, questions equal / questions, official F1")
    for name, (n, same, f1) in figures.items():
        print(f"  {name:<28} {same}/{n}  F1 {f1}")
    assert figures["sample"][2] == "58.88"       # the sample prediction, as the benchmark's script prints it


# -- HotpotQA: the whole file -----------------------------------------------------------------

def _hotpot_files(out: Path) -> tuple[Path, dict[str, Path], list[dict]]:
    rng = random.Random(7)
    words = ("river city paris london blue whale alpha beta delta ancient empire museum the of a "
             "Washington 1923 42 Arthur Conan Doyle").split()
    gold = []
    for i in range(40):
        kind = i % 5
        answer = ("yes" if kind == 0 else "no" if kind == 1 else str(1900 + i) if kind == 2
                  else " ".join(rng.sample(words, rng.randint(1, 4))))
        facts = [[f"Title {i}", rng.randint(0, 3)], [f"Other {i % 7}", rng.randint(0, 5)]]
        gold.append({"_id": f"5a{i:04x}", "question": f"Question {i}?", "answer": answer,
                     "supporting_facts": facts, "type": "bridge", "level": "medium", "context": []})
    gold_path = out / "hotpot_gold.json"
    gold_path.write_text(json.dumps(gold), encoding="utf-8")

    def doc(answer, sp) -> dict:
        return {"answer": {g["_id"]: a for g in gold if (a := answer(g)) is not None},
                "sp": {g["_id"]: s for g in gold if (s := sp(g)) is not None}}

    exact = lambda g: g["answer"]                      # noqa: E731
    facts = lambda g: g["supporting_facts"]            # noqa: E731
    made = {
        "exact": doc(exact, facts),
        "answers_only_one_fact": doc(exact, lambda g: g["supporting_facts"][:1]),
        "extra_fact": doc(exact, lambda g: [*g["supporting_facts"], ["Extra", 9]]),
        "partial_answers": doc(lambda g: " ".join(g["answer"].split()[:1]) + " extra", facts),
        "yes_no_swapped": doc(lambda g: {"yes": "no", "no": "yes"}.get(g["answer"], g["answer"].upper()), facts),
        "some_missing": doc(lambda g: None if int(g["_id"], 16) % 6 == 0 else g["answer"],
                            lambda g: None if int(g["_id"], 16) % 6 == 0 else g["supporting_facts"]),
        "wrong_titles": doc(exact, lambda g: [[t + " (film)", n] for t, n in g["supporting_facts"]]),
        "articles_punct": doc(lambda g: f"The {g['answer']}.", facts),
        "noanswer": doc(lambda g: "noanswer" if int(g["_id"], 16) % 3 == 0 else g["answer"], facts),
    }
    subs = {}
    for name, d in made.items():
        subs[name] = out / f"pred_{name}.json"
        subs[name].write_text(json.dumps(d), encoding="utf-8")
    return gold_path, subs, gold


#: the official script's functions, called as its eval calls them, each question's figures
HOTPOT_ROWS = """
import json, sys
sys.path.insert(0, sys.argv[1])
import hotpot_evaluate_v1 as h
gold = json.load(open(sys.argv[2]))
pred = json.load(open(sys.argv[3]))
rows = {}
for dp in gold:
    i = dp["_id"]
    row = {}
    if i in pred["answer"]:
        m = {"em": 0, "f1": 0, "prec": 0, "recall": 0}
        h.update_answer(m, pred["answer"][i], dp["answer"])
        row.update(answer_em=m["em"], answer_f1=m["f1"], answer_f1_prec=m["prec"], answer_f1_recall=m["recall"])
    if i in pred["sp"]:
        m = {"sp_em": 0, "sp_f1": 0, "sp_prec": 0, "sp_recall": 0}
        h.update_sp(m, pred["sp"][i], dp["supporting_facts"])
        row.update(sp_em=m["sp_em"], sp_em_prec=m["sp_prec"], sp_em_recall=m["sp_recall"])
    rows[i] = row
print(json.dumps(rows))
"""


def test_hotpotqa_whole_file_and_per_question_equal_the_official_script(tmp_path: Path) -> None:
    folder = _needs(HOTPOT, "KOHAKU_HOTPOT_DIR", ["hotpot_evaluate_v1.py"], ["ujson"])
    task = load_task("hotpotqa")
    gold, subs, _ = _hotpot_files(tmp_path)
    for name, df in perturbations(task, gold).items():        # kohaku's perturbations of the gold
        subs[f"gold:{name}"] = write_shaped(df, task.submission.shape, tmp_path / f"gold_{name}.json")
    assert len(subs) >= 12
    (tmp_path / "rows.py").write_text(HOTPOT_ROWS)
    per_q = ("answer_em", "answer_f1", "answer_f1_prec", "answer_f1_recall", "sp_em", "sp_em_prec", "sp_em_recall")
    figures = {}
    for name, path in subs.items():
        ours = score_submission(task, gold, path)
        # the README's command: python hotpot_evaluate_v1.py PRED GOLD prints the metrics dict last
        printed = _run([str(folder / "hotpot_evaluate_v1.py"), str(path), str(gold)], folder)
        theirs = ast.literal_eval(printed.strip().splitlines()[-1])
        assert len(theirs) == 12
        got = {k: ours.score if k == "joint_f1" else ours.components[f"official_{k}"] for k in theirs}
        assert got == theirs, name                               # exactly: the script's own figures
        # per question: the answer and supporting-fact figures of every question it scores
        rows = json.loads(_run([str(tmp_path / "rows.py"), str(folder), str(gold), str(path)], tmp_path))
        table = {r["qid"]: r for r in ours.table.to_dicts()}
        differ = [(q, k) for q, row in rows.items() for k in per_q
                  if k in row and table[q][k] != float(row[k])]
        assert differ == [], f"{name}: {differ[:5]}"
        # and their means are the script's totals
        n = len(rows)
        assert sum(table[q]["answer_f1"] for q in rows) / n == pytest.approx(theirs["f1"], abs=1e-12)
        assert sum(table[q]["sp_em"] for q in rows) / n == pytest.approx(theirs["sp_em"], abs=1e-12)
        figures[name] = (n, sum(len([k for k in per_q if k in r]) for r in rows.values()), theirs["joint_f1"])
    print("\nHotpotQA (synthetic gold, 40 questions): submission, per-question figures equal, official joint F1")
    for name, (n, cells, jf1) in figures.items():
        print(f"  {name:<26} {cells} figures of {n} questions  joint_f1 {jf1:.6f}")
