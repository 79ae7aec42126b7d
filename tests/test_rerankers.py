"""Model rerankers (kohaku/retrieval/rerankers.py): a tiny cross-encoder built and saved here
(no download), the LLM pointwise/listwise judge through the fake backend, and rerank_rows."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from kohaku.core.config import ConfigError, build
from kohaku.core.errors import KohakuError
from kohaku.llm.fake import FakeBackend
from kohaku.retrieval.rerankers import (
    CrossEncoderReranker,
    LLMReranker,
    RerankerConfig,
    load_reranker,
    parse_listwise,
    parse_pointwise,
    rerank_rows,
)

WORDS = ["the", "h20", "costs", "per", "hour", "water", "cooling", "data", "centers", "use",
         "price", "what", "is", "of", "an", "gpu", "grid", "coal"]


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory) -> Path:
    """A 1-layer BERT sequence classifier (1 label) with a 24-word vocabulary, saved as a
    folder sentence-transformers' CrossEncoder loads offline."""
    torch = pytest.importorskip("torch")
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    folder = tmp_path_factory.mktemp("tiny-ce")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tok = BertTokenizerFast(vocab_file=str(folder / "vocab.txt"), do_lower_case=True)
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1,
                     num_attention_heads=2, intermediate_size=32, max_position_embeddings=64,
                     num_labels=1, initializer_range=0.5)  # logits far apart: a real order
    model = BertForSequenceClassification(cfg).eval()
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def _direct_logits(folder: Path, pairs):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        enc = tok([q for q, _ in pairs], [p for _, p in pairs], padding=True, truncation=True,
                  return_tensors="pt")
        return model(**enc).logits[:, 0].numpy()


PASSAGES = ["water cooling data centers", "the h20 costs per hour", "grid coal",
            "what is the price of an gpu"]


def test_cross_encoder_scores_follow_the_model(tiny_cross_encoder):
    rr = CrossEncoderReranker(RerankerConfig(kind="cross_encoder", model=str(tiny_cross_encoder),
                                             device="cpu"))
    q = "what is the price of the h20 per hour"
    scores = rr.score([(q, PASSAGES), ("water use", PASSAGES[:2])])
    assert [len(s) for s in scores] == [4, 2]
    logits = _direct_logits(tiny_cross_encoder, [(q, p) for p in PASSAGES])
    # the CrossEncoder's activation is monotone: same order as the model's own logits
    assert list(np.argsort(-np.asarray(scores[0]))) == list(np.argsort(-logits))
    assert len(set(np.round(scores[0], 6))) == 4  # four different scores: the order is real


def test_cross_encoder_reranks_the_top_n_only(tiny_cross_encoder):
    rr = load_reranker({"kind": "cross_encoder", "model": str(tiny_cross_encoder), "device": "cpu"})
    q = "what is the price of the h20 per hour"
    logits = _direct_logits(tiny_cross_encoder, [(q, p) for p in PASSAGES[:3]])
    out = rerank_rows({("q1", 0): [0, 1, 2, 3]}, {("q1", 0): q}, lambda r: PASSAGES[r], rr, top_n=3)
    assert out[("q1", 0)] == [int(i) for i in np.argsort(-logits)] + [3]


