"""The text segmenter on snippets in the style of raw PDF extraction (written for these tests)."""

from __future__ import annotations

from helpers_segment import _items, _text_block

from kohaku.ingest.text.clean import document_vocab, fix_small_caps, join_lines, normalize_line
from kohaku.ingest.text.headings import best_chain, match_heading, numbering_step_ok, split_run_in
import pytest

from kohaku.ingest.text.segment import (
    Paragraph,
    Section,
    SegmentConfig,
    _attach_table_captions,
    _caps_context_ok,
    _context_ok,
    _continues_heading,
    _cut_paragraph,
    _drop_furniture,
    _footnote_end,
    _is_table_row,
    _Item,
    _join_first,
    _merge_short_rows,
    _merge_tiny,
    _next_line,
    _page_sections,
    _percentile,
    _prev_index,
    _prev_line,
    _same_title,
    _starts_paragraph,
    _title_case_heading,
    heading_sections,
    segment_document,
)
from kohaku.ingest.text.sentences import split_sentences


# --------------------------------------------------------------------- normalising


def test_normalize_line_collapses_spaces_and_fixes_punctuation():
    assert normalize_line("Carbon   Emissions   of   training\xa0\xa0") == "Carbon Emissions of training"
    assert normalize_line("as shown by Smith et al. , 2019 ; see NLP .") == "as shown by Smith et al., 2019; see NLP."
    assert normalize_line("the \ufb01nal ef\ufb01ciency") == "the final efficiency"
    assert normalize_line("( see Table 2 )") == "(see Table 2)"


def test_dehyphenation_joins_broken_words_and_keeps_real_hyphens():
    vocab = document_vocab(["the improving trend", "a state-of-the-art model", "GPT-3 and energy-efficient chips"])
    assert join_lines(["we saw steady improv-", "ing results"], vocab) == "we saw steady improving results"
    assert join_lines(["a state-of-the-", "art model"], vocab) == "a state-of-the-art model"
    assert join_lines(["models such as GPT-", "3 were used"], vocab) == "models such as GPT-3 were used"
    assert join_lines(["very energy-", "efficient chips"], vocab) == "very energy-efficient chips"
    # unknown word, no evidence: a line-end hyphen inside a word is a break
    assert join_lines(["the consump-", "tion of power"], set()) == "the consumption of power"
    # two known words never seen joined keep their hyphen
    vocab2 = document_vocab(["medium sized", "length of runs"])
    assert join_lines(["a medium-", "length run"], vocab2) == "a medium-length run"


def test_small_caps_headings_are_rejoined():
    assert fix_small_caps("I. I NTRODUCTION") == "I. INTRODUCTION"
    assert fix_small_caps("3.1 O PERATIONAL IMPACTS") == "3.1 OPERATIONAL IMPACTS"
    assert fix_small_caps("A PPENDIX") == "APPENDIX"
    assert fix_small_caps("A SURVEY OF COOLING") == "A SURVEY OF COOLING"


# ------------------------------------------------------------------------ sentences


def test_sentence_splitter_respects_abbreviations_numbers_and_citations():
    text = (
        "Data centres in the U.S. used 4.4% of electricity, e.g. for cooling and lighting. "
        "Smith et al. (2021) measured a PUE of 1.58 with tool v1.2.3 in Fig. 3 and Eq. 2. "
        "J. Smith disagreed, vs. the earlier No. 5 estimate of approx. 2 TWh [12]. "
        "The next sentence starts here! Does it? Yes, it does."
    )
    got = split_sentences(text)
    assert got == [
        "Data centres in the U.S. used 4.4% of electricity, e.g. for cooling and lighting.",
        "Smith et al. (2021) measured a PUE of 1.58 with tool v1.2.3 in Fig. 3 and Eq. 2.",
        "J. Smith disagreed, vs. the earlier No. 5 estimate of approx. 2 TWh [12].",
        "The next sentence starts here! Does it? Yes, it does.",
    ]
    # joining the sentences gives the text back
    assert " ".join(got) == " ".join(text.split())


def test_short_fragments_are_merged_and_long_sentences_cut():
    got = split_sentences("Results. The chillers drew 140 kW at the lowest set point. OK. Done.", min_chars=15)
    assert got == ["Results. The chillers drew 140 kW at the lowest set point. OK. Done."]
    got = split_sentences("A first complete sentence is here. Yes. Another complete sentence follows.")
    assert got == ["A first complete sentence is here. Yes.", "Another complete sentence follows."]
    long = "; ".join(f"clause number {i} about cooling" for i in range(60))
    parts = split_sentences(long, max_chars=300)
    assert len(parts) > 1 and all(len(p) <= 300 for p in parts)


def test_footnote_mark_after_period_ends_sentence():
    assert split_sentences("Emissions fell by a third.3 The next year they rose again.") == [
        "Emissions fell by a third.3",
        "The next year they rose again.",
    ]


# ------------------------------------------------------------------------- headings


def test_heading_patterns():
    assert match_heading("1 Introduction").number == (1,)
    assert match_heading("1.Introduction").title == "1 Introduction"
    assert match_heading("2.3 Energy measurement at the right granularity").level == 2
    assert match_heading("IV. EXPERIMENTAL RESULTS").kind == "roman"
    assert match_heading("II. R ELATED WORK").title == "II. RELATED WORK"
    assert match_heading("ABSTRACT").kind == "known"
    assert match_heading("Acknowledgments").kind == "known"
    assert match_heading("EXECUTIVE SUMMARY").kind == "known"
    assert match_heading("COOLING AND POWER DELIVERY").kind == "caps"
    assert match_heading("A.1 Additional measurements").kind == "lettered"
    # not headings: sentences, table rows, captions, spaced figure labels, years
    assert match_heading("1. We measured the power of every rack during the whole study.") is None
    assert match_heading("3 0.21 0.13 0.45 0.50") is None
    assert match_heading("Table 2: Chiller power by set point") is None
    assert match_heading("G O A T") is None
    assert match_heading("2023. Fast inference from transformers via spec-") is None
    assert split_run_in("Abstract\u2014Data centres use water.") == ("Abstract", "Data centres use water.")
    assert split_run_in("Abstract: We study cooling.") == ("Abstract", "We study cooling.")


def test_numbering_chain_drops_list_items_and_footnotes():
    assert numbering_step_ok((2,), (2, 1))
    assert numbering_step_ok((2, 3), (3,))
    assert not numbering_step_ok((3,), (7,))
    assert not numbering_step_ok((4, 2), (4, 1))
    # 1 Intro, 2 Method, 7 (a footnote), 3 Results, 1 (a list item), 4 Conclusion
    numbers = [(1,), (2,), (7,), (3,), (1,), (4,)]
    assert best_chain(numbers) == [0, 1, 3, 5]
    # an affiliation "1 Google" before "1 Introduction": the later one wins the tie
    assert best_chain([(1,), (1,), (2,)]) == [1, 2]


RAW_PAPER = """Cooling Overheads of Accelerator Clusters
A. Author and B. Author
Abstract\u2014We measure how much energy the cooling of an accel-
erator cluster takes and how it changes with the season. The
overhead is large in summer.
I. I NTRODUCTION
Machine learning clusters draw more power per rack than the
servers that most machine rooms were built for. Their cooling
therefore matters for the total energy use.
In this paper we report one year of measurements from a state-of-the-
art cluster with 512 accelerators.
II. M ETHOD
We logged the chiller power every minute and the IT power at the
power distribution units. The PUE is their ratio plus one.
Chiller
Month Power (kW) PUE
January 120 1.21
April 135 1.25
July 190 1.39
October 140 1.26
TABLE I: Monthly chiller power and PUE of the cluster.
III. R ESULTS
The overhead peaked in July, when the PUE reached 1.39, and was
lowest in January.
IV. C ONCLUSION
Summer cooling dominates the overhead."""


