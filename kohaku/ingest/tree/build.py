"""Building the tree: parse blocks -> the ``nodes`` table (document / section / paragraph / sentence).

``mode=hier`` segments each document into sections found from headings (pages only as a
fallback), paragraphs and sentences (kohaku/ingest/text/segment.py). ``mode=flat`` is the fixed-size
chunk baseline: one section per document whose level-2 nodes are chunks of about
``chunk_tokens`` tokens (consecutive sentences, ``chunk_overlap`` tokens repeated between
neighbours), with their sentences below them, so both modes give the same table shape.
Node ids and the schema: kohaku/ingest/tree/model.py.
"""

from __future__ import annotations

import bisect
import logging
import re
import statistics
import unicodedata
from dataclasses import dataclass, fields
from typing import Any

import polars as pl
from tqdm import tqdm

from kohaku.ingest.text.segment import Paragraph, SegmentConfig, Section, segment_document
from kohaku.core.tokens import count_tokens
from kohaku.ingest.tree.model import KINDS, NODES_SCHEMA

log = logging.getLogger(__name__)


@dataclass
class TreeConfig(SegmentConfig):
    """The ``tree`` config group (see conf/tree/*.yaml for the meaning of each key); the
    segmenter's keys come from SegmentConfig."""

    mode: str = "hier"  # hier | flat
    chunk_tokens: int = 256  # tokens per chunk (kohaku.core.tokens.count_tokens)
    chunk_overlap: int = 32  # tokens of trailing sentences repeated at the start of the next chunk

    def validate(self) -> None:
        if self.mode not in ("hier", "flat"):
            raise ValueError(f"mode={self.mode!r}: use 'hier' or 'flat'")
        if self.title_case_headings not in ("auto", "always", "never"):
            raise ValueError(f"title_case_headings={self.title_case_headings!r}: use auto, always or never")
        if self.chunk_tokens < 8:
            raise ValueError(f"chunk_tokens={self.chunk_tokens}: use at least 8")
        if not 0 <= self.chunk_overlap < self.chunk_tokens:
            raise ValueError(f"chunk_overlap={self.chunk_overlap}: must be >= 0 and < chunk_tokens")

    def segment_config(self) -> SegmentConfig:
        names = {f.name for f in fields(SegmentConfig)}
        return SegmentConfig(**{k: getattr(self, k) for k in names})


def chunk_sentences(sentences: list[str], chunk_tokens: int, overlap: int) -> list[tuple[int, list[str]]]:
    """Pack consecutive sentences into chunks of at most ``chunk_tokens`` tokens; each chunk
    starts with the last pieces of the previous chunk worth up to ``overlap`` tokens. A sentence
    longer than a chunk is cut into word windows. Returns (index of the sentence that the chunk's
    first new piece comes from, pieces)."""
    pieces: list[tuple[str, int, int]] = []          # text, tokens, sentence index
    for idx, s in enumerate(sentences):
        n = count_tokens(s)
        if n <= chunk_tokens:
            pieces.append((s, n, idx))
            continue
        cur: list[str] = []
        for w in s.split():
            if cur and count_tokens(" ".join(cur + [w])) > chunk_tokens:
                pieces.append((" ".join(cur), count_tokens(" ".join(cur)), idx))
                cur = []
            cur.append(w)
        if cur:
            pieces.append((" ".join(cur), count_tokens(" ".join(cur)), idx))
    chunks: list[tuple[int, list[str]]] = []
    i = 0
    while i < len(pieces):
        back: list[tuple[str, int, int]] = []
        if chunks and overlap > 0:
            total = 0
            j = i - 1
            while j >= 0 and total + pieces[j][1] <= overlap:
                back.insert(0, pieces[j])
                total += pieces[j][1]
                j -= 1
        while back and sum(p[1] for p in back) + pieces[i][1] > chunk_tokens:
            back.pop(0)
        chunk = back + [pieces[i]]
        used = sum(p[1] for p in chunk)
        first_new = pieces[i][2]
        i += 1
        while i < len(pieces) and used + pieces[i][1] <= chunk_tokens:
            chunk.append(pieces[i])
            used += pieces[i][1]
            i += 1
        chunks.append((first_new, [p[0] for p in chunk]))
    return chunks


