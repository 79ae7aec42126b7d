"""openai backend against a local OpenAI-compatible server on 127.0.0.1 (429 once, then OK)."""

from __future__ import annotations

import json
import logging
import threading
import time

import pytest
from helpers_http import LocalServer, chat_completion

from kohaku.llm import BackendError, ChatRequest, Counters, load_backend
from kohaku.llm.cache import GenerationCache, generate_cached
from kohaku.llm.openai_backend import FALLBACK_CONTEXT, parse_retry_after


class _Server(LocalServer):
    """Fails the first requests with the statuses in ``fail_first``, then answers ``n`` choices
    whose answer_value is ``v<seed>``; every request body is kept in ``bodies``."""

    def __init__(self, fail_first: list[int]):
        self.fail_first = list(fail_first)
        self.bodies: list[dict] = []
        super().__init__(self._respond)

    def _respond(self, path: str, headers: dict, body: dict) -> tuple[int, bytes, dict]:
        self.bodies.append({"path": path, "auth": headers.get("Authorization"), **body})
        status = self.fail_first.pop(0) if self.fail_first else 200
        if status != 200:
            payload = json.dumps({"error": {"message": f"status {status}"}}).encode()
            return status, payload, {"Retry-After": "0.05"} if status == 429 else {}
        content = json.dumps({"answer_value": f"v{body['seed']}", "ref_id": []})
        return 200, chat_completion([content] * body.get("n", 1), model=body["model"]), {}


def _cfg(url_env: str, **over) -> dict:
    cfg = {"name": "openai", "backend": "openai", "model": "local-model", "base_url_env": url_env,
           "api_key_env": "KOHAKU_TEST_KEY", "max_concurrency": 2, "max_retries": 3,
           "backoff_base": 0.01}
    cfg.update(over)
    return cfg


SCHEMA = {"type": "object", "properties": {"answer_value": {"type": "string", "maxLength": 9},
                                           "ref_id": {"type": "array", "items": {"type": "string"}}},
          "required": ["answer_value", "ref_id"], "additionalProperties": False}


def test_retries_429_then_succeeds_with_schema_and_samples(monkeypatch):
    with _Server(fail_first=[429]) as srv:
        monkeypatch.setenv("KOHAKU_TEST_URL", srv.url)
        monkeypatch.setenv("KOHAKU_TEST_KEY", "sekret")
        backend = load_backend(_cfg("KOHAKU_TEST_URL"))
        out = backend.generate([
            ChatRequest(messages=[{"role": "user", "content": "a"}], n=2, seed=7, temperature=0.5,
                        max_tokens=20, json_schema=SCHEMA),
            ChatRequest(messages=[{"role": "user", "content": "b"}], seed=1),
        ])
    assert backend.retries == 1
    assert len(srv.bodies) == 4                      # 3 samples + the rejected try
    assert all(b["path"] == "/v1/chat/completions" and b["auth"] == "Bearer sekret" for b in srv.bodies)
    # per-sample seeds: sample k of a request with seed s is sent with seed s+k and n=1
    assert [json.loads(t)["answer_value"] for t in out[0].texts] == ["v7", "v8"]
    assert out[1].texts and json.loads(out[1].texts[0])["answer_value"] == "v1"
    sent = [b for b in srv.bodies if b["messages"][0]["content"] == "a"]
    rf = sent[0]["response_format"]
    assert rf["type"] == "json_schema" and rf["json_schema"]["strict"] is True
    assert "maxLength" not in json.dumps(rf)          # dropped for strict servers
    assert sent[0]["n"] == 1 and sent[0]["max_tokens"] == 20 and sent[0]["temperature"] == 0.5
    assert out[0].prompt_tokens == 11 and out[0].completion_tokens == [5, 5]
    assert "127.0.0.1" in backend.identity


