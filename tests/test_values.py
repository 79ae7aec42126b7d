"""Canonical answer values (kohaku/core/values.py)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kohaku.core.values import BLANK_VALUE, Canonical, canonical, is_blank_value, parse_number, render, same, split_list


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1000", 1000.0), ("1,000", 1000.0), ("1000.0", 1000.0), ("1e3", 1000.0), ("1.25E+12", 1.25e12),
        ("about 1000", 1000.0), ("approximately 2.5", 2.5), ("~1k", 1000.0), ("> 5", 5.0),
        ("more than 100", 100.0), ("2B", 2e9), ("3.5 million", 3.5e6), ("40M", 4e7), ("1.5T", 1.5e12),
        ("2 thousand", 2000.0), ("50%", 50.0), ("$40M", 4e7), ("400x", 400.0), ("-5", -5.0),
        (".5", 0.5), ("3.14 x 10^23", 3.14e23), ("True", 1.0), ("false", 0.0), ("yes", 1.0), ("No.", 0.0),
        ("[5]", 5.0), ("'24'", 24.0), ("1,234,567.5", 1234567.5),
    ],
)
def test_numbers(text: str, expected: float) -> None:
    c = canonical(text)
    assert c.kind == "number"
    assert c.numbers[0] == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("[1.2,4]", (1.2, 4.0)), ("[4, 1.2]", (1.2, 4.0)), ("1.2-4", (1.2, 4.0)), ("1.2 – 4", (1.2, 4.0)),
        ("1.2 to 4", (1.2, 4.0)), ("from 1.2 to 4", (1.2, 4.0)), ("between 4 and 1.2", (1.2, 4.0)),
        ("10-20%", (10.0, 20.0)), ("1-2 million", (1e6, 2e6)), ("[0.06,3,426]", (0.06, 3.0, 426.0)),
        ("-5-10", (-5.0, 10.0)), ("2010-2014", (2010.0, 2014.0)),
    ],
)
def test_ranges(text: str, expected: tuple[float, ...]) -> None:
    c = canonical(text)
    assert c.kind == "range"
    assert c.numbers == pytest.approx(expected)


@pytest.mark.parametrize(
    "text",
    ["", "  ", "is_blank", "IS_BLANK", "na", "N/A", "[]",
     "Unable to answer with confidence based on the provided documents.",
     "unable to answer with confidence based on the provided documents, sorry"],
)
def test_blank_tokens(text: str) -> None:
    assert canonical(text).kind == "blank"
    assert render(text) == "is_blank"


def test_unable_prefix_only_at_start() -> None:
    assert not is_blank_value("We are unable to answer with confidence based on the provided documents")
    assert is_blank_value(None)


@pytest.mark.parametrize(
    "text, key",
    [("Command-R Plus", "command-r plus"), ("  ML.ENERGY   Benchmark ", "ml.energy benchmark"),
     ("Claude-3.7 Sonnet", "claude-3.7 sonnet"), ("Jevons' Paradox", "jevons' paradox"),
     ("Overleaf", "overleaf"), ("1,5", "1,5")],
)
def test_names(text: str, key: str) -> None:
    c = canonical(text)
    assert c.kind == "name" and c.items == (key,)


def test_lists_of_names_sorted_and_case_insensitive() -> None:
    a, b = canonical("['Foo', 'bar']"), canonical("[BAR,foo]")
    assert a.kind == "list" and a.items == ("bar", "foo")
    assert same(a, b)
    assert render(a) == "[bar,Foo]"


@pytest.mark.parametrize(
    "a, b, expected",
    [
        ("100", "100.1", True), ("100", "100.2", False), ("0", "0.001", True), ("0", "0.0011", False),
        ("1,000", "1000.0", True), ("1e3", "1000", True), ("1000", "900", False),
        ("[1.2,4]", "1.2-4", True), ("[1.2,4]", "[4,1.2]", True), ("[1.2,4]", "[1.2,4.1]", False),
        ("[1,2]", "1", False), ("5", "[5]", True), ("true", "1", True), ("no", "0", True),
        ("Hivemind", "hivemind.", True), ("Hivemind", "Hive mind", False), ("is_blank", "", True),
        ("is_blank", "0", False), ("[1,2,3]", "[1,2]", False),
    ],
)
def test_same(a: str, b: str, expected: bool) -> None:
    assert same(a, b) is expected
    assert same(b, a) is expected


@pytest.mark.parametrize(
    "text, out",
    [("1000.0", "1000"), ("1,000", "1000"), ("1.25E+12", "1250000000000"), ("0.1", "0.1"), ("-0", "0"),
     ("3.14e23", "3.14e23"), ("[80.0, 90.0]", "[80,90]"), ("80-90", "[80,90]"), ("1e-5", "1e-5"),
     ("about 2.5 billion", "2500000000"), ("Command-R Plus", "Command-R Plus"), ("N/A", "is_blank")],
)
def test_render(text: str, out: str) -> None:
    assert render(text) == out


def test_parse_number_rejects_non_numbers() -> None:
    for text in ("abc", "1 000", "1.2.3", "over the top", "inf", "nan", "1e999"):
        assert parse_number(text) is None, text


@settings(max_examples=400, deadline=None)
@given(st.text())
def test_arbitrary_strings_never_raise_and_render_is_stable(text: str) -> None:
    c = canonical(text)
    assert c.kind in {"blank", "number", "range", "list", "name"}
    out = render(c)
    assert isinstance(out, str) and out
    assert same(c, c)
    # the rendered form means the same thing as the original
    assert same(canonical(out), c), (text, out)


@settings(max_examples=200, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e15, max_value=1e15))
def test_numbers_round_trip(x: float) -> None:
    assert same(render(str(x)), x)
    assert canonical(render(x)).kind == "number"


@pytest.mark.parametrize(
    "text, kind, rendered",
    [
        ("[true, null, 2]", "list", "[2,null,true]"),  # JSON words inside a list are names
        ("['a', 'b',]", "list", "[a,b]"),  # not JSON: ast.literal_eval reads it
        ('["x, y", "z"]', "list", '["x, y", "z"]'),  # a comma inside a member: rendered as JSON
        ('["é, f", "g"]', "list", '["g", "é, f"]'),  # non-ASCII kept as it is
        ("{a, b}", "list", "[a,b]"),
        ("[5]", "number", "5"),  # a one-element list is its element
        ('["", 3]', "number", "3"),  # blank members dropped
        ("1-2 million", "range", "[1000000,2000000]"),  # the magnitude applies to both ends
        ("2 million-3", "range", "[3,2000000]"),  # but not backwards
        ("about ~ more than 5", "number", "5"),
        ("1e3", "number", "1000"),
        ("nan", "name", "nan"),
    ],
)
def test_canonical_kinds_and_renderings(text: str, kind: str, rendered: str) -> None:
    c = canonical(text)
    assert c.kind == kind and render(c) == rendered


def test_number_edges() -> None:
    from kohaku.core.values import format_number

    assert parse_number("true") == (1.0, False)  # booleans are exact numbers
    assert parse_number("approximately ~5") == (5.0, False)
    assert parse_number("about about about about 5") is None  # at most three hedges
    assert format_number(1e16) == "1e16" and format_number(9999999999999998.0) == "9999999999999998"
    assert same(canonical(""), canonical("is_blank")) and not same(canonical("is_blank"), canonical("5"))


# --------------------------------------------------------------------------------------------
# rules pinned by the mutation run (docs/mutation.md)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("\u22125", -5.0),  # U+2212 MINUS SIGN is a minus
        ("5\u00a0%", 5.0),  # no-break space before the percent sign
        ("5\u202f%", 5.0),  # narrow no-break space (French typography)
        ("1.5e2 x 10^3", 1.5e5),  # both exponents add up
    ],
)
def test_number_spellings_from_typesetting(text: str, expected: float) -> None:
    assert canonical(text) == canonical(expected)
    assert parse_number(text) == (expected, False)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("3-4 million", (3e6, 4e6)),  # the magnitude of the upper end multiplies the lower
        ("1k-2k", (1e3, 2e3)),  # both ends with one: neither is applied twice
        ("1 million-2 million", (1e6, 2e6)),
        ("1 to about 2 million", (1e6, 2e6)),  # a hedge before the upper end
        ("1 to about ~2 million", (1e6, 2e6)),  # two hedges (once gave [1,2000000])
        ("up to 5-10", (5.0, 10.0)),  # "up" is no number: the dash reading is tried next
    ],
)
def test_range_magnitudes_and_fallbacks(text: str, expected: tuple[float, float]) -> None:
    c = canonical(text)
    assert c.kind == "range" and c.numbers == expected


def test_a_name_with_to_and_one_number_is_a_name() -> None:
    # "scaling" is no number, so "to" makes no range; the trailing period goes as for any name
    assert canonical("Scaling to 8.") == Canonical("name", items=("scaling to 8",), display=("Scaling to 8",))
    assert same("Scaling to 8.", "scaling to 8")


@pytest.mark.parametrize("text, key", [("XBOX", "xbox"), ("SpaceX", "spacex"), ("'X'", "x")])
def test_names_ending_in_x_keep_it(text: str, key: str) -> None:
    assert canonical(text).items == (key,)


@pytest.mark.parametrize("text", ["''", '""', "``", "' '"])
def test_quoted_nothing_is_blank(text: str) -> None:
    assert canonical(text) == BLANK_VALUE


def test_non_string_values() -> None:
    assert canonical(None) == BLANK_VALUE
    assert canonical(float("nan")) == BLANK_VALUE
    assert canonical(float("inf")) == BLANK_VALUE and canonical(float("-inf")) == BLANK_VALUE
    assert canonical(True) == Canonical("number", numbers=(1.0,))
    assert canonical(False) == Canonical("number", numbers=(0.0,))
    assert canonical(7) == Canonical("number", numbers=(7.0,)) and render(2.5) == "2.5"


def test_one_element_lists_are_their_element() -> None:
    assert canonical("['Hivemind']") == Canonical("name", items=("hivemind",), display=("Hivemind",))
    assert canonical('["1-2 million"]') == Canonical("range", numbers=(1e6, 2e6))


def test_split_list_readers() -> None:
    # Python literals: a comma inside quotes belongs to the member
    assert split_list("['x, y', 'z']") == ["x, y", "z"]
    assert canonical("['x, y', 'z']").items == ("x, y", "z")
    # JSON first: an escaped astral character (json.dumps writes a surrogate pair) is one character
    assert split_list(json.dumps(["\U0001f525 fire", "ice"])) == ["\U0001f525 fire", "ice"]
    assert split_list('["a\\/b"]') == ["a/b"]
    # blank members are dropped by every reader
    assert split_list('["", "a", " "]') == ["a"]
    assert split_list("[a, , b]") == ["a", "b"]
    assert split_list("[ ]") == [] and split_list("x") is None and split_list("[a)") is None


def test_render_writes_plain_lists_without_json() -> None:
    assert render("[Xeon, Yolo]") == "[Xeon,Yolo]"
    assert render('["x, y", "Xz"]') == '["x, y", "Xz"]'


def test_canonical_of_text_it_cannot_parse_is_the_whole_text() -> None:
    # 2000 nested brackets exhaust the recursion of the list reader; canonical() still answers,
    # with the whole (whitespace-cleaned) text as a name
    text = "[" * 2000 + "Gpu  A" + "]" * 2000
    clean = "[" * 2000 + "Gpu A" + "]" * 2000
    assert canonical(text) == Canonical("name", items=(clean.lower(),), display=(clean,))
