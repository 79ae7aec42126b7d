"""The typed_answers example task end to end on data/sample with the fake LLM (model-free hashing
encoder: plumbing, not answer quality): every answer in its kind's schema, booleans and lists in
the task's syntax, the JSON submission checked against the committed schema file, references
counted from 0 against the tree's pages; the writers' checks refuse what they must."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from conftest import REPO, SAMPLE
from kohaku.answer.answering import InferConfig, answer_schema
from kohaku.runner.pipeline import compose_config, run_pipeline
from kohaku.retrieval.gold import node_pages
from kohaku.core.schema_check import problems
from kohaku.tasks.rooms.wattbot.submission import SubmissionError
from kohaku.tasks.files import documents
from kohaku.tasks import kinds, load_task
from kohaku.tasks.named.builtin import columns_writer

TASK = load_task("typed_answers")
FILES = ["task=typed_answers", "corpus.questions=typed_answers/questions.csv",
         "corpus.solutions=typed_answers/answers.csv"]
FAST = ["llm=fake", "embed.model=hash:64", "embed.dtype=float32"]
SCHEMA_FILE = REPO / "conf" / "task" / "schemas" / "typed_answers.json"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    return run_pipeline(compose_config([*FILES, *FAST, f"cache.dir={cache}", "infer.n=3"]),
                        tmp_path_factory.mktemp("run"))


def table(run, stage: str, name: str) -> pl.DataFrame:
    return pl.read_parquet(Path(run.stages[stage].path) / f"{name}.parquet")


QUESTIONS = pl.read_csv(SAMPLE / "typed_answers" / "questions.csv", infer_schema=False)
KIND = dict(zip(QUESTIONS["id"], QUESTIONS["kind"]))


def test_the_copy_adds_a_kind_column_and_leaves_the_sample_questions_alone():
    original = pl.read_csv(SAMPLE / "questions.csv", infer_schema=False)
    assert QUESTIONS.columns == [*original.columns, "kind"]
    assert QUESTIONS.head(original.height).drop("kind").equals(original)
    assert set(KIND.values()) == set(TASK.answer.kinds.types)          # every kind is asked


def test_every_sample_follows_its_kinds_schema(run):
    summary = run.stages["infer"].summary
    assert (summary["invalid"], summary["off_schema"]) == (0, 0)
    gens = table(run, "infer", "generations")
    assert gens.height == 3 * len(KIND) and gens["valid"].all()
    specs = TASK.answer.kinds.specs
    for qid, raw in gens.select("qid", "raw").iter_rows():
        schema = answer_schema([], InferConfig(ref_enum=False), TASK.answer, specs[KIND[qid]])
        assert problems(json.loads(raw), schema) == [], (qid, raw)


def _first_number(run, qid: str) -> str:
    """The first number of the question's attempt-0 context (what the fake answers with)."""
    from kohaku.llm.fake import _NUM

    contexts = table(run, "retrieve", "contexts").filter((pl.col("qid") == qid) & (pl.col("attempt") == 0))
    return _NUM.search(contexts["context"][0]).group()


def test_csv_writes_booleans_and_lists_in_the_tasks_syntax(run):
    sub = pl.read_csv(run.run_dir / "submission.csv", infer_schema=False)
    assert sub.columns == ["id", "kind", "value", "pages"] and sub["id"].to_list() == list(KIND)
    cells = dict(zip(sub["id"], sub["value"]))
    assert cells["q006"] == "True"                       # write_true, not true / 1
    assert isinstance(json.loads(cells["q012"]), list)   # list_format json
    assert cells["q013"] == "N/A"                        # the fake finds no date: the token
    assert cells["q001"] == _first_number(run, "q001")   # the fake copies the context's first number


def test_json_submission_follows_the_committed_schema(run):
    doc = json.loads((run.run_dir / "submission.json").read_text())
    assert problems(doc, json.loads(SCHEMA_FILE.read_text())) == []
    assert doc["team"] == "kohaku-sample"
    items = {a["question_id"]: a for a in doc["answers"]}
    assert list(items) == list(KIND)
    assert items["q006"]["value"] is True and items["q001"]["value"] == int(_first_number(run, "q001"))
    assert isinstance(items["q012"]["value"], list)
    assert items["q013"] == {"question_id": "q013", "kind": "date", "value": "N/A", "references": []}


