"""Nearest-neighbour and BM25 search over the searchable tree levels.

One dense index per level (hnswlib, inner product on unit vectors, or exact numpy search), so a
level filter never throws a hit away. Indexes answer in *node rows*: positions in the tree's
``nodes`` table, which is what the rerank and context code work with.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import polars as pl

from kohaku.retrieval.embedding import context_template, context_texts

log = logging.getLogger(__name__)
logging.getLogger("bm25s").setLevel(logging.WARNING)  # it logs every index build at DEBUG

META_FILE = "index.json"


@dataclass
class IndexConfig:
    """The ``index`` config group (see conf/index/*.yaml)."""

    kind: str = "hnsw"  # hnsw (approximate) | exact (numpy matmul; small corpora, ground truth)
    # tree levels to index, one index each: 3 sentence, 2 paragraph, 1 section, 0 document
    levels: list[int] = field(default_factory=lambda: [3, 2])
    M: int = 32  # hnsw graph degree
    ef_construction: int = 200  # hnsw build breadth
    ef: int = 128  # hnsw search breadth (raised to k when k is larger); set again after loading
    random_seed: int = 100  # hnsw level assignment seed
    num_threads: int = 1  # build threads; 1 = bit-for-bit reproducible index
    bm25: bool = True  # also build a bm25s index per level (used when retrieve.bm25_weight > 0)
    # PyStemmer language; null = no stemming (also off when PyStemmer is missing)
    bm25_stemmer: str | None = "english"
    bm25_stopwords: str | None = "en"  # bm25s stopword list; null = none
    bm25_k1: float = 1.5  # BM25 term-frequency saturation
    bm25_b: float = 0.75  # BM25 length normalisation
    bm25_method: str = "lucene"  # lucene | robertson | atire | bm25l | bm25+
    # document context in the BM25 text of each node, as embed.context: none | title |
    # title_section | a format string with {title}, {section}, {doc_id}
    bm25_context: str = "none"
    # a table row's BM25 text carries its table's title and column header, as embed.row_context
    bm25_row_context: bool = True

    def validate(self) -> None:
        if self.kind not in ("hnsw", "exact"):
            raise ValueError(f"kind={self.kind!r}: use hnsw or exact")
        if not self.levels:
            raise ValueError("levels must name at least one tree level (3 sentence .. 0 document)")
        if self.M < 2 or self.ef_construction < 1 or self.ef < 1:
            raise ValueError("M >= 2, ef_construction >= 1 and ef >= 1 are required")
        context_template(self.bm25_context, "index.bm25_context")


# ----------------------------------------------------------------------------------------- dense


class ExactSearcher:
    """Brute-force inner product (numpy matmul + argpartition); the ground truth for hnsw."""

    def __init__(self, vectors: np.ndarray, rows: np.ndarray, chunk: int = 512) -> None:
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self.rows = np.asarray(rows, dtype=np.int64)
        self.chunk = chunk

    @property
    def count(self) -> int:
        return len(self.rows)

    def search_labels(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        n = self.count
        k = min(k, n)
        nq = len(queries)
        labels = np.zeros((nq, k), np.int64)
        scores = np.zeros((nq, k), np.float32)
        if k == 0:
            return labels, scores
        for s in range(0, nq, self.chunk):
            sim = queries[s : s + self.chunk] @ self.vectors.T
            if k < n:
                part = np.argpartition(-sim, k - 1, axis=1)[:, :k]
            else:
                part = np.broadcast_to(np.arange(n), sim.shape).copy()
            psim = np.take_along_axis(sim, part, axis=1)
            # sort by score, ties by label, so results are deterministic
            order = np.lexsort((part, -psim), axis=1)
            labels[s : s + self.chunk] = np.take_along_axis(part, order, axis=1)
            scores[s : s + self.chunk] = np.take_along_axis(psim, order, axis=1)
        return labels, scores

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        labels, scores = self.search_labels(np.ascontiguousarray(queries, np.float32), k)
        return self.rows[labels], scores


class HnswSearcher:
    def __init__(self, index, rows: np.ndarray, ef: int) -> None:
        self.index = index
        self.rows = np.asarray(rows, dtype=np.int64)
        self.ef = ef
        self.index.set_ef(ef)

    @property
    def count(self) -> int:
        return int(self.index.get_current_count())

    def search_labels(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        k = min(k, self.count)
        if k == 0:
            return np.zeros((len(queries), 0), np.int64), np.zeros((len(queries), 0), np.float32)
        self.index.set_ef(max(self.ef, k))
        labels, dists = self.index.knn_query(np.ascontiguousarray(queries, np.float32), k=k)
        return labels.astype(np.int64), (1.0 - dists).astype(np.float32)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        labels, scores = self.search_labels(queries, k)
        return self.rows[labels], scores


def build_hnsw(vectors: np.ndarray, cfg: IndexConfig):
    import hnswlib

    n, dim = vectors.shape
    index = hnswlib.Index(space="ip", dim=dim)
    index.init_index(
        max_elements=max(n, 1), M=cfg.M, ef_construction=cfg.ef_construction,
        random_seed=cfg.random_seed,
    )
    if n:
        index.add_items(np.ascontiguousarray(vectors, np.float32), np.arange(n),
                        num_threads=cfg.num_threads)
    index.set_ef(cfg.ef)
    return index


# ------------------------------------------------------------------------------------------ bm25


def _stemmer(name: str | None):
    if not name:
        return None
    try:
        import Stemmer
    except ImportError:
        log.warning("index.bm25_stemmer=%s but PyStemmer is not installed; BM25 runs without "
                    "stemming (pip install PyStemmer)", name)
        return None
    return Stemmer.Stemmer(name).stemWord


def _tokenizer(stemmer_name: str | None, stopwords: str | None):
    from bm25s.tokenization import Tokenizer

    return Tokenizer(lower=True, stopwords=stopwords or [], stemmer=_stemmer(stemmer_name))


class Bm25Searcher:
    """bm25s index over the texts of one level; ``search`` takes query strings."""

    def __init__(self, retriever, tokenizer, rows: np.ndarray) -> None:
        self.retriever = retriever
        self.tokenizer = tokenizer
        self.rows = np.asarray(rows, dtype=np.int64)

    @property
    def count(self) -> int:
        return len(self.rows)

    def search(self, queries: Sequence[str], k: int, within: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """(node rows, scores), each (nq, k); rows are -1 where fewer than k docs matched.
        ``within``: only these labels (positions in the index) compete, restricted before the
        top-k cut, so no hit is thrown away (retrieve.restrict_column)."""
        nq = len(queries)
        k = min(k, self.count if within is None else len(within))
        rows = np.full((nq, k), -1, np.int64)
        scores = np.zeros((nq, k), np.float32)
        if k == 0 or nq == 0:
            return rows, scores
        ids = self.tokenizer.tokenize(list(queries), update_vocab=False, return_as="ids",
                                      show_progress=False)
        # Top-k over the documents that match at all: bm25s' own retrieve partitions the full
        # score vector, mostly zeros, which is ~8x slower; ties break by document order.
        labels = self.rows if within is None else self.rows[within]
        for i, query in enumerate(ids):
            sc = np.asarray(self.retriever.get_scores(query), np.float32)
            if within is not None:
                sc = sc[within]
            hit = np.flatnonzero(sc > 0)
            if len(hit) > k:
                hit = hit[np.argpartition(sc[hit], -k)[-k:]]
            hit = hit[np.lexsort((hit, -sc[hit]))]
            rows[i, :len(hit)] = labels[hit]
            scores[i, :len(hit)] = sc[hit]
        return rows, scores


def build_bm25(texts: Sequence[str], rows: np.ndarray, cfg: IndexConfig) -> Bm25Searcher:
    import bm25s

    tok = _tokenizer(cfg.bm25_stemmer, cfg.bm25_stopwords)
    ids = tok.tokenize(list(texts), update_vocab=True, return_as="ids", show_progress=False)
    retriever = bm25s.BM25(k1=cfg.bm25_k1, b=cfg.bm25_b, method=cfg.bm25_method)
    retriever.index(ids, show_progress=False)
    return Bm25Searcher(retriever, tok, rows)


def save_bm25(searcher: Bm25Searcher, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    searcher.retriever.save(str(folder), show_progress=False)
    searcher.tokenizer.save_vocab(str(folder))
    searcher.tokenizer.save_stopwords(str(folder))


def load_bm25(folder: Path, rows: np.ndarray, stemmer: str | None) -> Bm25Searcher:
    import bm25s

    retriever = bm25s.BM25.load(str(folder), show_progress=False)
    tok = _tokenizer(stemmer, None)
    tok.load_vocab(str(folder))
    tok.load_stopwords(str(folder))
    return Bm25Searcher(retriever, tok, rows)


# ------------------------------------------------------------------------------------- on disk


def level_rows(nodes: pl.DataFrame, level: int) -> np.ndarray:
    """Rows of ``nodes`` at ``level`` (index label i -> node row rows[i])."""
    return np.flatnonzero(nodes["level"].to_numpy() == level).astype(np.int64)


def write_index(
    out_dir: Path, nodes: pl.DataFrame, embeddings: pl.DataFrame, cfg: IndexConfig
) -> dict:
    """Write ``hnsw_<level>.bin`` (kind hnsw), ``ids_<level>.parquet``, ``bm25_<level>/`` and
    ``index.json``; returns the metadata written to index.json."""
    if embeddings.height != nodes.height or not (
        embeddings["node_id"] == nodes["node_id"]
    ).all():
        raise ValueError("embed.embeddings and tree.nodes do not list the same node_ids in the "
                         "same order; recompute the embed stage (force=[embed])")
    vectors = embeddings["vector"].rechunk().to_numpy()
    dim = int(vectors.shape[1]) if vectors.ndim == 2 else 0
    texts = context_texts(nodes, cfg.bm25_context, "index.bm25_context", cfg.bm25_row_context) if cfg.bm25 else []
    meta: dict = {"kind": cfg.kind, "space": "ip", "dim": dim, "levels": list(cfg.levels),
                  "ef": cfg.ef, "counts": {}, "bm25": bool(cfg.bm25),
                  "bm25_stemmer": cfg.bm25_stemmer if _stemmer(cfg.bm25_stemmer) else None}
    for level in cfg.levels:
        rows = level_rows(nodes, level)
        meta["counts"][str(level)] = int(len(rows))
        pl.DataFrame({"label": np.arange(len(rows), dtype=np.int64),
                      "node_id": nodes["node_id"].gather(rows)}).write_parquet(
            out_dir / f"ids_{level}.parquet")
        if cfg.kind == "hnsw":
            index = build_hnsw(vectors[rows], cfg)
            index.save_index(str(out_dir / f"hnsw_{level}.bin"))
        if cfg.bm25:
            searcher = build_bm25([texts[i] for i in rows], rows, cfg)
            save_bm25(searcher, out_dir / f"bm25_{level}")
    (out_dir / META_FILE).write_text(json.dumps(meta, indent=2))
    return meta


def read_meta(index_dir: Path) -> dict:
    file = Path(index_dir) / META_FILE
    if not file.exists():
        raise FileNotFoundError(f"{file}: not an index artifact (run the index stage)")
    return json.loads(file.read_text())


def _rows_for(index_dir: Path, level: int, nodes: pl.DataFrame) -> np.ndarray:
    ids = pl.read_parquet(Path(index_dir) / f"ids_{level}.parquet").sort("label")
    pos = pl.DataFrame({"node_id": nodes["node_id"],
                        "_row": pl.int_range(nodes.height, eager=True, dtype=pl.Int64)})
    joined = ids.join(pos, on="node_id", how="left", maintain_order="left")
    if joined["_row"].null_count():
        bad = joined.filter(pl.col("_row").is_null())["node_id"][0]
        raise ValueError(f"{index_dir}/ids_{level}.parquet: node '{bad}' is not in tree.nodes; "
                         "the index was built from another tree (force=[index])")
    return joined["_row"].to_numpy()


def load_searchers(
    index_dir: Path,
    nodes: pl.DataFrame,
    levels: Sequence[int] | None = None,
    embeddings: pl.DataFrame | None = None,
    ef: int | None = None,
) -> tuple[dict[int, object], dict[int, Bm25Searcher], dict]:
    """Dense searchers (and BM25 searchers when built) for ``levels`` (default: all indexed).

    ``embeddings`` is needed for ``kind=exact`` (the vectors are not copied into the index).
    """
    meta = read_meta(index_dir)
    levels = list(levels) if levels else list(meta["levels"])
    missing = [lv for lv in levels if lv not in meta["levels"]]
    if missing:
        raise ValueError(f"retrieve.levels {missing} are not indexed (index.levels="
                         f"{meta['levels']}); add them to index.levels")
    dense: dict[int, object] = {}
    sparse: dict[int, Bm25Searcher] = {}
    vectors = None
    for level in levels:
        rows = _rows_for(index_dir, level, nodes)
        if meta["kind"] == "exact":
            if embeddings is None:
                raise ValueError("index.kind=exact needs the embeddings table")
            if vectors is None:
                vectors = embeddings["vector"].rechunk().to_numpy()
            dense[level] = ExactSearcher(vectors[rows], rows)
        else:
            import hnswlib

            index = hnswlib.Index(space="ip", dim=int(meta["dim"]))
            index.load_index(str(Path(index_dir) / f"hnsw_{level}.bin"), max_elements=max(len(rows), 1))
            dense[level] = HnswSearcher(index, rows, ef or int(meta["ef"]))
        if meta.get("bm25") and (Path(index_dir) / f"bm25_{level}").exists():
            sparse[level] = load_bm25(Path(index_dir) / f"bm25_{level}", rows, meta.get("bm25_stemmer"))
    return dense, sparse, meta
