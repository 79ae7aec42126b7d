"""The tree stage: node table shape and ids, tables as row sentences, flat chunks, the report."""

from __future__ import annotations

import re

import polars as pl
import pytest

from helpers_corpus import LEFT, RIGHT, TABLE, make_ctx, write_tables, write_two_column_pdf
from kohaku.core.config import ConfigError, build
from kohaku.ingest.corpus import read_metadata
from kohaku.runner.pipeline import option_values
from kohaku.stages import tree as tree_stage
from kohaku.ingest.captioning import CAPTIONS_SCHEMA
from kohaku.ingest.parsing import FIGURES_SCHEMA, ParseConfig, parse_corpus
from kohaku.ingest.tree import NODES_SCHEMA, TreeConfig, build_tree, chunk_sentences, corpus_report
from kohaku.core.tokens import count_tokens

ID = re.compile(r"^[a-z0-9_]+(#s\d+(\.p\d+(\.t\d+)?)?)?$")


@pytest.fixture(scope="module")
def sample_tables(request):
    from conftest import SAMPLE

    docs, blocks = parse_corpus(SAMPLE, read_metadata(SAMPLE / "metadata.csv"), ParseConfig(workers=1))
    return docs, blocks


def _check_tree(nodes: pl.DataFrame) -> None:
    assert nodes.schema == pl.Schema(NODES_SCHEMA)
    ids = nodes["node_id"].to_list()
    assert len(ids) == len(set(ids))
    assert all(ID.match(i) for i in ids)
    parent = dict(zip(nodes["node_id"], nodes["parent_id"]))
    level = dict(zip(nodes["node_id"], nodes["level"]))
    for node_id, par in parent.items():
        if level[node_id] == 0:
            assert par is None
        else:
            # the parent is the id cut at its last separator, one level up
            cut = max(node_id.rfind("."), node_id.rfind("#"))
            assert par == node_id[:cut] and level[par] == level[node_id] - 1
    kinds = dict(zip(nodes["level"], nodes["kind"]))
    assert kinds == {0: "document", 1: "section", 2: "paragraph", 3: "sentence"}
    # order is the 1-based index within the parent, matching the id
    for row in nodes.filter(pl.col("level") > 0).iter_rows(named=True):
        assert row["node_id"].endswith(f"{'s' if row['level'] == 1 else 'p' if row['level'] == 2 else 't'}{row['order']}")
    # every paragraph's sentences rebuild its text
    for pid, group in nodes.filter(pl.col("level") == 3).group_by("parent_id", maintain_order=True):
        ptext = nodes.filter(pl.col("node_id") == pid[0])["text"].item()
        sep = "\n" if "\n" in ptext else " "
        assert sep.join(group["text"].to_list()) == ptext
    assert (nodes["n_tokens"] == nodes["text"].map_elements(count_tokens, return_dtype=pl.Int64)).all()


def test_sample_tree(sample_tables):
    docs, blocks = sample_tables
    nodes = build_tree(docs, blocks, TreeConfig())
    _check_tree(nodes)
    assert nodes.filter(pl.col("level") == 0)["text"].to_list() == docs.sort("doc_id")["title"].to_list()
    sections = nodes.filter((pl.col("doc_id") == "okafor2023") & (pl.col("level") == 1))
    assert sections["text"].to_list() == [
        "Liquid Cooling Retrofit of a University GPU Cluster: Measured PUE, Temperatures and Water Use",
        "1 Introduction", "2 Setup", "2.1 Cooling configurations", "3 Results", "4 Conclusion",
    ]
    assert sections["section"].to_list()[3] == "2 Setup > 2.1 Cooling configurations"
    table = nodes.filter((pl.col("doc_id") == "okafor2023") & (pl.col("block_kind") == "table") & (pl.col("level") == 3))
    assert table["text"].to_list() == [
        "Table 1: Measured facility overhead and GPU temperature for the three cooling configurations.",
        "Configuration | PUE | Cooling power (kW) | Mean GPU temperature (C)",
        "Air cooling (baseline) | 1.48 | 212 | 78",
        "Rear-door heat exchanger | 1.27 | 119 | 71",
        "Direct-to-chip liquid | 1.11 | 49 | 60",
    ]
    # the JSON document's flattened table is found in the raw text
    sato = nodes.filter((pl.col("doc_id") == "sato2025") & (pl.col("block_kind") == "table") & (pl.col("level") == 3))
    assert "Forecast-Greedy 174.2 18% 1.1" in sato["text"].to_list()
    # the hyphenated break "realis-/tic" is undone, "first-come-first-served" kept
    sato_text = " ".join(nodes.filter(pl.col("doc_id") == "sato2025")["text"].to_list())
    assert "realistic policies" in sato_text and "first-come-first-served" in sato_text
    report = corpus_report(nodes)
    assert report["n_documents"] == 4
    assert report["multi_section_doc_share"] == 1.0
    assert report["short_sentence_share"] < 0.03


