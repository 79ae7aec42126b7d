"""Per-kind value metrics (kohaku.tasks.score.kind_metrics), the one rule for unanswered questions over
the whole metric catalog, page_pools per repeat policy, one page base per task, and the kind
rendering in every writer (issue 46)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from kohaku.core.config import ConfigError
from kohaku.tasks import build_task, kinds, load_task, read_task_yaml, task_file
from kohaku.tasks.files import documents
from kohaku.tasks.named import registry
from kohaku.tasks.named.builtin import columns_writer
from kohaku.tasks.score.kind_metrics import anls, read_number
from kohaku.tasks.score.scoring import score_submission

KINDS = {"column": "kind", "not_answerable": "N/A", "write_true": "True", "write_false": "False",
         "types": {"number": {"type": "number"}, "name": {"type": "name"}, "names": {"type": "names"},
                   "boolean": {"type": "boolean"}, "date": {"type": "date"}, "text": {"type": "text"}}}


def _task(metrics: list[dict[str, Any]], **score: Any) -> Any:
    return build_task({"name": "t", "answer": {"kinds": KINDS},
                       "submission": {"writer": "columns", "columns": {"id": "qid", "value": "value",
                                                                        "pages": "ref_pages"},
                                      "blank": "", "page_base": 0},
                       "solutions": {"id": "id", "answer": "answer", "refs": None},
                       "score": {"scorer": "components", "metrics": metrics, **score}})


def _csv(path: Path, rows: list[dict[str, str]]) -> Path:
    pl.DataFrame(rows, schema={c: pl.String for c in rows[0]}).write_csv(path)
    return path


def _values(tmp_path: Path, gold: list[tuple[str, str]], preds: list[str], params: dict | None = None,
            **score: Any) -> list[float]:
    """kind_value's per-question values for (kind, gold) pairs answered with ``preds``."""
    task = _task([{"name": "v", "fn": "kind_value", "params": params or {}}], **score)
    sol = _csv(tmp_path / "sol.csv", [{"id": f"q{i}", "kind": k, "answer": g, "pools": "[]"}
                                      for i, (k, g) in enumerate(gold)])
    sub = _csv(tmp_path / "sub.csv", [{"id": f"q{i}", "value": p, "pages": "[]"} for i, p in enumerate(preds)])
    return score_submission(task, sol, sub).table["v"].to_list()


def test_numbers_by_tolerance_scale_words_and_parentheses(tmp_path):
    gold = [("number", "406.1")] * 6 + [("number", "-12")] * 2 + [("number", "1500000")] * 2
    preds = ["406.1", "406,1", "410", "$406.10", "406.2", "406.1 million", "(12)", "12",
             "1.5 million", "1.5m"]
    assert _values(tmp_path, gold, preds) == [1, 0, 0, 1, 0, 0, 1, 0, 1, 1]
    tol = _values(tmp_path, gold, preds, {"kinds": {"number": {"rel_tol": 0.01}}})
    assert tol == [1, 0, 1, 1, 1, 0, 1, 0, 1, 1]                 # 410 is within 1 % of 406.1
    assert _values(tmp_path, [("number", "406.1")], ["406.1 million"],
                   {"kinds": {"number": {"scale_words": False}}}) == [1]
    assert _values(tmp_path, [("number", "100")] * 2, ["100.4", "100.6"],
                   {"kinds": {"number": {"abs_tol": 0.5}}}) == [1, 0]
    assert read_number("(1,234.5)") == -1234.5 and read_number("many") is None


def test_names_booleans_dates_and_strings(tmp_path):
    gold = [("name", "Site A"), ("name", "Site A"), ("names", '["a", "b"]'), ("names", '["a", "b"]'),
            ("boolean", "True"), ("boolean", "True"), ("boolean", "False"), ("date", "2023-03-01"),
            ("text", "the blue door")]
    preds = ['"site  a."', "Site B", '["B", "A"]', '["a", "c"]', "yes", "1", "no", "March 1, 2023",
             "The Blue Door"]
    assert _values(tmp_path, gold, preds) == [1, 0, 1, 0, 1, 0, 1, 1, 1]
    sets = [("names", '["a", "b"]')] * 2
    assert _values(tmp_path, sets, ['["a", "c"]', '["a"]'], {"kinds": {"names": {"measure": "jaccard"}}}) == \
        [pytest.approx(1 / 3), 0.5]
    assert _values(tmp_path, sets, ['["a", "c"]', '["a"]'], {"kinds": {"names": {"measure": "f1"}}}) == \
        [0.5, pytest.approx(2 / 3)]
    text = [("text", "blue door")] * 3
    assert _values(tmp_path, text, ["the blue door", "blue dor", "red"],
                   {"kinds": {"text": {"measure": "token_f1"}}}) == [1.0, 0.5, 0.0]
    assert _values(tmp_path, text, ["blue door", "blue dor", "red"],
                   {"kinds": {"text": {"measure": "anls"}}}) == [1.0, pytest.approx(1 - 1 / 9), 0.0]
    assert anls("abc", "xyz") == 0.0 and anls("abcd", "abce", threshold=0.2) == 0.0


