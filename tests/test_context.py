"""Context assembly on a hand-made tree: leaf layout, span expansion, section blocks, budget."""

from __future__ import annotations

import random

import polars as pl
import pytest

from kohaku.config import ConfigError, build
from kohaku.retrieval.context import GAP, PARA_GAP, ContextBuilder, RenderConfig, TreeView
from kohaku.retrieval.retrieve import RetrieveConfig
from kohaku.text.tokens import count_tokens

# doc -> sections (title, paragraphs (kind, sentences)); table rows are the sentences of a table
DOCS = {
    "d": [
        ("Intro", [("text", ["One two three.", "Four five six."])]),
        ("Results", [
            ("text", ["Alpha beta gamma.", "Delta epsilon zeta."]),
            ("text", ["Hit sentence here.", "Next one follows.", "Last of para."]),
            ("table", ["Model Energy", "A 10", "B 20"]),
            ("text", ["Closing words now."]),
        ]),
    ],
    "e": [("Other", [("text", ["Elsewhere text sits."])])],
}


def make_nodes(docs=DOCS) -> pl.DataFrame:
    rows = []

    def add(node_id, parent, level, kind, order, section, text, block_kind="text"):
        rows.append(dict(node_id=node_id, doc_id=node_id.split("#")[0], parent_id=parent,
                         level=level, kind=kind, order=order, page=1, section=section, text=text,
                         n_tokens=count_tokens(text), block_kind=block_kind))

    for doc, sections in docs.items():
        add(doc, None, 0, "document", 0, "", doc)
        for si, (title, paras) in enumerate(sections, 1):
            sid = f"{doc}#s{si}"
            add(sid, doc, 1, "section", si, title, title, "heading")
            for pi, (kind, sents) in enumerate(paras, 1):
                pid = f"{sid}.p{pi}"
                add(pid, sid, 2, "paragraph", pi, title, ("\n" if kind == "table" else " ").join(sents), kind)
                for ti, s in enumerate(sents, 1):
                    add(f"{pid}.t{ti}", pid, 3, "sentence", ti, title, s, kind)
    # rows shuffled: the view must not rely on the table's row order
    return pl.DataFrame(rows, schema_overrides={"parent_id": pl.String}).sample(fraction=1.0, seed=3)


NODES = make_nodes()
VIEW = TreeView(NODES)
ROW = {nid: i for i, nid in enumerate(VIEW.node_id)}


def ids(rows) -> list[str]:
    return [VIEW.node_id[r] for r in rows]


def tok(*node_ids) -> int:
    return sum(count_tokens(VIEW.text[ROW[n]]) for n in node_ids)


def build_ctx(hits, budget=10_000, **kw):
    return ContextBuilder(VIEW, RenderConfig(**kw)).build([ROW[h] for h in hits], budget)


def test_view_layout_sections_leaves_and_groups():
    s2 = ROW["d#s2"]
    assert ids(VIEW.leaves[s2]) == [
        "d#s2.p1.t1", "d#s2.p1.t2", "d#s2.p2.t1", "d#s2.p2.t2", "d#s2.p2.t3",
        "d#s2.p3.t1", "d#s2.p3.t2", "d#s2.p3.t3", "d#s2.p4.t1"]
    p2 = ROW["d#s2.p2"]
    assert (VIEW.first[p2], VIEW.last[p2], VIEW.n_leaves(p2)) == (2, 5, 3)
    assert VIEW.container[ROW["d#s2.p3.t2"]] == s2 and VIEW.container[p2] == s2
    assert VIEW.group[ROW["d#s2.p3.t2"]] == ROW["d#s2.p3"]
    # a document spans its sections' leaves
    assert ids(VIEW.leaves_of(ROW["d"]))[:3] == ["d#s1.p1.t1", "d#s1.p1.t2", "d#s2.p1.t1"]
    assert len(VIEW.leaves_of(ROW["d"])) == 11
    assert VIEW.cum_tokens(s2)[-1] == sum(VIEW.text_tokens(r) for r in VIEW.leaves[s2])


