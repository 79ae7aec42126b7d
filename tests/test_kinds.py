"""Answer kinds (kohaku.tasks.kinds): hand-made votes per kind, the not-answerable token as an
answer, per-kind schemas as the constrained decoders (xgrammar: the hf backend and vLLM's
structured outputs) accept them, and the spec's checks."""

from __future__ import annotations

import json

import polars as pl
import pytest

from kohaku.answer.answering import InferConfig, answer_schema, parse_answer, run_infer
from kohaku.core.config import ConfigError, build
from kohaku.llm.fake import FakeBackend
from kohaku.core.schema_check import SchemaError, problems
from kohaku.tasks import kinds, load_task
from kohaku.tasks.spec import KindSpec, KindsSpec, build_task
from kohaku.answer.voting import VoteConfig, vote, vote_generations

TASK = load_task("typed_answers")
KINDS = TASK.answer.kinds
SPECS = KINDS.specs


def _vote(kind: str, values: list[str], kinds_spec: KindsSpec = KINDS, tolerance: float = 0.001,
          **cfg) -> dict:
    """One question of ``kind`` voted over ``values`` (one sample each, in order)."""
    cands = pl.DataFrame({
        "qid": ["q"] * len(values), "source_idx": list(range(len(values))), "answer_value": values,
        "ref_id": [["d"]] * len(values), "answer": [""] * len(values),
        "explanation": [""] * len(values), "is_blank": [False] * len(values)})
    g = kinds.grouping(kinds_spec.specs[kind], kinds_spec, tolerance)
    return vote(cands, VoteConfig(**cfg), by_qid={"q": g}).row(0, named=True)


# -- hand-made votes per kind -----------------------------------------------------------------

def test_number_1577_with_separator_agrees_with_1577_0():
    out = _vote("number", ["1,577", "1577.0", "1580"])
    assert out["answer_value"] == "1577" and out["agreement"] == pytest.approx(2 / 3)
    # within the task's tolerance (vote.tolerance): 1580 joins at 1 %, not at 0.1 %
    assert _vote("number", ["1580", "1,577", "1577.0"], tolerance=0.01)["agreement"] == 1.0
    assert _vote("number", ["1580", "1,577", "1577.0"])["answer_value"] == "1577"


def test_boolean_words_as_the_task_maps_them():
    out = _vote("boolean", ["TRUE", "true", "Yes", "false"])
    assert out["answer_value"] == "True" and out["agreement"] == 0.75     # written as write_true
    strict = build(KindsSpec, {**_kinds_dict(), "true_values": ["true"], "false_values": ["false"]},
                   "task.answer.kinds")
    out = _vote("boolean", ["Yes", "TRUE", "true", "no"], strict)
    assert out["answer_value"] == "True" and out["agreement"] == 0.5      # Yes is not mapped there
    ones = build(KindsSpec, {**_kinds_dict(), "write_true": "1", "write_false": "0"}, "task.answer.kinds")
    assert _vote("boolean", ["false", "No", "true"], ones)["answer_value"] == "0"


def test_names_are_sets_case_and_space_insensitive():
    out = _vote("names", ["['A', 'B']", '["b", "a"]', '["A ", "c"]'])
    assert out["agreement"] == pytest.approx(2 / 3)
    assert json.loads(out["answer_value"]) == ["A", "B"]                  # list_format json, as written
    py = build(KindsSpec, {**_kinds_dict(), "list_format": "python"}, "task.answer.kinds")
    assert _vote("names", ['["b", "a"]', "['A', 'B']"], py)["answer_value"] == "['b','a']"
    semi = build(KindsSpec, {**_kinds_dict(), "list_format": "semicolon"}, "task.answer.kinds")
    assert _vote("names", ['["Site  A", "Site B"]', "site a;site b"], semi)["answer_value"] == "Site  A;Site B"


def test_name_is_case_and_space_insensitive():
    out = _vote("name", ["forecast-greedy", " Forecast-Greedy ", "Oracle"])
    assert out["answer_value"] == "forecast-greedy" and out["agreement"] == pytest.approx(2 / 3)


def test_dates_agree_by_the_day():
    out = _vote("date", ["March 1, 2023", "2023-03-01", "1 March 2023", "2023-03-02"])
    assert out["answer_value"] == "2023-03-01" and out["agreement"] == 0.75
    assert kinds.parse_date("Mar. 1st 2023").isoformat() == "2023-03-01"
    assert kinds.parse_date("01/03/2023") is None and kinds.parse_date("2023-02-30") is None


