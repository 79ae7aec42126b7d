"""kohaku.tasks.analysis.typed_classes: error classes by answer kind, N/A both ways and cited pages.

Two typed tasks, each scored on submissions built with one error per question on purpose:

- the worked example (``task=cited_pages``, data/sample/cited_pages/): a JSON document made from
  the gold answers and pools, then broken question by question;
- a second task written here (grants: amounts, deadlines, funders, yes/no, an agency; the token
  ``NOT STATED``; pools ``doc:page|doc:page;doc:page`` counted from 1; CSV submissions).

Every question's class must be one its kind can take and name the error built into it, the
not-answerable cases ``answered_na`` / ``needless_na``, and the page class what was cited.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import polars as pl
import pytest

from kohaku.core.config import ConfigError
from kohaku.tasks import build_task, load_task, read_task_yaml
from kohaku.tasks.score.scoring import score_submission
from kohaku.tasks.analysis.typed_classes import (CLASSES, PAGE_CLASSES, classes_for, page_class, typed_classes)
from kohaku.tasks.whole import check_task

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "sample" / "cited_pages"


def gold_rows() -> list[dict]:
    return pl.read_csv(SAMPLE / "answers.csv", infer_schema_length=0).to_dicts()


def typed(kind: str, text: str):
    """A gold cell as the JSON document's typed value."""
    if text == "N/A":
        return "N/A"
    if kind == "number":
        return float(text)
    if kind == "names":
        return json.loads(text)
    if kind == "boolean":
        return text == "True"
    return text


def first_pages(pools: str) -> list[dict]:
    """One reference per gold pool (its first page), as the document writes references."""
    out = []
    for pool in json.loads(pools):
        doc, _, page = pool[0].rpartition(":")
        out.append({"doc": doc, "page_index": int(page)})
    return out


def document(path: Path, changes: dict[str, dict], drop: tuple[str, ...] = ()) -> Path:
    """The gold answers as a JSON submission, with ``changes`` (qid -> value / references)."""
    answers = []
    for r in gold_rows():
        if r["id"] in drop:
            continue
        a = {"question_id": r["id"], "kind": r["kind"], "value": typed(r["kind"], r["answer"]),
             "references": first_pages(r["pools"])}
        a.update(changes.get(r["id"], {}))
        answers.append(a)
    path.write_text(json.dumps({"team": "test", "answers": answers}))
    return path


def ref(doc: str, page: int) -> dict:
    return {"doc": doc, "page_index": page}


# qid -> (what is changed, the value class, the page class) on the worked example
EXAMPLE = {
    "q001": ({"value": 11.1}, "scale", "all_pools"),                          # 1.11 x10
    "q002": ({"value": 72, "references": [ref("okafor2023", 5)]}, "near_miss", "no_pools"),
    "q003": ({"value": -18}, "sign", "all_pools"),
    "q004": ({"value": 5, "references": [ref("sato2025", 0), ref("sato2025", 3)]}, "wrong_number", "extra_pages"),
    "q005": ({"value": 3, "references": [ref("okafor2023", 0)]}, "answered_na", "extra_pages"),
    "q006": ({"value": "N/A", "references": []}, "needless_na", "no_pools"),
    "q007": ({"value": "Oracle"}, "wrong_name", "all_pools"),
    "q008": ({}, "correct", "none_needed"),
    "q009": ({"value": ["air cooling", "rear-door heat exchangers"]}, "missing_names", "all_pools"),
    "q010": ({"value": ["Threshold", "Forecast-Greedy", "Oracle", "Random"]}, "extra_names", "all_pools"),
    "q011": ({"value": ["Site A"], "references": [ref("lindqvist2024", 0)]}, "answered_na", "extra_pages"),
    "q012": ({"value": False}, "flipped", "all_pools"),
    "q013": ({"references": [ref("okafor2023", 0)]}, "correct", "some_pools"),
    "q014": ({"value": True, "references": []}, "answered_na", "none_needed"),
}


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    task = load_task("cited_pages")
    sub = document(tmp_path_factory.mktemp("typed") / "broken.json", {q: c for q, (c, _, _) in EXAMPLE.items()})
    return task, score_submission(task, SAMPLE / "answers.csv", sub)