def test_not_answerable_both_ways_and_in_any_case(tmp_path):
    gold = [("number", "N/A"), ("number", "N/A"), ("names", "N/A"), ("boolean", "True")]
    preds = ["n/a", "0", "N/A", "N/A"]
    assert _values(tmp_path, gold, preds) == [1, 0, 1, 0]
    assert _values(tmp_path, gold, preds, {"na_vs_na": 2.0, "na_vs_answer": -1.0, "answer_vs_na": 0.25}) == \
        [2.0, -1.0, 2.0, 0.25]


def test_kind_value_errors_name_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"kinds\.number\.measure='jaccard'"):
        _values(tmp_path, [("number", "1")], ["1"], {"kinds": {"number": {"measure": "jaccard"}}})
    with pytest.raises(ConfigError, match=r"\['float'\] not in task.answer.kinds.types"):
        _values(tmp_path, [("number", "1")], ["1"], {"kinds": {"float": {}}})
    with pytest.raises(Exception, match="question q0: kind 'money'"):
        _values(tmp_path, [("money", "1")], ["1"])


# -- one rule for unanswered questions, over the whole catalog -------------------------------

#: every registered metric's params for the test below (a metric missing here fails the test)
CATALOG_PARAMS: dict[str, dict[str, Any] | None] = {
    "exact_match": {}, "token_f1": {}, "kind_value": {}, "numeric_match": {},
    "doc_jaccard": {"pred": "refs", "gold": "refs"},
    "page_prf": {"pred": "pages", "gold": "pages", "cover_empty": True},
    "page_pools": {"pred": "pages", "gold": "pools"},
    "llm_judge": {},
    "na_f1": None,                      # set-level: one number over the set, no question's value
    # a scoring script of the test's own (exact.py, written in the test's folder)
    "adopted": {"file": "exact.py", "function": "exact",
                "args": {"prediction": {"submission": "value"}, "gold": {"solution": "answer"}}},
}


@pytest.mark.parametrize("stated", [None, 0.25])
def test_every_metric_gives_an_unanswered_question_what_the_task_says(tmp_path, stated):
    assert set(CATALOG_PARAMS) == set(registry.names("metric"))
    sol = _csv(tmp_path / "sol.csv", [
        {"id": "q1", "kind": "number", "answer": "12", "refs": "['d1']", "pages": "[3]", "pools": "[[3]]"},
        {"id": "q2", "kind": "number", "answer": "12", "refs": "['d1']", "pages": "[3]", "pools": "[[3]]"},
        {"id": "q3", "kind": "number", "answer": "12", "refs": "['d1']", "pages": "[3]", "pools": "[[3]]"}])
    # q1 answered right, q2 an empty value (its pages and refs right), q3 no row at all
    sub = _csv(tmp_path / "sub.csv", [{"id": "q1", "value": "12", "refs": "['d1']", "pages": "[3]"},
                                      {"id": "q2", "value": "", "refs": "['d1']", "pages": "[3]"}])
    want = 0.0 if stated is None else stated
    extra = {} if stated is None else {"unanswered": stated}

    def never_loaded():
        raise AssertionError("the judge was asked about an unanswered question")

    for name, params in CATALOG_PARAMS.items():
        if params is None:
            continue
        if name == "adopted":
            (tmp_path / "exact.py").write_text("def exact(prediction, gold):\n    return prediction == gold\n")
            params = {**params, "file": str(tmp_path / params["file"])}
        task = _task([{"name": "m", "fn": name, "params": params}], **extra)
        task = replace(task, submission=replace(task.submission, page_base=1))
        if name == "llm_judge":
            sub_q1 = _csv(tmp_path / "sub_judge.csv", [{"id": "q2", "value": "", "refs": "", "pages": ""}])
            result = score_submission(task, sol, sub_q1, backend=never_loaded)
        else:
            result = score_submission(task, sol, sub, backend=never_loaded)
        got = dict(zip(result.table["qid"], result.table["m"]))
        assert got["q2"] == want and got["q3"] == want, name
        if name != "llm_judge":
            assert got["q1"] == 1.0, name            # the answered one is scored as the metric says


# -- page_pools per repeat policy -----------------------------------------------------------