def test_one_request_with_n_when_per_sample_seed_is_off(monkeypatch):
    with _Server(fail_first=[503]) as srv:
        backend = load_backend(_cfg("UNSET_VAR", base_url=srv.url, per_sample_seed=False))
        out = backend.generate([ChatRequest(messages=[{"role": "user", "content": "a"}], n=3, seed=4)])
    assert [b["n"] for b in srv.bodies] == [3, 3]      # 503 retried once
    assert len(out[0].texts) == 3


def test_client_errors_fail_at_once_with_the_model_name():
    with _Server(fail_first=[400]) as srv:
        backend = load_backend(_cfg("UNSET_VAR", base_url=srv.url))
        with pytest.raises(BackendError, match="local-model"):
            backend.generate([ChatRequest(messages=[{"role": "user", "content": "a"}])])
    assert len(srv.bodies) == 1


def test_connection_errors_are_retried_then_reported():
    backend = load_backend(_cfg("UNSET_VAR", base_url="http://127.0.0.1:9/v1", max_retries=1))
    with pytest.raises(BackendError, match="after 2 tries"):
        backend.generate([ChatRequest(messages=[{"role": "user", "content": "a"}])])
    assert backend.retries == 1


def test_retry_after_header_forms():
    assert parse_retry_after("2.5") == 2.5
    assert parse_retry_after(None) is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0   # in the past


# ------------------------------------------------------------------ the cache key is the request sent

VLLM_MODELS = [{"id": "local-model", "object": "model", "owned_by": "vllm", "max_model_len": 8192}]


class _Answering(LocalServer):
    """Answers every request like ``_Server`` does (``v<seed>``) until ``ok`` requests were
    answered; after that it fails with ``then`` (an HTTP status) or, with ``then=None``, keeps
    the connection open without an answer and stops listening ``stop_after`` s later."""

    def __init__(self, ok: int = 10 ** 9, then: int | None = 500, stop_after: float = 0.2,
                 models: list[dict] | None = VLLM_MODELS):
        self.ok, self.then, self.stop_after = ok, then, stop_after
        self.answered = 0
        self.bodies: list[dict] = []
        self._stopping = False
        super().__init__(self._respond, models=models)

    def _respond(self, path: str, headers: dict, body: dict):
        self.bodies.append(body)
        if self.answered >= self.ok:
            if self.then is not None:
                return self.then, b'{"error": {"message": "engine died"}}', {}
            if not self._stopping:
                self._stopping = True
                threading.Timer(self.stop_after, self.stop_listening).start()
            return None
        self.answered += 1
        content = json.dumps({"answer_value": f"v{body['seed']}", "ref_id": []})
        return 200, json.dumps({"choices": [{"index": 0, "finish_reason": "stop", "message": {
            "role": "assistant", "content": content}}], "usage": {
            "prompt_tokens": 7, "completion_tokens": 3}}).encode(), {}


def _reqs(count: int, n: int = 1, temperature: float = 0.0) -> list[ChatRequest]:
    return [ChatRequest(messages=[{"role": "user", "content": f"q{i}"}], n=n, seed=10,
                        temperature=temperature, max_tokens=32, json_schema=SCHEMA)
            for i in range(count)]


def _sent(srv: _Answering, before: int) -> int:
    return len(srv.bodies) - before


def test_settings_that_change_the_request_miss_the_cache_and_nothing_else_does(tmp_path):
    reqs = _reqs(3)
    with _Answering() as srv:
        def run(**over) -> int:
            backend = load_backend(_cfg("UNSET_VAR", base_url=srv.url, **over))
            cache = GenerationCache(tmp_path, backend.identity)
            before = len(srv.bodies)
            generate_cached(backend, reqs, cache, Counters())
            return _sent(srv, before)

        assert run() == 3
        assert run() == 0                                        # same request: all cached
        # not part of what is sent: no request
        assert run(max_concurrency=1, timeout=5.0, stall_seconds=9.0, max_retries=0) == 0
        assert run(drop_schema_keys=[]) == 3                     # maxLength now reaches the server
        assert run(drop_schema_keys=["minLength"]) == 0          # SCHEMA has none: same body
        assert run(json_mode="object") == 3
        assert run(json_mode="none") == 3
        assert run(extra_body={"top_k": 5}) == 3
        assert run(extra_body={"top_k": 5}) == 0
        assert run(json_mode="object", drop_schema_keys=[]) == 0  # the schema is not sent then
    first = srv.bodies[0]["response_format"]["json_schema"]["schema"]
    assert "maxLength" not in json.dumps(first)
    assert srv.bodies[3]["response_format"]["json_schema"]["schema"]["properties"]["answer_value"] \
        == {"type": "string", "maxLength": 9}
    assert srv.bodies[6]["response_format"] == {"type": "json_object"}
    assert "response_format" not in srv.bodies[9] and srv.bodies[12]["top_k"] == 5


