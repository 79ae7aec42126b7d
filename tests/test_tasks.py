"""The task config group (kohaku.tasks) on hand-made cases: every conf/task YAML loads and
composes, answers parse and their schema follows the task, the vote groups as the task says, a
task that never abstains writes no blank, the columns writer, errors that name the file, row or
key, and scoring (SQuAD EM/F1, numeric match and the LLM judge, WattBot's exact metric).

The pure metric modules (squad, accounting, judge, classes) have their own tests
(tests/test_task_*.py); here they are only exercised through the task."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from omegaconf import OmegaConf

from conftest import CONF
from kohaku.answer.answering import GENERATIONS_SCHEMA, InferConfig, answer_schema, parse_answer
from kohaku.core.config import ConfigError
from kohaku.ingest.corpus import CorpusError
from kohaku.llm.fake import FakeBackend
from kohaku.tasks.rooms.wattbot.metric import score_files
from kohaku.runner.pipeline import compose_config
from kohaku.tasks import load_task
from kohaku.tasks.named import registry
from kohaku.tasks.named.builtin import columns_writer
from kohaku.tasks.files.io import read_questions, read_rows
from kohaku.tasks.score.scoring import score_submission
from kohaku.tasks.spec import QuestionsSpec, SubmissionSpec, VoteSpec, build_task
from kohaku.answer.voting import VoteConfig, vote, vote_generations
from test_scripts_score import write as write_wattbot_csv
from test_task_squad import ref_exact_match_score, ref_f1_score, ref_metric_max_over_ground_truths

TASKS = sorted(p.stem for p in (CONF / "task").glob("*.yaml"))
PROMPTS = {"context_first": {"system": "Answer.", "user": "{context}\nQuestion: {question}"}}


def small_task(**answer: Any) -> dict[str, Any]:
    """Plain data of a minimal components task (short-answer like) with ``answer`` overrides."""
    return {
        "name": "small",
        "questions": {"fields": []},
        "answer": {"fields": {"answer": "text", "ref_id": "refs"}, "value": "answer",
                   "refs": "ref_id", "abstention": "never", "blank_without_refs": False,
                   "fallback": "unknown", "prompts": PROMPTS, **answer},
        "vote": {"group": "text", "keep_surface": True},
        "submission": {"writer": "columns", "columns": {"id": "qid", "answer": "value"}},
        "solutions": {"id": "id", "answer": "answer", "refs": None},
        "score": {"scorer": "components", "correct": "em", "classes": "generic",
                  "metrics": [{"name": "em", "fn": "exact_match", "weight": 0.0},
                              {"name": "f1", "fn": "token_f1", "weight": 1.0}]},
        "gold": {"qid": "id", "doc": None},
    }


# -- every task YAML loads, composes and builds ---------------------------------------------


def test_the_three_tasks_are_there():
    assert {"wattbot", "financebench", "short_answer"} <= set(TASKS)


@pytest.mark.parametrize("name", TASKS)
def test_task_yaml_loads_composes_and_builds(name):
    loaded = load_task(name)
    assert loaded.name == name
    cfg = compose_config([f"task={name}"])
    built = build_task(OmegaConf.to_container(cfg.task, resolve=True))
    assert built == loaded          # Hydra (schema defaults + the YAML) = load_task (YAML alone)
    if not built.answer.scoring_only:           # pages_example only scores files
        assert set(built.answer.prompts) == {"context_first", "question_first"}


def test_default_task_is_wattbot():
    assert compose_config([]).task.name == "wattbot"


# -- answer parsing per task ----------------------------------------------------------------


def answer_json(**fields: Any) -> str:
    return "Sure: " + json.dumps(fields) + " done"


def test_parse_wattbot_blank_token_and_refs():
    spec = load_task("wattbot").answer
    ok = parse_answer(answer_json(explanation="e", answer="a", answer_value="5", ref_id=["D1", "zz"]),
                      ["d1"], spec)
    assert (ok["valid"], ok["answer_value"], ok["ref_id"], ok["dropped_refs"], ok["is_blank"]) == \
        (True, "5", ["d1"], 1, False)
    token = parse_answer(answer_json(explanation="e", answer="a", answer_value="is_blank", ref_id=["d1"]),
                         ["d1"], spec)
    assert token["is_blank"] is True
    no_refs = parse_answer(answer_json(explanation="e", answer="a", answer_value="5", ref_id=[]), ["d1"], spec)
    assert no_refs["is_blank"] is True and no_refs["answer_value"] == "5"
    assert parse_answer("no json here", ["d1"], spec)["is_blank"] is True
    assert parse_answer("no json here", ["d1"], spec)["valid"] is False


def test_parse_financebench_keeps_values_and_never_abstains():
    spec = load_task("financebench").answer
    yes = parse_answer(answer_json(explanation="e", answer="Yes", ref_id=[]), ["3M_2018_10K"], spec)
    assert (yes["answer_value"], yes["answer"], yes["ref_id"], yes["is_blank"]) == ("Yes", "Yes", [], False)
    amount = parse_answer(answer_json(explanation="e", answer="$1577.00", ref_id=["3m_2018_10k"]),
                          ["3M_2018_10K"], spec)
    assert (amount["answer_value"], amount["ref_id"], amount["is_blank"]) == ("$1577.00", ["3M_2018_10K"], False)
    assert json.loads(amount["fields"]) == {"explanation": "e", "answer": "$1577.00"}
    # abstention never: the text "is_blank" is an answer, only an empty one is blank
    token = parse_answer(answer_json(explanation="e", answer="is_blank", ref_id=[]), [], spec)
    assert token["is_blank"] is False and token["answer_value"] == "is_blank"
    empty = parse_answer(answer_json(explanation="e", answer="  ", ref_id=["3M_2018_10K"]), ["3M_2018_10K"], spec)
    assert empty["is_blank"] is True
    assert parse_answer("{not json", [], spec)["is_blank"] is True


def test_parse_short_answer():
    spec = load_task("short_answer").answer
    got = parse_answer(answer_json(answer=" Kestrel ", ref_id=["okafor2023", "elsewhere"]), ["okafor2023"], spec)
    assert (got["answer_value"], got["answer"], got["ref_id"], got["dropped_refs"], got["explanation"],
            got["is_blank"]) == ("Kestrel", "Kestrel", ["okafor2023"], 1, "", False)
    assert json.loads(got["fields"]) == {"answer": "Kestrel"}
    assert parse_answer(answer_json(answer="x", ref_id=[]), [], spec)["is_blank"] is False
    assert parse_answer(answer_json(answer="", ref_id=[]), [], spec)["is_blank"] is True
    # a number or a list in a text field is written as text
    assert parse_answer(answer_json(answer=3.5, ref_id=[]), [], spec)["answer_value"] == "3.5"
    assert parse_answer(answer_json(answer=["a", "b"], ref_id=[]), [], spec)["answer_value"] == '["a","b"]'


# -- the answer schema follows the task -----------------------------------------------------


def test_answer_schema_fields_types_and_enum():
    task = build_task(small_task(
        fields={"explanation": "text", "amount": "number", "items": "list", "kind": "choice", "ref_id": "refs"},
        value="amount", choices={"kind": ["yes", "no"]}))
    cfg = InferConfig(max_chars={"explanation": 100, "items": 20}, max_refs=3)
    schema = answer_schema(["d1", "d2", "d1"], cfg, task.answer)
    props = schema["properties"]
    assert list(props) == ["explanation", "amount", "items", "kind", "ref_id"]
    assert schema["required"] == ["explanation", "amount", "items", "kind", "ref_id"]
    assert schema["additionalProperties"] is False
    assert props["explanation"] == {"type": "string", "maxLength": 100}
    assert props["amount"] == {"type": "number"}
    assert props["items"] == {"type": "array", "items": {"type": "string", "maxLength": 20}}
    assert props["kind"] == {"type": "string", "enum": ["yes", "no"]}
    assert props["ref_id"] == {"type": "array", "items": {"type": "string", "enum": ["d1", "d2"]}, "maxItems": 3}
    # no document in the context: nothing may be cited
    assert answer_schema([], cfg, task.answer)["properties"]["ref_id"]["maxItems"] == 0


def test_answer_schema_of_the_conf_tasks():
    cfg = InferConfig()
    assert list(answer_schema(["d"], cfg, load_task("wattbot").answer)["properties"]) == \
        ["explanation", "answer", "answer_value", "ref_id"]
    assert list(answer_schema(["d"], cfg, load_task("financebench").answer)["properties"]) == \
        ["explanation", "answer", "ref_id"]
    assert list(answer_schema(["d"], cfg, load_task("short_answer").answer)["properties"]) == ["answer", "ref_id"]


def test_a_choice_field_needs_its_values():
    with pytest.raises(ConfigError, match=r"task.answer.choices.kind"):
        build_task(small_task(fields={"kind": "choice", "answer": "text", "ref_id": "refs"}))


# -- vote grouping --------------------------------------------------------------------------


def candidates(by_qid: dict[str, list[str]]) -> pl.DataFrame:
    rows = [{"qid": q, "source_idx": i, "answer_value": v, "ref_id": ["d"], "answer": v,
             "explanation": "", "is_blank": False}
            for q, values in by_qid.items() for i, v in enumerate(values)]
    return pl.DataFrame(rows)


def grouping(name: str, **spec: Any):
    return registry.lookup("group", name, "task.vote.group")(VoteSpec(group=name, **spec))


def voted(by_qid: dict[str, list[str]], group, keep_surface: bool = False) -> dict[str, tuple[str, float]]:
    out = vote(candidates(by_qid), VoteConfig(), group, keep_surface)
    return {r["qid"]: (r["answer_value"], round(r["agreement"], 4)) for r in out.to_dicts()}


def test_amounts_grouping():
    g = grouping("amounts", tolerance=0.01)
    cases = {
        # $1,577.00, 1577 and $1.577 billion are one amount: 1577 is read in every implicit unit
        # against the side that writes a magnitude (accounting.same_amount), 1577e6 = 1.577e9
        "units": ["$1,577.00", "1577", "$1.577 billion"],
        "negative": ["(1.2)", "-1.2", "1.2"],     # accounting parentheses = minus; 1.2 stays apart
        "sign": ["1.2", "(1.2)"],
        "name": ["3M", "3,000,000"],              # a bare 3M is the company, not 3e6
        "names": ["3M", "3m", "3,000,000"],       # ... and groups with itself by its text
        "percent": ["2.8%", "2.8 percent", "0.028"],
    }
    assert voted(cases, g) == {
        "units": ("1577", 1.0), "negative": ("-1.2", 0.6667), "sign": ("1.2", 0.5),
        "name": ("3M", 0.5), "names": ("3M", 0.6667), "percent": ("2.8%", 1.0)}
    # keep_surface: the winner as a sample wrote it
    assert voted(cases, g, keep_surface=True) == {
        "units": ("$1,577.00", 1.0), "negative": ("(1.2)", 0.6667), "sign": ("1.2", 0.5),
        "name": ("3M", 0.5), "names": ("3M", 0.6667), "percent": ("2.8%", 1.0)}


def test_amounts_tolerance_is_the_tasks():
    values = {"q": ["100", "100.5"]}
    assert voted(values, grouping("amounts", tolerance=0.01))["q"] == ("100", 1.0)
    assert voted(values, grouping("amounts", tolerance=0.001))["q"] == ("100", 0.5)


def test_text_and_name_groupings():
    assert voted({"q": ["The Board", "board.", "CEO"]}, grouping("text"), keep_surface=True)["q"] == ("The Board", 0.6667)
    assert voted({"q": ["The Board", "board.", "CEO"]}, grouping("name"))["q"] == ("The Board", 0.3333)
    assert voted({"q": ["Jane  Doe", "jane doe", "J. Doe"]}, grouping("name"))["q"] == ("Jane  Doe", 0.6667)


def test_wattbot_grouping_unchanged():
    g = grouping("wattbot")
    assert voted({"q": ["1,000", "1000.0", "5"]}, g)["q"] == ("1000", 0.6667)
    assert voted({"q": ["1,000", "1000.0", "5"]}, g, keep_surface=True)["q"] == ("1,000", 0.6667)
    # the default grouping of vote() is WattBot's
    assert vote(candidates({"q": ["1e3", "1000"]}))["answer_value"].to_list() == ["1000"]


# -- abstention never -----------------------------------------------------------------------


def generation(qid: str, idx: int, value: str, blank: bool, valid: bool = True,
               fields: dict[str, str] | None = None) -> dict[str, Any]:
    return {"qid": qid, "attempt": 0, "sample_idx": idx, "raw": "", "valid": valid, "answer": value,
            "answer_value": value, "ref_id": ["d1"] if value else [], "explanation": "e",
            "is_blank": blank, "prompt_tokens": 1, "completion_tokens": 1, "seconds": 0.0,
            "prompt_hash": "h", "dropped_refs": 0, "cached": False, "finish_reason": "stop", "k": 4,
            "trimmed_snippets": 0,
            "fields": json.dumps(fields if fields is not None else {"answer": value})}


QUESTIONS = pl.DataFrame({"qid": ["a", "b", "c"], "question": ["Qa?", "Qb?", "Qc?"],
                          "sector": ["tech", "energy", "retail"]})
DOCUMENTS = pl.DataFrame({"doc_id": ["d1"], "url": ["https://example.org/d1"], "title": ["D1"]})


def never_abstaining_answers() -> tuple[pl.DataFrame, dict[str, Any]]:
    """a: answered; b: every sample blank or no JSON; c: no generations at all."""
    gens = pl.DataFrame([generation("a", 0, "Paris", False), generation("a", 1, "paris.", False),
                         generation("b", 0, "", True), generation("b", 1, "", True, valid=False, fields={})],
                        schema=GENERATIONS_SCHEMA)
    return vote_generations(gens, QUESTIONS, DOCUMENTS, VoteConfig(), grouping("text"), True, fallback="X")


def test_never_abstaining_vote_writes_the_fallback():
    answers, summary = never_abstaining_answers()
    rows = {r["qid"]: r for r in answers.to_dicts()}
    assert [rows[q]["answer_value"] for q in "abc"] == ["Paris", "X", "X"]
    assert [rows[q]["answer"] for q in "abc"] == ["Paris", "X", "X"]
    assert not any(answers["is_blank"].to_list())
    assert rows["b"]["explanation"] == "no sample gave an answer: the task's fallback"
    assert (summary["n_questions"], summary["n_blank"], summary["n_fallback"], summary["n_unanswered"]) == (3, 0, 2, 1)


def test_abstaining_vote_keeps_blanks():
    gens = pl.DataFrame([generation("a", 0, "Paris", False), generation("b", 0, "", True)], schema=GENERATIONS_SCHEMA)
    answers, summary = vote_generations(gens, QUESTIONS, DOCUMENTS, VoteConfig(), grouping("text"), True)
    assert answers["is_blank"].to_list() == [False, True, True]
    assert summary["n_blank"] == 2 and "n_fallback" not in summary


def test_columns_writer_after_an_all_blank_question(tmp_path):
    answers, _ = never_abstaining_answers()
    spec = SubmissionSpec(writer="columns", columns={"id": "qid", "answer": "value"})
    df = columns_writer(answers, QUESTIONS, spec, tmp_path / "s.csv")
    assert df["answer"].to_list() == ["Paris", "X", "X"]


def test_columns_writer_value_field_by_name_on_a_fallback_row(tmp_path):
    # the task's value field is ``reply`` (no fixed source of the writer)
    gens = pl.DataFrame([generation("a", 0, "Paris", False, fields={"reply": "Paris"}),
                         generation("b", 0, "Rome", False, fields={"reply": "Rome"})], schema=GENERATIONS_SCHEMA)
    answers, _ = vote_generations(gens, QUESTIONS, DOCUMENTS, VoteConfig(), grouping("text"), True,
                                  fallback="X", value_field="reply")
    assert answers["answer_value"].to_list() == ["Paris", "Rome", "X"]
    spec = SubmissionSpec(writer="columns", columns={"id": "qid", "reply": "reply"})
    df = columns_writer(answers, QUESTIONS, spec, tmp_path / "s.csv")
    assert df["reply"].to_list() == ["Paris", "Rome", "X"]


# -- the columns writer ---------------------------------------------------------------------


def answer_rows() -> pl.DataFrame:
    return pl.DataFrame([
        {"qid": "a", "answer": "Paris is it", "answer_value": "Paris", "explanation": "because",
         "ref_id": ["d1", "d2"], "ref_url": ["u1"], "agreement": 2 / 3,
         "fields": json.dumps({"answer": "Paris is it", "city": "Paris"})},
        {"qid": "b", "answer": "", "answer_value": "", "explanation": "", "ref_id": [], "ref_url": [],
         "agreement": 1.0, "fields": json.dumps({"answer": "", "city": ""})},
        {"qid": "c", "answer": "x", "answer_value": "x", "explanation": "e", "ref_id": ["d3"],
         "ref_url": [], "agreement": 0.5, "fields": json.dumps({"answer": "x", "city": "x"})},
    ])


@pytest.mark.parametrize("fmt,cell", [("python", "['d1','d2']"), ("json", '["d1", "d2"]'), ("semicolon", "d1;d2")])
def test_columns_writer_list_formats(tmp_path, fmt, cell):
    spec = SubmissionSpec(writer="columns", list_format=fmt, blank="NONE",
                          columns={"qid_out": "qid", "docs": "refs", "value": "value"})
    path = tmp_path / "sub.csv"
    df = columns_writer(answer_rows(), QUESTIONS, spec, path)
    assert df.columns == ["qid_out", "docs", "value"]
    assert df["docs"].to_list() == [cell, "NONE", {"python": "['d3']", "json": '["d3"]', "semicolon": "d3"}[fmt]]
    assert df["value"].to_list() == ["Paris", "NONE", "x"]          # the blank cell
    assert pl.read_csv(path, infer_schema=False).equals(df)


def test_columns_writer_sources(tmp_path):
    spec = SubmissionSpec(writer="columns", columns={
        "id": "qid", "q": "question", "sector": "sector", "city": "city", "agree": "agreement",
        "why": "explanation", "urls": "ref_urls"})
    df = columns_writer(answer_rows(), QUESTIONS, spec, tmp_path / "sub.csv")
    assert df.to_dicts()[0] == {"id": "a", "q": "Qa?", "sector": "tech", "city": "Paris", "agree": "0.6667",
                                "why": "because", "urls": "['u1']"}
    assert df["sector"].to_list() == ["tech", "energy", "retail"]   # a question column
    assert df["city"].to_list() == ["Paris", "is_blank", "x"]       # an answer field; default blank


def test_columns_writer_unknown_source(tmp_path):
    spec = SubmissionSpec(writer="columns", columns={"id": "qid", "industry": "nowhere"})
    with pytest.raises(ConfigError, match=r"task\.submission\.columns\.industry='nowhere'"):
        columns_writer(answer_rows(), QUESTIONS, spec, tmp_path / "sub.csv")


def test_columns_writer_needs_the_qid():
    with pytest.raises(ConfigError, match="question id"):
        build_task({**small_task(), "submission": {"writer": "columns", "columns": {"answer": "value"}}})


# -- bad input: errors that name the file, the row or the key -------------------------------


def test_questions_csv_without_the_id_column(tmp_path):
    path = tmp_path / "qs.csv"
    path.write_text("qid_wrong,question\nq1,Why?\n")
    with pytest.raises(CorpusError) as err:
        read_questions(path, QuestionsSpec(id="id", fields=[]))
    assert str(path) in str(err.value) and "task.questions.id: 'id'" in str(err.value)


def test_questions_csv_without_a_prompt_field(tmp_path):
    path = tmp_path / "qs.csv"
    path.write_text("id,question\nq1,Why?\n")
    with pytest.raises(CorpusError, match=r"task.questions.fields: 'answer_unit'"):
        read_questions(path, QuestionsSpec())


def test_questions_empty_question_names_the_row(tmp_path):
    path = tmp_path / "qs.csv"
    path.write_text("id,question\nq1,Why?\nq2,  \n")
    with pytest.raises(CorpusError, match=r"row 2 \(id 'q2'\)"):
        read_questions(path, QuestionsSpec(fields=[]))


def test_questions_jsonl_read_and_broken_line(tmp_path):
    good = tmp_path / "qs.jsonl"
    good.write_text('{"fid": "fb_1", "question": "Q?", "company": "3M", "n": 3, "ok": true, "x": null}\n\n'
                    '{"fid": "fb_2", "question": "Q2?", "company": "AMD", "tags": ["a"]}\n')
    df = read_questions(good, QuestionsSpec(format="jsonl", id="fid", fields=["company"]))
    assert df.columns == ["qid", "question", "company", "n", "ok", "x", "tags"]
    assert df.row(0) == ("fb_1", "Q?", "3M", "3", "true", "", "")
    assert df.row(1) == ("fb_2", "Q2?", "AMD", "", "", "", '["a"]')
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"fid": "fb_1", "question": "Q?"}\n{"fid": "fb_2", "question": \n')
    with pytest.raises(CorpusError) as err:
        read_questions(bad, QuestionsSpec(format="jsonl", id="fid", fields=[]))
    assert str(bad) in str(err.value) and "line 2" in str(err.value)


def test_prompt_with_an_undeclared_field():
    prompts = {"context_first": {"system": "s", "user": "{context} {question} in {sector}"}}
    with pytest.raises(ConfigError, match=r"task\.answer\.prompts\.context_first\.user uses unknown "
                                          r"placeholder\(s\) \{sector\}"):
        build_task(small_task(prompts=prompts))
    ok = small_task(prompts=prompts)
    ok["questions"]["fields"] = ["sector"]
    assert build_task(ok).prompt_fields == ("context", "question", "qid", "sector")


def test_abstention_never_needs_a_fallback():
    with pytest.raises(ConfigError, match=r"task\.answer\.abstention=never needs task\.answer\.fallback"):
        build_task(small_task(fallback="  "))


def test_blank_without_refs_needs_a_refs_field():
    with pytest.raises(ConfigError, match=r"task\.answer\.refs"):
        build_task(small_task(fields={"answer": "text"}, refs=None, blank_without_refs=True))


def test_unknown_task_key_is_named():
    with pytest.raises(ConfigError, match="sumbission"):
        build_task({**small_task(), "sumbission": {}})


def test_unknown_registry_name():
    with pytest.raises(ConfigError) as err:
        registry.lookup("metric", "rouge", "task.score.metrics[1].fn")
    msg = str(err.value)
    assert "task.score.metrics[1].fn='rouge' is unknown" in msg
    assert ("doc_jaccard, exact_match, kind_value, llm_judge, na_f1, numeric_match, page_pools, page_prf, "
            "token_f1") in msg
    assert registry.names("group") == ["amounts", "name", "text", "wattbot"]
    assert registry.names("writer") == ["columns", "json", "wattbot"]
    with pytest.raises(ConfigError, match=r"task.vote.group='nowhere_module:fn': cannot import"):
        registry.lookup("group", "nowhere_module:fn", "task.vote.group")


def test_unknown_metric_fails_when_scoring(tmp_path):
    sol, sub = tmp_path / "sol.csv", tmp_path / "sub.csv"
    sol.write_text("id,answer\nq1,a\n")
    sub.write_text("id,answer\nq1,a\n")
    data = small_task()
    data["score"].update(metrics=[{"name": "r", "fn": "rouge"}], correct=None)
    with pytest.raises(ConfigError, match=r"task\.score\.metrics\[0\]\.fn='rouge' is unknown"):
        score_submission(build_task(data), sol, sub)


def test_metric_by_import_path(tmp_path, monkeypatch):
    (tmp_path / "my_competition_metrics.py").write_text(textwrap.dedent("""
        def first_letter(rows, params, env):
            n = params.get("n", 1)
            return [None if not r["truth"] else float((r["pred"] or "")[:n].lower() == r["truth"][:n].lower())
                    for r in rows]
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    sol, sub = tmp_path / "sol.csv", tmp_path / "sub.csv"
    sol.write_text("id,answer\nq1,Paris\nq2,Rome\nq3,\n")
    sub.write_text("id,answer\nq1,paris!\nq2,Milan\nq3,x\n")
    data = small_task()
    data["score"] = {"scorer": "components", "classes": "generic", "metrics": [
        {"name": "letter", "fn": "my_competition_metrics:first_letter", "params": {"n": 2}}]}
    result = score_submission(build_task(data), sol, sub)
    assert result.components == {"letter": 0.5}
    assert result.details["coverage"] == {"letter": 2}
    assert result.table["letter"].to_list() == [1.0, 0.0, None]


