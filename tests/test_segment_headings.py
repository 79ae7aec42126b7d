"""The segmenter's heading rules, one by one, on snippets in the style of raw PDF extraction
(written for these tests): which lines become headings, with which titles and levels."""

from __future__ import annotations

from helpers_segment import _items, _text_block

import pytest

from kohaku.ingest.text.segment import (
    SegmentConfig,
    _caps_context_ok,
    _context_ok,
    _continues_heading,
    _find_headings,
    _title_case_heading,
    segment_document,
)


def _found(*texts, width=80.0, cfg=None):
    """_find_headings on lines: a heading comes back as (title, level), a line as its text."""
    items = _items(*texts, width=width)
    _find_headings(items, cfg or SegmentConfig())
    return [(it.text, it.level) if it.kind == "heading" else it.text for it in items]


def _outline(sections):
    return [(s.title, s.path, s.level, [(p.kind, p.caption, p.sentences) for p in s.paragraphs]) for s in sections]


# a sentence that ends, starting with a capital: the usual body line after a heading
S = "We logged the power of every rack at one minute intervals all year."
T = "The meters were read out by the facility team every single week."
OPEN = "with the racks standing in the north hall"  # ends mid-sentence, in lower case, no joining word
LONG_LINE = "We measured the power of every rack in the machine room over a year."
BODY = "Training takes most of the energy, but inference adds up over many requests."
NEVER = SegmentConfig(title_case_headings="never")


# ----------------------------------------------------------------- the line before a heading


@pytest.mark.parametrize(
    "prev, line, expected",
    [
        # names that cannot be mistaken (known section names, capitals, a known name after a
        # number) may follow a line that ends in lower case ...
        (OPEN, "References", [("References", 1)]),
        (OPEN, "Appendix A", [("Appendix A", 1)]),  # an appendix line is a known name
        (OPEN, "POWER AND HEAT", [("POWER AND HEAT", 1)]),  # capitals, judged on the whole line
        (OPEN, "3 Results", [("3 Results", 1)]),  # the body after the number is a known name
        (OPEN, "3 Results:", [("3 Results:", 1)]),  # ... with a trailing colon
        (OPEN, "3 Related Work", [("3 Related Work", 1)]),  # ... of two words
        (OPEN, "3 RESULTS OF COOLING", [("3 RESULTS OF COOLING", 1)]),  # ... or capitals
        # ... an ordinary numbered title may not
        (OPEN, "3 Cooling Plant Design", ["3 Cooling Plant Design"]),
        # nothing follows a comma or a joining word
        ("as measured by the", "References", ["References"]),
        ("as measured by the", "3 Results", ["3 Results"]),
    ],
)
def test_only_distinctive_headings_follow_a_line_ending_in_lower_case(prev, line, expected):
    # rule: a heading never follows a line ending mid-sentence; for distinctive headings only a
    # trailing comma/hyphen/joining word counts as mid-sentence, for the others any lower-case end
    assert _found(prev, line, S, cfg=NEVER) == [prev] + expected + [S]


@pytest.mark.parametrize(
    "prev, expected",
    [
        ("preprint, under review", [("Abstract", 1), "We study the cooling of a cluster."]),
        ("as measured by the", ["Abstract: We study the cooling of a cluster."]),
    ],
)
def test_run_in_heading_only_needs_a_line_that_is_not_clearly_open(prev, expected):
    # rule: a run-in name ("Abstract: ...") is split off after any line that does not end in a
    # comma or joining word (the lenient test), even one ending in lower case
    assert _found(prev, "Abstract: We study the cooling of a cluster.", S) == [prev] + expected + [S]


def test_context_ok_ignores_trailing_spaces_of_the_line_before():
    # rule: the end of the previous line is read without its trailing spaces
    assert _context_ok(_items("a list of things, ", "References"), 1, {}, False) is False
    assert _context_ok(_items("a list of things ", "References"), 1, {}, False) is True


# ----------------------------------------------------------------------- line length


