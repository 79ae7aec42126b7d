"""The cited_pages worked example (conf/task/cited_pages.yaml, data/sample/cited_pages/): built
with built-in parts only, it scores as a competition's own scorer does. The reference scorer
below is written here from the task's rules alone (no kohaku import, no shared code) and run as
a command by kohaku's scorer check (kohaku.tasks.score.check, scripts/check_scorer.py) on the run's
own submission and on every perturbation of the gold, each of all 14 questions. The fake LLM
and the hashing encoder make the run quick (plumbing, not answer quality)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import polars as pl
import pytest

from conftest import SAMPLE
from kohaku.runner.pipeline import compose_config, run_pipeline
from kohaku.tasks import load_task
from kohaku.tasks.score.check import KIND_PERTURB, check_submissions, perturbations
from kohaku.tasks.score.scoring import score_submission

TASK = load_task("cited_pages")
ANSWERS = SAMPLE / "cited_pages" / "answers.csv"
FILES = ["task=cited_pages", "corpus.questions=cited_pages/questions.csv",
         "corpus.solutions=cited_pages/answers.csv"]
FAST = ["llm=fake", "embed.model=hash:64", "embed.dtype=float32"]

# The competition's rules, as its organisers would write them: G by kind (numbers within 1 %,
# "thousand"/"million" words and (negative) amounts in parentheses read; names compared in lower
# case without quotes, spaces or a final period; lists of names by Jaccard; booleans true/yes and
# false/no), N/A an answer (1 only against N/A, any case); R = 1 - 0.5 per gold pool with no
# cited page - 0.1 per listed page outside every pool (each listing counts), at least 0; an
# empty answer scores 0 on both; the score of a question is G + R / 2.
REFERENCE = r'''
import csv, json, re, sys

def number(text):
    s = text.strip().lower().replace(",", "")
    sign = 1
    if s.startswith("(") and s.endswith(")"):
        s, sign = s[1:-1].strip(), -1
    scale = 1
    for word, factor in (("thousand", 1e3), ("million", 1e6), ("billion", 1e9)):
        if s.endswith(word):
            s, scale = s[: -len(word)].strip(), factor
    try:
        return sign * float(s) * scale
    except ValueError:
        return None

def name(text):
    s = " ".join(text.lower().split())
    while True:
        t = s.strip().strip("'\"").strip().rstrip(".").strip()
        if t == s:
            return s
        s = t

def names(text):
    text = text.strip()
    if text.startswith("["):
        items = json.loads(text)
    else:
        items = text.split(";")
    return {name(str(i)) for i in items if name(str(i))}

def boolean(text):
    t = text.strip().lower()
    return True if t in ("true", "yes") else False if t in ("false", "no") else None

def g_score(kind, gold, pred):
    if gold.lower() == "n/a" or pred.lower() == "n/a":
        return float(gold.lower() == pred.lower())
    if kind == "number":
        a, b = number(pred), number(gold)
        return float(a is not None and abs(a - b) <= 0.01 * abs(b))
    if kind == "names":
        a, b = names(pred), names(gold)
        return len(a & b) / len(a | b) if a | b else 1.0
    if kind == "boolean":
        a = boolean(pred)
        return float(a is not None and a == boolean(gold))
    return float(name(pred) == name(gold))

def pages(text):
    out = []
    for item in json.loads(text or "[]"):
        doc, _, page = str(item).rpartition(":")
        out.append((doc, int(page)))
    return out

def r_score(pools_cell, pages_cell):
    pools = [[tuple(p) for p in pages(json.dumps(pool))] for pool in json.loads(pools_cell)]
    cited = pages(pages_cell)
    missing = sum(not any(c in pool for c in cited) for pool in pools)
    outside = sum(not any(c in pool for pool in pools) for c in cited)
    return max(0.0, 1 - 0.5 * missing - 0.1 * outside)

gold = {r["id"]: r for r in csv.DictReader(open(sys.argv[1], encoding="utf-8"))}
print("id,value,pages,score")
for r in csv.DictReader(open(sys.argv[2], encoding="utf-8")):
    g = gold[r["id"]]
    pred = r["value"].strip()
    if not pred:
        value = ref = 0.0
    else:
        value, ref = g_score(g["kind"], g["answer"].strip(), pred), r_score(g["pools"], r["pages"])
    print(f"{r['id']},{value},{ref},{value + ref / 2}")
'''


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    return run_pipeline(compose_config([*FILES, *FAST, f"cache.dir={cache}", "infer.n=3"]),
                        tmp_path_factory.mktemp("run"))


def test_the_example_uses_every_kind_and_na_of_each(run):
    gold = pl.read_csv(ANSWERS, infer_schema=False)
    assert set(gold["kind"]) == {"number", "name", "names", "boolean"} == set(TASK.answer.kinds.types)
    na = set(gold.filter(pl.col("answer") == "N/A")["kind"])
    assert na == set(TASK.answer.kinds.types)                      # N/A is an answer of every kind
    assert all(1 <= len(json.loads(p)) <= 3 for p, a in gold.select("pools", "answer").iter_rows() if a != "N/A")


def test_csv_and_json_of_one_run_give_the_same_values_and_pages_from_0(run):
    sub = pl.read_csv(run.run_dir / "submission.csv", infer_schema=False)
    doc = json.loads((run.run_dir / "submission.json").read_text())
    items = {a["question_id"]: a for a in doc["answers"]}
    assert list(items) == sub["id"].to_list()
    cited_second_page = 0
    for qid, kind, value, pages in sub.select("id", "kind", "value", "pages").iter_rows():
        item = items[qid]
        assert item["kind"] == kind
        refs = [f"{r['doc']}:{r['page_index']}" for r in item["references"]]
        assert refs == json.loads(pages or "[]"), qid           # the same pages, both from 0
        assert 1 <= len(refs) <= 3 or value == "N/A"
        cited_second_page += any(r["page_index"] == 1 for r in item["references"])
        typed = item["value"]
        if kind == "boolean" and value != "N/A":
            assert typed is (value == "True")
        elif kind == "names" and value != "N/A":
            assert typed == json.loads(value)
        elif kind == "number" and value != "N/A":
            assert float(value) == typed and isinstance(typed, int) == ("." not in value)
        else:
            assert typed == value
    assert cited_second_page >= 1      # sato2025's second page is cited: page_index 1, not 2


def _reference(tmp_path: Path) -> str:
    script = tmp_path / "reference_scorer.py"
    script.write_text(REFERENCE)
    return f"{sys.executable} {script} {{solutions}} {{submission}}"


def test_the_example_matches_a_reference_scorer_on_perturbed_submissions(run, tmp_path):
    checks = check_submissions(TASK, ANSWERS, _reference(tmp_path), [run.run_dir / "submission.csv"],
                               tmp_path / "subs")
    assert [c.name for c in checks[1:]] == [f"gold:{n}" for n in KIND_PERTURB]
    assert len(KIND_PERTURB) >= 8
    for c in checks:
        assert c.rows == 14 and c.columns == ["pages", "score", "value"], c.name
        assert c.agree == c.rows, (c.name, c.disagree[:3])


def test_the_perturbations_score_what_they_say(tmp_path):
    """Not all full marks: inside the tolerance scores G 14, outside fewer, unanswered 0, and
    pages outside the pools lose 0.1 per listing."""
    subs = perturbations(TASK, ANSWERS)
    totals = {}
    for name, df in subs.items():
        path = tmp_path / f"{name}.csv"
        df.write_csv(path)
        result = score_submission(TASK, ANSWERS, path)
        totals[name] = (result.components["value"], result.components["pages"])
    assert totals["exact"] == (14.0, 14.0) and totals["inside_tol"] == (14.0, 14.0)
    assert totals["outside_tol"][0] < 14 and totals["na_swapped"][0] == 0.0
    assert totals["unanswered"] == (0.0, 0.0)
    # 10 answered questions with pools: each lists one page outside twice -> 0.8; 4 N/A: 0.8
    assert totals["pages_extra"] == (14.0, 11.2)          # the task rounds to 2 decimals
    # no pages: 1 - 0.5 per pool (q013 has two pools), the 4 N/A questions keep 1
    assert totals["pages_none"] == (14.0, 9 * 0.5 + 0.0 + 4 * 1.0)
