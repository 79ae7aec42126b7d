"""infer stage: questions + retrieve contexts -> ``generations`` (kohaku.answer.answering.run_infer).

cache.dir is read from the run config, not hashed: moving the cache must not change keys.
"""

from __future__ import annotations

import polars as pl

from kohaku.answer.answering import InferConfig, check_attempts, run_infer, templates
from kohaku.llm.base import load_backend
from kohaku.llm.cache import open_generation_cache
from kohaku.llm.ray_backend import RayBackend
from kohaku.runner.stage import Stage, StageContext
from kohaku.tasks.spec import AnswerSpec, build_task

SUMMARY_EVENTS = {
    "invalid": "outputs that were not a JSON answer",
    "empty": "empty outputs",
    "truncated": "outputs cut at infer.max_tokens",
    "dropped_refs": "cited ids not in the context (dropped)",
    "trimmed": "contexts trimmed to fit the model",
    "backend_retries": "backend retries",
    "blank_questions": "questions blank after every retry",
}


def compute(ctx: StageContext) -> dict[str, pl.DataFrame]:
    cfg: InferConfig = ctx.config("infer")
    task = build_task(ctx.section("task"))       # validated whole: templates use declared fields
    task.answer.require()                         # a scoring-only task cannot answer questions
    questions = ctx.table("questions", "questions")
    contexts = ctx.table("retrieve", "contexts")
    check_attempts(contexts, cfg.max_retries)      # fail before loading any model
    templates(cfg, task.answer)
    ray = ctx.ray()  # run.executor=ray: the prompts sharded over Ray actors (the same samples)
    backend = (ctx.services.get("llm-ray", ctx.section("llm"), lambda c: RayBackend(ray, c)) if ray else
               ctx.services.get("llm", ctx.section("llm"), load_backend))
    cache = open_generation_cache(ctx.cache_dir, backend.identity, cfg.generation_cache)
    gens, summary = run_infer(questions, contexts, backend, cfg, task.answer,
                              task.questions.fields, cache)
    ctx.log.info("infer: %d questions, %d prompts sent in %d call(s), %d cached sample(s), %d "
                 "invalid, %d still blank", summary["questions"], summary["prompts"],
                 summary["model_calls"], summary["cache_hits"], summary["invalid"],
                 summary["blank_questions"])
    if "prefill_seconds" in summary:
        ctx.log.info("infer: model time %.1f s prefill (%d prompt tokens), %.1f s decode (%d tokens "
                     "in %d steps)", summary["prefill_seconds"], summary["prefill_tokens"],
                     summary["decode_seconds"], summary["decoded_tokens"],
                     summary.get("decode_steps", 0))
    ctx.report(**summary)
    return {"generations": gens}


STAGE = Stage(
    name="infer",
    version="1",
    inputs=("questions", "retrieve"),
    config_keys=("infer", "llm", "task.answer", "task.questions.fields"),
    compute=compute,
    outputs=("generations",),
    configs={"infer": InferConfig, "task.answer": AnswerSpec},
    summary_events=SUMMARY_EVENTS,
    # the llm config with its backend's identity (decoder version, library versions, resolved
    # dtype), without its thread count or progress bar; reusing cached samples cannot change one
    llm_configs=("llm",),
    unkeyed=("infer.generation_cache",),
)
