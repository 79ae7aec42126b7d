"""Retrieval recall of a run's contexts, per question: did the context hold what answers it?

Two kinds of truth, each optional:

- answer-value evidence (:func:`evaluate`; any task whose solutions give an answer value and
  its documents, WattBot's ``answer_value`` and ``ref_id``): doc recall (a gold ref id is among
  the context's doc_ids) and evidence recall, for answerable questions whose answer value occurs
  verbatim (whitespace collapsed, on token boundaries, so "24" does not match inside "2024") in
  the gold document's text: the context contains it (``evidence``), and contains it inside a
  block of a gold document (``evidence_gold``). True/False questions (kind ``bool``: their value
  0 or 1 is no answer text; any table holds it) are left out of it; ``evidence_all`` keeps them;
- gold evidence by document, page and text (a task's ``gold`` section with a file,
  :func:`kohaku.retrieval.gold.gold_recall`): doc, page, page±1 and evidence-text hits.

:func:`recall_table` joins both into one row per question (the recall stage's table, nulls
where a question has no truth of that kind, with the boolean ``over`` columns saying which
questions each figure is taken over) and :func:`recall_metric` describes it as a metric
(kohaku.tasks.score.components): one component per figure present, the primary one weighted 1
and the others 0, so the sweep reports compare and select retrieval variants question by
question as they do scored runs. :func:`summarise` and :func:`by_kind` are the answer-value
figures' shares (overall and per answer kind).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import polars as pl

from kohaku.core.cells import parse_ref_list
from kohaku.core.config import ConfigError
from kohaku.retrieval.gold import gold_recall, recall_summary
from kohaku.tasks.analysis.slips import answer_kind

@dataclass
class RecallConfig:
    """The ``recall`` config group (the recall stage: the retrieve stage's contexts scored per
    question against the task's gold evidence and the solutions' answer values).

    attempt: the retrieve attempt scored (0: the first contexts). primary: the figure that is the
    run's score in the sweep reports: auto (page_hit when the gold has pages, else text_hit,
    else the answer-value evidence, else doc_hit) or one of page_hit, page_near, text_hit,
    evidence, doc_hit; the others are reported beside it (weight 0). evidence: also score the
    answer values of corpus.solutions (false: the gold file only)."""

    attempt: int = 0          # the retrieve attempt scored (0: the first contexts)
    # the run's score: auto (page_hit with gold pages, else text_hit, else evidence, else
    # doc_hit) or page_hit, page_near, text_hit, evidence, doc_hit
    primary: str = "auto"
    evidence: bool = True     # also score corpus.solutions' answer values (false: the gold file only)

    def validate(self) -> None:
        if self.primary not in PRIMARY:
            raise ConfigError(f"recall.primary={self.primary!r}: use one of {', '.join(PRIMARY)}")
        if self.attempt < 0:
            raise ConfigError(f"recall.attempt={self.attempt}: give 0 (the first contexts) or more")


_WS = re.compile(r"\s+")
BLANK = {"", "is_blank", "na", "n/a"}


def norm_ws(text: str) -> str:
    return _WS.sub(" ", text or "").strip()


def value_pattern(value: str) -> re.Pattern | None:
    """Boundary-aware, whitespace-tolerant pattern for an answer value; None if not usable."""
    v = norm_ws(value)
    if not v or v.lower() in BLANK or v.startswith("["):
        return None
    body = r"\s+".join(re.escape(part) for part in v.split(" "))
    return re.compile(rf"(?<![\w.]){body}(?![\w]|\.\d)")


def doc_texts(nodes: pl.DataFrame) -> dict[str, str]:
    """Document text = its sentences (leaves) in document order, whitespace-normalised."""
    leaves = nodes.filter(pl.col("level") == pl.col("level").max().over("doc_id"))
    out = leaves.group_by("doc_id", maintain_order=True).agg(pl.col("text").str.join(" "))
    return {d: norm_ws(t) for d, t in out.iter_rows()}


def split_blocks(context: str, separator: str = "\n---\n") -> list[tuple[str, str]]:
    """(doc_id, text) for each rendered block ``[ref_id=<doc>] ...``."""
    out = []
    for block in context.split(separator):
        m = re.match(r"\s*\[ref_id=([^\]]+)\]", block)
        out.append((m.group(1) if m else "", block))
    return out


def gold_sentences(nodes: pl.DataFrame, gold: list[str], pat: re.Pattern) -> list[str]:
    """Leaves of the gold documents whose text holds the answer value."""
    leaves = nodes.filter(pl.col("doc_id").is_in(gold)
                          & (pl.col("level") == pl.col("level").max().over("doc_id")))
    return [n for n, t in zip(leaves["node_id"], leaves["text"]) if pat.search(norm_ws(t))]


def evaluate(contexts: pl.DataFrame, solutions: pl.DataFrame, nodes: pl.DataFrame,
             attempt: int = 0, ranking: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per-question retrieval figures for the questions of ``solutions``.

    ``evidence`` counts questions whose value is answer text: True/False questions (value 0 or
    1, which any table or list of numbers holds) are ``kind`` bool and not counted there;
    ``evidence_all`` is the same test over every eligible question, booleans included (the
    definition before this split). With ``ranking`` (the retrieve stage's ranking table),
    ``gold_rank`` is the rank of the first ranked node that is or holds a gold sentence."""
    texts = doc_texts(nodes)
    ctx = {r["qid"]: r for r in contexts.filter(pl.col("attempt") == attempt).iter_rows(named=True)}
    ranked: dict[str, list[str]] = {}
    if ranking is not None:
        r0 = ranking.filter(pl.col("attempt") == attempt).sort(["qid", "rank"])
        ranked = {q: ids for q, ids in r0.group_by("qid", maintain_order=True)
                  .agg(pl.col("node_id")).iter_rows()}
    rows = []
    for sol in solutions.iter_rows(named=True):
        qid = str(sol["id"])
        c = ctx.get(qid)
        gold = parse_ref_list(sol.get("ref_id"))
        value = str(sol.get("answer_value") or "")
        kind = answer_kind(str(sol.get("question") or ""), value)
        pat = value_pattern(value)
        in_gold_doc = bool(pat and gold and any(pat.search(texts.get(g, "")) for g in gold))
        context = norm_ws(c["context"]) if c else ""
        doc_ids = list(c["doc_ids"]) if c else []
        evidence = evidence_gold = None
        gold_rank = None
        if in_gold_doc:
            evidence = bool(pat.search(context))
            gold_blocks = " ".join(norm_ws(b) for d, b in split_blocks(c["context"] if c else "")
                                   if d in gold)
            evidence_gold = bool(pat.search(gold_blocks))
            if ranking is not None:
                sents = gold_sentences(nodes, gold, pat)
                gold_rank = next((i for i, n in enumerate(ranked.get(qid, []))
                                  if any(g == n or g.startswith(n + ".") for g in sents)), None)
        counted = in_gold_doc and kind != "bool"
        rows.append({
            "qid": qid,
            "kind": kind,
            "gold": gold,
            "has_gold": bool(gold),
            "gold_in_corpus": any(g in texts for g in gold),
            "doc_hit": bool(set(gold) & set(doc_ids)) if gold else None,
            "first_gold_rank": min((doc_ids.index(g) for g in gold if g in doc_ids), default=None),
            "answer_value": value,
            "evidence_eligible": counted,
            "evidence": evidence if counted else None,
            "evidence_gold": evidence_gold if counted else None,
            "evidence_all_eligible": in_gold_doc,
            "evidence_all": evidence,
            "gold_rank": gold_rank,
            "n_tokens": int(c["n_tokens"]) if c else 0,
            "n_docs": len(doc_ids),
            "retrieved": c is not None,
        })
    return pl.DataFrame(rows, schema_overrides={"first_gold_rank": pl.Int64, "gold_rank": pl.Int64,
                                                "evidence": pl.Boolean, "evidence_gold": pl.Boolean,
                                                "evidence_all": pl.Boolean, "doc_hit": pl.Boolean})