def test_the_worked_example_takes_the_typed_classes_by_default():
    task = load_task("cited_pages")
    assert task.score.classes is None and task.error_classes == "typed"
    assert load_task("short_answer").error_classes == "generic"   # no kinds: as the task says


def test_every_question_of_the_example_is_classed_by_its_kind(example):
    task, result = example
    t = result.table
    kinds = dict(zip(t["qid"], t["kind"]))
    assert dict(zip(t["qid"], t["answer_kind"])) == kinds            # the task's own kind names
    assert set(kinds.values()) == {"number", "name", "names", "boolean"}
    got = dict(zip(t["qid"], t["error_class"]))
    assert got == {q: cls for q, (_, cls, _) in EXAMPLE.items()}
    for qid, cls in got.items():      # each class is one its kind can take
        assert cls in classes_for(task.answer.kinds.specs[kinds[qid]].type), (qid, cls)


def test_the_example_details_say_what_went_wrong(example):
    _, result = example
    d = dict(zip(result.table["qid"], result.table["error_detail"]))
    assert d["q001"] == "x1e1" and d["q002"] == "+1.4%"
    assert d["q009"].startswith("2 of 3; missing: direct-to-chip liquid cooling")
    assert "credit 0.67" in d["q009"]           # a partial Jaccard is credited, but not correct
    assert d["q010"].startswith("+1: Random")
    assert d["q012"] == "False for True"


def test_the_example_page_dimension(example):
    _, result = example
    t = result.table
    assert dict(zip(t["qid"], t["page_class"])) == {q: p for q, (_, _, p) in EXAMPLE.items()}
    row = t.filter(pl.col("qid") == "q013").row(0, named=True)
    assert row["pages_pools"] == ["okafor2023:0", "sato2025:0"] and row["pages_pools_hit"] == [True, False]
    assert row["pages_cited"] == ["okafor2023:0"] and row["pages_cited_hit"] == [True]
    assert row["page_detail"] == "1/2 pools"
    row = t.filter(pl.col("qid") == "q004").row(0, named=True)
    assert row["pages_cited_hit"] == [True, False] and row["page_detail"] == "1/1 pools, 1 extra"
    assert t.filter(pl.col("qid") == "q006")["page_detail"][0] == "0/1 pools, nothing cited"


def test_the_example_summary_splits_by_kind_and_pages(example):
    _, result = example
    e = result.errors
    assert list(e["counts"]) == list(CLASSES)
    assert e["counts"]["answered_na"] == 3 and e["counts"]["needless_na"] == 1
    assert e["n"] == 14 and e["n_errors"] == 12
    assert list(e["by_kind"]) == ["number", "name", "names", "boolean"]
    assert e["by_kind"]["names"] == {"correct": 0, "missing": 0, "unanswered": 0, "answered_na": 1,
                                     "needless_na": 0, "missing_names": 1, "extra_names": 1, "wrong_names": 0}
    assert e["by_kind"]["boolean"]["flipped"] == 1 and "flipped" not in e["by_kind"]["number"]
    assert e["pages"]["counts"] == {"all_pools": 6, "extra_pages": 3, "some_pools": 1, "no_pools": 2,
                                    "none_needed": 2}
    assert e["pages"]["by_kind"]["boolean"] == {"all_pools": 1, "extra_pages": 0, "some_pools": 1,
                                               "no_pools": 0, "none_needed": 1}


def test_missing_and_unanswered_questions(tmp_path):
    task = load_task("cited_pages")
    sub = document(tmp_path / "gaps.json", {"q007": {"value": None, "references": []},
                                            "q011": {"value": "N/A", "references": []}}, drop=("q004",))
    result = score_submission(task, SAMPLE / "answers.csv", sub)
    got = dict(zip(result.table["qid"], result.table["error_class"]))
    assert got["q004"] == "missing" and got["q007"] == "unanswered"
    assert {q for q, c in got.items() if c == "correct"} == set(got) - {"q004", "q007"}
    pages = dict(zip(result.table["qid"], result.table["page_class"]))
    assert pages["q004"] == "no_pools" and pages["q011"] == "none_needed"


