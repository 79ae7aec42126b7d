"""Model faults: invalid, empty or truncated output, references outside the context, over-long
contexts, backend exceptions (retried where that makes sense) and vLLM out of memory. Each is
counted in the infer summary (run.json), the questions it hits end blank, and every other
question gets exactly the answer of a clean run."""

from __future__ import annotations

import json
import logging
import re
import sys
from pathlib import Path

import polars as pl
import pytest

from conftest import REPO
from faultkit import generation_parts, question_of, run_inprocess, run_json, scripted, table
from helpers_http import LocalServer, chat_completion
from kohaku.llm.base import ChatRequest
from kohaku.llm.fake import FakeBackend, default_responder
from kohaku.runner.pipeline import StageError
from kohaku.core.tokens import count_tokens

# Questions whose answers the faulty scripts break (by a phrase of the question).
BROKEN = {"q001": "power usage effectiveness (PUE) did the university",
          "q007": "energy per output token did the newer G2"}
ROUNDS = 3  # infer.max_retries=2: a question that never answers is asked three times
RETRIES = f"infer.max_retries={ROUNDS - 1}"   # set here: the default has no retry rounds


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One cache for the module: the stages before infer are computed once."""
    return tmp_path_factory.mktemp("shared") / "cache"


@pytest.fixture(scope="module")
def baseline(tmp_path_factory, cache):
    return run_inprocess(tmp_path_factory.mktemp("baseline"), RETRIES, cache=cache)


def _is_answer(req: ChatRequest) -> bool:
    return "answer_value" in (req.json_schema or {}).get("properties", {})


def _broken(req: ChatRequest) -> bool:
    return _is_answer(req) and any(phrase in question_of(req) for phrase in BROKEN.values())


def _breaking(bad_output):
    def responder(req, seed):
        return bad_output(req, seed) if _broken(req) else default_responder(req, seed)
    return responder


def _submission(result) -> pl.DataFrame:
    return pl.read_csv(result.run_dir / "submission.csv", infer_schema=False)


def _same_except_broken(result, baseline) -> None:
    ok = ~pl.col("id").is_in(list(BROKEN))
    assert _submission(result).filter(ok).equals(_submission(baseline).filter(ok))
    broken = _submission(result).filter(~ok)
    assert broken["answer_value"].to_list() == ["is_blank"] * len(BROKEN)
    assert broken["ref_id"].to_list() == ["is_blank"] * len(BROKEN)


@pytest.mark.parametrize(
    "name, bad_output",
    [
        ("prose", lambda req, seed: "The answer is probably 1.11, see the first document."),
        ("empty", lambda req, seed: ""),
        ("truncated", lambda req, seed: default_responder(req, seed)[:30]),
        ("not-an-object", lambda req, seed: '["1.11", "okafor2023"]'),
    ],
)
def test_invalid_outputs_are_counted_and_leave_the_question_blank(tmp_path, baseline, cache, caplog,
                                                                   name, bad_output):
    with caplog.at_level(logging.WARNING, logger="kohaku.pipeline"):
        result = run_inprocess(tmp_path, RETRIES, backend=scripted(_breaking(bad_output), name), cache=cache)
    s = run_json(result.run_dir)["stages"]["infer"]["summary"]
    assert s["invalid"] == ROUNDS * len(BROKEN)
    assert s["blank_questions"] == len(BROKEN)
    assert s["retried"] == (ROUNDS - 1) * len(BROKEN)
    assert s["dropped_refs"] == 0
    gens = table(result, "infer", "generations")
    bad = gens.filter(pl.col("qid").is_in(list(BROKEN)))
    assert bad.height == ROUNDS * len(BROKEN) and not bad["valid"].any() and bad["is_blank"].all()
    assert gens.filter(~pl.col("qid").is_in(list(BROKEN)))["valid"].all()
    _same_except_broken(result, baseline)
    [line] = run_json(result.run_dir)["problems"]
    assert line.startswith(f"infer: {ROUNDS * len(BROKEN)} outputs that were not a JSON answer, ")
    assert line.endswith(f", {len(BROKEN)} questions blank after every retry")
    assert line in caplog.text


def test_refs_outside_the_context_are_dropped_and_counted(tmp_path, baseline, cache):
    def extra_refs(req, seed):
        answer = json.loads(default_responder(req, seed))
        answer["ref_id"] = answer["ref_id"] + ["nosuchdoc2020", "../../etc/passwd"]
        return json.dumps(answer)

    def only_foreign(req, seed):
        answer = json.loads(default_responder(req, seed))
        answer["ref_id"] = ["nosuchdoc2020"]
        return json.dumps(answer)

    # real ids plus foreign ones: the foreign ones are dropped, the answers stay the same
    result = run_inprocess(tmp_path / "a", RETRIES, backend=scripted(_breaking(extra_refs), "extra-refs"),
                           cache=cache)
    s = result.summary("infer")
    assert s["dropped_refs"] == 2 * len(BROKEN) and s["invalid"] == 0 and s["blank_questions"] == 0
    assert _submission(result).equals(_submission(baseline))
    gens = table(result, "infer", "generations").filter(pl.col("qid").is_in(list(BROKEN)))
    assert gens["dropped_refs"].to_list() == [2, 2]

    # only foreign ids: the answer has no support, so it is blank after every retry
    result = run_inprocess(tmp_path / "b", RETRIES, backend=scripted(_breaking(only_foreign), "foreign-refs"),
                           cache=cache)
    s = result.summary("infer")
    assert s["dropped_refs"] == ROUNDS * len(BROKEN) and s["blank_questions"] == len(BROKEN)
    _same_except_broken(result, baseline)
    assert "infer: 6 cited ids not in the context (dropped), 2 questions blank after every retry" in \
        run_json(result.run_dir)["problems"]


def test_over_long_contexts_are_trimmed_to_fit_the_model(tmp_path, cache):
    max_context, max_tokens = 1400, 256
    backend = scripted(None, "short-context", max_context=max_context)
    result = run_inprocess(tmp_path, f"infer.max_tokens={max_tokens}", backend=backend, cache=cache)
    s = result.summary("infer")
    assert s["trimmed"] > 0 and s["trimmed_snippets"] > 0
    sent = [r for call in backend.calls for r in call]
    assert len(sent) == s["prompts"]
    for req in sent:  # every prompt plus its completion budget fits the model
        assert sum(count_tokens(m["content"]) for m in req.messages) + max_tokens <= max_context
    gens = table(result, "infer", "generations")
    assert gens.filter(pl.col("trimmed_snippets") > 0).height == s["trimmed"]
    assert f"{s['trimmed']} contexts trimmed to fit the model" in run_json(result.run_dir)["problems"][0]
    assert _submission(result).height == 11


def test_backend_exception_fails_the_run_and_a_rerun_resumes_from_the_cached_samples(tmp_path,
                                                                                     baseline, cache):
    calls = {"n": 0}

    def flaky(req, seed):
        if _is_answer(req):
            calls["n"] += 1
            if calls["n"] == 5:
                raise RuntimeError("CUDA error: device-side assert triggered")
        return default_responder(req, seed)

    # the runner wraps whatever a stage raises in a StageError naming the stage
    with pytest.raises(StageError, match="^stage 'infer': .*CUDA error: device-side assert triggered"):
        run_inprocess(tmp_path, "infer.chunk_size=1", backend=scripted(flaky, "flaky"), cache=cache)
    record = run_json(tmp_path / "run")
    assert record["status"] == "failed"
    assert "CUDA error: device-side assert triggered" in record["error"]
    assert record["failed_stage"] == "infer"
    assert list(record["stages"]) == ["parse", "questions", "caption", "tree", "embed", "index", "plan",
                                      "retrieve"]
    assert len(generation_parts(cache, "fake:flaky@test")) == 4  # the four answers are kept

    result = run_inprocess(tmp_path, "infer.chunk_size=1", backend=scripted(flaky, "flaky"),
                           run="rerun", cache=cache)
    s = result.summary("infer")
    assert s["cache_hits"] == 4 and s["prompts"] == 7 and s["invalid"] == 0
    assert all(result.stages[n].cache_hit for n in ("parse", "embed", "index", "retrieve"))
    assert _submission(result).equals(_submission(baseline))


# ------------------------------------------------------------------ HTTP backend: retries


class _Server(LocalServer):
    """An OpenAI-compatible server on 127.0.0.1 answering like the fake backend; the first
    ``fail`` requests get ``status``, and so does every request after the first ``ok`` answers.
    ``posts`` counts the requests, ``answered`` the 200 answers."""

    def __init__(self, fail: int = 0, status: int = 503, ok: int | None = None):
        self.fail, self.status, self.ok = fail, status, ok
        self.posts = self.answered = 0
        super().__init__(self._respond, models=[{"id": "local-model", "owned_by": "vllm",
                                                 "max_model_len": 8192}])

    def _respond(self, path: str, headers: dict, body: dict) -> tuple[int, bytes, dict]:
        self.posts += 1
        if self.posts <= self.fail or (self.ok is not None and self.answered >= self.ok):
            return self.status, b'{"error": {"message": "overloaded"}}', {}
        self.answered += 1
        # without a schema in the body (llm.json_mode=object) it answers as it would with one
        schema = body.get("response_format", {}).get("json_schema", {}).get("schema") or \
            {"properties": {"answer_value": {"type": "string"}}}
        text = default_responder(ChatRequest(messages=body["messages"], json_schema=schema), body["seed"])
        return 200, chat_completion([text], model=body["model"]), {}


HTTP = ["llm=openai", "llm.model=local-model", "llm.backoff_base=0.01", "llm.max_concurrency=2"]


def test_http_backend_retries_overload_with_backoff_and_gives_the_same_answers(
        tmp_path, baseline, cache, monkeypatch, caplog):
    with _Server(fail=3) as srv, caplog.at_level(logging.INFO, logger="kohaku.llm.openai_backend"):
        monkeypatch.setenv("OPENAI_BASE_URL", srv.url)
        result = run_inprocess(tmp_path, *HTTP, "llm.max_retries=3", cache=cache)
    assert caplog.text.count(f"retrying local-model at {srv.url} in") == 3
    assert result.summary("infer")["invalid"] == 0
    assert _submission(result).equals(_submission(baseline))


def test_http_backend_that_keeps_failing_stops_with_the_model_and_the_setting(tmp_path, cache,
                                                                              monkeypatch):
    with _Server(fail=10_000, status=500) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.url)
        with pytest.raises(StageError) as err:
            run_inprocess(tmp_path, *HTTP, "llm.max_retries=1", cache=cache)
    msg = str(err.value)
    # the exact status text: "500" alone could match the random port
    assert re.fullmatch(r"stage 'infer': local-model at http://127\.0\.0\.1:\d+/v1: "
                        r'HTTP 500: \{"error": \{"message": "overloaded"\}\}', msg), msg
    assert run_json(tmp_path / "run")["status"] == "failed"

    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # no server at all
    with pytest.raises(StageError) as err:
        run_inprocess(tmp_path, *HTTP, "llm.max_retries=1", "llm.max_context=8192", run="run2",
                      cache=cache)
    assert "cannot reach http://127.0.0.1:9/v1 for local-model after 2 tries" in str(err.value)
    # llm=openai reads $OPENAI_BASE_URL into llm.base_url; the message names both
    assert str(err.value).endswith("is the server running? It is set by $OPENAI_BASE_URL (read "
                                   "into llm.base_url)")
    with pytest.raises(StageError) as err:  # the context length is asked first
        run_inprocess(tmp_path, *HTTP, run="run3", cache=cache)
    assert str(err.value) == (
        "stage 'infer': llm.max_context is null, so kohaku asks http://127.0.0.1:9/v1/models for "
        "the context length of local-model, and that failed ([Errno 111] Connection refused); is "
        "the server running? It is set by $OPENAI_BASE_URL (read into llm.base_url); or set "
        "llm.max_context")


def test_http_settings_that_change_the_request_resend_the_prompts_and_nothing_else_does(
        tmp_path, baseline, cache, monkeypatch):
    """llm.drop_schema_keys, llm.json_mode and llm.extra_body change what the server is sent, so
    every prompt goes out again; a vote setting or an HTTP setting that is not sent calls no one."""
    n = baseline.summary("infer")["prompts"]
    sent = []
    with _Server() as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.url)
        for i, extra in enumerate([[], [], ["vote.tiebreak=blank"], ["llm.max_concurrency=1"],
                                   ["llm.drop_schema_keys=[]"], ["llm.json_mode=object"],
                                   ["+llm.extra_body.top_k=5"], ["llm.drop_schema_keys=[]"]]):
            before = srv.posts
            result = run_inprocess(tmp_path, *HTTP, *extra, run=f"run{i}", cache=cache)
            sent.append(srv.posts - before)
            assert result.summary("infer")["invalid"] == 0
    assert n == 11
    assert sent == [n, 0, 0, 0, n, n, n, 0]


def test_http_round_that_fails_part_way_resumes_with_only_the_missing_samples(
        tmp_path, baseline, cache, monkeypatch):
    n = baseline.summary("infer")["prompts"]
    with _Server(ok=4, status=500) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.url)
        with pytest.raises(StageError) as err:
            run_inprocess(tmp_path, *HTTP, "llm.max_retries=0", cache=cache)
        k = srv.answered
        assert k == 4
        assert f"{k} of the {n} samples of this call had finished and are cached, so a re-run " \
            f"sends only the other {n - k}" in str(err.value)
        assert run_json(tmp_path / "run")["status"] == "failed"
        srv.ok = None                                   # the server is healthy again
        before = srv.posts
        result = run_inprocess(tmp_path, *HTTP, "llm.max_retries=0", run="rerun", cache=cache)
    s = result.summary("infer")
    assert srv.posts - before == n - k == s["prompts"] and s["cache_hits"] == k
    assert _submission(result).equals(_submission(baseline))


# ------------------------------------------------------------------ vLLM out of memory


@pytest.fixture
def fake_vllm(monkeypatch):
    """tests/fake_vllm first on sys.path (its LLM raises CUDA OOM above 0.99 of the GPU);
    tokens are counted without the model's tokenizer, which is not on this machine."""
    saved = {k: v for k, v in sys.modules.items() if k == "vllm" or k.startswith("vllm.")}
    for k in saved:
        del sys.modules[k]
    monkeypatch.syspath_prepend(str(REPO / "tests" / "fake_vllm"))
    import vllm

    from kohaku.llm import vllm_backend

    assert vllm.__version__.endswith("+fake")
    monkeypatch.setattr(vllm_backend.VLLMBackend, "count_tokens", lambda self, text: count_tokens(text))
    yield vllm
    for k in [k for k in sys.modules if k == "vllm" or k.startswith("vllm.")]:
        del sys.modules[k]
    sys.modules.update(saved)


