"""Context assembly on a hand-made tree: leaf layout, span expansion, section blocks, budget."""

from __future__ import annotations

import random
import re

import polars as pl
import pytest

from kohaku.core.config import ConfigError, build
from kohaku.retrieval.context import GAP, PARA_GAP, ContextBuilder, RenderConfig, TreeView
from kohaku.retrieval.retrieve import RetrieveConfig
from kohaku.core.tokens import count_tokens

# doc -> sections (title, paragraphs (kind, sentences[, paragraph text])); table rows are the
# sentences of a table; a paragraph given as (kind, text) has no sentences
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
            for pi, (kind, sents, *own) in enumerate(paras, 1):
                pid = f"{sid}.p{pi}"
                if isinstance(sents, str):  # a paragraph with no sentences
                    own, sents = [sents], []
                text = own[0] if own else ("\n" if kind == "table" else " ").join(sents)
                add(pid, sid, 2, "paragraph", pi, title, text, kind)
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
    # span_max_tokens caps the span whatever the budget: the large budget's unit is the small one's
    capped = build_ctx(hit, budget=400, expand="span", span_share=0.5, heading="none",
                       span_max_tokens=small.n_tokens - 4)
    assert capped.node_ids == small.node_ids
    assert build_ctx(hit, budget=400, expand="span", span_share=0.5, span_max_tokens=0).node_ids == ["d#s2"]


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
    from kohaku.answer.answering import InferConfig, build_messages, run_infer, templates
    from kohaku.tasks import load_task
    from kohaku.llm.fake import FakeBackend
    from kohaku.runner.pipeline import option_values
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
    task = load_task("wattbot")
    empty = build_messages(templates(cfg, task.answer), {"context": "", "question": "Which sentence is the hit?",
                                                         "answer_unit": "is_blank", "qid": "q1"})
    overhead = sum(count_tokens(m["content"]) for m in empty)
    # room for exactly the first block: the second one (and the third) must go
    room = count_tokens(ctx.blocks[0]) + cfg.max_tokens + overhead + cfg.context_margin
    fake = FakeBackend(max_context=room)
    gens, summary = run_infer(questions, contexts, fake, cfg, task.answer, task.questions.fields)
    sent = fake.calls[0][0]
    text = sent.messages[-1]["content"]
    assert ctx.blocks[0] in text and ctx.blocks[1] not in text and ctx.blocks[2] not in text
    assert sent.json_schema["properties"]["ref_id"]["items"]["enum"] == ["e"]
    assert summary["trimmed"] == 1 and gens["trimmed_snippets"].to_list() == [2]
    assert gens["ref_id"].to_list() == [["e"]]
    # with room for everything, both documents may be cited and nothing is trimmed
    fake = FakeBackend(max_context=room + 500)
    gens, summary = run_infer(questions, contexts, fake, cfg, task.answer, task.questions.fields)
    assert fake.calls[0][0].json_schema["properties"]["ref_id"]["items"]["enum"] == ["e", "d"]
    assert summary["trimmed"] == 0 and separator.join(ctx.blocks) in fake.calls[0][0].messages[-1]["content"]


# ------------------------------------------------------------------ config validation
@pytest.mark.parametrize("kw,message", [
    (dict(expand="section"), "expand='section': use none, window, paragraph, span"),
    (dict(heading="some"), "heading='some': use none, paragraphs, all"),
    (dict(window=-1), "window must be >= 0"),
    (dict(fill_patience=-1), "fill_patience=-1: use 0 (off) or a count"),
    (dict(span_share=1.5), "span_share=1.5: use a share of the budget in [0, 1]"),
    (dict(span_share=-0.1), "span_share=-0.1: use a share of the budget in [0, 1]"),
])
def test_render_config_errors_name_the_key_and_the_fix(kw, message):
    # each bad rendering key is refused with a message naming the key and what to use instead
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        RenderConfig(**kw).validate()


def test_render_config_bounds_are_inclusive():
    # window 0 (the hit alone), fill_patience 0 (off) and span_share 0 or 1 are all valid
    for kw in (dict(window=0), dict(fill_patience=0), dict(span_share=0.0), dict(span_share=1.0)):
        RenderConfig(**kw).validate()


