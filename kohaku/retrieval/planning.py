"""Query planning: turn each question into search queries; query 0 is always the question itself.

planner.kind:
- ``none``:  the question only.
- ``rules``: acronyms mined from the corpus ("power usage effectiveness (PUE)" gives
  PUE <-> power usage effectiveness); a question that uses either form gets a query with the
  other form substituted, plus one keyword query (stop words removed).
- ``llm``:   the LLM writes up to ``n_queries - 1`` extra queries as JSON ``{"queries": [...]}``
  (schema-constrained), all questions in one batched call through the generation cache. The
  planner runs once per question; retry rounds reuse its queries (unlike KohakuRAG, which
  re-plans on every retry).

With ``focus`` (default) the question's answer-format instructions are left out of its queries
(kohaku/retrieval/focus.py): query 0 is the question's focus.

Queries are deduplicated case-insensitively (whitespace collapsed) and capped at ``n_queries``.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable

import polars as pl

from kohaku.core.config import ConfigError
from kohaku.llm.base import Backend, ChatRequest, Counters
from kohaku.llm.cache import GenerationCache, generate_cached
from kohaku.llm.prompts import PLANNER_FIELDS, check_template, render
from kohaku.retrieval.focus import question_focus
from kohaku.retrieval.lexicon import expansions
from kohaku.llm.json_text import first_json_object

log = logging.getLogger("kohaku.plan")

KINDS = ("none", "rules", "llm")

STOP_WORDS = frozenset("""
a about above according after again against all also am among an and any are as at be because been
before being below between both but by can could did do does doing down during each either few for
from further had has have having he her here hers him his how i if in into is it its itself just
many may me might more most much must my no nor not now of off on once one only or other our ours
out over own per please same shall she should so some such than that the their theirs them then
there these they this those through to too under until up upon us using very was we were what when
where which while who whom whose why will with within without would you your yours
give list name state tell provide describe explain identify find
""".split())


@dataclass
class PlannerConfig:
    kind: str = "none"                  # none | rules | llm
    n_queries: int = 1                  # total queries per question, the question included
    # rules
    min_acronym_count: int = 1          # corpus occurrences for an acronym definition to count
    keyword_query: bool = True          # add the question without stop words
    # llm
    llm: Any = None   # the llm config (conf/planner/llm.yaml: llm: ${llm})
    system: str = ""                # llm planner: system prompt (empty: none)
    user: str = ""                  # llm planner: user prompt template
    temperature: float = 0.0  # planner sampling (greedy by default: the same queries every run)
    top_p: float = 1.0              # nucleus sampling share (1: off)
    seed: int = 0                   # sampling seed (conf/planner/llm.yaml: the run's seed)
    max_tokens: int = 256  # room for the JSON list
    max_query_chars: int = 160          # maxLength of each query in the schema
    generation_cache: bool = True  # reuse planner outputs under <cache.dir>/llm/
    # one more query for a question that names what a document calls otherwise: the document's
    # names (kohaku/retrieval/lexicon.py: "cash flow statement" -> "statements of cash flows",
    # "capex" -> "purchases of property, plant and equipment"), source "lexicon", on top of
    # n_queries; a question naming none of the lexicon's words gets none. finance | none; off
    # unless the task asks for it (conf/planner/*.yaml: ${task.lexicon})
    lexicon: str = "none"
    # the question's focus as its queries: its answer-format instructions ("If there is no
    # mention, return False", "Answer in USD millions") left out of query 0 and of the
    # planner's input (kohaku/retrieval/focus.py); the lexicon query still reads them
    focus: bool = True

    def validate(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"planner.kind={self.kind!r}; choose one of {', '.join(KINDS)}")
        if self.n_queries < 1:
            raise ConfigError("planner.n_queries must be >= 1 (query 0 is the question)")
        from kohaku.retrieval.lexicon import LEXICONS

        if self.lexicon not in LEXICONS:
            raise ConfigError(f"planner.lexicon={self.lexicon!r}; choose one of {', '.join(LEXICONS)}")
        if self.kind == "llm":
            if not self.llm:
                raise ConfigError("planner.kind=llm needs planner.llm (conf/planner/llm.yaml sets llm: ${llm})")
            if not self.user:
                raise ConfigError("planner.kind=llm needs the prompt planner.user")
            check_template(self.system, PLANNER_FIELDS, "planner.system")
            check_template(self.user, PLANNER_FIELDS, "planner.user")


def norm_query(q: str) -> str:
    return re.sub(r"\s+", " ", q or "").strip()


_CONTENT = re.compile(r"[^\W_]{2,}")


def dedup_queries(queries: Iterable[str], limit: int) -> list[str]:
    """First occurrences, case-insensitive, at most ``limit``; queries without a word of two
    letters or digits ("", "...") are dropped."""
    out, seen = [], set()
    for q in queries:
        q = norm_query(q)
        key = q.lower()
        if _CONTENT.search(q) and key not in seen:
            seen.add(key)
            out.append(q)
        if len(out) >= limit:
            break
    return out


# -- rules --------------------------------------------------------------------------------

_PAREN = re.compile(r"\(\s*([A-Za-z][A-Za-z0-9&\-]{1,11}?)(s?)\s*\)")
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9\-']*")


def _initials_match(acronym: str, words: list[str]) -> bool:
    """Schwartz-Hearst style check: the acronym's letters appear in order in ``words``, the first
    letter starting the first word, and every word but stop words contributes."""
    letters = [c.lower() for c in acronym if c.isalnum()]
    text = " ".join(words).lower()
    if not letters or not text or text[0] != letters[0]:
        return False
    i = len(text) - 1
    for c in reversed(letters):
        while i >= 0 and text[i] != c:
            i -= 1
        if i < 0:
            return False
        i -= 1
    # each content word should contribute its first letter
    firsts = [w[0].lower() for w in words if w.lower() not in STOP_WORDS]
    return all(f in letters for f in firsts)


def find_acronym_definitions(text: str) -> list[tuple[str, str]]:
    """(acronym, expansion) pairs defined as "long form (ACR)" in ``text``."""
    out = []
    for m in _PAREN.finditer(text):
        acr = m.group(1)
        if sum(c.isupper() for c in acr) < 2 or acr.lower() in STOP_WORDS:
            continue
        before = _WORD.findall(text[max(0, m.start() - 200):m.start()])
        n_letters = sum(c.isalnum() for c in acr)
        best = None
        for size in range(1, min(len(before), n_letters + 3) + 1):
            words = before[-size:]
            if words[0].lower() in STOP_WORDS:
                continue
            if _initials_match(acr, words):
                best = words
                break
        if best:
            out.append((acr, " ".join(best)))
    return out


def mine_acronyms(texts: Iterable[str], min_count: int = 1) -> dict[str, str]:
    """acronym -> most frequent expansion (ties: first seen) over the corpus."""
    counts: Counter[tuple[str, str]] = Counter()
    first: dict[tuple[str, str], int] = {}
    for text in texts:
        for acr, exp in find_acronym_definitions(text or ""):
            key = (acr, exp.lower())
            counts[key] += 1
            first.setdefault(key, len(first))
    best: dict[str, tuple[int, int, str]] = {}
    for (acr, exp), n in counts.items():
        if n < min_count:
            continue
        rank = (n, -first[(acr, exp)])
        if acr not in best or rank > best[acr][:2]:
            best[acr] = (*rank, exp)
    return {acr: v[2] for acr, v in best.items()}


def acronym_query(question: str, acronyms: dict[str, str]) -> str | None:
    """The question with each known acronym expanded and each known expansion abbreviated."""
    q = question
    changed = False
    for acr, exp in sorted(acronyms.items(), key=lambda kv: -len(kv[1])):
        pat_exp = re.compile(r"\b" + re.escape(exp) + r"\b", re.IGNORECASE)
        if pat_exp.search(q):
            q = pat_exp.sub(acr, q)
            changed = True
            continue
        pat_acr = re.compile(r"\b" + re.escape(acr) + r"(s?)\b")
        if pat_acr.search(q):
            q = pat_acr.sub(lambda m: exp + m.group(1), q)
            changed = True
    return q if changed else None


def keyword_query(question: str) -> str:
    words = _WORD.findall(question)
    return " ".join(w for w in words if w.lower() not in STOP_WORDS)


def rules_queries(question: str, acronyms: dict[str, str], cfg: PlannerConfig) -> list[tuple[str, str]]:
    out = [(question, "question")]
    aq = acronym_query(question, acronyms)
    if aq:
        out.append((aq, "acronym"))
    if cfg.keyword_query:
        out.append((keyword_query(question), "keywords"))
    return out


# -- llm ----------------------------------------------------------------------------------

def planner_schema(cfg: PlannerConfig) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"queries": {"type": "array",
                                   "items": {"type": "string", "maxLength": cfg.max_query_chars},
                                   "maxItems": max(cfg.n_queries - 1, 0)}},
        "required": ["queries"],
        "additionalProperties": False,
    }


def parse_queries(raw: str) -> list[str]:
    obj = first_json_object(raw)
    qs = obj.get("queries") if obj else None
    if not isinstance(qs, list):
        return []
    return [str(q) for q in qs if isinstance(q, (str, int, float))]


def llm_queries(questions: list[str], backend: Backend, cfg: PlannerConfig,
                cache: GenerationCache | None, counters: Counters) -> tuple[list[list[str]], int]:
    """Extra queries per question (one batched call) and the number of unparsable outputs."""
    extra = max(cfg.n_queries - 1, 0)
    reqs = []
    for q in questions:
        values = {"question": q, "n_extra": extra}
        msgs = []
        if cfg.system:
            msgs.append({"role": "system", "content": render(cfg.system, **values)})
        msgs.append({"role": "user", "content": render(cfg.user, **values)})
        reqs.append(ChatRequest(messages=msgs, n=1, temperature=cfg.temperature, top_p=cfg.top_p,
                                max_tokens=cfg.max_tokens, seed=cfg.seed, json_schema=planner_schema(cfg)))
    samples = generate_cached(backend, reqs, cache, counters)
    out, invalid = [], 0
    for ss in samples:
        qs = parse_queries(ss[0].text)
        invalid += not qs and "queries" not in ss[0].text
        out.append(qs)
    return out, invalid


# -- the queries table ----------------------------------------------------------------------------

QUERIES_SCHEMA = {"qid": pl.String, "query_idx": pl.Int64, "query": pl.String, "source": pl.String}


def plan_queries(questions: pl.DataFrame, cfg: PlannerConfig, nodes: pl.DataFrame | None = None,
                 backend: Backend | None = None, cache: GenerationCache | None = None
                 ) -> tuple[pl.DataFrame, dict[str, Any]]:
    """The queries table and summary figures."""
    qids = questions["qid"].to_list()
    full = [norm_query(q) for q in questions["question"].to_list()]
    texts = [question_focus(q).focus for q in full] if cfg.focus else full
    summary: dict[str, Any] = {"kind": cfg.kind}
    per_q: list[list[tuple[str, str]]]
    if cfg.kind == "none" or cfg.n_queries == 1:
        per_q = [[(q, "question")] for q in texts]
    elif cfg.kind == "rules":
        if nodes is None:
            raise ConfigError("planner.kind=rules needs the tree stage's nodes table")
        src = nodes
        if "kind" in nodes.columns and (nodes["kind"] == "paragraph").any():
            src = nodes.filter(pl.col("kind") == "paragraph")
        acronyms = mine_acronyms(src["text"].to_list(), cfg.min_acronym_count)
        summary["acronyms"] = len(acronyms)
        per_q = [rules_queries(q, acronyms, cfg) for q in texts]
    else:
        if backend is None:
            raise ConfigError("planner.kind=llm needs a backend")
        counters = Counters()
        extras, invalid = llm_queries(texts, backend, cfg, cache, counters)
        summary.update(counters.as_dict())
        summary["invalid"] = invalid
        per_q = [[(q, "question")] + [(e, "llm") for e in ex] for q, ex in zip(texts, extras)]
    rows = []
    for qid, whole, cands in zip(qids, full, per_q):
        kept = dedup_queries([c[0] for c in cands], cfg.n_queries)
        source = {}
        for text, src_name in cands:
            source.setdefault(norm_query(text).lower(), src_name)
        for i, q in enumerate(kept):
            rows.append({"qid": qid, "query_idx": i, "query": q,
                         "source": "question" if i == 0 else source[q.lower()]})
        names = expansions(whole, cfg.lexicon) if kept else []
        if names:
            rows.append({"qid": qid, "query_idx": len(kept), "query": f"{kept[0]} {'; '.join(names)}",
                         "source": "lexicon"})
    table = pl.DataFrame(rows, schema=QUERIES_SCHEMA)
    summary["queries"] = table.height
    summary["queries_per_question"] = round(table.height / max(len(qids), 1), 3)
    return table, summary
