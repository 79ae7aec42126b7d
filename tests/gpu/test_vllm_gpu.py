"""The real vLLM backend on a GPU (skipped unless CUDA and vllm are available).

Model: $KOHAKU_VLLM_TEST_MODEL (a local folder or a hub id already in the HF cache), default
Qwen/Qwen2.5-0.5B-Instruct. Checks one batched call with JSON schemas and the per-sample seed
contract the generation cache relies on.
"""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

pytestmark = pytest.mark.gpu


def _ready() -> bool:
    try:
        import torch

        return torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None
    except ImportError:
        return False


@pytest.fixture(scope="module")
def backend():
    if not _ready():
        pytest.skip("needs a CUDA GPU and the vllm package")
    from kohaku.llm import load_backend

    cfg = {"name": "vllm_test", "backend": "vllm",
           "model": os.environ.get("KOHAKU_VLLM_TEST_MODEL", "Qwen/Qwen2.5-0.5B-Instruct"),
           "max_model_len": 4096, "gpu_memory_utilization": 0.5, "enforce_eager": True,
           "use_tqdm": False}
    b = load_backend(cfg)
    yield b
    b.close()


SCHEMA = {
    "type": "object",
    "properties": {"answer_value": {"type": "string", "maxLength": 40},
                   "ref_id": {"type": "array", "items": {"type": "string", "enum": ["doc1"]}, "maxItems": 1}},
    "required": ["answer_value", "ref_id"],
    "additionalProperties": False,
}


def test_vllm_batched_json_and_seeds(backend):
    from kohaku.llm import ChatRequest

    msgs = [{"role": "user", "content": "[ref_id=doc1] The PUE is 1.1.\nWhat is the PUE? JSON."}]
    reqs = [ChatRequest(messages=msgs, n=3, temperature=0.9, seed=11, max_tokens=64, json_schema=SCHEMA),
            ChatRequest(messages=msgs, n=1, temperature=0.0, max_tokens=64, json_schema=SCHEMA)]
    out = backend.generate(reqs)
    assert [len(c.texts) for c in out] == [3, 1]
    for c in out:
        assert c.prompt_tokens > 5
        for t in c.texts:
            obj = json.loads(t)
            assert set(obj) == {"answer_value", "ref_id"}
    alone = backend.generate([ChatRequest(messages=msgs, n=1, temperature=0.9, seed=13, max_tokens=64,
                                          json_schema=SCHEMA)])
    assert alone[0].texts[0] == out[0].texts[2]          # child k of seed s == seed s+k
    assert backend.count_tokens("hello world") >= 2
