"""The question's focus (kohaku/retrieval/focus.py): answer-format instructions recognised by
their form and kept out of the query; the words naming the restricted documents' entity
(kohaku/retrieval/docprior.py DocPrior.named_words) weighted down in the evidence scorer; on
hand-made questions and documents."""

from __future__ import annotations

import polars as pl
import pytest

from kohaku.retrieval.docprior import DocPrior, DocPriorConfig
from kohaku.retrieval.evidence import term_factors, terms
from kohaku.retrieval.focus import clauses, is_instruction, question_focus
from kohaku.retrieval.planning import PlannerConfig, plan_queries


@pytest.mark.parametrize("question, focus, n_instructions", [
    # the instruction clause, the reference to the document and the verb of saying go
    ("Did Acme mention any mergers or acquisitions in the annual report? If there is no mention, "
     "return False.", "Did Acme any mergers or acquisitions?", 3),
    ("According to the 2022 paper by Dodge et al., how many parameters did the model have?",
     "by Dodge et al., how many parameters did the model have?", 1),
    ("What drove operating margin change as of FY2022 for Acme? If operating margin is not a "
     "useful metric for a company like this, then please state that and explain why.",
     "What drove operating margin change as of FY2022 for Acme?", 1),
    ("Assume that you are a public equities analyst. Answer the following question by primarily "
     "using information that is shown in the balance sheet: what is the year end FY2018 net PPNE "
     "for Acme? Answer in USD billions.", "what is the year end FY2018 net PPNE for Acme?", 3),
    ("How many patents did Acme hold at year end? Round your answer to the nearest hundred.",
     "How many patents did Acme hold at year end?", 1),
    ("You are an analyst. Which leadership positions changed at Acme in the period?",
     "Which leadership positions changed at Acme in the period?", 1),
    ("Calculate the inventory turnover for FY2022; if inventory is not meaningful then state that.",
     "Calculate the inventory turnover for FY2022", 1),
    # no instruction: the whole question
    ("What is the total water consumption of the data centers in 2022?",
     "What is the total water consumption of the data centers in 2022?", 0),
    ("If the grid is coal heavy, what is the carbon intensity?",
     "If the grid is coal heavy, what is the carbon intensity?", 0),
    # every clause an instruction: kept whole, so its words still search
    ("Give the total revenue of Acme in 2020.", "Give the total revenue of Acme in 2020.", 0),
])
def test_question_focus(question, focus, n_instructions):
    got = question_focus(question)
    assert got.focus == focus
    assert len(got.instructions) == n_instructions


def test_clauses_split_at_sentences_semicolons_and_a_colon_before_a_question():
    assert clauses("Use the balance sheet: what is X? Answer in millions; round it.") == [
        "Use the balance sheet", "what is X?", "Answer in millions", "round it."]
    assert clauses("Ratio defined as: A / B.") == ["Ratio defined as: A / B."]


@pytest.mark.parametrize("clause, expected", [
    ("If there is no mention, return False.", True),
    ("Answer in USD millions.", True),
    ("Please state the figure in percent.", True),
    ("Otherwise answer N/A.", True),
    ("Approach the question from the point of view of an analyst.", True),
    ("What did the report say about the question of succession?", False),
    ("When did the company acquire Beta, and for how much?", False),
    ("Which segments reported the highest revenue?", False),
])
def test_is_instruction(clause, expected):
    assert is_instruction(clause) is expected


def test_the_planner_queries_the_focus_and_the_lexicon_reads_the_whole_question():
    q = pl.DataFrame({"qid": ["q1"], "question": [
        "What is the FY2018 capital expenditure of Acme? Give a response by relying on the "
        "details shown in the cash flow statement."], "answer_unit": ["is_blank"]})
    queries, _ = plan_queries(q, PlannerConfig(lexicon="finance"))
    assert queries["query"][0] == "What is the FY2018 capital expenditure of Acme?"
    lexicon = queries.filter(pl.col("source") == "lexicon")["query"].to_list()
    assert lexicon and "statements of cash flows" in lexicon[0].lower()
    off, _ = plan_queries(q, PlannerConfig(focus=False))
    assert off["query"][0] == q["question"][0]


