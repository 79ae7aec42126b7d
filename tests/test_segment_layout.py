"""The segmenter's layout rules for tables, captions, footnotes and paragraph building, one rule per
test, on hand-written snippets in the style of raw PDF extraction (written for these tests)."""

from __future__ import annotations

import pytest

from helpers_segment import _items
from kohaku.ingest.text.segment import (
    SegmentConfig,
    _build,
    _find_tables_and_captions,
    _footnote_end,
    _is_table_row,
    _is_upper,
    _Item,
)


def _shown(items):
    """(kind, page, content) per item: a line's text, a table's rows, a caption's lines."""
    return [(it.kind, it.page, it.rows if it.kind == "table" else it.lines if it.kind == "caption" else it.text)
            for it in items]


def _tables_and_captions(*texts, page=1):
    items = _items(*texts, page=page)
    _find_tables_and_captions(items, SegmentConfig())
    return _shown(items)


JAN, FEB, MAR = "January 120 30", "February 118 29", "March 110 28"
JUL, AUG = "July 190 45", "August 185 44"
PROSE = "The fans ran hard in the summer."


# ---------------------------------------------------------------------- small predicates


@pytest.mark.parametrize(
    "line, expected",
    [
        ("ABC", True),  # three letters are enough
        ("AB", False),  # two are not, even in capitals
        ("A-B 12", False),
        ("abc", False),  # enough letters, none upper case
        ("Abcdef", False),  # one capital in six letters
        ("ABCDEFGHIJKLMNOPQrst", True),  # 17 of 20 letters: exactly 85 % upper case
        ("ABCDEFGHIJKLMNOPqrst", False),  # 16 of 20: too few
        ("TABLE II: 12 GPUS", True),  # digits and punctuation are no letters
    ],
)
def test_upper_case_line_needs_three_letters_and_85_percent_capitals(line, expected):
    # rule: a line is "upper case" when it has at least three letters and at least 85 % of them
    # are capitals
    assert _is_upper(line) is expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("12 34 rack power ok", True),  # 2 of 5 tokens numeric: exactly 40 % is enough
        ("12 rack power ok now", False),  # 20 %, and the last token is a word
        ("a b c d e f g h i 5 6", False),  # eleven tokens: too many for the label-plus-number rule
        ("a b c d e f g 8 9 10", True),  # ten tokens, 30 % numbers, a number last
    ],
)
def test_table_row_is_mostly_numbers_or_a_short_label_ending_in_a_number(text, expected):
    # rule: a row has >= 40 % numeric tokens, or ends in a number with at most ten tokens of
    # which >= 15 % are numbers (and no full stop at the end)
    assert _is_table_row(text) is expected


# ----------------------------------------------------------------------------- footnotes


OPEN_LINE = "the energy use grew by a third in the year of the"


@pytest.mark.parametrize(
    "lines, expected",
    [
        (("1 See the", "|", "yearly report.", "study, mostly in summer."), 3),  # a block break inside a note
        (("1 See the yearly report.", "kWh went to the fans in summer."), 1),  # "kW...": lower case first letter
        (("1 See the yearly report.", "(and) the fans ran."), 0),  # "(": not a lower-case start
        (("1 See the yearly",), 0),  # the items end before the note ends a sentence
        (("1 See the yearly", "report of the"), 0),
    ],
)
def test_footnote_run_goes_on_in_lower_case_over_blanks_and_breaks(lines, expected):
    # rule: a note is up to four lines (blank lines and block breaks skipped) ending a sentence;
    # the text after the notes must start with a lower-case letter; running out of items before a
    # note ends means these are no notes
    assert _footnote_end(_items(*lines), 0, _items(OPEN_LINE)) == expected


def test_only_lines_that_look_like_notes_are_tried_as_footnotes():
    # rule: a footnote starts with a one- or two-digit mark; an ordinary line that ends a sentence
    # between two open sentences is no footnote
    assert _tables_and_captions("we saw that the", "fans worked hardest in summer.", "and the pumps ran all year.") == [
        ("line", 1, "we saw that the"),
        ("line", 1, "fans worked hardest in summer."),
        ("line", 1, "and the pumps ran all year."),
    ]


def test_footnote_caption_keeps_the_page_of_its_first_line():
    # rule: footnotes become a caption item on the page of their first line
    got = _tables_and_captions(OPEN_LINE, "1 See the yearly report.", "", "2 Measured at the racks.",
                               "study, mostly in summer.", page=3)
    assert got == [
        ("line", 3, OPEN_LINE),
        ("caption", 3, ["1 See the yearly report.", "2 Measured at the racks."]),
        ("line", 3, "study, mostly in summer."),
    ]