def _flat_sections(sections: list[Section], title: str, cfg: TreeConfig,
                   sent_pages: list[list[list[int]]] | None = None) -> list[Section]:
    """One section of chunks; a chunk's page is the page its first new sentence starts on
    (``sent_pages``, from :func:`sentence_pages`), else that sentence's paragraph's page."""
    sentences = [s for sec in sections for p in sec.paragraphs for s in p.sentences]
    if sent_pages is not None:
        pages = [pg for sec in sent_pages for para in sec for pg in para]
    else:
        pages = [p.page for sec in sections for p in sec.paragraphs for _ in p.sentences]
    if not sentences:
        return []
    out = Section(title=title, page=pages[0], source="chunk", path=title)
    for first, chunk in chunk_sentences(sentences, cfg.chunk_tokens, cfg.chunk_overlap):
        out.paragraphs.append(Paragraph("text", pages[first], text=" ".join(chunk), sentences=chunk))
    return [out]


def document_nodes(doc_id: str, title: str, sections: list[Section],
                   sentence_pages: list[list[list[int]]] | None = None) -> list[dict[str, Any]]:
    """Rows of the nodes table for one document, in document order. ``sentence_pages`` (from
    :func:`sentence_pages`: per section, per paragraph, per sentence) gives each sentence the
    page it starts on and each paragraph the page of its first sentence; without it every node
    of a paragraph takes the paragraph's page."""
    first_page = min((s.page for s in sections), default=1)
    rows = [_row(doc_id, doc_id, None, 0, 0, first_page, "", title, "heading", "")]
    for i, sec in enumerate(sections, start=1):
        sid = f"{doc_id}#s{i}"
        rows.append(_row(sid, doc_id, doc_id, 1, i, sec.page, sec.path or sec.title, sec.title, "heading", sec.source))
        for j, para in enumerate(sec.paragraphs, start=1):
            pid = f"{sid}.p{j}"
            pages = sentence_pages[i - 1][j - 1] if sentence_pages else [para.page] * len(para.sentences)
            rows.append(_row(pid, doc_id, sid, 2, j, pages[0] if pages else para.page,
                             sec.path or sec.title, para.text, para.kind, ""))
            for k, sent in enumerate(para.sentences, start=1):
                rows.append(_row(f"{pid}.t{k}", doc_id, pid, 3, k, pages[k - 1], sec.path or sec.title, sent, para.kind, ""))
    return rows


# A sentence is looked up in its document's blocks by its first letters and digits; a match more
# than this many pages after its paragraph's first page is taken for a repeat elsewhere.
_PAGE_SPAN = 3
_KEY_CHARS = 40
_NOT_ALNUM = re.compile(r"[^0-9a-z]+")


def _fold(text: str) -> str:
    return _NOT_ALNUM.sub("", unicodedata.normalize("NFKC", text or "").lower())


def sentence_pages(blocks: list[dict[str, Any]], sections: list[Section]) -> list[list[list[int]]]:
    """The page each sentence starts on (per section, per paragraph, per sentence).

    A paragraph keeps the page of its first line, but its later sentences may start on the next
    page (a paragraph running over a page break, a long paragraph cut in parts). The blocks carry
    their page, so each sentence is found in the document's block text (both folded to lower-case
    letters and digits: joined lines, undone hyphenation, dropped page headers and spacing do not
    matter) by its first characters, searching forward from the previous sentence; it gets the
    page of the block where the match starts. A sentence that is not found, or only on a page
    before its paragraph's or more than a few pages after it, keeps its paragraph's page (or the
    page of the sentence before it, when later)."""
    parts: list[str] = []
    starts: list[int] = []
    pages: list[int] = []
    first_at: dict[int, int] = {}
    size = 0
    for b in blocks:
        text = _fold(b.get("text") or "")
        if not text:
            continue
        page = int(b.get("page") or 1)
        first_at.setdefault(page, size)
        parts.append(text)
        starts.append(size)
        pages.append(page)
        size += len(text)
    stream = "".join(parts)
    cursor = 0
    out: list[list[list[int]]] = []
    for sec in sections:
        sec_pages: list[list[int]] = []
        for para in sec.paragraphs:
            lo, hi = para.page, para.page + _PAGE_SPAN
            para_start = min((v for k, v in first_at.items() if k >= lo), default=size)
            end = min((v for k, v in first_at.items() if k > hi), default=size)
            got: list[int] = []
            last = para.page
            for sent in para.sentences:
                key = _fold(sent)[:_KEY_CHARS]
                page = None
                if key:
                    for start in (cursor, para_start):
                        pos = stream.find(key, start, end)
                        if pos < 0:
                            continue
                        found = pages[bisect.bisect_right(starts, pos) - 1]
                        if lo <= found <= hi:
                            page = found
                            cursor = pos + len(key)
                            break
                last = page if page is not None else last
                got.append(last)
            sec_pages.append(got)
        out.append(sec_pages)
    return out


