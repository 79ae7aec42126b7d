"""Readers for metadata, questions and solutions CSVs; the corpus config; the questions stage."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from helpers_corpus import make_ctx
from kohaku.core.config import ConfigError, build
from kohaku.ingest.corpus import CorpusConfig, CorpusError, read_metadata, read_solutions
from kohaku.tasks.files.io import read_questions
from kohaku.runner.pipeline import option_values
from kohaku.stages import questions as questions_stage

META = "id,type,title,year,citation,url\n"


def _write(path: Path, text: str, encoding: str = "utf-8") -> Path:
    path.write_bytes(text.encode(encoding))
    return path


def test_read_metadata_strings_and_bom(tmp_path):
    p = _write(tmp_path / "m.csv", "\ufeff" + META + "d1,paper,A Title,2024,Cite,https://x/d1.pdf\n"
               "d2,report,\"Comma, Title\",0123,,\n")
    df = read_metadata(p)
    assert df.columns[:6] == ["id", "type", "title", "year", "citation", "url"]
    assert df["id"].to_list() == ["d1", "d2"]
    assert df["year"].to_list() == ["2024", "0123"]          # strings, leading zero kept
    assert df["title"][1] == "Comma, Title"
    assert df["url"][1] == ""
    assert all(dtype == pl.String for dtype in df.dtypes)


def test_read_metadata_errors_name_file_and_row(tmp_path):
    p = _write(tmp_path / "m.csv", "id,title\nd1,A\n")
    with pytest.raises(CorpusError, match=r"m\.csv.*lacks column.*'type'"):
        read_metadata(p)
    p = _write(tmp_path / "dup.csv", META + "d1,paper,A,2024,c,u\nd2,paper,B,2024,c,u\nd1,paper,C,2024,c,u\n")
    with pytest.raises(CorpusError, match=r"dup\.csv: duplicate id 'd1' in rows 1 and 3"):
        read_metadata(p)
    p = _write(tmp_path / "empty_id.csv", META + "d1,paper,A,2024,c,u\n ,paper,B,2024,c,u\n")
    with pytest.raises(CorpusError, match=r"empty_id\.csv: row 2 .*empty 'id'"):
        read_metadata(p)
    with pytest.raises(CorpusError, match="not found"):
        read_metadata(tmp_path / "nope.csv")


def test_read_metadata_mixed_encoding(tmp_path):
    # a cp1252 byte in one cell, proper UTF-8 in another (as in the WattBot metadata.csv)
    raw = (META + "d1,paper,M").encode() + b"\xe9lange" + ",2024,M\u00e9lange cite,u\n".encode("utf-8")
    (tmp_path / "m.csv").write_bytes(raw)
    df = read_metadata(tmp_path / "m.csv")
    assert df["title"][0] == "M\u00e9lange" and df["citation"][0] == "M\u00e9lange cite"


def test_read_questions(tmp_path):
    p = _write(tmp_path / "q.csv", "id,question,answer,answer_value,answer_unit,ref_id\n"
               "q001,What is the PUE?,,,PUE,\nq002,\"Which site, A or B?\",,,is_blank,\n")
    df = read_questions(p)
    assert df.columns[:3] == ["qid", "question", "answer_unit"]
    assert df["qid"].to_list() == ["q001", "q002"]
    assert df["answer"].to_list() == ["", ""]
    p = _write(tmp_path / "bad.csv", "id,question,answer_unit\nq1,,PUE\n")
    with pytest.raises(CorpusError, match=r"bad\.csv: row 1 \(id 'q1'\) has an empty question"):
        read_questions(p)
    p = _write(tmp_path / "dup.csv", "id,question,answer_unit\nq1,A?,x\nq1,B?,x\n")
    with pytest.raises(CorpusError, match="duplicate id 'q1'"):
        read_questions(p)
    p = _write(tmp_path / "cols.csv", "id,question\nq1,A?\n")
    with pytest.raises(CorpusError, match="answer_unit"):
        read_questions(p)


def test_read_solutions(sample_root):
    df = read_solutions(sample_root / "solutions.csv")
    assert df.columns[:3] == ["qid", "answer_value", "ref_id"]
    row = df.filter(pl.col("qid") == "q004").row(0, named=True)
    assert row["answer_value"] == "[0.2,1.9]" and row["ref_id"] == "['lindqvist2024']"
    na = df.filter(pl.col("is_NA") == "1")
    assert na.height == 1 and na["answer_value"].item() == "is_blank"


def test_sample_corpus_files_are_consistent(sample_root):
    meta = read_metadata(sample_root / "metadata.csv")
    questions = read_questions(sample_root / "questions.csv")
    solutions = read_solutions(sample_root / "solutions.csv")
    assert meta.height == 4
    assert questions["qid"].to_list() == solutions["qid"].to_list()
    assert questions.columns == ["qid", "question", "answer_unit", "answer", "answer_value", "ref_id",
                                 "ref_url", "supporting_materials", "explanation"]
    # only id/question/answer_unit are filled in the questions file
    for col in ("answer", "answer_value", "ref_id", "ref_url", "supporting_materials", "explanation"):
        assert set(questions[col]) == {""}
    assert set(solutions["answer_unit"]) >= {"is_blank", "percent", "PUE"}
    values = solutions["answer_value"].to_list()
    assert "1" in values and "is_blank" in values and any(v.startswith("[") for v in values)
    ids = set(meta["id"])
    for ref in solutions["ref_id"]:
        if ref != "is_blank":
            assert set(ref.strip("[]").replace("'", "").split(", ")) <= ids
    assert set(solutions.columns) >= {"Usage", "Quote", "Table", "Figure", "Math", "is_NA"}


def test_corpus_config_paths(tmp_path, monkeypatch):
    root = tmp_path / "root"
    root.mkdir()
    (root / "q.csv").write_text("x")
    (tmp_path / "elsewhere.csv").write_text("x")
    monkeypatch.chdir(tmp_path)
    cfg = build(CorpusConfig, {"root": "root", "questions": "q.csv", "solutions": "elsewhere.csv"}, "corpus")
    assert cfg.metadata_path == Path("root/metadata.csv")
    assert cfg.questions_path == Path("root/q.csv")          # exists under root
    assert cfg.solutions_path == Path("elsewhere.csv")       # only under cwd
    assert build(CorpusConfig, {"solutions": None}, "corpus").solutions_path is None
    with pytest.raises(ConfigError, match="corpus.bogus"):
        build(CorpusConfig, {"bogus": 1}, "corpus")


def test_corpus_confs(repo):
    from omegaconf import OmegaConf

    wattbot = OmegaConf.create(option_values("corpus", "wattbot"))
    over = OmegaConf.merge(wattbot, OmegaConf.from_dotlist(["questions=test_Q.csv", "solutions=solutions_public.csv"]))
    corpus = build(CorpusConfig, OmegaConf.to_container(over), "corpus")
    assert corpus.root == "../shared/data/wattbot" and corpus.questions == "test_Q.csv"
    assert corpus.solutions == "solutions_public.csv"
    sample = build(CorpusConfig, option_values("corpus", "sample"), "corpus")
    assert sample.root == "data/sample" and sample.solutions == "solutions.csv"
    assert (repo / sample.root / sample.questions).is_file()


def test_questions_stage(tmp_path, sample_root):
    cfg = {"corpus": {"root": str(sample_root), "questions": "questions.csv"}, "task": {"questions": {}}}
    ctx = make_ctx(questions_stage.STAGE, cfg, tmp_path / "out")
    out = questions_stage.STAGE.compute(ctx)
    assert out["questions"].height == 11 and ctx.summary["n_questions"] == 11
    assert questions_stage.STAGE.file_inputs(ctx.cfg) == [sample_root / "questions.csv"]
    cfg = {"corpus": {"root": str(sample_root), "questions": "nope.csv"}, "task": {"questions": {}}}
    ctx = make_ctx(questions_stage.STAGE, cfg, tmp_path)
    with pytest.raises(ConfigError, match="corpus.questions"):
        questions_stage.STAGE.compute(ctx)


def _fetch_module():
    import importlib.util

    from conftest import REPO

    spec = importlib.util.spec_from_file_location("fetch_wattbot", REPO / "scripts" / "fetch_wattbot.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fetch_wattbot_offline(tmp_path, capsys):
    fetch = _fetch_module()
    src = tmp_path / "src"
    src.mkdir()
    (src / "good.pdf").write_bytes(b"%PDF-1.4 tiny")
    (src / "page.pdf").write_bytes(b"<html>landing page</html>")
    root = tmp_path / "root"
    root.mkdir()
    (root / "pdfs").mkdir()
    (root / "pdfs" / "have.pdf").write_bytes(b"%PDF-1.4 already here")
    _write(root / "metadata.csv", META
           + f"good,paper,G,2024,c,{(src / 'good.pdf').as_uri()}\n"
           + f"page,paper,P,2024,c,{(src / 'page.pdf').as_uri()}\n"
           + "down,paper,D,2024,c,http://127.0.0.1:9/down.pdf\n"
           + "have,paper,H,2024,c,http://127.0.0.1:9/have.pdf\n")
    rc = fetch.main(["--root", str(root), "--timeout", "2", "--delay", "0"])
    out = capsys.readouterr().out
    assert rc == 1
    assert (root / "pdfs" / "good.pdf").read_bytes() == b"%PDF-1.4 tiny"
    assert not (root / "pdfs" / "page.pdf").exists()          # not a PDF: not kept
    assert not (root / "pdfs" / "down.pdf").exists()
    assert (root / "pdfs" / "have.pdf").read_bytes() == b"%PDF-1.4 already here"  # skipped
    assert "1 downloaded, 1 already present, 2 failed" in out
    assert "page: not a PDF" in out and "down: network error" in out
    assert fetch.pdf_url("https://arxiv.org/abs/2104.10350") == "https://arxiv.org/pdf/2104.10350"