def test_references_count_pages_from_0_against_the_trees_pages(run):
    """page_index = the tree's page - 1 for the cited documents' nodes in the context, in
    context order, deduplicated, at most the kind's max_pages."""
    doc = json.loads((run.run_dir / "submission.json").read_text())
    sha = dict(pl.read_csv(SAMPLE / "typed_answers" / "documents.csv", infer_schema=False)
               .select("pdf_sha1", "id").iter_rows())
    pages = node_pages(table(run, "tree", "nodes"))
    contexts = {q: ids for q, a, ids in table(run, "retrieve", "contexts")
                .select("qid", "attempt", "node_ids").iter_rows() if a == 0}
    answers = {r["qid"]: r for r in table(run, "vote", "answers").to_dicts()}
    n_pages = dict(table(run, "parse", "documents").select("doc_id", "n_pages").iter_rows())
    specs = TASK.answer.kinds.specs
    shifted = 0
    for item in doc["answers"]:
        qid = item["question_id"]
        cited = set(answers[qid]["ref_id"])
        want: list[tuple[str, int]] = []
        for node in contexts[qid]:
            d = node.split("#", 1)[0]
            for p in sorted(pages.get(node, ())):
                if d in cited and (d, p) not in want:
                    want.append((d, p))
        if item["value"] == "N/A":
            want = []
        want = want[: specs[item["kind"]].max_pages]
        got = [(sha[r["pdf_sha1"]], r["page_index"]) for r in item["references"]]
        assert got == [(d, p - 1) for d, p in want], qid
        assert all(0 <= p < n_pages[d] for d, p in got)
        shifted += any(p > 0 for _, p in got)
    assert shifted >= 1          # a second page is cited somewhere: the shift is seen, not only 0s


def test_the_json_writer_refuses_a_document_off_its_schema(tmp_path):
    spec = TASK.submission
    doc = {"team": "t", "answers": [{"question_id": "q1", "kind": "number", "value": 1,
                                     "references": [{"pdf_sha1": "a" * 40, "page_index": -1}]}]}
    with pytest.raises(SubmissionError) as err:
        documents.write_json(doc, spec, tmp_path / "submission.json")
    assert "$.answers[0].references[0].page_index: -1 is less than 0" in str(err.value)
    assert str(SCHEMA_FILE) in str(err.value) and not (tmp_path / "submission.json").exists()
    doc["answers"][0]["references"][0]["page_index"] = 0
    documents.write_json(doc, spec, tmp_path / "submission.json")
    assert json.loads((tmp_path / "submission.json").read_text()) == doc


def test_the_columns_writer_refuses_a_duplicate_id_and_a_row_off_its_schema(tmp_path):
    from dataclasses import replace

    answers = pl.DataFrame({"qid": ["q1", "q2"], "answer_value": ["1", "x"], "answer": ["", ""],
                            "explanation": ["", ""], "ref_id": [[], []], "ref_url": [[], []],
                            "agreement": [1.0, 1.0], "fields": ["{}", "{}"]})
    questions = pl.DataFrame({"qid": ["q1", "q1"], "question": ["?", "?"]})
    spec = replace(TASK.submission, writer="columns", columns={"id": "qid", "value": "value"})
    with pytest.raises(SubmissionError, match=r"rows 1 and 2, column 'id': duplicate id 'q1'"):
        columns_writer(answers, questions, spec, tmp_path / "a.csv")
    schema = tmp_path / "row.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"value": {"pattern": "^[0-9]+$"}}}))
    questions = pl.DataFrame({"qid": ["q1", "q2"], "question": ["?", "?"]})
    with pytest.raises(SubmissionError, match=r"row 2 \(id 'q2'\).*\$\.value: 'x' does not match"):
        columns_writer(answers, questions, replace(spec, schema=str(schema)), tmp_path / "b.csv")
    assert not (tmp_path / "b.csv").exists()


def test_a_reference_to_a_document_the_table_lacks_is_an_error():
    answers = pl.DataFrame({"qid": ["q1"], "ref_pages": [["ghost:2"]]})
    with pytest.raises(SubmissionError, match="question 'q1' cites document 'ghost'"):
        documents.with_references(answers, {}, TASK.submission)


def test_a_task_without_kinds_keeps_its_answers_as_they_were():
    answers = pl.DataFrame({"qid": ["a"], "answer_value": ["1"], "is_blank": [False]})
    questions = pl.DataFrame({"qid": ["a"], "question": ["?"]})
    spec = load_task("short_answer").answer.kinds
    assert kinds.with_kinds(answers, questions, spec) is answers
    assert kinds.limit_pages(answers, spec) is answers and kinds.groupings(questions, spec, 0.1) == {}
