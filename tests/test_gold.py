"""Gold evidence (kohaku.retrieval.gold): reading CSV and JSONL gold files, page bases, the
errors that name file, row and column, page checks against the documents, and the recall of a
retrieve stage's contexts (doc, page, page±1, evidence text)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from kohaku.retrieval.gold import (CONTAINMENT, GoldError, GoldFileNotFound, GoldSpec,
                                   check_gold_pages, gold_recall, gold_summary, read_gold,
                                   recall_summary, text_containment)

from test_retrieve import NODES

FB = GoldSpec(file="evidence.csv", qid="financebench_id", doc="doc_name", page="page",
              page_base=0, text="evidence_text")


def write_csv(path: Path, rows: list[dict]) -> Path:
    pl.DataFrame(rows).write_csv(path)
    return path


def test_read_gold_csv_zero_based_pages(tmp_path: Path):
    write_csv(tmp_path / "evidence.csv", [
        {"financebench_id": "fb1", "doc_name": "alpha", "page": "0", "evidence_text": "Water use"},
        {"financebench_id": "fb1", "doc_name": "alpha", "page": "1", "evidence_text": "Energy"},
        {"financebench_id": "fb2", "doc_name": "beta", "page": "", "evidence_text": ""},
    ])
    gold = read_gold(FB, tmp_path)
    assert gold.columns[:4] == ["qid", "doc_id", "page", "text"]
    assert gold.schema["page"] == pl.Int64
    assert gold.rows() == [("fb1", "alpha", 1, "Water use", 1), ("fb1", "alpha", 2, "Energy", 2),
                           ("fb2", "beta", None, None, 3)]


def test_read_gold_doc_lists_and_jsonl(tmp_path: Path):
    # WattBot-style solutions: the ref_id cell holds a list; is_blank names no document
    write_csv(tmp_path / "solutions.csv", [
        {"id": "q1", "ref_id": "['alpha', 'beta']"}, {"id": "q2", "ref_id": "is_blank"},
        {"id": "q3", "ref_id": "beta"}])
    gold = read_gold(GoldSpec(file="solutions.csv"), tmp_path)
    assert gold.select("qid", "doc_id").rows() == [("q1", "alpha"), ("q1", "beta"), ("q3", "beta")]
    assert gold["page"].null_count() == 3
    lines = [{"qid": "a", "docs": ["alpha"], "p": 3, "t": "x y"}, {"qid": "b", "docs": "beta", "p": 1}]
    (tmp_path / "g.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    gold = read_gold(GoldSpec(file="g.jsonl", qid="qid", doc="docs", page="p", text="t"), tmp_path)
    assert gold.rows() == [("a", "alpha", 3, "x y", 1), ("b", "beta", 1, None, 2)]
    assert read_gold(GoldSpec(), tmp_path).height == 0  # file None: no gold


def test_read_gold_errors_name_file_row_and_column(tmp_path: Path):
    write_csv(tmp_path / "evidence.csv", [
        {"financebench_id": "fb1", "doc_name": "alpha", "page": "2", "evidence_text": "t"}])
    with pytest.raises(GoldError, match=r"evidence.csv: gold evidence lacks column\(s\) 'pg' \(task.gold.page\)"):
        read_gold(GoldSpec(file="evidence.csv", qid="financebench_id", doc="doc_name", page="pg"),
                  tmp_path)
    write_csv(tmp_path / "bad.csv", [
        {"id": "q1", "ref_id": "alpha", "page": "1"}, {"id": "q2", "ref_id": "alpha", "page": "0"}])
    with pytest.raises(GoldError, match=r"bad.csv: row 2: page 0 in column 'page' is below the first page 1"):
        read_gold(GoldSpec(file="bad.csv", page="page"), tmp_path)
    write_csv(tmp_path / "bad2.csv", [{"id": "q1", "ref_id": "alpha", "page": "two"}])
    with pytest.raises(GoldError, match=r"bad2.csv: row 1: page 'two'.*not a whole number"):
        read_gold(GoldSpec(file="bad2.csv", page="page"), tmp_path)
    with pytest.raises(GoldFileNotFound, match="nope.csv"):
        read_gold(GoldSpec(file="nope.csv"), tmp_path)
    (tmp_path / "x.jsonl").write_text('{"id": "q1", "ref_id": "a"}\nnot json\n')
    with pytest.raises(GoldError, match=r"x.jsonl: line 2 is not JSON"):
        read_gold(GoldSpec(file="x.jsonl"), tmp_path)


def test_gold_pages_are_checked_against_the_documents(tmp_path: Path):
    write_csv(tmp_path / "evidence.csv", [
        {"financebench_id": "fb1", "doc_name": "alpha", "page": "1", "evidence_text": "t"},
        {"financebench_id": "fb2", "doc_name": "alpha", "page": "3", "evidence_text": "t"}])
    gold = read_gold(FB, tmp_path)
    docs = pl.DataFrame({"doc_id": ["alpha", "beta"], "n_pages": [3, 5]})
    with pytest.raises(GoldError, match=r"evidence.csv: row 2: page 3 of document 'alpha' is outside "
                                        r"the document, which has 3 page\(s\) \(pages counted from 0\)"):
        check_gold_pages(gold, docs, tmp_path / "evidence.csv", page_base=0)
    check_gold_pages(gold, docs.with_columns(pl.lit(4).alias("n_pages")), "f", 0)  # fits
    check_gold_pages(gold, docs.filter(pl.col("doc_id") == "beta"), "f", 0)  # unknown doc: no check


def test_text_containment_rule():
    ctx = "Consolidated Statement of Cash Flows ... Purchases of property, plant and equipment (PP&E) $ (1,577) (1,373)"
    # another extractor's spacing, line breaks and punctuation do not matter
    ev = "Consolidated Statement of Cash Flow s\nPurchases of property, plant and equipment (PP&E)\n \n(1,577) \n(1,373)"
    assert text_containment(ev, ctx) == 1.0
    assert text_containment(ev, "Cash flows from operating activities were 6,439.") < 0.2
    half = "Purchases of property, plant and equipment (PP&E) (1,577). Proceeds from sale of businesses 846."
    assert 0.4 < text_containment(half, ctx) < CONTAINMENT
    assert text_containment("", ctx) == 0.0
    assert text_containment("1,577", ctx) == 1.0 and text_containment("9,999", ctx) == 0.0


def contexts(rows: list[tuple[str, list[str], str]]) -> pl.DataFrame:
    return pl.DataFrame([{"qid": q, "attempt": 0, "context": c, "node_ids": ids,
                          "doc_ids": list(dict.fromkeys(i.split("#")[0] for i in ids))}
                         for q, ids, c in rows])


def test_recall_over_contexts_and_tree_pages():
    """NODES (tests/test_retrieve.py): alpha section 1 on page 1, section 2 on page 2, beta's
    section on page 1. A node counts with every page of its leaves."""
    gold = pl.DataFrame({
        "qid": ["q1", "q1", "q2", "q3", "q4"],
        "doc_id": ["alpha", "alpha", "beta", "alpha", "beta"],
        "page": [2, 3, 1, 3, None],
        "text": ["Training used 1,287 MWh. The grid was coal heavy.", None, "GPT-3 emitted 552 tonnes",
                 None, None],
        "row": [1, 2, 3, 4, 5]}, schema_overrides={"page": pl.Int64})
    ctx = contexts([
        ("q1", ["alpha#s2"], "[ref_id=alpha] Energy\nTraining used 1,287 MWh. The grid was coal heavy."),
        ("q2", ["alpha#s1.p1.t1"], "[ref_id=alpha] Data centers use water for cooling."),
        ("q3", ["alpha#s2.p1.t1"], "[ref_id=alpha] Training used 1,287 MWh."),
        ("q4", ["beta#s1.p1"], "[ref_id=beta] GPT-3 emitted 552 tonnes of CO2."),
    ])
    per = gold_recall(ctx, NODES, gold).sort("qid")
    assert per["doc_hit"].to_list() == [True, False, True, True]
    assert per["page_hit"].to_list() == [True, False, False, None]  # q3: gold page 3, context page 2
    assert per["page_near"].to_list() == [True, False, True, None]
    assert per["page_items"].to_list() == [0.5, 0.0, 0.0, None]
    assert per["text_hit"].to_list() == [True, False, None, None]
    assert per["text_in_doc"].to_list() == [True, True, None, None]  # both texts are in the tree
    s = recall_summary(per)
    assert s["doc_recall"] == 0.75 and s["doc_n"] == 4
    assert s["page_recall"] == round(1 / 3, 4) and s["page_near_recall"] == round(2 / 3, 4)
    assert s["text_recall"] == 0.5 and s["text_n"] == 2 and s["text_ceiling"] == 1.0
    assert gold_summary(ctx, NODES, gold, qids=["q1"])["gold_doc_recall"] == 1.0
    # a question without a context (not retrieved) counts as a miss
    missing = gold_recall(ctx.filter(pl.col("qid") != "q1"), NODES, gold).filter(pl.col("qid") == "q1")
    assert missing["doc_hit"].to_list() == [False] and missing["retrieved"].to_list() == [False]


def test_retrieve_stage_reports_gold_recall_when_the_task_has_gold(tmp_path: Path):
    """The retrieve stage reads task.gold when the config has it (no task group: no figures),
    checks the gold pages against the parsed documents and reports the recall figures."""
    import logging

    from omegaconf import OmegaConf

    from kohaku.runner.services import Services
    from kohaku.runner.stage import StageContext
    from kohaku.stages import retrieve as retrieve_stage
    from test_retrieve import _stage_dirs

    dirs = _stage_dirs(tmp_path, "exact")
    (tmp_path / "parse").mkdir()
    pl.DataFrame({"doc_id": ["alpha", "beta"], "n_pages": [2, 1]}).write_parquet(
        tmp_path / "parse" / "documents.parquet")
    dirs["parse"] = tmp_path / "parse"
    root = tmp_path / "corpus"
    root.mkdir()
    write_csv(root / "evidence.csv", [
        {"financebench_id": "q2", "doc_name": "beta", "page": "0",
         "evidence_text": "Embodied carbon is 463 kg per GPU."},
        {"financebench_id": "q1", "doc_name": "alpha", "page": "0", "evidence_text": "Dry coolers"}])
    base = {"retrieve": {"top_k": 3, "attempts": 1, "max_context_tokens": 200},
            "embed": {"model": "hash:32"}, "reranker": {"kind": "none"},
            "corpus": {"root": str(root)}, "cache": {"dir": str(tmp_path / "cache")}}

    def run(cfg: dict, out: str) -> StageContext:
        (tmp_path / out).mkdir()
        ctx = StageContext(retrieve_stage.STAGE, OmegaConf.create(cfg),
                           {k: v for k, v in dirs.items() if k != "out"}, tmp_path / out,
                           Services(), logging.getLogger("t"))
        retrieve_stage.compute(ctx)
        return ctx

    assert "gold_doc_recall" not in run(base, "o1").summary  # no task.gold: skipped
    gold = {"file": "evidence.csv", "qid": "financebench_id", "doc": "doc_name", "page": "page",
            "page_base": 0, "text": "evidence_text"}
    summary = run({**base, "task": {"gold": gold}}, "o2").summary
    assert summary["gold_questions"] == 2 and summary["gold_doc_n"] == 2
    assert summary["gold_doc_recall"] is not None and summary["gold_page_n"] == 2
    assert retrieve_stage.gold_files(OmegaConf.create({**base, "task": {"gold": gold}})) == [
        root / "evidence.csv"]
    write_csv(root / "evidence.csv", [
        {"financebench_id": "q2", "doc_name": "beta", "page": "1", "evidence_text": "x"}])
    with pytest.raises(GoldError, match=r"row 1: page 1 of document 'beta' is outside the document, "
                                        r"which has 1 page"):
        run({**base, "task": {"gold": gold}}, "o3")
