"""Multi-query retrieval: dense (+BM25) search, consensus rerank, contexts per attempt.

For every question, each of its plan queries searches every searchable level for
``top_k * (a + 1)`` hits (attempt a). The full, not yet deduplicated hit list of all queries is
reranked (kohaku.retrieval.rerank), optionally fused with BM25 by weighted RRF, deduplicated,
then expanded into a context (kohaku.retrieval.context) cut at ``max_context_tokens`` (times
a + 1 with ``grow_budget``). The answering step uses attempt a for its retry round a.

Tables: ``hits`` (qid, attempt, query_idx, node_id, rank, score, level, source), ``ranking``
(qid, attempt, node_id, rank, value, freq, score_sum) and ``contexts`` (:data:`CONTEXTS_SCHEMA`).
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import polars as pl
from tqdm.auto import tqdm

from kohaku.core.config import ConfigError
from kohaku.core.errors import KohakuError
from kohaku.retrieval.embedding import Encoder, encode_texts
from kohaku.retrieval.context import ContextBuilder, RenderConfig
from kohaku.retrieval.docprior import DocPrior, DocPriorConfig, question_priors
from kohaku.retrieval.evidence import EvidenceConfig, EvidenceScorer
from kohaku.retrieval.rerankers import Reranker, RerankerConfig, rerank_rows
from kohaku.retrieval.rerank import STRATEGIES, consensus, fuse
from kohaku.retrieval.gold import parse_doc_list
from kohaku.retrieval.pages import MODES as PAGE_MODES, pages_first
from kohaku.ingest.tree.rows import is_row
from kohaku.retrieval.search import ExactSearcher, load_searchers, read_meta
from kohaku.ingest.tree.model import TreeView

log = logging.getLogger("kohaku.retrieve")


# The contexts table: ``context`` is ``separator.join(blocks)``, blocks in rank order, and
# ``block_doc_ids[i]`` the document of ``blocks[i]``, so the answering step trims and cites from
# data instead of re-parsing the rendered string.
CONTEXTS_SCHEMA = {
    "qid": pl.String, "attempt": pl.Int64, "k": pl.Int64, "context": pl.String,
    "doc_ids": pl.List(pl.String), "node_ids": pl.List(pl.String), "n_tokens": pl.Int64,
    "budget": pl.Int64, "n_blocks": pl.Int64, "blocks": pl.List(pl.String),
    "block_doc_ids": pl.List(pl.String), "separator": pl.String,
}


@dataclass
class RetrieveConfig(RenderConfig):
    """The ``retrieve`` config group (see conf/retrieve/default.yaml); the context rendering
    keys (expand, window, heading, block_format, heading_format, separator) come from
    RenderConfig."""

    # hits per query and searchable level at attempt 0; attempt a uses top_k*(a+1) (64: the
    # evidence rescoring's pool needs depth; KohakuRAG used 8-16 without it)
    top_k: int = 64
    levels: list[int] | None = None  # levels to search; null = every level the index holds
    # contexts precomputed for attempts 0..attempts-1 (infer retry round a uses attempt a)
    attempts: int = 3
    # over all queries' hits before dedup: frequency | score | combined | rrf | none
    rerank: str = "combined"
    freq_weight: float = 0.4  # combined = freq_weight*freq/max_freq + (1-freq_weight)*sum/max_sum
    rrf_k: int = 60  # reciprocal-rank constant (rrf rerank and BM25 fusion)
    # weight of the BM25 list in the RRF fusion (1 = equal to dense); 0 = dense only
    bm25_weight: float = 1.0
    bm25_top_k: int | None = None  # BM25 hits per query and level at attempt 0; null = top_k
    # levels whose BM25 index is searched (sentences: best on WattBot); null = all indexed
    bm25_levels: list[int] | None = field(default_factory=lambda: [3])
    # keep at most max_hits*(a+1) ranked nodes; null = until the budget is full
    max_hits: int | None = None
    ef: int | None = None  # hnsw search breadth; null = the index's ef
    max_context_tokens: int = 2000  # context budget (kohaku.core.tokens) at attempt 0
    grow_budget: bool = True  # attempt a gets max_context_tokens*(a+1)
    # question-aware rescoring of the top of the ranking (unit, number, terms, entities,
    # named documents; kohaku/retrieval/evidence.py); evidence.pool 0 = off
    evidence: EvidenceConfig = field(default_factory=EvidenceConfig)
    # search each question only within the documents its questions-table column names (a cell
    # may list several: ['a','b'] or a,b), e.g. doc_name for FinanceBench's single store;
    # null = every document (shared store)
    restrict_column: str | None = None
    # the documents the question names (its metadata: company, title, year, period, type):
    # each question that names one or a set searches only within them; a question naming none
    # is ranked as without it (kohaku/retrieval/docprior.py); ignored with restrict_column
    doc_prior: DocPriorConfig = field(default_factory=DocPriorConfig)
    # table pages first (kohaku/retrieval/pages.py): the context takes the best row of each
    # table page before a second row of any, the pages in the order of their vote, the sum of
    # 1/(page_k + rank) over their rows in the first page_pool ranked (vote), or of their best
    # row (rank); prose keeps its place; none keeps the ranking's order
    pages: str = "vote"
    # true: the words naming the documents a question's search is restricted to (its company:
    # the document prior's entity values, kohaku/retrieval/docprior.py) are left out of its
    # BM25 queries within them (they picked the report; in it they pick the cover). Off: it cost
    # FinanceBench's quotes two questions (docs/measured/history.md, issue 47)
    bm25_drop_named: bool = False
    page_k: float = 6.0             # the k of the pages' 1/(page_k + rank) vote
    page_pool: int = 200            # ranked nodes whose rows vote for pages

    def validate(self) -> None:
        if self.top_k < 1 or self.attempts < 1:
            raise ValueError("top_k and attempts must be >= 1")
        if self.rerank not in STRATEGIES:
            raise ValueError(f"rerank={self.rerank!r}: use one of {', '.join(STRATEGIES)}")
        if not 0.0 <= self.freq_weight <= 1.0:
            raise ValueError("freq_weight must lie in [0, 1]")
        if self.bm25_weight < 0:
            raise ValueError("bm25_weight must be >= 0 (0 turns BM25 off)")
        if self.max_context_tokens < 1:
            raise ValueError("max_context_tokens must be >= 1")
        if self.restrict_column is not None and not str(self.restrict_column).strip():
            raise ValueError("restrict_column must name a questions column, or be null")
        if self.pages not in PAGE_MODES:
            raise ValueError(f"pages={self.pages!r}: use one of {', '.join(PAGE_MODES)}")
        if self.page_k <= 0 or self.page_pool < 1:
            raise ValueError("page_k must be > 0 and page_pool >= 1")
        RenderConfig.validate(self)
        self.evidence.validate()
        self.doc_prior.validate()

    def render(self) -> RenderConfig:
        return RenderConfig(**{f.name: getattr(self, f.name) for f in fields(RenderConfig)})


def _hit_frame(qrows: np.ndarray, rows: np.ndarray, scores: np.ndarray, level: int, source: str):
    nq, k = rows.shape
    flat_rows = rows.reshape(-1)
    keep = flat_rows >= 0
    return pl.DataFrame(
        {
            "_q": np.repeat(qrows, k)[keep],
            "level": np.full(int(keep.sum()), level, np.int64),
            "node_row": flat_rows[keep],
            "rank": np.tile(np.arange(k, dtype=np.int64), nq)[keep],
            "score": scores.reshape(-1)[keep].astype(np.float32),
            "source": source,
        }
    )


class RestrictError(KohakuError, ValueError):
    """retrieve.restrict_column names a missing column, or a question names no document or one
    the corpus lacks; the message names the question id and the column."""


@dataclass
class Restriction:
    """The documents each question's retrieval may return (``retrieve.restrict_column``, or
    ``retrieve.doc_prior``).

    ``docs``: qid -> document ids (a question not in it searches every document); ``doc_ids``: the nodes' doc_id per node row; ``vectors``:
    the nodes' embeddings (row aligned) when loaded, else read back from the dense index."""

    docs: Mapping[str, tuple[str, ...]]
    doc_ids: pl.Series
    vectors: np.ndarray | None = None
    # qid -> words of its question naming its documents, left out of its BM25 queries
    drop: Mapping[str, set[str]] = field(default_factory=dict)