# -- scoring --------------------------------------------------------------------------------

SHORT_SOLUTIONS = [
    ("s1", "Kestrel", "Kestrel"),
    ("s2", '["in cooling towers or adiabatic coolers","cooling towers"]', "the cooling towers"),
    ("s3", "rear-door heat exchangers", "rear door heat exchangers"),
    ("s4", "energy per output token", "energy per token"),
    ("s5", "Forecast-Greedy", "Oracle"),
    ("s6", "memory bandwidth", None),            # missing from the submission
]


def write_short_answer_files(tmp_path: Path) -> tuple[Path, Path]:
    sol = tmp_path / "answers.csv"
    pl.DataFrame({"id": [r[0] for r in SHORT_SOLUTIONS], "answer": [r[1] for r in SHORT_SOLUTIONS]}).write_csv(sol)
    sub = tmp_path / "submission.csv"
    rows = [(q, p) for q, _, p in SHORT_SOLUTIONS if p is not None]
    pl.DataFrame({"id": [q for q, _ in rows], "answer": [p for _, p in rows]}).write_csv(sub)
    return sol, sub


def reference_scores() -> tuple[list[float], list[float]]:
    em, f1 = [], []
    for _, truth, pred in SHORT_SOLUTIONS:
        truths = json.loads(truth) if truth.startswith("[") else [truth]
        if pred is None:
            em.append(0.0)
            f1.append(0.0)
            continue
        em.append(float(ref_metric_max_over_ground_truths(ref_exact_match_score, pred, truths)))
        f1.append(float(ref_metric_max_over_ground_truths(ref_f1_score, pred, truths)))
    return em, f1