def test_segment_raw_ieee_paper():
    sections = segment_document([_text_block(RAW_PAPER)], "Cooling Overheads of Accelerator Clusters")
    titles = [s.title for s in sections]
    assert titles == [
        "Cooling Overheads of Accelerator Clusters",
        "Abstract",
        "I. INTRODUCTION",
        "II. METHOD",
        "III. RESULTS",
        "IV. CONCLUSION",
    ]
    assert [s.source for s in sections] == ["front"] + ["heading"] * 5
    abstract = sections[1].paragraphs[0]
    assert abstract.text.startswith("We measure how much energy the cooling of an accelerator cluster")
    intro = sections[2].paragraphs
    # short line ending a sentence followed by a capital: a new paragraph
    assert len(intro) == 2
    assert "a state-of-the-art cluster with 512 accelerators." in intro[1].text
    method = sections[3].paragraphs
    table = [p for p in method if p.kind == "table"]
    assert len(table) == 1
    assert table[0].sentences[0] == "TABLE I: Monthly chiller power and PUE of the cluster."
    assert "July 190 1.39" in table[0].sentences
    assert "January 120 1.21" in table[0].sentences


RAW_NUMBERED = """2 Related Work
Earlier studies of data centre energy focused on servers.
3 Method
3.1 Setup
We ran the benchmark on 8 GPUs in one node.
1 The benchmark is public.
3.2 Metrics
We report energy per request and the
2 power draw of each GPU in watts, averaged over the run.
4 Results
The H-class GPUs used 30% less energy per request."""


def test_numbered_headings_and_paths():
    sections = segment_document([_text_block(RAW_NUMBERED)], "A Paper")
    assert [s.title for s in sections] == ["2 Related Work", "3.1 Setup", "3.2 Metrics", "4 Results"]
    assert sections[1].path == "3 Method > 3.1 Setup"
    # "2 power draw ..." continues a sentence and is no heading
    assert "energy per request and the 2 power draw" in sections[2].paragraphs[0].text


def test_paragraph_continues_across_pages_and_around_tables():
    page1 = (
        "Results\n"
        "The cluster used less energy after the retrofit because the\n"
        "fans could run at a lower speed and the"
    )
    page2 = (
        "chillers worked less in winter. This second sentence ends here.\n"
        "A new paragraph starts on this line after a short one.\n"
        "It goes on."
    )
    sections = segment_document([_text_block(page1, 1), _text_block(page2, 2)], "Doc")
    paras = [p.text for s in sections for p in s.paragraphs]
    assert paras[0].startswith("The cluster used less energy after the retrofit because the fans could run")
    assert "and the chillers worked less in winter." in paras[0]


def test_page_sections_when_no_headings():
    blocks = [_text_block("just some words on page one that form a sentence.", 1),
              _text_block("and more words on page two that form a sentence.", 2)]
    sections = segment_document(blocks, "Doc")
    assert [s.title for s in sections] == ["Page 1", "Page 2"]
    assert all(s.source == "page" for s in sections)


def test_running_headers_and_page_numbers_are_dropped():
    bodies = ["The chillers ran all winter.", "Fans were replaced in spring.", "A heat wave came in June.",
              "Power prices rose in autumn.", "The audit found two leaks.", "Water use fell by a tenth."]
    blocks = []
    for page, body in enumerate(bodies, start=1):
        text = (
            f"Journal of Cooling Studies, Vol. 3, page {page}\n"
            f"On this page: {body}\n"
            f"{page}"
        )
        blocks.append(_text_block(text, page))
    text = " ".join(p.text for s in segment_document(blocks, "Doc") for p in s.paragraphs)
    assert "Journal of Cooling Studies" not in text
    assert "On this page: A heat wave came in June." in text
    assert not text.rstrip().endswith("6")


def test_segmentation_is_deterministic():
    a = segment_document([_text_block(RAW_PAPER)], "T", SegmentConfig())
    b = segment_document([_text_block(RAW_PAPER)], "T", SegmentConfig())
    assert [(s.title, [p.sentences for p in s.paragraphs]) for s in a] == [
        (s.title, [p.sentences for p in s.paragraphs]) for s in b
    ]


# ------------------------------------------------- whole documents, every field pinned


def _outline(sections):
    """(title, path, level, source, page, [(kind, page, caption, sentences)]) per section."""
    return [
        (s.title, s.path, s.level, s.source, s.page, [(p.kind, p.page, p.caption, p.sentences) for p in s.paragraphs])
        for s in sections
    ]


def _titles_and_texts(text, title):
    return [(s.title, [p.text for p in s.paragraphs]) for s in segment_document([_text_block(text)], title)]


def test_parsed_blocks_headings_tables_and_captions():
    blocks = [
        {"page": 1, "kind": "heading", "text": "Cooling the\nCluster", "level": 1},
        {"page": 1, "text": "Data centres need cooling all year, and the chillers run\r\nfor most of the hours of "
                            "the year.\r\rThe fans also draw power, and more of it in the summer."},
        {"kind": "heading", "text": "Measured Power", "level": 2, "page": 2},
        {"page": 2, "kind": "caption", "text": "Table 1: Power by month\n"},
        {"page": 2, "kind": "table", "text": "Month kW\nJanuary 120\n\nJuly 190"},
        {"page": 2, "kind": "caption", "text": "Figure 1: The chillers\non the roof."},
        {"page": 2, "kind": "text", "text": "The table shows that summer costs more power than winter does."},
        {"kind": "heading", "text": "Outlook", "level": None, "page": 3},
        {"text": "Better chillers would help a great deal in the summer months.", "page": 3},  # no kind: text
        {"page": 3, "kind": "table", "text": "\n"},  # empty blocks add nothing
        {"page": 3, "kind": "heading", "text": " \n"},
        {"page": 3, "kind": "caption", "text": ""},
    ]
    assert _outline(segment_document(blocks, "Doc")) == [
        ("Cooling the Cluster", "Cooling the Cluster", 1, "heading", 1, [
            ("text", 1, False, ["Data centres need cooling all year, and the chillers run for most of the hours of the year."]),
            ("text", 1, False, ["The fans also draw power, and more of it in the summer."]),
        ]),
        ("Measured Power", "Cooling the Cluster > Measured Power", 2, "heading", 2, [
            ("table", 2, False, ["Table 1: Power by month", "Month kW", "January 120", "July 190"]),
            ("text", 2, True, ["Figure 1: The chillers on the roof."]),
            ("text", 2, False, ["The table shows that summer costs more power than winter does."]),
        ]),
        ("Outlook", "Outlook", 1, "heading", 3, [
            ("text", 3, False, ["Better chillers would help a great deal in the summer months."]),
        ]),
    ]


IEEE_LETTERED = """I. INTRODUCTION
Accelerator clusters draw a lot of power and their cooling matters.
A. Motivation
Summer heat raises the load on the chillers by a large margin.
B. Contributions
We report one year of measurements from a production cluster.
II. MEASUREMENTS
The meters logged every minute of the year without any gaps.
A. Chillers
The chillers drew between 120 and 190 kW over the year.
III. CONCLUSION
Cooling is a large share of the energy use of the cluster."""


def test_lettered_subsections_restart_under_each_roman_part():
    sections = segment_document([_text_block(IEEE_LETTERED)], "Doc")
    assert [(s.title, s.path, s.level) for s in sections] == [
        ("I. INTRODUCTION", "I. INTRODUCTION", 1),
        ("A. Motivation", "I. INTRODUCTION > A. Motivation", 2),
        ("B. Contributions", "I. INTRODUCTION > B. Contributions", 2),
        ("II. MEASUREMENTS", "II. MEASUREMENTS", 1),
        ("A. Chillers", "II. MEASUREMENTS > A. Chillers", 2),
        ("III. CONCLUSION", "III. CONCLUSION", 1),
    ]
    assert [p.text for s in sections for p in s.paragraphs] == [
        line for line in IEEE_LETTERED.splitlines() if line.endswith(".") and not line[:4].strip(".").isupper()
    ]


