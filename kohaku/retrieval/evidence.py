"""Question-aware evidence scoring: rescore the top of a question's ranking by what the answer
sentence usually looks like.

WattBot answers are mostly a number in the unit the question names (``answer_unit``), a name or
a short list, and the evidence is usually one sentence (often a flattened table row) holding
it. Dense and BM25 scores see the topic; they do not see that a sentence holds *a number in the
asked unit*, or the model name the question asks about. This module adds those signals.

For each (question, attempt) the first ``pool`` nodes of the fused ranking are rescored:

    score = rank_weight * 1 / (1 + rank / rank_scale)          (the fused order as a prior)
          + dense_weight * cosine(question, node)              (query 0's vector)
          + term_weight  * idf share of the question's terms in the node
          + context_weight * the same over the node's paragraph, its section title and, for a
                             table row, its table's title and column header (kohaku.ingest.tree.rows)
          + entity_weight  * share of the question's distinctive tokens (GPT-4, H100, 2023,
                             'quoted titles') in the node or its paragraph
          + unit_weight    * [the node holds a number followed by the asked unit or a synonym]
          + number_weight  * [the node holds a number]   (numeric answer units only)
          + doc_weight     * [the node's document is named by the question: title words,
                             "<Author> et al."]
          + heading_weight * idf share of the question's terms in the node's section title
          + count_weight   * [a number followed by the noun the question counts, or a table
                             row labelled with it: "How many patents" -> "1,247 patents"]
          + page_weight    * the support of the node's page (the other pooled nodes on it)

The question's terms found only in its answer-format instructions, and the words naming the
documents its search was restricted to, count ``instruction_weight`` and ``named_weight`` of
their idf (kohaku/retrieval/focus.py, :func:`term_factors`).

and the pool is re-sorted by it (ties by the old rank); nodes past the pool keep their order
after it. Everything is computed from the node texts, the question and its answer unit: no
model. The rules are exposed one by one (:func:`unit_aliases`, :func:`has_unit_number`,
:func:`question_entities`, :class:`EvidenceScorer`) so each is tested on its own.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import polars as pl

from kohaku.ingest.tree.rows import is_row
from kohaku.retrieval.focus import question_focus
from kohaku.retrieval.planning import STOP_WORDS
from kohaku.retrieval.lexicon import LEXICONS, expansions

if TYPE_CHECKING:
    from kohaku.ingest.tree.model import TreeView

BLANK_UNITS = frozenset({"", "is_blank", "none", "n/a", "na"})
LEXICON_DOCS = 3  # the lexicon feature scores nodes of the ranking's first documents only


@dataclass
class EvidenceConfig:
    """The ``retrieve.evidence`` keys: rescoring of each question's top ``pool`` ranked nodes
    (kohaku/retrieval/evidence.py); ``pool: 0`` turns it off."""

    # ranked nodes rescored per (question, attempt); 0 = off. Defaults: tuned on the WattBot
    # train questions and public split (scripts/eval_retrieval.py --compare, docs/measured/history.md)
    pool: int = 200
    rank_weight: float = 0.25  # the fused order as a prior: 1 / (1 + rank / rank_scale)
    rank_scale: float = 10.0        # rank at which the rank prior halves
    dense_weight: float = 1.0  # cosine of the question (query 0) and the node
    term_weight: float = 3.0  # idf-weighted share of the question's terms in the node
    context_weight: float = 1.0  # the same over the node's paragraph (and section title)
    window_weight: float = 0.0  # the same over the node and the leaves next to it
    entity_weight: float = 0.25  # distinctive question tokens (model names, years, quotes)
    unit_weight: float = 0.25  # a number followed by the asked unit (or a synonym)
    number_weight: float = 0.5  # any number, when the answer unit is numeric
    doc_weight: float = 1.0  # the node's document is named by the question
    # the document's own names of what the question asks for (kohaku/retrieval/lexicon.py:
    # "cash flow statement" -> "statements of cash flows", "capex" -> "purchases of property,
    # plant and equipment"): idf share of their words in the node or its context, per entry
    lexicon: str = "none"  # finance | none; off unless the task asks for it (${task.lexicon})
    lexicon_weight: float = 2.0     # weight of the lexicon names' share
    # a pooled paragraph or section is replaced by its leaves (ranked at its place), so the
    # context gets its best sentences with their neighbours rather than the whole node
    leaves: bool = False
    # also pool the leaves of the ranking's first ``doc_leaves`` documents that hold at least
    # ``doc_leaf_share`` of the question's terms (idf-weighted; a table row counts its
    # paragraph's terms): rows and sentences no search returned; 0 = off
    doc_leaves: int = 3
    doc_leaf_share: float = 0.3     # share of the question's terms a document needs (doc_leaves)
    # counts in prose: a number followed by the thing the question counts ("How many patents"
    # -> "1,247 patents", "number of employees" -> "about 350 employees"; count_aliases)
    count_weight: float = 1.0
    # the question's focus (kohaku/retrieval/focus.py): the terms that occur only in its
    # answer-format instructions ("If there is no mention, return False", "Answer in USD
    # millions") count this much of their idf (0: left out; 1: as the others)
    instruction_weight: float = 0.0
    # ... and the words that name the documents the search is restricted to (the company of a
    # filing, by retrieve.doc_prior or retrieve.restrict_column) this much, in the terms and
    # as distinctive tokens: they pick the report, not the page (1: as the others)
    named_weight: float = 0.0
    # a heading prior within the document: the idf share of the question's terms in the title
    # of the node's own section ("Acquisitions", "Employees", "Legal proceedings"), as the
    # document prior matches names across documents; 0 = off (the context feature counts the
    # title among the paragraph's terms)
    heading_weight: float = 1.0
    # pages as units: each pooled node gains page_weight * its page's support, the sum of
    # 1 / (page_k + rank) over the *other* pooled nodes of its page ranked by the score above
    # (a page discussing the asked topic in several passages before a page naming it once);
    # 0 = off (the default: 1 gained WattBot two questions but cost FinanceBench two)
    page_weight: float = 0.0
    page_k: float = 6.0  # the rank constant of the page support's votes
    # keep the nodes ranked past the pool after it (false: the context is filled from the
    # rescored pool alone, which is faster and, with pool 300, as good on WattBot)
    keep_tail: bool = False

    def validate(self) -> None:
        if self.lexicon not in LEXICONS:
            raise ValueError(f"evidence.lexicon={self.lexicon!r}: use one of {', '.join(LEXICONS)}")
        if self.pool < 0:
            raise ValueError(f"evidence.pool={self.pool}: use 0 (off) or a number of ranked nodes")
        if self.rank_scale <= 0:
            raise ValueError(f"evidence.rank_scale={self.rank_scale}: must be > 0")
        if not (0.0 <= self.instruction_weight <= 1.0 and 0.0 <= self.named_weight <= 1.0):
            raise ValueError(f"evidence.instruction_weight={self.instruction_weight} and "
                             f"named_weight={self.named_weight}: use a factor in [0, 1]")

    @property
    def enabled(self) -> bool:
        return self.pool > 0


# ------------------------------------------------------------------------------------ text

_WORD = re.compile(r"[a-z0-9]+(?:[.\-/][a-z0-9]+)*")
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\w.]*\])")


def fold(text: str) -> str:
    """NFKC-folded lowercase text: PDF math italics (𝐶𝑂2𝑒𝑞), ligatures and full-width forms
    become plain letters, so 'CO2eq' matches them."""
    return unicodedata.normalize("NFKC", text or "").lower()


@lru_cache(maxsize=1)
def _stemmer():
    try:
        import Stemmer
    except ImportError:  # plain lowercase words, plural s stripped
        return None
    return Stemmer.Stemmer("english")


@lru_cache(maxsize=200_000)
def stem(word: str) -> str:
    """English (Porter-style, PyStemmer) stem of a folded word; without PyStemmer a plural
    ``s`` is stripped."""
    stemmer = _stemmer()
    if stemmer is None:
        return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word
    return stemmer.stemWord(word)


def words(text: str) -> list[str]:
    """Folded word tokens; hyphenated and dotted names stay whole (gpt-4, pm2.5) and their
    parts are added (gpt, 4)."""
    out = []
    for w in _WORD.findall(fold(text)):
        out.append(w)
        if "." in w or "-" in w or "/" in w:
            out.extend(p for p in re.split(r"[.\-/]", w) if p)
    return out


def terms(text: str) -> set[str]:
    """Stemmed content terms (stop words and single characters dropped)."""
    return terms_of_words(words(text))


def terms_of_words(ws: Iterable[str]) -> set[str]:
    return {stem(w) for w in ws if len(w) > 1 and w not in STOP_WORDS}


# ------------------------------------------------------------------------------------ units

# unit synonyms (folded): each group lists spellings of one unit; an answer unit that mentions
# any spelling of a group gets the whole group
_UNIT_GROUPS: tuple[tuple[str, ...], ...] = (
    ("%", "percent", "percentage", "per cent", "pct"),
    ("$", "usd", "us$", "dollar", "dollars"),
    ("€", "eur", "euro", "euros"),
    ("tco2e", "tco2", "tco2eq", "t co2e", "tons", "tonnes", "metric tons", "ton"),
    ("kgco2e", "kg co2e", "kg co2eq", "kgco2eq", "kg", "kilograms"),
    ("gco2e", "g co2e", "gco2eq", "gco2", "grams"),
    ("lbs", "lb", "pounds"),
    ("mwh", "megawatt-hours", "megawatt hours", "megawatt-hour"),
    ("kwh", "kilowatt-hours", "kilowatt hours", "kilowatt-hour"),
    ("gwh", "gigawatt-hours", "gigawatt hours"),
    ("twh", "terawatt-hours", "terawatt hours"),
    ("wh", "watt-hours", "watt hours"),
    ("mw", "megawatts", "megawatt"),
    ("kw", "kilowatts", "kilowatt"),
    ("gw", "gigawatts", "gigawatt"),
    ("w", "watts", "watt"),
    ("liters", "litres", "liter", "litre", "l"),
    ("ml", "milliliters", "millilitres"),
    ("gallons", "gallon", "gal"),
    ("cubic meters", "m3", "m³"),
    ("hours", "hour", "hrs", "hr", "h", "gpu hours", "gpu-hours"),
    ("days", "day"),
    ("years", "year", "yrs"),
    ("minutes", "minute", "min", "mins"),
    ("seconds", "second", "sec", "s", "ms"),
    ("multiplier", "x", "×", "times", "fold", "-fold"),
    ("ratio", "x", "×", "times", "fold"),
    ("parameters", "params", "parameter", "b", "billion", "m", "million"),
    ("flops", "flop", "tflops", "pflops", "petaflops", "teraflops"),
    ("gb", "gigabytes", "gib"),
    ("tb", "terabytes", "tib"),
    ("tokens", "token"),
    ("gpus", "gpu"),
)
# units whose answers are counts of things: the number is followed by the thing's name
_UNIT_SPLIT = re.compile(r"[\s/]+|\bper\b")


def unit_aliases(answer_unit: str | None) -> frozenset[str]:
    """Folded spellings that may follow (or, for currency, precede) the answer's number."""
    unit = fold(answer_unit or "").strip()
    if unit in BLANK_UNITS:
        return frozenset()
    out = {unit}
    parts = [p for p in _UNIT_SPLIT.split(unit) if p]
    if parts:
        out.add(parts[0])  # "kg/gpu" -> "kg"; "usd per hour" -> "usd"; "data centers" -> "data"
        if len(parts[0]) > 3 and parts[0].endswith("s"):
            out.add(parts[0][:-1])
    for group in _UNIT_GROUPS:
        if unit in group or (parts and parts[0] in group):
            out.update(group)
    return frozenset(a for a in out if a)


