"""Abbreviation-aware sentence splitting for re-flowed paragraph text.

A boundary is whitespace after ``.``, ``!`` or ``?`` (optionally followed by closing quotes,
brackets or a footnote number) that is followed by something that can start a sentence (a
capital, a digit, an opening quote or a bullet). A period does not end a sentence after a known
abbreviation (e.g., i.e., et al., Fig., Eq., No., vs., approx., U.S., ...), after a single capital
initial ("J. Smith"), or inside numbers (3.14, v1.2.3), which never have whitespace after the dot.
Fragments shorter than ``min_chars`` are merged into a neighbour; overlong sentences are cut at
the best clause boundary.
"""

from __future__ import annotations

import re

# Lower-cased tokens (without the final period) after which a period does not end a sentence.
ABBREVIATIONS = frozenset(
    """
    e.g eg i.e ie al cf vs v viz approx ca resp incl excl esp
    fig figs eq eqs eqn eqns sec secs sect tab tabs ref refs no nos vol vols pp p ch chap
    app appx art para def thm prop lem cor ex
    dr mr mrs ms prof jr sr st mt inc ltd co corp dept univ assoc bros
    jan feb mar apr jun jul aug sep sept oct nov dec
    u.s u.k u.n e.u u.s.a a.k.a ph.d m.sc b.sc a.m p.m n.b w.r.t
    """.split()
)

# Abbreviations after which a number usually follows ("Fig. 3", "No. 5").
_NUMBERED = frozenset("fig figs eq eqs eqn eqns sec secs sect tab tabs ref refs no nos vol vols pp p ch chap app art".split())

_CLOSERS = "\"'”’)]}»"
_OPENERS = "\"'“‘([«"
_BULLETS = "•●▪◦■□►‣∙"

# Candidate boundary: terminal punctuation, optional closers, optional footnote digits, whitespace.
_BOUNDARY = re.compile(r"([.!?])([" + re.escape(_CLOSERS) + r"]*)(\d{1,2})?(\s+)")
_BULLET_SPLIT = re.compile(r"\s+(?=[" + re.escape(_BULLETS) + r"]\s)")
_INITIALS = re.compile(r"^(?:[A-Za-z]\.)+[A-Za-z]$")


def _token_before(text: str, end: int) -> str:
    """The word that ends at ``end`` (the index of the terminal period)."""
    start = end
    while start > 0 and not text[start - 1].isspace() and text[start - 1] not in "([{\"“'‘":
        start -= 1
    return text[start:end]


def _can_start(text: str, pos: int) -> bool:
    if pos >= len(text):
        return False
    ch = text[pos]
    if ch.isupper() or ch.isdigit() or ch in _BULLETS:
        return True
    if ch in "\"“‘'" and pos + 1 < len(text):
        nxt = text[pos + 1]
        return nxt.isupper() or nxt.isdigit()
    if ch == "[":  # a citation that starts a sentence: "[12] showed ..."
        return True
    return False


def _is_boundary(text: str, m: re.Match[str]) -> bool:
    punct, closers, footnote = m.group(1), m.group(2), m.group(3)
    nxt = m.end()
    if not _can_start(text, nxt):
        return False
    if punct != ".":
        return True
    word = _token_before(text, m.start(1))
    if footnote:
        # "emissions.3 The" is a footnote mark; "v1.2 The" or "Table 3.1 Foo" are numbers.
        return bool(re.fullmatch(r"[A-Za-z)\]]{3,}", word))
    if closers:
        return True
    if not word:
        return True
    bare = word.lower().lstrip("(").rstrip(".")
    if bare in ABBREVIATIONS:
        # "etc." / "al." at the very end of a sentence followed by a capitalised word that is
        # not a name cannot be told apart; keeping the sentence whole is the safe choice.
        return False
    if bare in _NUMBERED:
        return not text[nxt].isdigit()
    if len(word) == 1 and word.isupper():
        return False  # an initial: "J. Smith", "Appendix A. ..." is rare
    if _INITIALS.match(word):
        return False  # U.S., e.g, a.m, Ph.D
    return True


def split_sentences(text: str, min_chars: int = 15, max_chars: int = 1000) -> list[str]:
    """Split re-flowed paragraph text into sentences.

    ``min_chars``: fragments shorter than this are merged into the previous sentence (or the
    next one when they come first). ``max_chars``: longer sentences are cut at ``; ``, ``, `` or
    a space (0 disables). Joining the result with single spaces gives back the normalised text.
    """
    text = " ".join(text.split())
    if not text:
        return []
    parts: list[str] = []
    start = 0
    for m in _BOUNDARY.finditer(text):
        if _is_boundary(text, m):
            cut = m.start(4)
            piece = text[start:cut].strip()
            if piece:
                parts.append(piece)
            start = m.end()
    tail = text[start:].strip()
    if tail:
        parts.append(tail)
    pieces: list[str] = []
    for part in parts:
        pieces.extend(p.strip() for p in _BULLET_SPLIT.split(part) if p.strip())
    if max_chars and max_chars > 0:
        pieces = [q for p in pieces for q in _cut_long(p, max_chars)]
    return merge_short(pieces, min_chars)


def merge_short(pieces: list[str], min_chars: int) -> list[str]:
    """Merge pieces shorter than ``min_chars`` into the previous piece (the next one at the start)."""
    out: list[str] = []
    carry = ""
    for piece in pieces:
        if carry:
            piece = f"{carry} {piece}"
            carry = ""
        if len(piece) < min_chars:
            if out:
                out[-1] = f"{out[-1]} {piece}"
            else:
                carry = piece
            continue
        out.append(piece)
    if carry:
        if out:
            out[-1] = f"{out[-1]} {carry}"
        else:
            out.append(carry)
    return out


def _cut_long(sentence: str, max_chars: int) -> list[str]:
    out: list[str] = []
    rest = sentence
    while len(rest) > max_chars:
        window = rest[: max_chars + 1]
        lo = max_chars // 2
        cut = -1
        for sep in ("; ", ", ", " "):
            idx = window.rfind(sep, lo)
            if idx > 0:
                cut = idx + len(sep.rstrip())
                break
        if cut <= 0:
            cut = max_chars
        out.append(rest[:cut].strip())
        rest = rest[cut:].strip()
    if rest:
        out.append(rest)
    return out