APPENDIX = """1 Introduction
We study the energy use of training large language models on GPUs.
2 Method
We measure the power of every GPU with the vendor tools every second.
References
[1] A. Author. A paper about energy. 2020.
A Additional Plots
The plots show the power draw of every run in the study in detail.
B Hardware Details
The cluster has 64 nodes with eight GPUs each and fast links."""


def test_appendices_after_the_numbered_body_are_top_level():
    sections = segment_document([_text_block(APPENDIX)], "Doc")
    assert [(s.title, s.path, s.level, len(s.paragraphs)) for s in sections] == [
        ("1 Introduction", "1 Introduction", 1, 1),
        ("2 Method", "2 Method", 1, 1),
        ("References", "References", 1, 1),
        ("A Additional Plots", "A Additional Plots", 1, 1),
        ("B Hardware Details", "B Hardware Details", 1, 1),
    ]


def test_title_case_headings_without_numbering():
    text = (
        "Background\n"
        "Data centres use a growing share of the electricity of many countries, and the\n"
        "share is expected to grow further with the spread of large models.\n"
        "Our Measurement Approach\n"
        "We measured the cluster over a whole year with meters on every rack of the\n"
        "machine room, logging the power at one minute intervals.\n"
        "Results\n"
        "The cooling overhead was largest in the summer months of the year."
    )
    assert _outline(segment_document([_text_block(text)], "Doc")) == [
        ("Background", "Background", 1, "heading", 1, [("text", 1, False, [
            "Data centres use a growing share of the electricity of many countries, and the share is expected to "
            "grow further with the spread of large models."])]),
        ("Our Measurement Approach", "Our Measurement Approach", 1, "heading", 1, [("text", 1, False, [
            "We measured the cluster over a whole year with meters on every rack of the machine room, logging the "
            "power at one minute intervals."])]),
        ("Results", "Results", 1, "heading", 1, [("text", 1, False, [
            "The cooling overhead was largest in the summer months of the year."])]),
    ]
    never = segment_document([_text_block(text)], "Doc", SegmentConfig(title_case_headings="never"))
    assert [s.title for s in never] == ["Background", "Results"]  # the known names only


def test_wrapped_headings_are_joined():
    text = (
        "1 Introduction\n"
        "We study how much energy the training of large language models takes on GPUs.\n"
        "2 Energy Use of the Training and\n"
        "Inference Phases\n"
        "Training takes most of the energy, but inference adds up over many requests.\n"
        "3 RESULTS OF THE\n"
        "MEASUREMENT CAMPAIGN\n"
        "The measurements cover one year of operation of the production cluster."
    )
    assert _titles_and_texts(text, "Doc") == [
        ("1 Introduction", ["We study how much energy the training of large language models takes on GPUs."]),
        ("2 Energy Use of the Training and Inference Phases",
         ["Training takes most of the energy, but inference adds up over many requests."]),
        ("3 RESULTS OF THE MEASUREMENT CAMPAIGN",
         ["The measurements cover one year of operation of the production cluster."]),
    ]


def test_footnotes_inside_a_sentence_become_a_caption_and_the_sentence_goes_on():
    text = (
        "1 Introduction\n"
        "The energy use of the cluster grew by a third in the year of the\n"
        "1 See the operator's yearly report.\n"
        "2 Measured at the power distribution units.\n"
        "study, mostly because of cooling in summer.\n"
        "2 Method\n"
        "We logged the power of every rack at one minute intervals all year."
    )
    assert _outline(segment_document([_text_block(text)], "Doc")) == [
        ("1 Introduction", "1 Introduction", 1, "heading", 1, [
            ("text", 1, False, ["The energy use of the cluster grew by a third in the year of the study, mostly "
                                "because of cooling in summer."]),
            ("text", 1, True, ["1 See the operator's yearly report.", "2 Measured at the power distribution units."]),
        ]),
        ("2 Method", "2 Method", 1, "heading", 1, [
            ("text", 1, False, ["We logged the power of every rack at one minute intervals all year."])]),
    ]


def test_table_of_contents_lines_are_no_headings():
    text = (
        "Contents\n"
        "1 Introduction . . . . 3\n"
        "2 Background . . . . 5\n"
        "3 Method . . . . 9\n"
        "4 Results . . . . 12\n"
        "Abstract\n"
        "We measure the cooling of a cluster over one year of operation.\n"
        "1 Introduction\n"
        "Large models need large clusters, and large clusters need a lot of cooling.\n"
        "2 Background\n"
        "Earlier work measured single servers rather than whole machine rooms."
    )
    sections = segment_document([_text_block(text)], "Doc")
    assert [(s.title, [p.sentences for p in s.paragraphs]) for s in sections] == [
        ("Contents", [["1 Introduction.... 3", "2 Background.... 5", "3 Method.... 9", "4 Results.... 12"]]),
        ("Abstract", [["We measure the cooling of a cluster over one year of operation."]]),
        ("1 Introduction", [["Large models need large clusters, and large clusters need a lot of cooling."]]),
        ("2 Background", [["Earlier work measured single servers rather than whole machine rooms."]]),
    ]


@pytest.mark.parametrize("leader", [" . . . .", "", "....."])
def test_the_body_heading_that_repeats_a_contents_entry_is_kept(leader):
    # no "Abstract" between the contents and the body: the repeated "1 Introduction" ends the run
    text = (
        "Contents\n"
        f"1 Introduction{leader} 3\n2 Background{leader} 5\n3 Method{leader} 9\n4 Results{leader} 12\n"
        "1 Introduction\n"
        "Large models need large clusters, and large clusters need a lot of cooling.\n"
        "2 Background\n"
        "Earlier work measured single servers rather than whole machine rooms."
    )
    sections = segment_document([_text_block(text)], "Doc")
    assert [s.title for s in sections] == ["Contents", "1 Introduction", "2 Background"]
    assert len(sections[0].paragraphs[0].sentences) == 4  # the four entries, not the body heading
    assert sections[1].paragraphs[0].sentences == [
        "Large models need large clusters, and large clusters need a lot of cooling."]


def test_raw_table_rows_and_a_figure_caption():
    text = (
        "1 Results\n"
        "The power of the racks over the year is given below for each month.\n"
        "Rack power by month\n"
        "January 120 1.21\n"
        "April 135 1.25\n"
        "July 190 1.39\n"
        "The summer months clearly draw more power than the winter months do.\n"
        "Figure 2: Power over the year.\n"
        "2 Outlook\n"
        "Better chillers would cut the summer peak by a large margin."
    )
    assert _outline(segment_document([_text_block(text)], "Doc"))[0][5] == [
        ("text", 1, False, ["The power of the racks over the year is given below for each month.", "Rack power by month"]),
        ("table", 1, False, ["January 120 1.21", "April 135 1.25", "July 190 1.39"]),
        ("text", 1, False, ["The summer months clearly draw more power than the winter months do."]),
        ("text", 1, True, ["Figure 2: Power over the year."]),
    ]
    flat = segment_document([_text_block(text)], "Doc", SegmentConfig(detect_tables=False))
    assert all(p.kind == "text" for s in flat for p in s.paragraphs)


def test_long_paragraphs_are_cut_into_even_parts_at_sentence_ends():
    body = " ".join(f"Sentence number {i} says something about the cooling of the cluster." for i in range(12))
    text = f"1 Intro\n{body}\n2 End\nThe end of the text is here, with one more sentence."
    sections = segment_document([_text_block(text)], "Doc", SegmentConfig(max_paragraph_chars=300))
    parts = [p.sentences for p in sections[0].paragraphs]
    assert [len(s) for s in parts] == [4, 4, 4]
    assert " ".join(" ".join(s) for s in parts) == body
    whole = segment_document([_text_block(text)], "Doc", SegmentConfig(max_paragraph_chars=0))
    assert [len(p.sentences) for p in whole[0].paragraphs] == [12]


# ------------------------------------------------------- the segmenter's line rules, one by one


LONG_LINE = "We measured the power of every rack in the machine room over a year."


