"""infer stage: retry rounds, context trimming, ref filtering, parsing, the stage wrapper."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import polars as pl
import pytest
from omegaconf import OmegaConf

from kohaku.core.config import ConfigError, build
from kohaku.llm import ChatRequest
from kohaku.llm.fake import FakeBackend
from kohaku.runner.pipeline import option_values
from kohaku.retrieval.retrieve import CONTEXTS_SCHEMA
from kohaku.runner.stage import StageContext
from kohaku.stages import infer as infer_mod
from kohaku.answer import answering
from kohaku.answer.answering import InferConfig, parse_answer, run_infer
from kohaku.tasks import load_task
from kohaku.tasks.spec import AnswerSpec

CONF = Path(__file__).resolve().parents[1] / "conf"


WATTBOT = load_task("wattbot")
FIELDS = WATTBOT.questions.fields


def answer_spec(**over) -> AnswerSpec:
    """WattBot's answer section with some keys changed."""
    from dataclasses import asdict
    return build(AnswerSpec, {**asdict(WATTBOT.answer), **over}, "task.answer")


def infer_cfg(**over) -> InferConfig:
    values = option_values("infer", "default")
    values.update(over)
    return build(InferConfig, values, "infer")


def questions(*qids: str) -> pl.DataFrame:
    return pl.DataFrame({"qid": list(qids), "question": [f"What is the value for {q}?" for q in qids],
                         "answer_unit": ["kWh"] * len(qids)})


def ctx_row(qid: str, attempt: int, blocks: list[tuple[str, str]]) -> dict:
    rendered = [f"[ref_id={d}] {t}" for d, t in blocks]
    return {"qid": qid, "attempt": attempt, "k": 4 * (attempt + 1),
            "context": "\n---\n".join(rendered),
            "doc_ids": list(dict.fromkeys(d for d, _ in blocks)),
            "node_ids": [f"{d}#s{i + 1}" for i, (d, _) in enumerate(blocks)],
            "n_tokens": 10 * len(blocks), "budget": 2000, "n_blocks": len(blocks),
            "blocks": rendered, "block_doc_ids": [d for d, _ in blocks], "separator": "\n---\n"}


def contexts(rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=CONTEXTS_SCHEMA)


def user_text(r: ChatRequest) -> str:
    return r.messages[-1]["content"]


def answer_if_marked(req: ChatRequest, seed: int) -> str:
    """Answers (citing the first snippet) only when the context holds the word ANSWER."""
    text = user_text(req)
    if "ANSWER" not in text:
        return json.dumps({"explanation": "not in context", "answer": "", "answer_value": "is_blank",
                           "ref_id": []})
    doc = text.split("[ref_id=")[1].split("]")[0]
    return json.dumps({"explanation": "found", "answer": "42 kWh", "answer_value": 42,
                       "ref_id": [doc]})


def three_question_contexts() -> pl.DataFrame:
    rows = []
    for a in range(3):
        rows.append(ctx_row("q1", a, [("d1", "ANSWER is 42"), ("d2", "noise")]))
        rows.append(ctx_row("q2", a, [("d3", "ANSWER here" if a >= 1 else "nothing"), ("d4", f"more {a}")]))
        rows.append(ctx_row("q3", a, [("d5", f"never {a}")]))
    return contexts(rows)