# ---------------------------------------------------------------- units and fallbacks
def test_span_before_side_takes_the_nearest_leaf_and_counts_it():
    # growing before the hit takes the leaf right before the range and adds that leaf's tokens
    b = ContextBuilder(VIEW, RenderConfig())
    leaves = VIEW.leaves[ROW["d#s2"]]
    table = ["d#s2.p3.t1", "d#s2.p3.t2", "d#s2.p3.t3"]
    assert [tok(n) for n in table] == [4, 2, 2]
    for target, want in ((3, table[2:]), (4, table[1:]), (7, table[1:]), (8, table)):
        c, lo, hi = b._span(ROW["d#s2.p3.t3"], target)
        assert ids(leaves[lo:hi]) == want, target


def test_span_is_never_smaller_than_the_window():
    # span_share * budget (4 tokens) is less than the window (10 tokens): the window is the unit
    c = build_ctx(["d#s2.p2.t1"], budget=40, expand="span", span_share=0.1, heading="none")
    assert c.node_ids == ["d#s2.p2.t1", "d#s2.p2.t2"]


@pytest.mark.parametrize("expand,budget,want", [
    # the paragraph when it fits, else the window, else the sentence, else nothing
    ("paragraph", 100, ["d#s2.p2"]),
    ("paragraph", 6 + 10, ["d#s2.p2.t1", "d#s2.p2.t2"]),
    ("paragraph", 6 + 5, ["d#s2.p2.t1"]),
    ("paragraph", 6 + 4, []),
    # the window when it fits, else the sentence
    ("window", 6 + 10, ["d#s2.p2.t1", "d#s2.p2.t2"]),
    ("window", 6 + 5, ["d#s2.p2.t1"]),
    ("none", 6 + 5, ["d#s2.p2.t1"]),
])
def test_sentence_units_fall_back_from_largest_to_the_sentence(expand, budget, want):
    # header "[ref_id=d] " is 6 tokens; the hit is 5, its window (the next sentence too) 10
    assert count_tokens("[ref_id=d] ") == 6 and tok("d#s2.p2.t1") == 5
    c = build_ctx(["d#s2.p2.t1"], budget=budget, expand=expand, window=1, heading="none")
    assert c.node_ids == want and c.n_tokens <= budget


def test_a_document_hit_is_all_its_sections_and_adds_only_what_is_missing():
    # a document hit is one block per section, all their leaves; sections already whole in the
    # context are skipped and the others still come in
    full = ["d#s1", "d#s2"]
    c = build_ctx(["d"], expand="none", heading="none")
    assert c.node_ids == full and c.n_blocks == 2 and c.n_units == 1
    assert c.blocks[0] == "[ref_id=d] One two three. Four five six."
    c = build_ctx(["d#s1", "d"], expand="none", heading="none")
    assert c.node_ids == full and c.n_units == 2


# the first row of the table may be any node: row numbers carry no meaning
@pytest.mark.parametrize("first", ["d#s2", "d#s2.p2", "d"])
def test_units_do_not_depend_on_row_numbers(first):
    nodes = pl.concat([NODES.filter(pl.col("node_id") == first), NODES.filter(pl.col("node_id") != first)])
    view = TreeView(nodes)
    row = {nid: i for i, nid in enumerate(view.node_id)}
    assert row[first] == 0
    b = ContextBuilder(view, RenderConfig(expand="window", window=1, heading="none"))
    for hit, want in (("d#s2.p2.t1", ["d#s2.p2.t1", "d#s2.p2.t2"]), ("d#s2.p2", ["d#s2.p2"]),
                      ("d#s2.p3.t2", ["d#s2.p3"]), ("d#s2", ["d#s2"])):
        assert b.build([row[hit]], 10_000).node_ids == want, hit


# headings and whole-paragraph text: f's first paragraph has its own text (a lead-in its sentences
# leave out), g's section has no title, n's paragraphs have no sentences, h has a section with no
# paragraphs, q's sentences start with punctuation
DOCS2 = {
    "f": [("Setup", [("text", ["A lamp.", "A lens."], "Setup: A lamp. A lens."),
                     ("text", ["Setup of the rig.", "We used a lamp.", "It was warm."])])],
    "g": [("", [("text", ["Untitled text."])])],
    "n": [("Notes", [("text", "First note."), ("text", "Second note."), ("text", "Third note.")])],
    "h": [("Alone", []), ("More", [("text", ["More one.", "More two.", "More three."])])],
    "q": [("Quotes", [("text", ["(a) One.", "(b) Two."])])],
}
VIEW2 = TreeView(make_nodes(DOCS2))
ROW2 = {nid: i for i, nid in enumerate(VIEW2.node_id)}


