"""Character- and line-level clean-up of raw extracted text.

Raw PDF extraction (pypdf, pdfminer) leaves runs of spaces, non-breaking spaces, ligatures,
soft hyphens, spaces before punctuation ("NLP . Based", "et al. ,") and end-of-line hyphenation
("improv-\\ning"). These helpers normalise single lines and join wrapped lines back together.
"""

from __future__ import annotations

import re
from typing import Iterable

_LIGATURES = {
    "\ufb00": "ff",
    "\ufb01": "fi",
    "\ufb02": "fl",
    "\ufb03": "ffi",
    "\ufb04": "ffl",
    "\ufb05": "st",
    "\ufb06": "st",
}
_INVISIBLE = dict.fromkeys(map(ord, "\u00ad\u200b\u200c\u200d\u2060\ufeff"), None)
_SPACES = re.compile(r"[ \t\u00a0\u2000-\u200a\u202f\u205f\u3000]+")
_SPACE_BEFORE_PUNCT = re.compile(r"(?<=[\w)\]%.])\s+([,.;:!?])(?=\s|$)")
_SPACE_AFTER_OPEN = re.compile(r"([(\[])\s+")
_SPACE_BEFORE_CLOSE = re.compile(r"\s+([)\]])")
_NUMBER_TOKEN = re.compile(
    r"^[~≈<>≤≥±+\-−–$€£]*\(?[\d][\d,.]*[)]?(?:%|x|×|[kKMBGT]|[a-z]{1,3})?\)?[*†‡]*$"
)
_WORD = re.compile(r"[A-Za-z][A-Za-z'’]*")


SURROGATES = re.compile("[\ud800-\udfff]")


def normalize_chars(text: str) -> str:
    """Replace ligatures, drop soft hyphens and zero-width characters; a surrogate pair left as
    two code points becomes the character it encodes and a lone surrogate U+FFFD, so the text
    is always valid UTF-8."""
    for lig, repl in _LIGATURES.items():
        if lig in text:
            text = text.replace(lig, repl)
    if SURROGATES.search(text) is not None:
        text = valid_text(text)
    return text.translate(_INVISIBLE)


def valid_text(text: str) -> str:
    """``text`` as UTF-8 and Parquet take it: surrogate pairs joined into the characters they
    encode, lone surrogates (a broken text layer, a JSON escape of half a pair) made U+FFFD."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def leading_indent(raw: str) -> int:
    """Number of leading space characters (incl. non-breaking) of a raw line."""
    n = 0
    for ch in raw:
        if ch in " \t\u00a0":
            n += 1
        else:
            break
    return n


# A line is left as it is by normalize_line's passes when it has no character they change or
# match as a space (_NOT_PLAIN: control characters, Unicode spaces, ligatures, soft hyphens and
# zero-width characters; tests/test_pdf_layout_fast.py checks it covers them, code point by code
# point; surrogates), and no double, leading or trailing space, no space before , . ; : ! ? ) ] and none
# after ( [. Most lines of a PDF are: normalize_line returns them without running the passes.
_NOT_PLAIN = re.compile("[\x00-\x1f\x7f-\xa0\xad\u1680\u2000-\u200d\u2028\u2029\u202f\u205f\u2060\u3000"
                        "\ud800-\udfff\ufb00-\ufb06\ufeff]")
_SPACE_BESIDE = re.compile(r" [ ,.;:!?)\]]")


def normalize_line(raw: str) -> str:
    """One raw line -> single-spaced text without stray spaces before punctuation."""
    if ((raw.isprintable() if raw.isascii() else _NOT_PLAIN.search(raw) is None)
            and _SPACE_BESIDE.search(raw) is None and "( " not in raw and "[ " not in raw
            and raw[:1] != " " and raw[-1:] != " "):
        return raw
    return _normalize_passes(raw)


def _normalize_passes(raw: str) -> str:
    """normalize_line's passes: characters, spaces, spaces beside punctuation and brackets."""
    text = normalize_chars(raw)
    text = _SPACES.sub(" ", text).strip()
    if not text:
        return ""
    text = _SPACE_BEFORE_PUNCT.sub(r"\1", text)
    text = _SPACE_AFTER_OPEN.sub(r"\1", text)
    text = _SPACE_BEFORE_CLOSE.sub(r"\1", text)
    return text


def fix_small_caps(title: str) -> str:
    """Undo the split that small-caps headings get in extraction: "I NTRODUCTION" -> "INTRODUCTION",
    "3.1 O PERATIONAL IMPACTS" -> "3.1 OPERATIONAL IMPACTS". Only for upper-case runs."""
    # clear evidence of small caps (a split after a letter that is not a word by itself) means
    # "A NALYTICAL" is a split word too
    evident = any(m.group(1) not in "AI" for m in _SMALL_CAPS.finditer(title))
    return _SMALL_CAPS.sub(lambda m: _join_small_caps(m, evident), title)


_SMALL_CAPS = re.compile(r"(?:(?<=^)|(?<=[\s(\-]))([A-Z]) ([A-Z]{2,})\b")
# Two-letter starts of English words; "A"/"I" followed by anything else is a split word
# ("A PPENDIX", "I NTRODUCTION"), while "A SURVEY" stays two words.
_ONSETS = frozenset(
    "bl br ch cl cr dr dw fl fr gl gr gn kn ph pl pr ps qu sc sh sk sl sm sn sp st sw th tr tw wh wr".split()
)


