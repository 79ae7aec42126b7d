"""scripts/gpu_check.py on the CPU: its arguments, the run it starts, the figures and the report,
the one-question-at-a-time answering (with the fake backend), and the exit without a GPU."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import polars as pl
import pytest

from conftest import REPO, compose

spec = importlib.util.spec_from_file_location("gpu_check", REPO / "kohaku" / "tools" / "gpu_check.py")
gpu_check = importlib.util.module_from_spec(spec)
sys.modules["gpu_check"] = gpu_check
spec.loader.exec_module(gpu_check)


@pytest.fixture
def model_dir(tmp_path) -> Path:
    folder = tmp_path / "Qwen2.5-7B-Instruct"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return folder


@pytest.fixture
def corpus_root(tmp_path) -> Path:
    root = tmp_path / "wattbot"
    root.mkdir()
    for name in ("test_Q.csv", "solutions_public.csv", "metadata.csv"):
        (root / name).write_text("id\n")
    return root


# ------------------------------------------------------------------ arguments


def test_defaults():
    args = gpu_check.parse_args(["/m"])
    assert (args.model, args.llm, args.compare_sequential, args.sequential_questions, args.out,
            args.overrides, args.corpus_root) == ("/m", "vllm_qwen2_5_7b", False, None, None, [], None)


def test_overrides_and_sequential_options():
    args = gpu_check.parse_args(["/m", "llm.max_model_len=16384", "--compare-sequential",
                                 "--sequential-questions", "20", "--llm", "vllm_qwen2_5_72b"])
    assert args.overrides == ["llm.max_model_len=16384"]
    assert (args.compare_sequential, args.sequential_questions, args.llm) == (True, 20, "vllm_qwen2_5_72b")


@pytest.mark.parametrize("argv, message", [
    (["/m", "llm.model=/other"], "sets llm.model itself"),
    (["/m", "cache.dir=/c"], "sets cache.dir itself"),
    (["/m", "+experiment=cpu_smoke"], "sets +experiment itself"),
    (["/m", "notanoverride"], "is not key=value"),
    (["/m", "--sequential-questions", "5"], "needs --compare-sequential"),
    (["/m", "--compare-sequential", "--sequential-questions", "0"], "must be >= 1"),
])
def test_usage_errors(capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        gpu_check.parse_args(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_help_describes_the_run(capsys):
    with pytest.raises(SystemExit):
        gpu_check.parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for words in ("+experiment=kohaku_wattbot", "public split", "fresh, empty cache", "wall seconds per stage",
                  "prompts/s", "prefill tokens/s", "decode tokens/s", "peak GPU memory", "the score",
                  "--compare-sequential", "one question at a time", "9.8 s a question", "Exits 1"):
        assert words in text, words


def test_check_inputs(tmp_path, model_dir, corpus_root):
    def check(**kw):
        base = {"model": str(model_dir), "llm": "vllm_qwen2_5_7b", "corpus_root": corpus_root, "out": None}
        gpu_check.check_inputs(Namespace(**{**base, **kw}))

    check()
    (tmp_path / "empty").mkdir()
    check(out=tmp_path / "empty")
    check(out=tmp_path / "new")
    for kw, message in [({"model": None}, "give the local model folder"),
                        ({"model": str(tmp_path)}, "has no config.json"),
                        ({"llm": "nope"}, "no conf/llm/nope.yaml"),
                        ({"corpus_root": tmp_path / "none"}, "has no test_Q.csv"),
                        ({"out": corpus_root}, "is not empty")]:
        with pytest.raises(gpu_check.CheckError, match=message):
            check(**kw)


@pytest.mark.parametrize("llm", ["vllm_qwen2_5_7b", "vllm_qwen2_5_72b"])
def test_the_run_is_the_recipe_on_the_public_split_with_a_fresh_cache(tmp_path, model_dir, corpus_root, llm):
    args = gpu_check.parse_args([str(model_dir), "llm.max_model_len=16384", "--corpus-root", str(corpus_root),
                                 "--llm", llm])
    overrides = gpu_check.run_overrides(args, tmp_path)
    assert overrides[0] == "+experiment=kohaku_wattbot" and overrides[-1] == "llm.max_model_len=16384"
    assert f"cache.dir={tmp_path / 'cache'}" in overrides and f"hydra.run.dir={tmp_path / 'run'}" in overrides
    # the overrides compose (scripts/run.py turns +experiment= into experiment=)
    cfg = compose([o.replace("+experiment=", "experiment=") for o in overrides if not o.startswith("hydra.")])
    assert (cfg.corpus.questions, cfg.corpus.solutions, cfg.corpus.root) == (
        "test_Q.csv", "solutions_public.csv", str(corpus_root.resolve()))
    assert (cfg.llm.name, cfg.llm.model, cfg.llm.max_model_len) == (llm, str(model_dir.resolve()), 16384)
    assert (cfg.infer.n, cfg.planner.kind, cfg.planner.llm.model, cfg.cache.dir) == (
        5, "llm", str(model_dir.resolve()), str(tmp_path / "cache"))


# ------------------------------------------------------------------ figures and the report


def run_json(status: str = "ok") -> dict:
    stages = {name: {"key": "k", "path": f"/c/{name}", "cache_hit": False, "seconds": s, "summary": {}}
              for name, s in [("parse", 3.0), ("questions", 0.1), ("tree", 1.0), ("embed", 12.5),
                              ("index", 0.4), ("plan", 61.0), ("retrieve", 4.2), ("infer", 141.0),
                              ("vote", 0.2), ("score", 0.1)]}
    stages["infer"]["summary"] = {"questions": 282, "rounds": 3, "prompts": 300, "samples": 1500,
                                  "model_calls": 3, "prompt_tokens": 600_000, "completion_tokens": 150_000,
                                  "seconds": 120.0, "invalid": 2}
    stages["score"]["summary"] = {"score": 0.8123, "variant": "wattbot", "n": 187}
    return {"status": status, "seconds": 224.0, "stages": stages, "failed_stage": "infer" if status != "ok" else None,
            "error": "BackendError: boom" if status != "ok" else None}


def test_batch_figures():
    log_text = "x\n2026-12-01 kohaku.llm.vllm_backend INFO vLLM engine for /m ready in 48.3 s (llm=...)\n"
    f = gpu_check.batch_figures(run_json(), log_text)
    assert [s["name"] for s in f["stages"]] == list(gpu_check.STAGES)
    assert (f["run_seconds"], f["engine_start_seconds"], f["score"]) == (224.0, 48.3, 0.8123)
    t = gpu_check.throughput(f["infer"])
    assert t == {"prompts_per_s": 2.5, "samples_per_s": 12.5, "prefill_tok_per_s": 5000.0,
                 "decode_tok_per_s": 1250.0, "s_per_question": 0.5}
    assert gpu_check.batch_figures(run_json(), "")["engine_start_seconds"] is None


def test_a_failed_run_is_one_line():
    with pytest.raises(gpu_check.CheckError, match="failed in stage infer: BackendError: boom"):
        gpu_check.batch_figures(run_json("failed"))


def test_sequential_figures_extrapolate_a_partial_timing():
    f = gpu_check.sequential_figures({"questions": 20, "prompts": 22, "samples": 22, "model_calls": 22,
                                      "prompt_tokens": 44_000, "completion_tokens": 2_200, "seconds": 45.0,
                                      "rounds": 2}, wall=50.0, engine_start=40.0, total_questions=282)
    assert (f["extrapolated_seconds"], f["stage_seconds"], f["engine_start_seconds"]) == (705.0, 50.0, 40.0)
    assert gpu_check.throughput(f)["s_per_question"] == 2.5


def report(sequential: bool) -> dict:
    batch = gpu_check.batch_figures(run_json(), "vLLM engine for /m ready in 48.3 s")
    batch["peak_gpu_mib"] = [71_234, 512]
    seq = None
    if sequential:
        seq = gpu_check.sequential_figures({"questions": 20, "prompts": 22, "samples": 22, "model_calls": 22,
                                            "prompt_tokens": 44_000, "completion_tokens": 2_200, "seconds": 45.0},
                                           wall=50.0, engine_start=40.0, total_questions=282)
        seq["peak_gpu_mib"] = [70_000, 512]
    return {"vllm": "0.32.0", "torch": "2.13.0 (CUDA 13.0)", "gpu": "1 x NVIDIA H200", "model": "/m",
            "llm": "vllm_qwen2_5_7b", "batch": batch, "sequential": seq}


def test_the_report():
    text = gpu_check.format_report(report(sequential=False))
    lines = text.splitlines()
    assert lines[0] == "gpu_check: vllm 0.32.0, torch 2.13.0 (CUDA 13.0), 1 x NVIDIA H200"
    for name, seconds in [("parse", "3.0"), ("embed", "12.5"), ("plan", "61.0"), ("infer", "141.0"),
                          ("run", "224.0")]:
        assert any(line.split() == [name, seconds] for line in lines), name
    assert "vLLM engine start 48.3 s" in text
    batch = next(line for line in lines if line.startswith("batch "))
    #              questions prompts samples calls seconds s/question prompts/s prefill decode
    assert batch.split() == ["batch", "282", "300", "1500", "3", "141.0", "0.50", "2.50", "5,000", "1,250"]
    assert "peak GPU memory: GPU0 71,234 MiB, GPU1 512 MiB" in text
    assert lines[-1] == "score: 0.8123 (wattbot, public split, 187 questions scored)"
    assert "sequential" not in text and "speed-up" not in text


def test_the_report_with_the_sequential_comparison():
    text = gpu_check.format_report(report(sequential=True))
    seq = next(line for line in text.splitlines() if line.startswith("sequential "))
    assert seq.split()[:7] == ["sequential", "20", "22", "22", "22", "50.0", "2.50"]
    assert "20 of 282 questions timed; all of them would take about 705 s" in text
    assert "sequential engine start 40.0 s" in text
    assert "batch speed-up: 5.0x per question (2.50 s one at a time, 1 sample; 0.50 s batched" in text
    assert "9.8 s a question" in text and "; sequential: GPU0 70,000 MiB" in text


def test_the_report_without_nvidia_smi_or_score():
    r = report(sequential=False)
    r["batch"]["peak_gpu_mib"], r["batch"]["score"] = [], None
    text = gpu_check.format_report(r)
    assert "peak GPU memory: - (no nvidia-smi)" in text and text.endswith("score: -")


def test_peak_memory_keeps_the_maximum_per_gpu():
    readings = iter([[100, 10], [300, 5], [200, 50]])
    memory = gpu_check.PeakMemory(interval=3600, read=lambda: next(readings, []))
    memory.sample()
    memory.sample()
    memory.sample()
    memory.sample()              # nvidia-smi failing once keeps what was seen
    assert memory.peak == [300, 50]


# ------------------------------------------------------------------ the runs, CPU-side


def test_sequential_answers_each_question_in_its_own_call(tmp_path):
    cfg = compose(["llm=fake"])
    qdir, rdir = tmp_path / "questions", tmp_path / "retrieve"
    qdir.mkdir()
    rdir.mkdir()
    qids = ["q1", "q2", "q3"]
    pl.DataFrame({"qid": qids, "question": [f"What is the PUE of site {q}?" for q in qids],
                  "answer_unit": ["ratio"] * 3}).write_parquet(qdir / "questions.parquet")
    rows = [{"qid": q, "attempt": a, "k": 8 * (a + 1), "context": f"[ref_id=doc{i}] The PUE is 1.{i}.",
             "doc_ids": [f"doc{i}"], "node_ids": ["n"], "n_tokens": 8, "budget": 100, "n_blocks": 1,
             "blocks": [f"[ref_id=doc{i}] The PUE is 1.{i}."], "block_doc_ids": [f"doc{i}"], "separator": "\n"}
            for i, q in enumerate(qids) for a in range(3)]
    pl.DataFrame(rows).write_parquet(rdir / "contexts.parquet")
    from omegaconf import OmegaConf

    config = OmegaConf.to_container(cfg, resolve=True)
    config["infer"]["n"] = 5
    run = {"stages": {"questions": {"path": str(qdir)}, "retrieve": {"path": str(rdir)}}, "config": config}
    f = gpu_check.run_sequential(run, limit=2)
    assert (f["questions"], f["total_questions"], f["samples"]) == (2, 3, 2)
    assert f["model_calls"] == f["prompts"] >= 2          # one request per engine call
    assert f["extrapolated_seconds"] == pytest.approx(f["stage_seconds"] * 1.5)


def test_main_prints_the_report_and_keeps_it_with_out(tmp_path, monkeypatch, capsys, model_dir, corpus_root):
    class Cuda:
        @staticmethod
        def device_count():
            return 1

        @staticmethod
        def get_device_name(i):
            return "NVIDIA H200"

    torch = Namespace(__version__="2.13.0", version=Namespace(cuda="13.0"), cuda=Cuda)
    monkeypatch.setattr(gpu_check, "require_gpu", lambda: (torch, Namespace(__version__="0.32.0")))
    seen = {}

    def fake_batch(args, work):
        seen["work"] = work
        (work / "run").mkdir(parents=True)
        (work / "run" / "run.log").write_text("vLLM engine for /m ready in 30.0 s (x)\n")
        return run_json(), [1000]

    monkeypatch.setattr(gpu_check, "run_batch", fake_batch)
    out = tmp_path / "keep"
    assert gpu_check.main([str(model_dir), "--corpus-root", str(corpus_root), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert seen["work"] == out.resolve() and "score: 0.8123" in text and "GPU0 1,000 MiB" in text
    kept = json.loads((out / "report.json").read_text())
    assert kept["batch"]["engine_start_seconds"] == 30.0 and kept["sequential"] is None


def test_without_a_gpu_it_exits_1_with_one_line(model_dir):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_check.py"), str(model_dir)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("gpu_check: no CUDA GPU visible"), out.stderr