def build2(hits, budget=10_000, **kw):
    kw = {"expand": "none", **kw}
    c = ContextBuilder(VIEW2, RenderConfig(**kw)).build([ROW2[h] for h in hits], budget)
    assert c.n_tokens == count_tokens(c.context)  # the summed counts match the text
    return c


def test_childless_paragraphs_are_sentences_of_their_section():
    # a leaf under a section (a paragraph with no sentences) expands over its sibling paragraphs
    c = build2(["n#s1.p2"], expand="window", heading="none")
    assert c.context == "[ref_id=n] First note.\nSecond note.\nThird note."
    assert c.node_ids == ["n#s1"]
    # a leaf right under the document (a section with no paragraphs) is only itself
    c = build2(["h#s1"], expand="window", heading="none")
    assert c.context == "[ref_id=h] Alone" and c.node_ids == ["h#s1"]


@pytest.mark.parametrize("hits,heading,context", [
    # a whole paragraph renders as its own text: it starts with the title, so no title line
    (["f#s1.p1"], "all", "[ref_id=f] Setup: A lamp. A lens."),
    (["f#s1.p1.t1", "f#s1.p1.t2"], "all", "[ref_id=f] Setup: A lamp. A lens."),
    (["f#s1.p1.t2", "f#s1.p1"], "paragraphs", "[ref_id=f] Setup: A lamp. A lens."),
    # a partial paragraph renders its sentences, which do not start with the title
    (["f#s1.p1.t1"], "all", "[ref_id=f] Setup\nA lamp."),
    (["f#s1.p1.t1"], "paragraphs", "[ref_id=f] A lamp."),  # no whole paragraph: no title
    # the block's first leaf decides, wherever later units land
    (["f#s1.p1", "f#s1.p2.t2"], "all", f"[ref_id=f] Setup: A lamp. A lens.{PARA_GAP}We used a lamp."),
    (["f#s1.p2.t1", "f#s1.p2.t2"], "all", "[ref_id=f] Setup of the rig. We used a lamp."),
    (["f#s1.p2.t2", "f#s1.p2.t1"], "all", "[ref_id=f] Setup of the rig. We used a lamp."),
    (["f#s1.p2.t2"], "all", "[ref_id=f] Setup\nWe used a lamp."),
    # a section without a title gets no title line
    (["g#s1.p1"], "all", "[ref_id=g] Untitled text."),
])
def test_title_line_is_left_out_when_the_block_starts_with_the_title(hits, heading, context):
    # rule: the title line is shown (mode all, or paragraphs with a whole paragraph in the block)
    # unless the block's text starts with the title: the whole paragraph's own text when the
    # first leaf's paragraph is whole, else the first sentence; the counts include the whole
    # paragraph's own text (here 3 tokens more than its sentences)
    c = build2(hits, heading=heading)
    assert c.context == context


@pytest.mark.parametrize("hits", [
    ["d#s2.p2.t1", "d#s2.p2.t2", "d#s2.p2.t3"],
    ["d#s2.p2.t3", "d#s2.p2.t1", "d#s2.p2.t2"],
    ["d#s2.p2.t2", "d#s2.p2"],  # the paragraph hit fills both sides of its middle sentence
])
def test_a_paragraph_completed_piece_by_piece_is_whole(hits):
    # leaves of one paragraph added by several units make it whole: it gets the title line
    # (heading=paragraphs) and its node id
    c = build_ctx(hits, expand="none", heading="paragraphs")
    assert c.context == "[ref_id=d] Results\nHit sentence here. Next one follows. Last of para."
    assert c.node_ids == ["d#s2.p2"] and c.n_tokens == count_tokens(c.context)


# ---------------------------------------------------------------------------- budget
def test_extending_a_block_costs_no_separator():
    # the paragraph before the hit joins its block: 6 header + 12 + 5 tokens, no separator
    c = build_ctx(["d#s2.p2.t1", "d#s2.p1"], budget=23, expand="none", heading="none")
    assert c.context == "[ref_id=d] Alpha beta gamma. Delta epsilon zeta.\nHit sentence here."
    assert c.n_tokens == 23 and c.node_ids == ["d#s2.p1", "d#s2.p2.t1"]