META = pl.DataFrame({"id": ["AX_2022", "JJ_2022", "MGM_2022"],
                     "title": ["American Express 2022 10-K", "Johnson & Johnson 2022 10-K",
                               "MGM Resorts 2022 10-K"],
                     "company": ["American Express", "Johnson & Johnson", "MGM Resorts"],
                     "doc_period": ["2022", "2022", "2022"]})


@pytest.mark.parametrize("question, doc, words", [
    ("What drove gross margin change as of FY2022 for American Express?", "AX_2022",
     {"american", "express"}),
    ("What drove gross margin change as of FY2022 for JnJ?", "JJ_2022", {"jnj"}),
    ("Did MGM's revenue grow in 2022?", "MGM_2022", {"mgm"}),
    # a name of another document, or none: nothing
    ("Did MGM's revenue grow in 2022?", "AX_2022", set()),
    ("What drove gross margin change in 2022?", "AX_2022", set()),
])
def test_named_words_are_the_restricted_documents_names(question, doc, words):
    assert DocPrior(META, DocPriorConfig()).named_words(question, [doc]) == words


def test_term_factors_weigh_instructions_and_names_down():
    q = "Which acquisitions did Acme make? If there are none, return False."
    f = term_factors(q, {"acme"}, instruction_weight=0.0, named_weight=0.5)
    assert f == {**dict.fromkeys(terms("there none return False"), 0.0), "acm": 0.5}
    assert term_factors(q, {"acme"}) == {}  # factors 1: nothing weighted


# ------------------------------------------------------------------ hand-made report pages

from kohaku.ingest.tree.model import NODES_SCHEMA, TreeView  # noqa: E402
from kohaku.retrieval.evidence import EvidenceConfig, EvidenceScorer, count_aliases  # noqa: E402


def _report(pages: list[tuple[int, str, list[list[str]], str]]) -> pl.DataFrame:
    """A report: (page, section title, paragraphs of sentences, block kind) per section."""
    def node(node_id, parent, level, order, text, page, section, kind="text"):
        return {"node_id": node_id, "doc_id": "acme", "parent_id": parent, "level": level,
                "kind": ("document", "section", "paragraph", "sentence")[level], "order": order,
                "page": page, "section": section, "text": text, "n_tokens": len(text.split()),
                "block_kind": kind, "section_source": "heading"}

    rows = [node("acme", None, 0, 0, "Acme Corp annual report 2023", None, "")]
    for s, (page, title, paras, kind) in enumerate(pages, start=1):
        sid = f"acme#s{s}"
        rows.append(node(sid, "acme", 1, s, title, page, title))
        for p, sents in enumerate(paras, start=1):
            pid = f"{sid}.p{p}"
            rows.append(node(pid, sid, 2, p, " ".join(sents), page, title, kind))
            for t, text in enumerate(sents, start=1):
                rows.append(node(f"{pid}.t{t}", pid, 3, t, text, page, title, kind))
    return pl.DataFrame(rows, schema=NODES_SCHEMA)


def _ranked(nodes: pl.DataFrame, question: str, cfg: EvidenceConfig | None = None,
            unit: str | None = "is_blank") -> list[str]:
    view = TreeView(nodes)
    leaves = [r for r in range(nodes.height) if not view.has_children[r]]
    return [view.node_id[r] for r in EvidenceScorer.from_view(view).rescore(
        question, unit, leaves, cfg or EvidenceConfig())]


FILLER = [["Revenue grew in every segment during the year.", "Margins were stable."]]