def test_span_takes_its_paragraph_first_then_neighbours_alternately():
    b = ContextBuilder(VIEW, RenderConfig())
    leaves = VIEW.leaves[ROW["d#s2"]]

    def span(hit, target):
        c, lo, hi = b._span(ROW[hit], target)
        assert c == ROW["d#s2"]
        return ids(leaves[lo:hi])

    para = ["d#s2.p2.t1", "d#s2.p2.t2", "d#s2.p2.t3"]
    assert span("d#s2.p2.t1", tok("d#s2.p2.t1") - 1) == ["d#s2.p2.t1"]  # never less than the hit
    assert span("d#s2.p2.t1", tok(*para)) == para
    # the paragraph is done before the neighbours: p1.t2 (right before the hit) comes after t3
    assert tok("d#s2.p3.t1") > 3 and tok("d#s2.p1.t2") > 3
    assert span("d#s2.p2.t1", tok(*para) + 3) == para
    # a section-wide alternation would give [p1.t2, t1, t2] for this target
    assert span("d#s2.p2.t1", tok("d#s2.p2.t1", "d#s2.p2.t2", "d#s2.p1.t2")) == para
    # then after and before alternately: the table's first row, then p1's last sentence
    assert span("d#s2.p2.t1", tok(*para, "d#s2.p3.t1")) == para + ["d#s2.p3.t1"]
    assert span("d#s2.p2.t1", tok(*para, "d#s2.p3.t1", "d#s2.p1.t2")) == \
        ["d#s2.p1.t2"] + para + ["d#s2.p3.t1"]
    # inside the paragraph too: from the middle sentence, the next one comes first
    assert span("d#s2.p2.t2", tok("d#s2.p2.t2", "d#s2.p2.t3")) == ["d#s2.p2.t2", "d#s2.p2.t3"]
    # a span stays in its section
    assert span("d#s2.p2.t1", 10_000) == ids(leaves)


def test_span_grows_with_the_budget():
    hit = ["d#s2.p2.t1"]
    # a small budget: span_share of it is less than the window, so the window is the unit
    small = build_ctx(hit, budget=40, expand="span", span_share=0.25, heading="none")
    assert small.node_ids == ["d#s2.p2.t1", "d#s2.p2.t2"]
    assert small.context == "[ref_id=d] Hit sentence here. Next one follows."
    # a large one: the whole section, one block, paragraphs on their own lines, table rows kept
    large = build_ctx(hit, budget=400, expand="span", span_share=0.5)
    assert large.node_ids == ["d#s2"]
    assert large.context == (
        "[ref_id=d] Results\nAlpha beta gamma. Delta epsilon zeta.\nHit sentence here. Next one "
        "follows. Last of para.\nModel Energy\nA 10\nB 20\nClosing words now.")
    assert large.n_tokens == count_tokens(large.context) and large.n_blocks == 1
    # the same hit with expand=window stays a window whatever the budget
    assert build_ctx(hit, budget=400, expand="window").node_ids == ["d#s2.p2.t1", "d#s2.p2.t2"]


def test_span_falls_back_to_the_window_then_the_sentence():
    hit = ["d#s2.p2.t2"]
    header = count_tokens("[ref_id=d] ")
    # room for the window (3 sentences) but not for the span (the whole section)
    budget = header + tok("d#s2.p2.t1", "d#s2.p2.t2", "d#s2.p2.t3")
    c = build_ctx(hit, budget=budget, expand="span", span_share=1.0, heading="none")
    assert c.node_ids == ["d#s2.p2"] and c.n_tokens <= budget
    c = build_ctx(hit, budget=header + tok("d#s2.p2.t2"), expand="span", span_share=1.0,
                  heading="none")
    assert c.node_ids == ["d#s2.p2.t2"]


def test_one_block_per_section_with_gaps_and_rank_order():
    c = build_ctx(["d#s2.p2.t3", "e#s1.p1.t1", "d#s2.p1.t1", "d#s2.p2.t1"], expand="none",
                  heading="none")
    blocks = c.context.split("\n---\n")
    # d#s2's three sentences share its block, which keeps the place of its first hit
    assert blocks == [
        f"[ref_id=d] Alpha beta gamma.{PARA_GAP}Hit sentence here.{GAP}Last of para.",
        "[ref_id=e] Elsewhere text sits.",
    ]
    assert c.doc_ids == ["d", "e"] and c.n_blocks == 2
    assert c.node_ids == ["d#s2.p1.t1", "d#s2.p2.t1", "d#s2.p2.t3", "e#s1"]
    assert c.n_tokens == count_tokens(c.context)
    # the missing sentence closes the gap and completes the paragraph, in place
    c2 = build_ctx(["d#s2.p2.t3", "e#s1.p1.t1", "d#s2.p2.t1", "d#s2.p2.t2"], expand="none",
                   heading="none")
    assert c2.context.split("\n---\n")[0] == \
        "[ref_id=d] Hit sentence here. Next one follows. Last of para."
    assert c2.node_ids[0] == "d#s2.p2"


def test_table_rows_stay_on_their_lines_and_heading_needs_a_whole_paragraph():
    c = build_ctx(["d#s2.p3.t1"], expand="window", window=1)
    assert c.context == "[ref_id=d] Model Energy\nA 10"  # partial: no section title
    c = build_ctx(["d#s2.p3.t1", "d#s2.p3.t3"], expand="window", window=1)
    assert c.context == "[ref_id=d] Results\nModel Energy\nA 10\nB 20"
    assert c.node_ids == ["d#s2.p3"]
    assert c.n_tokens == count_tokens(c.context)


