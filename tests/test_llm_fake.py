"""The fake backend's default script and the backend registry."""

from __future__ import annotations

import json

from kohaku.llm import ChatRequest, identity_of, load_backend
from kohaku.llm.fake import FakeBackend
from kohaku.answer.answering import answer_schema
from kohaku.retrieval.planning import planner_schema, PlannerConfig


def test_default_script_answers_from_the_first_snippet():
    fake = load_backend({"name": "fake", "backend": "fake", "model": "fake", "revision": "0"})
    assert isinstance(fake, FakeBackend)
    assert fake.identity == identity_of({"name": "fake", "backend": "fake", "model": "fake", "revision": "0"})
    from kohaku.core.config import build
    from kohaku.answer.answering import InferConfig

    from kohaku.tasks import load_task

    cfg = build(InferConfig, {}, "infer")
    schema = answer_schema(["doc9"], cfg, load_task("wattbot").answer)
    ans = fake.generate([
        ChatRequest(messages=[{"role": "user", "content": "[ref_id=doc9] PUE was 1.12 in 2021\n---\n"
                               "[ref_id=doc3] other\nQuestion: PUE?"}], n=2, seed=4, json_schema=schema),
        ChatRequest(messages=[{"role": "user", "content": "no context\nQuestion: PUE?"}], json_schema=schema),
    ])
    first = [json.loads(t) for t in ans[0].texts]
    assert [f["answer_value"] for f in first] == ["1.12", "1.12"] and first[0]["ref_id"] == ["doc9"]
    assert first[0]["explanation"].endswith("(seed 4)") and first[1]["explanation"].endswith("(seed 5)")
    assert json.loads(ans[1].texts[0])["answer_value"] == "is_blank"
    plan = fake.generate([ChatRequest(messages=[{"role": "user", "content": "Question: What was the "
                                                  "carbon footprint of training BLOOM?"}],
                                      json_schema=planner_schema(PlannerConfig(n_queries=3)))])
    queries = json.loads(plan[0].texts[0])["queries"]
    assert queries[0] == "footprint training carbon BLOOM"
    assert len(fake.calls) == 2 and fake.n_requests == 3