def test_an_answer_format_instruction_changes_no_ranking():
    nodes = _report([
        (2, "Forward-looking statements", [["Risks include mergers, acquisitions, divestitures, "
                                            "litigation and currency movements."]], "text"),
        (5, "Business combinations", [["In March we acquired Beta Labs for $120 million.",
                                       "The acquisition adds diagnostics to our portfolio."]], "text"),
        (9, "Segments", FILLER, "text"),
        (11, "Returns", [["Customers may return products; returns are mentioned in Note 4.",
                          "A false claim is handled by the legal team."]], "text"),
    ])
    asked = "Did Acme make any acquisitions during the year?"
    plain = _ranked(nodes, asked)
    for instruction in ("If there is no mention, return False.", "Answer True or False.",
                        "Respond in one word; if unsure, state that and explain why."):
        assert _ranked(nodes, f"{asked} {instruction}") == plain, instruction
    # without the focus (instruction words weighted as the others) the ranking does change
    off = EvidenceConfig(instruction_weight=1.0)
    assert _ranked(nodes, f"{asked} If there is no mention, return False.", off) != plain


def test_a_count_in_a_sentence_is_found_like_one_in_a_table():
    question = "How many patents does Acme have?"
    assert count_aliases(question) == {"patents", "patent"}
    # a sentence with the same words and another number comes first in document order
    near = (3, "Research and development", [["Acme has patents and trademarks in 14 countries.",
                                              "Patents protect our technology and brands."]], "text")
    prose = _report([near, (4, "Intellectual property", [["Acme has 1,247 patents worldwide.",
                                                          "Our brands are registered."]], "text")])
    table = _report([near, (4, "Intellectual property", [["Patents of Acme | 1,247 | 1,180"],
                                                         ["Trademarks | 310 | 290"]], "table")])
    for nodes in (prose, table):
        assert _ranked(nodes, question)[0] == "acme#s2.p1.t1"
        # without the count feature the two tie on their words and the first in order leads
        assert _ranked(nodes, question, EvidenceConfig(count_weight=0.0))[0] == "acme#s1.p1.t1"
    assert count_aliases("How much revenue did Acme earn?") == frozenset()


def test_did_it_mention_x_ranks_the_page_discussing_x_above_a_page_naming_it():
    question = ("Did Acme mention any mergers or acquisitions in the annual report? If there is "
                "no mention, return False.")
    nodes = _report([
        (2, "Forward-looking statements", [[
            "This annual report contains forward-looking statements.",
            "Risks include mergers, acquisitions, divestitures, litigation and currency movements."]],
         "text"),
        (5, "Business combinations", [
            ["In March Acme acquired Beta Labs for $120 million.",
             "The acquisition of Beta Labs adds diagnostics to our portfolio."],
            ["In June Acme completed its merger with Gamma Inc.",
             "The merger was accounted for as a business combination."]], "text"),
        (9, "Segments", FILLER, "text"),
    ])
    view = TreeView(nodes)
    page = dict(zip(view.node_id, view.page))
    # page support (evidence.page_weight; off by default, docs/design.md): the page whose
    # passages discuss the topic leads
    assert page[_ranked(nodes, question, EvidenceConfig(page_weight=1.0))[0]] == 5
    # the boilerplate sentence names both words; without the page's support it leads
    assert page[_ranked(nodes, question, EvidenceConfig(page_weight=0.0))[0]] == 2
    # a section titled with the topic lifts its page without it (the context feature counts
    # the section title, the heading prior adds it again)
    titled = nodes.with_columns(pl.col("section").str.replace("Business combinations", "Acquisitions"),
                                pl.col("text").str.replace("^Business combinations$", "Acquisitions"))
    assert page[_ranked(titled, question)[0]] == 5
    # and with the whole question as the query ("annual report", "mention" counted) the
    # sentence naming the annual report leads
    assert _ranked(nodes, question, EvidenceConfig(instruction_weight=1.0, page_weight=0.0))[0] == \
        "acme#s1.p1.t1"
