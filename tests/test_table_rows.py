"""Table rows matched with their title and column header (kohaku/ingest/tree/rows.py), the accounting
lexicon (kohaku/retrieval/lexicon.py) in the evidence rescoring and as a planner query, and
table pages first (kohaku/retrieval/pages.py), on hand-made documents: a statement page
outranks a narrative page that mentions the same words without the figures; a question naming
no statement is ranked as before."""

from __future__ import annotations

import polars as pl
import pytest

from kohaku.retrieval.embedding import context_texts
from kohaku.retrieval.evidence import EvidenceConfig, EvidenceScorer
from kohaku.retrieval.lexicon import expansions
from kohaku.ingest.tree.model import NODES_SCHEMA, TreeView
from kohaku.ingest.tree.rows import is_header, is_row, row_prefixes


def _node(node_id, parent, level, order, text, page=1, block_kind="text", section="", doc="acme"):
    kind = ("document", "section", "paragraph", "sentence")[level]
    return {"node_id": node_id, "doc_id": doc, "parent_id": parent, "level": level, "kind": kind,
            "order": order, "page": page, "section": section, "text": text, "n_tokens": len(text.split()),
            "block_kind": block_kind, "section_source": "heading"}


def _filing() -> pl.DataFrame:
    """A filing: an MD&A page that talks about capital expenditures, and the cash flow
    statement page, whose rows (one a shaded 'table' row, one a text row) carry no years."""
    rows = [_node("acme", None, 0, 0, "Acme Corp 2018 10-K", page=None)]
    mdna = "MANAGEMENT'S DISCUSSION AND ANALYSIS"
    rows.append(_node("acme#s1", "acme", 1, 1, mdna, page=20, section=mdna))
    prose = ["Capital expenditures were an important use of cash in 2018 as we invested in plants.",
             "We expect capital spending to continue in the coming year."]
    rows.append(_node("acme#s1.p1", "acme#s1", 2, 1, " ".join(prose), page=20, section=mdna))
    for k, text in enumerate(prose, start=1):
        rows.append(_node(f"acme#s1.p1.t{k}", "acme#s1.p1", 3, k, text, page=20, section=mdna))
    cfs = "CONSOLIDATED STATEMENTS OF CASH FLOWS (in millions)"
    rows.append(_node("acme#s2", "acme", 1, 2, cfs, page=60, section=cfs))
    lines = [("Year Ended December 31, 2018 2017 2016", "text"),
             ("Net cash provided by operating activities | 6,439 | 6,240 | 6,662", "table"),
             ("Purchases of property, plant and equipment (PP&E) (1,577) (1,373) (1,420)", "text"),
             ("Proceeds from sale of PP&E | 262 | 49 | 58", "table")]
    for k, (text, kind) in enumerate(lines, start=1):
        rows.append(_node(f"acme#s2.p{k}", "acme#s2", 2, k, text, page=60, block_kind=kind, section=cfs))
        rows.append(_node(f"acme#s2.p{k}.t1", f"acme#s2.p{k}", 3, 1, text, page=60, block_kind=kind, section=cfs))
    return pl.DataFrame(rows, schema=NODES_SCHEMA)


def test_headers_and_rows():
    assert is_header("Year Ended December 31, 2018 2017 2016")
    assert is_header("2023 | 2022")
    assert not is_header("Net sales rose from 2017 to 2018 by 1,577 and 1,373")   # figures besides the years
    assert not is_header("In 2018 we grew.")                                       # one year
    assert is_row("Purchases of PP&E (1,577) (1,373) (1,420)", "text")
    assert is_row("Total | | ", "table")
    assert not is_row("Capital expenditures were 1,577 million in 2018 as we invested in new plants.", "text")