def _pools(tmp_path: Path, pages: list[str], repeats: str, pools: str = '[["d:3", "d:4"], ["d:10"]]') -> list[float]:
    task = _task([{"name": "r", "fn": "page_pools",
                   "params": {"pred": "pages", "gold": "pools", "extra": 0.1, "repeats": repeats}}])
    sol = _csv(tmp_path / "sol.csv", [{"id": f"q{i}", "kind": "name", "answer": "x", "pools": pools}
                                      for i in range(len(pages))])
    sub = _csv(tmp_path / "sub.csv", [{"id": f"q{i}", "value": "x", "pages": p} for i, p in enumerate(pages)])
    return score_submission(task, sol, sub).table["r"].to_list()


def test_page_pools_set_counts_a_page_once(tmp_path):
    pages = ['["d:3", "d:10"]', '["d:3", "d:10", "d:7", "d:7"]', '["d:3", "d:3"]', "[]", '["e:3", "d:10"]']
    assert _pools(tmp_path, pages, "set") == [1.0, 0.9, 0.5, 0.0, pytest.approx(0.4)]


def test_page_pools_each_counts_every_listed_page(tmp_path):
    pages = ['["d:3", "d:10"]', '["d:3", "d:10", "d:7", "d:7"]', '["d:3", "d:3", "d:4"]', "[]",
             '["d:7", "d:7", "d:7", "d:3", "d:10"]']
    assert _pools(tmp_path, pages, "each") == [1.0, 0.8, 0.5, 0.0, pytest.approx(0.7)]


def test_page_pools_no_pool_and_a_missing_row(tmp_path):
    task = _task([{"name": "r", "fn": "page_pools", "params": {"pred": "pages", "gold": "pools"}}])
    sol = _csv(tmp_path / "sol.csv", [{"id": "q1", "kind": "name", "answer": "N/A", "pools": "[]"},
                                      {"id": "q2", "kind": "name", "answer": "x", "pools": '[["d:1"], ["d:2"]]'}])
    sub = _csv(tmp_path / "sub.csv", [{"id": "q1", "value": "N/A", "pages": "[]"}])
    got = score_submission(task, sol, sub).table["r"].to_list()
    assert got == [1.0, 0.0]           # no pool and nothing cited: full; no row: 0, not 1 - 0.5 * 2


def test_page_pools_rejects_an_unknown_policy(tmp_path):
    with pytest.raises(ConfigError, match="repeats='twice'"):
        _pools(tmp_path, ["[]"], "twice")


# -- one page base -------------------------------------------------------------------------

def test_a_metric_page_base_that_disagrees_with_the_task_is_an_error():
    values = read_task_yaml(task_file("pages_example"))
    values["score"]["metrics"][1]["params"]["page_base"] = 1
    with pytest.raises(ConfigError, match=r"params.page_base=1 disagrees with task.submission.page_base=0"):
        build_task(values)
    values["score"]["metrics"][1]["params"] = {"page_base": 0, "gold_page_base": 0}
    with pytest.raises(ConfigError, match=r"gold_page_base=0 disagrees with task.solutions.page_base=1"):
        build_task(values)
    values["score"]["metrics"][1]["params"] = {"page_base": 0, "gold_page_base": 1}
    assert build_task(values).gold_page_base == 1          # agreeing params are accepted


def test_the_gold_counts_pages_as_the_submission_unless_the_task_says(tmp_path):
    task = load_task("cited_pages")
    assert (task.submission.page_base, task.gold_page_base) == (0, 0)
    assert load_task("pages_example").gold_page_base == 1


def _answers(values: list[str], pages: list[list[str]]) -> tuple[pl.DataFrame, pl.DataFrame]:
    n = len(values)
    answers = pl.DataFrame({"qid": [f"q{i}" for i in range(n)], "answer_value": values,
                            "is_blank": [False] * n, "answer": values, "explanation": [""] * n,
                            "ref_id": [["d"]] * n, "ref_url": [[]] * n, "ref_pages": pages,
                            "agreement": [1.0] * n, "fields": ["{}"] * n},
                           schema_overrides={"ref_url": pl.List(pl.String)})
    kinds_col = ["number", "boolean", "names", "name"][:n]
    questions = pl.DataFrame({"qid": [f"q{i}" for i in range(n)], "question": ["?"] * n, "kind": kinds_col})
    return answers, questions