def test_vllm_out_of_memory_names_the_settings_to_change(tmp_path, cache, fake_vllm):
    with pytest.raises(StageError) as err:
        run_inprocess(tmp_path, "llm=vllm_qwen2_5_7b", "llm.gpu_memory_utilization=1.0", cache=cache)
    msg = str(err.value)
    assert msg.startswith("stage 'infer': out of GPU memory for Qwen/Qwen2.5-7B-Instruct: ")
    for hint in ("lower llm.max_model_len (now 32768)", "lower llm.gpu_memory_utilization (now 1.0",
                 "llm.tensor_parallel_size (now 1)", "CUDA out of memory"):
        assert hint in msg
    record = run_json(tmp_path / "run")
    assert record["status"] == "failed" and "out of GPU memory" in record["error"]
    assert (Path(record["stages"]["retrieve"]["path"]) / "manifest.json").is_file()


# ------------------------------------------------------------------ counters still missing



class _LengthLimited(FakeBackend):
    """Marks outputs that do not end with '}' as cut at max_tokens, like a real backend."""

    def generate(self, requests):
        out = super().generate(requests)
        for comp in out:
            comp.finish_reasons = ["stop" if t.rstrip().endswith("}") else "length" for t in comp.texts]
        return out


def test_empty_and_truncated_outputs_are_counted_apart(tmp_path, cache):
    def bad(req, seed):
        return "" if "G2" in question_of(req) else default_responder(req, seed)[:30]

    backend = _LengthLimited(_breaking(bad), name="cut", identity="fake:cut@test")
    result = run_inprocess(tmp_path, RETRIES, backend=backend, cache=cache)
    s = result.summary("infer")
    assert (s["empty"], s["truncated"], s["invalid"]) == (ROUNDS, 2 * ROUNDS, 2 * ROUNDS)
    assert f"infer: {2 * ROUNDS} outputs that were not a JSON answer, {ROUNDS} empty outputs, " \
        f"{2 * ROUNDS} outputs cut at infer.max_tokens" in run_json(result.run_dir)["problems"][0]


def test_backend_retries_are_counted(tmp_path, cache, monkeypatch):
    with _Server(fail=3) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.url)
        result = run_inprocess(tmp_path, *HTTP, "llm.max_retries=3", "llm.name=retry-count", cache=cache)
    assert result.summary("infer")["backend_retries"] == 3


def test_a_backend_exception_names_the_model_and_what_to_do(tmp_path, cache):
    def broken(req, seed):
        if _is_answer(req):
            raise RuntimeError("CUDA error: device-side assert triggered")
        return default_responder(req, seed)

    with pytest.raises(StageError) as err:
        run_inprocess(tmp_path, backend=scripted(broken, "broken"), cache=cache)
    msg = str(err.value)
    assert msg.startswith("stage 'infer': fake:broken@test")
    assert "CUDA error: device-side assert triggered" in msg and "re-run" in msg