def test_node_ids_are_stable(sample_tables):
    docs, blocks = sample_tables
    a = build_tree(docs, blocks, TreeConfig())
    b = build_tree(docs.reverse(), blocks.sample(fraction=1.0, shuffle=True, seed=1), TreeConfig())
    assert a.equals(b)


def test_pdf_table_becomes_paragraph_of_rows(tmp_path):
    root = tmp_path / "c"
    write_two_column_pdf(root / "pdfs" / "t1.pdf", "Set Points", LEFT, RIGHT, TABLE, "Table 1: Chiller power by set point.")
    (root / "metadata.csv").write_text("id,type,title,year,citation,url\nt1,paper,Set Points,2024,c,u\n")
    docs, blocks = parse_corpus(root, read_metadata(root / "metadata.csv"), ParseConfig(workers=1))
    nodes = build_tree(docs, blocks, TreeConfig())
    _check_tree(nodes)
    tables = nodes.filter((pl.col("level") == 2) & (pl.col("block_kind") == "table"))
    assert tables.height == 1
    rows = nodes.filter(pl.col("parent_id") == tables["node_id"].item())["text"].to_list()
    assert rows == ["Table 1: Chiller power by set point.", "Set point (C) | Chiller power (kW) | PUE",
                    "18 | 140 | 1.45", "20 | 121 | 1.38", "22 | 104 | 1.31"]
    sections = nodes.filter(pl.col("level") == 1)["text"].to_list()
    # the title (a heading-size line equal to the metadata title) makes no section of its own
    assert sections == ["1 Introduction", "2 Method", "3 Results", "4 Conclusion"]


def test_error_documents_are_skipped(tmp_path):
    docs = pl.DataFrame({
        "doc_id": ["a", "b"], "title": ["A", "B"], "n_pages": [1, 0], "status": ["ok", "error"],
    })
    blocks = pl.DataFrame({
        "doc_id": ["a"], "page": [1], "order": [0], "kind": ["text"],
        "text": ["One sentence about chillers. Another sentence about fans."],
        "font_size": [None], "level": [None],
    }, schema_overrides={"font_size": pl.Float64, "level": pl.Int64})
    nodes = build_tree(docs, blocks, TreeConfig())
    assert set(nodes["doc_id"]) == {"a"}
    assert nodes.filter(pl.col("level") == 3)["text"].to_list() == [
        "One sentence about chillers.", "Another sentence about fans."]


def test_chunk_sentences_sizes_and_overlap():
    sentences = [f"Sentence number {i} talks about cooling towers and chillers." for i in range(40)]
    chunks = chunk_sentences(sentences, chunk_tokens=60, overlap=20)
    assert all(sum(count_tokens(s) for s in c) <= 60 for _, c in chunks)
    # consecutive chunks share their boundary sentence(s), and every sentence is covered
    for (_, a), (_, b) in zip(chunks, chunks[1:]):
        assert a[-1] == b[0]
    assert {s for _, c in chunks for s in c} == set(sentences)
    starts = [first for first, _ in chunks]
    assert starts == sorted(starts) and starts[0] == 0
    # a sentence longer than a chunk is cut into word windows
    long = " ".join(["word"] * 200)
    assert all(count_tokens(" ".join(c)) <= 50 for _, c in chunk_sentences([long], 50, 0))