def test_retry_rounds_send_only_blank_questions_with_next_attempt_contexts():
    fake = FakeBackend(answer_if_marked)
    gens, summary = run_infer(questions("q1", "q2", "q3"), three_question_contexts(), fake,
                              infer_cfg(n=2, temperature=0.5, max_retries=2), WATTBOT.answer, FIELDS)
    assert len(fake.calls) == 3                                   # one backend call per round
    assert [len(c) for c in fake.calls] == [3, 2, 1]
    round1 = [user_text(r) for r in fake.calls[1]]
    assert "What is the value for q2?" in round1[0] and "more 1" in round1[0]   # attempt-1 context
    assert "What is the value for q3?" in round1[1] and "never 1" in round1[1]
    assert "never 2" in user_text(fake.calls[2][0])
    assert all(r.n == 2 for c in fake.calls for r in c)
    per_q = gens.group_by("qid").agg(pl.col("attempt").max()).sort("qid")
    assert per_q["attempt"].to_list() == [0, 1, 2]
    q2_final = gens.filter((pl.col("qid") == "q2") & (pl.col("attempt") == 1))
    assert q2_final["answer_value"].to_list() == ["42", "42"]
    assert q2_final["ref_id"].to_list() == [["d3"], ["d3"]]
    assert not q2_final["is_blank"].any()
    assert gens.filter(pl.col("qid") == "q3")["is_blank"].all()
    assert gens.height == (3 + 2 + 1) * 2
    assert summary["retried"] == 3 and summary["model_calls"] == 3 and summary["prompts"] == 6
    assert summary["blank_questions"] == 1 and summary["invalid"] == 0
    assert gens["k"].to_list()[:2] == [4, 4]


def test_no_retry_when_max_retries_is_zero():
    fake = FakeBackend(answer_if_marked)
    gens, summary = run_infer(questions("q1", "q2", "q3"), three_question_contexts(), fake,
                              infer_cfg(max_retries=0), WATTBOT.answer, FIELDS)
    assert len(fake.calls) == 1 and gens["attempt"].unique().to_list() == [0]
    assert summary["retried"] == 0


def test_max_retries_must_be_below_the_attempts_present():
    ctx = contexts([ctx_row("q1", 0, [("d1", "x")]), ctx_row("q1", 1, [("d1", "y")])])
    with pytest.raises(ConfigError) as err:
        run_infer(questions("q1"), ctx, FakeBackend(), infer_cfg(max_retries=2), WATTBOT.answer, FIELDS)
    assert "infer.max_retries" in str(err.value) and "retrieve.attempts" in str(err.value)


def test_long_context_is_trimmed_from_the_lowest_ranked_snippet():
    blocks = [(f"d{i}", " ".join([f"word{i}"] * 60)) for i in range(6)]
    ctx = contexts([ctx_row("q1", 0, blocks)])
    fake = FakeBackend(answer_if_marked, max_context=1100)
    cfg = infer_cfg(max_retries=0, max_tokens=400)
    gens, summary = run_infer(questions("q1"), ctx, fake, cfg, WATTBOT.answer, FIELDS)
    sent = fake.calls[0][0]
    text = user_text(sent)
    assert "word0" in text and "word1" in text and "word5" not in text
    kept = [d for d, _ in blocks if f"[ref_id={d}]" in text]
    assert kept == [d for d, _ in blocks][: len(kept)] and 0 < len(kept) < 6
    prompt = sum(fake.count_tokens(m["content"]) for m in sent.messages)
    assert prompt + cfg.max_tokens <= fake.max_context
    # the schema only allows the documents still in the trimmed context
    assert sent.json_schema["properties"]["ref_id"]["items"]["enum"] == kept
    assert summary["trimmed"] == 1 and summary["trimmed_snippets"] == 6 - len(kept)
    assert gens["trimmed_snippets"].to_list() == [6 - len(kept)]


def test_a_context_that_cannot_fit_is_emptied_not_a_crash():
    ctx = contexts([ctx_row("q1", 0, [("d1", "x " * 500)])])
    fake = FakeBackend(answer_if_marked, max_context=300)
    gens, summary = run_infer(questions("q1"), ctx, fake, infer_cfg(max_retries=0, max_tokens=280), WATTBOT.answer, FIELDS)
    assert summary["trimmed"] == 1 and gens["is_blank"].to_list() == [True]