def test_rows_carry_title_and_header_prose_does_not():
    nodes = _filing()
    prefixes = dict(zip(nodes["node_id"], row_prefixes(nodes)))
    title = "CONSOLIDATED STATEMENTS OF CASH FLOWS (in millions)"
    header = "Year Ended December 31, 2018 2017 2016"
    assert prefixes["acme#s2.p3.t1"] == f"{title} | {header} | "
    assert prefixes["acme#s2.p2.t1"] == f"{title} | {header} | "
    assert prefixes["acme#s2.p1.t1"] == ""          # the header itself
    assert prefixes["acme#s1.p1.t1"] == ""          # prose
    assert prefixes["acme#s2.p3"] == ""             # a paragraph is aggregated from its rows
    texts = dict(zip(nodes["node_id"], context_texts(nodes, rows=True)))
    assert texts["acme#s2.p3.t1"].startswith(title) and texts["acme#s2.p3.t1"].endswith("(1,420)")
    assert context_texts(nodes) == nodes["text"].to_list()   # rows=False: the texts as they are


def test_a_row_that_names_its_years_takes_no_header():
    nodes = _filing().with_columns(
        pl.when(pl.col("node_id") == "acme#s2.p4.t1").then(pl.lit("Proceeds 2018 262 2017 49"))
        .otherwise(pl.col("text")).alias("text"))
    prefixes = dict(zip(nodes["node_id"], row_prefixes(nodes)))
    assert prefixes["acme#s2.p4.t1"] == "CONSOLIDATED STATEMENTS OF CASH FLOWS (in millions) | "


@pytest.mark.parametrize("question, expected", [
    ("What is the FY2018 capital expenditure amount (in USD millions) for 3M? Give a response to the question "
     "by relying on the details shown in the cash flow statement.",
     ["statements of cash flows",
      "statements of cash flows purchases of property plant and equipment capital expenditures"]),
    ("Using the P&L statement, what is the gross margin?",
     ["statements of operations income earnings",
      "statements of operations income gross profit net sales cost of sales"]),
    ("How much energy does training GPT-3 use?", []),
    ("What is the balance sheet total?", ["balance sheets financial position"]),
])
def test_lexicon_expansions(question, expected):
    assert expansions(question) == expected
    assert expansions(question, "none") == []


def _rank(nodes: pl.DataFrame, question: str, cfg: EvidenceConfig) -> list[str]:
    view = TreeView(nodes)
    scorer = EvidenceScorer.from_view(view)
    leaves = [r for r in range(nodes.height) if not view.has_children[r]]
    order = scorer.rescore(question, "USD millions", leaves, cfg)
    return [view.node_id[r] for r in order]


def test_the_statement_row_outranks_the_narrative_that_names_the_same_words():
    nodes = _filing()
    question = ("What is the FY2018 capital expenditure amount (in USD millions) for Acme? Answer from the "
                "cash flow statement.")
    ranked = _rank(nodes, question, EvidenceConfig(lexicon="finance"))
    assert ranked[0] == "acme#s2.p3.t1", ranked
    assert EvidenceConfig().lexicon == "none"   # off unless the task asks for it
    # without the lexicon the narrative sentence, which says "capital expenditures", comes first
    assert _rank(nodes, question, EvidenceConfig(lexicon="none"))[0] == "acme#s1.p1.t1"


def test_a_question_naming_no_statement_is_ranked_as_before():
    nodes = _filing()
    question = "How many plants did Acme invest in?"
    assert expansions(question) == []
    assert _rank(nodes, question, EvidenceConfig(lexicon="finance")) == _rank(nodes, question, EvidenceConfig())


def test_the_lexicon_query_follows_the_question():
    from kohaku.retrieval.planning import PlannerConfig, plan_queries

    questions = pl.DataFrame({"qid": ["a", "b"], "question": ["What was the capex in 2018?", "Who founded Acme?"],
                              "answer_unit": ["", ""]})
    table, _ = plan_queries(questions, PlannerConfig(lexicon="finance"))
    assert table.select("qid", "query_idx", "source").rows() == [("a", 0, "question"), ("a", 1, "lexicon"),
                                                                 ("b", 0, "question")]
    assert table["query"][1] == ("What was the capex in 2018? "
                                 "statements of cash flows purchases of property plant and equipment capital expenditures")
    none, _ = plan_queries(questions, PlannerConfig())   # the default: no lexicon, one query each
    assert none["source"].to_list() == ["question", "question"]


