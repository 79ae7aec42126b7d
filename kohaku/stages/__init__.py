"""Stage registry: stage name -> module defining ``STAGE``. Order is pipeline order."""

from __future__ import annotations

import importlib

from kohaku.runner.stage import Stage

STAGE_MODULES: dict[str, str] = {
    "parse": "kohaku.stages.parse",
    "questions": "kohaku.stages.questions",
    "caption": "kohaku.stages.caption",
    "tree": "kohaku.stages.tree",
    "embed": "kohaku.stages.embed",
    "index": "kohaku.stages.index",
    "plan": "kohaku.stages.plan",
    "retrieve": "kohaku.stages.retrieve",
    "recall": "kohaku.stages.recall",      # not in the default stages: stages=[recall]
    "infer": "kohaku.stages.infer",
    "vote": "kohaku.stages.vote",
    "score": "kohaku.stages.score",
}


def get_stage(name: str) -> Stage:
    if name not in STAGE_MODULES:
        raise KeyError(f"unknown stage '{name}'; stages are: {', '.join(STAGE_MODULES)}")
    return importlib.import_module(STAGE_MODULES[name]).STAGE
