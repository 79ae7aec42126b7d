"""A run whose task adopts a scoring script of its own (kohaku.tasks.score.adopted), end to end on
data/sample with the fake LLM: the score stage calls the script; editing a sibling file the
script imports re-runs the score stage only (the script and its imports are in the score's
cache key); a missing script or a misspelled param is refused before any stage runs."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import polars as pl
import pytest

from conftest import SAMPLE
from kohaku.core.config import ConfigError
from kohaku.runner.pipeline import compose_config, run_pipeline

FAST = ["llm=fake", "embed.model=hash:64", "embed.dtype=float32"]
FILES = ["corpus.questions=short_answer/questions.csv", "corpus.solutions=short_answer/answers.csv"]

HELPER = "def norm(text):\n    return ' '.join(str(text).lower().split())\n"
SCRIPT = textwrap.dedent("""\
    import json
    import sys
    from helper import norm
    print("official scorer", sys.argv)

    def score(prediction, gold):
        golds = json.loads(gold) if gold.startswith("[") else [gold]
        return max(float(norm(prediction) == norm(g)) for g in golds)

    if __name__ == "__main__":
        raise SystemExit("run me with two files")
    """)

TASK = textwrap.dedent("""\
    defaults:
      - task_schema
      - _self_
    name: adoptee
    questions: {format: csv, id: id, question: question, fields: []}
    answer:
      fields: {reply: text, ref_id: refs}
      value: reply
      refs: ref_id
      abstention: never
      blank_without_refs: false
      fallback: no idea
      prompts:
        context_first:
          system: Answer from the snippets with a few words. Reply with JSON only.
          user: "{context}\\n---\\n[{qid}] Question: {question}\\nReply with JSON holding reply and ref_id."
        question_first:
          system: Answer from the snippets with a few words. Reply with JSON only.
          user: "[{qid}] Question: {question}\\n{context}\\n---\\nReply with JSON holding reply and ref_id."
    vote: {group: text, keep_surface: true}
    submission:
      writer: columns
      columns: {id: qid, answer: value}
    solutions: {id: id, answer: answer, refs: null}
    score:
      scorer: components
      metrics:
        - name: official
          fn: adopted
          params:
            file: SCRIPT_PATH
            function: score
            args: {prediction: {submission: answer}, gold: {solution: answer}}
      classes: generic
    gold: {qid: id, doc: null}
    """)


@pytest.fixture
def conf(tmp_path: Path) -> Path:
    (tmp_path / "scorer").mkdir()
    (tmp_path / "scorer" / "helper.py").write_text(HELPER)
    (tmp_path / "scorer" / "official.py").write_text(SCRIPT)
    (tmp_path / "conf" / "task").mkdir(parents=True)
    (tmp_path / "conf" / "task" / "adoptee.yaml").write_text(
        TASK.replace("SCRIPT_PATH", str(tmp_path / "scorer" / "official.py")))
    return tmp_path


def _cfg(conf: Path, *more: str):
    return compose_config([f"hydra.searchpath=[file://{conf / 'conf'}]", "task=adoptee", *FILES, *FAST,
                           f"cache.dir={conf / 'cache'}", *more])


def test_a_run_scores_with_the_adopted_script_and_rescores_when_its_sibling_changes(conf: Path) -> None:
    first = run_pipeline(_cfg(conf), conf / "run1")
    scores = json.loads((first.run_dir / "scores.json").read_text())
    sub = pl.read_csv(first.run_dir / "submission.csv", infer_schema=False)
    gold = pl.read_csv(SAMPLE / "short_answer" / "answers.csv", infer_schema=False)
    by_id = dict(zip(gold["id"], gold["answer"]))

    def expected(norm) -> float:
        hits = []
        for q, a in zip(sub["id"], sub["answer"]):
            g = by_id[q]
            golds = json.loads(g) if g.startswith("[") else [g]
            hits.append(max(float(norm(a) == norm(x)) for x in golds))
        return sum(hits) / len(hits)

    assert scores["components"]["official"] == pytest.approx(expected(lambda t: " ".join(t.lower().split())))
    again = run_pipeline(_cfg(conf), conf / "run2")
    assert again.stages["score"].cache_hit
    (conf / "scorer" / "helper.py").write_text("def norm(text):\n    return 'same'\n")   # every answer right
    third = run_pipeline(_cfg(conf), conf / "run3")
    assert not third.stages["score"].cache_hit and third.stages["vote"].cache_hit
    assert json.loads((third.run_dir / "scores.json").read_text())["components"]["official"] == 1.0


def test_a_missing_script_or_a_misspelled_param_is_refused_before_any_stage(conf: Path) -> None:
    (conf / "scorer" / "official.py").rename(conf / "scorer" / "moved.py")
    with pytest.raises(ConfigError, match=r"task.score.metrics\[0\].params.file=.*official.py': no such file"):
        run_pipeline(_cfg(conf), conf / "run")
    (conf / "scorer" / "moved.py").rename(conf / "scorer" / "official.py")
    with pytest.raises(ConfigError, match=r"unknown param\(s\) task.score.metrics\[0\].params.fuction of the metric .adopted."):
        run_pipeline(_cfg(conf, "+task.score.metrics.0.params.fuction=score"), conf / "run")
    with pytest.raises(ConfigError, match=r"params.args.gold: the solutions file has no column\(s\) \['answr'\]"):
        run_pipeline(_cfg(conf, "task.score.metrics.0.params.args.gold.solution=answr"), conf / "run")
    assert not (conf / "run").exists() or not any((conf / "run").iterdir())