@pytest.mark.parametrize(
    "line, width, is_heading",
    [
        ("2 Measured Power Draw of the Chillers, Fans and Pumps in the North Hall Site", 80.0, True),  # 76 = 0.95 * 80
        ("2 Measured Power Draw of the Chillers, Fans and Pumps in the North Hall Sites", 80.0, False),  # 77
        ("2 Measured Power Draw of the Chillers and Fans", 40.0, False),  # 46 > 0.95 * 40
        ("2 Power Use of the Chiller Fans", 20.0, False),  # 31 characters: over the 30 floor
        ("2 Power Use of the Chiller Fan", 20.0, True),  # 30: narrow columns still allow 30
    ],
)
def test_a_heading_line_is_at_most_095_of_the_line_width_or_30_characters(line, width, is_heading):
    # rule: a numbered line longer than max(0.95 * line width, 30) characters is body text
    got = _found(S, line, T, width=width, cfg=NEVER)
    assert got == [S, (line, 1) if is_heading else line, T]


# ------------------------------------------------------------ weights of a numbering chain


def _headings(*texts, cfg=None):
    return [x for x in _found(*texts, cfg=cfg) if isinstance(x, tuple)]


FOOTNOTE_1 = "1 Data from the operator of the cluster"
FOOTNOTE_2 = "2 Data from the operator of the cluster"
GOES_ON = "were shared with us by the operator for this study."


@pytest.mark.parametrize(
    "lines, expected",
    [
        # equal otherwise, the line followed by a capital wins (+0.2), whichever comes first
        (("1 Introduction", S, "2 Method", S, FOOTNOTE_2, GOES_ON, "3 Results", S),
         [("1 Introduction", 1), ("2 Method", 1), ("3 Results", 1)]),
        # a known name (+0.5) outweighs a capital after the rival (+0.2)
        (("1 Introduction", "we study the cooling of a cluster.", FOOTNOTE_1, T, "2 Method", S),
         [("1 Introduction", 1), ("2 Method", 1)]),
        # known names are read without a trailing colon and may have two words
        (("1 Introduction:", S, FOOTNOTE_1, T, "2 Method", S), [("1 Introduction:", 1), ("2 Method", 1)]),
        (("1 Introduction", S, "2 Experimental Setup", S, FOOTNOTE_2, T, "3 Method", S),
         [("1 Introduction", 1), ("2 Experimental Setup", 1), ("3 Method", 1)]),
    ],
)
def test_numbering_ties_go_to_known_names_then_to_lines_followed_by_a_capital(lines, expected):
    # rule: a candidate weighs 1, +0.5 for a known section name (after the number, colon
    # aside), +0.2 when the next line starts with a capital; only the ties left go to the later line
    assert _headings(*lines) == expected


def test_one_more_heading_in_a_chain_outweighs_two_known_names_but_not_three():
    # rule: each heading of a chain weighs 1 and a known name adds 0.5 (all lines here are
    # followed by a capital, +0.2 each): of two numberings that cannot be chained (a report, then
    # a reprinted paper restarting at 1), three plain headings beat "1 Introduction",
    # "2 Background" (3.6 > 3.4), and four lose to three known names (4.8 < 5.1)
    plain3 = ("1 Cooling Plant", S, "2 Measurement Campaign", S, "3 Findings", S)
    known2 = ("1 Introduction", S, "2 Background", S)
    assert _headings(*plain3, *known2) == [("1 Cooling Plant", 1), ("2 Measurement Campaign", 1), ("3 Findings", 1)]
    assert _headings(*plain3, "4 Outlook", S, *known2, "3 Results", S) == [
        ("1 Introduction", 1), ("2 Background", 1), ("3 Results", 1)]


# ------------------------------------------------------------------- roman and lettered


def test_a_single_roman_heading_is_no_heading():
    # rule: roman numbering counts only as a chain of two or more ("II. Cooling Plant" alone may
    # be an initial or a list item)
    assert _found(S, "II. Cooling Plant", T, cfg=NEVER) == [S, "II. Cooling Plant", T]
    assert _found("I. INTRODUCTION", S, "II. METHOD", T, cfg=NEVER) == [
        ("I. INTRODUCTION", 1), S, ("II. METHOD", 1), T]