def test_short_answer_scoring_equals_squad(tmp_path):
    sol, sub = write_short_answer_files(tmp_path)
    result = score_submission(load_task("short_answer"), sol, sub)
    em, f1 = reference_scores()
    assert em == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]     # "rear door" keeps the hyphen's word apart
    assert result.table["em"].to_list() == em
    assert result.table["f1"].to_list() == pytest.approx(f1)
    assert result.components["em"] == pytest.approx(sum(em) / 6)
    assert result.components["f1"] == pytest.approx(sum(f1) / 6)
    assert result.score == pytest.approx(sum(f1) / 6)   # em weight 0, f1 weight 1
    assert result.details["coverage"] == {"em": 6, "f1": 6}
    assert result.details["weights"] == {"em": 0.0, "f1": 1.0}
    assert result.details["correct_by"] == "em"
    assert result.table["qid"].to_list() == ["s1", "s2", "s3", "s4", "s5", "s6"]
    assert result.table["correct"].to_list() == [True, True, False, False, False, False]
    assert result.table["missing"].to_list() == [False] * 5 + [True]
    assert (result.n, result.n_missing, result.n_extra) == (6, 1, 0)
    assert any("s6" in w and "missing" in w for w in result.warnings)
    assert [(m["name"], m["weight"], m["over"]) for m in result.metric] == [("em", 0.0, "em_covered"), ("f1", 1.0, "f1_covered")]
    summary = result.summary()
    assert summary["components"] == result.components and summary["coverage"] == {"em": 6, "f1": 6}
    assert set(result.table.columns) >= {"error_class", "em_covered", "f1_covered", "truth", "pred"}
    assert result.errors["counts"]["missing"] == 1
    # subset: only the submitted questions
    sub_only = score_submission(load_task("short_answer"), sol, sub, subset=True)
    assert sub_only.n == 5 and sub_only.components["em"] == pytest.approx(2 / 5)