def numbers(text: str) -> list[re.Match]:
    """Number mentions in folded text (1,234.5, 42, -3); citation markers like [12] left out."""
    return list(_NUMBER.finditer(fold(text)))


NUMBER_MARK = "#"  # in unit_followers' result when the text holds a number at all


def unit_followers(text: str, window: int = 2) -> frozenset[str]:
    """What follows (or, for currency, precedes) each number of ``text``: the next one or two
    words (skipping one word: "24 data centers" gives "data", "centers", "data centers"),
    and the symbols around it ("45%" gives "%", "$4.63" gives "$")."""
    t = fold(text)
    out: set[str] = set()
    for m in _NUMBER.finditer(t):
        out.add(NUMBER_MARK)
        after = t[m.end(): m.end() + 40]
        stripped = after.lstrip()
        if stripped[:1] and not stripped[0].isalnum() and not stripped[0].isspace():
            out.add(stripped[0])
            if stripped[:5] == "-fold":
                out.add("-fold")
        before = t[max(0, m.start() - 4): m.start()].rstrip()
        if before[-1:] and not before[-1].isalnum():
            out.add(before[-1])
        if before.endswith(("usd", "eur")):
            out.add(before[-3:])
        ws = re.findall(r"[a-z0-9²³µ]+(?:[-/][a-z0-9²³µ]+)*|[%$€×]", after)[: window + 1]
        for i, w in enumerate(ws):
            out.add(w)
            if i + 1 < len(ws):
                out.add(f"{w} {ws[i + 1]}")
        if ws:  # a glued unit: "4.3tco2e", "10x"
            out.add(ws[0])
    return frozenset(out)