def test_lettered_headings_before_the_first_roman_part_form_their_own_group():
    # rule: lettered headings are chained per roman part; those before the first part are a
    # group of their own (also when the first part is the second item)
    assert _found("A. Scope", "I. INTRODUCTION", S, "A. Motivation", S, "II. METHOD", T) == [
        ("A. Scope", 2), ("I. INTRODUCTION", 1), S, ("A. Motivation", 2), S, ("II. METHOD", 1), T]
    # a lettered title without a space after its dot ("A.Overview") is weighed like any other
    assert _found("I. INTRODUCTION", S, "A.Overview", S, "II. METHOD", T) == [
        ("I. INTRODUCTION", 1), S, ("A.Overview", 2), S, ("II. METHOD", 1), T]


def test_appendix_letters_count_only_after_the_last_numbered_heading():
    # rule: without roman parts, lettered lines are appendices: only those after the last numbered
    # heading count, as top-level headings
    lines = ("1 Introduction", S, "2 Method", S, "A Short Note On Units", S, "3 Results", S,
             "B Hardware Details", T)
    assert _found(*lines) == [("1 Introduction", 1), S, ("2 Method", 1), S, "A Short Note On Units", S,
                              ("3 Results", 1), S, ("B Hardware Details", 1), T]
    # no numbered heading at all: every lettered line counts, the first line too
    assert _found("A Additional Plots", S, "B Hardware Details", T, cfg=NEVER) == [
        ("A Additional Plots", 1), S, ("B Hardware Details", 1), T]


# ------------------------------------------------------------------ Title-Case headings


TITLE_LINE = ("The study ends here.", "Our Measurement Approach", LONG_LINE)


@pytest.mark.parametrize(
    "numbered, mode, is_heading",
    [
        (("1 Introduction", S, "2 Method", S), "auto", True),  # two numbered headings: still on
        (("1 Introduction", S, "2 Method", S, "3 Results", S), "auto", False),  # three: off
        (("I. INTRODUCTION", S, "II. METHOD", S, "III. RESULTS", S), "auto", False),  # roman counts too
        (("1 Introduction", S, "2 Method", S, "3 Results", S), "always", True),
        (("1 Introduction", S, "2 Method", S), "never", False),
    ],
)
def test_title_case_headings_only_in_documents_with_fewer_than_three_numbered_headings(numbered, mode, is_heading):
    # rule: "auto" looks for Title-Case headings when fewer than three numbered or roman
    # headings were accepted; "always" and "never" do what they say
    got = _found(*numbered, *TITLE_LINE, cfg=SegmentConfig(title_case_headings=mode))
    assert got[len(numbered) + 1] == (("Our Measurement Approach", 1) if is_heading else "Our Measurement Approach")
    assert sum(isinstance(x, tuple) for x in got) == len(numbered) // 2 + is_heading


def test_capitals_headings_and_a_failed_one_does_not_stop_the_others():
    # rule: an ALL-CAPS line is a heading unless its context says table header / caption / title
    # page; one that fails its context is skipped, the later ones are still looked at
    assert _found("Some text ends here.", "POWER AND HEAT", S, cfg=NEVER) == [
        "Some text ends here.", ("POWER AND HEAT", 1), S]
    assert _found("Some text ends here.", "POWER AND HEAT", "Racks 120 135 190", S, "References", T, cfg=NEVER) == [
        "Some text ends here.", "POWER AND HEAT", "Racks 120 135 190", S, ("References", 1), T]


# ------------------------------------------------------------------- wrapped headings


def test_a_wrapped_heading_takes_at_most_two_continuation_lines():
    # rule: up to two lines that continue the heading are joined to it, the rest is text
    got = _found("3 RESULTS OF THE", "MEASUREMENT CAMPAIGN", "IN THE NORTH HALL", "OF THE PLANT", S, cfg=NEVER)
    assert got == [("3 RESULTS OF THE MEASUREMENT CAMPAIGN IN THE NORTH HALL", 1), "OF THE PLANT", S]


def test_a_wrapped_heading_joins_a_hyphenated_word_without_a_space():
    # rule: a continuation after a title ending in "-" is glued on without a space (the hyphen
    # stays: "State-of-the-" + "Art"); two continuation lines in a row are joined in order
    got = _found("1 Introduction", S, "2 Energy Use of the", "State-of-the-", "Art Cooling Plants", T)
    assert got == [("1 Introduction", 1), S, ("2 Energy Use of the State-of-the-Art Cooling Plants", 1), T]


