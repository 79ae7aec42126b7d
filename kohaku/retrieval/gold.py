"""Gold evidence for retrieval evaluation: which documents, pages and passages answer a question.

A task's ``gold`` section (:class:`GoldSpec`) names a file of gold evidence (CSV or JSONL, by
extension, relative to ``corpus.root``) and its columns. :func:`read_gold` reads it into one
row per (question, document) evidence item: ``qid``, ``doc_id``, ``page`` (1-based, as kohaku's
pages are; null where the file has no page), ``text`` (null where it has none) and ``row``
(the item's row in the file, for messages). :func:`check_gold_pages` checks the pages against
the parse stage's ``documents`` table.

Recall of the retrieve stage's ``contexts`` (:func:`gold_recall`, one row per question with
gold; :func:`recall_summary` the shares):

- doc recall: a gold document is among the context's ``doc_ids``;
- page recall: a gold (document, page) is among the pages of the context's nodes, every node
  expanded to its leaves (a sentence's page is the page it starts on); ``page_near``: within one
  page (either side); ``page_items``: the share of a question's gold pages found;
- evidence-text recall: a gold evidence text is contained in the context, by
  :func:`text_containment` >= :data:`CONTAINMENT`; ``text_ceiling`` is the share of questions
  whose gold text is contained in the whole parsed gold document (a table whose labels and
  values the parse reads as separate columns is not), the most text recall can reach.

Text containment is the share of the evidence's distinct character 8-grams, after folding both
texts to lower-case letters and digits only (NFKC; spaces, punctuation and line breaks dropped),
that occur in the context. Why characters without spaces rather than word tokens: the gold text
and kohaku's parse come from different PDF extractors, which disagree on spacing ("Cash Flow s"
against "Cash Flows"), hyphenation, punctuation around numbers ("$ (1,577)" against "(1,577)")
and where table cells break; these change word tokens but not the letters and digits in reading
order. A window of 8 characters spans more than one short word or number, so common words and
small numbers scattered over a context do not add up to a match the way a bag of word tokens
does; requiring 0.8 of them (not 1.0) leaves room for the parts one extractor keeps and the
other drops (page headers, a cell read in another order).
"""

from __future__ import annotations

import logging
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import polars as pl

from kohaku.core import readfile
from kohaku.core.csvfile import read_csv_strings
from kohaku.core.errors import KohakuError
from kohaku.core.cells import parse_ref_list

log = logging.getLogger("kohaku.retrieve")

CONTAINMENT = 0.8  # evidence-text recall: share of the evidence's 8-grams found in the context
NGRAM = 8
GOLD_SCHEMA = {"qid": pl.String, "doc_id": pl.String, "page": pl.Int64, "text": pl.String,
               "row": pl.Int64}
_BLANK = {"", "is_blank", "na", "n/a", "none", "null", "nan"}


class GoldError(KohakuError, ValueError):
    """The gold evidence file is missing or malformed; the message names file, row and column."""


class GoldFileNotFound(GoldError, FileNotFoundError):
    """The gold evidence file does not exist."""


@dataclass
class GoldSpec:
    file: str | None = None      # gold evidence file (csv or jsonl, by extension), relative to corpus.root; None: no page gold
    qid: str = "id"              # question id column
    doc: str | None = "ref_id"   # document id column (a cell may hold a list like ['a','b'])
    page: str | None = None      # page column
    page_base: int = 1           # 0 when the file counts pages from 0 (FinanceBench); kohaku's pages are 1-based
    text: str | None = None      # evidence text column


def gold_path(spec: GoldSpec, root: str | Path) -> Path | None:
    """The gold file: absolute as is, else under ``root`` (corpus.root); None when unset."""
    if not spec.file:
        return None
    path = Path(spec.file).expanduser()
    return path if path.is_absolute() else Path(root) / path


def _records(path: Path) -> tuple[list[dict[str, Any]], list[str], str]:
    """(rows, columns, what a row is called in messages) of a CSV or JSONL file."""
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        rows: list[dict[str, Any]] = []
        columns: list[str] = []
        text = readfile.read_text(path, "gold evidence", GoldError, GoldFileNotFound)
        for i, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            obj = readfile.load_json(line, path, "gold evidence", GoldError, where=f"line {i}",
                                     hint="; fix the line")
            if not isinstance(obj, dict):
                raise GoldError(f"{path}: line {i} is not a JSON object")
            obj["__row"] = i
            rows.append(obj)
            columns.extend(k for k in obj if k not in columns and k != "__row")
        return rows, columns, "line"
    df = read_csv_strings(path, "gold evidence", GoldError, None, GoldFileNotFound)
    rows = [dict(r, __row=i) for i, r in enumerate(df.iter_rows(named=True), start=1)]
    return rows, df.columns, "row"


