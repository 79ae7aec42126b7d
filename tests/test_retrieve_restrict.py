"""retrieve.restrict_column: each question searches only the documents its row names (the
single store of FinanceBench), inside the index query, never by dropping hits afterwards."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from kohaku.core.config import ConfigError
from kohaku.retrieval.embedding import EmbedConfig, HashingEncoder, embed_nodes, encode_texts
from kohaku.retrieval.evidence import EvidenceConfig
from kohaku.retrieval.retrieve import (RestrictError, RetrieveConfig, question_documents,
                                       run_retrieval)
from kohaku.retrieval.search import IndexConfig, load_searchers, write_index

from test_retrieve import NODES, QUERIES, make_tree, CORPUS

def questions(doc_q1: str, doc_q2: str) -> pl.DataFrame:
    return pl.DataFrame({"qid": ["q1", "q2"],
                         "question": ["How much water do data centers use for cooling?",
                                      "embodied carbon per GPU"],
                         "answer_unit": ["is_blank", "kg"], "doc_name": [doc_q1, doc_q2]})


def index(tmp_path: Path, nodes: pl.DataFrame = NODES, kind: str = "exact", bm25: bool = True):
    enc = HashingEncoder(64)
    emb = embed_nodes(nodes, enc, EmbedConfig(), None, progress=False)
    folder = tmp_path / f"{kind}-{nodes.height}"
    folder.mkdir()
    write_index(folder, nodes, emb, IndexConfig(kind=kind, levels=[3, 2], bm25=bm25))
    dense, sparse, _ = load_searchers(folder, nodes, None, emb)
    qv = encode_texts(enc, QUERIES["query"].to_list(), "query", None, progress=False)
    return dense, sparse, qv, emb["vector"].rechunk().to_numpy()


def docs_of(node_ids: list[str]) -> set[str]:
    return {n.split("#", 1)[0] for n in node_ids}


@pytest.mark.parametrize("kind", ["exact", "hnsw"])
def test_each_question_searches_only_its_documents(tmp_path: Path, kind: str):
    """q1 (about water, answered in alpha) restricted to beta and q2 (about GPUs, in beta)
    restricted to alpha: every hit, ranked node and context comes from the named document, and
    each query still gets its full top_k per level from that document (no search-and-discard)."""
    dense, sparse, qv, _ = index(tmp_path, kind=kind)
    cfg = RetrieveConfig(top_k=2, attempts=1, max_context_tokens=200, restrict_column="doc_name")
    out = run_retrieval(QUERIES, NODES, qv, dense, sparse, cfg, progress=False,
                        questions=questions("beta", "alpha"))
    hits, ctx = out["hits"], out["contexts"]
    assert docs_of(hits.filter(pl.col("qid") == "q1")["node_id"].to_list()) == {"beta"}
    assert docs_of(hits.filter(pl.col("qid") == "q2")["node_id"].to_list()) == {"alpha"}
    dense_hits = hits.filter(pl.col("source") == "dense")
    per = dense_hits.group_by(["qid", "query_idx", "level"]).len().sort(["qid", "query_idx", "level"])
    # beta has one paragraph: min(top_k, the document's rows of that level)
    assert per.rows() == [("q1", 0, 2, 1), ("q1", 0, 3, 2), ("q1", 1, 2, 1), ("q1", 1, 3, 2),
                          ("q2", 0, 2, 2), ("q2", 0, 3, 2)]
    assert ctx.filter(pl.col("qid") == "q1")["doc_ids"].to_list() == [["beta"]]
    assert ctx.filter(pl.col("qid") == "q2")["doc_ids"].to_list() == [["alpha"]]
    assert docs_of(out["ranking"].filter(pl.col("qid") == "q2")["node_id"].to_list()) == {"alpha"}
    # unrestricted, each question's context starts with the other document
    shared = run_retrieval(QUERIES, NODES, qv, dense, sparse,
                           RetrieveConfig(top_k=2, attempts=1, max_context_tokens=200),
                           progress=False, questions=questions("beta", "alpha"))
    assert shared["contexts"].sort("qid")["doc_ids"].list.first().to_list() == ["alpha", "beta"]


def test_restricted_search_equals_an_index_of_that_document_alone(tmp_path: Path):
    """Dense only, no evidence rescoring: searching alpha within the whole corpus gives the same
    hits, scores and context as an index built from alpha alone (exact search within it)."""
    dense, sparse, qv, vectors = index(tmp_path, kind="hnsw")
    cfg = RetrieveConfig(top_k=3, attempts=2, max_context_tokens=120, bm25_weight=0.0,
                         evidence=EvidenceConfig(pool=0), restrict_column="doc_name")
    qs = questions("alpha", "alpha")
    within = run_retrieval(QUERIES, NODES, qv, dense, sparse, cfg, progress=False, questions=qs,
                           vectors=vectors)
    alone_nodes = make_tree({"alpha": CORPUS["alpha"]})
    d2, s2, qv2, _ = index(tmp_path, alone_nodes, kind="exact")
    alone = run_retrieval(QUERIES, alone_nodes, qv2, d2, s2,
                          RetrieveConfig(top_k=3, attempts=2, max_context_tokens=120,
                                         bm25_weight=0.0, evidence=EvidenceConfig(pool=0)),
                          progress=False, questions=qs)
    cols = ["qid", "attempt", "query_idx", "node_id", "rank"]
    assert within["hits"].select(cols).sort(cols).equals(alone["hits"].select(cols).sort(cols))
    assert within["contexts"]["context"].to_list() == alone["contexts"]["context"].to_list()


def test_a_cell_may_name_several_documents(tmp_path: Path):
    dense, sparse, qv, _ = index(tmp_path)
    cfg = RetrieveConfig(top_k=4, attempts=1, max_context_tokens=400, restrict_column="doc_name")
    out = run_retrieval(QUERIES, NODES, qv, dense, sparse, cfg, progress=False,
                        questions=questions("['alpha', 'beta']", "beta"))
    assert docs_of(out["hits"].filter(pl.col("qid") == "q1")["node_id"].to_list()) == {"alpha", "beta"}
    assert docs_of(out["hits"].filter(pl.col("qid") == "q2")["node_id"].to_list()) == {"beta"}


def test_restriction_errors_name_the_question_and_column():
    corpus = ["alpha", "beta"]
    with pytest.raises(RestrictError, match=r"question 'q2'.*'doc_name'.*\['gamma'\].*not in the corpus"):
        question_documents(questions("alpha", "gamma"), "doc_name", corpus)
    with pytest.raises(RestrictError, match=r"question 'q1'.*names no document"):
        question_documents(questions("", "alpha"), "doc_name", corpus)
    with pytest.raises(ConfigError, match=r"restrict_column='company'.*no such column"):
        question_documents(questions("alpha", "beta"), "company", corpus)
    assert question_documents(questions("alpha", "alpha, beta"), "doc_name", corpus) == {
        "q1": ("alpha",), "q2": ("alpha", "beta")}
    with pytest.raises(ConfigError, match="restrict_column"):
        from kohaku.core.config import build
        build(RetrieveConfig, {"restrict_column": " "}, "retrieve")
