"""The document a question names: a prior over the corpus's documents from the question text.

Document-QA questions usually name their source ("What is the FY2018 capital expenditure of
3M?", "According to the 2022 Amazon 10-K ..."), the answer sentences never do; in a store shared
by many near-identical filings the search then returns the right passage of the wrong company or
year. :func:`question_priors` matches the question against each document's metadata (the
corpus's metadata.csv columns) and returns, per question, the documents its retrieval should be
restricted to (``retrieve.doc_prior``; kohaku.retrieval.retrieve reuses the
``retrieve.restrict_column`` machinery to search within them), or nothing:

1. Entities (``entity_fields``, e.g. company, title): a document is named when one of its
   entity values occurs in the question as whole words, case- and punctuation-insensitive
   ("Johnson & Johnson" = "johnson johnson", "Pepsico's" = "pepsico", "3M", "AMD"; a
   multi-word name also matches written as one word, "BestBuy"); with ``alias_fields`` also an
   upper-case short form ("MGM" of "MGM Resorts"), the initials ("JnJ") and a clipped form, a
   prefix of each word ("AMEX" of "American Express"). No document named -> the title fallback
   (below) or no restriction: the question is ranked exactly as without the prior.
2. Years (``year_fields``, e.g. doc_period, year; "FY2018", "FY18", "fiscal 2018", "2018",
   "Q2 2023", "2023Q2", "Q2 FY2023"): among the named documents, those whose year the question
   names; none -> all the named documents stay (a year the corpus lacks narrows nothing). A
   question naming several years keeps the latest of them that a named document has
   (``latest_year``: a filing compares its year with the earlier ones).
3. Quarters ("Q2 2023", "2023Q2", "second quarter"), calendar dates ("as of August 30, 2023"
   against a title or id holding 2023-08-30: a current report's date) and document types
   (``type_fields``, e.g. doc_type: "10-K", "10-Q", "8-K"; other type values as whole words,
   e.g. "earnings") narrow the same way, each only when it leaves a document.

The result is one document (unambiguous) or a tie set (a company named without a year: all that
company's filings), searched together. ``max_docs`` caps the set: a question naming more
documents than that is left unrestricted.

Title fallback (``title_bm25``, off by default): where no entity matched, BM25 of the question
over the titles; the best title is taken only when its score is at least ``title_min_score``
and at least ``title_margin`` times the second best (the documented margin), else nothing.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import polars as pl

MODES = ("filter", "off")

_APOS = re.compile(r"['\u2019\u2018`]s\b", re.I)  # possessive 's
_TOKEN = re.compile(r"[a-z0-9]+")
# 10-K, 10 K, 10K, 8-K, 10-Q, 20-F ... -> one token "10k"
_FORM = re.compile(r"\b(\d{1,2})\s*-?\s*([kqf])\b", re.I)
_YEAR = re.compile(r"(?<![0-9])(?<![0-9][,.])((?:19|20)\d{2})(?![0-9]|[,.][0-9])")
_FY_SHORT = re.compile(r"\bfy\s*'?(\d{2})\b", re.I)
_QUARTER = [
    re.compile(r"\bq([1-4])\b", re.I),                       # Q2 2023, Q2 FY2023
    re.compile(r"(?<![0-9])(?:19|20)\d{2}\s*q([1-4])\b", re.I),  # 2023Q2
    re.compile(r"\bq([1-4])\s*'?(?:fy)?\s*(?:19|20)\d{2}", re.I),  # Q22023 unlikely; Q2FY2023
]
_ORDINAL_Q = re.compile(r"\b(first|second|third|fourth)\s+(?:fiscal\s+)?quarter\b", re.I)
_ORDINALS = {"first": "1", "second": "2", "third": "3", "fourth": "4"}
# calendar dates, as YYYY-MM-DD: 2023-08-30 (also _ / .), 08/30/2023, August 30, 2023, 30 Aug 2023
_MONTH = (r"(jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
          r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?")
_MONTHS = {m: i for i, m in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split(), 1)}
_ISO_DATE = re.compile(r"(?<![0-9])((?:19|20)\d{2})[-_./](\d{1,2})[-_./](\d{1,2})(?![0-9])")
_US_DATE = re.compile(r"(?<![0-9/])(\d{1,2})/(\d{1,2})/((?:19|20)\d{2})(?![0-9])")
_MDY = re.compile(rf"\b{_MONTH}\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+((?:19|20)\d{{2}})(?![0-9])", re.I)
_DMY = re.compile(rf"(?<![0-9])(\d{{1,2}})(?:st|nd|rd|th)?\s+{_MONTH},?\s+((?:19|20)\d{{2}})(?![0-9])", re.I)
# words left out of a name's clipped forms ("Johnson & Johnson", "Bank of America")
_CONNECTORS = frozenset({"and", "of", "the", "inc", "corp", "co", "ltd", "plc", "llc", "sa", "ag"})
STOPWORDS = frozenset(
    "a an the of and or in on for to by with from at as is are was were be what which who how "
    "much many did does do its it this that these those company companys report".split())


@dataclass
class DocPriorConfig:
    """``retrieve.doc_prior``: restrict a question's retrieval to the documents it names."""

    enabled: bool = True            # false: never restrict retrieval to the documents a question names
    mode: str = "filter"  # filter: search only within the named documents; off: as if disabled
    # metadata columns holding names matched whole-word in the question (missing ones skipped)
    entity_fields: list[str] = field(default_factory=lambda: ["company", "title"])
    # metadata columns holding a document's year or period (2018, 2023Q2, FY2018)
    year_fields: list[str] = field(default_factory=lambda: ["doc_period", "year"])
    # metadata columns holding the document type (10k, 10-Q, 8k, Earnings)
    type_fields: list[str] = field(default_factory=lambda: ["doc_type"])
    # metadata columns (besides the year fields) that may hold a quarter (2023Q2, "2023 Q2")
    # or a calendar date (a current report's "2023-08-30")
    quarter_fields: list[str] = field(default_factory=lambda: ["title", "doc_period", "id"])
    # entity columns whose short forms also count: an upper-case word of 3+ letters matched
    # case-sensitively ("MGM" of "MGM Resorts") and the initials of a name of 3+ words or with
    # '&' ("JnJ", "J&J" of "Johnson & Johnson"); not titles (a title's "ML" is no name)
    alias_fields: list[str] = field(default_factory=lambda: ["company"])
    # a question naming several years ("FY2023 vs FY2022") keeps the documents of the latest
    # named year the corpus has (a filing reports its year against the earlier ones)
    latest_year: bool = True
    # a question naming more documents than this is left unrestricted (0 = no cap)
    max_docs: int = 0
    # entity values shorter than this (characters, without spaces) are not matched
    min_name_chars: int = 2
    # BM25 over titles where no entity matched (off by default; see the module doc)
    title_bm25: bool = False
    title_min_score: float = 8.0    # title_bm25: the best title's least BM25 score
    title_margin: float = 2.0       # title_bm25: the best title's least ratio to the second best

    def validate(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"doc_prior.mode={self.mode!r}: use one of {', '.join(MODES)}")
        if self.max_docs < 0:
            raise ValueError("doc_prior.max_docs must be >= 0 (0 = no cap)")
        if self.title_margin < 1.0:
            raise ValueError("doc_prior.title_margin must be >= 1")

    @property
    def active(self) -> bool:
        return self.enabled and self.mode != "off"