def test_table_pages_first_keeps_prose_and_defers_a_pages_other_rows():
    from kohaku.retrieval.pages import pages_first

    # rows 0-2 on table page A, 3 prose, 4-5 on table page B, 6 on table page C
    page_of = [("d", 1), ("d", 1), ("d", 1), None, ("d", 2), ("d", 2), ("d", 3)]
    ranking = [0, 1, 2, 3, 4, 5, 6]
    assert pages_first(ranking, page_of, "rank") == [0, 3, 4, 6, 1, 2, 5]
    # vote: page A (three rows near the top) before the prose node, page B before C
    assert pages_first(ranking, page_of, "vote", k=1.0) == [0, 4, 3, 6, 1, 2, 5]
    assert pages_first(ranking, page_of, "none") == ranking
    # a page that only the first rows reach (pool) is ordered by those
    assert pages_first([6, 0, 1], page_of, "rank", pool=1) == [6, 0, 1]


def test_the_lexicon_counts_in_the_documents_the_ranking_leads_with():
    """A store of several filings: the lexicon's names score in the first LEXICON_DOCS documents
    of the ranking only, so another company's statement of cash flows is not lifted by them."""
    from kohaku.retrieval.evidence import LEXICON_DOCS

    docs = [f"co{k}" for k in range(LEXICON_DOCS + 1)]
    frames = [_filing().with_columns(pl.col("node_id").str.replace("^acme", d), pl.col("parent_id").str.replace("^acme", d),
                                     pl.lit(d).alias("doc_id")) for d in docs]
    nodes = pl.concat(frames)
    view = TreeView(nodes)
    scorer = EvidenceScorer.from_view(view)
    leaves = [r for r in range(nodes.height) if not view.has_children[r]]
    last = docs[-1]
    row = {d: view.node_id.index(f"{d}#s2.p3.t1") for d in docs}
    # the ranking leads with the first LEXICON_DOCS documents' prose, then the last document's
    # statement row, ranked above the first document's
    prose = [r for r in leaves if view.doc_id[r] != last and "#s1" in view.node_id[r]]
    ranking = prose + [row[last], row[docs[0]]] + [r for r in leaves if r not in set(prose) | set(row.values())]
    f = scorer.features("What were capital expenditures in the cash flow statement?", None, ranking, lexicon="finance")
    lexicon = dict(zip((view.node_id[r] for r in ranking), f["lexicon"]))
    assert lexicon[f"{docs[0]}#s2.p3.t1"] > 0 and lexicon[f"{last}#s2.p3.t1"] > 0   # the feature itself
    order = scorer.rescore("What were capital expenditures in the cash flow statement?", None, ranking,
                           EvidenceConfig(lexicon="finance", lexicon_weight=10.0, rank_weight=0.0))
    got = [view.node_id[r] for r in order]
    assert got.index(f"{last}#s2.p3.t1") > got.index(f"{docs[0]}#s2.p3.t1")


def test_the_lexicon_follows_the_task():
    """planner.lexicon and retrieve.evidence.lexicon are the task's (task.lexicon): FinanceBench
    asks for the finance lexicon, WattBot (the default task) for none, so planner=none plans one
    query per question there; a planner override still wins."""
    from kohaku.runner.pipeline import compose_config

    for task, want in (("wattbot", "none"), ("financebench", "finance")):
        for planner in ("none", "rules"):
            cfg = compose_config([f"task={task}", f"planner={planner}"])
            assert (cfg.task.lexicon, cfg.planner.lexicon, cfg.retrieve.evidence.lexicon) == (want, want, want)
    for task, pages in (("wattbot", 0), ("financebench", 7)):
        assert compose_config([f"task={task}"]).retrieve.spread_pages == pages
    cfg = compose_config(["task=financebench", "planner.lexicon=none"])
    assert (cfg.planner.lexicon, cfg.retrieve.evidence.lexicon) == ("none", "finance")