@pytest.mark.parametrize("block_format,heading_format", [
    ("[ref_id={doc_id}] {heading}{text}", "{section}\n"),
    ("[{doc_id} p{page:>2}] {section:.3}: {heading}{text}", "{section} (p. {page:>2}, {doc_id})\n"),
    ("doc{doc_id}: {text}", "{section}\n"),
])
def test_filling_goes_on_while_a_one_token_block_still_fits(block_format, heading_format):
    # the budget counts as full only when not even a new block (separator, the header of a
    # one-letter document with empty fields, one token of text) fits; with exactly that much
    # room left the next sentence (5 tokens, joining the block) is still placed
    first = build_ctx(["d#s2.p2.t1"], expand="none", heading="none", block_format=block_format,
                      heading_format=heading_format)
    room = count_tokens("\n---\n") + count_tokens(block_format.format(
        doc_id="x", heading="", text="", section="", page="")) + 1
    c = build_ctx(["d#s2.p2.t1", "d#s2.p2.t2"], budget=first.n_tokens + room, expand="none",
                  heading="none", block_format=block_format, heading_format=heading_format)
    assert c.node_ids == ["d#s2.p2.t1", "d#s2.p2.t2"] and c.n_tokens == first.n_tokens + 5


def test_n_units_counts_the_ranked_nodes_that_added_text():
    # a repeated hit adds nothing and is not a unit
    c = build_ctx(["d#s2.p2.t1", "d#s2.p2.t2", "d#s2.p2.t1", "e#s1.p1.t1"], expand="none")
    assert c.n_units == 3 and c.n_blocks == 2


BIG, S1, S2, S3 = "d", "d#s1.p1.t1", "e#s1.p1.t1", "d#s2.p4.t1"
PLACED_AS = {S1: "d#s1.p1.t1", S2: "e#s1", S3: "d#s2.p4"}  # S2, S3 are whole sections/paragraphs


@pytest.mark.parametrize("patience,hits,want", [
    # stop after `patience` ranked nodes in a row that do not fit; a placed one resets the count
    (2, [BIG, S1, BIG, BIG, S2], [S1]),
    (2, [S1, BIG, S2], [S1, S2]),
    (2, [BIG, S1, BIG, S2, BIG, S3], [S1, S2, S3]),
    (3, [BIG, BIG, BIG, S1], []),
    (3, [BIG, BIG, S1], [S1]),
    # a node already in the context is no miss
    (2, [S1, BIG, S1, BIG, S2], [S1, S2]),
    # 0: every ranked node is tried
    (0, [BIG] * 5 + [S1], [S1]),
])
def test_fill_patience_stops_after_that_many_misses_in_a_row(patience, hits, want):
    # the whole document "d" (64 tokens) never fits 45; each single sentence does
    c = build_ctx(hits, budget=45, expand="none", heading="none", fill_patience=patience)
    assert c.node_ids == [PLACED_AS[h] for h in want] and c.n_units == len(want)


# ------------------------------------------------------------------ formats and counts
@pytest.mark.parametrize("block_format,separator,additive", [
    ("[ref_id={doc_id}] {heading}{text}", "\n---\n", True),                   # the defaults
    ("<document id=\"{doc_id}\">\n{heading}{text}\n</document>", "\n\n=====\n\n", True),
    ("[ref_id={doc_id}]{text}", "\n---\n", True),  # punctuation is a token of its own
    ("doc{doc_id}:{text}", "\n---\n", True),
    ("{doc_id}{text}", "\n---\n", False),  # the text glued to the document id
    ("{text}{doc_id}", "\n---\n", False),
    ("{page}{text}", "\n---\n", False),  # ... to the page
    ("ref{heading}_{text}", "\n---\n", False),  # ... to what follows the title line
    ("{doc_id}: {text}", "", False),  # one block's last word glued to the next block
])
def test_counts_are_summed_only_for_formats_that_join_text_by_whitespace_or_punctuation(
        block_format, separator, additive):
    # a context's token count is the sum of its parts only when the format and the separator
    # never glue the text to a word character; otherwise the blocks are counted on the final
    # text; either way n_tokens is the count of the context
    b = ContextBuilder(VIEW, RenderConfig(block_format=block_format, separator=separator,
                                          expand="none", heading="all"))
    assert b.additive is additive
    c = b.build([ROW["d#s2.p3.t3"], ROW["e#s1.p1.t1"], ROW["d#s2.p2.t1"]], 10_000)
    assert c.n_blocks == 2 and c.n_tokens == count_tokens(c.context)