def parse_doc_list(value: Any) -> list[str]:
    """Document ids of a cell: a list, ``['a','b']``, ``a,b`` or one id (the ref-list reader,
    kohaku.core.cells.parse_ref_list); blanks and ``none``/``null``/``nan`` dropped."""
    return [x for x in parse_ref_list(value) if x.lower() not in _BLANK]


def read_gold(spec: GoldSpec, root: str | Path) -> pl.DataFrame:
    """The gold evidence of ``spec`` as (qid, doc_id, page 1-based or null, text or null, row):
    one row per (question, document) item; rows naming no document, page or text are left out.
    Errors name the file, the row (CSV: data rows from 1; JSONL: lines) and the column."""
    path = gold_path(spec, root)
    if path is None:
        return pl.DataFrame(schema=GOLD_SCHEMA)
    if not path.is_file():
        raise GoldFileNotFound(f"{path}: gold evidence file not found (task.gold.file, relative to "
                               "corpus.root); fix the path or set task.gold.file=null")
    rows, columns, unit = _records(path)
    wanted = {"qid": spec.qid, "doc": spec.doc, "page": spec.page, "text": spec.text}
    missing = [f"{col!r} (task.gold.{key})" for key, col in wanted.items()
               if col is not None and col not in columns]
    if missing:
        raise GoldError(f"{path}: gold evidence lacks column(s) {', '.join(missing)}; found "
                        f"{columns}. Name the file's columns in the task's gold section.")
    out: list[tuple] = []
    for r in rows:
        where = f"{path}: {unit} {r['__row']}"
        qid = str(r.get(spec.qid) if r.get(spec.qid) is not None else "").strip()
        if not qid:
            raise GoldError(f"{where}: empty question id in column {spec.qid!r}")
        page = None
        if spec.page is not None:
            page = _page(r.get(spec.page), spec, where)
        text = None
        if spec.text is not None:
            raw = r.get(spec.text)
            text = str(raw) if raw is not None and str(raw).strip() else None
        docs: list[str | None] = parse_doc_list(r.get(spec.doc)) if spec.doc else []
        if not docs:
            if page is not None:
                raise GoldError(f"{where}: page {r.get(spec.page)!r} but no document in column "
                                f"{spec.doc!r}; a page needs its document")
            if text is None:
                continue
            docs = [None]
        out.extend((qid, d, page, text, int(r["__row"])) for d in docs)
    return pl.DataFrame(out, schema=GOLD_SCHEMA, orient="row")


def _page(value: Any, spec: GoldSpec, where: str) -> int | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in _BLANK):
        return None
    try:
        number = float(value)
        if not abs(number) < 1e9 or number != int(number):   # NaN, Infinity, no page of a document
            raise ValueError
        page = int(number)
    except (TypeError, ValueError):
        raise GoldError(f"{where}: page {value!r} in column {spec.page!r} is not a whole number")
    if page < spec.page_base:
        raise GoldError(f"{where}: page {page} in column {spec.page!r} is below the first page "
                        f"{spec.page_base} (task.gold.page_base); set page_base to how the file "
                        "counts pages (0 or 1)")
    return page - spec.page_base + 1


def check_gold_pages(gold: pl.DataFrame, documents: pl.DataFrame, file: str | Path = "gold",
                     page_base: int = 1) -> None:
    """Every gold page lies inside its document (the parse stage's ``n_pages``); raises GoldError
    naming the file, row, document and its page count. Documents that are not in ``documents``
    or have no page count (Markdown, text) are not checked."""
    if not gold.height or "page" not in gold.columns:
        return
    counts = {d: n for d, n in zip(documents["doc_id"], documents["n_pages"]) if n}
    for r in gold.filter(pl.col("page").is_not_null()).iter_rows(named=True):
        n = counts.get(r["doc_id"])
        if n is not None and r["page"] > n:
            shown = r["page"] - 1 + page_base
            raise GoldError(
                f"{file}: row {r.get('row')}: page {shown} of document {r['doc_id']!r} is outside "
                f"the document, which has {n} page(s) (pages counted from {page_base}); check "
                "the page column and task.gold.page_base")


# ------------------------------------------------------------------------------ text matching