def normalise(text: str) -> list[str]:
    """Lower-cased word tokens: possessives dropped, '&' and punctuation as spaces, filing forms
    as one token (10-K -> 10k)."""
    text = _APOS.sub("", text or "")
    text = _FORM.sub(lambda m: f" {m.group(1)}{m.group(2)} ", text)
    return _TOKEN.findall(text.lower())


def question_years(text: str) -> set[str]:
    """Four-digit years the question names (2018, FY2018, fiscal 2018, 2023Q2) and FY18 forms."""
    years = set(_YEAR.findall(text or ""))
    years.update(("20" + y) for y in _FY_SHORT.findall(text or ""))
    return years


def question_quarters(text: str) -> set[str]:
    quarters: set[str] = set()
    for pat in _QUARTER:
        quarters.update(pat.findall(text or ""))
    quarters.update(_ORDINALS[m.lower()] for m in _ORDINAL_Q.findall(text or ""))
    return quarters


def text_dates(text: str) -> set[str]:
    """The calendar dates a text names, as YYYY-MM-DD ("as of August 30, 2023", a title's
    "8-K 2023-08-30", "dated-2023-08-30"); impossible month or day values are skipped."""
    found: set[tuple[int, int, int]] = set()
    text = text or ""
    for y, m, d in _ISO_DATE.findall(text):
        found.add((int(y), int(m), int(d)))
    for m, d, y in _US_DATE.findall(text):
        found.add((int(y), int(m), int(d)))
    for name, d, y in _MDY.findall(text):
        found.add((int(y), _MONTHS[name[:3].lower()], int(d)))
    for d, name, y in _DMY.findall(text):
        found.add((int(y), _MONTHS[name[:3].lower()], int(d)))
    return {f"{y:04d}-{m:02d}-{d:02d}" for y, m, d in found if 1 <= m <= 12 and 1 <= d <= 31}