def test_score_classes_still_overrides(tmp_path):
    data = read_task_yaml(ROOT / "conf" / "task" / "cited_pages.yaml")
    data["score"]["classes"] = "generic"
    task = build_task(data)
    sub = document(tmp_path / "s.json", {q: c for q, (c, _, _) in EXAMPLE.items()})
    result = score_submission(task, SAMPLE / "answers.csv", sub)
    assert set(result.table["answer_kind"]) == {"number", "text"} and "page_class" not in result.table.columns


def test_typed_classes_need_answer_kinds():
    data = read_task_yaml(ROOT / "conf" / "task" / "short_answer.yaml")
    data["score"]["classes"] = "typed"
    with pytest.raises(ConfigError, match="task.score.classes=typed .*task.answer.kinds"):
        check_task(data)


# -- a second typed task: grants ---------------------------------------------------------

GRANTS = textwrap.dedent("""\
    name: grants
    answer:
      kinds:
        column: kind
        not_answerable: NOT STATED
        write_true: "yes"
        write_false: "no"
        true_values: ["yes", "true"]
        false_values: ["no", "false"]
        list_format: semicolon
        types:
          amount: {type: number}
          deadline: {type: date}
          funders: {type: names}
          open: {type: boolean}
          agency: {type: name}
    submission:
      writer: columns
      columns: {id: qid, kind: kind, answer: value, pages: ref_pages}
      list_format: semicolon
      blank: ""
      page_base: 1
    solutions: {id: id, answer: answer, refs: null, page_base: 1}
    score:
      scorer: components
      correct: value
      metrics:
        - {name: value, fn: kind_value, weight: 1.0, params: {kinds: {amount: {rel_tol: 0.001}, funders: {measure: f1}}}}
        - {name: pages, fn: page_pools, weight: 0.5, params: {gold: pools, pred: pages, missing: 0.5, extra: 0.25}}
    gold: {qid: id, doc: null}
    """)

# id, kind, gold answer, gold pools (pages from 1)
GRANTS_GOLD = [
    ("g01", "amount", "250000", "call.pdf:2"),
    ("g02", "amount", "1.5 million", "call.pdf:2|call.pdf:3"),
    ("g03", "amount", "NOT STATED", ""),
    ("g04", "deadline", "2024-03-15", "call.pdf:1"),
    ("g05", "deadline", "2024-06-30", "guide.pdf:4"),
    ("g06", "funders", "Wellspring Trust;City Council;Harbor Fund", "call.pdf:1;guide.pdf:2"),
    ("g07", "funders", "Wellspring Trust;City Council", "call.pdf:1"),
    ("g08", "open", "yes", "guide.pdf:1"),
    ("g09", "open", "NOT STATED", ""),
    ("g10", "agency", "Ministry of Energy", "call.pdf:5"),
    ("g11", "agency", "Regional Office", "guide.pdf:6"),
    ("g12", "funders", "NOT STATED", ""),
]

# id -> (submitted answer, cited pages, value class, page class)
GRANTS_SUB = {
    "g01": ("25000", "call.pdf:2", "scale", "all_pools"),
    "g02": ("1,500,000", "call.pdf:3", "correct", "all_pools"),
    "g03": ("40000", "call.pdf:2", "answered_na", "extra_pages"),
    "g04": ("2024-04-15", "call.pdf:1;call.pdf:9", "wrong_date", "extra_pages"),
    "g05": ("NOT STATED", "", "needless_na", "no_pools"),
    "g06": ("Wellspring Trust;Harbor Fund;Lakeside Bank", "call.pdf:1", "wrong_names", "some_pools"),
    "g07": ("Wellspring Trust", "guide.pdf:9", "missing_names", "no_pools"),
    "g08": ("no", "guide.pdf:1", "flipped", "all_pools"),
    "g09": ("NOT STATED", "", "correct", "none_needed"),
    "g10": ("Ministry of Transport", "call.pdf:5", "wrong_name", "all_pools"),
    "g11": ("maybe", "guide.pdf:6", "wrong_name", "all_pools"),
    "g12": ("NOT STATED", "guide.pdf:2", "correct", "extra_pages"),
}