def has_unit_number(text: str, aliases: frozenset[str], followers: frozenset[str] | None = None) -> bool:
    """True when a number in ``text`` is followed within two words by one of ``aliases``
    ("24 data centers", "4.3 tCO2e", "45%", "3×"), or preceded by a currency sign or code
    ("$4.63", "USD 5"). ``followers`` is :func:`unit_followers` of ``text`` when known."""
    if not aliases:
        return False
    follow = unit_followers(text) if followers is None else followers
    return not aliases.isdisjoint(follow)


# "how many <noun>", "number of <noun>", "count of <noun>", "<noun> count": the thing counted
_COUNT = re.compile(r"\bhow\s+many\s+((?:[a-z][a-z\-]*\s+){0,2}?[a-z][a-z\-]*)"
                    r"(?=\s+(?:did|does|do|has|have|had|is|are|was|were|will|would|can|could|in|at|"
                    r"of|on|for|does|by|across|worldwide|globally|were)\b|\s*[?,.;]|\s*$)"
                    r"|\b(?:number|count|total\s+number|headcount)\s+of\s+((?:[a-z][a-z\-]*\s+){0,2}?[a-z][a-z\-]*)"
                    r"(?=\s+(?:did|does|do|has|have|had|is|are|was|were|will|in|at|of|on|for|by|"
                    r"that|which|who|employed|held|granted)\b|\s*[?,.;]|\s*$)")