def test_flat_mode(sample_tables):
    docs, blocks = sample_tables
    cfg = build(TreeConfig, {"mode": "flat", "chunk_tokens": 64, "chunk_overlap": 8}, "tree")
    nodes = build_tree(docs, blocks, cfg)
    _check_tree(nodes)
    sections = nodes.filter(pl.col("level") == 1)
    assert sections.height == 4 and sections["node_id"].to_list()[0].endswith("#s1")
    paragraphs = nodes.filter(pl.col("level") == 2)
    assert (paragraphs["n_tokens"] <= 64).all() and paragraphs.height > 8
    assert corpus_report(nodes)["multi_section_doc_share"] == 0.0


def test_tree_config_validation():
    with pytest.raises(ConfigError, match="tree.chunk_size"):
        build(TreeConfig, {"chunk_size": 3}, "tree")
    with pytest.raises(ConfigError, match="mode"):
        build(TreeConfig, {"mode": "deep"}, "tree")
    with pytest.raises(ConfigError, match="chunk_overlap"):
        build(TreeConfig, {"chunk_overlap": 300}, "tree")


def test_tree_stage_compute(tmp_path, sample_tables):
    docs, blocks = sample_tables
    parse_dir = write_tables(tmp_path / "parse", {"documents": docs, "blocks": blocks,
                                                  "figures": pl.DataFrame(schema=FIGURES_SCHEMA)})
    caption_dir = write_tables(tmp_path / "caption", {"captions": pl.DataFrame(schema=CAPTIONS_SCHEMA)})
    ctx = make_ctx(tree_stage.STAGE, {"tree": {"mode": "hier"}}, tmp_path / "out",
                   {"parse": parse_dir, "caption": caption_dir})
    out = tree_stage.STAGE.compute(ctx)
    assert list(out) == ["nodes"]
    assert ctx.summary["mode"] == "hier" and ctx.summary["n_documents"] == 4
    assert ctx.summary["n_sentences"] == out["nodes"].filter(pl.col("level") == 3).height


def test_conf_files_match_the_dataclass(repo):
    """tree=hier is the dataclass as it is; tree=flat differs from it in ``mode`` only (every
    key and default of every group option is compared in tests/test_config.py)."""
    import dataclasses

    defaults = dataclasses.asdict(TreeConfig())
    assert option_values("tree", "hier") == defaults
    flat = option_values("tree", "flat")
    assert {k for k in defaults if flat[k] != defaults[k]} == {"mode"} and flat["mode"] == "flat"
    assert dataclasses.asdict(build(TreeConfig, flat, "tree")) == flat


@pytest.mark.slow
def test_wattbot_segmentation_targets(wattbot_root):
    """The targets of the segmenter on the 32 WattBot documents (raw PDF extraction JSON)."""
    docs, blocks = parse_corpus(wattbot_root, read_metadata(wattbot_root / "metadata.csv"), ParseConfig(workers=1))
    assert docs.filter(pl.col("status") == "error").height == 0
    nodes = build_tree(docs, blocks, TreeConfig())
    report = corpus_report(nodes)
    assert report["n_documents"] == 32
    assert report["short_sentence_share"] < 0.03
    assert report["median_paragraph_chars"] < 1200
    assert report["multi_section_doc_share"] >= 0.8
    # a few sections a reader would expect
    titles = set(nodes.filter(pl.col("kind") == "section")["text"].to_list())
    assert {"1 Introduction", "2 Methods", "2.1 Models", "I. INTRODUCTION", "Abstract"} <= titles


