"""retrieve.doc_prior: a question that names its source (company, year, type) searches only
within the documents it names; a question naming nothing is ranked exactly as without it."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from kohaku.retrieval.embedding import EmbedConfig, HashingEncoder, embed_nodes, encode_texts
from kohaku.retrieval.docprior import (DocPrior, DocPriorConfig, normalise, question_priors,
                                       question_quarters, question_years, text_dates)
from kohaku.retrieval.retrieve import RetrieveConfig, run_retrieval
from kohaku.retrieval.search import IndexConfig, load_searchers, write_index

from test_retrieve import make_tree

# near-identical filings of two companies and two years (and a 3M pair)
META = pl.DataFrame({
    "id": ["ACME_2018_10K", "ACME_2019_10K", "GLOBEX_2018_10K", "GLOBEX_2019_10K",
           "3M_2018_10K", "3M_2023Q2_10Q", "JOHNSON_JOHNSON_2022_8K"],
    "type": ["filing"] * 7,
    "title": ["Acme Corp 2018 10-K", "Acme Corp 2019 10-K", "Globex 2018 10-K",
              "Globex 2019 10-K", "3M 2018 10-K", "3M 2023 Q2 10-Q", "Johnson & Johnson 2022 8-K"],
    "year": ["2018", "2019", "2018", "2019", "2018", "2023", "2022"],
    "company": ["Acme Corp", "Acme Corp", "Globex", "Globex", "3M", "3M", "Johnson & Johnson"],
    "doc_type": ["10k", "10k", "10k", "10k", "10k", "10q", "8k"],
    "doc_period": ["2018", "2019", "2018", "2019", "2018", "2023", "2022"],
})


def docs(question: str, **cfg) -> tuple[str, ...] | None:
    return DocPrior(META, DocPriorConfig(**cfg)).documents(question)


def test_company_and_year_pick_the_document():
    assert docs("What was Globex's FY2019 revenue?") == ("GLOBEX_2019_10K",)
    assert docs("According to the 2018 Acme Corp 10-K, what was capex?") == ("ACME_2018_10K",)
    assert docs("What is the FY2018 capital expenditure of 3M?") == ("3M_2018_10K",)


def test_several_years_keep_the_latest_filing():
    assert docs("How did Globex's revenue change from FY2018 to FY2019?") == ("GLOBEX_2019_10K",)
    assert docs("How did Globex's revenue change from FY2018 to FY2019?", latest_year=False) == (
        "GLOBEX_2018_10K", "GLOBEX_2019_10K")
    # the latest year a named document has: 2020 is in no Globex filing
    assert docs("Globex revenue in 2018 vs 2020?") == ("GLOBEX_2018_10K",)


def test_company_only_gets_all_its_documents():
    assert docs("How did Globex fund its buybacks?") == ("GLOBEX_2018_10K", "GLOBEX_2019_10K")
    # a year the corpus lacks for that company narrows nothing
    assert docs("What was ACME CORP's revenue in fiscal 2015?") == ("ACME_2018_10K", "ACME_2019_10K")


def test_nothing_named_no_restriction():
    assert docs("What was the revenue growth in FY2019?") is None
    assert docs("Which segment grew fastest?") is None
    # names are whole words: "acme" inside another word, "globexes" are no match
    assert docs("Did the acmeist movement globexes matter?") is None


@pytest.mark.parametrize("question, expected", [
    ("FY2018 capex", {"2018"}), ("fiscal 2018 capex", {"2018"}), ("in 2018 and 2019", {"2018", "2019"}),
    ("Q2 2023 sales", {"2023"}), ("2023Q2 sales", {"2023"}), ("FY18 sales", {"2018"}),
    ("Q2 FY2023", {"2023"}), ("sold 12,2018 units", set()),
])
def test_year_forms(question, expected):
    assert question_years(question) == expected


def test_quarters_and_types():
    assert question_quarters("Q2 2023") == {"2"} and question_quarters("2023Q2") == {"2"}
    assert question_quarters("in the second quarter of 2023") == {"2"}
    assert docs("3M's Q2 2023 operating margin?") == ("3M_2023Q2_10Q",)
    assert docs("In its 10-Q, what did 3M report?") == ("3M_2023Q2_10Q",)
    assert docs("What did 3M's 10-K say about litigation?") == ("3M_2018_10K",)
    assert normalise("the 10-K and 8 K") == ["the", "10k", "and", "8k"]


@pytest.mark.parametrize("text, expected", [
    ("as of August 30, 2023", {"2023-08-30"}), ("on 30 Sept. 2023", {"2023-09-30"}),
    ("JOHNSON_JOHNSON_2023_8K_dated-2023-08-30", {"2023-08-30"}), ("Acme 8-K 2022_07_01", {"2022-07-01"}),
    ("the 12/31/2022 balance", {"2022-12-31"}), ("May 5 2021 and Jan 2, 2020", {"2021-05-05", "2020-01-02"}),
    ("FY2023 2023Q2 10-K", set()), ("2023-13-40", set()), ("sold 1,234 units in May 2021", set()),
])
def test_date_forms(text, expected):
    assert text_dates(text) == expected


def test_a_date_picks_the_current_report_of_that_day():
    meta = pl.DataFrame({
        "id": ["JJ_2023Q2_EARNINGS", "JJ_2023_8K_dated-2023-08-30", "JJ_2023_8K_dated-2023-05-04"],
        "title": ["Johnson & Johnson 2023 Q2 Earnings", "Johnson & Johnson 2023 8-K 2023-08-30",
                  "Johnson & Johnson 2023 8-K 2023-05-04"],
        "company": ["Johnson & Johnson"] * 3, "doc_period": ["2023"] * 3,
        "doc_type": ["Earnings", "8k", "8k"]})
    prior = DocPrior(meta, DocPriorConfig())
    assert prior.documents("What cash did JnJ realise from the Kenvue exchange, as of August 30, "
                           "2023?") == ("JJ_2023_8K_dated-2023-08-30",)
    assert prior.documents("JnJ news on 4 May 2023?") == ("JJ_2023_8K_dated-2023-05-04",)
    # no date: the year's tie set; a date no document has narrows nothing
    assert len(prior.documents("What did JnJ report in 2023?")) == 3
    assert len(prior.documents("What did JnJ report on June 1, 2023?")) == 3


def test_name_forms():
    assert docs("What did Johnson & Johnson announce?") == ("JOHNSON_JOHNSON_2022_8K",)
    assert docs("What did Johnson and Johnson's 8-K say?") == ("JOHNSON_JOHNSON_2022_8K",)
    assert docs("What did JnJ announce in 2022?") == ("JOHNSON_JOHNSON_2022_8K",)
    assert docs("Is Acme Corp's margin up?") == ("ACME_2018_10K", "ACME_2019_10K")
    assert docs("Is AcmeCorp's margin up?") == ("ACME_2018_10K", "ACME_2019_10K")
    assert docs("3m revenue in 2018") == ("3M_2018_10K",)
    assert docs("What is 33M in 2018?") is None  # 3M is a whole word only
    # an upper-case company word stands for the company (MGM of MGM Resorts), case-sensitively
    meta = pl.DataFrame({"id": ["a", "b"], "title": ["x", "y"], "year": ["2022", "2022"],
                         "company": ["MGM Resorts", "Other"]})
    prior = DocPrior(meta, DocPriorConfig())
    assert prior.documents("What was MGM's EBITDAR?") == ("a",)
    assert prior.documents("The mgm of it") is None


def test_max_docs_and_mode():
    assert docs("How did Globex fund its buybacks?", max_docs=1) is None
    with pytest.raises(ValueError):
        DocPriorConfig(mode="soft").validate()
    assert not DocPriorConfig(mode="off").active and not DocPriorConfig(enabled=False).active


def test_title_fallback_margin():
    meta = pl.DataFrame({"id": ["p1", "p2"], "year": ["2020", "2021"],
                         "title": ["Energy and Policy Considerations for Deep Learning in NLP",
                                   "Carbon Emissions and Large Neural Network Training"]})
    on = DocPriorConfig(title_bm25=True, title_min_score=1.0)
    # a whole title in the question is an entity match, with or without the fallback
    assert DocPrior(meta, DocPriorConfig()).documents(
        "In Energy and Policy Considerations for Deep Learning in NLP, what?") == ("p1",)
    # title words only: the fallback takes the best title when it is clearly ahead
    q = "What do policy considerations of deep learning energy say about NLP?"
    assert DocPrior(meta, DocPriorConfig()).documents(q) is None
    assert DocPrior(meta, on).documents(q) == ("p1",)
    assert DocPrior(meta, DocPriorConfig(title_bm25=True, title_min_score=100.0)).documents(q) is None
    # both titles about equally matched: no restriction
    assert DocPrior(meta, on).documents("energy policy carbon emissions") is None


def test_question_priors_only_questions_that_name():
    q = pl.DataFrame({"qid": ["a", "b"], "question": ["Globex 2018 revenue?", "Any revenue?"]})
    assert question_priors(q, META, DocPriorConfig()) == {"a": ("GLOBEX_2018_10K",)}
    # documents outside the corpus (tree) are never named
    assert question_priors(q, META, DocPriorConfig(), doc_ids=["ACME_2018_10K"]) == {}


# ------------------------------------------------------------------ wired into run_retrieval

SECTIONS = [("Results", [["Revenue was 10 million dollars.", "Capital expenditure rose."],
                         ["Operating margin fell to 5 percent.", "Cash grew."]])]
CORPUS4 = {d: SECTIONS for d in ["ACME_2018_10K", "ACME_2019_10K", "GLOBEX_2018_10K",
                                  "GLOBEX_2019_10K"]}
QUESTIONS = pl.DataFrame({
    "qid": ["named", "company", "none"],
    "question": ["What was Globex's FY2019 revenue?", "What was Acme Corp's capital expenditure?",
                 "What was the operating margin?"],
    "answer_unit": ["is_blank"] * 3,
})


def _setup(tmp_path: Path, kind: str):
    nodes = make_tree(CORPUS4)
    enc = HashingEncoder(64)
    emb = embed_nodes(nodes, enc, EmbedConfig(), None, progress=False)
    folder = tmp_path / kind
    folder.mkdir()
    write_index(folder, nodes, emb, IndexConfig(kind=kind, levels=[3, 2], bm25=True))
    dense, sparse, _ = load_searchers(folder, nodes, None, emb)
    queries = QUESTIONS.select("qid", pl.lit(0, pl.Int64).alias("query_idx"),
                               pl.col("question").alias("query"), pl.lit("question").alias("source"))
    qv = encode_texts(enc, queries["query"].to_list(), "query", None, progress=False)
    return nodes, dense, sparse, queries, qv, emb["vector"].rechunk().to_numpy()


@pytest.mark.parametrize("kind", ["exact", "hnsw"])
def test_run_retrieval_restricts_named_questions_only(tmp_path: Path, kind: str):
    nodes, dense, sparse, queries, qv, vectors = _setup(tmp_path, kind)
    cfg = RetrieveConfig(top_k=4, attempts=1, max_context_tokens=300)
    on = run_retrieval(queries, nodes, qv, dense, sparse, cfg, progress=False,
                       questions=QUESTIONS, vectors=vectors, doc_meta=META)
    off = run_retrieval(queries, nodes, qv, dense, sparse,
                        RetrieveConfig(top_k=4, attempts=1, max_context_tokens=300,
                                       doc_prior=DocPriorConfig(enabled=False)),
                        progress=False, questions=QUESTIONS, vectors=vectors, doc_meta=META)
    hit_docs = lambda out, q: {n.split("#")[0] for n in
                               out["hits"].filter(pl.col("qid") == q)["node_id"].to_list()}
    assert hit_docs(on, "named") == {"GLOBEX_2019_10K"}
    assert hit_docs(on, "company") == {"ACME_2018_10K", "ACME_2019_10K"}
    ctx = on["contexts"].filter(pl.col("qid") == "named")
    assert set(ctx["doc_ids"][0].to_list()) == {"GLOBEX_2019_10K"}
    # the question naming nothing: exactly the prior-off retrieval
    for table in ("hits", "ranking", "contexts"):
        assert on[table].filter(pl.col("qid") == "none").equals(
            off[table].filter(pl.col("qid") == "none")), table
    # mode off and no metadata: the prior-off retrieval for every question
    for cfg2, meta in ((RetrieveConfig(top_k=4, attempts=1, max_context_tokens=300,
                                       doc_prior=DocPriorConfig(mode="off")), META),
                       (cfg, None)):
        same = run_retrieval(queries, nodes, qv, dense, sparse, cfg2, progress=False,
                             questions=QUESTIONS, vectors=vectors, doc_meta=meta)
        assert same["contexts"].equals(off["contexts"])


def test_restrict_column_takes_precedence(tmp_path: Path):
    nodes, dense, sparse, queries, qv, vectors = _setup(tmp_path, "exact")
    q = QUESTIONS.with_columns(pl.lit("ACME_2018_10K").alias("doc_name"))
    out = run_retrieval(queries, nodes, qv, dense, sparse,
                        RetrieveConfig(top_k=4, attempts=1, restrict_column="doc_name"),
                        progress=False, questions=q, vectors=vectors, doc_meta=META)
    assert {n.split("#")[0] for n in out["hits"]["node_id"].to_list()} == {"ACME_2018_10K"}


def test_retrieve_stage_reads_the_corpus_metadata(tmp_path: Path):
    """The stage reads corpus.root/corpus.metadata (a file input of its key) for the prior: a
    question naming a company searches only its document; prior off searches every one."""
    from test_retrieve import _run_stage, _stage_dirs
    from omegaconf import OmegaConf

    from kohaku.stages import retrieve as retrieve_stage

    dirs = _stage_dirs(tmp_path, "exact")
    root = tmp_path / "corpus"
    root.mkdir()
    (root / "metadata.csv").write_text("id,type,title,year,citation,url,company\n"
                                       "alpha,report,Hydro annual report,2024,,,Hydro Inc\n"
                                       "beta,report,GPU annual report,2024,,,GPU\n")
    cfg = {"corpus": {"root": str(root), "metadata": "metadata.csv"}}
    assert retrieve_stage.gold_files(OmegaConf.create(cfg)) == [root / "metadata.csv"]
    tables, _ = _run_stage(tmp_path, dirs, {"kind": "none"}, extra=cfg)
    docs = {n.split("#")[0] for n in tables["hits"].filter(pl.col("qid") == "q2")["node_id"]}
    assert docs == {"beta"}  # "embodied carbon per GPU" names the company GPU
    (dirs["out"]).mkdir(exist_ok=True)
    off, _ = _run_stage(tmp_path, dirs, {"kind": "none"},
                        extra={**cfg, "retrieve": {"doc_prior": {"enabled": False}}})
    assert {n.split("#")[0] for n in off["hits"]["node_id"]} == {"alpha", "beta"}
    # q1 names nothing: the same hits either way
    assert tables["hits"].filter(pl.col("qid") == "q1").equals(
        off["hits"].filter(pl.col("qid") == "q1"))


@pytest.mark.parametrize("question, expected", [
    ("Does AMEX have an improving operating margin profile as of 2022?", ("a",)),
    ("What did FEDEX ship?", ("b",)),
    ("Did Amex grow?", None),          # lower or mixed case: a common word could be one
    ("What is the AMX ratio?", None),  # not a prefix of each word in order
    ("Which AEX fund?", None),         # a + ex, but three capitals are too short to tell
])
def test_clipped_forms_name_the_company(question, expected):
    """An upper-case word made of a prefix of each word of a multi-word company name names it
    ("AMEX" of "American Express"); the words it is made of are the named words."""
    meta = pl.DataFrame({"id": ["a", "b", "c"], "title": ["x", "y", "z"], "year": ["2022"] * 3,
                         "company": ["American Express", "Federal Express Corp", "Best Buy"]})
    prior = DocPrior(meta, DocPriorConfig())
    assert prior.documents(question) == expected
    if expected:
        assert prior.named_words(question, expected) & {"amex", "fedex"}