_NOT_ALNUM = re.compile(r"[^0-9a-z]+")


def fold(text: str) -> str:
    """Lower-case letters and digits only (NFKC first), the form texts are compared in."""
    return _NOT_ALNUM.sub("", unicodedata.normalize("NFKC", text or "").lower())


def ngrams(folded: str, n: int = NGRAM) -> set[str]:
    if len(folded) <= n:
        return {folded} if folded else set()
    return {folded[i:i + n] for i in range(len(folded) - n + 1)}


def text_containment(evidence: str, context: str | set[str], n: int = NGRAM) -> float:
    """Share of the evidence's distinct character ``n``-grams (folded: :func:`fold`) that occur
    in ``context`` (a text, or its n-gram set from :func:`ngrams`); 0.0 for an empty evidence.
    An evidence shorter than ``n`` characters counts as contained when it occurs as a substring."""
    ev = fold(evidence)
    if not ev:
        return 0.0
    if isinstance(context, str):
        ctx_fold = fold(context)
        if len(ev) <= n:
            return 1.0 if ev in ctx_fold else 0.0
        context = ngrams(ctx_fold, n)
    grams = ngrams(ev, n)
    return sum(1 for g in grams if g in context) / len(grams)


# ------------------------------------------------------------------------------------ recall


def node_pages(nodes: pl.DataFrame) -> dict[str, set[int]]:
    """node_id -> the pages of its leaves (a leaf: its own page)."""
    has_kids = set(nodes["parent_id"].drop_nulls().to_list())
    leaves = nodes.filter(~pl.col("node_id").is_in(list(has_kids)) & pl.col("page").is_not_null())
    out: dict[str, set[int]] = {}
    for node_id, page in zip(leaves["node_id"], leaves["page"]):
        out.setdefault(node_id, set()).add(int(page))
        cut = node_id
        while True:  # the ancestors are the id's prefixes at '.' and '#'
            i = max(cut.rfind("."), cut.rfind("#"))
            if i <= 0:
                break
            cut = cut[:i]
            out.setdefault(cut, set()).add(int(page))
    return out


def gold_recall(contexts: pl.DataFrame, nodes: pl.DataFrame, gold: pl.DataFrame,
                attempt: int = 0, qids: Iterable[str] | None = None) -> pl.DataFrame:
    """Per question with gold (restricted to ``qids`` when given): its gold docs, pages and texts
    and whether the context of ``attempt`` holds them: ``doc_hit``, ``page_hit``, ``page_near``
    (a context page within one of a gold page), ``page_items`` (share of the gold pages found),
    ``text_hit`` (a gold text contained, :func:`text_containment` >= :data:`CONTAINMENT`) and
    ``text_best`` (the highest containment), and ``text_in_doc``: a gold text is contained in
    its gold document's whole parsed text (the leaves in order), the ceiling of text recall that
    the parse allows. Null where the question has no gold of that kind."""
    ctx = {r["qid"]: r for r in contexts.filter(pl.col("attempt") == attempt)
           .select("qid", "context", "doc_ids", "node_ids").iter_rows(named=True)}
    want = set(qids) if qids is not None else None
    pages_of = node_pages(nodes) if gold["page"].is_not_null().any() else {}
    in_doc = _text_in_docs(nodes, gold, want)
    rows = []
    for (qid,), g in gold.group_by("qid", maintain_order=True):
        if want is not None and qid not in want:
            continue
        c = ctx.get(qid)
        docs = sorted({d for d in g["doc_id"].to_list() if d is not None})
        pairs = sorted({(d, p) for d, p in zip(g["doc_id"], g["page"]) if d is not None and p is not None})
        texts = [t for t in dict.fromkeys(g["text"].to_list()) if t]
        doc_ids = set(c["doc_ids"]) if c else set()
        got: set[tuple[str, int]] = set()
        if c and pairs:
            for node_id in c["node_ids"]:
                doc = node_id.split("#", 1)[0]
                got.update((doc, p) for p in pages_of.get(node_id, ()))
        found = [pair in got for pair in pairs]
        near = [any((d, p + k) in got for k in (-1, 0, 1)) for d, p in pairs]
        best = None
        if texts:
            grams = ngrams(fold(c["context"])) if c else set()
            folded = fold(c["context"]) if c else ""
            best = max(_contained(t, grams, folded) for t in texts)
        rows.append({
            "qid": qid, "gold_docs": docs, "gold_pages": [f"{d}:{p}" for d, p in pairs],
            "retrieved": c is not None,
            "doc_hit": bool(doc_ids & set(docs)) if docs else None,
            "page_hit": any(found) if pairs else None,
            "page_near": any(near) if pairs else None,
            "page_items": sum(found) / len(found) if pairs else None,
            "text_hit": best >= CONTAINMENT if best is not None else None,
            "text_best": round(best, 4) if best is not None else None,
            "text_in_doc": in_doc.get(qid),
        })
    schema = {"qid": pl.String, "gold_docs": pl.List(pl.String), "gold_pages": pl.List(pl.String),
              "retrieved": pl.Boolean, "doc_hit": pl.Boolean, "page_hit": pl.Boolean,
              "page_near": pl.Boolean, "page_items": pl.Float64, "text_hit": pl.Boolean,
              "text_best": pl.Float64, "text_in_doc": pl.Boolean}
    return pl.DataFrame(rows, schema=schema)


