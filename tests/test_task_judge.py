"""kohaku.tasks.score.judge with the fake backend and a scripted backend that checks its requests."""

from __future__ import annotations

import json

import pytest

from kohaku.core.config import ConfigError
from kohaku.llm.base import ChatRequest, Completion, Counters
from kohaku.llm.cache import open_generation_cache
from kohaku.llm.fake import FakeBackend
from kohaku.tasks.score.judge import (
    DEFAULT_USER,
    VERDICT_SCHEMA,
    JudgeConfig,
    JudgeItem,
    Verdict,
    judge,
    judge_request,
    parse_verdict,
)


class ScriptedJudge:
    """A backend that grades by exact lookup: a reply per answer text, and records requests."""

    def __init__(self, replies: dict[str, str], identity: str = "scripted:judge@0"):
        self.replies = replies
        self._identity = identity
        self.calls: list[list[ChatRequest]] = []

    @property
    def identity(self) -> str:
        return self._identity

    @property
    def max_context(self) -> int:
        return 4096

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def generate(self, requests: list[ChatRequest]) -> list[Completion]:
        self.calls.append(list(requests))
        out = []
        for r in requests:
            user = r.messages[-1]["content"]
            answer = user.split("Answer to grade: ", 1)[1].split("\n", 1)[0]
            text = self.replies.get(answer, '{"correct": false}')
            out.append(Completion(texts=[text] * r.n, prompt_tokens=len(user.split()),
                                  completion_tokens=[3] * r.n, finish_reasons=["stop"] * r.n))
        return out

    def close(self) -> None:
        pass


ITEMS = [
    JudgeItem("q1", "What was revenue in 2022?", "$1577.00 million", "1.577 billion dollars"),
    JudgeItem("q2", "Did the margin grow?", "Yes, by 2.8%", "No"),
    JudgeItem("q3", "Who audits the company?", "KPMG", "is_blank"),
    JudgeItem("q4", "Who is the CEO?", "Jane Doe", "Jane Doe, since 2019"),
    JudgeItem("q5", "What is the ratio?", "0.83", None),
    JudgeItem("q6", "What is the ratio?", "0.83", "garbled"),
]
REPLIES = {
    "1.577 billion dollars": '{"correct": true}',
    "No": '{"correct": false}',
    "Jane Doe, since 2019": 'Sure! {"correct": true} done',
    "garbled": '{"correct": "maybe"}',
}


def test_verdicts_and_requests():
    backend = ScriptedJudge(REPLIES)
    cfg = JudgeConfig()
    verdicts = judge(backend, ITEMS, cfg)
    assert [v.qid for v in verdicts] == ["q1", "q2", "q3", "q4", "q5", "q6"]
    assert [v.correct for v in verdicts] == [True, False, False, True, False, None]
    assert [v.blank for v in verdicts] == [False, False, True, False, True, False]
    assert verdicts[2] == Verdict("q3", False, "", False, blank=True)
    assert verdicts[3].raw == 'Sure! {"correct": true} done'
    assert not any(v.cached for v in verdicts)
    # one batched call, blank answers never sent
    assert len(backend.calls) == 1
    reqs = backend.calls[0]
    assert len(reqs) == 4
    for req, item in zip(reqs, [ITEMS[0], ITEMS[1], ITEMS[3], ITEMS[5]]):
        assert [m["role"] for m in req.messages] == ["system", "user"]
        user = req.messages[1]["content"]
        assert item.question in user and item.truth in user and item.answer in user
        assert req.temperature == 0.0 and req.max_tokens == 64 and req.n == 1 and req.seed == 0
        assert req.json_schema == VERDICT_SCHEMA
        assert '{"correct": true}' in req.messages[0]["content"]   # the escaped braces rendered
    assert VERDICT_SCHEMA == {"type": "object", "properties": {"correct": {"type": "boolean"}},
                              "required": ["correct"], "additionalProperties": False}


def test_config_reaches_the_request():
    cfg = JudgeConfig(system="", user="Q {question} / gold {truth} / got {answer}",
                      max_tokens=8, temperature=0.7, seed=5)
    req = judge_request(JudgeItem("q", "why?", "because", "{braces} stay"), cfg)
    assert req.messages == [{"role": "user", "content": "Q why? / gold because / got {braces} stay"}]
    assert (req.max_tokens, req.temperature, req.seed) == (8, 0.7, 5)


def test_generation_cache(tmp_path):
    backend = ScriptedJudge(REPLIES)
    cfg = JudgeConfig()
    cache = open_generation_cache(tmp_path, backend.identity)
    first = judge(backend, ITEMS, cfg, cache)
    assert len(backend.calls) == 1 and not any(v.cached for v in first)
    # a fresh cache object on the same folder: everything is read back, the model is not called
    cache2 = open_generation_cache(tmp_path, backend.identity)
    counters = Counters()
    second = judge(backend, ITEMS, cfg, cache2, counters)
    assert len(backend.calls) == 1
    assert [v.correct for v in second] == [v.correct for v in first]
    assert [v.raw for v in second] == [v.raw for v in first]
    assert [v.cached for v in second] == [True, True, False, True, False, True]  # blanks: no model
    assert counters.cache_hits == 4 and counters.model_calls == 0
    # another prompt is another key: asked again
    judge(backend, ITEMS[:1], JudgeConfig(user=DEFAULT_USER + " Be strict."), cache2)
    assert len(backend.calls) == 2 and len(backend.calls[1]) == 1