# ------------------------------------------------------------------ per-sample resume


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_failed_round_keeps_the_finished_samples_and_the_rerun_sends_only_the_rest(
        tmp_path, concurrency):
    reqs = _reqs(6, n=3, temperature=0.8)                 # N = 18 samples, one request each
    cfg = _cfg("UNSET_VAR", max_concurrency=concurrency, max_retries=0)
    with _Answering(ok=7, then=500) as srv:
        backend = load_backend({**cfg, "base_url": srv.url})
        with pytest.raises(BackendError) as err:
            generate_cached(backend, reqs, GenerationCache(tmp_path, backend.identity), Counters())
    k = srv.answered
    assert k == 7
    assert f"{k} of the 18 samples of this call had finished and are cached, so a re-run sends " \
        f"only the other {18 - k}" in str(err.value)
    assert "HTTP 500" in str(err.value) and srv.url in str(err.value)
    assert len(srv.bodies) <= k + concurrency             # nothing sent after the failure but in-flight
    with _Answering() as again:                            # same port? no: same cache, new server url
        backend = load_backend({**cfg, "base_url": srv.url})
        backend.base_url = again.url                       # the identity (old url) is unchanged
        c = Counters()
        out = generate_cached(backend, reqs, GenerationCache(tmp_path, backend.identity), c)
    assert len(again.bodies) == 18 - k == c.samples and c.cache_hits == k
    assert [[json.loads(t.text)["answer_value"] for t in ss] for ss in out] == \
        [["v10", "v11", "v12"]] * 6
    assert sorted((b["messages"][0]["content"], b["seed"]) for b in srv.bodies[:k] + again.bodies) \
        == sorted((f"q{i}", 10 + j) for i in range(6) for j in range(3))


def test_a_server_that_stops_answering_is_noticed_and_named(tmp_path, caplog):
    reqs = _reqs(5)
    cfg = _cfg("UNSET_VAR", max_concurrency=2, stall_seconds=0.6, timeout=60.0)
    with _Answering(ok=2, then=None, stop_after=0.1) as srv, \
            caplog.at_level(logging.INFO, logger="kohaku.llm.openai_backend"):
        backend = load_backend({**cfg, "base_url": srv.url})
        t0 = time.perf_counter()
        with pytest.raises(BackendError) as err:
            generate_cached(backend, reqs, GenerationCache(tmp_path, backend.identity), Counters())
        took = time.perf_counter() - t0
    msg = str(err.value)
    assert took < 10, took                                   # not llm.timeout=60 s per request
    assert msg.startswith(f"the server at {srv.url} stopped answering: no request for local-model "
                          f"finished in ")
    assert "Restart the server or point llm.base_url at a running one" in msg
    assert "2 of the 5 samples of this call had finished and are cached" in msg
    assert f"sending 5 request(s) for 5 sample(s) to {srv.url}" in caplog.text
    assert len(GenerationCache(tmp_path, backend.identity)) == 2