def test_short_answer_blank_cell_scores_zero(tmp_path):
    sol, sub = tmp_path / "sol.csv", tmp_path / "sub.csv"
    sol.write_text("id,answer\nq1,is_blank\nq2,Paris\nq3,Rome\n")
    sub.write_text("id,answer\nq1,is_blank\nq2,Paris\nq4,Rome\n")
    result = score_submission(load_task("short_answer"), sol, sub)
    assert result.table["pred_blank"].to_list() == [True, False, True]
    assert result.table["em"].to_list() == [0.0, 1.0, 0.0]
    assert (result.n_missing, result.n_extra) == (1, 1)
    assert any("q4" in w and "not in" in w for w in result.warnings)


FINANCE = [  # (id, gold, submitted)
    ("fb1", "$1577.00", "$1,577 million"),
    ("fb2", "2.8%", "0.028"),
    ("fb3", "(1.2)", "1.2"),
    ("fb4", "Yes", "Yes, it did."),
    ("fb5", "The company's margin improved.", ""),      # blank: wrong without asking the judge
    ("fb6", "$0.52", ""),
]


def write_finance_files(tmp_path: Path, rows=FINANCE) -> tuple[Path, Path]:
    sol = tmp_path / "questions.jsonl"
    sol.write_text("".join(json.dumps({"financebench_id": i, "question": f"Question {i}?", "answer": g,
                                       "doc_name": "X_2020_10K"}) + "\n" for i, g, _ in rows))
    sub = tmp_path / "submission.csv"
    pl.DataFrame({"financebench_id": [r[0] for r in rows], "question": [f"Question {r[0]}?" for r in rows],
                  "answer": [r[2] for r in rows], "doc_name": ["X_2020_10K"] * len(rows),
                  "explanation": ["e"] * len(rows)}).write_csv(sub)
    return sol, sub