def test_exact_counts_keep_a_context_that_fits_the_budget_exactly():
    # with a non-additive format the blocks are counted on the final text; a context of exactly
    # the budget keeps all its blocks (here no text is glued: the sentences end with a period)
    kw = dict(block_format="{text}{doc_id}", expand="none", heading="none")
    assert count_tokens("Hit sentence here.d") == 6 and count_tokens("Elsewhere text sits.e") == 7
    c = build_ctx(["d#s2.p2.t1", "e#s1.p1.t1"], budget=6 + 3 + 7, **kw)
    assert c.context == "Hit sentence here.d\n---\nElsewhere text sits.e" and c.n_tokens == 16
    assert c.blocks == ["Hit sentence here.d", "Elsewhere text sits.e"] and c.block_doc_ids == ["d", "e"]
    c = build_ctx(["d#s2.p2.t1", "e#s1.p1.t1"], budget=15, **kw)
    assert c.context == "Hit sentence here.d" and c.n_tokens == 6 and c.doc_ids == ["d"]


def test_formats_get_every_field_with_its_value():
    # block_format and heading_format may use doc_id, section and page (with format specs)
    c = build_ctx(["d#s2.p2.t1"], expand="none", heading="all",
                  block_format="[{doc_id} p{page:>2}] {section:.3}: {heading}{text}",
                  heading_format="{section} (p. {page:>2}, {doc_id})\n")
    assert c.context == "[d p 1] Res: Results (p.  1, d)\nHit sentence here."
    assert c.n_tokens == count_tokens(c.context)


def test_exact_counts_drop_trailing_blocks_while_over_the_budget():
    # with a non-additive format the context is counted on its final text and trailing blocks are
    # dropped while it is over the budget. "{doc_id}{text}{doc_id}" planned as header + text
    # undercounts a text in parentheses: the empty block "qq" is 1 token, "q(a) One.q" is 7, not 1 + 5
    fmt = "{doc_id}{text}{doc_id}"
    b = ContextBuilder(VIEW2, RenderConfig(block_format=fmt, expand="none", heading="none"))
    assert b.additive is False
    assert (count_tokens("qq"), count_tokens("(a) One."), count_tokens("q(a) One.q")) == (1, 5, 7)
    assert count_tokens("nFirst note.n") == count_tokens("nn") + count_tokens("First note.") == 5
    hits = [ROW2["n#s1.p1"], ROW2["q#s1.p1.t1"]]
    c = b.build(hits, 5 + 3 + 7)  # room for the exact count
    assert c.context == "nFirst note.n\n---\nq(a) One.q" and c.n_tokens == 15
    c = b.build(hits, 5 + 3 + 6)  # room for the planned count only: the second block goes
    assert c.context == "nFirst note.n" and c.n_tokens == 5
    assert c.blocks == ["nFirst note.n"] and c.block_doc_ids == c.doc_ids == ["n"]
    assert c.node_ids == ["n#s1.p1"] and c.n_blocks == 1
    c = b.build(hits[1:], 6)  # a lone block over the budget: nothing is left
    assert (c.context, c.n_tokens, c.n_blocks, c.blocks) == ("", 0, 0, [])


@pytest.mark.parametrize("kw", [
    dict(block_format="{section}{text}"),  # the text glued to the section title
    dict(heading_format="{section}", heading="all"),  # the title line glued to the text
])
def test_text_glued_to_the_section_title_is_counted_exactly(kw):
    # "Results" + "Alpha" read as one word: the sum of the parts over-counts, so the builder must
    # see the format as not additive and count the rendered text
    builder = ContextBuilder(VIEW, RenderConfig(expand="none", **kw))
    assert builder.additive is False
    c = builder.build([ROW["d#s2.p1.t1"]], 1000)
    assert c.n_tokens == count_tokens(c.context)
    assert c.context in ("ResultsAlpha beta gamma.", "[ref_id=d] ResultsAlpha beta gamma.")


