"""Every conf/llm, conf/planner and conf/infer option builds its typed config (no unknown keys)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kohaku.core.config import build
from kohaku.runner.pipeline import option_values
from kohaku.llm.base import BACKENDS, identity_of
from kohaku.llm.hf import HFConfig
from kohaku.llm.openai_backend import OpenAIConfig
from kohaku.llm.vllm_backend import VLLMConfig
from kohaku.llm.fake import FakeConfig
from kohaku.answer.answering import InferConfig
from kohaku.retrieval.planning import PlannerConfig

CONF = Path(__file__).resolve().parents[1] / "conf"
CLASSES = {"hf": HFConfig, "vllm": VLLMConfig, "openai": OpenAIConfig, "fake": FakeConfig}


def resolved(group: str, option: str) -> dict:
    return option_values(group, option, [] if group == "llm" else ["llm=fake"])


@pytest.mark.parametrize("option", sorted(p.stem for p in (CONF / "llm").glob("*.yaml")))
def test_llm_configs_build(option):
    cfg = resolved("llm", option)
    assert cfg["name"] == option and cfg["backend"] in BACKENDS
    built = build(CLASSES[cfg["backend"]], cfg, "llm")
    assert built.model
    assert identity_of(cfg).startswith(f"{cfg['backend']}:{cfg['model']}@")


def test_qwen_72b_uses_four_gpus_and_default_is_cpu_gguf():
    assert resolved("llm", "vllm_qwen2_5_72b")["tensor_parallel_size"] == 4
    smol = resolved("llm", "smollm2_cpu")
    assert smol["backend"] == "hf" and len(smol["gguf"]["sha256"]) == 64


@pytest.mark.parametrize("option", sorted(p.stem for p in (CONF / "planner").glob("*.yaml")))
def test_planner_configs_build(option):
    cfg = build(PlannerConfig, resolved("planner", option), "planner")
    assert cfg.kind == option


def test_infer_config_builds_with_both_prompt_orders():
    from kohaku.answer.answering import templates
    from kohaku.tasks import load_task

    values = resolved("infer", "default")
    for order in ("context_first", "question_first"):
        cfg = build(InferConfig, {**values, "prompt_order": order}, "infer")
        t = templates(cfg, load_task("wattbot").answer)
        assert "{context}" in t.user and "{question}" in t.user