def _contains(tokens: Sequence[str], name: Sequence[str]) -> bool:
    n = len(name)
    if not n or n > len(tokens):
        return False
    first = name[0]
    return any(tokens[i] == first and list(tokens[i:i + n]) == list(name)
               for i in range(len(tokens) - n + 1))


@dataclass
class _Doc:
    doc_id: str
    names: list[list[str]]   # token sequences; a multi-word name also as one joined token
    acronyms: set[str]       # upper-case words matched case-sensitively
    years: set[str]
    quarters: set[str]
    types: set[str]
    title: list[str]
    dates: set[str] = field(default_factory=set)
    # the words of a multi-word short-form name (alias_fields), lower-cased: an upper-case
    # question word made of a prefix of each ("AMEX" of "American Express") names it
    clipped: list[list[str]] = field(default_factory=list)


class DocPrior:
    """The documents of a corpus, ready to be matched against questions."""

    def __init__(self, metadata: pl.DataFrame, cfg: DocPriorConfig,
                 doc_ids: Iterable[str] | None = None) -> None:
        self.cfg = cfg
        id_col = "id" if "id" in metadata.columns else "doc_id"
        meta = metadata.with_columns(pl.col(id_col).cast(pl.String).alias("_id"))
        if doc_ids is not None:
            known = set(doc_ids)
            meta = meta.filter(pl.col("_id").is_in(list(known)))
        cols = set(meta.columns)

        def values(row: Mapping, fields: Sequence[str]) -> list[str]:
            return [str(row[f]).strip() for f in fields if f in cols and row[f] is not None
                    and str(row[f]).strip()]

        self.docs: list[_Doc] = []
        for row in meta.iter_rows(named=True):
            names: list[list[str]] = []
            for value in values(row, cfg.entity_fields):
                toks = normalise(value)
                if len("".join(toks)) < cfg.min_name_chars:
                    continue
                names.append(toks)
                if "&" in value:  # Johnson & Johnson = Johnson and Johnson
                    names.append(normalise(value.replace("&", " and ")))
                if len(toks) > 1:
                    names.append(["".join(toks)])
            acronyms: set[str] = set()
            clipped: list[list[str]] = []
            for value in values(row, cfg.alias_fields):
                parts = [w for w in re.findall(r"[a-z0-9]+", value.lower()) if w not in _CONNECTORS]
                if len(parts) >= 2:
                    clipped.append(parts)
                acronyms.update(w for w in re.findall(r"[A-Za-z0-9]+", value)
                                if len(w) >= 3 and w.isupper())
                words = re.findall(r"[^\s]+", value.replace("&", " & "))
                if len(words) >= 3:
                    initials = "".join("n" if w in ("&", "and") else w[0] for w in words).lower()
                    if initials.isalnum():
                        names.append([initials])
                        names.append([initials.replace("n", "") if "&" in value else initials])
            years: set[str] = set()
            for value in values(row, cfg.year_fields):
                years.update(_YEAR.findall(value))
            quarters: set[str] = set()
            for value in values(row, cfg.quarter_fields):
                quarters.update(re.findall(r"(?<![0-9])(?:19|20)\d{2}\s*_?q([1-4])(?![0-9])",
                                           value, re.I))
            types = {"".join(normalise(v)) for v in values(row, cfg.type_fields)}
            title = normalise(" ".join(values(row, ["title"])))
            dates = set().union(*(text_dates(v) for v in values(row, cfg.quarter_fields)))
            self.docs.append(_Doc(row["_id"], names, acronyms, years, quarters, {t for t in types if t},
                                  title, dates, clipped))
        self._bm25 = _TitleBM25([d.title for d in self.docs]) if cfg.title_bm25 else None

    def documents(self, question: str) -> tuple[str, ...] | None:
        """The documents ``question`` names (see the module doc), or None: search every one."""
        tokens = normalise(question)
        raw = set(re.findall(r"[A-Za-z0-9]+", _APOS.sub("", question)))
        named = [d for d in self.docs if _names(d, tokens, raw)]
        if not named:
            best = self._title_fallback(tokens)
            return (best,) if best is not None else None
        years = question_years(question)
        named = _narrow(named, lambda d: bool(d.years & years)) if years else named
        if self.cfg.latest_year and len(years) > 1:  # FY2023 vs FY2022: the 2023 filing
            latest = max((y for d in named for y in d.years & years), default=None)
            named = _narrow(named, lambda d: latest in d.years)
        quarters = question_quarters(question)
        named = _narrow(named, lambda d: bool(d.quarters & quarters)) if quarters else named
        dates = text_dates(question)
        named = _narrow(named, lambda d: bool(d.dates & dates)) if dates else named
        tokset = set(tokens)
        named = _narrow(named, lambda d: bool(d.types & tokset))
        if self.cfg.max_docs and len(named) > self.cfg.max_docs:
            return None
        return tuple(d.doc_id for d in named)

    def named_words(self, question: str, doc_ids: Iterable[str]) -> set[str]:
        """The words of ``question`` that name one of ``doc_ids`` (its entity values and short
        forms, as :meth:`documents` matches them: "American Express", "AMEX", "3M", "JnJ"),
        lower-cased; years are never among them. Once the search is restricted to those
        documents these words pick no page (kohaku/retrieval/focus.py)."""
        tokens = normalise(question)
        raw = set(re.findall(r"[A-Za-z0-9]+", _APOS.sub("", question or "")))
        wanted = set(doc_ids)
        out: set[str] = set()
        for d in self.docs:
            if d.doc_id not in wanted:
                continue
            for name in d.names:
                if _contains(tokens, name):
                    out.update(t for t in name if not t.isdigit())
            out.update(a.lower() for a in d.acronyms & raw)
            out.update(w.lower() for w in raw if _clipped_form(w, d.clipped))
        return out

    def _title_fallback(self, tokens: list[str]) -> str | None:
        if self._bm25 is None:
            return None
        scores = self._bm25.scores([t for t in tokens if t not in STOPWORDS])
        order = sorted(range(len(scores)), key=lambda i: -scores[i])
        if not order or scores[order[0]] < self.cfg.title_min_score:
            return None
        second = scores[order[1]] if len(order) > 1 else 0.0
        if second > 0 and scores[order[0]] < self.cfg.title_margin * second:
            return None
        return self.docs[order[0]].doc_id