@pytest.mark.parametrize(
    "texts, i, expected",
    [
        (("The study ends here.", "Our Measurement Approach", LONG_LINE), 1, True),
        (("Our Measurement Approach", "", LONG_LINE), 0, True),
        (("Abcd", LONG_LINE), 0, True),  # four characters are enough
        (("Abc", LONG_LINE), 0, False),
        (("A" + "b" * 55, LONG_LINE), 0, True),  # 56 = 0.7 * 80 characters: still short
        (("A" + "b" * 56, LONG_LINE), 0, False),
        (("the power of the", "Our Measurement Approach", LONG_LINE), 1, False),  # after an open line
        (("Our Measurement Approach", "Short line here."), 0, False),  # the next line is short
        (("Our Measurement Approach", "W" + "e" * 47), 0, True),  # 48 = 0.6 * 80: long enough
        (("Our Measurement Approach", LONG_LINE.lower()), 0, False),
        (("Our Measurement Approach",), 0, False),
        (("Our Measurement Approach", "#Other"), 0, False),
        (("Our Measurement Approach.", LONG_LINE), 0, False),
        (("Our Measurement Approach:", LONG_LINE), 0, False),
        (("Our Measurement Approach;", LONG_LINE), 0, False),
        (("Our Measurement Approach,", LONG_LINE), 0, False),
        (("Our Measurement Approach -", LONG_LINE), 0, False),
        (("Figure 3 Power Draw", LONG_LINE), 0, False),  # a caption
        (("Results For 2019 2020 2021", LONG_LINE), 0, False),  # mostly numbers
        (("AB CD EF GH", LONG_LINE), 0, False),  # no lower-case word
        (("Our Measurement Approach", "Month 120 135 190 140 150 160 170 180 190 200 210 220"), 0, False),
    ],
)
def test_title_case_heading_rule(texts, i, expected):
    assert _title_case_heading(_items(*texts), i) is expected


BODY = "Training takes most of the energy, but inference adds up over many requests."


@pytest.mark.parametrize(
    "title, nxt, after, expected",
    [
        ("2 Energy Use of the Training and", "Inference Phases", BODY, True),  # ends in a joining word
        ("2 Energy Use of the Training,", "Inference Phases", BODY, True),
        ("2 Energy Use of Training &", "Inference", BODY, True),
        ("2 Energy Use of Training -", "Inference", BODY, True),
        ("3 RESULTS OF THE", "MEASUREMENT CAMPAIGN", BODY, True),  # capitals go on in capitals
        ("3 RESULTS OF THE", "Measurement Campaign", BODY, False),
        ("2 A Rather Long Heading About The Energy", "Inference Phases", BODY, True),  # a long first line
        ("2 A Rather Long Heading About The Energy", "Inference Phases", BODY.lower(), False),
        ("2 Short", "Inference Phases", BODY, False),
        ("2 Energy Use of the", "Inference Phases.", BODY, False),  # a sentence
        ("2 Energy Use of the", "Inference Phases,", BODY, False),
        ("2 Energy Use of the", "one two three four five six seven eight", BODY, False),  # eight words
        ("2 Energy Use of the", "one two three four five six seven", BODY, True),
        ("2 Energy Use of the", "x" * 61, BODY, False),
        ("2 Energy Use of the", "x" * 60, BODY, True),
        ("2 Energy Use of the", "3.1 Setup", BODY, False),  # a heading of its own
        ("2 Energy Use of the", "INFERENCE PHASES", BODY, True),  # capitals are no heading of their own
        ("2 Energy Use of the", "Table 2: Power", BODY, False),
        ("2 Energy Use of the", "2019 2020 2021 data", BODY, False),
        ("2 Energy Use of the", "(Inference) Phases", BODY, False),
        ("2 Energy Use of the", "Abstract: We study it", BODY, False),
    ],
)
def test_continues_heading_rule(title, nxt, after, expected):
    assert _continues_heading(title, _items("#h", nxt, after), 1, 80.0) is expected


@pytest.mark.parametrize(
    "prev, strict, expected",
    [
        ("This line ends a sentence.", True, True),
        ("this line goes on in the", True, False),
        ("this line goes on in the", False, False),  # a joining word
        ("this line goes on here", False, True),  # only strict reads any lower-case end as open
        ("this line goes on here", True, False),
        *[(f"a list of things{end}", False, False) for end in (",", ";", " (", " -", " –", " &")],
    ],
)
def test_context_ok_rule(prev, strict, expected):
    items = _items(prev, "2 Method")
    assert _context_ok(items, 1, {}, strict) is expected
    assert _context_ok(_items("", prev, "|", "2 Method"), 3, {}, strict) is expected  # blanks skipped
    assert _context_ok(items, 1, {0: None}, strict) is True  # after a heading line
    assert _context_ok(_items("#Title", "2 Method"), 1, {}, strict) is True
    assert _context_ok(items, 0, {}, strict) is True  # nothing before


def _para_items(prev, cur, prev_indent=0, cur_indent=0):
    return _Item("line", text=prev, indent=prev_indent, width=80.0), _Item("line", text=cur, indent=cur_indent, width=80.0)


SHORT_END = "A short line that ends."  # < 0.75 * 80
LONG_END = "A long line that ends a sentence after many words of text on the page."  # > 0.75 * 80


@pytest.mark.parametrize(
    "prev, cur, indents, expected",
    [
        (LONG_END, "• a bullet", (0, 0), True),
        ("mid sentence and", "• a bullet", (0, 0), True),
        (LONG_END, "(1) First item", (0, 0), True),
        ("the items are;", "(a) next item", (0, 0), True),
        ("the items are; ", "(a) next item", (0, 0), True),  # the ';' read before trailing spaces
        ("mid sentence and", "(1) first item", (0, 0), False),
        (LONG_END, "Next sentence", (0, 2), True),  # indented after a sentence end
        (LONG_END, "Next sentence", (0, 1), False),
        (LONG_END, "Next sentence", (2, 3), False),
        ("mid sentence and", "Next words", (0, 2), False),
        (LONG_END, "next words", (0, 2), False),
        (SHORT_END, "Next sentence", (0, 0), True),  # a short line ending a sentence
        (SHORT_END, "“Quoted” text", (0, 0), True),
        (SHORT_END, "[12] showed", (0, 0), True),
        (SHORT_END, "2019 was hot", (0, 0), True),
        (SHORT_END, "next words", (0, 0), False),
        (LONG_END, "Next sentence", (0, 0), False),
        ("A short line that goes", "Next sentence", (0, 0), False),
        ("a" * 54 + " end.", "Next", (0, 0), True),  # 59 characters: short (< 0.75 * 80)
        ("a" * 55 + " end.", "Next", (0, 0), False),  # 60: long
    ],
)
def test_starts_paragraph_rule(prev, cur, indents, expected):
    assert _starts_paragraph(*_para_items(prev, cur, *indents)) is expected


def test_neighbour_lines_skip_blanks_and_breaks():
    items = _items("", "first", "", "|", "second", "")
    assert _next_line(items, 1) is items[4] and _next_line(items, 4) is None and _next_line(items, 5) is None
    assert _prev_line(items, 4) is items[1] and _prev_line(items, 1) is None
    assert _prev_index(items, 4) == 1 and _prev_index(items, 1) == -1 and _prev_index(items, 0) == -1