def _mean(frame: pl.DataFrame, col: str) -> float | None:
    """The share of ``col`` over ``frame`` (4 digits); None for no rows."""
    return round(float(frame[col].cast(pl.Float64).mean() or 0), 4) if frame.height else None


def summarise(per_q: pl.DataFrame) -> dict[str, Any]:
    gold = per_q.filter(pl.col("has_gold"))
    ev = per_q.filter(pl.col("evidence_eligible"))
    ev_all = per_q.filter(pl.col("evidence_all_eligible"))
    out = {
        "questions": per_q.height,
        "with_gold": gold.height,
        "doc_recall": _mean(gold, "doc_hit"),
        "evidence_n": ev.height,
        "evidence_recall": _mean(ev, "evidence"),
        "evidence_gold_recall": _mean(ev, "evidence_gold"),
        "evidence_all_n": ev_all.height,
        "evidence_recall_all": _mean(ev_all, "evidence_all"),
        "mean_tokens": round(float(per_q["n_tokens"].mean() or 0), 1),
        "mean_docs": round(float(per_q["n_docs"].mean() or 0), 2),
    }
    for kind in ("number", "name", "list"):
        k = ev.filter(pl.col("kind") == kind)
        out[f"ev_{kind}"] = _mean(k, "evidence")
    out["doc_bool"] = _mean(gold.filter(pl.col("kind") == "bool"), "doc_hit")
    return out