def _clipped_form(word: str, names: Sequence[Sequence[str]]) -> bool:
    """True when ``word`` (4+ letters, all upper-case) is a prefix of each word of one of
    ``names`` in order, joined ("AMEX" = am + ex of "American Express", "FEDEX" of "Federal
    Express"); a word in lower or mixed case never is (a common word could be), nor a shorter
    one (three capitals are too many other things' initials)."""
    if len(word) < 4 or not word.isalpha() or not word.isupper():
        return False
    w = word.lower()

    def fits(i: int, rest: str) -> bool:
        if i == len(parts):
            return not rest
        part = parts[i]
        return any(rest[:n] == part[:n] and fits(i + 1, rest[n:])
                   for n in range(1, min(len(part), len(rest) - (len(parts) - i - 1)) + 1))

    for parts in names:
        if len(parts) <= len(w) and w[0] == parts[0][0] and fits(0, w):
            return True
    return False


def _names(d: _Doc, tokens: Sequence[str], raw: set[str]) -> bool:
    """Whether a question (its normalised ``tokens``, its ``raw`` words) names document ``d``:
    an entity value as whole words, an upper-case short form, or a clipped form."""
    return (any(_contains(tokens, n) for n in d.names) or bool(d.acronyms & raw)
            or any(_clipped_form(w, d.clipped) for w in raw))


def _narrow(docs: list[_Doc], keep) -> list[_Doc]:
    kept = [d for d in docs if keep(d)]
    return kept or docs


class _TitleBM25:
    def __init__(self, titles: list[list[str]], k1: float = 1.2, b: float = 0.75) -> None:
        self.tfs = [Counter(t) for t in titles]
        self.lens = [len(t) for t in titles]
        self.avg = (sum(self.lens) / len(self.lens)) if self.lens else 1.0
        df = Counter(w for t in titles for w in set(t))
        n = len(titles)
        self.idf = {w: math.log(1 + (n - c + 0.5) / (c + 0.5)) for w, c in df.items()}
        self.k1, self.b = k1, b

    def scores(self, query: list[str]) -> list[float]:
        out = []
        for tf, ln in zip(self.tfs, self.lens):
            s = 0.0
            for w in set(query):
                f = tf.get(w, 0)
                if f:
                    s += self.idf[w] * f * (self.k1 + 1) / (
                        f + self.k1 * (1 - self.b + self.b * ln / max(self.avg, 1e-9)))
            out.append(s)
        return out


def question_priors(questions: pl.DataFrame, metadata: pl.DataFrame, cfg: DocPriorConfig,
                    doc_ids: Iterable[str] | None = None) -> dict[str, tuple[str, ...]]:
    """qid -> the documents its retrieval is restricted to; questions that name none are absent
    (searched over every document, as without the prior)."""
    prior = DocPrior(metadata, cfg, doc_ids)
    out: dict[str, tuple[str, ...]] = {}
    for qid, text in zip(questions["qid"].cast(pl.String), questions["question"]):
        docs = prior.documents(text or "")
        if docs:
            out[qid] = docs
    return out
