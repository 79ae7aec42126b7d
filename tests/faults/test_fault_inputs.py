"""Bad inputs: each gets a clear error (file, row or key, and what to do) or a recorded warning,
never a traceback or silence, and the good data around it still gives the same results."""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from conftest import REPO, SAMPLE
from faultkit import child_env, damaged_corpus, run_inprocess, run_json, table
from kohaku.core.config import ConfigError
from kohaku.core.errors import CorpusError
from kohaku.runner.pipeline import StageError

SAMPLE_IDS = ["lindqvist2024", "mehta2022", "okafor2023", "sato2025"]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    """An uninterrupted run on the clean sample corpus."""
    tmp = tmp_path_factory.mktemp("baseline")
    return run_inprocess(tmp, "parse.workers=1")


def test_damaged_corpus_is_recorded_and_summarised_and_good_documents_are_unchanged(
        tmp_path, baseline, caplog):
    corpus = damaged_corpus(tmp_path / "corpus")
    with caplog.at_level(logging.INFO):
        result = run_inprocess(tmp_path, "parse.workers=1", corpus=corpus)

    docs = table(result, "parse", "documents")
    row = {r["doc_id"]: r for r in docs.iter_rows(named=True)}
    expected = {
        "zero2024": "0 bytes); re-download it",
        "locked2024": "encrypted PDF (a password is required); supply a decrypted copy",
        "cut2024": "not a readable PDF",
        "scan2024": "no text layer (scanned or image-only PDF?) and OCR found no words on them",
        "gone2024": "no document file found (looked for pdfs/gone2024.pdf",
        "stray2024": "file has no row in metadata.csv; add one",
    }
    for doc_id, message in expected.items():
        assert row[doc_id]["status"] == "error", doc_id
        assert message in row[doc_id]["error"], (doc_id, row[doc_id]["error"])
    assert row["latin2024"]["status"] == "warning"
    assert "not valid UTF-8" in row["latin2024"]["warnings"][0]
    assert "cp1252" in row["latin2024"]["warnings"][0]
    assert [row[d]["status"] for d in SAMPLE_IDS] == ["ok"] * 4

    # the summary: a count in run.json's parse summary and a line at the end of the log
    summary = run_json(result.run_dir)["stages"]["parse"]["summary"]
    assert (summary["n_problems"], summary["n_error"], summary["n_warning"]) == (7, 6, 1)
    assert summary["problems"]["count"] == 7
    assert any(i.startswith("locked2024 (pdfs/locked2024.pdf) error: encrypted") for i in
               summary["problems"]["items"])
    assert "parse: 7 documents with problems" in run_json(result.run_dir)["problems"]
    end = [r.getMessage() for r in caplog.records if r.name == "kohaku.pipeline"
           and r.levelno == logging.WARNING]
    assert len(end) == 2 and end[0].startswith("parse: 7 documents with problems:")
    for doc_id in list(expected) + ["latin2024"]:
        assert f"\n    {doc_id} " in end[0]

    # the whole corpus in one table: every documents row is in the tree or named with its
    # reason in the tree's summary, the end of the log and run.json (uncut)
    in_tree = set(table(result, "tree", "nodes")["doc_id"].unique().to_list())
    assert in_tree == set(SAMPLE_IDS) | {"latin2024"}
    tree = run_json(result.run_dir)["stages"]["tree"]["summary"]
    headline = "tree: 6 of 11 documents are not in the tree"
    assert (tree["n_documents"], tree["n_left_out"]) == (5, 6)
    named = {item.split(":", 1)[0].split(" (")[0]: item for item in tree["problems"]["items"]}
    assert set(named) | in_tree == set(docs["doc_id"].to_list()) and not set(named) & in_tree
    for doc_id, message in expected.items():
        assert message in named[doc_id] and "not parsed" in named[doc_id], named[doc_id]
    assert run_json(result.run_dir)["problem_items"][headline] == tree["problems"]["items"]
    assert end[1].startswith(headline + ":") and all(f"\n    {d} (" in end[1] for d in expected if d != "gone2024")

    # the readable documents give exactly the blocks of the clean corpus; the decodable
    # latin-1 file is used; all questions are answered as before
    blocks = table(result, "parse", "blocks")
    good = blocks.filter(pl.col("doc_id").is_in(SAMPLE_IDS))
    assert good.equals(table(baseline, "parse", "blocks"))
    latin = blocks.filter(pl.col("doc_id") == "latin2024")["text"].to_list()
    assert latin == ["Caf\u00e9 cooling: the chiller ran at 12 \u00b0C for 40 days."]
    sub = pl.read_csv(result.run_dir / "submission.csv", infer_schema=False)
    assert sub.equals(pl.read_csv(baseline.run_dir / "submission.csv", infer_schema=False))
    assert result.summary("score")["score"] == baseline.summary("score")["score"]


