"""openai backend against a local OpenAI-compatible server on 127.0.0.1 (429 once, then OK)."""

from __future__ import annotations

import json

import pytest
from helpers_http import LocalServer, chat_completion

from kohaku.llm import BackendError, ChatRequest, load_backend
from kohaku.llm.openai_backend import parse_retry_after


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