def test_documents_left_out_of_the_tree_are_named(tmp_path, caplog):
    """Readable documents whose text does not survive segmentation (a heading alone, a page
    number, a running header) are named with the reason in the log and the run's problems."""
    from kohaku.ingest.parsing import BLOCKS_SCHEMA, DOCUMENTS_SCHEMA
    from kohaku.runner.pipeline import StageRecord, problem_lines

    ids = ["dummy", "pageno", "header"]
    texts = [("heading", "Dummy PDF file"), ("text", "3"), ("text", "Page 1 of 1")]
    docs = pl.DataFrame([{"doc_id": d, "title": "Dummy PDF file", "url": "", "year": "", "type": "",
                          "citation": "", "source": f"pdfs/{d}.pdf", "format": "pdf", "n_pages": 1,
                          "n_blocks": 1, "status": "ok", "error": "", "warnings": [], "retry": False} for d in ids],
                        schema=DOCUMENTS_SCHEMA)
    blocks = pl.DataFrame([{"doc_id": d, "page": 1, "order": 0, "kind": k, "text": t, "font_size": None,
                            "level": None} for d, (k, t) in zip(ids, texts)], schema=BLOCKS_SCHEMA)
    parse_dir = write_tables(tmp_path / "parse", {"documents": docs, "blocks": blocks,
                                                  "figures": pl.DataFrame(schema=FIGURES_SCHEMA)})
    caption_dir = write_tables(tmp_path / "caption", {"captions": pl.DataFrame(schema=CAPTIONS_SCHEMA)})
    ctx = make_ctx(tree_stage.STAGE, {"tree": {"mode": "hier"}}, tmp_path / "out",
                   {"parse": parse_dir, "caption": caption_dir})
    with caplog.at_level("WARNING"):
        out = tree_stage.STAGE.compute(ctx)
    assert out["nodes"].height == 0
    problems = ctx.summary["problems"]
    assert problems["count"] == 3 and problems["what"] == "documents"
    for doc_id, item in zip(sorted(ids), problems["items"]):
        assert item.startswith(f"{doc_id}: left out of the tree: no text left after segmentation")
    assert all(f"document {d}:" in caplog.text for d in ids)
    record = StageRecord("k", "p", False, 0.0, ctx.summary)
    assert problem_lines({"tree": record}) == [("tree: 3 of 3 documents are not in the tree", problems["items"])]


def _page_blocks(texts: list[tuple[int, str]]) -> tuple[pl.DataFrame, pl.DataFrame]:
    docs = pl.DataFrame({"doc_id": ["a"], "title": ["A"], "n_pages": [3], "status": ["ok"]})
    blocks = pl.DataFrame({
        "doc_id": ["a"] * len(texts), "page": [p for p, _ in texts], "order": list(range(len(texts))),
        "kind": ["text"] * len(texts), "text": [t for _, t in texts],
        "font_size": [None] * len(texts), "level": [None] * len(texts),
    }, schema_overrides={"font_size": pl.Float64, "level": pl.Int64})
    return docs, blocks


def test_a_sentence_gets_the_page_it_starts_on():
    """A paragraph running over a page break keeps the page where it starts; its sentences
    each get the page they start on (the second starts on page 1 and ends on page 2, the third
    starts on page 2)."""
    docs, blocks = _page_blocks([
        (1, "Revenue of the segment grew by four percent in the year. The second sentence of this\n"
            "paragraph runs over the"),
        (2, "page break and ends on the next page. A third sentence starts on the second page of\n"
            "the report and says that margins fell."),
    ])
    nodes = build_tree(docs, blocks, TreeConfig(page_fallback=False))
    paras = nodes.filter(pl.col("level") == 2)
    assert paras.height == 1 and paras["page"].to_list() == [1]
    sents = nodes.filter(pl.col("level") == 3)
    assert [t[:12] for t in sents["text"]] == ["Revenue of t", "The second s", "A third sent"]
    assert sents["page"].to_list() == [1, 1, 2]
    # flat chunks: a chunk's page is the page its first new sentence starts on
    flat = build_tree(docs, blocks, TreeConfig(mode="flat", chunk_tokens=16, chunk_overlap=0))
    chunks = flat.filter(pl.col("level") == 2)
    assert chunks["text"].str.starts_with("A third").any()
    assert chunks.filter(pl.col("text").str.starts_with("A third"))["page"].to_list() == [2]


def test_sentence_pages_fall_back_to_the_paragraph_page():
    """A sentence the block text does not hold (altered beyond folding) keeps its paragraph's
    page; a repeat of the text far later in the document is not taken for it."""
    from kohaku.ingest.text.segment import Paragraph, Section
    from kohaku.ingest.tree.build import sentence_pages

    blocks = [{"page": 1, "text": "Alpha beta gamma delta."},
              {"page": 9, "text": "Something else entirely."}]
    sec = Section(title="S", page=1, source="heading",
                  paragraphs=[Paragraph("text", 1, sentences=["Alpha beta gamma delta.",
                                                               "Something else entirely.",
                                                               "Not in any block."])])
    assert sentence_pages(blocks, [sec]) == [[[1, 1, 1]]]