def test_small_helpers():
    assert _percentile([], 0.8) == 0.0
    values = list(range(10, 110, 10))
    assert [_percentile(values, q) for q in (0.0, 0.5, 0.8, 1.0)] == [10.0, 60.0, 80.0, 100.0]
    assert _percentile([5], 0.8) == 5.0
    assert _same_title("The Cooling Study 2", "the cooling study 2")
    assert _same_title("one two three four five", "one two three four")  # 4 of 5 words
    assert not _same_title("one two three four five", "one two three")
    assert not _same_title("a b c d e", "a x y z w") and not _same_title("", "") and not _same_title("--", "x")
    assert _merge_short_rows(["A 1", "B row two", "12345678", "long row here", "x"], 15) == [
        "A 1; B row two", "12345678", "long row here; x"]
    assert _merge_short_rows(["abc", "defgh"], 4) == ["abc; defgh"]  # min_chars below 8 is used as it is
    assert _merge_short_rows(["abcd", "defgh"], 4) == ["abcd", "defgh"]
    assert _join_first(["Short."], ["Next one.", "Third."], 15) == ["Short. Next one.", "Third."]
    assert _join_first(["x" * 29], ["b", "c"], 15) == ["x" * 29 + " b", "c"]
    assert _join_first(["x" * 30], ["b"], 15) == ["x" * 30, "b"]
    assert _join_first([], ["a"], 15) == ["a"] and _join_first(["a"], [], 15) == ["a"]


def test_page_sections_sorted_by_page():
    p1, p2, p3 = Paragraph("text", 2, text="b"), Paragraph("text", 1, text="a"), Paragraph("text", 2, text="c")
    pages = _page_sections([Section("S", 1, "heading", paragraphs=[p1, p2]), Section("T", 2, "heading", paragraphs=[p3])])
    assert [(s.title, s.path, s.page, s.source, [p.text for p in s.paragraphs]) for s in pages] == [
        ("Page 1", "Page 1", 1, "page", ["a"]), ("Page 2", "Page 2", 2, "page", ["b", "c"])]


def _furniture_doc(n_pages, header_pages, header="Journal of Cooling Studies 2024", at=0, lines=8):
    items = []
    for page in range(1, n_pages + 1):
        body = [f"Body line {k} of page {page} about cooling." for k in range(lines)]
        if page in header_pages:
            body.insert(at if at >= 0 else len(body) + 1 + at, header)
        items += [_Item("line", text=t, page=page) for t in body]
    return items


def _kept_header(items, n_pages, header="Journal of Cooling Studies 2024"):
    return any(it.text == header for it in _drop_furniture(items, n_pages))


def test_running_headers_rules():
    assert not _kept_header(_furniture_doc(4, {1, 2, 3, 4}), 4)  # four pages are enough
    assert _kept_header(_furniture_doc(3, {1, 2, 3}), 3)  # three are not
    assert not _kept_header(_furniture_doc(4, {1, 2, 3}), 4)  # on three pages of four
    assert _kept_header(_furniture_doc(4, {1, 2}), 4)
    assert not _kept_header(_furniture_doc(40, set(range(1, 5))), 40)  # 10 % of 40 pages
    assert _kept_header(_furniture_doc(40, set(range(1, 4))), 40)
    assert not _kept_header(_furniture_doc(4, {1, 2, 3, 4}, at=2), 4)  # third line from the top
    assert _kept_header(_furniture_doc(4, {1, 2, 3, 4}, at=3), 4)  # fourth: body text
    assert not _kept_header(_furniture_doc(4, {1, 2, 3, 4}, at=-3), 4)  # third from the bottom
    assert _kept_header(_furniture_doc(4, {1, 2, 3, 4}, at=-4), 4)
    wide = "W" * 150
    assert not _kept_header(_furniture_doc(4, {1, 2, 3, 4}, header=wide), 4, wide)
    assert _kept_header(_furniture_doc(4, {1, 2, 3, 4}, header=wide + "W"), 4, wide + "W")  # too long
    assert not _kept_header(_furniture_doc(4, {1, 2, 3, 4}, header="ABC 12"), 4, "ABC 12")
    assert _kept_header(_furniture_doc(4, {1, 2, 3, 4}, header="AB 12"), 4, "AB 12")  # two letters


def test_sentence_goes_on_after_a_figure_and_caps_table_captions_join_their_table():
    text = (
        "1 Results\n"
        "The racks drew more power in the summer months, when the chillers and the\n"
        "Figure 3: Rack power over the year.\n"
        "fans worked hardest to keep the machine room cool enough.\n"
        "TABLE II\n"
        "ESTIMATED POWER OF THE\n"
        "COOLING PLANT\n"
        "January 120 30\n"
        "\n"
        "February 118 29\n"
        "Summer months\n"
        "July 190 45\n"
        "August 185 44\n"
        "The table shows the same pattern for the fans as for the chillers.\n"
        "2 Outlook\n"
        "Better chillers would cut the summer peak by a large margin."
    )
    # the document title set in a heading font is no section of its own
    blocks = [{"page": 1, "kind": "heading", "text": "Cooling Power Study", "level": 1}, _text_block(text)]
    assert _outline(segment_document(blocks, "Cooling Power Study")) == [
        ("1 Results", "1 Results", 1, "heading", 1, [
            ("text", 1, False, ["The racks drew more power in the summer months, when the chillers and the fans "
                                "worked hardest to keep the machine room cool enough."]),
            ("text", 1, True, ["Figure 3: Rack power over the year."]),
            ("table", 1, False, ["TABLE II ESTIMATED POWER OF THE COOLING PLANT", "January 120 30",
                                 "February 118 29", "Summer months", "July 190 45", "August 185 44"]),
            ("text", 1, False, ["The table shows the same pattern for the fans as for the chillers."]),
        ]),
        ("2 Outlook", "2 Outlook", 1, "heading", 1, [
            ("text", 1, False, ["Better chillers would cut the summer peak by a large margin."])]),
    ]


@pytest.mark.parametrize(
    "texts, i, expected",
    [
        (("Some text ends here.", "COOLING PLANT DESIGN", LONG_LINE), 1, True),
        (("Some text ends here.", "COOLING PLANT DESIGN", "", "|", LONG_LINE), 1, True),
        (("COOLING PLANT DESIGN", LONG_LINE), 0, True),
        (("THE END OF IT.", "COOLING PLANT DESIGN", LONG_LINE), 1, True),  # capitals ending a sentence
        (("Intro text.", "COOLING PLANT DESIGN", "#Heading"), 1, True),
        (("Some text ends here.", "COOLING PLANT DESIGN"), 1, False),  # nothing after it
        (("TABLE IV", "COOLING PLANT DESIGN", LONG_LINE), 1, False),  # the title of an IEEE table
        (("TABLE IV", "ESTIMATED COST OF", "COOLING PLANT DESIGN", LONG_LINE), 2, False),
        (("TABLE IV", "ESTIMATED COST OF", "THE BIG", "COOLING PLANT DESIGN", LONG_LINE), 3, False),
        (("TABLE IV", "ESTIMATED COST OF", "THE BIG", "OLD", "COOLING PLANT DESIGN", LONG_LINE), 4, True),  # too far
        (("lower text", "TABLE IV", "COOLING PLANT DESIGN", LONG_LINE), 2, False),
        (("A TITLE PAGE IN CAPITALS", "COOLING PLANT DESIGN", LONG_LINE), 1, False),
        (("Intro text.", "COOLING PLANT DESIGN", "Month 120 135 190 140"), 1, False),  # a table header
    ],
)
def test_caps_heading_context_rule(texts, i, expected):
    assert _caps_context_ok(_items(*texts), i) is expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("January 120 1.21", True), ("Rack 12", True), ("Rack 12.", True),  # mostly numbers
        ("1 " * 80, True), ("1 " * 80 + "1", False),  # 160 characters at most
        ("a b c d e f g h 5 6", True), ("a b c d e f g h i 1", False),  # ten tokens, 15 % numbers
        ("a b c d e f g h i j 1", False), ("w w w w w 5", True), ("w w w w w 5.", False), ("", False),
        ("The chillers were replaced.", False),
    ],
)
def test_table_row_rule(text, expected):
    assert _is_table_row(text) is expected


def _para(text, kind="text", caption=False, sentences=None):
    return Paragraph(kind, 1, text=text, sentences=[text] if sentences is None else sentences, caption=caption)


def _shown(paragraphs):
    return [(p.kind, p.caption, p.text, p.sentences) for p in paragraphs]


LONG_PARA = "A paragraph that is long enough to stand alone here."