# ------------------------------------------------------------------------------ captions


@pytest.mark.parametrize(
    "texts, expected",
    [
        # a wrapped caption goes on until a sentence ends
        (("Figure 2: Power over the", "year of the study.", PROSE),
         [("caption", 1, ["Figure 2: Power over the", "year of the study."]), ("line", 1, PROSE)]),
        # a caption that ends a sentence stops, whatever comes next, and at the end of the items
        (("Figure 2: Power over the year.", "GPU POWER AND THE FANS", PROSE),
         [("caption", 1, ["Figure 2: Power over the year."]), ("line", 1, "GPU POWER AND THE FANS"),
          ("line", 1, PROSE)]),
        (("Figure 2: Power over the year.",), [("caption", 1, ["Figure 2: Power over the year."])]),
        (("Figure 2: Power over the",), [("caption", 1, ["Figure 2: Power over the"])]),
        # six lines at most
        (("Figure 2: Power of the", "racks and", "the fans and", "the pumps and", "the chillers and", "the lights and",
          "the doors of the room."),
         [("caption", 1, ["Figure 2: Power of the", "racks and", "the fans and", "the pumps and", "the chillers and",
                          "the lights and"]), ("line", 1, "the doors of the room.")]),
        # a heading ends a caption (capitals only go on under a bare "TABLE II" title)
        (("Figure 2: Power of the", "COOLING PLANT", PROSE),
         [("caption", 1, ["Figure 2: Power of the"]), ("line", 1, "COOLING PLANT"), ("line", 1, PROSE)]),
        (("TABLE II", "3 Results", PROSE),
         [("caption", 1, ["TABLE II"]), ("line", 1, "3 Results"), ("line", 1, PROSE)]),
        # a table row ends a caption that does not run on
        (("TABLE II", JAN, FEB, MAR), [("caption", 1, ["TABLE II"]), ("table", 1, [JAN, FEB, MAR])]),
        (("Table 2: Rack power (kW)", JAN, FEB, MAR),
         [("caption", 1, ["Table 2: Rack power (kW)"]), ("table", 1, [JAN, FEB, MAR])]),
        # a bare "Table 1." title that ends a sentence goes on only over upper-case lines
        (("Table 1.", "Power of the plant by month (kW)", PROSE),
         [("caption", 1, ["Table 1."]), ("line", 1, "Power of the plant by month (kW)"), ("line", 1, PROSE)]),
        (("Table 1.", "ESTIMATED POWER OF THE PLANT", JAN, FEB, MAR),
         [("caption", 1, ["Table 1.", "ESTIMATED POWER OF THE PLANT"]), ("table", 1, [JAN, FEB, MAR])]),
        # under a bare title, the first line not in capitals is the caption's last (unless a table row)
        (("Table 1.", "ESTIMATED POWER OF THE PLANT", PROSE, "The pumps ran too."),
         [("caption", 1, ["Table 1.", "ESTIMATED POWER OF THE PLANT", PROSE]), ("line", 1, "The pumps ran too.")]),
        (("TABLE II", "Estimated power of the plant (kW)", JAN, FEB, MAR),
         [("caption", 1, ["TABLE II", "Estimated power of the plant (kW)"]), ("table", 1, [JAN, FEB, MAR])]),
        (("Table 3.",), [("caption", 1, ["Table 3."])]),
        (("TABLE II", "COOLING PLANT.",), [("caption", 1, ["TABLE II", "COOLING PLANT."])]),
    ],
)
def test_caption_extent_rule(texts, expected):
    # rule: a caption takes the following lines while it has not ended a sentence (or, under a
    # bare "Table n" title, while the next line is upper case), at most six lines, and stops at a
    # heading (unless an upper-case title line under a bare title) or at a table row after a line
    # that does not run on
    assert _tables_and_captions(*texts) == expected


def test_caption_item_keeps_its_page():
    # rule: a caption item is on the page of its first line
    assert _tables_and_captions("Figure 4: Fan power.", PROSE, page=2) == [
        ("caption", 2, ["Figure 4: Fan power."]), ("line", 2, PROSE)]


# -------------------------------------------------------------------------------- tables


HEADER = "Month Power (kW) PUE"
WIDE = f"{HEADER} {'Y' * 59}"  # 80 characters
assert len(WIDE) == 80


