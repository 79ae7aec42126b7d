"""A competition defined by a task YAML alone, end to end on data/sample (fake LLM, model-free
hashing encoder: this tests the plumbing, not the answers).

The toy task lives in a tmp folder ``<tmp>/task/toy.yaml`` that is put on Hydra's search path
with the override ``hydra.searchpath=[file://<tmp>]`` (kohaku.runner.pipeline.compose_config honours
it, as scripts/run.py does): no file under conf/ and no Python code. It reads
data/sample/short_answer/questions.csv, names its answer field ``reply``, never abstains, votes
by normalised text and writes its own column names. One cache serves every run of the module, so
parse/tree/embed/index are computed once (~10 s for the module on 2 loaded cores)."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import polars as pl
import pytest

from conftest import SAMPLE
from kohaku.llm.fake import FakeBackend, default_responder
from kohaku.runner.pipeline import compose_config, run_pipeline
from kohaku.runner.services import Services

SHORT = SAMPLE / "short_answer"
FAST = ["llm=fake", "embed.model=hash:64", "embed.dtype=float32"]
FILES = ["corpus.questions=short_answer/questions.csv", "corpus.solutions=short_answer/answers.csv"]

TOY = textwrap.dedent("""\
    # A toy competition in YAML alone: short answers, field "reply", no abstention.
    defaults:
      - task_schema
      - _self_
    name: toy
    questions: {format: csv, id: id, question: question, fields: []}
    answer:
      fields: {reply: text, ref_id: refs}
      value: reply
      refs: ref_id
      abstention: never
      blank_without_refs: false
      fallback: no idea
      prompts:
        context_first:
          system: Answer from the snippets with a few words. Reply with JSON only.
          user: "{context}\\n---\\n[{qid}] Question: {question}\\nReply with JSON holding reply and ref_id."
        question_first:
          system: Answer from the snippets with a few words. Reply with JSON only.
          user: "[{qid}] Question: {question}\\n{context}\\n---\\nReply with JSON holding reply and ref_id."
    vote: {group: text, keep_surface: true}
    submission:
      writer: columns
      columns: {question_id: qid, reply_text: value, sources: refs}
      list_format: semicolon
      blank: "-"
    solutions: {id: id, answer: answer, refs: null}
    score:
      scorer: components
      metrics:
        - {name: exact, fn: exact_match, weight: 0.5}
        - {name: f1, fn: token_f1, weight: 0.5}
      correct: exact
      classes: generic
    gold: {qid: id, doc: null}
    """)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def toy_conf(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("toy_conf")
    (root / "task").mkdir()
    (root / "task" / "toy.yaml").write_text(TOY)
    return root


def toy_overrides(toy_conf: Path, cache_dir: Path) -> list[str]:
    return [f"hydra.searchpath=[file://{toy_conf}]", "task=toy", *FILES, *FAST, f"cache.dir={cache_dir}"]


@pytest.fixture(scope="module")
def toy_run(toy_conf, cache_dir, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("toy_run")
    return run_pipeline(compose_config(toy_overrides(toy_conf, cache_dir)), run_dir)


@pytest.fixture(scope="module")
def short_run(toy_run, cache_dir, tmp_path_factory):   # after the toy: the corpus stages are cached
    run_dir = tmp_path_factory.mktemp("short_run")
    return run_pipeline(compose_config(["task=short_answer", *FILES, *FAST, f"cache.dir={cache_dir}"]), run_dir)


def question_ids() -> list[str]:
    return pl.read_csv(SHORT / "questions.csv", infer_schema=False)["id"].to_list()


def test_toy_composes_from_the_search_path(toy_conf, cache_dir):
    cfg = compose_config(toy_overrides(toy_conf, cache_dir))
    assert cfg.task.name == "toy" and cfg.task.answer.value == "reply"
    assert cfg.task.submission.columns == {"question_id": "qid", "reply_text": "value", "sources": "refs"}


def test_toy_runs_every_stage(toy_run):
    assert list(toy_run.stages) == ["parse", "questions", "caption", "tree", "embed", "index", "plan",
                                    "retrieve", "infer", "vote", "score"]


def test_toy_submission(toy_run):
    sub = pl.read_csv(toy_run.run_dir / "submission.csv", infer_schema=False)
    assert sub.columns == ["question_id", "reply_text", "sources"]
    assert sub["question_id"].to_list() == question_ids()          # one row per question, in order
    assert all(v.strip() and v not in ("-", "is_blank") for v in sub["reply_text"].to_list())
    docs = set(pl.read_csv(SAMPLE / "metadata.csv", infer_schema=False)["id"].to_list())
    for cell in sub["sources"].to_list():                           # semicolon lists of corpus ids
        assert cell == "-" or set(cell.split(";")) <= docs


def test_toy_answers_and_vote_summary(toy_run):
    answers = pl.read_parquet(Path(toy_run.stages["vote"].path) / "answers.parquet")
    assert answers.height == 10 and not answers["is_blank"].any()
    summary = toy_run.stages["vote"].summary
    assert summary["n_blank"] == 0 and summary["n_questions"] == 10 and "n_fallback" in summary


def test_toy_scores(toy_run):
    scores = json.loads((toy_run.run_dir / "scores.json").read_text())
    assert scores["task"] == "toy" and scores["scorer"] == "components"
    assert set(scores["components"]) == {"exact", "f1"}
    assert all(0.0 <= v <= 1.0 for v in scores["components"].values())
    assert scores["score"] == pytest.approx(0.5 * scores["components"]["exact"] + 0.5 * scores["components"]["f1"])
    assert scores["coverage"] == {"exact": 10, "f1": 10}
    assert scores["weights"] == {"exact": 0.5, "f1": 0.5} and scores["correct_by"] == "exact"
    assert (scores["n"], scores["n_missing"], scores["n_extra"]) == (10, 0, 0)
    assert [c["name"] for c in scores["metric"]["components"]] == ["exact", "f1"]
    assert sum(scores["errors"]["counts"].values()) == 10
    table = pl.read_parquet(toy_run.run_dir / "scores.parquet")
    assert table["qid"].to_list() == question_ids() and "error_class" in table.columns


def test_toy_prompt_is_the_tasks(toy_run):
    gens = pl.read_parquet(Path(toy_run.stages["infer"].path) / "generations.parquet")
    assert gens["qid"].unique().len() == 10 and gens["valid"].all()
    replies = [json.loads(f)["reply"] for f in gens["fields"].to_list()]
    assert all(r.strip() for r in replies)


def test_toy_answers_have_only_the_tasks_fields(toy_run):
    gens = pl.read_parquet(Path(toy_run.stages["infer"].path) / "generations.parquet")
    assert {tuple(json.loads(f)) for f in gens["fields"].to_list()} == {("reply",)}


def test_toy_composes_with_only_its_own_answer_fields(toy_conf, cache_dir):
    """Hydra replaces, not merges, the answer's fields (AnswerSpec.fields has no default keys)."""
    cfg = compose_config(toy_overrides(toy_conf, cache_dir))
    assert list(cfg.task.answer.fields) == ["reply", "ref_id"]