def question_documents(questions: pl.DataFrame | None, column: str,
                       corpus_docs: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """qid -> the documents named in ``column`` of the questions table (a cell: one id, ``a,b``
    or ``['a','b']``). Every question must name at least one document of ``corpus_docs``."""
    if questions is None:
        raise ConfigError("retrieve.restrict_column is set but the retrieve step got no questions "
                          "table")
    if column not in questions.columns:
        raise ConfigError(f"retrieve.restrict_column={column!r}: the questions table has no such "
                          f"column (columns: {questions.columns}); name a column of the questions "
                          "file or set retrieve.restrict_column=null")
    known = set(corpus_docs)
    out: dict[str, tuple[str, ...]] = {}
    for qid, cell in zip(questions["qid"].cast(pl.String), questions[column]):
        docs = tuple(dict.fromkeys(parse_doc_list(cell)))
        if not docs:
            raise RestrictError(f"question {qid!r}: column {column!r} (retrieve.restrict_column) "
                                "names no document; fill it or set retrieve.restrict_column=null")
        missing = [d for d in docs if d not in known]
        if missing:
            raise RestrictError(
                f"question {qid!r}: column {column!r} (retrieve.restrict_column) names document(s) "
                f"{missing} that are not in the corpus (tree); add them to the corpus or fix the "
                "question's row")
        out[qid] = docs
    return out


def _level_vectors(searcher: object, labels: np.ndarray, vectors: np.ndarray | None) -> np.ndarray:
    """The vectors of a level's ``labels``: from the embeddings, the exact searcher, or hnswlib."""
    if vectors is not None:
        return vectors[searcher.rows[labels]]
    if isinstance(searcher, ExactSearcher):
        return searcher.vectors[labels]
    return np.asarray(searcher.index.get_items(labels.tolist()), np.float32).reshape(len(labels), -1)


def _restricted_frames(queries: pl.DataFrame, qvecs: np.ndarray, dense: Mapping[int, object],
                       sparse: Mapping[int, object], k_dense: int, k_bm25: int, use_bm25: bool,
                       restrict: Restriction) -> tuple[list[pl.DataFrame], np.ndarray]:
    """Hits of queries whose questions share a document set, searched within those documents:
    exact inner product over the set's rows of each level (a document's rows are few; no hnsw
    graph walk that would have to skip the other documents) and BM25 over the same rows.
    Returns (frames, the rows of the queries whose question has no restriction)."""
    groups: dict[tuple[str, ...], list[int]] = {}
    rest: list[int] = []
    for i, qid in enumerate(queries["qid"].cast(pl.String)):
        if qid in restrict.docs:
            groups.setdefault(restrict.docs[qid], []).append(i)
        else:
            rest.append(i)
    texts = [_without(t, restrict.drop.get(q, ())) for t, q in
             zip(queries["query"].to_list(), queries["qid"].cast(pl.String))]
    frames = []
    for docs, members in groups.items():
        qrows = np.asarray(members, np.int64)
        mask = restrict.doc_ids.is_in(list(docs)).to_numpy()
        for level, searcher in dense.items():
            labels = np.flatnonzero(mask[searcher.rows])
            within = ExactSearcher(_level_vectors(searcher, labels, restrict.vectors),
                                   searcher.rows[labels])
            rows, scores = within.search(qvecs[qrows], k_dense)
            frames.append(_hit_frame(qrows, rows, scores, level, "dense"))
        if use_bm25:
            for level, searcher in sparse.items():
                labels = np.flatnonzero(mask[searcher.rows])
                rows, scores = searcher.search([texts[i] for i in members], k_bm25, within=labels)
                frames.append(_hit_frame(qrows, rows, scores, level, "bm25"))
    return frames, np.asarray(rest, np.int64)


def _without(text: str, drop: Sequence[str] | set[str]) -> str:
    """``text`` with the whole words in ``drop`` (lower-case; possessive 's with them) taken
    out."""
    if not drop:
        return text
    return re.sub(r"[A-Za-z0-9]+(?:['’]s\b)?",
                  lambda m: "" if re.sub(r"['’]s$", "", m.group(0)).lower() in drop else m.group(0),
                  text)


def search_hits(
    queries: pl.DataFrame,
    qvecs: np.ndarray,
    dense: Mapping[int, object],
    sparse: Mapping[int, object],
    k_dense: int,
    k_bm25: int,
    use_bm25: bool,
    restrict: Restriction | None = None,
) -> pl.DataFrame:
    """Raw hits of every query on every level: qid, query_idx, level, node_row, rank, score,
    source; with ``restrict``, each query's search runs within its question's documents."""
    qrows = np.arange(queries.height)
    frames = []
    if restrict is not None:
        frames, qrows = _restricted_frames(queries, qvecs, dense, sparse, k_dense, k_bm25,
                                           use_bm25, restrict)
    if qrows.size:  # every document (the questions without a restriction)
        whole = qrows.size == queries.height
        for level, searcher in dense.items():
            rows, scores = searcher.search(qvecs if whole else qvecs[qrows], k_dense)
            frames.append(_hit_frame(qrows, rows, scores, level, "dense"))
        if use_bm25:
            texts = queries["query"].to_list()
            texts = texts if whole else [texts[i] for i in qrows]
            for level, searcher in sparse.items():
                rows, scores = searcher.search(texts, k_bm25)
                frames.append(_hit_frame(qrows, rows, scores, level, "bm25"))
    hits = pl.concat(frames) if frames else _hit_frame(qrows, np.zeros((0, 0), np.int64),
                                                       np.zeros((0, 0), np.float32), 0, "dense")
    keys = queries.select(pl.col("qid").cast(pl.String), pl.col("query_idx").cast(pl.Int64)).with_row_index("_q")
    return hits.with_columns(pl.col("_q").cast(pl.UInt32)).join(keys, on="_q", how="left").drop("_q")


class _Clock:
    """Seconds per phase into ``out`` (``{phase}_seconds``), or nothing when ``out`` is None."""

    def __init__(self, out: dict[str, float] | None) -> None:
        self.out = out
        self.t = time.perf_counter()

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        if self.out is not None:
            self.out[f"{phase}_seconds"] = round(now - self.t, 3)
        self.t = now


def rank_nodes(hits: pl.DataFrame, cfg: RetrieveConfig) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per attempt a: the hits with rank < k_a, consensus-reranked (and BM25-fused).

    Returns (ranking, hits of all attempts with an ``attempt`` column)."""
    per_attempt = []
    for a in range(cfg.attempts):
        k_a = cfg.top_k * (a + 1)
        kb_a = (cfg.bm25_top_k or cfg.top_k) * (a + 1)
        per_attempt.append(
            hits.filter(
                ((pl.col("source") == "dense") & (pl.col("rank") < k_a))
                | ((pl.col("source") == "bm25") & (pl.col("rank") < kb_a))
            ).with_columns(pl.lit(a, pl.Int64).alias("attempt"))
        )
    all_hits = pl.concat(per_attempt)
    dense_hits = all_hits.filter(pl.col("source") != "bm25")
    ranked = consensus(dense_hits, cfg.rerank, cfg.freq_weight, cfg.rrf_k)
    if cfg.bm25_weight > 0:
        bm25_hits = all_hits.filter(pl.col("source") == "bm25")
        if bm25_hits.height:
            ranked = fuse(ranked, consensus(bm25_hits, "rrf", rrf_k=cfg.rrf_k), cfg.bm25_weight, cfg.rrf_k)
    if cfg.max_hits:
        ranked = ranked.filter(pl.col("rank") < cfg.max_hits * (pl.col("attempt") + 1))
    return ranked, all_hits


def rescore_evidence(
    by_key: Mapping[tuple[str, int], Sequence[int]],
    queries: pl.DataFrame,
    qvecs: np.ndarray,
    view: TreeView,
    cfg: EvidenceConfig,
    text: Mapping[str, str],
    questions: pl.DataFrame | None = None,
    vectors: np.ndarray | None = None,
    named: Mapping[str, set[str]] | None = None,
) -> dict[tuple[str, int], list[int]]:
    """Each (qid, attempt)'s ranked node rows with the top ``cfg.pool`` rescored; ``text`` is
    qid -> question (:func:`question_texts`), ``named`` qid -> the words naming the documents
    its search was restricted to (:func:`named_words`)."""
    named = named or {}
    scorer = EvidenceScorer.from_view(view, vectors)
    first = queries.with_row_index("_row").filter(pl.col("query_idx") == 0)
    qrow = {q: int(r) for q, r in zip(first["qid"].cast(pl.String), first["_row"])}
    unit: dict[str, str | None] = {}
    if questions is not None and "answer_unit" in questions.columns:
        unit = dict(zip(questions["qid"].cast(pl.String), questions["answer_unit"]))
    per_q: dict[str, dict[int, Sequence[int]]] = {}
    for (qid, a), rows in by_key.items():
        per_q.setdefault(qid, {})[a] = rows
    out: dict[tuple[str, int], list[int]] = {}
    for qid, rankings in per_q.items():  # features once per question, for all its attempts
        got = scorer.rescore_many(text.get(qid, ""), unit.get(qid), rankings, cfg,
                                  qvecs[qrow[qid]] if qid in qrow else None, named.get(qid, ()))
        out.update(((qid, a), rows) for a, rows in got.items())
    return out


def named_words(restrict: Restriction | None, text: Mapping[str, str], doc_meta: pl.DataFrame | None,
                cfg: DocPriorConfig) -> dict[str, set[str]]:
    """qid -> the words of its question that name the documents its search is restricted to
    (their entity values, ``doc_prior.entity_fields`` and short forms; kohaku.retrieval.docprior),
    for each restricted question; empty without a restriction or the corpus metadata."""
    if restrict is None or doc_meta is None or not restrict.docs:
        return {}
    prior = DocPrior(doc_meta, cfg, {d for docs in restrict.docs.values() for d in docs})
    out = {}
    for qid, docs in restrict.docs.items():
        words = prior.named_words(text.get(qid, ""), docs)
        if words:
            out[qid] = words
    return out


def question_texts(queries: pl.DataFrame, questions: pl.DataFrame | None) -> dict[str, str]:
    """qid -> the question: from ``questions`` where given, else query 0 of the plan."""
    first = queries.filter(pl.col("query_idx") == 0)
    text = dict(zip(first["qid"].cast(pl.String), first["query"]))
    if questions is not None:
        text.update(zip(questions["qid"].cast(pl.String), questions["question"]))
    return text


def passage_text(view: TreeView, row: int, max_chars: int, prefix: str = "") -> str:
    """What a reranker reads for a node: its section title and its text, cut to ``max_chars``;
    a table row reads as it is matched, after its ``prefix`` (kohaku.ingest.tree.rows.row_prefixes:
    the table's title and column header, ``"CONSOLIDATED STATEMENTS OF CASH FLOWS | Year Ended
    December 31, 2018 2017 | Purchases of property ..."``), so the model sees the statement and
    the years a bare row of figures leaves out."""
    text = view.full_text(row).strip()
    if prefix:
        return f"{prefix}{text}"[:max_chars]
    section = view.section[row].strip()
    if section and not text.startswith(section):
        text = f"{section}\n{text}"
    return text[:max_chars]


def rerank_table(ranked: pl.DataFrame, by_key: Mapping[tuple[str, int], Sequence[int]]) -> pl.DataFrame:
    """The rows of ``by_key`` (the order the context is filled in) as a ranking table: rank =
    position, the consensus figures joined from ``ranked`` (null for nodes the rescoring added,
    e.g. evidence.doc_leaves); nodes ``by_key`` dropped are not in it."""
    order = pl.DataFrame(
        [(q, a, int(r), i) for (q, a), rows in by_key.items() for i, r in enumerate(rows)],
        schema={"qid": pl.String, "attempt": pl.Int64, "node_row": ranked["node_row"].dtype,
                "rank": pl.Int64}, orient="row")
    keys = ["qid", "attempt", "node_row"]
    return (order.join(ranked.drop("rank"), on=keys, how="left")
            .select(ranked.columns).sort(["qid", "attempt", "rank"], maintain_order=True))


def run_retrieval(
    queries: pl.DataFrame,
    nodes: pl.DataFrame,
    qvecs: np.ndarray,
    dense: Mapping[int, object],
    sparse: Mapping[int, object],
    cfg: RetrieveConfig,
    view: TreeView | None = None,
    progress: bool = True,
    questions: pl.DataFrame | None = None,
    vectors: np.ndarray | None = None,
    reranker: Reranker | None = None,
    rerank_top_n: int = 30,
    rerank_chars: int = 1200,
    timings: dict[str, float] | None = None,
    doc_meta: pl.DataFrame | None = None,
) -> dict[str, pl.DataFrame]:
    """Pure retrieval over prepared searchers; ``qvecs`` rows align with ``queries`` rows.

    With ``cfg.restrict_column`` each question searches only the documents that column of
    ``questions`` names (:func:`question_documents`; exact search within them).

    Else with ``cfg.doc_prior`` on and ``doc_meta`` (the corpus metadata: id, title, year,
    company, ...) each question that names documents searches only within them
    (kohaku.retrieval.docprior); the others search every document.

    ``questions`` (qid, question, answer_unit) and ``vectors`` (the nodes' embeddings, row
    aligned) feed the evidence rescoring (``cfg.evidence``); without them query 0 stands for
    the question, the unit is unknown and the dense feature is 0. ``reranker`` (a cross-encoder
    or the LLM, kohaku.retrieval.rerankers) then re-sorts the first ``rerank_top_n`` nodes.
    ``timings`` (when given) gets the seconds of each phase: search, rank, evidence, rerank,
    contexts."""
    clock = _Clock(timings)
    if qvecs.shape[0] != queries.height:
        raise ValueError(f"{qvecs.shape[0]} query vectors for {queries.height} queries")
    if cfg.bm25_levels is not None:
        sparse = {lv: s for lv, s in sparse.items() if lv in cfg.bm25_levels}
    use_bm25 = cfg.bm25_weight > 0 and bool(sparse)
    k_max = cfg.top_k * cfg.attempts
    kb_max = (cfg.bm25_top_k or cfg.top_k) * cfg.attempts
    restrict = None
    if cfg.restrict_column:
        restrict = Restriction(question_documents(questions, cfg.restrict_column,
                                                  nodes["doc_id"].unique().to_list()),
                               nodes["doc_id"].cast(pl.String), vectors)
        unknown = set(queries["qid"].cast(pl.String)) - set(restrict.docs)
        if unknown:
            raise RestrictError(f"question(s) {sorted(unknown)[:5]} of the plan are not in the "
                                "questions table that retrieve.restrict_column reads")
    elif cfg.doc_prior.active and doc_meta is not None and questions is not None:
        docs = question_priors(questions, doc_meta, cfg.doc_prior,
                               nodes["doc_id"].cast(pl.String).unique().to_list())
        log.info("doc_prior: %d of %d questions name their documents (searched within them)",
                 len(docs), questions.height)
        if docs:
            restrict = Restriction(docs, nodes["doc_id"].cast(pl.String), vectors)
    texts = question_texts(queries, questions)
    named = (named_words(restrict, texts, doc_meta, cfg.doc_prior)
             if cfg.bm25_drop_named or (cfg.evidence.enabled and cfg.evidence.named_weight != 1.0)
             else {})
    if restrict is not None and cfg.bm25_drop_named:
        restrict.drop = named
    raw = search_hits(queries, qvecs, dense, sparse, k_max, kb_max, use_bm25, restrict)
    clock.lap("search")
    view = view or TreeView(nodes)
    ranked, all_hits = rank_nodes(raw, cfg)
    builder = ContextBuilder(view, cfg.render())
    node_ids = nodes["node_id"]

    lists = ranked.group_by(["qid", "attempt"], maintain_order=True).agg(pl.col("node_row"))
    by_key = {(q, a): rows for q, a, rows in lists.iter_rows()}
    qids = queries["qid"].cast(pl.String).unique(maintain_order=True).to_list()
    clock.lap("rank")
    if cfg.evidence.enabled:
        by_key = rescore_evidence(by_key, queries, qvecs, view, cfg.evidence, texts, questions,
                                  vectors, named)
        clock.lap("evidence")
    if reranker is not None:
        prefixes = view.row_prefixes  # table rows read with their title and header
        by_key = rerank_rows(by_key, {k: texts.get(k[0], "") for k in by_key},
                             lambda r: passage_text(view, r, rerank_chars, prefixes[r]), reranker,
                             rerank_top_n)
        clock.lap("rerank")
    if cfg.pages != "none":
        kinds = (view.nodes["block_kind"].cast(pl.String).fill_null("").to_list()
                 if "block_kind" in view.nodes.columns else [""] * len(view.text))
        page_of = [None if p is None or view.has_children[r] or not is_row(view.text[r], kinds[r]) else (d, p)
                   for r, (d, p) in enumerate(zip(view.doc_id, view.page))]
        by_key = {key: pages_first(rows, page_of, cfg.pages, cfg.page_k, cfg.page_pool)
                  for key, rows in by_key.items()}
        clock.lap("pages")
    if cfg.evidence.enabled or reranker is not None or cfg.pages != "none":
        ranked = rerank_table(ranked, by_key)
    records = []
    for qid in tqdm(qids, desc="contexts", unit="q", disable=not progress, leave=False):
        for a in range(cfg.attempts):
            budget = cfg.max_context_tokens * (a + 1 if cfg.grow_budget else 1)
            ctx = builder.build(by_key.get((qid, a), []), budget)
            records.append((qid, a, cfg.top_k * (a + 1), ctx.context, ctx.doc_ids, ctx.node_ids,
                            ctx.n_tokens, budget, ctx.n_blocks, ctx.blocks, ctx.block_doc_ids,
                            cfg.separator))
    contexts = pl.DataFrame(records, schema=CONTEXTS_SCHEMA, orient="row")
    clock.lap("contexts")
    hits = all_hits.select(
        "qid", "attempt", "query_idx",
        node_ids.gather(all_hits["node_row"]).alias("node_id"),
        "rank", "score", "level", "source",
    ).sort(["qid", "attempt", "source", "query_idx", "level", "rank"])
    ranking = ranked.select(
        "qid", "attempt", node_ids.gather(ranked["node_row"]).alias("node_id"),
        "rank", "value", "freq", "score_sum",
    )
    return {"hits": hits, "ranking": ranking, "contexts": contexts}


def encode_queries(
    encoder: Encoder, queries: pl.DataFrame, cache_root: Path | None, progress: bool = True
) -> np.ndarray:
    """All queries of all questions in one batch (distinct strings once, cached on disk)."""
    return encode_texts(encoder, queries["query"].to_list(), "query", cache_root, progress=progress)


def retrieve(
    queries: pl.DataFrame,
    nodes: pl.DataFrame,
    index_dir: Path,
    encoder: Encoder,
    cfg: RetrieveConfig,
    cache_root: Path | None,
    load_embeddings: Callable[[], pl.DataFrame],
    log: logging.Logger = log,
    questions: pl.DataFrame | None = None,
    reranker: Reranker | None = None,
    rerank_cfg: RerankerConfig | None = None,
    doc_meta: pl.DataFrame | None = None,
) -> tuple[dict[str, pl.DataFrame], dict[str, Any]]:
    """Load the index in ``index_dir``, encode the queries, retrieve: (tables, summary).

    ``questions`` (qid, question, answer_unit) feeds the evidence rescoring and the reranker
    (``reranker`` built from ``rerank_cfg``); ``doc_meta`` (the corpus metadata) the document
    prior (``cfg.doc_prior``)."""
    t0 = time.perf_counter()
    need_vectors = cfg.evidence.enabled and cfg.evidence.dense_weight != 0
    embeddings = (load_embeddings() if read_meta(index_dir)["kind"] == "exact" or need_vectors
                  else None)
    dense, sparse, meta = load_searchers(index_dir, nodes, cfg.levels, embeddings, cfg.ef)
    if cfg.bm25_weight > 0 and not sparse:
        log.warning("retrieve.bm25_weight=%s but the index has no BM25 (index.bm25=false); "
                    "dense only", cfg.bm25_weight)
    if encoder.dim != meta["dim"]:
        raise ConfigError(f"embed model gives {encoder.dim}-d vectors but the index holds "
                          f"{meta['dim']}-d ones; rebuild the index with the same embed config")
    t1 = time.perf_counter()
    queries = queries.sort(["qid", "query_idx"], maintain_order=True)
    qvecs = encode_queries(encoder, queries, cache_root)
    t2 = time.perf_counter()
    vectors = embeddings["vector"].rechunk().to_numpy() if need_vectors else None
    rk = rerank_cfg or RerankerConfig()
    phases: dict[str, float] = {}
    tables = run_retrieval(queries, nodes, qvecs, dense, sparse, cfg, questions=questions,
                           vectors=vectors, reranker=reranker, rerank_top_n=rk.top_n,
                           rerank_chars=rk.max_passage_chars, timings=phases, doc_meta=doc_meta)
    t3 = time.perf_counter()
    c0 = tables["contexts"].filter(pl.col("attempt") == 0)
    log.info("retrieved %d questions x %d attempts: encode %.1fs, search+contexts %.1fs (%s)",
             c0.height, cfg.attempts, t2 - t1, t3 - t2,
             ", ".join(f"{k.removesuffix('_seconds')} {v:.1f}s" for k, v in phases.items()))
    summary = {
        "n_questions": c0.height,
        "n_queries": queries.height,
        "load_seconds": round(t1 - t0, 3),
        "query_encode_seconds": round(t2 - t1, 3),
        "retrieve_seconds": round(t3 - t2, 3),
        **phases,
        "mean_context_tokens": round(float(c0["n_tokens"].mean() or 0), 1),
        "mean_docs": round(float(c0["doc_ids"].list.len().mean() or 0), 2),
    }
    return tables, summary
