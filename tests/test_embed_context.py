"""Document context in what is matched (embed.context, index.bm25_context): none is today's
texts and vectors, a context prefixes the encoded texts, the document node matches its title,
and the embed and index keys change only with the setting."""

from __future__ import annotations

import dataclasses

import numpy as np
import polars as pl
import pytest
from omegaconf import OmegaConf

from kohaku.core.config import ConfigError, build
from kohaku.retrieval.embedding import (
    EmbedConfig,
    EncodeStats,
    HashingEncoder,
    context_texts,
    embed_nodes,
    encode_texts,
)
from kohaku.retrieval.search import IndexConfig, load_searchers, write_index
from kohaku.stages import embed as embed_stage
from kohaku.stages import index as index_stage
from kohaku.ingest.tree import aggregate_parents, node_arrays

from test_embed import make_nodes


def tree() -> pl.DataFrame:
    """Two documents; d1's first section is named like the document (as flat trees are)."""
    rows = [  # node_id, parent, level, section, text
        ("d1", None, 0, "", "Acme 2019 10-K"),
        ("d1#s1", "d1", 1, "Acme 2019 10-K", "Acme 2019 10-K"),
        ("d1#s1.p1", "d1#s1", 2, "Acme 2019 10-K", "Revenue grew. Costs fell."),
        ("d1#s1.p1.t1", "d1#s1.p1", 3, "Acme 2019 10-K", "Revenue grew."),
        ("d1#s1.p1.t2", "d1#s1.p1", 3, "Acme 2019 10-K", "Costs fell."),
        ("d1#s2", "d1", 1, "Item 7 > Liquidity", "Liquidity"),
        ("d1#s2.p1", "d1#s2", 2, "Item 7 > Liquidity", "Cash was 5 million."),
        ("d1#s2.p1.t1", "d1#s2.p1", 3, "Item 7 > Liquidity", "Cash was 5 million."),
        ("d2", None, 0, "", "Zenith 2021 annual report"),
        ("d2#s1", "d2", 1, "Risk factors", "Risk factors"),
        ("d2#s1.p1", "d2#s1", 2, "Risk factors", "Revenue grew."),
        ("d2#s1.p1.t1", "d2#s1.p1", 3, "Risk factors", "Revenue grew."),
    ]
    return make_nodes([(i, p, lv, text, max(len(text.split()), 1)) for i, p, lv, _, text in rows],
                      sections=[r[3] for r in rows])


class Recording(HashingEncoder):
    """The hashing encoder, keeping every text it was asked to encode."""

    def __init__(self, dim: int = 64) -> None:
        super().__init__(dim)
        self.seen: list[str] = []

    def encode_documents(self, texts):
        self.seen.extend(texts)
        return super().encode_documents(texts)


def vectors(table: pl.DataFrame) -> dict[str, np.ndarray]:
    return dict(zip(table["node_id"].to_list(), table["vector"].to_numpy()))


def test_none_is_todays_texts_and_vectors_bit_for_bit():
    nodes = tree()
    assert context_texts(nodes, "none") == nodes["text"].to_list()
    assert EmbedConfig().context == "none"
    enc = Recording()
    default = embed_nodes(nodes, enc, EmbedConfig(), None, progress=False)
    leaves = [t for t, lv in zip(nodes["text"], nodes["level"]) if lv == 3]
    assert sorted(enc.seen) == sorted(set(leaves))  # the plain leaf texts (each once), nothing else
    # today's computation written out: leaves encoded as they are, parents weighted means
    prow, has_children = node_arrays(nodes)
    ref = np.zeros((nodes.height, enc.dim), np.float32)
    rows = np.flatnonzero(~has_children)
    ref[rows] = encode_texts(HashingEncoder(64), [nodes["text"][int(i)] for i in rows],
                             progress=False)
    ref = aggregate_parents(prow, nodes["level"].to_numpy(), nodes["n_tokens"].to_numpy(), ref,
                            ~has_children, "weighted")
    assert np.array_equal(default["vector"].to_numpy(), ref)
    explicit = embed_nodes(nodes, HashingEncoder(64), EmbedConfig(context="none"), None,
                           progress=False)
    assert default.equals(explicit)


def test_a_context_prefixes_the_encoded_texts():
    nodes = tree()
    enc = Recording()
    embed_nodes(nodes, enc, EmbedConfig(context="title_section"), None, progress=False)
    assert "Acme 2019 10-K\nRevenue grew." in enc.seen  # the section only repeats the title
    assert "Acme 2019 10-K | Item 7 > Liquidity\nCash was 5 million." in enc.seen
    assert "Zenith 2021 annual report | Risk factors\nRevenue grew." in enc.seen
    assert "Revenue grew." not in enc.seen
    texts = dict(zip(nodes["node_id"], context_texts(nodes, "title")))
    assert texts["d1#s2.p1.t1"] == "Acme 2019 10-K\nCash was 5 million."
    assert texts["d2#s1.p1"] == "Zenith 2021 annual report\nRevenue grew."
    assert texts["d1"] == "Acme 2019 10-K" and texts["d2"] == "Zenith 2021 annual report"
    custom = dict(zip(nodes["node_id"], context_texts(nodes, "[{doc_id}] {title} / {section}: ")))
    assert custom["d1#s2.p1.t1"] == "[d1] Acme 2019 10-K / Item 7 > Liquidity: Cash was 5 million."
    assert custom["d2"] == "[d2] Zenith 2021 annual report / :"  # the document: no section
    # a document with no title node takes its doc_id
    orphan = nodes.filter(pl.col("doc_id") == "d2").with_columns(
        pl.when(pl.col("level") == 0).then(pl.lit("")).otherwise(pl.col("text")).alias("text"))
    assert context_texts(orphan, "title")[-1] == "d2\nRevenue grew."


