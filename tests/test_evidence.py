"""Evidence rescoring (kohaku/retrieval/evidence.py): each rule on hand-made cases, and each
weight shown to change an order (a rule that cannot change one is a defect)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from kohaku.core.config import ConfigError, build
from kohaku.retrieval.evidence import (
    EvidenceConfig,
    EvidenceScorer,
    doc_mentions,
    fold,
    has_unit_number,
    numbers,
    question_entities,
    terms,
    unit_aliases,
    unit_followers,
)
from kohaku.retrieval.retrieve import RetrieveConfig
from kohaku.core.tokens import count_tokens
from kohaku.ingest.tree.model import TreeView

# ----------------------------------------------------------------------------------- units


@pytest.mark.parametrize("unit, expected, absent", [
    ("percent", {"%", "percent", "percentage"}, {"kwh"}),
    ("tCO2e", {"tco2e", "tons", "tonnes", "metric tons"}, {"kg"}),
    ("USD per hour", {"usd", "$", "dollars"}, {"hours"}),
    ("data centers", {"data centers", "data"}, {"%"}),
    ("MWh", {"mwh", "megawatt-hours"}, {"kwh", "gwh"}),
    ("kg/GPU", {"kg/gpu", "kg", "kilograms"}, {"tons"}),
])
def test_unit_aliases_hold_the_unit_and_its_synonyms(unit, expected, absent):
    aliases = unit_aliases(unit)
    assert expected <= aliases
    assert not (absent & aliases)


@pytest.mark.parametrize("unit", ["is_blank", "", None, "N/A"])
def test_blank_answer_units_have_no_aliases(unit):
    assert unit_aliases(unit) == frozenset()


@pytest.mark.parametrize("text, unit, found", [
    ("AWS increased the number of data centers from 20 to 24 data centers.", "data centers", True),
    ("AWS ran 24 sites for 12 hours.", "data centers", False),
    ("Reuse rose by 45% in 2023.", "percent", True),
    ("Reuse rose by 45 percent.", "percent", True),
    ("The H20 costs $4.63 an hour.", "USD per hour", True),
    ("The H20 costs 4.63 an hour.", "USD per hour", False),
    ("Training produced 4.3 net tCO2e.", "tCO2e", True),  # one word between number and unit
    ("Training produced 4.3 of the total tCO2e.", "tCO2e", False),  # too far
    ("tCO2e is a unit of emissions.", "tCO2e", False),  # no number
    ("as measured in [12] MWh terms", "MWh", False),  # a citation marker is no number
    ("emitted 178.97 kg of 𝐶𝑂2𝑒𝑞", "kg CO2eq", True),  # math italics fold to plain letters
    ("A 3× speed-up", "multiplier", True),
    ("a 10x gain", "multiplier", True),
])
def test_a_number_followed_by_the_asked_unit(text, unit, found):
    assert has_unit_number(text, unit_aliases(unit)) is found


def test_numbers_skip_citation_markers_and_keep_thousands():
    got = [m.group(0) for m in numbers("In [3], 1,287 MWh and 0.5 kg; see [12].")]
    assert got == ["1,287", "0.5"]


def test_followers_mark_texts_with_numbers():
    assert "#" in unit_followers("it took 3 days")
    assert "#" not in unit_followers("no number here")
    assert {"days", "#"} <= unit_followers("it took 3 days")


def test_fold_turns_pdf_math_letters_into_plain_lowercase():
    assert fold("𝐶𝑂2𝑒𝑞 ﬁne") == "co2eq fine"


# -------------------------------------------------------------------------------- entities

def test_question_entities_are_names_numbers_and_quotes():
    ents = question_entities("In 2023, what score did the JetMoE-8B model get on GSM8k, "
                             "per the 'Power Hungry Processing' study and the DEA analysis?")
    assert ents[:1] == ["power hungry processing"]
    assert {"2023", "jetmoe-8b", "gsm8k", "dea"} <= set(ents)
    assert not {"what", "score", "model", "in", "the"} & set(ents)


def test_question_entities_of_a_plain_question_are_empty():
    assert question_entities("How much water do data centers use for cooling?") == []


TITLES = {
    "luccioni2024": "Power Hungry Processing: Watts Driving the Cost of AI Deployment?",
    "chen2024": "Efficient Heterogeneous Large Language Model Decoding with Model-Attention Disaggregation",
    "li2025b": "Making AI Less Thirsty: Uncovering and Addressing the Secret Water Footprint of AI Models",
}


@pytest.mark.parametrize("question, named", [
    ("According to Chen et al. (2025), what is the price per hour for an NVIDIA H20?", {"chen2024"}),
    ("In the 'Power Hungry Processing' (2024) study, how many models were sampled?", {"luccioni2024"}),
    ("What is the secret water footprint of AI models, uncovering how thirsty they are?", {"li2025b"}),
    ("How much did Chen spend?", set()),  # a surname alone is not a citation
    ("How much water does training use?", set()),
])
def test_doc_mentions_by_title_quote_or_author(question, named):
    assert doc_mentions(question, TITLES) == named


def test_terms_are_stemmed_content_words():
    assert terms("The data centers were cooling") == {"data", "center", "cool"}


# --------------------------------------------------------------------------------- scoring

CORPUS = {
    "alpha": [
        ("Water", [
            ["Data centers use water for cooling.", "Cooling towers evaporate water."],
            ["Table 2: water per request by state", "Arizona 1.2 4.9 16.7", "Texas 0.9 3.1 12.0"],
        ]),
        ("Energy", [["Training used 1,287 MWh of electricity.", "The grid was coal heavy."]]),
    ],
    "beta": [
        ("Cost", [["The H20 rents for $4.63 per hour.", "Prices change often.",
                   "GPUs draw power."]]),
    ],
}


def make_tree() -> pl.DataFrame:
    rows = []

    def add(node_id, parent, level, kind, order, section, text):
        rows.append(dict(node_id=node_id, doc_id=node_id.split("#")[0], parent_id=parent,
                         level=level, kind=kind, order=order, page=1, section=section, text=text,
                         n_tokens=count_tokens(text), block_kind="text"))

    titles = {"alpha": "Water and energy of data centers", "beta": "GPU rental prices"}
    for doc, sections in CORPUS.items():
        add(doc, None, 0, "document", 0, "", titles[doc])
        for si, (title, paras) in enumerate(sections, 1):
            sid = f"{doc}#s{si}"
            add(sid, doc, 1, "section", si, title, title)
            for pi, sents in enumerate(paras, 1):
                pid = f"{sid}.p{pi}"
                add(pid, sid, 2, "paragraph", pi, title, " ".join(sents))
                for ti, s in enumerate(sents, 1):
                    add(f"{pid}.t{ti}", pid, 3, "sentence", ti, title, s)
    return pl.DataFrame(rows, schema_overrides={"parent_id": pl.String})


NODES = make_tree()
VIEW = TreeView(NODES)
ROW = {nid: i for i, nid in enumerate(NODES["node_id"].to_list())}
ID = {i: nid for nid, i in ROW.items()}
SCORER = EvidenceScorer.from_view(VIEW)
OFF = dict(rank_weight=0.0, dense_weight=0.0, term_weight=0.0, context_weight=0.0,
           window_weight=0.0, entity_weight=0.0, unit_weight=0.0, number_weight=0.0,
           doc_weight=0.0, doc_leaves=0, leaves=False, page_weight=0.0, count_weight=0.0,
           heading_weight=0.0)


def order(question, unit, ids, scorer=SCORER, qvec=None, **weights):
    cfg = EvidenceConfig(pool=len(ids), **{**OFF, "rank_weight": 0.01, **weights})
    return [ID[r] for r in scorer.rescore(question, unit, [ROW[i] for i in ids], cfg, qvec)]


def test_with_every_weight_off_the_order_is_kept():
    ids = ["alpha#s1.p1.t2", "alpha#s2.p1.t1", "beta#s1.p1.t1"]
    assert order("How much electricity did training use?", "MWh", ids, rank_weight=0.0) == ids


def test_term_rule_moves_the_sentence_with_the_question_terms_up():
    ids = ["alpha#s1.p1.t2", "beta#s1.p1.t2", "alpha#s2.p1.t1"]
    q = "How much electricity did training use?"
    assert order(q, "is_blank", ids)[0] == "alpha#s1.p1.t2"
    assert order(q, "is_blank", ids, term_weight=1.0)[0] == "alpha#s2.p1.t1"


def test_rare_terms_weigh_more_than_common_ones():
    # "water" is in 4 leaves, "evaporate" in one: the sentence with the rare term wins
    ids = ["alpha#s1.p1.t1", "alpha#s1.p1.t2"]
    assert order("Which towers evaporate water?", None, ids, term_weight=1.0)[0] == "alpha#s1.p1.t2"
    f = SCORER.features("Which towers evaporate water?", None, [ROW[i] for i in ids])
    assert f["term"][1] > f["term"][0] > 0


def test_context_rule_lifts_a_table_row_by_its_paragraph():
    # "Arizona 1.2 4.9 16.7" shares only "arizona" with the question; its paragraph (the
    # table) holds "water" and "request"
    ids = ["beta#s1.p1.t2", "alpha#s1.p2.t2"]
    q = "How much water per request in Arizona?"
    assert order(q, None, ids)[0] == "beta#s1.p1.t2"
    assert order(q, None, ids, context_weight=1.0)[0] == "alpha#s1.p2.t2"


def test_window_rule_uses_the_neighbouring_leaves():
    ids = ["beta#s1.p1.t3", "beta#s1.p1.t2"]  # t2's neighbours hold H20 and power
    q = "What does the H20 rent for?"
    assert order(q, None, ids)[0] == "beta#s1.p1.t3"
    assert order(q, None, ids, window_weight=1.0)[0] == "beta#s1.p1.t2"


def test_unit_rule_prefers_a_number_in_the_asked_unit():
    ids = ["alpha#s1.p2.t3", "beta#s1.p1.t1"]  # Texas row (numbers, no $) vs "$4.63 per hour"
    q = "What is the price?"
    assert order(q, "USD per hour", ids)[0] == "alpha#s1.p2.t3"
    assert order(q, "USD per hour", ids, unit_weight=1.0)[0] == "beta#s1.p1.t1"


def test_number_rule_only_for_numeric_answers():
    ids = ["alpha#s1.p1.t1", "alpha#s2.p1.t1"]  # no number vs 1,287 MWh
    assert order("How much?", "MWh", ids, number_weight=1.0)[0] == "alpha#s2.p1.t1"
    assert order("How much?", "is_blank", ids, number_weight=1.0)[0] == "alpha#s1.p1.t1"


def test_entity_rule_prefers_the_named_thing():
    ids = ["alpha#s2.p1.t1", "beta#s1.p1.t1"]
    q = "What does an H20 cost?"
    assert order(q, None, ids)[0] == "alpha#s2.p1.t1"
    assert order(q, None, ids, entity_weight=1.0)[0] == "beta#s1.p1.t1"


def test_entity_rule_counts_the_paragraph_so_table_rows_get_their_header():
    f = SCORER.features("What does an H20 cost?", None,
                        [ROW["beta#s1.p1.t3"], ROW["alpha#s2.p1.t1"]])
    assert list(f["entity"]) == [1.0, 0.0]  # "GPUs draw power." sits in the H20 paragraph


def test_doc_rule_prefers_the_document_the_question_names():
    ids = ["alpha#s2.p1.t2", "beta#s1.p1.t2"]
    q = "According to the GPU rental prices report, how stable are they?"
    scorer = EvidenceScorer.from_view(VIEW)
    scorer.doc_titles = {"alpha": "Water and energy of data centers",
                         "beta": "GPU rental prices report for clouds"}
    assert order(q, None, ids, scorer=scorer)[0] == "alpha#s2.p1.t2"
    assert order(q, None, ids, scorer=scorer, doc_weight=1.0)[0] == "beta#s1.p1.t2"


def test_dense_rule_follows_the_question_vector():
    vectors = np.zeros((NODES.height, 2), np.float32)
    vectors[ROW["alpha#s2.p1.t2"]] = [1, 0]
    vectors[ROW["alpha#s2.p1.t1"]] = [0, 1]
    scorer = EvidenceScorer.from_view(VIEW, vectors)
    ids = ["alpha#s2.p1.t2", "alpha#s2.p1.t1"]
    q = np.array([0, 1], np.float32)
    assert order("x", None, ids, scorer=scorer, qvec=q)[0] == "alpha#s2.p1.t2"
    assert order("x", None, ids, scorer=scorer, qvec=q, dense_weight=1.0)[0] == "alpha#s2.p1.t1"


def test_rank_prior_keeps_the_fused_order_among_equals():
    ids = ["alpha#s1.p1.t1", "alpha#s1.p1.t2", "beta#s1.p1.t2"]
    assert order("unrelated words", None, ids, rank_weight=1.0) == ids


def test_only_the_pool_is_rescored_and_the_rest_keeps_its_place():
    ids = [ROW[i] for i in ("beta#s1.p1.t2", "alpha#s2.p1.t1", "beta#s1.p1.t3", "alpha#s2.p1.t2")]
    cfg = EvidenceConfig(pool=2, keep_tail=True, **{**OFF, "term_weight": 1.0})
    got = SCORER.rescore("How much electricity did training use?", None, ids, cfg)
    assert got == [ids[1], ids[0], ids[2], ids[3]]


def test_doc_leaves_pool_the_table_row_no_search_returned():
    q = "How much water per request in Arizona?"
    pool = [ROW["alpha#s1.p1.t1"]]
    extra = SCORER.doc_leaf_candidates(q, pool, n_docs=1, share=0.3)
    assert ROW["alpha#s1.p2.t2"] in extra  # Arizona row, by its own and its table's terms
    assert all(NODES["doc_id"][r] == "alpha" for r in extra)
    assert ROW["alpha#s1.p1.t1"] not in extra  # already pooled
    cfg = EvidenceConfig(pool=5, **{**OFF, "term_weight": 1.0, "context_weight": 1.0,
                                    "doc_leaves": 1})
    got = [ID[r] for r in SCORER.rescore(q, None, pool, cfg)]
    assert got.index("alpha#s1.p2.t2") < got.index("alpha#s1.p1.t1")
    cfg_off = EvidenceConfig(pool=5, **{**OFF, "term_weight": 1.0, "context_weight": 1.0})
    assert SCORER.rescore(q, None, pool, cfg_off) == pool


def test_leaves_replace_a_paragraph_by_its_sentences_at_its_place():
    pool = [ROW["alpha#s2.p1"], ROW["alpha#s1.p1.t1"]]
    cfg = EvidenceConfig(pool=5, **{**OFF, "rank_weight": 1.0, "leaves": True})
    got = [ID[r] for r in SCORER.rescore("x", None, pool, cfg)]
    assert got == ["alpha#s2.p1.t1", "alpha#s2.p1.t2", "alpha#s1.p1.t1"]


def test_config_is_checked_and_nested_in_retrieve():
    cfg = build(RetrieveConfig, {"evidence": {"pool": 10, "unit_weight": 2.0}}, "retrieve")
    assert cfg.evidence.pool == 10 and cfg.evidence.unit_weight == 2.0 and cfg.evidence.enabled
    assert not build(RetrieveConfig, {"evidence": {"pool": 0}}, "retrieve").evidence.enabled
    with pytest.raises(ConfigError, match="evidence.pool=-1"):
        build(RetrieveConfig, {"evidence": {"pool": -1}}, "retrieve")
    with pytest.raises(ConfigError, match=r"retrieve\.evidence\.poool"):
        build(RetrieveConfig, {"evidence": {"poool": 3}}, "retrieve")


def test_without_keep_tail_the_ranking_ends_with_the_pool():
    ids = [ROW[i] for i in ("beta#s1.p1.t2", "alpha#s2.p1.t1", "beta#s1.p1.t3", "alpha#s2.p1.t2")]
    cfg = EvidenceConfig(pool=2, **{**OFF, "term_weight": 1.0})
    assert SCORER.rescore("How much electricity did training use?", None, ids, cfg) == [ids[1], ids[0]]
