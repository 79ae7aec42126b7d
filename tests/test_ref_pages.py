"""task.references=doc_page: the answers' ref_pages are the cited documents' pages in the context."""

from __future__ import annotations

import polars as pl

from kohaku.answer.voting import with_ref_pages


def test_ref_pages_are_the_cited_documents_pages_in_the_context_of_the_last_attempt() -> None:
    nodes = pl.DataFrame({
        "node_id": ["a", "a#s1", "a#s1.p1", "a#s1.p1.t1", "a#s1.p1.t2", "a#s2", "a#s2.p1", "a#s2.p1.t1",
                    "b", "b#s1", "b#s1.p1", "b#s1.p1.t1"],
        "parent_id": [None, "a", "a#s1", "a#s1.p1", "a#s1.p1", "a", "a#s2", "a#s2.p1",
                      None, "b", "b#s1", "b#s1.p1"],
        "page": [1, 3, 3, 3, 4, 7, 7, 7, 1, 2, 2, 2],
    })
    contexts = pl.DataFrame({
        "qid": ["q1", "q1", "q2"], "attempt": [0, 1, 0],
        # attempt 1 holds a paragraph over pages 3-4, a sentence of page 7 and b's page 2
        "node_ids": [["a#s2.p1.t1"], ["a#s1.p1", "a#s2.p1.t1", "b#s1.p1.t1"], ["b#s1.p1.t1"]],
    })
    generations = pl.DataFrame({"qid": ["q1", "q1", "q2"], "attempt": [0, 1, 0]})
    answers = pl.DataFrame({"qid": ["q1", "q2", "q3"], "ref_id": [["a"], [], ["b"]]},
                           schema={"qid": pl.String, "ref_id": pl.List(pl.String)})
    out = with_ref_pages(answers, generations, contexts, nodes)
    # q1: the last attempt's context, only document a (cited), a paragraph's leaves' pages;
    # q2 cites nothing; q3 has no context at all
    assert out["ref_pages"].to_list() == [["a:3", "a:4", "a:7"], [], []]