def test_refs_outside_the_context_are_dropped_and_counted():
    def cites(req, seed):
        return ('Sure! {"explanation": "e", "answer": "a", "answer_value": "7", '
                '"ref_id": ["d1", "bogus", "ref_id=D2", "is_blank", "d1"]} trailing')

    ctx = contexts([ctx_row("q1", 0, [("d1", "a"), ("d2", "b")])])
    gens, summary = run_infer(questions("q1"), ctx, FakeBackend(cites), infer_cfg(max_retries=0, ref_enum=False), WATTBOT.answer, FIELDS)
    row = gens.row(0, named=True)
    assert row["ref_id"] == ["d1", "d2"] and row["dropped_refs"] == 1 and row["valid"]
    assert summary["dropped_refs"] == 1
    assert "enum" not in answering.answer_schema(["d1"], infer_cfg(ref_enum=False), WATTBOT.answer)["properties"]["ref_id"]["items"]


def test_parse_answer_rules():
    allowed = ["wu2021b", "patterson2021"]
    bad = parse_answer("no json here {oops", allowed, answer_spec(blank_values=['is_blank']))
    assert bad["valid"] is False and bad["is_blank"] is True
    ok = parse_answer('{"answer_value": [80, 90], "ref_id": "wu2021b", "answer": true}', allowed, answer_spec(blank_values=['is_blank']))
    assert ok["answer_value"] == "[80,90]" and ok["ref_id"] == ["wu2021b"] and ok["answer"] == "1"
    assert ok["is_blank"] is False
    blank = parse_answer('{"answer_value": "IS_BLANK", "ref_id": ["wu2021b"]}', allowed, answer_spec(blank_values=['is_blank']))
    assert blank["is_blank"] is True
    norefs = parse_answer('{"answer_value": "5", "ref_id": []}', allowed, answer_spec(blank_values=['is_blank']))
    assert norefs["is_blank"] is True and norefs["valid"] is True
    quoted = parse_answer("""{"answer_value": "5", "ref_id": "['wu2021b', 'patterson2021']"}""", allowed, answer_spec(blank_values=[]))
    assert quoted["ref_id"] == ["wu2021b", "patterson2021"]
    assert parse_answer('x {"a": 1', allowed, answer_spec(blank_values=[]))["valid"] is False
    assert parse_answer('{"a": {"b": 1}} {"answer_value": "3"}', allowed, answer_spec(blank_values=[]))["valid"] is True


def test_prompt_order_and_templates():
    ctx = contexts([ctx_row("q1", 0, [("d1", "CTX-TEXT")])])
    for order in ("context_first", "question_first"):
        fake = FakeBackend(answer_if_marked)
        run_infer(questions("q1"), ctx, fake, infer_cfg(max_retries=0, prompt_order=order), WATTBOT.answer, FIELDS)
        text = user_text(fake.calls[0][0])
        before = text.index("CTX-TEXT") < text.index("What is the value for q1?")
        assert before == (order == "context_first")
        assert "kWh" in text
    with pytest.raises(ConfigError, match=r"task.answer.prompts.context_first.user.*\{doc\}"):
        from dataclasses import asdict

        from kohaku.tasks.spec import build_task
        build_task({**asdict(WATTBOT), "answer": {**asdict(WATTBOT.answer), "prompts": {
            "context_first": {"system": "s", "user": "{doc} {question}"}}}})
    with pytest.raises(ConfigError, match="infer.prompt_order"):
        infer_cfg(prompt_order="sideways")


def test_schema_has_the_answer_keys_in_order():
    schema = answering.answer_schema(["d1", "d2", "d1"], infer_cfg(max_tokens=2048), WATTBOT.answer)
    assert list(schema["properties"]) == ["explanation", "answer", "answer_value", "ref_id"]
    assert schema["properties"]["ref_id"]["items"]["enum"] == ["d1", "d2"]
    assert schema["properties"]["explanation"]["maxLength"] == 600
    assert schema["additionalProperties"] is False


class _Services:
    def __init__(self, backend):
        self.backend = backend
        self.asked: list[dict] = []

    def get(self, kind, cfg, factory):
        assert kind == "llm"
        self.asked.append(cfg)
        return self.backend