def count_aliases(question: str) -> frozenset[str]:
    """The thing a question counts ("How many patents does X hold?", "the number of full-time
    employees", "How many healthcare professionals ..."), as the words that may follow its number
    in prose ("1,247 patents", "about 48 healthcare professionals"): the noun phrase, its last
    word and their singular forms; empty when it counts nothing. A count in a sentence then
    scores (``count_weight``) as a table row's figure under its header does through the
    context terms."""
    out: set[str] = set()
    for m in _COUNT.finditer(fold(question)):
        phrase = (m.group(1) or m.group(2) or "").strip()
        ws = [w for w in phrase.split() if w not in STOP_WORDS]
        if not ws:
            continue
        for form in (" ".join(ws), ws[-1], ws[0]):
            out.add(form)
            if len(form) > 3 and form.endswith("s") and not form.endswith("ss"):
                out.add(form[:-1])
    return frozenset(out)


def labels(row_text: str, aliases: frozenset[str]) -> bool:
    """True when a table row's label (its text before the first number) names one of
    ``aliases`` as whole words ("Patents held | 1,247" for "patents")."""
    t = fold(row_text)
    m = _NUMBER.search(t)
    label = " ".join(re.findall(r"[a-z0-9²³µ]+(?:[-/][a-z0-9²³µ]+)*", t[: m.start()] if m else t))
    return any(contains_entity(label, a) for a in aliases)


def numeric_unit(answer_unit: str | None) -> bool:
    return fold(answer_unit or "").strip() not in BLANK_UNITS


# --------------------------------------------------------------------------------- entities

_QUOTED = re.compile(r"['\"‘’“”]([^'\"‘’“”]{4,80})['\"‘’“”]")
_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9.\-]*[A-Za-z0-9]|[A-Za-z0-9]")
_YEARS = re.compile(r"^(19|20)\d\d$")


def question_entities(question: str) -> list[str]:
    """Distinctive strings of a question, folded: quoted phrases, tokens mixing letters and
    digits or with capitals past the first letter (GPT-4, H100, FLM-101B, GSM8k, PM2.5, DEA),
    years, and other numbers of two or more digits."""
    out: list[str] = []
    for m in _QUOTED.finditer(question):
        out.append(fold(m.group(1)).strip())
    for i, tok in enumerate(_TOKEN.findall(question)):
        has_digit = any(c.isdigit() for c in tok)
        has_alpha = any(c.isalpha() for c in tok)
        inner_caps = sum(c.isupper() for c in tok[1:]) > 0
        if (has_digit and has_alpha) or (has_alpha and inner_caps and len(tok) > 1) \
                or _YEARS.match(tok) or (tok.isdigit() and len(tok) >= 2):
            t = fold(tok)
            if t not in STOP_WORDS and t not in out:
                out.append(t)
    return out


def contains_entity(text_folded: str, entity: str) -> bool:
    return re.search(rf"(?<![a-z0-9]){re.escape(entity)}(?![a-z0-9])", text_folded) is not None


# ------------------------------------------------------------------------------- documents

def doc_mentions(question: str, doc_titles: Mapping[str, str]) -> set[str]:
    """Documents a question names: most of a title's content terms (at least 3), a quoted
    phrase inside the title, or the first author's surname (the doc id's letters, e.g.
    ``chen`` of ``chen2024``) next to "et al."."""
    q = fold(question)
    qterms = terms(question)
    quoted = [fold(m.group(1)).strip() for m in _QUOTED.finditer(question)]
    out = set()
    for doc, title in doc_titles.items():
        tterms = terms(title)
        if len(tterms) >= 3 and len(tterms & qterms) >= max(3, math.ceil(0.6 * len(tterms))):
            out.add(doc)
            continue
        ft = fold(title)
        if any(len(p) >= 8 and p in ft for p in quoted):
            out.add(doc)
            continue
        author = re.match(r"[a-z]+", fold(doc))
        if author and len(author.group(0)) >= 3 and re.search(
                rf"\b{re.escape(author.group(0))}\s+(?:et\s+al|and\s+\w+|\(\d{{4}}\))", q):
            out.add(doc)
    return out


# ------------------------------------------------------------------------------------ focus

