"""plan stage: none / rules (acronyms mined from a hand-made nodes table) / llm (fake backend)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from kohaku.core.config import ConfigError, build
from kohaku.llm import ChatRequest
from kohaku.llm.fake import FakeBackend
from kohaku.llm.cache import GenerationCache
from kohaku.runner.pipeline import option_values
from kohaku.retrieval import planning
from kohaku.stages import plan as plan_mod
from kohaku.retrieval.planning import (PlannerConfig, dedup_queries, find_acronym_definitions,
                                mine_acronyms, plan_queries)

CONF = Path(__file__).resolve().parents[1] / "conf"

NODES = pl.DataFrame({
    "node_id": ["a#s1.p1", "a#s1.p2", "b#s1.p1", "b#s1.p1.t1"],
    "kind": ["paragraph", "paragraph", "paragraph", "sentence"],
    "text": [
        "Data centers report their power usage effectiveness (PUE) every year. The PUE was 1.1.",
        "Training used graphics processing units (GPUs) for 30 days; see also the (Table 2) and (e.g.) notes.",
        "We compare against the Power Usage Effectiveness (PUE) of Google and the "
        "tensor processing unit (TPU) v4 in a data center (DC).",
        "sentence level repeats tensor processing unit (TPU) but is ignored",
    ],
})


def cfg(name: str, **over) -> PlannerConfig:
    values = option_values("planner", name, ["llm=fake"])
    values.update(over)
    return build(PlannerConfig, values, "planner")


QUESTIONS = pl.DataFrame({
    "qid": ["q1", "q2", "q3"],
    "question": ["What was the PUE of the data center in 2021?",
                 "How many graphics processing units were used to train the model?",
                 "Which  model is the best?"],
    "answer_unit": ["ratio", "GPUs", "is_blank"],
})


def test_acronym_definitions_and_mining():
    assert find_acronym_definitions(NODES["text"][0]) == [("PUE", "power usage effectiveness")]
    assert find_acronym_definitions(NODES["text"][1]) == [("GPU", "graphics processing units")]
    acr = mine_acronyms(NODES.filter(pl.col("kind") == "paragraph")["text"].to_list())
    assert acr == {"PUE": "power usage effectiveness", "GPU": "graphics processing units",
                   "TPU": "tensor processing unit", "DC": "data center"}


def test_none_planner_keeps_only_the_question():
    table, summary = plan_queries(QUESTIONS, cfg("none"))
    assert table["query"].to_list() == ["What was the PUE of the data center in 2021?",
                                        "How many graphics processing units were used to train the model?",
                                        "Which model is the best?"]     # whitespace collapsed
    assert table["query_idx"].to_list() == [0, 0, 0] and set(table["source"]) == {"question"}


def test_rules_planner_swaps_acronyms_and_adds_keywords():
    table, summary = plan_queries(QUESTIONS, cfg("rules"), nodes=NODES)
    q1 = table.filter(pl.col("qid") == "q1")
    assert q1["source"].to_list() == ["question", "acronym", "keywords"]
    assert q1["query"][1] == "What was the power usage effectiveness of the DC in 2021?"
    assert q1["query"][2] == "PUE data center 2021"
    q2 = table.filter(pl.col("qid") == "q2")
    assert q2["query"][1] == "How many GPU were used to train the model?"
    q3 = table.filter(pl.col("qid") == "q3")
    assert q3["source"].to_list() == ["question", "keywords"]     # no acronym in it
    assert q3["query"][1] == "model best"
    assert summary["acronyms"] == 4
    assert table.schema == pl.Schema(planning.QUERIES_SCHEMA)


def test_rules_planner_respects_n_queries():
    table, _ = plan_queries(QUESTIONS, cfg("rules", n_queries=2), nodes=NODES)
    assert table.group_by("qid").len()["len"].max() == 2


def test_dedup_is_case_insensitive_and_capped():
    assert dedup_queries(["Ab c", "ab  C", "", "...", "c d", "cd e", "ee"], 2) == ["Ab c", "cd e"]


def test_llm_planner_one_batched_call_dedup_and_cache(tmp_path):
    def responder(req: ChatRequest, seed: int) -> str:
        q = req.messages[-1]["content"].split("Question: ")[1].split("\n")[0]
        return json.dumps({"queries": [q.upper(), "...", "energy use", "Energy  Use", "x1"]})

    fake = FakeBackend(responder)
    c = cfg("llm", n_queries=3)
    cache = GenerationCache(tmp_path, fake.identity)
    table, summary = plan_queries(QUESTIONS, c, backend=fake, cache=cache)
    assert len(fake.calls) == 1 and len(fake.calls[0]) == 3
    req = fake.calls[0][0]
    assert req.json_schema["properties"]["queries"]["maxItems"] == 2
    assert "at most 2 short search queries" in req.messages[-1]["content"]
    q1 = table.filter(pl.col("qid") == "q1")
    # the upper-cased question is a case-insensitive duplicate of query 0
    assert q1["query"].to_list() == ["What was the PUE of the data center in 2021?", "energy use", "x1"]
    assert q1["source"].to_list() == ["question", "llm", "llm"]
    assert summary["model_calls"] == 1 and summary["prompts"] == 3
    fake2 = FakeBackend(responder)
    again, s2 = plan_queries(QUESTIONS, c, backend=fake2, cache=GenerationCache(tmp_path, fake2.identity))
    assert fake2.calls == [] and s2["cache_hits"] == 3 and again.equals(table)


def test_llm_planner_config_checks():
    with pytest.raises(ConfigError, match="planner.kind"):
        cfg("none", kind="magic")
    with pytest.raises(ConfigError, match="planner.user"):
        cfg("llm", user="{question} {oops}")
    assert cfg("llm").llm == option_values("llm", "fake") and cfg("llm").llm["name"] == "fake"   # ${llm} is resolved and hashed
    assert plan_mod.STAGE.config_keys == ("planner",)
    assert plan_mod.STAGE.inputs == ("questions", "tree")