def _row(node_id: str, doc_id: str, parent: str | None, level: int, order: int, page: int,
         section: str, text: str, block_kind: str, source: str) -> dict[str, Any]:
    return {
        "node_id": node_id, "doc_id": doc_id, "parent_id": parent, "level": level,
        "kind": KINDS[level], "order": order, "page": int(page), "section": section, "text": text,
        "n_tokens": count_tokens(text), "block_kind": block_kind, "section_source": source,
    }


def build_tree(documents: pl.DataFrame, blocks: pl.DataFrame, cfg: TreeConfig,
               dropped: list[tuple[str, str]] | None = None,
               figures: pl.DataFrame | None = None) -> pl.DataFrame:
    """documents + blocks (the parse tables) -> nodes. Documents with status error are skipped
    (parse reports them); a readable document that yields no node is logged by name and, when
    ``dropped`` is given, appended to it as (doc_id, reason).

    ``figures`` (kohaku.ingest.captioning.figure_blocks: doc_id, page, after_order, text) are captioned
    figures: each becomes a ``figure`` block right after the block whose ``order`` is its
    ``after_order`` (-1: before the first), so it lands in that block's section as a paragraph
    of its own. Without figures the tree is exactly what the blocks alone give."""
    seg_cfg = cfg.segment_config()
    usable = documents.filter(pl.col("status") != "error").sort("doc_id")
    by_doc: dict[str, list[dict[str, Any]]] = {}
    for b in blocks.sort(["doc_id", "order"]).iter_rows(named=True):
        by_doc.setdefault(b["doc_id"], []).append(b)
    if figures is not None and figures.height:
        _insert_figures(by_doc, figures)
    rows: list[dict[str, Any]] = []
    docs = usable.iter_rows(named=True)
    for doc in tqdm(docs, total=usable.height, desc="tree", unit="doc", disable=usable.height < 20):
        doc_blocks = by_doc.get(doc["doc_id"], [])
        if not doc_blocks:
            _drop(dropped, doc["doc_id"], "no text blocks from the parse stage")
            continue
        title = doc["title"] or doc["doc_id"]
        sections = segment_document(doc_blocks, title, seg_cfg, doc.get("n_pages") or None)
        pages = sentence_pages(doc_blocks, sections)
        if cfg.mode == "flat":
            sections, pages = _flat_sections(sections, title, cfg, pages), None
        if not sections:
            n_chars = sum(len(b["text"] or "") for b in doc_blocks)
            _drop(dropped, doc["doc_id"], f"no text left after segmentation ({len(doc_blocks)} block(s), "
                  f"{n_chars} characters; headings, page numbers and running headers are not text)")
            continue
        rows.extend(document_nodes(doc["doc_id"], title, sections, pages))
    return pl.DataFrame(rows, schema=NODES_SCHEMA)