def test_a_heading_on_the_last_line():
    # rule: a heading may be the very last line (nothing to continue it)
    assert _found(S, "2 Method", T, "3 Results") == [S, ("2 Method", 1), T, ("3 Results", 1)]


# ---------------------------------------------------------- run-in names ("Abstract: ...")


def test_the_text_after_a_run_in_name_is_an_ordinary_line():
    # rule: "Abstract: text" becomes a heading and a text line that the later steps treat like
    # any other: a footnote dropped into its sentence is found, and the sentence goes on
    text = (
        "Abstract: We measured the energy use of the cooling plant of the\n"
        "1 See the yearly report of the operator.\n"
        "cluster over one whole year of operation.\n"
        "1 Introduction\n"
        f"{S}\n"
        "2 Method\n"
        f"{T}"
    )
    assert _outline(segment_document([_text_block(text)], "Doc")) == [
        ("Abstract", "Abstract", 1, [
            ("text", False, ["We measured the energy use of the cooling plant of the cluster over one whole year of "
                             "operation."]),
            ("text", True, ["1 See the yearly report of the operator."]),
        ]),
        ("1 Introduction", "1 Introduction", 1, [("text", False, [S])]),
        ("2 Method", "2 Method", 1, [("text", False, [T])]),
    ]


WIDE = (
    "The plant has four chillers, two cooling towers and a set of pumps that move the water between them all.\n"
    "Its power was logged every minute by meters that the operator installed at the main switchboard room.\n"
    "1 Introduction\n"
    "Large models need large clusters, and large clusters need a great deal of cooling in the summer months.\n"
    "2 Method\n"
    "We logged the power of every rack at one minute intervals for the whole year and compared it with the\n"
    "power of the chillers, the towers and the pumps, which were all logged at the same switchboard room."
)


def _abstract_paragraphs(text):
    return [p.sentences for p in segment_document([_text_block(text)], "Doc")[0].paragraphs]


def test_the_text_after_a_run_in_name_keeps_the_width_of_its_block():
    # rule: the run-in text line has its block's line width (103 here), so a 68-character
    # sentence on it is a short line: a new paragraph starts after it (68 < 0.75 * 103)
    rest = "We measured the cooling plant of one large cluster for a whole year."
    assert _abstract_paragraphs(f"Abstract: {rest}\n{WIDE}") == [
        [rest],
        ["The plant has four chillers, two cooling towers and a set of pumps that move the water between them all.",
         "Its power was logged every minute by meters that the operator installed at the main switchboard room."],
    ]


@pytest.mark.parametrize("indent, n_paragraphs", [("  ", 2), ("", 1)])
def test_the_text_after_a_run_in_name_starts_at_indent_zero(indent, n_paragraphs):
    # rule: the run-in text line counts as unindented: a next line indented by two spaces
    # after its sentence end starts a new paragraph (its length, 61 of a width of 69, is no
    # short line)
    text = (
        "Abstract: We measured the cooling plant of a large cluster over a year.\n"
        f"{indent}The plant has four chillers and two towers, and pumps move the water.\n"
        "1 Introduction\nLarge models need large clusters, and large clusters need cooling.\n"
        "2 Method\nWe logged the power of every rack at one minute intervals all year."
    )
    first, second = "We measured the cooling plant of a large cluster over a year.", \
        "The plant has four chillers and two towers, and pumps move the water."
    assert _abstract_paragraphs(text) == ([[first], [second]] if n_paragraphs == 2 else [[first, second]])


# ------------------------------------------------------------------- the helper rules


@pytest.mark.parametrize(
    "texts, expected",
    [
        (("Our New Way of Doing Work On Racks", LONG_LINE), True),  # eight words
        (("Our New Way Of Doing The Work On Racks", LONG_LINE), False),  # nine words: too many
        (("Our Measurement Approach. ", LONG_LINE), False),  # a full stop before trailing spaces
        (("Cooling and Power Deliv-", LONG_LINE), False),  # ends in a hyphen: wrapped text
        (("Results For The Year 2019", LONG_LINE), True),  # one token in five (0.2) may be a number
        (("Results For 2018 And 2019", LONG_LINE), False),
        (("Our Measurement Approach", "The chillers drew 120, 150 and 190 kilowatts in summer"), False),  # 3 of 10
        (("Our Measurement Approach", "The chillers drew 120, 150 and more kilowatts in summer"), True),  # 2 of 10
    ],
)
def test_title_case_heading_words_endings_and_numbers(texts, expected):
    # rule: a Title-Case heading has at most eight words, no closing punctuation (trailing spaces
    # aside) or hyphen, at most a fifth of number tokens, and the next line less than 30 % numbers
    assert _title_case_heading(_items(*texts), 0) is expected


