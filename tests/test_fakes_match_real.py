"""The test doubles checked against what they stand for, where the real thing is installed.

- tests/fake_vllm: every name the fake accepts (LLM keywords, EngineArgs, LLM.chat,
  SamplingParams, StructuredOutputsParams, output fields) exists in the real vllm, the defaults
  it keeps are the real ones, and it accepts and rejects the same SamplingParams and
  StructuredOutputsParams. Runs where vllm is importable, by this interpreter or by the one in
  ``$KOHAKU_VLLM_PYTHON`` (e.g. the real-engine venv of scripts/setup_vllm.sh); skipped otherwise.
- tests/helpers_http.chat_completion (the fake OpenAI-compatible server's answers) validates as
  the ``openai`` package's ``ChatCompletion``, and the request body kohaku sends uses only keys of
  its ``CompletionCreateParams``: where ``openai`` is importable (here or in the vllm interpreter).
- kohaku.llm.fake.FakeBackend has the Backend protocol's methods with the real backends'
  signatures (always runs).

Both sides of a vllm comparison run in a subprocess with the same probe, since the fake and the
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
import dataclasses, inspect, json, sys
if sys.argv[1] != "-":
    sys.path.insert(0, sys.argv[1])
import vllm
from vllm import LLM, SamplingParams
from vllm.outputs import CompletionOutput, RequestOutput
from vllm.sampling_params import StructuredOutputsParams


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


if sys.argv[1] == "-":
    from vllm.engine.arg_utils import EngineArgs
    engine_args = sorted(f.name for f in dataclasses.fields(EngineArgs))
else:
    engine_args = sorted(vllm.ENGINE_ARGS)
defaults = SamplingParams()
print(json.dumps({
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


def _python_with(module: str) -> str | None:
    """This interpreter when it imports ``module``, else $KOHAKU_VLLM_PYTHON when that one does."""
    candidates = [sys.executable, os.environ.get("KOHAKU_VLLM_PYTHON", "")]
    for python in candidates:
        if python and Path(python).exists() and _has_module(python, module):
            return python
    return None


def _probe(python: str, fake_dir: Path | None, tmp_path_factory) -> dict:
    script = tmp_path_factory.mktemp("probe") / "probe.py"
    script.write_text(PROBE, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": "", "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "")}
    out = subprocess.run([python, str(script), str(fake_dir) if fake_dir else "-"], capture_output=True,
                         text=True, timeout=300, env=env, cwd=script.parent)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def real_vllm(tmp_path_factory) -> dict:
    python = _python_with("vllm")
    if python is None:
        pytest.skip("vllm is not installed (set KOHAKU_VLLM_PYTHON to an interpreter that has it)")
    return _probe(python, None, tmp_path_factory)


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