def test_every_writer_counts_pages_from_the_tasks_base_and_renders_the_kind(tmp_path):
    """vote.keep_surface leaves the raw winner (``7.0``, ``true``); the kind rendering still
    applies (kinds.with_kinds), and the CSV and JSON write the same pages from page_base."""
    task = load_task("cited_pages")
    answers, questions = _answers(["7.0", "true", "['a', 'b']", "Site A"],
                                  [["d:1", "d:2"], ["d:3"], [], ["d:1"]])
    spec = task.answer.kinds
    answers = kinds.with_kinds(answers, questions, spec)
    assert answers["answer_value"].to_list() == ["7", "True", '["a", "b"]', "Site A"]
    sub = task.submission
    answers = documents.with_references(answers, None, sub)
    from kohaku.tasks.named.builtin import json_writer
    df = json_writer(answers, questions, sub, tmp_path / "submission.csv")
    assert df["pages"].to_list() == ['["d:0", "d:1"]', '["d:2"]', "", '["d:0"]']
    doc = json.loads((tmp_path / "submission.json").read_text())
    assert [[f"{r['doc']}:{r['page_index']}" for r in a["references"]] for a in doc["answers"]] == \
        [["d:0", "d:1"], ["d:2"], [], ["d:0"]]
    assert [a["value"] for a in doc["answers"]] == [7, True, ["a", "b"], "Site A"]
    one = replace(sub, page_base=1, schema=None, reference={})     # no references: ref_pages from 1
    got = columns_writer(answers.drop("references", "reference_pages"), questions, one, tmp_path / "one.csv")
    assert got["pages"].to_list()[0] == '["d:1", "d:2"]'
    # references that name the document by a metadata column: the CSV cites it the same way
    sha = replace(sub, reference={"pdf_sha1": "sha", "page_index": "page"})
    with_sha = documents.with_references(answers.drop("references", "reference_pages"),
                                         {"d": {"id": "d", "sha": "5e1f"}}, sha)
    df = json_writer(with_sha, questions, sha, tmp_path / "sha" / "submission.csv")
    assert df["pages"].to_list()[:2] == ['["5e1f:0", "5e1f:1"]', '["5e1f:2"]']
    doc = json.loads((tmp_path / "sha" / "submission.json").read_text())
    assert doc["answers"][1]["references"] == [{"pdf_sha1": "5e1f", "page_index": 2}]


# -- the task checked whole when the config is composed ---------------------------------------

EXAMPLE = ["task=cited_pages", "corpus.questions=cited_pages/questions.csv",
           "corpus.solutions=cited_pages/answers.csv", "llm=fake", "embed.model=hash:64"]


@pytest.mark.parametrize("override, message", [
    ("~task.submission.answer.question_id", "needs task.submission.answer"),   # the id's key gone
    ("+task.submission.answer.v=valu", "task.submission.answer.v='valu' is no answer field"),
    ("task.score.metrics.0.params.kinds.names.measure=anls", r"kinds\.names\.measure='anls'"),
    ("task.score.metrics.1.params.pred=cited", r"metrics\[1\]\.params\.pred='cited': task.submission.columns"),
    ("task.score.metrics.1.params.gold=pool", r"params\.gold='pool': the solutions file has no such column"),
    ("task.score.metrics.1.params.repeats=twice", r"params\.repeats='twice'"),
    ("+task.score.metrics.1.params.page_base=1", "disagrees with task.submission.page_base=0"),
    ("task.answer.kinds.column=type", r"task.answer.kinds.column='type': .*questions.csv has no such column"),
    ("task.score.metrics.0.fn=kind_values", r"task.score.metrics\[0\].fn='kind_values' is unknown"),
    ("task.gold.file=cited_pages/answers.csv task.gold.page_base=1",
     r"task.gold.page_base=1 disagrees with task.solutions.page_base=0"),
])
def test_a_task_missing_a_key_fails_before_any_stage_runs(tmp_path, override, message):
    from kohaku.runner.pipeline import compose_config, run_pipeline

    cfg = compose_config([*EXAMPLE, f"cache.dir={tmp_path / 'cache'}", *override.split(" ")])
    with pytest.raises(ConfigError, match=message):
        run_pipeline(cfg, tmp_path / "run")
    assert not (tmp_path / "cache").exists() and not (tmp_path / "run").exists()   # nothing ran


def test_questions_as_a_json_array_read_like_json_lines(tmp_path):
    from kohaku.core.errors import CorpusError
    from kohaku.tasks.files.io import read_questions
    from kohaku.tasks.spec import QuestionsSpec

    spec = QuestionsSpec(format="json", id="id", question="text", fields=[])
    array = tmp_path / "q.json"
    array.write_text(json.dumps([{"id": "a1", "text": "How many?", "kind": "number", "n": 3},
                                 {"id": "a2", "text": "Who?", "kind": "name", "n": None}]))
    lines = tmp_path / "q.jsonl"
    lines.write_text("\n".join(json.dumps(o) for o in json.loads(array.read_text())))
    got = read_questions(array, spec)
    assert got.to_dicts() == [{"qid": "a1", "question": "How many?", "kind": "number", "n": "3"},
                              {"qid": "a2", "question": "Who?", "kind": "name", "n": ""}]
    assert read_questions(lines, QuestionsSpec(format="jsonl", id="id", question="text", fields=[])).equals(got)
    array.write_text('[{"id": "a1", "text": "x"}, 7]')
    with pytest.raises(CorpusError, match="item 1 of questions is a JSON int"):
        read_questions(array, spec)