def test_merge_tiny_paragraphs():
    assert _shown(_merge_tiny([_para("Tiny one."), _para(LONG_PARA)], 40, 15)) == [
        ("text", False, f"Tiny one. {LONG_PARA}", [f"Tiny one. {LONG_PARA}"])]
    assert _shown(_merge_tiny([_para("Tiny one."), _para("T1 2 3", "table"), _para(LONG_PARA)], 40, 15)) == [
        ("text", False, "Tiny one.", ["Tiny one."]), ("table", False, "T1 2 3", ["T1 2 3"]),
        ("text", False, LONG_PARA, [LONG_PARA])]
    assert _shown(_merge_tiny([_para(LONG_PARA), _para("Tiny end.")], 40, 15)) == [
        ("text", False, f"{LONG_PARA} Tiny end.", [f"{LONG_PARA} Tiny end."])]  # at the end: into the previous
    assert _shown(_merge_tiny([_para(LONG_PARA), _para("Fig. 1", caption=True), _para("Tiny end.")], 40, 15)) == [
        ("text", False, LONG_PARA, [LONG_PARA]), ("text", True, "Fig. 1", ["Fig. 1"]),
        ("text", False, "Tiny end.", ["Tiny end."])]  # never into a caption, nor across one
    assert _shown(_merge_tiny([_para("Tiny end.")], 40, 15)) == [("text", False, "Tiny end.", ["Tiny end."])]
    two = _merge_tiny([_para("Short one.", sentences=["Short one."]), _para(LONG_PARA, sentences=["A b.", "C d."])], 40, 15)
    assert _shown(two) == [("text", False, f"Short one. {LONG_PARA}", ["Short one. A b.", "C d."])]


def test_table_captions_join_the_table_before_or_after():
    def table(*rows):
        return Paragraph("table", 1, text="\n".join(rows), sentences=list(rows))

    joined = ("table", False, "Table 1: Power.\na 1\nb 2", ["Table 1: Power.", "a 1", "b 2"])
    assert _shown(_attach_table_captions([_para("Table 1: Power.", caption=True), table("a 1", "b 2")])) == [joined]
    assert _shown(_attach_table_captions([table("a 1", "b 2"), _para("Table 1: Power.", caption=True)])) == [joined]
    # between two tables a caption belongs to the one after it
    assert _shown(_attach_table_captions([table("a 1"), _para("Table 2: Power.", caption=True), table("c 3")])) == [
        ("table", False, "a 1", ["a 1"]), ("table", False, "Table 2: Power.\nc 3", ["Table 2: Power.", "c 3"])]
    for kept in ([_para("Figure 1: Power.", caption=True), table("a 1")],
                 [_para("Table 1: Power."), table("a 1")],  # not a caption
                 [_para("Table 1: Power.", caption=True), _para("text after")]):
        assert _shown(_attach_table_captions(list(kept))) == _shown(kept)


def test_cut_paragraph_parts():
    sentences = [f"Sentence {i} " + "x" * (10 + 7 * i) + "." for i in range(6)]  # 22 ... 57 characters
    sizes = lambda parts: [[len(s) for s in part] for part in parts]  # noqa: E731
    assert sizes(_cut_paragraph(sentences, 100)) == [[22, 29, 36], [43, 50], [57]]
    assert sizes(_cut_paragraph(sentences, 200)) == [[22, 29, 36, 43], [50, 57]]
    assert _cut_paragraph(sentences, 243) == [sentences]  # 243 with the spaces: fits
    assert sizes(_cut_paragraph(sentences, 242)) == [[22, 29, 36, 43], [50, 57]]
    assert _cut_paragraph(["one " * 100], 10) == [["one " * 100]]  # one sentence is never cut
    assert _cut_paragraph(sentences[:2], 1) == [[sentences[0]], [sentences[1]]]
    assert _cut_paragraph(sentences, 0) == [sentences]


def test_page_fallback_needs_two_heading_sections():
    first = "1 Intro\nThe text of the first section is here and it is long enough."
    second = "2 End\nThe text of the second section is here and it is long enough too."
    both = segment_document([_text_block(f"{first}\n{second}")], "D")
    assert [s.title for s in both] == ["1 Intro", "2 End"] and heading_sections(both) == 2
    blocks = [_text_block(first), _text_block("More text on page two that is long enough to stand.", 2)]
    assert [(s.title, s.page) for s in segment_document(blocks, "D")] == [("Page 1", 1), ("Page 2", 2)]
    kept = segment_document(blocks, "D", SegmentConfig(page_fallback=False))
    assert [s.title for s in kept] == ["1 Intro"] and heading_sections(kept) == 1


def test_hyphen_evidence_comes_from_the_text_blocks():
    blocks = [_text_block("1 Intro\nThe chips are energy-efficient by design, and the\nvery energy-\nefficient "
                          "chips draw less power in every test.")]
    text = segment_document(blocks, "D", SegmentConfig(page_fallback=False))[0].paragraphs[0].text
    assert "very energy-efficient chips" in text
    no_evidence = [_text_block("1 Intro\nThe chips are built by design, and the\nvery energy-\nefficient chips "
                               "draw less power in every test.")]
    text = segment_document(no_evidence, "D", SegmentConfig(page_fallback=False))[0].paragraphs[0].text
    assert "very energyefficient chips" in text  # no evidence of the hyphenated word: a line break
    caption = {"page": 1, "kind": "caption", "text": "energy-efficient"}  # only text blocks are evidence
    text = segment_document(no_evidence + [caption], "D", SegmentConfig(page_fallback=False))[0].paragraphs[0].text
    assert "very energyefficient chips" in text


def test_a_known_section_name_wins_a_numbering_tie():
    # two lines numbered 1: "Introduction" (a known name) is the heading, the other one is text,
    # whether it comes after it (a footnote) or before it (an affiliation)
    footnote = (
        "1 Introduction\n"
        "We study the energy use of the cooling plant of a large cluster.\n"
        "1 Data from the operator of the cluster\n"
        "The operator shared one year of meter readings with us for this work.\n"
        "2 Method\n"
        "We logged the power of every rack at one minute intervals all year."
    )
    assert [s.title for s in segment_document([_text_block(footnote)], "D")] == ["1 Introduction", "2 Method"]
    lines = footnote.split("\n")
    affiliation = "\n".join(lines[2:4] + lines[:2] + lines[4:])
    assert [s.title for s in segment_document([_text_block(affiliation)], "D")] == ["D", "1 Introduction", "2 Method"]


def test_contents_lines_that_look_like_headings_are_dropped():
    text = (
        "Contents\n1 Introduction\n2 Background\n3 Method\n4 Results\n"
        "Abstract\nWe measure the cooling of a cluster over one year of operation.\n"
        "1 Introduction\nLarge models need large clusters, and large clusters need a lot of cooling.\n"
        "2 Background\nEarlier work measured single servers rather than whole machine rooms."
    )
    assert _titles_and_texts(text, "D") == [
        ("Contents", ["1 Introduction\n2 Background\n3 Method\n4 Results"]),
        ("Abstract", ["We measure the cooling of a cluster over one year of operation."]),
        ("1 Introduction", ["Large models need large clusters, and large clusters need a lot of cooling."]),
        ("2 Background", ["Earlier work measured single servers rather than whole machine rooms."]),
    ]


def test_windows_line_ends_indentation_and_caption_blocks():
    blocks = [
        {"text": "1 Intro\nThe chillers ran all year in the machine room of the cluster, and the fans\r\nran with "
                 "them for most of the hours of the whole year of the study.\nThe meters logged the power of every "
                 "rack at one minute intervals for a year.\n   An indented line starts a new paragraph after a "
                 "sentence end here."},  # no kind, no page: a text block on page 1
        {"kind": "caption", "text": "Power over the year."},  # a caption block, whatever its words
        {"page": 2, "text": "2 End\nThe end of the text is here, with one more sentence."},
    ]
    assert _outline(segment_document(blocks, "D")) == [
        ("1 Intro", "1 Intro", 1, "heading", 1, [
            ("text", 1, False, ["The chillers ran all year in the machine room of the cluster, and the fans ran with "
                                "them for most of the hours of the whole year of the study.",
                                "The meters logged the power of every rack at one minute intervals for a year."]),
            ("text", 1, False, ["An indented line starts a new paragraph after a sentence end here."]),
            ("text", 1, True, ["Power over the year."]),
        ]),
        ("2 End", "2 End", 1, "heading", 2, [("text", 2, False, ["The end of the text is here, with one more sentence."])]),
    ]