class ScriptedServices(Services):
    """Services whose LLM is a fake that gives no JSON for the questions matching ``silent``."""

    def __init__(self, silent: str) -> None:
        super().__init__()
        self.silent = re.compile(silent)

    def get(self, kind, cfg, factory):
        if kind != "llm":
            return super().get(kind, cfg, factory)

        def responder(req, seed):
            if self.silent.search(req.messages[-1]["content"].split("---")[-1]):
                return "I cannot tell."
            return default_responder(req, seed)

        return super().get(kind, cfg, lambda c: FakeBackend(responder, identity="fake:scripted@0"))


def test_toy_never_abstains_when_the_model_gives_nothing(toy_conf, cache_dir, tmp_path):
    cfg = compose_config([*toy_overrides(toy_conf, cache_dir), "infer.seed=7", "infer.generation_cache=false"])
    result = run_pipeline(cfg, tmp_path / "run", ScriptedServices(r"\[(s03|s07)\] Question:"))
    sub = pl.read_csv(result.run_dir / "submission.csv", infer_schema=False)
    replies = dict(zip(sub["question_id"].to_list(), sub["reply_text"].to_list()))
    assert replies["s03"] == replies["s07"] == "no idea"
    assert result.stages["vote"].summary["n_fallback"] == 2


def test_short_answer_end_to_end(short_run):
    scores = json.loads((short_run.run_dir / "scores.json").read_text())
    assert scores["task"] == "short_answer"
    assert set(scores["components"]) == {"em", "f1"}
    assert all(0.0 <= scores["components"][k] <= 1.0 for k in ("em", "f1"))
    assert scores["score"] == scores["components"]["f1"]         # em has weight 0
    assert scores["coverage"] == {"em": 10, "f1": 10} and scores["n"] == 10
    table = pl.read_parquet(short_run.run_dir / "scores.parquet")
    assert table["qid"].to_list() == question_ids()
    sub = pl.read_csv(short_run.run_dir / "submission.csv", infer_schema=False)
    assert sub.columns == ["id", "answer"] and sub["id"].to_list() == question_ids()
    assert not any(v in ("", "is_blank") for v in sub["answer"].to_list())
    # the corpus stages came from the toy run's cache
    assert all(short_run.stages[s].cache_hit for s in ("parse", "tree", "embed", "index"))