def test_text_by_similarity_or_the_first_non_blank():
    sentences = ["between 0.2 and 1.9 litres", "It was between 0.2 and 1.9 litres per kWh", "about 3"]
    out = _vote("text", sentences)                                       # similarity 0.5
    assert out["answer_value"] == sentences[0] and out["agreement"] == pytest.approx(2 / 3)
    first = build(KindsSpec, {**_kinds_dict(), "types": {"text": {"type": "text"}}}, "task.answer.kinds")
    out = _vote("text", ["", "about 3", "about 3"], first)
    assert out["answer_value"] == "about 3" and out["agreement"] == pytest.approx(1 / 3)


def _kinds_dict() -> dict:
    from dataclasses import asdict

    return asdict(KINDS)


# -- the not-answerable token is an answer ----------------------------------------------------

def _generations(raws: list[str], spec=TASK.answer, kind: str = "number") -> pl.DataFrame:
    schema = answer_schema(["okafor2023"], InferConfig(), spec, spec.kinds.specs[kind])
    rows = []
    for i, raw in enumerate(raws):
        rows.append({"qid": "q", "attempt": 0, "sample_idx": i,
                     **parse_answer(raw, ["okafor2023"], spec, schema)})
    return pl.DataFrame(rows).drop("off_schema")


def test_three_na_samples_beat_two_numbers():
    raws = ['{"value": "N/A", "ref_id": []}', '{"value": 1.11, "ref_id": ["okafor2023"]}',
            '{"value": "N/A", "ref_id": []}', '{"value": 1.11, "ref_id": ["okafor2023"]}',
            '{"value": "N/A", "ref_id": []}']
    gens = _generations(raws)
    assert gens["valid"].all() and not gens["is_blank"].any()      # N/A is an answer, not a blank
    questions = pl.DataFrame({"qid": ["q"], "question": ["?"], "kind": ["number"]})
    docs = pl.DataFrame({"doc_id": ["okafor2023"], "url": [""]})
    answers, summary = vote_generations(gens, questions, docs, VoteConfig(), fallback="N/A",
                                        value_field="value",
                                        by_qid=kinds.groupings(questions, KINDS, 0.001))
    row = answers.row(0, named=True)
    assert row["answer_value"] == "N/A" and row["agreement"] == pytest.approx(3 / 5)
    assert not row["is_blank"] and summary["n_fallback"] == 0
    typed = kinds.with_kinds(answers, questions, KINDS)
    assert json.loads(typed["value_json"][0]) == "N/A"
    # two numbers against one N/A: the number wins and is written without ".0"
    answers, _ = vote_generations(_generations(raws[1:4]), questions, docs, VoteConfig(),
                                  by_qid=kinds.groupings(questions, KINDS, 0.001))
    assert answers["answer_value"][0] == "1.11"


def test_na_is_never_retried_but_a_blank_is():
    questions = pl.DataFrame({"qid": ["q1"], "question": ["When?"], "kind": ["date"]})
    contexts = pl.DataFrame({
        "qid": ["q1", "q1"], "attempt": [0, 1], "k": [4, 8], "blocks": [["[ref_id=d] a"]] * 2,
        "block_doc_ids": [["d"]] * 2, "separator": ["\n"] * 2})
    cfg = InferConfig(n=2, max_retries=1)
    for value, rounds in (('"N/A"', 1), ('""', 2)):
        backend = FakeBackend(lambda req, seed, v=value: f'{{"value": {v}, "ref_id": ["d"]}}')
        gens, summary = run_infer(questions, contexts, backend, cfg, TASK.answer, (), None)
        assert summary["rounds"] == rounds and len(backend.calls) == rounds, value
        assert gens["is_blank"].to_list() == [value == '""'] * 2 * rounds
    assert summary["off_schema"] == 4       # "" is no date: off the schema, blank, retried


def test_off_schema_samples_are_invalid():
    raws = ['{"value": "1577", "ref_id": []}',       # a string where the number kind wants a number
            '{"value": 1577, "ref_id": []}']
    gens = _generations(raws)
    assert gens["valid"].to_list() == [False, True] and gens["is_blank"].to_list() == [True, False]


def test_the_token_is_no_blank_in_scoring_or_parsing_only_with_kinds():
    assert "n/a" in TASK.answer.blank_values and "n/a" not in TASK.answer.abstain_values
    wattbot = load_task("wattbot").answer
    assert wattbot.abstain_values == wattbot.blank_values


# -- schemas: what the constrained decoders accept --------------------------------------------