def test_identical_items_generated_once():
    backend = ScriptedJudge(REPLIES)
    items = [JudgeItem(f"q{i}", "Q?", "A", "No") for i in range(3)]
    counters = Counters()
    verdicts = judge(backend, items, JudgeConfig(), counters=counters)
    assert [v.correct for v in verdicts] == [False] * 3
    assert counters.samples == 1 and counters.deduped == 2


def test_all_blank_calls_nothing():
    backend = ScriptedJudge(REPLIES)
    items = [JudgeItem("a", "Q?", "x", ""), JudgeItem("b", "Q?", "x", "  N/A "),
             JudgeItem("c", "Q?", "x", "Unable to answer with confidence based on the provided documents.")]
    verdicts = judge(backend, items, JudgeConfig())
    assert [(v.correct, v.blank) for v in verdicts] == [(False, True)] * 3
    assert backend.calls == []
    assert judge(backend, [], JudgeConfig()) == []


def test_fake_backend_with_a_responder(tmp_path):
    def responder(req: ChatRequest, seed: int) -> str:
        user = req.messages[-1]["content"]
        truth = user.split("Gold answer: ", 1)[1].split("\n", 1)[0]
        answer = user.split("Answer to grade: ", 1)[1].split("\n", 1)[0]
        return json.dumps({"correct": truth.lower() in answer.lower()})

    fake = FakeBackend(responder)
    cache = open_generation_cache(tmp_path, fake.identity)
    verdicts = judge(fake, ITEMS, JudgeConfig(), cache)
    assert [v.correct for v in verdicts] == [False, False, False, True, False, False]
    assert fake.n_requests == 4
    again = judge(fake, ITEMS, JudgeConfig(), cache)
    assert fake.n_requests == 4 and [v.correct for v in again] == [v.correct for v in verdicts]


def test_fake_default_responder_is_handled():
    """Whatever the default fake answers for the verdict schema, judge returns a verdict row
    per item and never raises."""
    fake = FakeBackend()
    verdicts = judge(fake, ITEMS, JudgeConfig())
    assert len(verdicts) == len(ITEMS)
    for v in verdicts:
        assert v.correct in (True, False, None)
        if not v.blank:
            assert parse_verdict(v.raw) == v.correct


def test_fake_default_responder_gives_a_verdict():
    verdicts = judge(FakeBackend(), ITEMS[:2], JudgeConfig())
    assert all(isinstance(v.correct, bool) for v in verdicts)


@pytest.mark.parametrize("raw,expected", [
    ('{"correct": true}', True),
    ('{"correct": false}', False),
    ('```json\n{"correct": false}\n```', False),
    ('{"reason": "same number", "correct": true}', True),
    ('{"correct": "true"}', None),
    ('{"correct": 1}', None),
    ('{"verdict": true}', None),
    ('{"correct": tr', None),
    ("", None),
    ("yes", None),
])
def test_parse_verdict(raw, expected):
    assert parse_verdict(raw) is expected


def test_validate():
    JudgeConfig().validate()
    JudgeConfig(system="", user="{truth} vs {answer}").validate()
    with pytest.raises(ConfigError, match=r"judge\.user.*\{gold\}"):
        JudgeConfig(user="{question} {gold} {answer}").validate()
    with pytest.raises(ConfigError, match=r"task\.judge\.system.*\{context\}"):
        JudgeConfig(system="{context}").validate("task.judge")
    with pytest.raises(ConfigError, match=r"judge\.user"):
        JudgeConfig(user="{question} {truth").validate()
    with pytest.raises(ConfigError, match=r"\{answer\}"):
        JudgeConfig(user="{question} {truth}").validate()
    with pytest.raises(ConfigError, match="max_tokens"):
        JudgeConfig(max_tokens=0).validate()
    with pytest.raises(ConfigError, match="temperature"):
        JudgeConfig(temperature=-1).validate()
    with pytest.raises(ConfigError):   # judge validates before calling anything
        judge(ScriptedJudge({}), ITEMS, JudgeConfig(user="{nope}"))


def test_default_prompts_render():
    assert "{question}" in DEFAULT_USER and "{truth}" in DEFAULT_USER and "{answer}" in DEFAULT_USER
    req = judge_request(ITEMS[0], JudgeConfig())
    assert "Gold answer: $1577.00 million" in req.messages[1]["content"]
    assert "{{" not in req.messages[0]["content"]