def test_a_unit_that_extends_a_block_fits_where_a_new_block_would_not():
    # a block of both sentences is 16 tokens: after the first (11), no new block fits the
    # budget of 16, but the second sentence still extends the block already there
    c = build_ctx(["d#s2.p2.t1", "d#s2.p2.t2"], budget=16, expand="none", heading="none")
    assert c.node_ids == ["d#s2.p2.t1", "d#s2.p2.t2"] and c.n_tokens == 16 == count_tokens(c.context)
    assert c.context == "[ref_id=d] Hit sentence here. Next one follows."


def test_a_numeric_page_format_spec_is_accepted():
    builder = ContextBuilder(VIEW, RenderConfig(block_format="[ref_id={doc_id} p.{page:d}] {heading}{text}",
                                                expand="none", heading="none"))
    assert builder.build([ROW["d#s2.p1.t1"]], 1000).context == "[ref_id=d p.1] Alpha beta gamma."


def test_span_that_passed_its_window_falls_back_to_the_window():
    # the hit is a childless paragraph between a three-sentence paragraph and two more paragraphs:
    # its window (one sibling each side) is p1 (3 leaves), p2, p3; the span grows leaf by leaf
    # (p3, p1.t3, p4, p1.t2) and so holds as many leaves but other ones; when it does not fit,
    # the window is tried before the lone hit
    docs = {"m": [("Mixed", [("text", ["Aa one.", "Ab two.", "Ac three."]), ("text", "Xx hit and more words here."),
                             ("text", "Yy next and more words here."), ("text", "Zz.")])]}
    view = TreeView(make_nodes(docs))
    row = {nid: i for i, nid in enumerate(view.node_id)}
    builder = ContextBuilder(view, RenderConfig(expand="span", window=1, span_share=0.0, heading="none"))
    leaves = view.leaves[row["m#s1"]]
    span = builder._span(row["m#s1.p2"], 0)
    assert [view.node_id[x] for x in leaves[span[1]:span[2]]] == ["m#s1.p2"]  # target 0: the hit alone
    units = [[view.node_id[x] for x in leaves[lo:hi]] for (_, lo, hi), in builder._candidates(row["m#s1.p2"], 0)]
    assert units[:2] == [
        ["m#s1.p1.t2", "m#s1.p1.t3", "m#s1.p2", "m#s1.p3", "m#s1.p4"],  # the span
        ["m#s1.p1.t1", "m#s1.p1.t2", "m#s1.p1.t3", "m#s1.p2", "m#s1.p3"],  # the window: same size, other leaves
    ]
    c = builder.build([row["m#s1.p1"], row["m#s1.p2"]], 32)
    assert c.node_ids == ["m#s1.p1", "m#s1.p2", "m#s1.p3"] and c.n_tokens <= 32


ONE = {"q": [("S", [("text", ["Ping", "Pong"])]), ("T", [("text", ["Bye"])])]}  # one-token sentences
VIEW1 = TreeView(make_nodes(ONE))
ROW1 = {nid: i for i, nid in enumerate(VIEW1.node_id)}


def test_the_budget_full_stop_is_exact_at_its_edges():
    # the smallest new block is its header plus one token: a budget of exactly that still takes one
    header = count_tokens("[ref_id=q] ")
    cfg = RenderConfig(expand="none", heading="none")
    c = ContextBuilder(VIEW1, cfg).build([ROW1["q#s1.p1.t1"]], header + 1)
    assert (c.context, c.n_tokens) == ("[ref_id=q] Ping", header + 1)
    # one token of room left still takes a one-token sentence into the block already there
    c = ContextBuilder(VIEW1, cfg).build([ROW1["q#s1.p1.t1"], ROW1["q#s1.p1.t2"]], header + 2)
    assert (c.context, c.n_tokens, c.node_ids) == ("[ref_id=q] Ping Pong", header + 2, ["q#s1"])


def test_formats_glued_without_a_heading_line_are_not_additive():
    # "{doc_id}{heading}{text}": with no heading line the text is glued to the doc id ("qPing")
    builder = ContextBuilder(VIEW1, RenderConfig(block_format="{doc_id}{heading}{text}", expand="none",
                                                 heading="none"))
    assert builder.additive is False
    c = builder.build([ROW1["q#s1.p1.t1"]], 100)
    assert (c.context, c.n_tokens) == ("qPing", count_tokens("qPing"))


