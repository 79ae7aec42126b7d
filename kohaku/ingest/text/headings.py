"""Heading recognition on single text lines.

Patterns: numbered ("1 Introduction", "1.Introduction", "2.3 Method", "2.3. Method"), roman
("IV. RESULTS", "II. Background"), appendix letters ("A.1 Details", "B ADDITIONAL TABLES"),
well-known section names ("Abstract", "References", ...), ALL-CAPS short lines and, for
documents without numbered structure, short Title-Case lines. ``match_heading`` looks at one
line; the segmenter adds the context checks (previous line ended, plausible numbering chain).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kohaku.ingest.text.clean import fix_small_caps, is_number_token, words

# Well-known section names (lower case, single-spaced).
_KNOWN_LIST = [
    "abstract", "introduction", "background", "related work", "related works", "prior work",
    "previous work", "method", "methods", "methodology", "approach", "materials and methods",
    "experiments", "experimental setup", "experimental results", "evaluation", "results",
    "discussion", "conclusion", "conclusions", "concluding remarks", "summary", "future work",
    "limitations", "limitations and future work", "references", "bibliography",
    "acknowledgments", "acknowledgements", "acknowledgment", "acknowledgement", "appendix",
    "appendices", "supplementary material", "supplementary materials", "ethics statement",
    "ethical considerations", "broader impact", "broader impacts", "impact statement",
    "contents", "table of contents", "executive summary", "overview", "key findings",
    "key takeaways", "preface", "foreword", "glossary", "endnotes", "author contributions",
    "data availability", "code availability", "declarations", "funding", "results and discussion",
    "conclusion and future work", "conclusions and future work", "discussion and conclusion",
]
KNOWN = frozenset(_KNOWN_LIST)
# Names that may be followed by text on the same line ("Abstract—...", "Abstract: ...").
RUN_IN = ("abstract", "index terms", "keywords")

_NUMBERED = re.compile(r"^(\d{1,2}(?:\.\d{1,2}){0,3})(?:\.\s*|\s+)(?=\S)(.+)$")
_LETTERED = re.compile(r"^([A-H](?:\.\d{1,2}){0,2})(?:\.\s*|\s+)(?=\S)(.+)$")
_ROMAN = re.compile(r"^([IVX]{1,5})(\.\s*|\s+)(?=\S)(.+)$")
_APPENDIX = re.compile(r"^(appendix|appendices)\b\s*([A-H]|\d{1,2})?\b[.:]?\s*(.*)$", re.I)
_RUN_IN = re.compile(r"^(abstract|index terms|keywords)\s*(?:[—–:.]|-{1,2})\s*(\S.*)$", re.I)
_CAPTION = re.compile(
    r"^(?:(?:fig\.?|figure|table|tab\.|algorithm|listing|exhibit)\s*(?:[A-Z]?\d+(?:\.\d+)?|[IVX]+)\s*[:.|—–]"
    r"|(?:TABLE|Table)\s+[IVX\d]+\.?\s*$)",
    re.I,
)

_STOP = frozenset(
    "a an the and or of to in on for with by from as at vs via per into over under its their "
    "our is are be".split()
)


@dataclass(frozen=True)
class HeadingMatch:
    kind: str            # numbered / lettered / roman / known / caps / title
    number: tuple[int, ...] | None
    title: str           # the full heading text as it should be shown ("2.1 Models")
    level: int


def roman_value(s: str) -> int | None:
    values = {"I": 1, "V": 5, "X": 10}
    total, prev = 0, 0
    for ch in reversed(s):
        v = values.get(ch)
        if v is None:
            return None
        total = total - v if v < prev else total + v
        prev = max(prev, v)
    canonical = _to_roman(total)
    return total if canonical == s else None


def _to_roman(n: int) -> str:
    out = ""
    for value, sym in ((10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")):
        while n >= value:
            out += sym
            n -= value
    return out


def is_caption(line: str) -> bool:
    return bool(_CAPTION.match(line))


def _title_ok(title: str, max_words: int = 14) -> bool:
    """A plausible heading title: starts with a capital, mostly letters, not a sentence."""
    title = title.strip()
    if not title or not (title[0].isupper() or title[0] in "“\"'"):
        return False
    if len(title) > 110:
        return False
    ws = title.split()
    if len(ws) > max_words:
        return False
    if title.endswith((".", "!", ";", "-")) and not title.endswith("etc."):
        return False
    if not re.search(r"[A-Za-z]{3}", title):
        return False
    letters = sum(c.isalpha() for c in title)
    if letters < 2 or letters < 0.6 * len(title.replace(" ", "")):
        return False
    if sum(is_number_token(t) for t in ws) > max(1, len(ws) // 3):
        return False
    if re.search(r"https?://|@|\bet al\b", title):
        return False
    return True


def is_caps_line(line: str) -> bool:
    """ALL-CAPS short line ("RELATED WORK", "EXECUTIVE SUMMARY")."""
    ws = words(line)
    letters = "".join(ws)
    if len(letters) < 5 or len(ws) > 9 or len(line) > 90:
        return False
    upper = sum(c.isupper() for c in letters)
    if upper < 0.9 * len(letters):
        return False
    if not any(len(w) >= 5 for w in ws):
        return False
    if sum(len(w) == 1 for w in ws) > len(ws) / 2:
        return False  # "G O A T": spaced-out figure labels
    if line.rstrip().endswith((".", ",", ";")):
        return False
    vowels = sum(c in "AEIOUY" for c in letters)
    return vowels >= 0.25 * len(letters)


def is_title_case(line: str, max_words: int = 8) -> bool:
    ws = line.split()
    if not ws or len(ws) > max_words or len(line) > 70:
        return False
    if not ws[0][:1].isupper():
        return False
    content = [w for w in ws if w.lower() not in _STOP]
    if not content:
        return False
    caps = sum(w[:1].isupper() or w[:1].isdigit() for w in content)
    return caps >= 0.75 * len(content)


def match_heading(line: str) -> HeadingMatch | None:
    """Heading pattern of a single normalised line, without any context check."""
    s = line.strip()
    if not s or len(s) > 120 or is_caption(s):
        return None
    m = _NUMBERED.match(s)
    if m:
        number = tuple(int(p) for p in m.group(1).split("."))
        title = fix_small_caps(m.group(2).strip())
        if _title_ok(title):
            return HeadingMatch("numbered", number, f"{m.group(1)} {title}", len(number))
        return None
    m = _APPENDIX.match(s)
    if m and s[0].isupper() and (not m.group(3) or _title_ok(m.group(3))):
        return HeadingMatch("known", None, fix_small_caps(s), 1)
    m = _ROMAN.match(s)
    if m:
        value = roman_value(m.group(1))
        title = fix_small_caps(m.group(3).strip())
        has_dot = "." in m.group(2)
        if value and (has_dot or is_caps_line(title)) and _title_ok(title, 12):
            if has_dot or value > 1:
                return HeadingMatch("roman", (value,), f"{m.group(1)}. {title}", 1)
    m = _LETTERED.match(s)
    if m:
        title = fix_small_caps(m.group(2).strip())
        letter = m.group(1).split(".")[0]
        rest = tuple(int(p) for p in m.group(1).split(".")[1:])
        dotted = s[len(m.group(1)):].startswith(".")
        wrapped = title.split()[-1].lower() in _STOP or title.endswith(",")
        styled = is_caps_line(title) or is_title_case(title, 10)
        if rest:
            ok = True                                  # "A.1 Additional measurements"
        elif dotted:
            ok = styled or len(title.split()) <= 6     # "B. Framework overview"
        else:
            ok = styled and not wrapped                # "B ADDITIONAL TABLES", not "A New ... by"
        if _title_ok(title, 10) and ok:
            if not (letter == "A" and not rest and not is_caps_line(title) and title.split()[0].islower()):
                number = (ord(letter) - ord("A") + 1, *rest)
                return HeadingMatch("lettered", number, fix_small_caps(s), len(number))
    bare = re.sub(r"[\s:.]+$", "", s).lower()
    bare = " ".join(fix_small_caps(bare.upper()).lower().split())
    if bare in KNOWN and s[0].isupper():
        return HeadingMatch("known", None, fix_small_caps(re.sub(r"[\s:.]+$", "", s)), 1)
    fixed = fix_small_caps(s)
    if is_caps_line(fixed) and _title_ok(fixed, 9):
        return HeadingMatch("caps", None, fixed, 1)
    return None


def split_run_in(line: str) -> tuple[str, str] | None:
    """"Abstract—Deep learning ..." -> ("Abstract", "Deep learning ..."); else None."""
    m = _RUN_IN.match(line.strip())
    if not m or not line.strip()[0].isupper():
        return None
    name = m.group(1)
    return name[:1].upper() + name[1:], m.group(2).strip()


def numbering_step_ok(prev: tuple[int, ...] | None, cur: tuple[int, ...]) -> bool:
    """Is ``cur`` a plausible next heading number after ``prev``?

    The first heading may start at 1..3; afterwards a heading goes one or two steps forward at
    some depth (1 -> 2, 2.1 -> 2.2, 2.2 -> 3, 3 -> 3.1, 2.3 -> 4.1), where the components below the
    changed one restart at 1 or 2.
    """
    if prev is None:
        return cur[0] <= 3 and all(c <= 2 for c in cur[1:])
    common = 0
    while common < min(len(prev), len(cur)) and prev[common] == cur[common]:
        common += 1
    if common == len(cur):
        return False  # same number again or an ancestor of the previous heading
    if common == len(prev):
        # child of the previous heading
        return cur[common] in (1, 2) and all(c <= 2 for c in cur[common + 1:])
    step = cur[common] - prev[common]
    return step in (1, 2) and all(c <= 2 for c in cur[common + 1:])


def best_chain(numbers: list[tuple[int, ...]], weights: list[float] | None = None) -> list[int]:
    """Indices of the heaviest subsequence of ``numbers`` in which every step is plausible
    (``numbering_step_ok``). Used to drop list items, footnotes and table rows that look like
    numbered headings. Ties prefer later candidates (an affiliation "1 Google" before a real
    "1 Introduction" loses)."""
    n = len(numbers)
    if n == 0:
        return []
    w = weights or [1.0] * n
    best = [0.0] * n
    back = [-1] * n
    for i in range(n):
        best[i] = w[i] if numbering_step_ok(None, numbers[i]) else float("-inf")
        for j in range(i):
            if best[j] == float("-inf"):
                continue
            if numbering_step_ok(numbers[j], numbers[i]) and best[j] + w[i] >= best[i]:
                best[i] = best[j] + w[i]
                back[i] = j
    end = max(range(n), key=lambda i: (best[i], i))
    if best[end] == float("-inf"):
        return []
    chain = []
    while end != -1:
        chain.append(end)
        end = back[end]
    return chain[::-1]