def test_financebench_numeric_and_judge(tmp_path):
    sol, sub = write_finance_files(tmp_path)
    fake = FakeBackend()
    result = score_submission(load_task("financebench"), sol, sub, backend=lambda: fake)
    # the judge asks about the four non-blank answers only, in one batched call
    assert len(fake.calls) == 1 and len(fake.calls[0]) == 4
    assert "Question fb1?" in json.dumps([m["content"] for m in fake.calls[0][0].messages])
    assert result.table["judge"].to_list() == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]
    assert result.table["numeric"].to_list() == [1.0, 1.0, 0.0, None, None, 0.0]
    assert result.details["coverage"] == {"judge": 6, "numeric": 4}
    assert result.components == {"judge": pytest.approx(4 / 6), "numeric": pytest.approx(2 / 4)}
    assert result.score == pytest.approx(4 / 6)       # numeric has weight 0
    assert result.details["judge_calls"] == 1 and result.details["judge_invalid"] == 0
    assert result.table["pred_blank"].to_list() == [False] * 4 + [True, True]
    assert result.table["correct"].to_list() == [True] * 4 + [False, False]


def test_financebench_all_blank_never_loads_the_model(tmp_path):
    rows = [(i, g, "") for i, g, _ in FINANCE]
    sol, sub = write_finance_files(tmp_path, rows)

    def no_model():
        raise AssertionError("the judge's model must not load when every answer is blank")

    result = score_submission(load_task("financebench"), sol, sub, backend=no_model)
    assert result.score == 0.0 and result.components["judge"] == 0.0
    assert result.details["coverage"]["numeric"] == 4