@pytest.mark.parametrize("bad", ["titles", "{title} {page}", "{title"])
def test_unknown_contexts_are_config_errors(bad):
    with pytest.raises(ConfigError, match="embed.context"):
        build(EmbedConfig, {"context": bad}, "embed")
    with pytest.raises(ConfigError, match="index.bm25_context"):
        build(IndexConfig, {"bm25_context": bad}, "index")


def test_the_document_node_matches_its_title():
    nodes = tree()
    enc = HashingEncoder(64)
    title = encode_texts(enc, ["Zenith 2021 annual report"], progress=False)[0]
    plain = vectors(embed_nodes(nodes, enc, EmbedConfig(), None, progress=False))
    ctx = vectors(embed_nodes(nodes, enc, EmbedConfig(context="title"), None, progress=False))
    assert float(ctx["d2"] @ title) > float(plain["d2"] @ title) + 0.2
    assert float(ctx["d2"] @ title) > float(ctx["d1"] @ title)
    assert np.isclose(np.linalg.norm(ctx["d2"]), 1.0, atol=1e-5)
    # the sentences now carry their document: the same sentence in two filings differs
    assert not np.allclose(ctx["d1#s1.p1.t1"], ctx["d2#s1.p1.t1"])
    assert np.allclose(plain["d1#s1.p1.t1"], plain["d2#s1.p1.t1"])
    # parents=direct with the document level encodes the document from its context line
    direct = Recording()
    out = vectors(embed_nodes(nodes, direct, EmbedConfig(context="title", parents="direct",
                                                         direct_levels=[0]), None, progress=False))
    assert np.allclose(out["d2"], title, atol=1e-6)
    assert direct.seen.count("Zenith 2021 annual report") == 1


def test_only_changed_texts_are_reencoded(tmp_path):
    nodes = tree()
    first, again, other = EncodeStats(), EncodeStats(), EncodeStats()
    embed_nodes(nodes, HashingEncoder(64), EmbedConfig(), tmp_path, first, progress=False)
    embed_nodes(nodes, HashingEncoder(64), EmbedConfig(), tmp_path, again, progress=False)
    assert again.n_encoded == 0 and again.n_cached == first.n_unique
    embed_nodes(nodes, HashingEncoder(64), EmbedConfig(context="title"), tmp_path, other,
                progress=False)
    assert other.n_encoded == 6  # 5 prefixed leaves (all distinct now) + 1 title; none cached
    assert other.n_cached == 0


def key(stage, **embed) -> str:
    cfg = OmegaConf.create({"embed": {"model": "hash:16", **embed}, "index": {},
                            "cache": {"dir": "/x"}, "progress": True})
    return stage.cache_identity(cfg, {"tree": "t", "embed": "e"})[0]


def test_the_embed_key_changes_with_the_setting_only():
    base = key(embed_stage.STAGE)
    assert key(embed_stage.STAGE, context="none") == base
    assert key(embed_stage.STAGE, torch_threads=4) == base  # threads do not change vectors
    keys = {key(embed_stage.STAGE, context=c) for c in
            ("title", "title_section", "{title}: ", "{title} | {section}\n")}
    assert len(keys) == 4 and base not in keys
    assert key(embed_stage.STAGE, context="title_section") == key(
        embed_stage.STAGE, context="title_section", torch_threads=2)
    # none hashes exactly the fields EmbedConfig had before the setting (today's keys stay)
    cfg = OmegaConf.create({"embed": {"model": "hash:16", "torch_threads": 3}})
    sliced = embed_stage.STAGE.config_slice(cfg)["embed"]
    full = dataclasses.asdict(build(EmbedConfig, {"model": "hash:16"}, "embed"))
    assert sliced == {k: v for k, v in full.items() if k != "context"}
    # the embed setting is not the index's
    assert key(index_stage.STAGE, context="title") == key(index_stage.STAGE)


def test_the_index_key_and_bm25_text():
    def ikey(**index):
        cfg = OmegaConf.create({"index": index})
        return index_stage.STAGE.cache_identity(cfg, {"tree": "t", "embed": "e"})[0]

    assert ikey() == ikey(bm25_context="none") != ikey(bm25_context="title")
    assert "bm25_context" not in index_stage.STAGE.config_slice(OmegaConf.create({"index": {}}))["index"]


def test_bm25_text_carries_the_document_context(tmp_path):
    nodes = tree()
    table = embed_nodes(nodes, HashingEncoder(16), EmbedConfig(), None, progress=False)
    hits = {}
    for context in ("none", "title_section"):
        out = tmp_path / context
        out.mkdir()
        write_index(out, nodes, table, IndexConfig(kind="exact", levels=[3], bm25_context=context))
        _, sparse, _ = load_searchers(out, nodes, [3], table)
        rows, scores = sparse[3].search(["zenith revenue", "liquidity cash"], k=2)
        hits[context] = [[nodes["node_id"][int(r)] for r in q if r >= 0] for q in rows]
    # "revenue grew." is in both filings: only the context says which one is Zenith's
    assert hits["title_section"][0][0] == "d2#s1.p1.t1"
    assert hits["none"][0][0] == "d1#s1.p1.t1"  # a tie, broken by document order
    assert hits["title_section"][1] == ["d1#s2.p1.t1"]
