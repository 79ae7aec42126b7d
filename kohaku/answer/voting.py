"""Voting: abstention-aware majority vote over the samples of each question.

KohakuRAG (kohaku_spec.md §7) votes on exact ``answer_value`` strings, copies the whole output
row from one run (so answer/explanation/ref_url can disagree with the voted refs) and checks
the ``blank`` tie-break before dropping blanks. Here:

- values are grouped by their canonical form (``kohaku.core.values.same``: "1,000" = "1000.0" =
  "1e3"); ``vote.canonical=false`` restores raw-string voting for ablations;
- with ``ignore_blank`` blanks are dropped whenever any sample answers;
- refs come only from the samples that agree with the winner (``ref_mode``);
- the output row is consistent: answer and explanation come from an agreeing sample holding
  the chosen refs, ``ref_url`` is rebuilt from the parse stage's ``documents`` table;
- ``agreement`` (winner weight / all weight) is kept for calibration.

The voting core :func:`vote` is a pure function over a long table of candidates
(qid, source_idx, answer_value, ref_id list, answer, explanation, is_blank); the same function
serves ``scripts/ensemble.py`` (sources = submission files instead of samples).
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import polars as pl

from kohaku.core.config import ConfigError
from kohaku.core.cells import parse_ref_list
from kohaku.core.values import BLANK, BLANK_ANSWER, Canonical, is_blank_value
from kohaku.tasks.grouping import CANONICAL_GROUPING, Grouping
from kohaku.tasks.spec import KindsSpec, VoteSpec

log = logging.getLogger("kohaku.vote")

REF_MODES = ("answer_priority", "union", "intersection", "majority")
TIEBREAKS = ("first", "priority", "random", "blank")
CANDIDATE_COLUMNS = ("qid", "source_idx", "answer_value", "ref_id", "answer", "explanation", "is_blank")


@dataclass
class VoteConfig:
    n_samples: int | None = None  # use the first n samples per question (None: all)
    ignore_blank: bool = True  # drop blank samples when any sample answers
    ref_mode: str = "answer_priority"  # answer_priority | union | intersection | majority
    tiebreak: str = "first"  # first | priority | random | blank
    weights: list[float] | None = None  # vote weight per source_idx (None: all 1)
    seed: int = 0  # for tiebreak=random (drawn per question from sha256(seed, qid))
    canonical: bool = True  # vote on canonical values; false = raw strings (KohakuRAG)

    def validate(self) -> None:
        if self.ref_mode not in REF_MODES:
            raise ConfigError(f"vote.ref_mode='{self.ref_mode}'; use one of {', '.join(REF_MODES)}")
        if self.tiebreak not in TIEBREAKS:
            raise ConfigError(f"vote.tiebreak='{self.tiebreak}'; use one of {', '.join(TIEBREAKS)}")
        if self.n_samples is not None and int(self.n_samples) < 1:
            raise ConfigError(f"vote.n_samples={self.n_samples}; use a positive integer or null")
        if self.weights is not None:
            if any(float(w) < 0 for w in self.weights):
                raise ConfigError(f"vote.weights={self.weights}: weights must be >= 0")


@dataclass
class _Cand:
    pos: int
    source: int
    weight: float
    raw: str
    value: Any
    refs: list[str]
    row: dict[str, Any]
    blank: bool


def _matches(a: _Cand, b: _Cand, use_canonical: bool, grouping: Grouping) -> bool:
    if a.blank or b.blank:
        return a.blank and b.blank
    if use_canonical:
        return grouping.same(a.value, b.value)
    return a.raw == b.raw


def _seeded_rng(seed: int, qid: str) -> random.Random:
    digest = hashlib.sha256(f"{seed}:{qid}".encode()).hexdigest()
    return random.Random(int(digest[:16], 16))


def _choose_refs(members: list[_Cand], mode: str) -> tuple[list[str], bool]:
    """(refs, fell_back) for the agreeing members, in first-occurrence order."""
    with_refs = [m for m in members if m.refs] or members

    def majority_set() -> list[str]:
        weights: dict[frozenset[str], float] = {}
        first: dict[frozenset[str], list[str]] = {}
        for m in with_refs:
            key = frozenset(m.refs)
            weights[key] = weights.get(key, 0.0) + m.weight
            first.setdefault(key, m.refs)
        best = max(weights.values())
        for key, refs in first.items():  # dict order = first occurrence: ties go to the first
            if abs(weights[key] - best) <= 1e-9:
                return list(refs)
        return []  # pragma: no cover

    if mode == "answer_priority":
        return majority_set(), False
    ordered: list[str] = []
    for m in with_refs:
        ordered.extend(r for r in m.refs if r not in ordered)
    if mode == "union":
        return ordered, False
    if mode == "intersection":
        common = set(with_refs[0].refs)
        for m in with_refs[1:]:
            common &= set(m.refs)
        if common:
            return [r for r in ordered if r in common], False
        return majority_set(), True
    # majority: ids cited by more than half of the agreeing weight; else the most cited ids
    total = sum(m.weight for m in with_refs)
    count = {r: sum(m.weight for m in with_refs if r in m.refs) for r in ordered}
    chosen = [r for r in ordered if count[r] > total / 2]
    if not chosen and count:
        best = max(count.values())
        chosen = [r for r in ordered if abs(count[r] - best) <= 1e-9]
    return chosen, False


def _vote_one(qid: str, cands: list[_Cand], cfg: VoteConfig, extra: dict[str, Any],
              grouping: Grouping, keep_surface: bool) -> dict[str, Any]:
    total = sum(c.weight for c in cands)
    n_blank = sum(c.blank for c in cands)
    pool = cands
    if cfg.ignore_blank and any(not c.blank for c in cands):
        pool = [c for c in cands if not c.blank]
    groups: list[list[_Cand]] = []
    for c in pool:
        for g in groups:
            if _matches(g[0], c, cfg.canonical, grouping):
                g.append(c)
                break
        else:
            groups.append([c])
    weight = [sum(m.weight for m in g) for g in groups]
    best = max(weight)
    tied = [g for g, w in zip(groups, weight) if abs(w - best) <= 1e-9]
    winner: list[_Cand] | None = tied[0]
    if len(tied) > 1:
        if cfg.tiebreak == "priority":
            winner = max(tied, key=lambda g: max(m.weight for m in g))  # max keeps the first on ties
        elif cfg.tiebreak == "random":
            winner = _seeded_rng(cfg.seed, qid).choice(tied)
        elif cfg.tiebreak == "blank":
            winner = None
    agreement = (best / total) if total > 0 else 0.0
    base = {"qid": qid, "agreement": agreement, "n_votes": len(cands), "n_blank": n_blank}
    if winner is None or winner[0].blank:
        rep = winner[0] if winner else cands[0]
        out = {
            **base,
            "answer": BLANK_ANSWER,
            "answer_value": BLANK,
            "ref_id": [],
            "explanation": BLANK,
            "is_blank": True,
            "source_idx": rep.source if winner else None,
            "ref_fallback": False,
        }
        out.update({k: BLANK if dtype == pl.String else None for k, dtype in extra.items()})
        return out
    refs, fell_back = _choose_refs(winner, cfg.ref_mode)
    rep = next((m for m in winner if set(m.refs) == set(refs)), None)
    rep = rep or next((m for m in winner if m.refs), winner[0])
    value = grouping.render(rep.value, rep.raw) if cfg.canonical and not keep_surface else rep.raw
    out = {
        **base,
        "answer": str(rep.row.get("answer") or "").strip(),
        "answer_value": value,
        "ref_id": refs,
        "explanation": str(rep.row.get("explanation") or "").strip(),
        "is_blank": False,
        "source_idx": rep.source,
        "ref_fallback": fell_back,
    }
    out.update({k: rep.row.get(k) for k in extra})
    return out


ANSWER_SCHEMA: dict[str, Any] = {
    "qid": pl.String,
    "answer": pl.String,
    "answer_value": pl.String,
    "ref_id": pl.List(pl.String),
    "explanation": pl.String,
    "is_blank": pl.Boolean,
    "agreement": pl.Float64,
    "n_votes": pl.Int64,
    "n_blank": pl.Int64,
    "source_idx": pl.Int64,
    "ref_fallback": pl.Boolean,
}


@dataclass(frozen=True)
class TaskVote:
    """How a task votes its answers: its grouping (``task.vote.group``), each question's grouping
    from its answer kind (``by_qid``), whether the winner keeps its surface form, and the fallback
    that fills a blank answer of a task that never abstains. The vote stage and
    ``scripts/ensemble.py`` both build it with :func:`task_vote`, so they vote alike."""

    grouping: Grouping
    keep_surface: bool
    by_qid: Mapping[str, Grouping]
    fallback: str | None


def task_vote(spec: VoteSpec, answer_kinds: KindsSpec, questions: pl.DataFrame, abstention: str,
              fallback: str | None) -> TaskVote:
    """The task's vote (:class:`TaskVote`); ``questions`` need ``qid`` and, with answer kinds, the
    kinds column (errors name the row of a kind the task lacks)."""
    from kohaku.tasks import kinds
    from kohaku.tasks.named import registry

    grouping = registry.lookup("group", spec.group, "task.vote.group")(spec)
    return TaskVote(grouping, spec.keep_surface, kinds.groupings(questions, answer_kinds, spec.tolerance),
                    fallback if abstention == "never" else None)


def vote(candidates: pl.DataFrame, cfg: VoteConfig | None = None, grouping: Grouping = CANONICAL_GROUPING,
         keep_surface: bool = False, by_qid: Mapping[str, Grouping] | None = None) -> pl.DataFrame:
    """Vote over a long table of candidate answers; one output row per qid (first-seen order).

    ``grouping`` says which values are the same answer (the task's ``vote.group``; WattBot's
    canonical values by default); ``by_qid`` overrides it per question (the grouping of each
    question's answer kind, kohaku.tasks.kinds); ``keep_surface`` writes the winner as a sample
    wrote it.

    candidates: qid str, source_idx int (priority order: lower first), answer_value str,
    ref_id list[str] (or a ref string), answer str, explanation str, is_blank bool. Extra
    columns are copied from the representative (agreeing) candidate.
    A candidate is blank if ``is_blank`` is set or its value is a blank token.
    """
    cfg = cfg or VoteConfig()
    cfg.validate()
    missing = [c for c in CANDIDATE_COLUMNS if c not in candidates.columns]
    if missing:
        raise ConfigError(f"vote: candidate table lacks column(s) {missing}; has {candidates.columns}")
    extra = {
        c: candidates.schema[c]
        for c in candidates.columns
        if c not in CANDIDATE_COLUMNS and c not in ANSWER_SCHEMA
    }
    by_qid = by_qid or {}
    cands_of: dict[str, list[_Cand]] = {}
    for pos, row in enumerate(candidates.to_dicts()):
        src = int(row["source_idx"])
        if cfg.weights is not None:
            if not 0 <= src < len(cfg.weights):
                raise ConfigError(
                    f"vote.weights has {len(cfg.weights)} entries but source_idx {src} occurs "
                    f"(qid '{row['qid']}'); give one weight per source"
                )
            weight = float(cfg.weights[src])
        else:
            weight = 1.0
        raw = str(row["answer_value"] if row["answer_value"] is not None else "").strip()
        qid = str(row["qid"])
        group = by_qid.get(qid, grouping)
        value = group.parse(raw)
        refs = parse_ref_list(row["ref_id"])
        blank = bool(row["is_blank"]) or group.blank_raw(raw) or (cfg.canonical and group.blank_parsed(value))
        cands_of.setdefault(qid, []).append(
            _Cand(pos, src, weight, raw, value, refs, row, blank)
        )
    rows = []
    for qid, cands in cands_of.items():
        cands.sort(key=lambda c: (c.source, c.pos))
        rows.append(_vote_one(qid, cands, cfg, extra, by_qid.get(qid, grouping), keep_surface))
    schema = dict(ANSWER_SCHEMA)
    schema.update(extra)
    if not rows:
        return pl.DataFrame(schema=schema)
    return pl.DataFrame(rows, schema=schema)


# ---------------------------------------------------------------------------------------------
# from the infer stage's generations to answers


def generations_to_candidates(generations: pl.DataFrame, n_samples: int | None) -> pl.DataFrame:
    """Candidates from the infer stage: per qid the last attempt only, first ``n_samples``."""
    need = ("qid", "attempt", "sample_idx", "answer_value", "ref_id", "answer", "explanation", "is_blank")
    missing = [c for c in need if c not in generations.columns]
    if missing:
        raise ConfigError(f"infer/generations lacks column(s) {missing}; has {generations.columns}")
    g = generations
    valid = pl.col("valid").fill_null(False) if "valid" in g.columns else pl.lit(True)
    g = g.filter(pl.col("attempt") == pl.col("attempt").max().over("qid"))
    g = g.sort(["qid", "sample_idx"])
    if n_samples is not None:
        g = g.filter(pl.int_range(pl.len()).over("qid") < int(n_samples))
    keep = [c for c in ("supporting_materials", "fields") if c in g.columns]
    return g.select(
        pl.col("qid").cast(pl.String),
        pl.col("sample_idx").cast(pl.Int64).alias("source_idx"),
        pl.col("answer_value").cast(pl.String).fill_null(""),
        pl.col("ref_id").fill_null([]),
        pl.col("answer").cast(pl.String).fill_null(""),
        pl.col("explanation").cast(pl.String).fill_null(""),
        (pl.col("is_blank").fill_null(True) | ~valid).alias("is_blank"),
        *[pl.col(c).cast(pl.String) for c in keep],
    )


def finalize_answers(
    voted: pl.DataFrame, questions: pl.DataFrame, documents: pl.DataFrame
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Answers in question order with answer_unit, ref_url and supporting_materials filled.

    Questions without candidates become blank rows (n_votes 0). Ref ids that are not in the
    documents table keep their place in ref_id but get no ref_url.
    """
    urls = dict(zip(documents["doc_id"].to_list(), documents["url"].to_list()))
    titles = (
        dict(zip(documents["doc_id"].to_list(), documents["title"].to_list()))
        if "title" in documents.columns
        else {}
    )
    by_qid = {r["qid"]: r for r in voted.to_dicts()}
    rows = []
    unknown: set[str] = set()
    n_unanswered = 0
    has_unit = "answer_unit" in questions.columns
    with_fields = "fields" in voted.columns      # the answer's fields as JSON (kohaku.tasks writers)
    for q in questions.select("qid", *(["answer_unit"] if has_unit else [])).to_dicts():
        a = by_qid.get(q["qid"])
        if a is None:
            n_unanswered += 1
            a = {
                "qid": q["qid"], "answer": BLANK_ANSWER, "answer_value": BLANK, "ref_id": [],
                "explanation": BLANK, "is_blank": True, "agreement": 0.0, "n_votes": 0,
                "n_blank": 0, "source_idx": None, "ref_fallback": False,
            }
        refs = list(a["ref_id"] or [])
        ref_url = [urls[r] for r in refs if r in urls and urls[r]]
        unknown.update(r for r in refs if r not in urls)
        support = a.get("supporting_materials")
        if a["is_blank"]:
            support = BLANK
        elif not support or is_blank_value(support):
            names = [str(titles.get(r) or "").strip() for r in refs if titles.get(r)]
            support = " | ".join(names) if names else BLANK
        rows.append(
            {
                "qid": q["qid"],
                "answer": a["answer"],
                "answer_value": a["answer_value"],
                "answer_unit": q["answer_unit"] if has_unit and q["answer_unit"] else BLANK,
                "ref_id": refs,
                "ref_url": ref_url,
                "supporting_materials": support,
                "explanation": a["explanation"],
                "is_blank": bool(a["is_blank"]),
                "agreement": float(a["agreement"]),
                "n_votes": int(a["n_votes"]),
                "n_blank": int(a["n_blank"]),
                "source_idx": a["source_idx"],
                "ref_fallback": bool(a["ref_fallback"]),
                **({"fields": a.get("fields") or "{}"} if with_fields else {}),
            }
        )
    schema = {
        "qid": pl.String, "answer": pl.String, "answer_value": pl.String, "answer_unit": pl.String,
        "ref_id": pl.List(pl.String), "ref_url": pl.List(pl.String), "supporting_materials": pl.String,
        "explanation": pl.String, "is_blank": pl.Boolean, "agreement": pl.Float64,
        "n_votes": pl.Int64, "n_blank": pl.Int64, "source_idx": pl.Int64, "ref_fallback": pl.Boolean,
        **({"fields": pl.String} if with_fields else {}),
    }
    answers = pl.DataFrame(rows, schema=schema) if rows else pl.DataFrame(schema=schema)
    stats = {"n_unanswered": n_unanswered, "unknown_refs": sorted(unknown)}
    return answers, stats


def fill_fields(answers: pl.DataFrame, value_field: str) -> pl.DataFrame:
    """Each answer's ``fields`` as a JSON object that holds the voted value under the task's
    value field (and the row's answer and explanation where the fields have them); a blank or
    fallback row (no sample's fields, or the blank marker) gets ``{answer, explanation,
    value_field}``, so a writer finds every field it may name."""
    if "fields" not in answers.columns:
        return answers
    out = []
    for r in answers.select("fields", "answer_value", "answer", "explanation").iter_rows(named=True):
        try:
            fields = json.loads(r["fields"] or "{}")
        except ValueError:   # the blank marker of a blank winner
            fields = None
        own = isinstance(fields, dict) and bool(fields)
        fields = fields if own else {}
        for key in ("answer", "explanation"):
            if key in fields or not own:
                fields[key] = r[key]
        fields[value_field] = r["answer_value"]     # the voted value (rendered, or the fallback)
        out.append(json.dumps(fields, ensure_ascii=False))
    return answers.with_columns(pl.Series("fields", out, dtype=pl.String))


def never_blank(answers: pl.DataFrame, fallback: str) -> pl.DataFrame:
    """Answers of a task that never abstains: a blank row (no sample gave a valid value, or the
    question had no generations) gets ``fallback`` as its value and answer."""
    blank = pl.col("is_blank")
    return answers.with_columns(
        pl.when(blank).then(pl.lit(fallback)).otherwise(pl.col("answer_value")).alias("answer_value"),
        pl.when(blank).then(pl.lit(fallback)).otherwise(pl.col("answer")).alias("answer"),
        pl.when(blank).then(pl.lit("no sample gave an answer: the task's fallback"))
        .otherwise(pl.col("explanation")).alias("explanation"),
        pl.lit(False).alias("is_blank"),
    )


def with_ref_pages(answers: pl.DataFrame, generations: pl.DataFrame, contexts: pl.DataFrame,
                   nodes: pl.DataFrame) -> pl.DataFrame:
    """``ref_pages``: for each answer, ``doc_id:page`` for every page of the cited documents in
    the context the voted samples saw (the last attempt; a node counts with its leaves' pages),
    in context order. For tasks whose references are document + page (``task.references``)."""
    from kohaku.retrieval.gold import node_pages

    pages = node_pages(nodes)
    last = dict(generations.group_by("qid").agg(pl.col("attempt").max()).iter_rows()) if generations.height else {}
    by_key = {(r["qid"], r["attempt"]): r["node_ids"] or [] for r in
              contexts.select("qid", "attempt", "node_ids").iter_rows(named=True)}
    out = []
    for a in answers.select("qid", "ref_id").iter_rows(named=True):
        refs = set(a["ref_id"] or [])
        seen: list[str] = []
        for node_id in by_key.get((a["qid"], last.get(a["qid"], 0)), []):
            doc = node_id.split("#", 1)[0]
            if doc in refs:
                for page in sorted(pages.get(node_id, ())):
                    ref = f"{doc}:{page}"
                    if ref not in seen:
                        seen.append(ref)
        out.append(seen)
    return answers.with_columns(pl.Series("ref_pages", out, dtype=pl.List(pl.String)))


def vote_generations(generations: pl.DataFrame, questions: pl.DataFrame, documents: pl.DataFrame,
                     cfg: VoteConfig, grouping: Grouping = CANONICAL_GROUPING, keep_surface: bool = False,
                     fallback: str | None = None, value_field: str = "answer_value",
                     by_qid: Mapping[str, Grouping] | None = None,
                     ) -> tuple[pl.DataFrame, dict[str, Any]]:
    """(answers, summary) from the infer stage's generations. ``grouping`` and ``keep_surface``
    come from the task's vote (``by_qid``: per question, from its answer kind); ``fallback`` (a
    task that never abstains) fills blank answers; ``value_field`` names the task's value field
    in the answers' ``fields``."""
    candidates = generations_to_candidates(generations, cfg.n_samples)
    voted = vote(candidates, cfg, grouping, keep_surface, by_qid)
    answers, stats = finalize_answers(voted, questions, documents)
    if stats["n_unanswered"]:
        log.warning("%d question(s) have no generations; written as %s", stats["n_unanswered"],
                    "the fallback" if fallback is not None else "blank")
    if stats["unknown_refs"]:
        log.warning("ref id(s) not in the corpus metadata (kept in ref_id, no ref_url): %s",
                    ", ".join(stats["unknown_refs"][:10]))
    n = answers.height
    n_blank = int(answers["is_blank"].sum()) if n else 0
    if fallback is not None:
        answers = never_blank(answers, fallback)
    answers = fill_fields(answers, value_field)
    summary = {
        "n_questions": n,
        "n_blank": int(answers["is_blank"].sum()) if n else 0,
        "mean_agreement": float(answers["agreement"].mean()) if n else 0.0,  # type: ignore[arg-type]
        "mean_votes": float(answers["n_votes"].mean()) if n else 0.0,  # type: ignore[arg-type]
        "n_unanswered": stats["n_unanswered"],
        "n_unknown_refs": len(stats["unknown_refs"]),
        "n_ref_fallback": int(answers["ref_fallback"].sum()) if n else 0,
    }
    if fallback is not None:
        summary["n_fallback"] = n_blank
    return answers, summary


# ---------------------------------------------------------------------------------------------
# ensembles of submission files (scripts/ensemble.py)


# Candidates read from submission files (one source per file).
SUBMISSION_CANDIDATES = {
    "qid": pl.String, "source_idx": pl.Int64, "answer_value": pl.String,
    "ref_id": pl.List(pl.String), "answer": pl.String, "explanation": pl.String,
    "is_blank": pl.Boolean, "supporting_materials": pl.String,
}