@pytest.mark.parametrize(
    "texts, expected",
    [
        # the first item is looked at too: a header line first in the items joins the table
        ((HEADER, JAN, FEB, MAR), [("table", 2, [HEADER, JAN, FEB, MAR])]),
        (("The racks are listed below.", "", HEADER, JAN, FEB, MAR),
         [("line", 2, "The racks are listed below."), ("blank", 2, ""), ("table", 2, [HEADER, JAN, FEB, MAR])]),
        (("Intro text.", HEADER, JAN, FEB, MAR),
         [("line", 2, "Intro text."), ("table", 2, [HEADER, JAN, FEB, MAR])]),
        # a header is shorter than 80 characters
        ((WIDE[:-1], JAN, FEB, MAR), [("table", 2, [WIDE[:-1], JAN, FEB, MAR])]),
        ((WIDE, JAN, FEB, MAR), [("line", 2, WIDE), ("table", 2, [JAN, FEB, MAR])]),
        # a line ending a sentence, or running on, is no header
        (("The racks drew this much power:", JAN, FEB, MAR),
         [("line", 2, "The racks drew this much power:"), ("table", 2, [JAN, FEB, MAR])]),
        (("Rack power by month", JAN, FEB, MAR), [("line", 2, "Rack power by month"), ("table", 2, [JAN, FEB, MAR])]),
        # fewer than three numeric rows are no table
        ((HEADER, JAN, FEB), [("line", 2, HEADER), ("line", 2, JAN), ("line", 2, FEB)]),
    ],
)
def test_table_header_line_rule(texts, expected):
    # rule: a run of >= 3 numeric rows is a table on the page of its first row; a short line
    # (< 80 characters) right before it that neither ends a sentence nor runs on is its header
    assert _tables_and_captions(*texts, page=2) == expected


GROUP = "Summer months"


@pytest.mark.parametrize(
    "texts, expected",
    [
        # a group header between rows, also over blank lines; blank lines are no rows
        ((JAN, FEB, "", MAR, GROUP, "", JUL, AUG), [("table", 1, [JAN, FEB, MAR, GROUP, JUL, AUG])]),
        ((JAN, FEB, MAR, GROUP, "", "", JUL, PROSE), [("table", 1, [JAN, FEB, MAR, GROUP, JUL]), ("line", 1, PROSE)]),
        ((JAN, FEB, MAR, GROUP, "", JUL, PROSE), [("table", 1, [JAN, FEB, MAR, GROUP, JUL]), ("line", 1, PROSE)]),
        ((JAN, FEB, MAR, GROUP, JUL, PROSE), [("table", 1, [JAN, FEB, MAR, GROUP, JUL]), ("line", 1, PROSE)]),
        # not followed by a row: the table ends before it
        ((JAN, FEB, MAR, GROUP, PROSE), [("table", 1, [JAN, FEB, MAR]), ("line", 1, GROUP), ("line", 1, PROSE)]),
        ((JAN, FEB, MAR, GROUP, "", PROSE),
         [("table", 1, [JAN, FEB, MAR]), ("line", 1, GROUP), ("blank", 1, ""), ("line", 1, PROSE)]),
        ((JAN, FEB, MAR, GROUP), [("table", 1, [JAN, FEB, MAR]), ("line", 1, GROUP)]),
        ((JAN, FEB, MAR, GROUP, ""), [("table", 1, [JAN, FEB, MAR]), ("line", 1, GROUP), ("blank", 1, "")]),
        # a group header is short (< 70 characters) and ends no sentence
        ((JAN, FEB, MAR, "S" * 69, JUL), [("table", 1, [JAN, FEB, MAR, "S" * 69, JUL])]),
        ((JAN, FEB, MAR, "S" * 70, JUL), [("table", 1, [JAN, FEB, MAR]), ("line", 1, "S" * 70), ("line", 1, JUL)]),
        ((JAN, FEB, MAR, "The summer came.", JUL),
         [("table", 1, [JAN, FEB, MAR]), ("line", 1, "The summer came."), ("line", 1, JUL)]),
        # a table runs to the end of the items, and ends at a heading
        ((JAN, FEB, MAR), [("table", 1, [JAN, FEB, MAR])]),
        ((JAN, FEB, MAR, "#2 Outlook", JUL), [("table", 1, [JAN, FEB, MAR]), ("heading", 1, "2 Outlook"),
                                              ("line", 1, JUL)]),
    ],
)
def test_table_group_header_rule(texts, expected):
    # rule: a table run goes over numeric rows and blank lines, and takes one short non-numeric
    # line that ends no sentence when the next non-blank line is a numeric row again
    assert _tables_and_captions(*texts) == expected


# ---------------------------------------------------------------------- building paragraphs


def _paragraphs(items, title="Cooling Study"):
    """(title, source, level, [(kind, caption, lines)]) per section."""
    return [(s.title, s.source, s.level, [(p.kind, p.caption, p.lines) for p in s.paragraphs])
            for s in _build(items, title)]


