"""score.judge_llm: the score stage judges with that model, not the run's; null: the run's llm."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from kohaku.core.config import ConfigError, build
from kohaku.llm.fake import FakeBackend
from kohaku.tasks.score.scoring import ScoreConfig
from kohaku.runner.stage import StageContext
from kohaku.stages.score import STAGE
from kohaku.tasks import load_task


class Services:
    def __init__(self) -> None:
        self.asked: list[dict] = []

    def get(self, kind, cfg, factory):
        assert kind == "llm"
        self.asked.append(dict(cfg))
        return FakeBackend(identity=f"fake:{cfg['name']}@0")


def _ctx(tmp_path: Path, judge_llm: dict | None) -> StageContext:
    (tmp_path / "sol.jsonl").write_text(
        json.dumps({"financebench_id": "f1", "question": "Capex?", "answer": "$1577.00"}) + "\n"
        + json.dumps({"financebench_id": "f2", "question": "Why?", "answer": "Because."}) + "\n")
    vote = tmp_path / "vote"
    vote.mkdir()
    (vote / "submission.csv").write_text("financebench_id,answer\nf1,1577\nf2,\n")
    out = tmp_path / "out"
    out.mkdir()
    task = asdict(load_task("financebench"))
    task["submission"]["columns"] = {"financebench_id": "qid", "answer": "value"}
    cfg = OmegaConf.create({
        "corpus": {"root": str(tmp_path), "solutions": "sol.jsonl"},
        "score": {"variant": "wattbot", "subset": False, "judge_llm": judge_llm},
        "task": task, "llm": {"name": "answerer", "backend": "fake"},
        "cache": {"dir": str(tmp_path / "cache")},
    })
    return StageContext(stage=STAGE, cfg=cfg, input_dirs={"vote": vote}, out_dir=out,
                        services=Services(), log=logging.getLogger("test"))


@pytest.mark.parametrize("judge_llm, asked", [
    (None, "answerer"),
    ({"name": "judge", "backend": "fake"}, "judge"),
])
def test_the_judge_is_score_judge_llm_else_the_runs_llm(tmp_path, judge_llm, asked) -> None:
    ctx = _ctx(tmp_path, judge_llm)
    table = STAGE.compute(ctx)["scores"]
    assert [c["name"] for c in ctx.services.asked] == [asked]   # loaded once, for f1 only
    # f1 is judged (the fake says correct), f2 is blank: wrong without asking
    assert table["judge"].to_list() == [1.0, 0.0] and table["numeric"].to_list() == [1.0, None]
    scores = json.loads((ctx.out_dir / "scores.json").read_text())
    assert scores["coverage"] == {"judge": 2, "numeric": 1} and scores["score"] == 0.5


def test_judge_llm_must_be_an_llm_config() -> None:
    with pytest.raises(ConfigError, match="score.judge_llm"):
        build(ScoreConfig, {"judge_llm": "fake"}, "score")