def test_budget_and_dedup_hold_for_any_ranking():
    rng = random.Random(7)
    rows = [r for r in range(NODES.height) if VIEW.level[r] > 0]
    for mode in ("none", "window", "paragraph", "span"):
        for heading in ("none", "paragraphs", "all"):
            for budget in (12, 25, 50, 90, 200, 1000):
                ranked = rng.sample(rows, k=len(rows))
                c = ContextBuilder(VIEW, RenderConfig(expand=mode, heading=heading)).build(ranked, budget)
                assert c.n_tokens == count_tokens(c.context) <= budget
                leaves = [leaf for n in c.node_ids for leaf in VIEW.leaves_of(ROW[n])]
                assert len(leaves) == len(set(leaves))  # no text twice
                for leaf in leaves:
                    assert VIEW.text[leaf] in c.context
                assert c.doc_ids == sorted(set(c.doc_ids), key=lambda d: c.context.index(f"[ref_id={d}]"))


def test_span_config_validation():
    with pytest.raises(ConfigError, match="span_share"):
        build(RetrieveConfig, {"span_share": 1.5}, "retrieve")
    with pytest.raises(ValueError, match="expand"):
        ContextBuilder(VIEW, RenderConfig(expand="section"))
    assert build(RetrieveConfig, {}, "retrieve").render().expand == "span"


@pytest.mark.parametrize("separator,block_format", [
    ("\n---\n", "[ref_id={doc_id}] {heading}{text}"),                 # the default
    ("\n\n=====\n\n", "<document id=\"{doc_id}\">\n{heading}{text}\n</document>"),
    ("\n###\n", "Source {doc_id} ({section}): {text}"),
])
def test_trimming_and_citations_follow_the_blocks_whatever_the_format(separator, block_format):
    """The context carries its blocks and their documents; the answering step trims whole blocks
    from the end and lets the model cite only the documents of the blocks it kept, whatever
    ``retrieve.separator`` and ``retrieve.block_format`` say (no marker is parsed back)."""
    from kohaku.answering import InferConfig, build_messages, run_infer
    from kohaku.llm.fake import FakeBackend
    from kohaku.pipeline import option_values
    from kohaku.retrieval.retrieve import CONTEXTS_SCHEMA

    builder = ContextBuilder(VIEW, RenderConfig(separator=separator, block_format=block_format))
    ranked = [ROW["e#s1.p1.t1"], ROW["d#s2.p2.t1"], ROW["d#s1.p1.t1"]]
    ctx = builder.build(ranked, 2000)
    assert ctx.context == separator.join(ctx.blocks) and ctx.block_doc_ids == ["e", "d", "d"]
    contexts = pl.DataFrame([{
        "qid": "q1", "attempt": 0, "k": 4, "context": ctx.context, "doc_ids": ctx.doc_ids,
        "node_ids": ctx.node_ids, "n_tokens": ctx.n_tokens, "budget": 2000, "n_blocks": ctx.n_blocks,
        "blocks": ctx.blocks, "block_doc_ids": ctx.block_doc_ids, "separator": separator,
    }], schema=CONTEXTS_SCHEMA)
    questions = pl.DataFrame({"qid": ["q1"], "question": ["Which sentence is the hit?"],
                              "answer_unit": ["is_blank"]})
    cfg = build(InferConfig, {**option_values("infer", "default"), "max_retries": 0, "max_tokens": 64},
                "infer")
    empty = build_messages(cfg.templates, context="", question="Which sentence is the hit?",
                           answer_unit="is_blank", qid="q1")
    overhead = sum(count_tokens(m["content"]) for m in empty)
    # room for exactly the first block: the second one (and the third) must go
    room = count_tokens(ctx.blocks[0]) + cfg.max_tokens + overhead + cfg.context_margin
    fake = FakeBackend(max_context=room)
    gens, summary = run_infer(questions, contexts, fake, cfg)
    sent = fake.calls[0][0]
    text = sent.messages[-1]["content"]
    assert ctx.blocks[0] in text and ctx.blocks[1] not in text and ctx.blocks[2] not in text
    assert sent.json_schema["properties"]["ref_id"]["items"]["enum"] == ["e"]
    assert summary["trimmed"] == 1 and gens["trimmed_snippets"].to_list() == [2]
    assert gens["ref_id"].to_list() == [["e"]]
    # with room for everything, both documents may be cited and nothing is trimmed
    fake = FakeBackend(max_context=room + 500)
    gens, summary = run_infer(questions, contexts, fake, cfg)
    assert fake.calls[0][0].json_schema["properties"]["ref_id"]["items"]["enum"] == ["e", "d"]
    assert summary["trimmed"] == 0 and separator.join(ctx.blocks) in fake.calls[0][0].messages[-1]["content"]