def by_kind(per_q: pl.DataFrame) -> pl.DataFrame:
    """Per answer kind: questions, doc recall, evidence-eligible questions and recall, and where
    the gold sentence was in the ranking for the misses."""
    return (per_q.group_by("kind").agg(
        pl.len().alias("questions"),
        pl.col("doc_hit").cast(pl.Float64).mean().round(4).alias("doc_recall"),
        pl.col("evidence_all_eligible").sum().alias("evidence_n"),
        pl.col("evidence_all").cast(pl.Float64).mean().round(4).alias("evidence_recall"),
        (pl.col("evidence_all_eligible") & ~pl.col("evidence_all").fill_null(True)).sum().alias("misses"),
        pl.col("gold_rank").filter(~pl.col("evidence_all").fill_null(True)).median().alias("miss_gold_rank_median"),
        (pl.col("gold_rank").is_null() & ~pl.col("evidence_all").fill_null(True)).sum().alias("misses_unranked"),
    ).sort("kind"))




#: the per-question figures a recall table may hold -> the boolean column of the questions each
#: is taken over (the metric component's ``over``), in the order the primary ``auto`` tries them
MEASURES = {"page_hit": "page_gold", "page_near": "page_gold", "text_hit": "text_gold",
            "evidence": "evidence_eligible", "doc_hit": "doc_gold"}
PRIMARY = ("auto", *MEASURES)
_AUTO_ORDER = ("page_hit", "text_hit", "evidence", "doc_hit")