def test_cross_encoder_from_a_package_that_bundles_it(tiny_cross_encoder, tmp_path, monkeypatch):
    import shutil

    pkg = tmp_path / "tiny_ce_pkg_for_test"
    shutil.copytree(tiny_cross_encoder, pkg / "model")
    (pkg / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    rr = CrossEncoderReranker(RerankerConfig(kind="cross_encoder", model="pkg:tiny_ce_pkg_for_test",
                                             device="cpu"))
    direct = CrossEncoderReranker(RerankerConfig(kind="cross_encoder", model=str(tiny_cross_encoder),
                                                 device="cpu"))
    items = [("what is the price of the h20 per hour", PASSAGES)]
    assert np.allclose(rr.score(items), direct.score(items))


def test_cross_encoder_config_errors_name_the_key(tmp_path):
    with pytest.raises(ConfigError, match="reranker.model"):
        build(RerankerConfig, {"kind": "cross_encoder"}, "reranker")
    with pytest.raises(ConfigError, match=r"reranker.model=.*cannot load a CrossEncoder"):
        CrossEncoderReranker(RerankerConfig(kind="cross_encoder", model=str(tmp_path / "none")))
    with pytest.raises(ConfigError, match="reranker.model='pkg:no_such_pkg_x': package module 'no_such_pkg_x' is not installed"):
        CrossEncoderReranker(RerankerConfig(kind="cross_encoder", model="pkg:no_such_pkg_x"))


# ---------------------------------------------------------------------------------------- llm

def _passage_of(req) -> str:
    text = req.messages[-1]["content"]
    return text.split("Passage:\n", 1)[1].split("\n\n", 1)[0]


def test_llm_pointwise_moves_the_graded_passage_up():
    def judge(req, seed):
        assert req.json_schema["properties"]["score"]["enum"] == [0, 1, 2, 3]
        return '{"score": 3}' if "per hour" in _passage_of(req) else '{"score": 1}'

    fake = FakeBackend(judge)
    cfg = build(RerankerConfig, {"kind": "llm", "llm": {"backend": "fake"}}, "reranker")
    rr = LLMReranker(cfg, fake, None)
    out = rerank_rows({("q1", 0): [0, 1, 2, 3]}, {("q1", 0): "price of the h20?"},
                      lambda r: PASSAGES[r], rr, top_n=4)
    assert out[("q1", 0)] == [1, 0, 2, 3]
    assert fake.n_requests == 4 and len(fake.calls) == 1  # one batched call
    assert rr.invalid == 0


def test_llm_listwise_follows_the_listed_numbers():
    def judge(req, seed):
        assert req.json_schema["properties"]["ranking"]["items"]["enum"] == [1, 2, 3, 4]
        assert "[4] what is the price of an gpu" in req.messages[-1]["content"]
        return '{"ranking": [4, 2]}'

    fake = FakeBackend(judge)
    cfg = build(RerankerConfig, {"kind": "llm", "mode": "listwise", "llm": {"backend": "fake"}},
                "reranker")
    out = rerank_rows({("q1", 0): [10, 11, 12, 13]}, {("q1", 0): "price?"},
                      lambda r: PASSAGES[r - 10], LLMReranker(cfg, fake, None), top_n=4)
    assert out[("q1", 0)] == [13, 11, 10, 12]  # listed first, then the rest in their order
    assert fake.n_requests == 1


def test_llm_unreadable_answers_keep_the_order_and_are_counted():
    fake = FakeBackend(lambda req, seed: "no json here")
    cfg = build(RerankerConfig, {"kind": "llm", "llm": {"backend": "fake"}}, "reranker")
    rr = LLMReranker(cfg, fake, None)
    out = rerank_rows({("q1", 0): [5, 6, 7]}, {("q1", 0): "q"}, lambda r: "p", rr, top_n=3)
    assert out[("q1", 0)] == [5, 6, 7] and rr.invalid == 3


@pytest.mark.parametrize("text, expected", [
    ('{"score": 2}', 2.0), ('x {"score": 0} y', 0.0), ('{"score": 7}', math.nan),
    ('{"score": true}', math.nan), ("nothing", math.nan), ('{"grade": 3}', math.nan),
])
def test_parse_pointwise(text, expected):
    got = parse_pointwise(text)
    assert (math.isnan(got) and math.isnan(expected)) or got == expected


def test_parse_listwise_scores_by_listed_position():
    assert parse_listwise('{"ranking": [3, 1, 3, 9, "2"]}', 3) == [2.0, 0.0, 3.0]
    assert all(math.isnan(x) for x in parse_listwise('{"order": [1]}', 2))


def test_rerank_rows_puts_unscored_rows_after_scored_ones():
    class Fixed:
        def score(self, items):
            return [[math.nan, 0.5, 2.0, math.nan]]

    out = rerank_rows({"k": [1, 2, 3, 4, 5]}, {"k": "q"}, str, Fixed(), top_n=4)
    assert out["k"] == [3, 2, 1, 4, 5]


def test_rerank_rows_refuses_a_reranker_that_loses_scores():
    class Short:
        def score(self, items):
            return [[1.0]]

    with pytest.raises(KohakuError, match="different number of scores"):
        rerank_rows({"k": [1, 2]}, {"k": "q"}, str, Short(), top_n=2)


def test_llm_config_needs_a_model_and_a_known_mode():
    with pytest.raises(ConfigError, match="reranker.llm"):
        build(RerankerConfig, {"kind": "llm"}, "reranker")
    with pytest.raises(ConfigError, match="reranker.mode='pairwise'"):
        build(RerankerConfig, {"kind": "llm", "mode": "pairwise", "llm": {"backend": "fake"}},
              "reranker")
    with pytest.raises(ConfigError, match="reranker.kind='colbert'"):
        build(RerankerConfig, {"kind": "colbert"}, "reranker")


# ------------------------------------------------------------- table rows with their header

def test_a_table_row_reaches_the_reranker_with_its_title_and_header(tiny_cross_encoder, tmp_path):
    """run_retrieval hands the reranker a table row as it is matched (title | column header |
    row), prose as section + text; the tiny cross-encoder scores those passages and its order
    is the ranking's head."""
    import polars as pl

    from kohaku.retrieval.embedding import EmbedConfig, HashingEncoder, embed_nodes, encode_texts
    from kohaku.retrieval.retrieve import RetrieveConfig, run_retrieval
    from kohaku.retrieval.search import IndexConfig, load_searchers, write_index
    from test_table_rows import _filing

    nodes = _filing()
    enc = HashingEncoder(64)
    emb = embed_nodes(nodes, enc, EmbedConfig(), None, progress=False)
    write_index(tmp_path, nodes, emb, IndexConfig(kind="exact", levels=[3, 2], bm25=True))
    dense, sparse, _ = load_searchers(tmp_path, nodes, None, emb)
    question = "What was the FY2018 capital expenditure in the cash flow statement?"
    questions = pl.DataFrame({"qid": ["q"], "question": [question], "answer_unit": ["USD millions"]})
    queries = questions.select("qid", pl.lit(0, pl.Int64).alias("query_idx"),
                               pl.col("question").alias("query"), pl.lit("question").alias("source"))
    qv = encode_texts(enc, [question], "query", None, progress=False)

    seen: list[tuple[str, list[str]]] = []
    model = CrossEncoderReranker(RerankerConfig(kind="cross_encoder", model=str(tiny_cross_encoder),
                                                device="cpu"))

    class Recording:
        def score(self, items):
            seen.extend((q, list(p)) for q, p in items)
            return model.score(items)

    cfg = RetrieveConfig(top_k=8, attempts=1, max_context_tokens=300)
    out = run_retrieval(queries, nodes, qv, dense, sparse, cfg, progress=False, questions=questions,
                        vectors=emb["vector"].rechunk().to_numpy(), reranker=Recording(), rerank_top_n=30)
    (q, passages), = seen
    assert q == question
    ppe = next(p for p in passages if "Purchases of property" in p)
    assert ppe == ("CONSOLIDATED STATEMENTS OF CASH FLOWS (in millions) | Year Ended December 31, "
                   "2018 2017 2016 | Purchases of property, plant and equipment (PP&E) (1,577) (1,373) (1,420)")
    prose = next(p for p in passages if "Capital expenditures were" in p)
    assert prose.startswith("MANAGEMENT'S DISCUSSION AND ANALYSIS\nCapital expenditures were")
    # the head of the ranking is the model's order of what it read (pages first may only move
    # a table page's second row behind the other pages' first ones)
    scores = dict(zip(passages, model.score([(question, passages)])[0]))
    assert len(set(round(s, 6) for s in scores.values())) > 1
    ranking = out["ranking"].filter(pl.col("qid") == "q")["node_id"].to_list()
    assert ranking[0] in {n for n in nodes["node_id"].to_list()}
    best = max(scores, key=scores.get)
    top_text = nodes.filter(pl.col("node_id") == ranking[0])["text"][0]
    assert best.endswith(top_text)