def _insert_figures(by_doc: dict[str, list[dict[str, Any]]], figures: pl.DataFrame) -> None:
    """Each captioned figure after the block it follows; the blocks it stands for (its caption
    paragraph, its labels drawn as text: ``replaces_orders``) leave the tree, since the figure
    paragraph carries the caption line and the description reads the labels."""
    after: dict[str, dict[int, list[dict[str, Any]]]] = {}
    replaced: dict[str, set[int]] = {}
    for f in figures.sort(["doc_id", "figure"]).iter_rows(named=True):
        block = {"doc_id": f["doc_id"], "page": int(f["page"] or 1), "order": None, "kind": "figure",
                 "text": f["text"], "font_size": None, "level": None}
        after.setdefault(f["doc_id"], {}).setdefault(int(f["after_order"]), []).append(block)
        replaced.setdefault(f["doc_id"], set()).update(int(o) for o in (f.get("replaces_orders") or []))
    for doc_id, by_order in after.items():
        doc_blocks = by_doc.get(doc_id)
        if not doc_blocks:  # a document given only as image files: its figures are its text
            by_doc[doc_id] = [x for _, v in sorted(by_order.items()) for x in v]
            continue
        out = list(by_order.get(-1, []))
        last = max(int(b["order"]) for b in doc_blocks)
        gone = replaced.get(doc_id, set())
        for b in doc_blocks:
            if int(b["order"]) not in gone:
                out.append(b)
            out.extend(by_order.get(int(b["order"]), []))
        # an order past the last block (never from the parse stage) goes at the end
        out.extend(x for k, v in sorted(by_order.items()) if k > last for x in v)
        by_doc[doc_id] = out


def _drop(dropped: list[tuple[str, str]] | None, doc_id: str, reason: str) -> None:
    log.warning("document %s: %s; left out of the tree", doc_id, reason)
    if dropped is not None:
        dropped.append((doc_id, reason))


def dropped_problems(dropped: list[tuple[str, str]], documents: pl.DataFrame | None = None,
                     nodes: pl.DataFrame | None = None) -> dict[str, Any]:
    """The run's problem entry for the documents that are not in the tree, every one named with
    its reason: dropped by segmentation (``dropped``) and, given the parse stage's ``documents``
    and the tree's ``nodes``, every documents row without a node (a parse failure's error, a
    file metadata.csv does not list)."""
    reasons = {d: f"left out of the tree: {reason}" for d, reason in dropped}
    total = None
    if documents is not None and nodes is not None:
        in_tree = set(nodes["doc_id"].unique().to_list())
        total = documents.height
        for row in documents.sort("doc_id").iter_rows(named=True):
            doc_id = row["doc_id"]
            if doc_id in in_tree or doc_id in reasons:
                continue
            where = f" ({row['source']})" if row.get("source") else ""
            why = f"not parsed: {row['error']}" if row["status"] == "error" else "no node in the tree"
            reasons[doc_id] = why
            reasons[f"{doc_id}{where}"] = reasons.pop(doc_id)
    items = [f"{d}: {reason}" for d, reason in sorted(reasons.items())]
    entry: dict[str, Any] = {"what": "documents", "count": len(items), "items": items}
    if total is not None:
        entry["headline"] = f"{len(items)} of {total} documents are not in the tree"
    return entry


def corpus_report(nodes: pl.DataFrame) -> dict[str, Any]:
    """Figures that say whether segmentation worked (logged and put in the manifest)."""
    counts = {k: nodes.filter(pl.col("kind") == k).height for k in KINDS}
    sent_len = nodes.filter(pl.col("kind") == "sentence")["text"].str.len_chars()
    para_len = nodes.filter(pl.col("kind") == "paragraph")["text"].str.len_chars().to_list()
    heading_secs = (
        nodes.filter((pl.col("kind") == "section") & (pl.col("section_source") == "heading"))
        .group_by("doc_id").len()
    )
    multi = heading_secs.filter(pl.col("len") > 1).height
    n_docs = max(counts["document"], 1)
    return {
        "n_documents": counts["document"],
        "n_sections": counts["section"],
        "n_paragraphs": counts["paragraph"],
        "n_sentences": counts["sentence"],
        "short_sentence_share": round(float((sent_len < 15).sum()) / max(len(sent_len), 1), 4),
        "median_paragraph_chars": float(statistics.median(para_len)) if para_len else 0.0,
        "multi_section_doc_share": round(multi / n_docs, 4),
    }


def format_report(report: dict[str, Any]) -> str:
    return (
        f"{report['n_documents']} documents, {report['n_sections']} sections, "
        f"{report['n_paragraphs']} paragraphs, {report['n_sentences']} sentences; "
        f"sentences < 15 chars {100 * report['short_sentence_share']:.1f} %, "
        f"median paragraph {report['median_paragraph_chars']:.0f} chars, "
        f"documents with > 1 heading section {100 * report['multi_section_doc_share']:.0f} %"
    )