def test_a_block_keeps_its_title_line_once_it_holds_a_whole_paragraph():
    # the whole paragraph p1 earns the block its title line; a later partial paragraph keeps it
    c = build_ctx(["d#s2.p1", "d#s2.p2.t1"], expand="none", heading="paragraphs")
    assert c.context == f"[ref_id=d] Results\nAlpha beta gamma. Delta epsilon zeta.\nHit sentence here."
    assert c.n_tokens == count_tokens(c.context)


def test_breadth_first_places_the_lower_hits_before_widening_the_first():
    """breadth_share: the ranked hits' windows go in first (up to that share of the budget),
    then the first hit widens with the rest, so a hit ranked lower is not crowded out by the
    spans of the ones above it."""
    docs = {"d": [(f"S{i}", [("text", [f"Topic {i} sentence {j} with some filler words here."
                                        for j in range(12)])]) for i in range(6)]}
    view = TreeView(make_nodes(docs))
    row = {nid: i for i, nid in enumerate(view.node_id)}
    hits = [row[f"d#s{i}.p1.t6"] for i in range(1, 7)]

    def build(breadth: float, ranked=hits):
        cfg = RenderConfig(span_share=0.5, span_max_tokens=160, breadth_share=breadth, heading="none")
        return ContextBuilder(view, cfg).build(ranked, 400)

    def sections(ctx):
        return [f"S{i}" for i in range(1, 7) if any(n.startswith(f"d#s{i}.") for n in ctx.node_ids)]

    depth, breadth = build(0.0), build(0.5)
    # depth first: the first two hits' spans take the budget, the last two hits are left out
    assert sections(depth) == ["S1", "S2", "S3", "S4"] and depth.n_units == 4
    assert sum(n.startswith("d#s2.") for n in depth.node_ids) == 11
    # breadth first: every hit is in (its window), and the first hit is widened to its span
    assert sections(breadth) == ["S1", "S2", "S3", "S4", "S5", "S6"] and breadth.n_units == 6
    assert [n for n in breadth.node_ids if n.startswith("d#s2.")] == ["d#s2.p1.t5", "d#s2.p1.t6", "d#s2.p1.t7"]
    assert sum(n.startswith("d#s1.") for n in breadth.node_ids) == 11
    assert breadth.n_tokens <= 400 and breadth.n_tokens == count_tokens(breadth.context)
    # a single hit is widened exactly as without it
    assert build(0.5, hits[:1]).node_ids == build(0.0, hits[:1]).node_ids
    with pytest.raises(ValueError, match="breadth_share"):
        RenderConfig(breadth_share=1.5).validate()


def test_breadth_first_unit_of_a_sentence_alone_in_its_paragraph():
    """A hit alone in its paragraph (a one-line table row) takes its section's neighbouring
    leaves in the breadth-first pass (its own paragraph has none), then the sentence alone
    where those do not fit."""
    builder = ContextBuilder(VIEW, RenderConfig(breadth_share=0.5))
    closing = ROW["d#s2.p4.t1"]  # the section's last paragraph, one sentence
    units = list(builder._small_units(closing))
    assert [ids(VIEW.leaves[c][lo:hi]) for c, lo, hi in (u[0] for u in units)] == [
        ["d#s2.p3.t3", "d#s2.p4.t1"], ["d#s2.p4.t1"]]
    hit = ROW["d#s2.p2.t2"]  # in a paragraph of three: the window, then the sentence
    units = list(builder._small_units(hit))
    assert [ids(VIEW.leaves[c][lo:hi]) for c, lo, hi in (u[0] for u in units)] == [
        ["d#s2.p2.t1", "d#s2.p2.t2", "d#s2.p2.t3"], ["d#s2.p2.t2"]]
    # a paragraph or section hit is its leaves; expand=none gives the sentence alone
    assert list(builder._small_units(ROW["d#s2.p3"])) == [builder._node_unit(ROW["d#s2.p3"])]
    alone = ContextBuilder(VIEW, RenderConfig(breadth_share=0.5, expand="none"))
    assert [ids(VIEW.leaves[c][lo:hi]) for c, lo, hi in (u[0] for u in alone._small_units(hit))] == [
        ["d#s2.p2.t2"]]