def _metadata(tmp_path: Path, extra_rows: list[str], header: str | None = None) -> Path:
    root = tmp_path / "corpus"
    shutil.copytree(SAMPLE, root)
    lines = (root / "metadata.csv").read_text(encoding="utf-8").rstrip("\n").split("\n")
    if header is not None:
        lines = [header] + [",".join(line.split(",")[:2]) for line in lines[1:]]
    (root / "metadata.csv").write_text("\n".join(lines + extra_rows) + "\n", encoding="utf-8")
    return root


@pytest.mark.parametrize(
    "rows, header, message",
    [
        (["mehta2022,paper,Again,2022,c,u"], None,
         r"metadata.csv: duplicate id 'mehta2022' in rows 3 and 5 of metadata; ids must be unique"),
        ([",paper,No id,2022,c,u"], None, r"metadata.csv: row 5 of metadata has an empty 'id'; give every"),
        (["../evil,paper,Escape,2022,c,u"], None,
         r"metadata.csv: row 5 of metadata has id '../evil', which contains '/'; document ids may "
         r"use only letters.*rename the id and its file"),
        (["#frag,paper,Hash,2022,c,u"], None, r"row 5 of metadata has id '#frag', which contains '#'"),
        ([], "id,type", r"metadata.csv: metadata lacks column\(s\) \['title', 'year', 'citation', 'url'\]"),
    ],
    ids=["duplicate", "empty-id", "path-traversal", "hash", "missing-columns"],
)
def test_metadata_faults_stop_the_run_before_any_work(tmp_path, rows, header, message):
    corpus = _metadata(tmp_path, rows, header)
    # a file the "../evil" row would point at, outside the corpus
    (tmp_path / "evil.pdf").write_bytes((SAMPLE / "pdfs" / "okafor2023.pdf").read_bytes())
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(StageError, match=message) as err:
        run_inprocess(tmp_path, corpus=corpus)
    assert str(err.value).startswith("stage 'parse': ")
    assert isinstance(err.value, ConfigError)  # scripts/run.py prints it without a traceback
    record = run_json(tmp_path / "run")
    assert record["status"] == "failed" and record["stages"] == {}
    assert record["failed_stage"] == "parse"
    assert re.search(message, record["error"])
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    created = [p for p in after if p not in before]
    assert all(p.parts[0] in ("cache", "run") for p in created), created
    assert not (tmp_path / "cache" / "parse").exists() or not any(
        (tmp_path / "cache" / "parse").glob("*/manifest.json"))


@pytest.mark.parametrize(
    "content, message",
    [
        ("id,question\nq1,What?\n",
         r"questions lacks column\(s\) \['answer_unit'\]; found \['id', 'question'\]"),
        ("id,question,answer_unit\nq1,What?,W\nq1,Why?,W\n",
         r"duplicate id 'q1' in rows 1 and 2 of questions; ids must be unique"),
        ("id,question,answer_unit\nq1,What?,W\nq2,  ,W\n",
         r"row 2 \(id 'q2'\) has an empty question; write the question or delete the row"),
        ("id,question,answer_unit\n,What?,W\n", r"row 1 of questions has an empty 'id'"),
        ("", r"questions file is empty"),
    ],
    ids=["missing-column", "duplicate-id", "empty-question", "empty-id", "empty-file"],
)
def test_questions_csv_faults_name_file_and_row(tmp_path, content, message):
    path = tmp_path / "q.csv"
    path.write_text(content, encoding="utf-8")
    if not content:
        # a file with no header cannot give the task's columns: refused when the config is
        # composed, before any stage runs (kohaku.tasks.whole)
        with pytest.raises(CorpusError, match=message) as err:
            run_inprocess(tmp_path, f"corpus.questions={path}", "stages=[questions]")
        assert str(path) in str(err.value) and not (tmp_path / "cache").exists()
        return
    with pytest.raises(StageError, match=message) as err:
        run_inprocess(tmp_path, f"corpus.questions={path}", "stages=[questions]")
    assert str(path) in str(err.value) and "stage 'questions'" in str(err.value)


