"""The text segmenter on snippets in the style of raw PDF extraction (written for these tests)."""

from __future__ import annotations

from kohaku.text.clean import document_vocab, fix_small_caps, join_lines, normalize_line
from kohaku.text.headings import best_chain, match_heading, numbering_step_ok, split_run_in
from kohaku.text.segment import SegmentConfig, segment_document
from kohaku.text.sentences import split_sentences


def _text_block(text: str, page: int = 1) -> dict:
    return {"page": page, "kind": "text", "text": text, "font_size": None, "level": None}


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