def term_factors(question: str, named: Iterable[str] = (), instruction_weight: float = 1.0,
                 named_weight: float = 1.0) -> dict[str, float]:
    """Stemmed question term -> the share of its idf it counts with (terms not in it count
    whole): the terms found only in the question's answer-format instructions
    (kohaku.retrieval.focus.question_focus) ``instruction_weight``, the words ``named`` (the
    entity of the documents the search is restricted to) ``named_weight``."""
    out: dict[str, float] = {}
    if instruction_weight != 1.0:
        focus = question_focus(question)
        if focus.instructions:
            out.update(dict.fromkeys(terms(question) - terms(focus.focus), instruction_weight))
    if named_weight != 1.0:
        for t in terms_of_words(words(" ".join(named))):
            out[t] = min(out.get(t, 1.0), named_weight)
    return out


def _weighted(weights: dict[str, float], factors: Mapping[str, float] | None) -> dict[str, float]:
    if not factors:
        return weights
    return {t: w * factors.get(t, 1.0) for t, w in weights.items() if factors.get(t, 1.0) > 0}


# ---------------------------------------------------------------------------------- scoring

class Postings:
    """An inverted index: key -> the rows whose key set holds it, as one CSR array pair, and
    boolean row masks per key for fast membership tests."""

    def __init__(self, sets: Iterable[Iterable[str]]) -> None:
        vocab: dict[str, int] = {}
        ids: list[int] = []
        counts: list[int] = []
        for keys in sets:
            before = len(ids)
            ids.extend(vocab.setdefault(k, len(vocab)) for k in keys)
            counts.append(len(ids) - before)
        self.n_rows = len(counts)
        key_ids = np.asarray(ids, np.int64)
        rows = np.repeat(np.arange(self.n_rows, dtype=np.int64), counts)
        order = np.argsort(key_ids, kind="stable")
        self.rows = rows[order]
        self.indptr = np.searchsorted(key_ids[order], np.arange(len(vocab) + 1))
        self.vocab = vocab

    def get(self, key: str) -> np.ndarray:
        i = self.vocab.get(key)
        if i is None:
            return self.rows[:0]
        return self.rows[self.indptr[i]: self.indptr[i + 1]]

    def mask(self, key: str) -> np.ndarray:
        """Boolean mask over rows, one longer than the rows: index -1 (no row) is False."""
        out = np.zeros(self.n_rows + 1, bool)
        out[self.get(key)] = True
        return out