OPEN_LINE = "the energy use grew by a third in the year of the"
GOES_ON = "study, mostly in summer."


@pytest.mark.parametrize(
    "before, lines, expected",
    [
        ((OPEN_LINE,), ("1 See the yearly report.", GOES_ON), 1),
        ((OPEN_LINE,), ("1 See the yearly report of the", "operator for details.", "", "2 Measured at the units.", "|",
                        GOES_ON), 4),  # two notes, one of two lines; blanks and breaks between
        ((OPEN_LINE, "", "|"), ("1 See the yearly report.", GOES_ON), 1),  # blanks before the notes skipped
        ((OPEN_LINE,), ("1 See the", "", "yearly report.", GOES_ON), 3),
        ((OPEN_LINE,), ("1 See the", "yearly", "report of", "the operator.", GOES_ON), 4),  # four lines at most
        ((OPEN_LINE,), ("1 See the", "yearly", "report of", "the operator", "today.", GOES_ON), 0),
        ((OPEN_LINE,), tuple(f"{n} Note number {n} ends here." for n in range(1, 7)) + (GOES_ON,), 6),  # six notes
        ((OPEN_LINE,), tuple(f"{n} Note number {n} ends here." for n in range(1, 8)) + (GOES_ON,), 0),
        ((), ("1 See the yearly report.", GOES_ON), 0),  # nothing before
        (("#Head",), ("1 See the yearly report.", GOES_ON), 0),
        (("The sentence ends.",), ("1 See the yearly report.", GOES_ON), 0),
        ((OPEN_LINE,), ("1 See the", "#Head", "report.", GOES_ON), 0),
        ((OPEN_LINE,), ("1 See the yearly report.", "#Head"), 0),
        ((OPEN_LINE,), ("1 See the yearly report.",), 0),
        ((OPEN_LINE,), ("1 See the yearly report.", "Study results follow."), 0),  # no lower-case text after
    ],
)
def test_footnote_end_rule(before, lines, expected):
    assert _footnote_end(_items(*lines), 0, _items(*before)) == expected


def test_paragraphs_across_blank_lines_and_pages():
    page1 = (
        "1 Method\n"
        "we logged the power of every rack at one minute intervals over the year.\n"  # lower case after a heading
        "The racks drew more power in the summer months when the chillers and the\n"
        "\n"  # a blank line inside a sentence
        "fans worked hardest to keep the machine room cool enough for the racks.\n"
        "The first paragraph of the section ends here with a full stop.\n"
        "\n"
        "and a paragraph that starts in lower case after a blank line goes on here.\n"
        "The power was measured by the"
    )
    page2 = ("NVIDIA tools that ship with the driver of every GPU in the cluster.\n"  # the sentence goes on
             "2 End\nThe end of the text is here, with one more sentence.")
    assert _outline(segment_document([_text_block(page1, 1), _text_block(page2, 2)], "D")) == [
        ("1 Method", "1 Method", 1, "heading", 1, [
            ("text", 1, False, [
                "we logged the power of every rack at one minute intervals over the year.",
                "The racks drew more power in the summer months when the chillers and the fans worked hardest to "
                "keep the machine room cool enough for the racks.",
                "The first paragraph of the section ends here with a full stop."]),
            ("text", 1, False, [
                "and a paragraph that starts in lower case after a blank line goes on here.",
                "The power was measured by the NVIDIA tools that ship with the driver of every GPU in the cluster."]),
        ]),
        ("2 End", "2 End", 1, "heading", 2, [("text", 2, False, ["The end of the text is here, with one more sentence."])]),
    ]
    front = segment_document([_text_block(RAW_PAPER)], "T")[0]
    assert (front.title, front.page, front.source, front.level, front.path) == ("T", 1, "front", 1, "T")


def test_run_in_heading_on_a_later_page():
    text = ("Abstract: We study the cooling of a cluster.\n"
            "The cooling overhead was largest in the summer months of the year and smallest in winter.\n"
            "1 Introduction\nLarge models need large clusters, and large clusters need a lot of cooling.\n"
            "2 Method\nWe logged the power of every rack at one minute intervals all year.")
    assert _outline(segment_document([_text_block(text, 3)], "D")) == [
        ("Abstract", "Abstract", 1, "heading", 3, [("text", 3, False, [
            "We study the cooling of a cluster.",
            "The cooling overhead was largest in the summer months of the year and smallest in winter."])]),
        ("1 Introduction", "1 Introduction", 1, "heading", 3, [("text", 3, False, [
            "Large models need large clusters, and large clusters need a lot of cooling."])]),
        ("2 Method", "2 Method", 1, "heading", 3, [("text", 3, False, [
            "We logged the power of every rack at one minute intervals all year."])]),
    ]


def test_block_items_pages_levels_and_line_widths():
    from kohaku.ingest.text.segment import _block_items

    blocks = [
        {"page": 2, "kind": "heading", "text": "A\n\n  Title ,  Part", "level": None},  # lines joined, level 1
        {"kind": "heading", "text": "Sub", "level": 3, "page": "4"},
        {"kind": "table", "text": "a 1\n\n b 2 ", "page": None},  # no page: page 1; empty rows dropped
        {"kind": "caption", "text": "\nFig 1\nmore"},
        {"kind": "heading", "text": "  \n"}, {"kind": "table", "text": " \n"}, {"kind": "caption", "text": ""},
        # six lines of >= 3 characters (one of exactly 3): the block's own width, the 80th percentile
        # of their lengths
        {"kind": "text", "page": 3, "text": "abcdef\r\nab\r   x\n\nlonger line here\nabc\n1234567\n123456789\n1234567890"},
        # too few lines: the document's width, the 80th percentile of all its lines of >= 3
        # characters (3, 3, 6, 7, 9, 10, 12, 16, 31: 12, unlike the block above and unlike 16
        # without the 3-character lines)
        {"kind": None, "text": "twelve chars\nxy\nxyz\na much much longer line of text"},
    ]
    got = [(it.kind, it.text, it.page, it.indent, it.level, it.width, it.rows, it.lines) for it in _block_items(blocks)]
    brk = lambda page: ("break", "", page, 0, None, 80.0, [], [])  # noqa: E731
    line = lambda text, page, width, indent=0: ("line", text, page, indent, None, width, [], [])  # noqa: E731
    assert got == [
        brk(2), ("heading", "A Title, Part", 2, 0, 1, 80.0, [], []),
        brk(4), ("heading", "Sub", 4, 0, 3, 80.0, [], []),
        brk(1), ("table", "", 1, 0, None, 80.0, ["a 1", "b 2"], []),
        brk(1), ("caption", "", 1, 0, None, 80.0, [], ["Fig 1", "more"]),
        brk(1), brk(1), brk(1),  # empty heading, table and caption blocks leave only their break
        brk(3), line("abcdef", 3, 10.0), line("ab", 3, 10.0), line("x", 3, 10.0, indent=3),
        ("blank", "", 3, 0, None, 80.0, [], []),
        line("longer line here", 3, 10.0), line("abc", 3, 10.0), line("1234567", 3, 10.0),
        line("123456789", 3, 10.0), line("1234567890", 3, 10.0),
        brk(1), line("twelve chars", 1, 12.0), line("xy", 1, 12.0), line("xyz", 1, 12.0),
        line("a much much longer line of text", 1, 12.0),
    ]
    # no line of three characters anywhere: the default width
    assert [it.width for it in _block_items([{"text": "ab\nx"}])] == [80.0, 80.0, 80.0]


