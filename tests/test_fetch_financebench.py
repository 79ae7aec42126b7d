"""scripts/fetch_financebench.py on a small FinanceBench-shaped repository (made here): a
checkout and a bare git directory give the same corpus; a missing PDF drops its questions;
--docs keeps the smallest filings; evidence pages are 0-based and checked on the PDF text; the
results/ folder is never read."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("fetch_financebench", REPO / "kohaku" / "tools" / "fetch_financebench.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["fetch_financebench"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


fb = _script()

DOCS = {  # doc_name -> page texts
    "ACME_2022_10K": ["Annual report cover page.", "Revenue was 1,234 million dollars in fiscal 2022.",
                      "Capital expenditure was 56 million dollars."],
    "ACME_2023Q2_10Q": ["Quarterly report.", "Net income for the quarter was 78 million dollars."],
    "GONE_2021_10K": ["never written"],
}


def write_pdf(path: Path, pages: list[str]) -> None:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_font("Helvetica", size=12)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 8, text)
    pdf.output(str(path))


def make_checkout(root: Path) -> Path:
    (root / "data").mkdir(parents=True)
    (root / "pdfs").mkdir()
    (root / "results").mkdir()
    (root / "results" / "model_answers.jsonl").write_text('{"held": "out"}\n')
    questions = [
        {"financebench_id": "fb_1", "company": "Acme", "doc_name": "ACME_2022_10K",
         "question_type": "metrics-generated", "question_reasoning": "Information extraction",
         "domain_question_num": None, "question": "What was Acme's FY2022 revenue?",
         "answer": "$1234.00", "justification": "From the income statement.",
         "dataset_subset_label": "OPEN_SOURCE",
         "evidence": [{"evidence_text": "Revenue was 1,234 million dollars in fiscal 2022.",
                       "doc_name": "ACME_2022_10K", "evidence_page_num": 1,
                       "evidence_text_full_page": "Revenue was 1,234 million dollars in fiscal 2022."},
                      {"evidence_text": "Capital expenditure was 56 million dollars.",
                       "doc_name": "ACME_2022_10K", "evidence_page_num": 2,
                       "evidence_text_full_page": ""}]},
        {"financebench_id": "fb_2", "company": "Acme", "doc_name": "ACME_2023Q2_10Q",
         "question_type": "domain-relevant", "question_reasoning": None, "domain_question_num": "dg1",
         "question": "Net income in Q2?", "answer": "$78 million", "justification": "",
         "dataset_subset_label": "OPEN_SOURCE",
         "evidence": [{"evidence_text": "Net income for the quarter was 78 million dollars.",
                       "doc_name": "ACME_2023Q2_10Q", "evidence_page_num": 1,
                       "evidence_text_full_page": ""}]},
        {"financebench_id": "fb_3", "company": "Gone", "doc_name": "GONE_2021_10K",
         "question_type": "novel-generated", "question_reasoning": None, "domain_question_num": None,
         "question": "Anything?", "answer": "No", "justification": "",
         "dataset_subset_label": "OPEN_SOURCE",
         "evidence": [{"evidence_text": "x", "doc_name": "GONE_2021_10K", "evidence_page_num": 0,
                       "evidence_text_full_page": ""}]},
    ]
    (root / "data" / "financebench_open_source.jsonl").write_text(
        "".join(json.dumps(q) + "\n" for q in questions))
    infos = [{"doc_name": "ACME_2022_10K", "company": "Acme", "gics_sector": "Industrials",
              "doc_type": "10k", "doc_period": 2022, "doc_link": "https://example.org/acme22.pdf"},
             {"doc_name": "ACME_2023Q2_10Q", "company": "Acme", "gics_sector": "Industrials",
              "doc_type": "10q", "doc_period": 2023, "doc_link": "https://example.org/acme23q2.pdf"},
             {"doc_name": "GONE_2021_10K", "company": "Gone", "gics_sector": "Energy",
              "doc_type": "10k", "doc_period": 2021, "doc_link": ""}]
    (root / "data" / "financebench_document_information.jsonl").write_text(
        "".join(json.dumps(d) + "\n" for d in infos))
    for name in ("ACME_2022_10K", "ACME_2023Q2_10Q"):
        write_pdf(root / "pdfs" / f"{name}.pdf", DOCS[name])
    return root


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def check_corpus(out: Path, result: dict) -> None:
    assert result["missing"] == ["GONE_2021_10K"] and result["dropped"] == 1
    meta = read_csv(out / "metadata.csv")
    assert list(meta[0]) == ["id", "type", "title", "year", "citation", "url", "company", "doc_type",
                             "doc_period", "gics_sector"]
    assert [(m["id"], m["title"], m["year"]) for m in meta] == [
        ("ACME_2022_10K", "Acme 2022 10-K", "2022"), ("ACME_2023Q2_10Q", "Acme 2023 Q2 10-Q", "2023")]
    assert sorted(p.name for p in (out / "pdfs").iterdir()) == ["ACME_2022_10K.pdf", "ACME_2023Q2_10Q.pdf"]
    qs = [json.loads(x) for x in (out / "questions.jsonl").read_text().splitlines()]
    assert [q["financebench_id"] for q in qs] == ["fb_1", "fb_2"]
    assert list(qs[0]) == list(fb.QUESTION_FIELDS) and "evidence" not in qs[0]
    ev = read_csv(out / "evidence.csv")
    assert [(e["financebench_id"], e["doc_name"], e["page"]) for e in ev] == [
        ("fb_1", "ACME_2022_10K", "1"), ("fb_1", "ACME_2022_10K", "2"), ("fb_2", "ACME_2023Q2_10Q", "1")]
    # every evidence text is on its 0-based page of the PDF
    assert result["verify"] == {"checked": 3, "page": 3, "page+1": 0, "page-1": 0, "not_found": 0}
    assert not (out / "results").exists()


def test_fetch_from_a_checkout(tmp_path: Path, capsys):
    src = make_checkout(tmp_path / "financebench")
    result = fb.fetch(src, tmp_path / "out")
    check_corpus(tmp_path / "out", result)
    printed = capsys.readouterr().out
    assert "1 PDF(s) missing" in printed and "GONE_2021_10K" in printed
    assert "1 question(s) dropped" in printed and "checked: 3 item(s)" in printed
    # PDFs are hard links to the checkout's files where the filesystem allows
    assert os.path.samefile(tmp_path / "out" / "pdfs" / "ACME_2022_10K.pdf",
                            src / "pdfs" / "ACME_2022_10K.pdf")
    # the kohaku corpus reader takes the metadata
    from kohaku.ingest.corpus import read_metadata

    assert read_metadata(tmp_path / "out" / "metadata.csv")["id"].to_list() == [
        "ACME_2022_10K", "ACME_2023Q2_10Q"]


def test_fetch_from_a_bare_git_directory(tmp_path: Path):
    src = make_checkout(tmp_path / "work")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}
    for cmd in (["git", "init", "-q"], ["git", "add", "."], ["git", "commit", "-qm", "x"]):
        subprocess.run(cmd, cwd=src, check=True, env=env, capture_output=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(src), str(tmp_path / "bare")], check=True,
                   capture_output=True)
    source = fb.Source.open(tmp_path / "bare")
    assert source.git_dir
    result = fb.fetch(tmp_path / "bare", tmp_path / "out")
    check_corpus(tmp_path / "out", result)


def test_subsets_and_the_held_out_results(tmp_path: Path):
    src = make_checkout(tmp_path / "financebench")
    small = fb.fetch(src, tmp_path / "one", n_docs=1, verify=0)
    assert small["docs"] == ["ACME_2023Q2_10Q"] and small["pages"] == {"ACME_2023Q2_10Q": 2}
    assert small["questions"] == 1
    listed = fb.fetch(src, tmp_path / "two", doc_list=["ACME_2022_10K", "GONE_2021_10K"], verify=0)
    assert listed["docs"] == ["ACME_2022_10K"]
    assert fb.fetch(src, tmp_path / "three", max_pages=2, verify=0)["docs"] == ["ACME_2023Q2_10Q"]
    with pytest.raises(SystemExit, match="no filing left"):
        fb.fetch(src, tmp_path / "none", max_pages=1, verify=0)
    with pytest.raises(SystemExit, match="results/ is held out"):
        fb.Source.open(src).read("results/model_answers.jsonl")
    assert fb.select_docs({"a": 5, "b": 3, "c": 3}, 2, None, None) == ["b", "c"]
