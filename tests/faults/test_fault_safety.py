"""Safety: model output is data (parsed as JSON, never evaluated), the cache never unpickles,
remote model code stays off unless a config asks for it, and no id from the input files can
make a run write outside its run dir and cache dir."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import polars as pl
import pytest
from omegaconf import OmegaConf

from conftest import CONF, REPO, SAMPLE
from faultkit import question_of, run_inprocess, scripted, table
from kohaku.llm.fake import default_responder
from kohaku.tasks import load_task

WATTBOT_ANSWER = load_task("wattbot").answer

KOHAKU = REPO / "kohaku"


def _payload(mark: Path) -> str:
    return f"__import__('pathlib').Path({str(mark)!r}).write_text('pwned')"


def test_model_output_is_parsed_as_json_never_evaluated(tmp_path):
    marks = [tmp_path / f"mark{i}" for i in range(6)]

    def hostile(req, seed):
        if "answer_value" not in (req.json_schema or {}).get("properties", {}):
            return default_responder(req, seed)
        text = question_of(req)
        if "university GPU cluster reach" in text:  # q001: not JSON at all
            return _payload(marks[0])
        if "dry coolers" in text:  # q005: code inside the JSON strings and as the ref list
            return json.dumps({"explanation": f"eval({_payload(marks[1])})",
                               "answer": _payload(marks[2]), "answer_value": _payload(marks[3]),
                               "ref_id": f"['lindqvist2024', {_payload(marks[4])}]"})
        if "G2 accelerator" in text:  # q007: a Python dict literal, not JSON
            return "{'answer_value': " + _payload(marks[5]) + ", 'ref_id': ['mehta2022']}"
        return default_responder(req, seed)

    result = run_inprocess(tmp_path, backend=scripted(hostile, "hostile"))
    assert not [m for m in marks if m.exists()]
    gens = table(result, "infer", "generations").filter(pl.col("attempt") == 0)
    by_q = {r["qid"]: r for r in gens.iter_rows(named=True)}
    assert not by_q["q001"]["valid"] and not by_q["q007"]["valid"]
    q5 = by_q["q005"]
    assert q5["valid"] and q5["answer_value"] == _payload(marks[3])  # kept as text
    assert q5["ref_id"] == ["lindqvist2024"] and q5["dropped_refs"] == 1
    sub = pl.read_csv(result.run_dir / "submission.csv", infer_schema=False)
    assert sub.filter(pl.col("id") == "q005")["answer_value"].item() == _payload(marks[3])
    assert result.summary("score")["n"] == 11
    assert not [m for m in marks if m.exists()]


def test_value_and_ref_readers_never_execute_code(tmp_path):
    from kohaku.tasks.rooms.wattbot.metric import parse_refs, value_ok
    from kohaku.answer.answering import parse_answer
    from kohaku.llm.json_text import first_json_object
    from kohaku.tasks.rooms.wattbot.submission import parse_ref_list
    from kohaku.core.values import canonical, render

    mark = tmp_path / "mark"
    code = _payload(mark)
    texts = [code, f"[{code}]", f"['a', {code}]", f"({code},)", f"{{'x': {code}}}",
             f"[1, 2, {code}]", "[" * 5000 + "]" * 5000]
    for text in texts:
        parse_ref_list(text)
        parse_refs(text)
        render(canonical(text))
        value_ok(text, text, "wattbot-recall")
        first_json_object(text)
        parse_answer(text, ["a"], WATTBOT_ANSWER)
    assert not mark.exists()


# ------------------------------------------------------------------ no unpickling, no eval

FORBIDDEN_MODULES = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "joblib", "shelve",
                     "marshal", "jsonpickle"}
FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__"}


def _sources() -> list[Path]:
    files = sorted(KOHAKU.rglob("*.py"))
    assert len(files) > 20
    return files


def test_kohaku_never_imports_pickle_loaders_or_evaluates_strings():
    problems = []
    for path in _sources():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        rel = path.relative_to(REPO)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [(node.module or "").split(".")[0]]
            else:
                names = []
            problems += [f"{rel}:{node.lineno} imports {n}" for n in names if n in FORBIDDEN_MODULES]
            if isinstance(node, ast.Call):
                fn = node.func
                if isinstance(fn, ast.Name) and fn.id in FORBIDDEN_CALLS:
                    problems.append(f"{rel}:{node.lineno} calls {fn.id}()")
                name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
                owner = getattr(getattr(fn, "value", None), "id", "")
                if name == "load" and owner in ("torch", "np", "numpy"):
                    problems.append(f"{rel}:{node.lineno} calls {owner}.load()")
                if name in ("read_pickle", "loads") and owner in ("pickle", "pd", "dill"):
                    problems.append(f"{rel}:{node.lineno} calls {owner}.{name}()")
                for kw in node.keywords:
                    if kw.arg in ("allow_pickle", "trust_remote_code") and isinstance(
                            kw.value, ast.Constant) and kw.value.value is True:
                        problems.append(f"{rel}:{node.lineno} passes {kw.arg}=True")
            if isinstance(node, ast.Dict):
                for k, v in zip(node.keys, node.values):
                    if isinstance(k, ast.Constant) and k.value in ("allow_pickle", "trust_remote_code") \
                            and isinstance(v, ast.Constant) and v.value is True:
                        problems.append(f"{rel}:{node.lineno} sets {k.value}: True")
    assert problems == []


def test_the_grep_test_would_catch_a_pickle_load(tmp_path):
    """The checks above are live: a module with the forbidden patterns is flagged."""
    bad = ("import pickle\nimport numpy as np\n"
           "def f(p):\n    np.load(p, allow_pickle=True)\n    return eval(p)\n")
    tree = ast.parse(bad)
    imports = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    assert "pickle" in FORBIDDEN_MODULES & set(imports)
    assert any(getattr(c.func, "id", "") == "eval" for c in calls)
    assert any(kw.arg == "allow_pickle" and kw.value.value is True for c in calls for kw in c.keywords)


def test_cache_files_are_parquet_and_json_only(tmp_path):
    run_inprocess(tmp_path, "stages=[retrieve]")
    suffixes = {p.suffix for p in (tmp_path / "cache").rglob("*") if p.is_file()}
    # tables, manifests, the hnsw binary index, bm25s' numpy arrays (loaded without pickle)
    # and the empty lock files that serialise workers computing the same key
    assert suffixes <= {".parquet", ".json", ".bin", ".npy", ".txt", ".lock"}, suffixes
    assert all(p.stat().st_size == 0 for p in (tmp_path / "cache").rglob("*.lock"))
    for npy in (tmp_path / "cache").rglob("*.npy"):
        import numpy as np

        np.load(npy, allow_pickle=False)  # raises if an object array (a pickle) were stored


# ------------------------------------------------------------------ trust_remote_code

# Models that ship their own modelling code: the only configs allowed to turn it on.
NEEDS_REMOTE_CODE = {"embed/jina_v3.yaml", "embed/jina_v4.yaml"}


@pytest.mark.parametrize("group", ["embed", "llm"])
def test_trust_remote_code_is_off_unless_a_config_sets_it(group):
    from kohaku.retrieval.embedding import EmbedConfig
    from kohaku.llm.hf import HFConfig
    from kohaku.llm.vllm_backend import VLLMConfig

    for cls in (EmbedConfig, HFConfig, VLLMConfig):
        assert cls.__dataclass_fields__["trust_remote_code"].default is False, cls
    files = sorted((CONF / group).glob("*.yaml"))
    assert files
    for path in files:
        name = f"{group}/{path.name}"
        cfg = OmegaConf.to_container(OmegaConf.load(path))
        value = cfg.get("trust_remote_code", False)
        assert isinstance(value, bool), name
        assert value is (name in NEEDS_REMOTE_CODE), name
        for extra in ("model_kwargs", "engine_kwargs", "extra_body"):
            assert "trust_remote_code" not in (cfg.get(extra) or {}), name


def test_vllm_engine_gets_trust_remote_code_false(monkeypatch):
    import sys

    saved = {k: v for k, v in sys.modules.items() if k == "vllm" or k.startswith("vllm.")}
    for k in saved:
        del sys.modules[k]
    monkeypatch.syspath_prepend(str(REPO / "tests" / "fake_vllm"))
    try:
        import vllm

        from kohaku.llm.base import ChatRequest, load_backend

        for path in sorted((CONF / "llm").glob("vllm_*.yaml")):
            cfg = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
            cfg["data_parallel_size"] = 1
            vllm.LLM.instances.clear()
            load_backend(cfg).generate([ChatRequest(messages=[{"role": "user", "content": "hi"}])])
            assert vllm.LLM.instances[0].init_kwargs["trust_remote_code"] is False, path.name
    finally:
        for k in [k for k in sys.modules if k == "vllm" or k.startswith("vllm.")]:
            del sys.modules[k]
        sys.modules.update(saved)


# ------------------------------------------------------------------ output paths


def _files(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*")}


def test_hostile_question_ids_never_become_paths(tmp_path):
    corpus = tmp_path / "corpus"
    shutil.copytree(SAMPLE, corpus)
    for name in ("questions.csv", "solutions.csv"):
        text = (corpus / name).read_text(encoding="utf-8")
        text = text.replace("\nq001,", "\n../../escape,").replace("\nq002,", "\n/tmp/abs,")
        text = text.replace("\nq003,", "\n..\\\\win,")
        (corpus / name).write_text(text, encoding="utf-8")
    outside = tmp_path.parent
    before = {p for p in outside.iterdir()}
    run_dir_files = tmp_path / "work"
    result = run_inprocess(run_dir_files, corpus=corpus)
    assert {p for p in outside.iterdir()} == before  # nothing appeared next to the test folder
    written = _files(run_dir_files)
    assert all(p.relative_to(run_dir_files).parts[0] in ("cache", "run") for p in written)
    sub = pl.read_csv(result.run_dir / "submission.csv", infer_schema=False)
    assert sub["id"].to_list()[:3] == ["../../escape", "/tmp/abs", "..\\\\win"]
    assert result.summary("score")["n"] == 11 and result.summary("score")["n_missing"] == 0