def _text_in_docs(nodes: pl.DataFrame, gold: pl.DataFrame, want: set[str] | None) -> dict[str, bool]:
    """qid -> whether a gold text of the question is contained in its gold document's text."""
    items = gold.filter(pl.col("text").is_not_null() & pl.col("doc_id").is_not_null())
    if want is not None:
        items = items.filter(pl.col("qid").is_in(list(want)))
    if not items.height:
        return {}
    leaves = nodes.filter(pl.col("doc_id").is_in(items["doc_id"].unique().to_list())
                          & ~pl.col("node_id").is_in(nodes["parent_id"].drop_nulls().unique().to_list()))
    out: dict[str, bool] = {}
    for (doc,), texts in leaves.group_by("doc_id", maintain_order=True):
        folded = fold(" ".join(texts["text"].fill_null("").to_list()))
        grams = ngrams(folded)
        for qid, text in items.filter(pl.col("doc_id") == doc).select("qid", "text").iter_rows():
            out[qid] = out.get(qid, False) or _contained(text, grams, folded) >= CONTAINMENT
    for qid in items["qid"].unique().to_list():
        out.setdefault(qid, False)
    return out


def _contained(text: str, grams: set[str], folded_context: str) -> float:
    ev = fold(text)
    if not ev:
        return 0.0
    if len(ev) <= NGRAM:
        return 1.0 if ev in folded_context else 0.0
    return text_containment(text, grams)


def recall_summary(per_q: pl.DataFrame) -> dict[str, Any]:
    """Shares over the questions with that kind of gold (null when none has it), with counts."""
    def share(col: str) -> float | None:
        s = per_q[col].drop_nulls().cast(pl.Float64)
        return round(float(s.mean()), 4) if len(s) else None

    def count(col: str) -> int:
        return int(per_q[col].drop_nulls().len())

    return {
        "gold_questions": per_q.height,
        "doc_recall": share("doc_hit"), "doc_n": count("doc_hit"),
        "page_recall": share("page_hit"), "page_near_recall": share("page_near"),
        "page_item_recall": share("page_items"), "page_n": count("page_hit"),
        "text_recall": share("text_hit"), "text_n": count("text_hit"),
        "text_ceiling": share("text_in_doc"),
    }


def gold_summary(contexts: pl.DataFrame, nodes: pl.DataFrame, gold: pl.DataFrame,
                 attempt: int = 0, qids: Iterable[str] | None = None) -> dict[str, Any]:
    """:func:`recall_summary` of :func:`gold_recall`, keys prefixed ``gold_`` (for a summary)."""
    figures = recall_summary(gold_recall(contexts, nodes, gold, attempt, qids))
    return {f"gold_{k}" if not k.startswith("gold_") else k: v for k, v in figures.items()}


def gold_figures(spec: GoldSpec, root: str | Path, contexts: pl.DataFrame, nodes: pl.DataFrame,
                 documents: pl.DataFrame, qids: Iterable[str]) -> dict[str, Any]:
    """The retrieve stage's gold figures (:func:`gold_summary`) from the task's gold file: {}
    with a warning when the file is missing (evaluation only: retrieval goes on); a gold page
    outside its document raises (file, row, document, its page count)."""
    path = gold_path(spec, root)
    if path is None or not path.is_file():
        log.warning("task.gold.file %s not found; no gold recall", path)
        return {}
    gold = read_gold(spec, root)
    check_gold_pages(gold, documents, path, spec.page_base)
    figures = gold_summary(contexts, nodes, gold, qids=qids)
    log.info("gold evidence (%s): %s", spec.file, figures)
    return figures