def _paged_view(n_sections: int, one_page: bool = False) -> TreeView:
    """Sections of twelve sentences, each section on its own page (or all on page 1)."""
    docs = {"d": [(f"S{i}", [("text", [f"Topic {i} sentence {j} with some filler words here."
                                        for j in range(12)])]) for i in range(n_sections)]}
    nodes = make_nodes(docs)
    if not one_page:
        nodes = nodes.with_columns(pl.col("node_id").str.extract(r"#s(\d+)").cast(pl.Int64)
                                   .fill_null(1).alias("page"))
    return TreeView(nodes)


def test_a_scattered_ranking_places_its_hits_alone_before_widening():
    """spread_pages: when the first spread_top ranked nodes lie on at least spread_pages pages
    (the hits disagree on where the answer is), the breadth pass places each ranked sentence
    alone up to scattered_share of the budget, so hits ranked lower get in; hits that agree (on
    one page) keep their windows and spans."""
    def build(view, spread_pages):
        row = {nid: i for i, nid in enumerate(view.node_id)}
        hits = [row[f"d#s{i}.p1.t6"] for i in range(1, 13)]
        cfg = RenderConfig(span_share=0.5, span_max_tokens=160, heading="none",
                           spread_pages=spread_pages)
        return ContextBuilder(view, cfg), ContextBuilder(view, cfg).build(hits, 400)

    def sections(ctx):
        return {n.split(".")[0] for n in ctx.node_ids}

    paged = _paged_view(12)
    hits = [ROW_OF(paged, f"d#s{i}.p1.t6") for i in range(1, 13)]
    builder, scattered = build(paged, 7)
    assert builder.spread(hits) == 10 and builder.scattered(hits)
    _, windows = build(paged, 0)  # off: the windows of the hits (three sentences each)
    # every hit's sentence is in; the rule off leaves the lower hits out
    assert all(f"d#s{i}.p1.t6" in scattered.node_ids for i in range(1, 13))
    assert len(sections(scattered)) == 12 > len(sections(windows))
    assert "d#s12.p1.t6" not in windows.node_ids
    # the last hits stand alone (the first are widened with what the breadth pass left)
    assert "d#s12.p1.t5" not in scattered.node_ids and "d#s1.p1.t5" in scattered.node_ids
    assert scattered.n_tokens <= 400 and scattered.n_tokens == count_tokens(scattered.context)
    # the same hits on one page agree: windows and spans as with the rule off
    same = _paged_view(12, one_page=True)
    b1, agree = build(same, 7)
    assert not b1.scattered([ROW_OF(same, f"d#s{i}.p1.t6") for i in range(1, 13)])
    assert agree.node_ids == build(same, 0)[1].node_ids
    with pytest.raises(ValueError, match="scattered_share"):
        RenderConfig(scattered_share=2.0).validate()


def ROW_OF(view: TreeView, node_id: str) -> int:
    return view.node_id.index(node_id) if isinstance(view.node_id, list) else list(view.node_id).index(node_id)


def test_a_ranked_node_repeating_placed_text_is_skipped():
    """dedup_text: a sentence whose text is already in the context (the same sentence in a
    filing's summary and in its notes) is skipped, and the budget goes to the next hit."""
    docs = {"d": [("Summary", [("text", ["Revenue grew on pricing.", "Costs were flat."])]),
                  ("Notes", [("text", ["Revenue grew on pricing.", "Margins rose."])]),
                  ("Other", [("text", ["Cash fell in the year.", "Debt was repaid."])])]}
    view = TreeView(make_nodes(docs))
    hits = [ROW_OF(view, n) for n in ("d#s1.p1.t1", "d#s2.p1.t1", "d#s3.p1.t1")]
    budget = 2 * count_tokens("[ref_id=d] Revenue grew on pricing.") + count_tokens("\n---\n") + 2

    def build(dedup):
        cfg = RenderConfig(expand="none", heading="none", breadth_share=0.0, dedup_text=dedup)
        return ContextBuilder(view, cfg).build(hits, budget).node_ids

    assert build(False) == ["d#s1.p1.t1", "d#s2.p1.t1"]
    assert build(True) == ["d#s1.p1.t1", "d#s3.p1.t1"]