class EvidenceScorer:
    """Question-independent parts of the features over a fixed tree, computed once: an inverted
    index of every node's stemmed terms (and words, for entities), section-title terms, each
    node's context row and neighbours, idf over the leaves. Per question, features of a pool
    are a few vectorised membership tests."""

    def __init__(self, texts: Sequence[str], doc_ids: Sequence[str], context_of: Sequence[int],
                 leaf_rows: Iterable[int], vectors: np.ndarray | None = None,
                 doc_titles: Mapping[str, str] | None = None,
                 sections: Sequence[str] | None = None,
                 leaves_of: Callable[[int], Sequence[int]] | None = None,
                 neighbours: Sequence[tuple[int, int]] | None = None,
                 row_terms: Sequence[frozenset[str]] | None = None,
                 header_terms: Sequence[frozenset[str]] | None = None,
                 pages: Sequence[int | None] | None = None,
                 rows: Sequence[bool] | None = None) -> None:
        n = len(texts)
        # a leaf that is a table row (kohaku.ingest.tree.rows.is_row): its label counts
        self.is_row = np.asarray(rows if rows is not None else [False] * n, bool)
        self.texts = texts
        self.context_of = np.asarray(context_of, np.int64)  # row -> its context row (paragraph)
        self.leaves_of = leaves_of  # node row -> its leaf rows (itself for a leaf)
        # leaf row -> (previous, next) leaf of its section, -1 where none
        nb = np.asarray(neighbours if neighbours is not None else [(-1, -1)] * n, np.int64)
        self.prev, self.next = nb[:, 0], nb[:, 1]
        self.vectors = vectors
        self.doc_titles = dict(doc_titles or {})
        docs = sorted(set(doc_ids))
        self._doc_index = {d: i for i, d in enumerate(docs)}
        self.doc_idx = np.asarray([self._doc_index[d] for d in doc_ids], np.int64)
        # a node's page as one key over the corpus (document, page); -1 where it has none
        pg = np.asarray([-1 if p is None else int(p) for p in (pages if pages is not None else [None] * n)],
                        np.int64)
        self.page_key = np.where(pg >= 0, self.doc_idx * (int(pg.max(initial=0)) + 1) + pg, -1)
        if row_terms is None:
            row_terms = [frozenset(terms(t)) for t in texts]
        self.terms = Postings(row_terms)
        secs = sections or [""] * n
        sec_terms = {sec: terms(sec) for sec in set(secs)}
        self.section_terms = Postings(sec_terms[sec] for sec in secs)
        # a table row's title and column header (kohaku.ingest.tree.rows): part of its context
        self.header_terms = Postings(header_terms if header_terms is not None else [frozenset()] * n)
        df: Counter[str] = Counter()
        n_idf = 0
        leaf_rows = [int(r) for r in leaf_rows]  # idf is taken over the leaves
        for row in leaf_rows:
            df.update(row_terms[row])
            n_idf += 1
        self.n_idf = max(n_idf, 1)
        self.df = df
        self.is_leaf = np.zeros(n, bool)
        self.is_leaf[leaf_rows] = True
        self._followers: dict[int, frozenset[str]] = {}
        self._folded: dict[int, str] = {}

    @classmethod
    def from_view(cls, view: "TreeView", vectors: np.ndarray | None = None) -> "EvidenceScorer":
        """A scorer over a tree: a sentence's context is its parent paragraph, its neighbours
        the leaves before and after it in its section, idf is taken over the leaves, document
        titles are the document nodes' texts."""
        level = view.level.tolist()
        parent = view.parent.tolist()
        has_children = view.has_children.tolist()
        n = len(level)
        context_of = [parent[r] if not has_children[r] and parent[r] >= 0 and level[parent[r]] > 1
                      else r for r in range(n)]
        neighbours = [(-1, -1)] * n
        for seq in view.leaves.values():
            for i, r in enumerate(seq):
                neighbours[r] = (seq[i - 1] if i > 0 else -1, seq[i + 1] if i + 1 < len(seq) else -1)
        leaves = [r for r in range(n) if not has_children[r]]
        titles = {view.doc_id[r]: view.text[r] for r in range(n) if parent[r] < 0}
        # the terms of the leaves, read from their text once, and of their context rows (a
        # paragraph's text is its sentences joined, so its terms are theirs); sections and
        # documents get none (evidence.leaves replaces them by their leaves)
        row_terms: list[frozenset[str]] = [frozenset()] * n
        for r in leaves:
            row_terms[r] = frozenset(terms(view.text[r]))
        for c in sorted({c for c in context_of if has_children[c]}):
            row_terms[c] = frozenset().union(*(row_terms[k] for k in view.children[c].tolist()))
        header_terms = [frozenset(terms(prefix)) if prefix else frozenset() for prefix in view.row_prefixes]
        kinds = (view.nodes["block_kind"].cast(pl.String).fill_null("").to_list()
                 if "block_kind" in view.nodes.columns else [""] * n)
        rows = [not has_children[r] and is_row(view.text[r], kinds[r]) for r in range(n)]
        return cls(view.text, view.doc_id, context_of, leaves, vectors, titles, view.section,
                   view.leaves_of, neighbours, row_terms, header_terms, view.page, rows)

    def idf(self, term: str) -> float:
        df = self.df.get(term, 0)
        return math.log(1.0 + (self.n_idf - df + 0.5) / (df + 0.5))

    def followers(self, row: int) -> frozenset[str]:
        out = self._followers.get(row)
        if out is None:
            out = self._followers[row] = unit_followers(self.texts[row])
        return out

    def folded(self, row: int) -> str:
        out = self._folded.get(row)
        if out is None:
            out = self._folded[row] = fold(self.texts[row])
        return out

    def lead_docs(self, rows: Sequence[int], n_docs: int) -> list[int]:
        """The first ``n_docs`` distinct documents (indices) of ``rows``, in their order."""
        docs: list[int] = []
        for row in rows:
            d = int(self.doc_idx[row])
            if d not in docs:
                docs.append(d)
                if len(docs) == n_docs:
                    break
        return docs

    def doc_leaf_candidates(self, question: str, pool: Sequence[int], n_docs: int,
                            share: float, factors: Mapping[str, float] | None = None) -> list[int]:
        """Leaves of the first ``n_docs`` documents of ``pool`` (in pool order) that hold at
        least ``share`` of the question's terms by idf weight, not already in ``pool``."""
        docs = self.lead_docs(pool, n_docs)
        weights = _weighted({t: self.idf(t) for t in terms(question)}, factors)
        total = sum(weights.values())
        if not docs or total <= 0:
            return []
        score = np.zeros(len(self.doc_idx) + 1, np.float64)  # [-1]: no row
        own = np.zeros(len(self.doc_idx) + 1, bool)
        for t, w in weights.items():
            rows = self.terms.get(t)
            score[rows] += w
            own[rows] = True
        # a leaf's own terms, or (a table row, a clause) one of its own and its paragraph's
        ctx_score = np.maximum(score[:-1], np.where(own[:-1], score[self.context_of], 0.0))
        keep = self.is_leaf & (ctx_score >= share * total) & np.isin(self.doc_idx, docs)
        have = set(pool)
        return [int(r) for r in np.flatnonzero(keep) if int(r) not in have]

    def features(self, question: str, answer_unit: str | None, rows: Sequence[int],
                 qvec: np.ndarray | None = None, lexicon: str = "none",
                 factors: Mapping[str, float] | None = None, counts: bool = True
                 ) -> dict[str, np.ndarray]:
        """Feature arrays (one value per row in ``rows``): dense, term, context, window, entity,
        unit, number, doc (see the module docstring). ``factors`` (:func:`term_factors`) weight
        question terms down, in the term features and the distinctive tokens; ``counts``: the count
        feature (:func:`count_aliases`) is computed."""
        r = np.asarray(rows, np.int64)
        n = len(r)
        f = {k: np.zeros(n, np.float64) for k in
             ("dense", "term", "context", "window", "entity", "unit", "number", "doc", "lexicon",
              "heading", "count")}
        if not n:
            return f
        ctx, prev, nxt = self.context_of[r], self.prev[r], self.next[r]
        weights = _weighted({t: self.idf(t) for t in terms(question)}, factors)
        total = sum(weights.values()) or 1.0
        for t, w in weights.items():
            m = self.terms.mask(t)
            own = m[r]
            f["term"] += w * own
            f["context"] += w * (m[ctx] | self.section_terms.mask(t)[r] | self.header_terms.mask(t)[r])
            f["window"] += w * (own | m[prev] | m[nxt])
            f["heading"] += w * self.section_terms.mask(t)[r]
        for k in ("term", "context", "window", "heading"):
            f[k] /= total
        names = expansions(question, lexicon)
        for text in names:   # each entry: the idf share of its words in the node or its context
            ws = {t: self.idf(t) for t in terms(text)}
            share = np.zeros(n, np.float64)
            for t, w in ws.items():
                m = self.terms.mask(t)
                share += w * (m[r] | m[ctx] | self.section_terms.mask(t)[r] | self.header_terms.mask(t)[r])
            f["lexicon"] += share / (sum(ws.values()) or 1.0)
        if names:
            f["lexicon"] /= len(names)
        ents = question_entities(question)
        if factors:  # a token of the instructions or the documents' name counts its factor
            scale = [min((factors.get(t, 1.0) for t in terms(e)), default=1.0) for e in ents]
        else:
            scale = [1.0] * len(ents)
        for e, x in zip(ents, scale):
            if x <= 0:
                continue
            if " " not in e:  # one word (words() keeps gpt-4.1 whole): the term index
                m = self.terms.mask(stem(e))
                hit = m[r] | m[ctx]
            else:  # a phrase: search the texts of the rows that hold all its words
                m = np.ones(len(self.doc_idx) + 1, bool)
                for t in terms_of_words(words(e)):
                    m &= self.terms.mask(t)
                hit = np.zeros(n, bool)
                for i in np.flatnonzero(m[r] | m[ctx]).tolist():
                    hit[i] = (contains_entity(self.folded(int(r[i])), e)
                              or (ctx[i] >= 0 and contains_entity(self.folded(int(ctx[i])), e)))
            f["entity"] += x * hit
        if sum(scale) > 0:
            f["entity"] /= sum(scale)
        aliases = unit_aliases(answer_unit)
        counted = count_aliases(question) if counts else frozenset()
        if numeric_unit(answer_unit) or counted:
            follow = [self.followers(int(a)) for a in r]
            f["number"] = np.fromiter((NUMBER_MARK in x for x in follow), np.float64, n)
            if aliases:
                f["unit"] = np.fromiter((has_unit_number(self.texts[int(a)], aliases, x)
                                         for a, x in zip(r, follow)), np.float64, n)
            if counted:  # "1,247 patents" in prose; a row labelled "Patents held | 1,247"
                f["count"] = np.fromiter(
                    (has_unit_number(self.texts[int(a)], counted, x)
                     or (bool(self.is_row[a]) and NUMBER_MARK in x and labels(self.texts[int(a)], counted))
                     for a, x in zip(r, follow)), np.float64, n)
        named = doc_mentions(question, self.doc_titles) if self.doc_titles else set()
        if named:
            f["doc"] = np.isin(self.doc_idx[r], [self._doc_index[d] for d in named if d in self._doc_index]
                               ).astype(np.float64)
        if qvec is not None and self.vectors is not None:
            f["dense"] = (self.vectors[r] @ np.asarray(qvec, np.float32)).astype(np.float64)
        return f

    def _pool(self, question: str, rows: Sequence[int], cfg: EvidenceConfig,
              factors: Mapping[str, float] | None = None) -> tuple[list[int], np.ndarray]:
        """The rows to rescore and the fused rank each inherits (doc leaves rank after the
        pool; a leaf standing in for its ancestor takes the ancestor's rank)."""
        pool = [int(r) for r in rows[: cfg.pool]]
        ranks = np.arange(len(pool), dtype=np.float64)
        if cfg.doc_leaves > 0 and pool:
            extra = self.doc_leaf_candidates(question, pool, cfg.doc_leaves, cfg.doc_leaf_share,
                                             factors)
            pool += extra
            ranks = np.r_[ranks, np.full(len(extra), float(len(ranks)))]
        if cfg.leaves and self.leaves_of is not None:
            best: dict[int, float] = {}
            for rank, row in zip(ranks.tolist(), pool):
                for leaf in self.leaves_of(row):
                    if leaf not in best:
                        best[leaf] = rank
            pool = list(best)
            ranks = np.fromiter(best.values(), np.float64, len(best))
        return pool, ranks

    @staticmethod
    def _evidence(f: Mapping[str, np.ndarray], cfg: EvidenceConfig) -> np.ndarray:
        """The weighted sum of the features (everything but the rank prior)."""
        return (cfg.dense_weight * f["dense"] + cfg.term_weight * f["term"]
                + cfg.context_weight * f["context"] + cfg.window_weight * f["window"]
                + cfg.entity_weight * f["entity"] + cfg.unit_weight * f["unit"]
                + cfg.number_weight * f["number"] + cfg.doc_weight * f["doc"]
                + cfg.lexicon_weight * f["lexicon"] + cfg.heading_weight * f["heading"]
                + cfg.count_weight * f["count"])

    def rescore_many(self, question: str, answer_unit: str | None,
                     rankings: Mapping[Any, Sequence[int]], cfg: EvidenceConfig,
                     qvec: np.ndarray | None = None, named: Iterable[str] = ()) -> dict[Any, list[int]]:
        """:meth:`rescore` for several rankings of one question (its retry attempts): the
        features of every pooled row are computed once. ``named``: the words naming the
        documents the search was restricted to (weighted by ``cfg.named_weight``)."""
        factors = term_factors(question, named, cfg.instruction_weight, cfg.named_weight)
        pools = {k: self._pool(question, rows, cfg, factors) for k, rows in rankings.items()}
        union = sorted({r for pool, _ in pools.values() for r in pool})
        where = {r: i for i, r in enumerate(union)}
        f = self.features(question, answer_unit, union, qvec, cfg.lexicon, factors,
                          cfg.count_weight != 0)
        if f["lexicon"].any():
            # the document's names count in the documents the ranking leads with (its first
            # LEXICON_DOCS): in a store of many companies' filings, every statement of cash
            # flows is one; the question's company's is the one wanted
            lead = self.lead_docs(next(iter(rankings.values()), []), LEXICON_DOCS)
            f["lexicon"] *= np.isin(self.doc_idx[np.asarray(union, np.int64)], lead)
        evidence = self._evidence(f, cfg)
        out = {}
        for k, rows in rankings.items():
            pool, ranks = pools[k]
            if not pool:
                out[k] = list(rows)
                continue
            score = (cfg.rank_weight / (1.0 + ranks / cfg.rank_scale)
                     + evidence[[where[r] for r in pool]])
            if cfg.page_weight:
                score = score + cfg.page_weight * self.page_support(pool, score, cfg.page_k)
            order = np.lexsort((ranks, -score))
            head = [pool[i] for i in order]
            if cfg.keep_tail:
                seen = set(head)
                head += [int(r) for r in rows[cfg.pool:] if int(r) not in seen]
            out[k] = head
        return out

    def page_support(self, pool: Sequence[int], score: np.ndarray, k: float) -> np.ndarray:
        """Per pooled node: the sum of 1 / (k + rank) over the other pooled nodes of its page,
        ranked by ``score`` (0 for a node without a page)."""
        keys = self.page_key[np.asarray(pool, np.int64)]
        rank = np.empty(len(pool), np.float64)
        rank[np.argsort(-score, kind="stable")] = np.arange(len(pool))
        vote = 1.0 / (k + rank)
        has = keys >= 0
        if not has.any():
            return np.zeros(len(pool))
        uniq, inv = np.unique(keys[has], return_inverse=True)
        total = np.bincount(inv, weights=vote[has], minlength=len(uniq))
        out = np.zeros(len(pool))
        out[has] = total[inv] - vote[has]
        return out

    def rescore(self, question: str, answer_unit: str | None, rows: Sequence[int],
                cfg: EvidenceConfig, qvec: np.ndarray | None = None) -> list[int]:
        """``rows`` (a ranking, best first) with its first ``cfg.pool`` re-sorted by the
        evidence score; the rest keep their order after them (``cfg.keep_tail``; else they are
        dropped). With ``cfg.leaves`` a pooled
        paragraph or section is replaced by its leaves, each ranked at its ancestor's place
        (so the budget goes to its best sentences, not the whole node)."""
        return self.rescore_many(question, answer_unit, {0: rows}, cfg, qvec)[0]
