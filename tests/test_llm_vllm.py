"""vllm backend against the fake vllm package in tests/fake_vllm (signatures of vLLM 0.33)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from kohaku.llm import BackendError, ChatRequest, load_backend
from kohaku.llm.parallel import DataParallelBackend

FAKE = Path(__file__).parent / "fake_vllm"
CONF = Path(__file__).resolve().parents[1] / "conf" / "llm"


@pytest.fixture
def fake_vllm(monkeypatch):
    saved = {k: v for k, v in sys.modules.items() if k == "vllm" or k.startswith("vllm.")}
    for k in saved:
        del sys.modules[k]
    monkeypatch.syspath_prepend(str(FAKE))
    import vllm

    assert vllm.__version__.endswith("+fake")
    vllm.LLM.instances.clear()
    yield vllm
    for k in [k for k in sys.modules if k == "vllm" or k.startswith("vllm.")]:
        del sys.modules[k]
    sys.modules.update(saved)


def llm_cfg(name: str, **over) -> dict:
    cfg = OmegaConf.to_container(OmegaConf.load(CONF / f"{name}.yaml"), resolve=True)
    cfg.update(over)
    return cfg


SCHEMA = {"type": "object", "properties": {"answer_value": {"type": "string"},
                                           "ref_id": {"type": "array", "items": {"type": "string", "enum": ["d1"]}}},
          "required": ["answer_value", "ref_id"], "additionalProperties": False}


def test_one_chat_call_with_exact_signatures(fake_vllm):
    backend = load_backend(llm_cfg("vllm_qwen2_5_72b"))
    assert backend.max_context == 32768          # from llm.max_model_len, no engine started
    assert fake_vllm.LLM.instances == []
    reqs = [
        ChatRequest(messages=[{"role": "user", "content": "q one"}], n=3, temperature=0.7,
                    top_p=0.9, max_tokens=64, seed=10, json_schema=SCHEMA),
        ChatRequest(messages=[{"role": "system", "content": "s"}, {"role": "user", "content": "q two words"}],
                    n=1, temperature=0.0, max_tokens=32, seed=3),
    ]
    out = backend.generate(reqs)
    (llm,) = fake_vllm.LLM.instances
    assert llm.init_kwargs["tensor_parallel_size"] == 4
    assert llm.init_kwargs["max_model_len"] == 32768
    assert llm.init_kwargs["gpu_memory_utilization"] == 0.92
    assert llm.init_kwargs["trust_remote_code"] is False
    assert "pipeline_parallel_size" not in llm.init_kwargs   # left at vLLM's default when 1
    (call,) = llm.chat_calls                                  # ONE call for the whole list
    assert [c[-1]["content"] for c in call["conversations"]] == ["q one", "q two words"]
    p0, p1 = call["params"]
    assert (p0.n, p0.temperature, p0.top_p, p0.max_tokens, p0.seed) == (3, 0.7, 0.9, 64, 10)
    assert p0.structured_outputs.json == SCHEMA
    assert p1.structured_outputs is None and p1.n == 1 and p1.max_tokens == 32
    assert call["chat_template_kwargs"] is None
    # outputs in input order, child k of a seeded request has seed+k
    assert [json.loads(t)["answer_value"] for t in out[0].texts] == [
        "answer_value-10", "answer_value-11", "answer_value-12"]
    assert out[1].texts == ["plain answer seed=3"]
    assert out[0].prompt_tokens == len("q one".split()) + 4
    assert out[0].completion_tokens == [len(t.split()) for t in out[0].texts]
    assert out[0].finish_reasons == ["stop"] * 3
    backend.close()


def test_thinking_switch_and_engine_options(fake_vllm):
    backend = load_backend(llm_cfg("vllm_qwen3_30b_a3b", enable_prefix_caching=False,
                                   structured_outputs_backend="xgrammar"))
    backend.generate([ChatRequest(messages=[{"role": "user", "content": "hi"}])])
    (llm,) = fake_vllm.LLM.instances
    assert llm.chat_calls[0]["chat_template_kwargs"] == {"enable_thinking": False}
    assert llm.init_kwargs["enable_prefix_caching"] is False
    assert llm.init_kwargs["structured_outputs_config"] == {"backend": "xgrammar"}


def test_engine_errors_name_the_config_keys(fake_vllm):
    backend = load_backend(llm_cfg("vllm_qwen2_5_7b", gpu_memory_utilization=1.0))
    with pytest.raises(BackendError) as err:
        backend.generate([ChatRequest(messages=[{"role": "user", "content": "hi"}])])
    msg = str(err.value)
    assert "llm.max_model_len" in msg and "llm.gpu_memory_utilization" in msg
    assert "llm.tensor_parallel_size" in msg and "Qwen/Qwen2.5-7B-Instruct" in msg


def test_unknown_config_key_fails(fake_vllm):
    from kohaku.config import ConfigError

    with pytest.raises(ConfigError, match="llm.tensor_paralel_size"):
        load_backend(llm_cfg("vllm_qwen2_5_7b", tensor_paralel_size=2))


def test_data_parallel_config_gives_sharding_backend(fake_vllm):
    backend = load_backend(llm_cfg("vllm_qwen2_5_7b", data_parallel_size=2, tensor_parallel_size=2))
    assert isinstance(backend, DataParallelBackend)
    assert backend.devices == ["0,1", "2,3"]
    assert backend.identity == load_backend(llm_cfg("vllm_qwen2_5_7b")).identity
    assert fake_vllm.LLM.instances == []     # nothing started before the first generate