@pytest.fixture(scope="module")
def grants(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("grants")
    (tmp / "grants.yaml").write_text(GRANTS)
    task = load_task(tmp / "grants.yaml")
    pl.DataFrame(GRANTS_GOLD, schema=["id", "kind", "answer", "pools"], orient="row").write_csv(tmp / "gold.csv")
    kinds = {g[0]: g[1] for g in GRANTS_GOLD}
    pl.DataFrame([(q, kinds[q], a, p) for q, (a, p, _, _) in GRANTS_SUB.items()],
                 schema=["id", "kind", "answer", "pages"], orient="row").write_csv(tmp / "sub.csv")
    return task, score_submission(task, tmp / "gold.csv", tmp / "sub.csv")


def test_a_second_typed_task_is_classed_by_its_own_kinds(grants):
    task, result = grants
    t = result.table
    assert task.error_classes == "typed"
    assert dict(zip(t["qid"], t["answer_kind"])) == {g[0]: g[1] for g in GRANTS_GOLD}
    assert dict(zip(t["qid"], t["error_class"])) == {q: v[2] for q, v in GRANTS_SUB.items()}
    for kind, cls in zip(t["answer_kind"], t["error_class"]):
        assert cls in classes_for(task.answer.kinds.specs[kind].type)
    d = dict(zip(t["qid"], t["error_detail"]))
    assert d["g01"] == "x1e-1" and d["g04"] == "+31 days" and d["g08"] == "no for yes"
    assert d["g06"].startswith("2 of 3 right, 1 missing, 1 extra")
    assert d["g07"].startswith("1 of 2; missing: City Council")


def test_a_second_typed_task_page_dimension(grants):
    _, result = grants
    t = result.table
    assert dict(zip(t["qid"], t["page_class"])) == {q: v[3] for q, v in GRANTS_SUB.items()}
    row = t.filter(pl.col("qid") == "g02").row(0, named=True)
    assert row["pages_pools"] == ["call.pdf:2|call.pdf:3"] and row["pages_pools_hit"] == [True]
    row = t.filter(pl.col("qid") == "g06").row(0, named=True)   # pages shown from 1, as submitted
    assert row["pages_pools"] == ["call.pdf:1", "guide.pdf:2"] and row["pages_pools_hit"] == [True, False]
    assert result.errors["pages"]["counts"] == {"all_pools": 5, "extra_pages": 3, "some_pools": 1,
                                               "no_pools": 2, "none_needed": 1}
    assert result.errors["by_kind"]["open"]["flipped"] == 1
    assert result.errors["counts"]["answered_na"] == 1 and result.errors["counts"]["needless_na"] == 1


def test_page_class_rules():
    assert page_class([True], [True]) == ("all_pools", "1/1 pools")
    assert page_class([True, False], [True]) == ("extra_pages", "1/1 pools, 1 extra")
    assert page_class([False], []) == ("extra_pages", "1 extra, no pool")
    assert page_class([], []) == ("none_needed", "")
    assert page_class([True], [True, False]) == ("some_pools", "1/2 pools")
    assert page_class([], [False]) == ("no_pools", "0/1 pools, nothing cited")
    assert page_class(None, [True]) == (None, "")
    assert set(PAGE_CLASSES) == {"all_pools", "extra_pages", "some_pools", "no_pools", "none_needed"}


def test_a_row_without_a_kind_takes_the_generic_classes():
    task = load_task("cited_pages")
    table = pl.DataFrame({"qid": ["x"], "truth": ["5"], "pred": ["50"], "pred_blank": [False],
                          "missing": [False], "correct": [False], "kind": [None]},
                         schema_overrides={"kind": pl.String})
    out, summary = typed_classes(table, task)
    assert out["answer_kind"].to_list() == ["number"] and out["error_class"].to_list() == ["scale"]
    assert summary["counts"]["scale"] == 1