def test_non_utf8_questions_are_read_with_a_recorded_warning(tmp_path):
    text = (SAMPLE / "questions.csv").read_text(encoding="utf-8").replace(
        "in degrees Celsius?", "in \u00b0C (degrees Celsius)?")
    path = tmp_path / "q.csv"
    path.write_bytes(text.encode("cp1252"))
    result = run_inprocess(tmp_path, f"corpus.questions={path}", "stages=[questions]")
    warnings = result.summary("questions")["warnings"]
    assert len(warnings) == 1 and str(path) in warnings[0]
    assert "not valid UTF-8" in warnings[0] and "cp1252" in warnings[0]
    questions = table(result, "questions", "questions")
    assert questions.height == 11
    assert questions.filter(pl.col("qid") == "q002")["question"].item().endswith(
        "in \u00b0C (degrees Celsius)?")


def test_malformed_solution_ref_lists_are_counted_and_the_other_rows_score_as_before(
        tmp_path, baseline, caplog):
    lines = (SAMPLE / "solutions.csv").read_text(encoding="utf-8").split("\n")
    i = next(n for n, line in enumerate(lines) if line.startswith("q007,"))
    assert "['mehta2022']" in lines[i]
    lines[i] = lines[i].replace("['mehta2022']", "\"['mehta2022'\"", 1)  # unclosed list
    path = tmp_path / "solutions.csv"
    path.write_text("\n".join(lines), encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        result = run_inprocess(tmp_path, f"corpus.solutions={path}")
    summary = result.summary("score")
    assert summary["n_malformed_refs"] == 1
    assert summary["warnings"][0].startswith(
        "1 malformed ref list(s) read as one token each (write them as ['id1','id2']): ")
    assert f"{path} row 7 (id 'q007'), column 'ref_id': \"['mehta2022'\"" in summary["warnings"][0]
    assert "score: 1 malformed ref lists" in run_json(result.run_dir)["problems"]
    assert "score: 1 malformed ref lists" in caplog.text
    scores = table(result, "score", "scores")
    before = table(baseline, "score", "scores")
    others = pl.col("qid") != "q007"
    assert scores.filter(others).select("qid", "value_ok", "ref_score", "na_ok").equals(
        before.filter(others).select("qid", "value_ok", "ref_score", "na_ok"))
    q7 = scores.filter(~others).row(0, named=True)
    assert q7["ref_score"] == 0.0 and q7["value_ok"] == before.filter(~others)["value_ok"].item()


# ------------------------------------------------------------------ through scripts/run.py


def _run_script(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(REPO / "scripts" / "run.py"), f"cache.dir={tmp_path / 'cache'}",
           f"hydra.run.dir={tmp_path / 'run'}", "llm=fake", "embed.model=hash:64", *args]
    return subprocess.run(cmd, cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=120)


def test_config_typo_reaches_the_user_with_the_key_and_a_nonzero_exit(tmp_path):
    proc = _run_script(tmp_path, "retrieve.top_kk=3")
    assert proc.returncode != 0
    assert "Could not override 'retrieve.top_kk'" in proc.stderr
    assert "Key 'top_kk' not in 'RetrieveConfig'" in proc.stderr  # the group's schema
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "cache").exists()  # nothing ran


def test_added_unknown_key_fails_naming_it_and_the_valid_keys(tmp_path):
    proc = _run_script(tmp_path, "+retrieve.top_kk=3", "stages=[retrieve]")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-2000:]
    assert "ERROR kohaku" in out
    assert "stage 'retrieve': unknown key(s) retrieve.top_kk; valid keys:" in out
    assert "top_k" in out.split("valid keys:")[1]
    assert "Traceback" not in out
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["status"] == "failed" and "retrieve.top_kk" in record["error"]
    assert record["stages"]["index"]["cache_hit"] is False  # the stages before it are kept


def test_corpus_error_through_scripts_run_is_one_clear_line(tmp_path):
    corpus = _metadata(tmp_path, ["mehta2022,paper,Again,2022,c,u"])
    proc = _run_script(tmp_path, f"corpus.root={corpus}")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-2000:]
    assert "Traceback" not in out
    assert (f"stage 'parse': {corpus / 'metadata.csv'}: duplicate id 'mehta2022' in rows 3 and 5 "
            "of metadata; ids must be unique") in out