@pytest.mark.parametrize(
    "title, nxt, after, expected",
    [
        # a line that is a heading of its own, a caption or mostly numbers never continues one
        ("2 Energy Use of the", "References", BODY, False),
        ("2 Energy Use of the", "Figure 2: Power of the racks", BODY, False),
        ("2 Energy Use of the", "Racks 12 and 14", BODY, False),
        ("2 Energy Use and", "e-Waste Recovery", BODY, True),  # starts with a letter
        # a line that does not end openly, followed by one starting in lower case, starts a
        # sentence ...
        ("2 Energy Use of the", "Inference on the GPU", "is measured apart in this study.", False),
        ("2 Energy Use of the", "Inference on the GPU", "eGPU racks were measured too.", False),
        # ... unless it is open itself
        ("2 Energy Use of the", "Inference of", "large models is measured here.", True),
        ("2 Energy Use of the", "Inference Phases", None, True),  # nothing after it
        # capitals go on in capitals: judged on the title after its first word
        ("Appendix A DETAILS OF THE", "Measured Power Draw", BODY, False),
        ("Appendix A DETAILS OF THE", "MEASURED POWER DRAW", BODY, True),
        ("3 NVIDIA Power Tools and", "Their Energy Counters", BODY, True),  # capitals in one word only
        ("Acknowledgments", "Inference Phases", BODY, False),  # a title of one word
        ("2 Energy Use of Training, ", "Inference", BODY, True),  # a comma before trailing spaces
        # a long first line (0.45 of the width) goes on in Title-Case before a capital or nothing
        ("2 A Long Heading About Cooling Power", "Inference Phases", BODY, True),  # 36 = 0.45 * 80
        ("2 A Long Heading About Cooling Powe", "Inference Phases", BODY, False),  # 35
        ("2 A Rather Long Heading About The Energy", "Inference Phases", None, True),
        ("2 A Rather Long Heading About The Energy", "Inference Phases", "#Other", True),
    ],
)
def test_continues_heading_more_rules(title, nxt, after, expected):
    # rule: see the comments of the cases (the line after a heading joins it only if it is no
    # heading, caption or number row, does not start a sentence, and fits the title's style)
    texts = ("#h", nxt) if after is None else ("#h", nxt, after)
    assert _continues_heading(title, _items(*texts), 1, 80.0) is expected


@pytest.mark.parametrize(
    "texts, i, expected",
    [
        # the look-back for an IEEE table title stops at anything that is not a text line
        (("TABLE IV", "#ESTIMATED COST OF", "COOLING PLANT DESIGN", LONG_LINE), 2, True),
        (("TABLE IV", "ESTIMATED COST OF", "COOLING PLANT DESIGN", LONG_LINE), 2, False),
        # a table header is a next line of more than half numbers; half is not enough
        (("Intro text.", "COOLING PLANT DESIGN", "Racks 120 Fans 130"), 1, True),
        (("Intro text.", "COOLING PLANT DESIGN", "Racks 120 130 140"), 1, False),
    ],
)
def test_caps_heading_context_more_rules(texts, i, expected):
    # rule: see the comments of the cases
    assert _caps_context_ok(_items(*texts), i) is expected


@pytest.mark.parametrize("name, wins", [("2 Related Work", True), ("2 Work", False), ("2 Related", False),
                                        ("2 Outlook", False)])
def test_only_whole_known_names_win_a_numbering_tie(name, wins):
    # two "2" headings tie; a known section name wins the tie, a lone word of a known name does not
    # (then the later one wins, as for any other title)
    got = _headings("1 Introduction", S, name, S, "2 Data from the operator of the cluster", T, "3 Method", S)
    second = name if wins else "2 Data from the operator of the cluster"
    assert got == [("1 Introduction", 1), (second, 1), ("3 Method", 1)]