def _stage_ctx(tmp_path: Path, fake, cache_dir: Path) -> StageContext:
    q_dir, r_dir = tmp_path / "q", tmp_path / "r"
    q_dir.mkdir(exist_ok=True)
    r_dir.mkdir(exist_ok=True)
    questions("q1", "q2", "q3").write_parquet(q_dir / "questions.parquet")
    three_question_contexts().write_parquet(r_dir / "contexts.parquet")
    cfg = OmegaConf.create({
        "seed": 0, "cache": {"dir": str(cache_dir)},
        # two retry rounds (the default has none): the test counts one model call per round
        "infer": {**option_values("infer", "default"), "max_retries": 2},
        "llm": {"name": "fake", "backend": "fake", "model": "fake", "revision": "0"},
        "task": option_values("task", "wattbot"),
    })
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    return StageContext(stage=infer_mod.STAGE, cfg=cfg, input_dirs={"questions": q_dir, "retrieve": r_dir},
                        out_dir=out, services=_Services(fake), log=logging.getLogger("test"))


def test_stage_uses_services_and_the_generation_cache(tmp_path):
    # cache.dir is not part of the key; the task's answer and prompt fields are
    assert infer_mod.STAGE.config_keys == ("infer", "llm", "task.answer", "task.questions.fields")
    assert infer_mod.STAGE.inputs == ("questions", "retrieve")
    fake = FakeBackend(answer_if_marked)
    ctx = _stage_ctx(tmp_path, fake, tmp_path / "cache")
    out = infer_mod.compute(ctx)["generations"]
    assert ctx.services.asked[0]["backend"] == "fake"
    assert ctx.summary["model_calls"] == 3 and ctx.summary["cache_hits"] == 0
    assert list(answering.GENERATIONS_SCHEMA) == out.columns
    assert list((tmp_path / "cache" / "llm").glob("*/part-*.parquet"))
    # a second run (say, after a vote change forced infer) calls no model
    fake2 = FakeBackend(answer_if_marked)
    ctx2 = _stage_ctx(tmp_path, fake2, tmp_path / "cache")
    out2 = infer_mod.compute(ctx2)["generations"]
    assert fake2.calls == [] and ctx2.summary["cache_hits"] == ctx.summary["samples"]
    assert out2["cached"].all()
    assert out2.drop("cached", "seconds").equals(out.drop("cached", "seconds"))


def test_field_limits_shrink_to_fit_max_tokens():
    big = answering.field_limits(infer_cfg(max_tokens=2048))
    assert big == {"explanation": 600, "answer": 300, "answer_value": 120}
    small = answering.field_limits(infer_cfg(max_tokens=160))
    room = (160 - 40 - 8 * 4) * 1.5
    assert sum(small.values()) <= room and small["explanation"] > small["answer"] > small["answer_value"] >= 12
    schema = answering.answer_schema(["d1"], infer_cfg(max_tokens=160), WATTBOT.answer)
    assert schema["properties"]["answer_value"]["maxLength"] == small["answer_value"]


def test_trim_blocks_drops_then_cuts():
    from kohaku.llm.prompts import trim_blocks
    from kohaku.core.tokens import count_tokens

    blocks = ["[ref_id=a] " + "alpha " * 50, "[ref_id=b] " + "beta " * 50, "[ref_id=c] gamma"]
    ctx = "\n---\n".join(blocks)
    assert trim_blocks(blocks, "\n---\n", 10_000, count_tokens) == (ctx, 3, 0, False)
    text, kept, dropped, cut = trim_blocks(blocks, "\n---\n", 80, count_tokens)
    assert dropped == 2 and kept == 1 and cut and text.startswith("[ref_id=a] alpha") and count_tokens(text) <= 80
    text, kept, dropped, cut = trim_blocks(blocks, "\n---\n", count_tokens(ctx.rsplit("\n---\n", 1)[0]), count_tokens)
    assert dropped == 1 and kept == 2 and not cut and "beta" in text and "gamma" not in text
    assert trim_blocks(blocks, "\n---\n", 0, count_tokens) == ("", 0, 3, True)