def recall_table(contexts: pl.DataFrame, nodes: pl.DataFrame, qids: list[str],
                 gold: pl.DataFrame | None = None, solutions: pl.DataFrame | None = None,
                 attempt: int = 0, ranking: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per question of ``qids``: the gold figures (:func:`gold_recall`, when ``gold``,
    the rows of :func:`kohaku.retrieval.gold.read_gold`, is given), the answer-value figures
    (:func:`evaluate`, when ``solutions`` with ``id``, ``answer_value``, ``ref_id`` and
    optionally ``question`` is given; its doc hit is ``answer_doc_hit`` beside a gold file's),
    the context's size (``n_tokens``, ``n_docs``), ``with_gold`` (the question has a gold row) and the ``over`` columns of :data:`MEASURES`
    (a question counts for a figure where the figure is not null)."""
    table = pl.DataFrame({"qid": [str(q) for q in qids]}, schema={"qid": pl.String})
    c0 = contexts.filter(pl.col("attempt") == attempt).select(
        pl.col("qid").cast(pl.String), pl.col("n_tokens").cast(pl.Int64),
        pl.col("doc_ids").list.len().cast(pl.Int64).alias("n_docs"))
    table = table.join(c0, on="qid", how="left").with_columns(
        pl.col("n_tokens").is_not_null().alias("retrieved"),
        pl.col("n_tokens").fill_null(0), pl.col("n_docs").fill_null(0))
    if gold is not None:
        per = gold_recall(contexts, nodes, gold, attempt, qids=table["qid"].to_list())
        table = table.join(per.drop("retrieved").with_columns(pl.lit(True).alias("with_gold")),
                           on="qid", how="left").with_columns(pl.col("with_gold").fill_null(False))
    sol = (solutions.filter(pl.col("id").cast(pl.String).is_in(table["qid"].implode()))
           if solutions is not None else None)
    if sol is not None and sol.height:
        ev = evaluate(contexts, sol, nodes, attempt, ranking).select(
            "qid", "kind", pl.col("doc_hit").alias("doc_hit" if gold is None else "answer_doc_hit"),
            "first_gold_rank", "evidence_eligible", "evidence", "evidence_gold", "evidence_all",
            "gold_rank")
        table = table.join(ev, on="qid", how="left").with_columns(
            pl.col("evidence_eligible").fill_null(False))
    overs = {over: m for m, over in reversed(MEASURES.items()) if m in table.columns}
    return table.with_columns(*[pl.col(m).is_not_null().alias(over) for over, m in overs.items()
                                if over not in table.columns])


def primary_measure(table: pl.DataFrame, primary: str = "auto") -> str:
    """The figure a recall table's score is: ``primary``, or for ``auto`` the first of page hit,
    text hit, answer-value evidence and doc hit that some question has. ValueError naming the
    figures present when ``primary`` is not one of them."""
    present = [m for m in MEASURES if m in table.columns and table[m].is_not_null().any()]
    if primary == "auto":
        for m in _AUTO_ORDER:
            if m in present:
                return m
        raise ValueError("recall: no question has gold evidence (task.gold with a file) or an "
                         "answer value found in its gold document (corpus.solutions); nothing to "
                         "score the contexts on")
    if primary not in present:
        raise ValueError(f"recall.primary={primary}: the recall table has no such figure; figures "
                         f"present: {', '.join(present) or 'none'} (or auto)")
    return primary


def recall_metric(table: pl.DataFrame, primary: str) -> dict[str, Any]:
    """The metric entry of a recall table (kohaku.tasks.score.components' JSON): a component per
    figure present, over its questions, ``primary`` weighted 1 and the others 0."""
    comps = [{"name": m, "column": m, "weight": 1.0 if m == primary else 0.0, "over": over,
              "empty": None}
             for m, over in MEASURES.items() if m in table.columns and table[m].is_not_null().any()]
    comps.sort(key=lambda c: c["weight"] == 0)
    return {"name": "recall", "components": comps}


def recall_shares(table: pl.DataFrame, metric: dict[str, Any]) -> dict[str, float | None]:
    """Each component of :func:`recall_metric`'s ``metric``: the mean of its figure over the
    questions it is taken over (None where none is)."""
    out: dict[str, float | None] = {}
    for c in metric["components"]:
        values = table.filter(pl.col(c["over"]))[c["column"]].cast(pl.Float64)
        out[c["name"]] = round(float(values.mean()), 6) if len(values) else None
    return out


def recall_figures(table: pl.DataFrame) -> dict[str, Any]:
    """The shares of a recall table: the gold figures (:func:`recall_summary`), the answer-value
    ones (``evidence_recall``, ``evidence_gold_recall``, their counts) and the context's mean
    size."""
    out: dict[str, Any] = {"questions": table.height}
    if "with_gold" in table.columns:
        out.update(recall_summary(table.filter(pl.col("with_gold"))))
    elif "doc_hit" in table.columns:
        d = table["doc_hit"].drop_nulls().cast(pl.Float64)
        out.update(doc_recall=round(float(d.mean()), 4) if len(d) else None, doc_n=len(d))
    if "evidence" in table.columns:
        ev = table.filter(pl.col("evidence_eligible"))
        out.update(evidence_n=ev.height, evidence_recall=_mean(ev, "evidence"),
                   evidence_gold_recall=_mean(ev, "evidence_gold"))
    out.update(mean_tokens=round(float(table["n_tokens"].mean() or 0), 1),
               mean_docs=round(float(table["n_docs"].mean() or 0), 2))
    return out