def test_prev_line_skips_every_blank_and_break_one_by_one():
    items = _items("first", "second", "", "third")
    assert _prev_line(items, 3) is items[1]  # the line right before the blank, not the one before it


def test_cut_paragraph_boundaries():
    # lengths only matter: a part closes before a sentence whose first half would take the part
    # past target = total / n_parts (total counts one space per sentence)
    sizes = lambda parts: [[len(s) for s in part] for part in parts]  # noqa: E731
    cut = lambda lengths, max_chars: sizes(_cut_paragraph(["x" * n for n in lengths], max_chars))  # noqa: E731
    # total 72, two parts of target 36: 7 + 19 + 13.5 > 36 closes the first part before the 27
    assert cut([6, 18, 27, 17], 70) == [[6, 18], [27, 17]]
    # total 89, four parts of target 22.25: never more parts than n_parts, the last takes the rest
    assert cut([26, 28, 10, 21], 23) == [[26], [28], [10, 21]]
    # total 73, two parts of target 36.5: 21 + 15 = 36 is not > 36.5, so the 30 joins the first part
    assert cut([20, 30, 20], 39) == [[20, 30], [20]]
    # total 56, two parts of target 28: 20 + 8 = 28 is not > 28 (a tie stays), 37 + 9 > 28 closes
    assert cut([19, 16, 18], 55) == [[19, 16], [18]]


def test_finish_paragraphs_drops_empty_ones_and_goes_on():
    from kohaku.ingest.text.segment import _finish_paragraphs

    def finish(paragraphs, **cfg):
        sec = Section("S", 1, "heading", paragraphs=paragraphs)
        _finish_paragraphs([sec], set(), SegmentConfig(**cfg))
        return [(p.kind, p.text, p.sentences) for p in sec.paragraphs]

    body = "The racks drew more power in the summer than in the winter months."
    # a table with only blank rows and a text with fewer than two letters are dropped; the
    # paragraphs after them are still finished
    assert finish([Paragraph("table", 1, lines=["", "  "]), Paragraph("text", 1, lines=["12 34 5"]),
                   Paragraph("text", 1, lines=[body])]) == [("text", body, [body])]
    assert finish([Paragraph("text", 1, lines=["Go."])], min_paragraph_chars=0) == [("text", "Go.", ["Go."])]  # two letters
    # sentences are cut at max_sentence_chars; a cut paragraph's text is its sentences joined by spaces
    long = "The first part of the sentence runs on, the second part runs on, and the third part ends here."
    got = finish([Paragraph("text", 1, lines=[long])], max_sentence_chars=40, min_sentence_chars=5)
    assert [s for _, _, ss in got for s in ss] == [
        "The first part of the sentence runs on,", "the second part runs on,", "and the third part ends here."]
    three = finish([Paragraph("text", 1, lines=[body, body, body])], max_paragraph_chars=150)
    assert [(t, ss) for _, t, ss in three] == [(f"{body} {body}", [body, body]), (body, [body])]


def test_a_table_caption_after_its_table_is_consumed_once():
    from kohaku.ingest.text.segment import _attach_table_captions

    intro, outro = _para(LONG_PARA), _para("The next paragraph goes on after the table here.")
    table = _para("A 10\nB 20", "table", sentences=["A 10", "B 20"])
    out = _attach_table_captions([intro, table, _para("Table 1: Power per rack.", caption=True), outro])
    assert [(p.kind, p.caption, p.sentences) for p in out] == [
        ("text", False, [LONG_PARA]),
        ("table", False, ["Table 1: Power per rack.", "A 10", "B 20"]),
        ("text", False, ["The next paragraph goes on after the table here."]),
    ]


def test_merge_tiny_edges():
    # exactly min_chars is long enough to stand alone
    ten = "Ten chars."
    assert _shown(_merge_tiny([_para(ten), _para(LONG_PARA)], len(ten), 5)) == [
        ("text", False, ten, [ten]), ("text", False, LONG_PARA, [LONG_PARA])]
    # a tiny last paragraph joins the previous one's last sentence; the earlier sentences stay
    prev = _para("First sentence of it. Second sentence of it.",
                 sentences=["First sentence of it.", "Second sentence of it.", "Third sentence of it."])
    assert _merge_tiny([prev, _para("End.")], 10, 5)[0].sentences == [
        "First sentence of it.", "Second sentence of it.", "Third sentence of it. End."]
    # a previous paragraph without sentences takes the tiny one's
    bare = Paragraph("text", 1, text=LONG_PARA, sentences=[])
    assert _merge_tiny([bare, _para("End.")], 10, 5)[0].sentences == ["End."]


def test_join_first_merges_a_short_lead_into_the_next_sentence():
    assert _join_first(["Hi.", "Yo."], ["The rest of the paragraph.", "More."], 15) == [
        "Hi. Yo. The rest of the paragraph.", "More."]


def test_fold_empty_sections_paths_from_a_heading_first():
    from kohaku.ingest.text.segment import _fold_empty_sections

    secs = [Section("1 A", 1, "heading", level=1), Section("1.1 B", 1, "heading", level=2, paragraphs=[_para("x")])]
    assert [(s.title, s.path) for s in _fold_empty_sections(secs)] == [("1.1 B", "1 A > 1.1 B")]


def test_hyphen_evidence_from_blocks_without_a_kind_and_empty_blocks():
    cfg = SegmentConfig(page_fallback=False)
    broken = _text_block("1 Intro\nThe chips are built by design, and the\nvery energy-\nefficient chips "
                         "draw less power in every test.")
    evidence = {"page": 1, "text": "Both energy-efficient chips and fans."}  # no kind: a text block
    text = segment_document([broken, evidence], "D", cfg)[0].paragraphs[0].text
    assert text.startswith("The chips are built by design, and the very energy-efficient chips")
    # an empty text block adds no word: "xx-xx" seen in a line, "xxxx" never, so the break keeps its hyphen
    xx = _text_block("1 Intro\nThe model xx-xx is used, and the\nsame xx-\nxx model is used in every test here.")
    for blocks in ([xx], [xx, {"page": 1, "kind": "text", "text": None}]):
        text = segment_document(blocks, "D", cfg)[0].paragraphs[0].text
        assert text == "The model xx-xx is used, and the same xx-xx model is used in every test here."


@pytest.mark.parametrize("lines, kept", [
    # four entries with one short other line among them: the whole span (that line too) is no heading
    (["Contents", "1 Introduction 3", "2 Method 5", "PART TWO", "3 Results 9", "4 Outlook 12", "Abstract",
      "We measure the cooling of a cluster over one year."], [0, 6, 7]),
    # two other lines in a row end the run: two runs of two entries, too short to be contents
    (["1 Introduction 3", "2 Method 5", "PART TWO", "PART THREE", "3 Results 9", "4 Outlook 12"], [0, 1, 2, 3, 4, 5]),
    # the other line must be short (< 60 characters) and not end a sentence
    (["1 Introduction 3", "2 Method 5", "x" * 60, "3 Results 9", "4 Outlook 12"], [0, 1, 2, 3, 4]),
    (["1 Introduction 3", "2 Method 5", "x" * 59, "3 Results 9", "4 Outlook 12"], []),
    (["1 Introduction 3", "2 Method 5", "It ends.", "3 Results 9", "4 Outlook 12"], [0, 1, 2, 3, 4]),
    # a line repeating an entry starts the body: the run before it is the contents
    (["1 Introduction 3", "2 Method 5", "3 Results 9", "4 Outlook 12", "1 Introduction", "2 Method"], [4, 5]),
])
def test_contents_run_rule(lines, kept):
    from kohaku.ingest.text.segment import _drop_contents_runs

    items = [_Item("line", text=t) for t in lines]
    cands = {i: match_heading("1 Any") for i in range(len(items))}  # every line a candidate
    _drop_contents_runs(items, cands)
    assert sorted(cands) == kept