CASES = {
    "number": ([1577, 1.11, "N/A"], ["1577", True, "n/a", [1]]),
    "boolean": ([True, False, "N/A"], ["true", 1, "Yes"]),
    "name": (["Site A", "N/A"], [3, ["Site A"], "x" * 81]),
    "names": ([["A", "B"], [], "N/A"], ["A", [1], ["x" * 81]]),
    "date": (["2023-03-01", "N/A"], ["March 1, 2023", "2023-3-1", 20230301]),
    "text": (["between 0.2 and 1.9", "N/A"], [1.5, "x" * 161]),
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_kind_schema_accepts_and_rejects_as_xgrammar_does(kind):
    xgr = pytest.importorskip("xgrammar")
    from xgrammar.testing import _is_grammar_accept_string

    schema = answer_schema(["d1", "d2"], InferConfig(), TASK.answer, SPECS[kind])
    assert list(schema["properties"]) == ["value", "ref_id"]
    grammar = xgr.Grammar.from_json_schema(json.dumps(schema), any_whitespace=False)
    good, bad = CASES[kind]
    for value, want in [(v, True) for v in good] + [(v, False) for v in bad]:
        obj = {"value": value, "ref_id": ["d1"]}
        text = json.dumps(obj, separators=(", ", ": "))
        ours = not problems(obj, schema)
        assert ours == want, (kind, value)
        assert _is_grammar_accept_string(grammar, text) == ours, (kind, text)


def test_the_fake_answers_every_kind_inside_its_schema():
    from kohaku.llm.base import ChatRequest
    from kohaku.llm.fake import default_responder

    context = "[ref_id=d1] The PUE fell to 1.11 on 2023-03-01.\n---\nQuestion: what?"
    empty = "[ref_id=d1] No figures here.\n---\nQuestion: what?"
    for kind in SPECS:
        schema = answer_schema(["d1"], InferConfig(), TASK.answer, SPECS[kind])
        for text in (context, empty):
            req = ChatRequest(messages=[{"role": "user", "content": text}], json_schema=schema)
            obj = json.loads(default_responder(req, 0))
            assert not problems(obj, schema), (kind, obj)
    req = ChatRequest(messages=[{"role": "user", "content": empty}],
                      json_schema=answer_schema(["d1"], InferConfig(), TASK.answer, SPECS["number"]))
    assert json.loads(default_responder(req, 0))["value"] == "N/A"


def test_hf_close_reserve_reads_any_of():
    from kohaku.llm.hf.sampler import minimal_instance

    schema = answer_schema(["d1"], InferConfig(), TASK.answer, SPECS["number"])
    assert minimal_instance(schema) == {"value": 0, "ref_id": []}


def test_schema_check_refuses_keywords_it_does_not_check():
    with pytest.raises(SchemaError, match=r"#/properties/a/\$ref"):
        problems({"a": 1}, {"type": "object", "properties": {"a": {"$ref": "#/x"}}})
    assert problems(True, {"type": "integer"}) == ["$: true is not of type integer"]
    assert problems({"a": [1, 1]}, {"properties": {"a": {"uniqueItems": True}}}) == ["$.a: items repeat"]


# -- the spec's checks ------------------------------------------------------------------------

def _task_with(**kinds_over) -> dict:
    import yaml

    from kohaku.tasks import task_file

    data = yaml.safe_load(task_file("typed_answers").read_text())
    data.pop("defaults")
    data["answer"]["kinds"].update(kinds_over)
    return data


def test_spec_errors_name_the_key():
    with pytest.raises(ConfigError, match=r"task.answer.kinds.types.when: type='when'"):
        build_task(_task_with(types={"when": {"type": "when"}}))
    with pytest.raises(ConfigError, match=r"task.answer.kinds.default='x'"):
        build_task(_task_with(default="x"))
    with pytest.raises(ConfigError, match="must be non-empty and distinct"):
        build_task(_task_with(true_values=["yes"], false_values=["yes"]))
    data = _task_with()
    data["answer"]["kinds"] = {}                  # no kinds: {kind_instruction} is unknown
    with pytest.raises(ConfigError, match=r"kind_instruction"):
        build_task(data)
    with pytest.raises(ConfigError, match=r"similarity"):
        build(KindSpec, {"type": "text", "similarity": 0}, "k")


def test_a_question_of_an_unknown_kind_is_an_error_naming_its_row():
    questions = pl.DataFrame({"qid": ["a", "b"], "question": ["?", "?"], "kind": ["number", "colour"]})
    with pytest.raises(ConfigError, match=r"row 2 \(id 'b'\), column 'kind': kind 'colour'"):
        kinds.kind_of(questions, KINDS)
    with pytest.raises(ConfigError, match=r"no column 'kind'"):
        kinds.kind_of(questions.drop("kind"), KINDS)
    default = build(KindsSpec, {**_kinds_dict(), "default": "text"}, "task.answer.kinds")
    blank = questions.with_columns(pl.Series("kind", ["number", ""]))
    assert kinds.kind_of(blank, default) == {"a": "number", "b": "text"}