def test_the_document_title_heading_before_any_text_stays_front_matter():
    # rule: a heading that repeats the document title, before any front-matter paragraph, is no
    # section; the same words as a text line, or as a heading after front text, are kept
    assert _paragraphs(_items("#Cooling Study", "We study cooling.")) == [
        ("Cooling Study", "front", 1, [("text", False, ["We study cooling."])])]
    assert _paragraphs(_items("Cooling Study", "We study cooling.")) == [
        ("Cooling Study", "front", 1, [("text", False, ["Cooling Study", "We study cooling."])])]
    assert _paragraphs(_items("Some front text.", "#Cooling Study", "We study cooling.")) == [
        ("Cooling Study", "front", 1, [("text", False, ["Some front text."])]),
        ("Cooling Study", "heading", 1, [("text", False, ["We study cooling."])]),
    ]
    # under a heading section, the title words start a section again
    assert _paragraphs(_items("#1 Intro", "#Cooling Study", "We study cooling.")) == [
        ("Cooling Study", "front", 1, []),
        ("1 Intro", "heading", 1, []),
        ("Cooling Study", "heading", 1, [("text", False, ["We study cooling."])]),
    ]


@pytest.mark.parametrize("level, expected", [(None, 1), (0, 1), (-2, 1), (3, 3)])
def test_heading_level_is_at_least_one(level, expected):
    # rule: a heading without a level (or a level below one) opens a level-1 section
    items = [_Item("heading", text="1 Intro", level=level), _Item("line", text="We study cooling.")]
    assert [s.level for s in _build(items, "Doc")] == [1, expected]


FIGURE = _Item("caption", lines=["Figure 3: Rack power."])


def test_an_interrupted_sentence_goes_on_over_blank_lines_after_a_figure():
    # rule: a paragraph cut by a caption while its last line runs on stays open across blank lines
    # (and further captions), and the next line in lower case continues it
    items = [*_items("The racks drew more power when the"), FIGURE, *_items("", "|"), FIGURE,
             *_items("", "fans worked hardest in summer.")]
    assert _paragraphs(items) == [("Cooling Study", "front", 1, [
        ("text", False, ["The racks drew more power when the", "fans worked hardest in summer."]),
        ("text", True, ["Figure 3: Rack power."]),
        ("text", True, ["Figure 3: Rack power."]),
    ])]
    # a heading in between closes it for good
    items = [*_items("The racks drew more power when the"), FIGURE,
             *_items("#2 Outlook", "fans worked hardest in summer.")]
    assert _paragraphs(items) == [
        ("Cooling Study", "front", 1, [("text", False, ["The racks drew more power when the"]),
                                       ("text", True, ["Figure 3: Rack power."])]),
        ("2 Outlook", "heading", 1, [("text", False, ["fans worked hardest in summer."])]),
    ]


@pytest.mark.parametrize(
    "nxt, joined",
    [
        ("kW of it went to the fans.", True),  # a lower-case first letter, whatever follows
        ("fans worked hardest.", True),
        ("(and the fans) worked hardest.", False),  # the first character is no lower-case letter
        ("Fans worked hardest.", False),
    ],
)
def test_sentence_goes_on_after_a_table_only_from_a_lower_case_first_character(nxt, joined):
    # rule: after a table, the open paragraph continues only when the next line's first character
    # is a lower-case letter
    items = [*_items("The racks drew more power when the"), _Item("table", rows=[JAN, FEB, MAR]), *_items(nxt)]
    first = ["The racks drew more power when the", nxt] if joined else ["The racks drew more power when the"]
    expected = [("text", False, first), ("table", False, [JAN, FEB, MAR])]
    if not joined:
        expected.append(("text", False, [nxt]))
    assert _paragraphs(items) == [("Cooling Study", "front", 1, expected)]


@pytest.mark.parametrize(
    "nxt, joined",
    [
        ("kW of it went to the fans.", True),
        ("(and the fans) worked hardest.", False),
    ],
)
def test_sentence_goes_on_over_a_block_break_from_a_lower_case_first_character(nxt, joined):
    # rule: over a block break, a line that does not end a sentence (and does not run on) is
    # continued only by a line whose first character is a lower-case letter
    items = _items("The racks drew more power than 40", "|", nxt)
    lines = [["The racks drew more power than 40", nxt]] if joined else [["The racks drew more power than 40"], [nxt]]
    assert _paragraphs(items) == [("Cooling Study", "front", 1, [("text", False, ls) for ls in lines])]