def test_financebench_solutions_lack_the_answer_key(tmp_path):
    sol = tmp_path / "questions.jsonl"
    sol.write_text('{"financebench_id": "fb1", "gold": "1"}\n')
    sub = tmp_path / "sub.csv"
    sub.write_text("financebench_id,answer\nfb1,1\n")
    with pytest.raises(Exception, match=r"'answer' \(task\.solutions\.answer\)"):
        score_submission(load_task("financebench"), sol, sub, backend=lambda: FakeBackend())


@pytest.mark.parametrize("variant", ["wattbot", "wattbot-recall"])
def test_wattbot_through_the_task_equals_score_files(tmp_path, variant):
    # the files of tests/test_scripts_score.py's ``small`` fixture
    sol = write_wattbot_csv(tmp_path / "sol.csv", [
        {"id": "q1", "answer_value": "1000", "ref_id": "['d1']"},
        {"id": "q2", "answer_value": "is_blank", "ref_id": "is_blank"},
        {"id": "q3", "answer_value": "[1,2]", "ref_id": "['d2']"},
    ])
    sub = write_wattbot_csv(tmp_path / "sub.csv", [
        {"id": "q1", "answer_value": "1,000", "ref_id": "['d1']"},
        {"id": "q2", "answer_value": "is_blank", "ref_id": "is_blank"},
        {"id": "q3", "answer_value": "[2,1]", "ref_id": "['d2','d3']"},
    ])
    ours = score_submission(load_task("wattbot"), sol, sub, variant=variant)
    ref = score_files(sol, sub, variant)
    assert ours.score == ref.score
    assert ours.components == {"value": ref.value, "ref": ref.ref, "na": ref.na, "unit": ref.unit}
    if variant == "wattbot":
        assert ours.score == pytest.approx(0.75 * 2 / 3 + 0.15 * 2.5 / 3 + 0.10)
    assert ours.scorer == "wattbot" and ours.details["variant"] == variant
    assert [(m["name"], m["weight"]) for m in ours.metric] == [("value", 0.75), ("ref", 0.15), ("na", 0.10)]
    assert [m["column"] for m in ours.metric] == ["value_ok", "ref_score", "na_ok"]
    assert ours.metric[2]["over"] == ("truth_blank" if variant == "wattbot-recall" else None)
    assert ours.table.height == 3 and "error_class" in ours.table.columns


def test_read_rows_by_extension(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"id": 1, "v": 2.50}\n')
    (tmp_path / "a.csv").write_text("id,v\n001,2.50\n")
    assert read_rows(tmp_path / "a.jsonl", None, "solutions").row(0) == ("1", "2.5")
    assert read_rows(tmp_path / "a.csv", None, "solutions").row(0) == ("001", "2.50")