def _join_small_caps(m: re.Match[str], evident: bool = False) -> str:
    letter, rest = m.group(1), m.group(2)
    if letter in "AI" and not evident:
        head = rest[:2].lower()
        starts_word = head[0] in "aeiouy" or head[1] in "aeiouy" or head in _ONSETS
        if starts_word:
            return m.group(0)
    return letter + rest


def is_number_token(token: str) -> bool:
    """A table-cell-like numeric token: 12, 3.5, 1,024, 45%, ~2X, $1.2M, (0.3), 1e-3, N/A, -."""
    t = token.strip(",;:")
    if not t:
        return False
    if t in {"-", "–", "—", "N/A", "n/a", "NA", "✓", "✗", "×", "—"}:
        return True
    if re.fullmatch(r"\d+(\.\d+)?[eE][+-]?\d+", t):
        return True
    return bool(_NUMBER_TOKEN.match(t))


def numeric_share(line: str) -> float:
    tokens = line.split()
    if not tokens:
        return 0.0
    return sum(is_number_token(t) for t in tokens) / len(tokens)


def words(text: str) -> list[str]:
    return _WORD.findall(text)


def ends_sentence(line: str) -> bool:
    """The line ends a sentence: terminal punctuation, optionally followed by closers or a
    footnote mark ("... (REF)4." / "... energy.3")."""
    s = line.rstrip()
    s = re.sub(r"(?<=[.!?:])\d{1,2}$", "", s)
    s = s.rstrip("\"'”’)]*†‡")
    if s.endswith("..."):
        return True
    if not s.endswith((".", "!", "?", ":")) or s.endswith(".."):
        return False
    if s.endswith("."):
        last = s.split()[-1].lstrip("([").rstrip(".").lower()
        if last in _ABBREV_END or (len(last) == 1 and last.isalpha()):
            return False
    return True


# Abbreviations after which a line does not end a sentence ("... (e.g." / "et al.").
_ABBREV_END = frozenset("e.g i.e eg ie al cf vs fig figs eq eqs sec tab no approx ref refs".split())


def is_open_ended(line: str) -> bool:
    """The line clearly continues on the next one (ends inside a sentence)."""
    s = line.rstrip()
    if not s:
        return False
    last = s[-1]
    if last in ",;(-–—/&" or last.islower():
        return True
    tail = s.split()[-1].lower()
    return tail in _CONTINUATION_WORDS


_CONTINUATION_WORDS = frozenset(
    "a an the and or of to in on for with by from as at that which is are was were be than "
    "into over per via between under its their our".split()
)


def join_lines(lines: Iterable[str], vocab: set[str] | None = None) -> str:
    """Re-flow wrapped lines into one string, undoing end-of-line hyphenation.

    ``vocab`` (lower-cased words seen un-hyphenated elsewhere in the document, plus hyphenated
    compounds seen inside lines) decides ambiguous breaks: "improv-" + "ing" joins to "improving";
    "state-of-the-" + "art" and "GPT-" + "3" keep their hyphen; "energy-" + "efficient" keeps it
    when "energy-efficient" occurs in the document and "energyefficient" does not.
    """
    out = ""
    for line in lines:
        line = line.strip()
        if not line:
            continue
        if not out:
            out = line
            continue
        out = _join_pair(out, line, vocab)
    return out


def _join_pair(left: str, right: str, vocab: set[str] | None) -> str:
    if left.endswith("-") and len(left) >= 2 and left[-2].isalpha():
        m = re.search(r"(\S+)-$", left)
        head = m.group(1) if m else ""
        first = right.split(" ", 1)[0]
        tail_word = re.match(r"[A-Za-z]+", first)
        if right[0].islower() and tail_word:
            return left[:-1] + right if _dehyphenate(head, tail_word.group(0), vocab) else left + right
        # "GPT-" + "3", "Llama-" + "2", "CO2-" + "Equivalent": a real hyphen.
        return left + right
    if left.endswith(("—", "–", "/")):
        return left + right
    return f"{left} {right}"


def _dehyphenate(head: str, tail: str, vocab: set[str] | None) -> bool:
    """True: drop the hyphen ("improv" + "ing"); False: keep it ("state-of-the" + "art")."""
    last_part = head.split("-")[-1]
    joined = (last_part + tail).lower()
    compound = f"{last_part}-{tail}".lower()
    if vocab:
        if joined in vocab and compound not in vocab:
            return True
        if compound in vocab and joined not in vocab:
            return False
    if "-" in head:
        return False  # already a compound: "state-of-the-" + "art", "off-the-" + "shelf"
    if vocab and len(last_part) >= 3 and len(tail) >= 3 and last_part.lower() in vocab and tail.lower() in vocab:
        return False  # two known words never seen joined: "medium-" + "length"
    if not last_part.isalpha() or any(c.isupper() for c in last_part[1:]):
        return False  # "GPU-" + "based", "TPUv4-" + "pods"
    return True


def document_vocab(texts: Iterable[str]) -> set[str]:
    """Lower-cased words and in-line hyphenated compounds of a document, for ``join_lines``."""
    vocab: set[str] = set()
    for text in texts:
        for line in text.split("\n"):
            line = normalize_chars(line)
            # a hyphen at the end of a line is a break, not evidence
            body = line.rstrip()
            if body.endswith("-"):
                body = body[:-1].rsplit(" ", 1)[0] if " " in body else ""
            for tok in re.findall(r"[A-Za-z]+(?:-[A-Za-z]+)*", body):
                vocab.add(tok.lower())
                if "-" in tok:
                    parts = tok.lower().split("-")
                    for a, b in zip(parts, parts[1:]):
                        vocab.add(f"{a}-{b}")
    return vocab