def test_a_reachable_server_that_never_answers_is_bounded_by_the_timeout():
    with _Answering(ok=0, then=None, stop_after=3600) as srv:
        backend = load_backend(_cfg("UNSET_VAR", base_url=srv.url, timeout=0.5, max_retries=1,
                                    stall_seconds=0.3))
        t0 = time.perf_counter()
        with pytest.raises(BackendError) as err:
            backend.generate(_reqs(1))
        took = time.perf_counter() - t0
    assert 1.0 <= took < 8, took                            # two tries of 0.5 s plus a backoff
    assert str(err.value).startswith(f"{srv.url} gave local-model no answer within "
                                     f"llm.timeout=0.5 s (2 tries)")
    assert "restart it, raise llm.timeout" in str(err.value)
    assert len(srv.bodies) == 2


# ------------------------------------------------------------------ what the server says about itself


def test_context_length_is_read_from_the_server(caplog):
    with _Answering() as srv:
        backend = load_backend(_cfg("UNSET_VAR", base_url=srv.url, max_context=None))
        assert backend.max_context == int(8192 * 0.9)
        fixed = load_backend(_cfg("UNSET_VAR", base_url=srv.url, max_context=4000))
        assert fixed.max_context == 4000
        assert srv.gets == 1                                 # asked once, not by the fixed one
    with _Answering(models=[{"id": "local-model", "owned_by": "someone"}]) as srv, \
            caplog.at_level(logging.WARNING, logger="kohaku.llm.openai_backend"):
        backend = load_backend(_cfg("UNSET_VAR", base_url=srv.url, max_context=None))
        assert backend.max_context == FALLBACK_CONTEXT
    assert "reports no max_model_len for local-model; assuming 32768" in caplog.text
    backend = load_backend(_cfg("UNSET_VAR", base_url="http://127.0.0.1:9/v1", max_context=None))
    with pytest.raises(BackendError, match=r"ask.* http://127.0.0.1:9/v1/models .*set llm.max_context"):
        backend.max_context


def test_a_vllm_server_gets_a_hint_about_dropped_schema_keys_and_unknown_models(caplog):
    with _Answering() as srv, caplog.at_level(logging.WARNING, logger="kohaku.llm.openai_backend"):
        load_backend(_cfg("UNSET_VAR", base_url=srv.url)).generate(_reqs(1))
        assert "is a vLLM server, which enforces the schema keys that llm.drop_schema_keys=" \
            "['maxLength', 'minLength'] removes" in caplog.text
        caplog.clear()
        load_backend(_cfg("UNSET_VAR", base_url=srv.url, drop_schema_keys=[])).generate(_reqs(1))
        assert caplog.text == ""
        load_backend(_cfg("UNSET_VAR", base_url=srv.url, model="smol", drop_schema_keys=[])) \
            .generate(_reqs(1))
        assert "llm.model=smol is not among the models" in caplog.text and "(local-model)" in caplog.text


def test_a_404_names_the_served_models():
    with _Answering(ok=0, then=404) as srv:
        backend = load_backend(_cfg("UNSET_VAR", base_url=srv.url, model="smol"))
        with pytest.raises(BackendError) as err:
            backend.generate(_reqs(1))
    assert f"check llm.model and the server ({srv.url}, from llm.base_url); the server serves: " \
        "local-model" in str(err.value)


def test_messages_name_the_setting_that_chose_the_server(monkeypatch):
    url = "http://127.0.0.1:9/v1"
    monkeypatch.setenv("KOHAKU_TEST_URL", url)
    cases = [({"base_url": url}, "$KOHAKU_TEST_URL (read into llm.base_url)"),
             ({"base_url": "http://127.0.0.1:9/other"}, "llm.base_url"),
             ({}, "$KOHAKU_TEST_URL (llm.base_url_env)")]
    for over, setting in cases:
        backend = load_backend(_cfg("KOHAKU_TEST_URL", max_retries=0, **over))
        with pytest.raises(BackendError) as err:
            backend.generate(_reqs(1))
        assert str(err.value).endswith(f"is the server running? It is set by {setting}"), err.value
    monkeypatch.delenv("KOHAKU_TEST_URL")
    backend = load_backend(_cfg("KOHAKU_TEST_URL"))
    assert backend.url_setting() == ("llm.base_url or $KOHAKU_TEST_URL (neither is set, so the "
                                     "default https://api.openai.com/v1 was used)")
