"""Self-contained HTML reports (``report.html``) of a run, a sweep and a comparison.

One file each, opened from disk with no server and no network: the data is one JSON blob inside
the page (``<script type="application/json">``, with ``<``, ``>`` and ``&`` written as
``\\u003c``, ``\\u003e``, ``\\u0026`` so no corpus text can end the script), and the page's own
script (:mod:`kohaku.report.html_page`) builds the page from it with ``textContent`` only, never
as markup. The data come from the tables the Markdown reports use: the run dir's run.json,
scores.json and ``scores.parquet``, and the stage artifacts run.json names (retrieve's
``contexts``, infer's ``generations``, vote's ``answers``, questions' ``questions``); a missing
artifact (cache cleared) only leaves its part out, with a note in the page.

- :func:`write_run_report`: the score with its 95 % interval (bootstrap over questions) and
  components; error classes split by answer kind and evidence type; every question with its
  truth, the voted answer, every sample (agreeing with the vote or not), the references and
  the context the model saw, blocks of the gold documents marked.
- :func:`write_sweep_report`: the leaderboard against the baseline (delta, interval, Holm p,
  mark), the sweep's PNG plots (inline, base64), error classes per point and the questions the
  best point flipped against the baseline, with both contexts and answers.
- :func:`write_compare_report`: scripts/compare.py's pairs, intervals, components, error
  classes and every flip with both sides' contexts and answers.

Each context block's text is stored once (``blocks``) and referenced by number; blocks longer
than :data:`MAX_BLOCK_CHARS` are cut. Writing never fails a run: the callers catch and warn.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from kohaku.report.compare import (PRED, PRED_REF, TRUTH, TRUTH_REF, Config, class_names, flips, kind_counts, page_marks,
                                   score_matrix)
from kohaku.tasks.score.components import Metric, class_order, metric_of, read_scores_json, with_classes
from kohaku.report.paired import N_RESAMPLES, SEED, compare
from kohaku.core.cells import parse_ref_list

log = logging.getLogger(__name__)

REPORT_NAME = "report.html"
MAX_BLOCK_CHARS = 4000     # a context block longer than this is cut (the page says so)
MAX_SAMPLE_CHARS = 2000    # an explanation or raw output longer than this is cut
MAX_FLIPS = 200            # flipped questions shown per pair (the count is always given)
MAX_PAGE_BYTES = 5_000_000  # a bigger page has its context blocks cut (:func:`fit`)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _cut(text: Any, limit: int) -> str | None:
    if text is None:
        return None
    s = str(text)
    return s if len(s) <= limit else s[:limit] + f" … [{len(s) - limit} more characters]"


def _json_safe(x: Any) -> Any:
    """Plain JSON values: NaN and infinities become null, numpy scalars Python numbers."""
    if isinstance(x, dict):
        return {str(k): _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return str(x)


def script_json(data: Any) -> str:
    """``data`` as JSON that is safe inside a ``<script>`` element: ``<``, ``>``, ``&`` and the
    JavaScript line separators are escaped, so no string in it can close the element."""
    text = json.dumps(_json_safe(data), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def render(data: dict[str, Any]) -> str:
    """The whole page: CSS, the data blob and the script (:mod:`kohaku.report.html_page`)."""
    from kohaku.report.html_page import CSS, JS

    title = html.escape(str(data.get("title") or "kohaku report"))
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>{title}</title><style>{CSS}</style></head>\n<body>"
        f"<header><h1 id=\"title\">{title}</h1><div id=\"subtitle\"></div></header>"
        "<main id=\"app\"><noscript>This report is drawn by JavaScript; enable it to read the "
        "report.</noscript></main>\n"
        f"<script type=\"application/json\" id=\"report-data\">{script_json(data)}</script>\n"
        f"<script>{JS}</script>\n</body></html>\n"
    )


def fit(data: dict[str, Any], limit: int = MAX_PAGE_BYTES) -> dict[str, Any]:
    """``data`` with its context blocks cut (each to half its longest length, again and again)
    until the page is under ``limit`` bytes or no block is longer than 200 characters; a note
    says so. Contexts are the bulk of a page; everything else is kept."""
    blocks = data.get("blocks") or []
    size = len(render(data).encode("utf-8"))
    if size <= limit or not blocks:
        return data
    longest = max(len(b) for b in blocks)
    while size > limit and longest > 200:
        longest //= 2
        data["blocks"] = [_cut(b, longest) for b in blocks]
        size = len(render(data).encode("utf-8"))
    data.setdefault("notes", []).append(f"context blocks cut to {longest} characters to keep this page under "
                                        f"{limit / 1e6:.0f} MB")
    log.warning("report.html: context blocks cut to %d characters (page under %d bytes)", longest, limit)
    return data


def write_html(data: dict[str, Any], path: str | Path) -> Path:
    """Write the page of ``data`` (:func:`fit` to :data:`MAX_PAGE_BYTES`) to ``path``."""
    data = fit(data)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render(data), encoding="utf-8")
    tmp.replace(path)
    return path


# ---------------------------------------------------------------------------------------------
# A run's tables


class Blocks:
    """Context blocks, each text stored once; a block is referred to by its number."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self._ids: dict[str, int] = {}

    def id(self, text: str) -> int:
        text = _cut(text, MAX_BLOCK_CHARS) or ""
        if text not in self._ids:
            self._ids[text] = len(self.texts)
            self.texts.append(text)
        return self._ids[text]


def _artifact(run_dir: Path, record: dict[str, Any], name: str) -> Path | None:
    raw = (record.get("stages") or {}).get(name, {}).get("path") if isinstance(record.get("stages"), dict) else None
    if not raw:
        return None
    for candidate in (Path(raw), run_dir / raw):
        if candidate.is_dir():
            return candidate
    return None


def _first(row: dict[str, Any], names: tuple[str, ...]) -> Any:
    return next((row[k] for k in names if row.get(k) is not None), None)


def _text(x: Any) -> str | None:
    if x is None:
        return None
    if isinstance(x, (list, tuple)):
        return json.dumps([str(v) for v in x])
    return str(x)


def _pool_docs(marks: dict[str, Any] | None) -> set[str]:
    """The documents of a typed question's gold pools (kohaku.report.compare.page_marks), whose
    blocks the report marks as gold."""
    return {page.rpartition(":")[0] for pool, _ in (marks or {}).get("pools") or []
            for page in str(pool).split("|") if ":" in page}


def _norm(x: Any) -> str:
    return " ".join(str(x or "").split()).lower()


class RunTables:
    """One run dir's tables for the reports: run.json, scores.json, the per-question table and
    (while the cache holds them) the stage artifacts. ``notes`` says what could not be read."""

    def __init__(self, run_dir: str | Path, blocks: Blocks | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.blocks = blocks or Blocks()
        self.notes: list[str] = []
        run_json = self.run_dir / "run.json"
        try:
            self.record: dict[str, Any] = json.loads(run_json.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            self.record = {}
            self.notes.append(f"{run_json}: cannot read ({exc})")
        self.scores = read_scores_json(self.run_dir / "scores.json")
        config = self.record.get("config") if isinstance(self.record.get("config"), dict) else {}
        task = config.get("task") or {}
        answer = task.get("answer") or {}
        self.value_field = str(answer.get("value") or "answer_value")
        self.refs_field = str(answer.get("refs") or "ref_id")
        self.task = str(task.get("name") or self.scores.get("task") or "")
        self.table = self._scores_table()
        self._tables: dict[str, pl.DataFrame | None] = {}
        self.gold_docs = self._gold_file(task.get("gold") or {}, (config.get("corpus") or {}).get("root"))

    def _gold_file(self, spec: dict[str, Any], root: Any) -> dict[str, set[str]]:
        """qid -> gold documents from the task's gold evidence file (``task.gold.file``, e.g.
        FinanceBench's evidence.csv), where it names one; the score table's truth refs are the
        gold documents of the others (WattBot)."""
        if not spec.get("file"):
            return {}
        from kohaku.retrieval.gold import GoldSpec, read_gold

        try:
            known = {k: v for k, v in spec.items() if k in GoldSpec.__dataclass_fields__}
            gold = read_gold(GoldSpec(**known), root or ".")
        except Exception as exc:  # noqa: BLE001 - the blocks are shown unmarked
            self.notes.append(f"gold evidence file not read ({exc}); gold blocks from the truth refs only")
            return {}
        out: dict[str, set[str]] = {}
        for qid, doc in zip(gold["qid"], gold["doc_id"]):
            if doc is not None:
                out.setdefault(str(qid), set()).add(str(doc))
        return out

    def _scores_table(self) -> pl.DataFrame | None:
        path = self.run_dir / "scores.parquet"
        if not path.is_file():
            score_dir = _artifact(self.run_dir, self.record, "score")
            path = score_dir / "scores.parquet" if score_dir else path
        if not path.is_file():
            self.notes.append(f"{self.run_dir}: no scores.parquet (the run was not scored?)")
            return None
        return with_classes(pl.read_parquet(path))   # a table scored before the error classes

    def artifact_table(self, stage: str, name: str) -> pl.DataFrame | None:
        key = f"{stage}/{name}"
        if key not in self._tables:
            folder = _artifact(self.run_dir, self.record, stage)
            path = folder / f"{name}.parquet" if folder else None
            if path is None or not path.is_file():
                self.notes.append(f"{stage} artifact '{name}' not found (cache cleared or moved?): "
                                  f"{'not shown' if name != 'questions' else 'question texts from the score table'}")
                self._tables[key] = None
            else:
                self._tables[key] = pl.read_parquet(path)
        return self._tables[key]

    def metric(self) -> Metric | None:
        try:
            return metric_of(self.scores, where=str(self.run_dir / "scores.json")) if self.scores else None
        except Exception as exc:  # noqa: BLE001 - the report only loses the interval
            self.notes.append(f"scores.json: {exc}")
            return None

    def _by_qid(self, stage: str, name: str) -> dict[str, list[dict[str, Any]]]:
        key = f"by_qid:{stage}/{name}"
        if key not in self._tables:
            table = self.artifact_table(stage, name)
            grouped: dict[str, list[dict[str, Any]]] = {}
            if table is not None and "qid" in table.columns:
                for row in table.iter_rows(named=True):
                    grouped.setdefault(str(row["qid"]), []).append(row)
            self._tables[key] = grouped  # type: ignore[assignment]
        return self._tables[key]  # type: ignore[return-value]

    def _fields(self, row: dict[str, Any]) -> dict[str, Any]:
        raw = row.get("fields")
        if isinstance(raw, str) and raw:
            try:
                parsed = json.loads(raw)
                if isinstance(parsed, dict):
                    return parsed
            except json.JSONDecodeError:
                pass
        return {}

    def _value(self, row: dict[str, Any]) -> Any:
        if row.get(self.value_field) is not None:
            return row[self.value_field]
        return self._fields(row).get(self.value_field)

    def side(self, qid: str, gold: set[str]) -> dict[str, Any]:
        """What the model did on one question: the voted answer with its agreement, every
        sample and the contexts it was given (the attempts its samples used)."""
        votes = self._by_qid("vote", "answers").get(qid, [])
        vote = votes[0] if votes else {}
        voted = self._value(vote) if vote else None
        gens = sorted(self._by_qid("infer", "generations").get(qid, []),
                      key=lambda r: (r.get("attempt") or 0, r.get("sample_idx") or 0))
        samples = []
        for g in gens:
            value = self._value(g)
            fields = {k: _cut(_text(v), MAX_SAMPLE_CHARS) for k, v in self._fields(g).items()}
            samples.append({
                "attempt": g.get("attempt"), "idx": g.get("sample_idx"), "value": _text(value),
                "refs": parse_ref_list(g.get(self.refs_field)),
                "blank": bool(g.get("is_blank")), "valid": g.get("valid"),
                "agrees": vote != {} and _norm(value) == _norm(voted),
                "fields": fields, "raw": None if g.get("valid") else _cut(g.get("raw"), MAX_SAMPLE_CHARS),
            })
        used = sorted({g.get("attempt") or 0 for g in gens}) or [0]
        contexts = []
        for c in sorted(self._by_qid("retrieve", "contexts").get(qid, []), key=lambda r: r.get("attempt") or 0):
            if (c.get("attempt") or 0) not in used:
                continue
            texts = c.get("blocks") or ([c["context"]] if c.get("context") else [])
            docs = c.get("block_doc_ids") or [None] * len(texts)
            contexts.append({
                "attempt": c.get("attempt"), "n_tokens": c.get("n_tokens"), "budget": c.get("budget"),
                "blocks": [[self.blocks.id(t), d, bool(d is not None and d in gold)] for t, d in zip(texts, docs)],
            })
        return {
            "voted": _text(voted), "voted_refs": parse_ref_list(vote.get(self.refs_field)) if vote else [],
            "agreement": vote.get("agreement"), "n_votes": vote.get("n_votes"), "n_blank": vote.get("n_blank"),
            "samples": samples, "contexts": contexts,
        }

    def questions(self) -> list[dict[str, Any]]:
        """One entry per question of the run (the questions table's order; the score table's
        when the questions artifact is gone), with its score row's truth, answer and class
        (``class`` null for a question the solutions do not answer) and its side."""
        scored = {str(r["qid"]): r for r in self.table.iter_rows(named=True)} if self.table is not None else {}
        texts: dict[str, str | None] = {}
        q = self.artifact_table("questions", "questions")
        if q is not None and {"qid", "question"} <= set(q.columns):
            texts = {str(a): (None if b is None else str(b)) for a, b in zip(q["qid"], q["question"])}
        order = list(texts) + [k for k in scored if k not in texts]
        out = []
        for qid in order:
            row = scored.get(qid, {})
            truth_ref = _first(row, TRUTH_REF)
            marks = page_marks(row) if row else None
            gold = set(parse_ref_list(truth_ref)) | self.gold_docs.get(qid, set()) | _pool_docs(marks)
            entry = {
                "qid": qid, "question": row.get("question") or texts.get(qid), "scored": bool(row),
                "truth": _text(_first(row, TRUTH)), "truth_ref": _text(truth_ref), "gold": sorted(gold),
                "pred": None if row.get("missing") else _text(_first(row, PRED)),
                "pred_ref": None if row.get("missing") else _text(_first(row, PRED_REF)),
                "class": row.get("error_class"), "detail": row.get("error_detail") or "",
                "kind": row.get("answer_kind"), "pages": marks,
                "evidence": [f for f in ("Quote", "Table", "Figure", "Math") if row.get(f)],
            }
            entry.update(self.side(qid, gold))
            if not row:
                entry["pred"] = entry["voted"]
                entry["pred_ref"] = _text(entry["voted_refs"]) if entry["voted_refs"] else None
            out.append(entry)
        return out


def _interval(table: pl.DataFrame, metric: Metric, name: str) -> dict[str, Any] | None:
    try:
        m = score_matrix([Config(name, [table], [name], metric)], metric)
        it = compare(m, [], n_resamples=N_RESAMPLES, seed=SEED).intervals[0]
    except Exception as exc:  # noqa: BLE001 - the page shows the score without it
        log.warning("%s: no score interval (%s)", name, exc)
        return None
    return {"score": it.score, "lo": it.lo, "hi": it.hi, "n": m.n, "resamples": N_RESAMPLES,
            "components": it.components}


def run_data(run_dir: str | Path) -> dict[str, Any]:
    """The run report's data (see the module doc)."""
    t = RunTables(run_dir)
    errors = t.scores.get("errors") or {}
    metric = t.metric()
    scored = metric is not None and t.table is not None and t.table.height > 0
    interval = _interval(t.table, metric, str(t.run_dir)) if scored else None
    components = t.scores.get("components") or {}
    weights = {c.name: c.weight for c in metric.components} if metric else {}
    overrides = t.record.get("overrides") or []
    questions = t.questions()
    data = {
        "kind": "run",
        "title": f"kohaku run {t.record.get('run_id') or t.run_dir.name}",
        "generated": _now(),
        "run": {
            "id": t.record.get("run_id") or t.run_dir.name, "status": t.record.get("status"),
            "overrides": overrides, "task": t.task, "metric": metric.describe() if metric else None,
            "score": t.scores.get("score"), "interval": interval, "combine": t.scores.get("combine"),
            "components": [{"name": k, "value": v, "weight": weights.get(k)} for k, v in components.items()],
            "n": t.scores.get("n"), "n_missing": t.scores.get("n_missing"), "n_extra": t.scores.get("n_extra"),
            "seconds": t.record.get("seconds"),
            "stages": [{"name": k, "seconds": v.get("seconds"), "cache_hit": v.get("cache_hit")}
                       for k, v in (t.record.get("stages") or {}).items() if isinstance(v, dict)],
            "classes": class_order(t.scores) or list(errors.get("counts") or {}),
            "errors": {"counts": errors.get("counts") or {}, "by_kind": errors.get("by_kind") or {},
                       "by_evidence": errors.get("by_evidence") or {}, "details": errors.get("details") or {},
                       "pages": errors.get("pages")},
            "questions": questions,
        },
        "blocks": t.blocks.texts,
        "notes": t.notes,
    }
    return data


def write_run_report(run_dir: str | Path, path: str | Path | None = None) -> Path:
    """Write ``report.html`` into a scored run dir (or to ``path``); returns its path."""
    run_dir = Path(run_dir)
    return write_html(run_data(run_dir), path or run_dir / REPORT_NAME)


# ---------------------------------------------------------------------------------------------
# Two runs side by side (sweep flips, comparisons)


@dataclass
class Side:
    """One configuration in a pair: its name and the run dir whose contexts and samples are
    shown (the first of its seeds), None when it is a bare submission."""

    name: str
    run_dir: Path | None
    tables: RunTables | None = field(default=None, repr=False)


def _sides(names: list[str], dirs: list[Path | None], blocks: Blocks) -> list[Side]:
    out = []
    for name, d in zip(names, dirs):
        tables = RunTables(d, blocks) if d is not None and (d / "run.json").is_file() else None
        out.append(Side(name, d, tables))
    return out


def flip_entries(rows: list[dict[str, Any]], a: Side, b: Side, limit: int = MAX_FLIPS) -> list[dict[str, Any]]:
    """:func:`kohaku.report.compare.flips` rows with each side's samples and contexts."""
    out = []
    for r in rows[:limit]:
        gold = set(parse_ref_list(r.get("truth_ref"))) | _pool_docs(r.get("a_pages")) | _pool_docs(r.get("b_pages"))
        for side in (a, b):
            if side.tables is not None:
                gold |= side.tables.gold_docs.get(str(r["qid"]), set())
        entry = {
            "qid": r["qid"], "change": r["change"], "delta": r["delta"], "question": r.get("question"),
            "truth": _text(r.get("truth")), "truth_ref": _text(r.get("truth_ref")), "gold": sorted(gold),
            "kind": r.get("kind"),
        }
        for key, side in (("a", a), ("b", b)):
            part = {"name": side.name, "answer": _text(r.get(f"{key}_answer")), "ref": _text(r.get(f"{key}_ref")),
                    "class": r.get(f"{key}_class"), "pages": r.get(f"{key}_pages")}
            if side.tables is not None:
                part.update(side.tables.side(str(r["qid"]), gold))
            entry[key] = part
        out.append(entry)
    return out


def _png(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def _records(df: pl.DataFrame) -> list[dict[str, Any]]:
    return [_json_safe(r) for r in df.to_dicts()]


def _load_table(path: str) -> pl.DataFrame:
    return with_classes(pl.read_parquet(path))   # a table scored before the error classes


def sweep_data(runs_dir: str | Path, runs: pl.DataFrame, board: pl.DataFrame, swept: list[str],
               cmp: Any, plots: dict[str, Path]) -> dict[str, Any]:
    """The sweep report's data: ``runs`` (kohaku.report.runs.collect_runs), ``board`` (the
    leaderboard as written), ``cmp`` (a SweepComparison or None) and the plots written."""
    runs_dir = Path(runs_dir)
    blocks = Blocks()
    keys = [k for k in swept if k in board.columns]
    cells = cmp.cells if cmp is not None else pl.DataFrame()
    intervals: dict[tuple, tuple[Any, Any]] = {}
    for c in cells.to_dicts():
        intervals[tuple(str(c.get(k)) for k in keys)] = (c.get("score_lo"), c.get("score_hi"))
    component_cols = [c for c in board.columns if c in ("value", "ref", "na")
                      or c.startswith("component:")]
    metric = None
    if "metric" in board.columns and board["metric"].drop_nulls().len():
        try:
            from kohaku.tasks.score.components import metric_from_json

            metric = metric_from_json(board["metric"].drop_nulls()[0])
            component_cols = [c.name if c.name in board.columns else f"component:{c.name}" for c in metric.components
                              if c.name in board.columns or f"component:{c.name}" in board.columns]
        except Exception:  # noqa: BLE001 - the board keeps its default-variant columns
            metric = None
    rows = []
    for r in board.to_dicts():
        lo, hi = intervals.get(tuple(str(r.get(k)) for k in keys), (None, None))
        rows.append({"run_id": r.get("run_id"), "status": r.get("status"), "keys": {k: r.get(k) for k in keys},
                     "score": r.get("score"), "cell_lo": lo, "cell_hi": hi,
                     "components": {c: r.get(c) for c in component_cols},
                     "delta": r.get("delta"), "delta_lo": r.get("delta_lo"), "delta_hi": r.get("delta_hi"),
                     "p_holm": r.get("p_holm"), "sig": r.get("sig"), "seconds": r.get("seconds"),
                     "error": r.get("error")})
    data: dict[str, Any] = {
        "kind": "sweep", "title": f"kohaku sweep {runs_dir.name}", "generated": _now(),
        "sweep": {
            "dir": runs_dir.name, "keys": keys, "components": component_cols, "board": rows,
            "baseline": cmp.baseline if cmp is not None else None, "n": cmp.n if cmp is not None else None,
            "resamples": cmp.n_resamples if cmp is not None else None,
            "metric": metric.describe() if metric else None,
            "classes": list(cmp.classes) if cmp is not None else [],
            "cells": _records(cells) if cmp is not None else [],
            "plots": [{"name": name, "src": _png(p)} for name, p in plots.items()
                      if str(p).endswith(".png") and Path(p).is_file()],
            "flips": None,
        },
        "blocks": blocks.texts, "notes": [],
    }
    if cmp is not None and cmp.classes:
        try:   # the error classes of each point split by answer kind
            data["sweep"]["kinds"] = [
                {"label": f"{_cell_label(cell, keys)} · {kind}", "counts": counts}
                for cell in cells.to_dicts()
                for kind, counts in kind_counts(_cell_config(runs, keys, cell, cmp.metric), classes=cmp.classes).items()]
        except Exception as exc:  # noqa: BLE001 - the page stands without the split
            log.warning("%s: no split by answer kind in report.html (%s)", runs_dir, exc)
    if cmp is not None and cells.height >= 2:
        try:
            data["sweep"]["flips"] = _sweep_flips(runs_dir, runs, keys, cmp, blocks)
        except Exception as exc:  # noqa: BLE001 - the rest of the page stands without them
            log.warning("%s: no flipped questions in report.html (%s)", runs_dir, exc)
            data["notes"].append(f"flipped questions not shown: {exc}")
    data["blocks"] = blocks.texts
    return data


def _cell_runs(runs: pl.DataFrame, keys: list[str], cell: dict[str, Any]) -> pl.DataFrame:
    """The scored runs of a sweep point (``cell``: its swept keys' values)."""
    ok = runs.filter((pl.col("status") == "ok") & pl.col("scores_table").is_not_null())
    for k in keys:
        same = pl.col(k).is_null() if cell.get(k) is None else pl.col(k).cast(pl.String) == str(cell[k])
        ok = ok.filter(same)
    return ok


def _cell_label(cell: dict[str, Any], keys: list[str]) -> str:
    return ", ".join(f"{k}={cell.get(k)}" for k in keys) or "all"


def _cell_config(runs: pl.DataFrame, keys: list[str], cell: dict[str, Any], metric: Any) -> Config:
    """A sweep point as a configuration: its runs' per-question tables."""
    sub = _cell_runs(runs, keys, cell)
    return Config(_cell_label(cell, keys), [_load_table(p) for p in sub["scores_table"].to_list()],
                  sub["run_path"].to_list(), metric)


def _sweep_flips(runs_dir: Path, runs: pl.DataFrame, keys: list[str], cmp: Any, blocks: Blocks) -> dict[str, Any]:
    """The flipped questions of the best point (the best-scoring cell other than the baseline)
    against the baseline cell."""
    cells = cmp.cells
    base = cells.row(0, named=True)
    others = cells.slice(1).sort("score", descending=True)
    best = others.row(0, named=True)

    configs, dirs = [], []
    for cell in (base, best):
        configs.append(_cell_config(runs, keys, cell, cmp.metric))
        dirs.append(runs_dir / configs[-1].sources[0])
    m = score_matrix(configs, cmp.metric)
    rows = flips(configs, m, 0, 1)
    a, b = _sides([c.name for c in configs], dirs, blocks)
    return {"a": a.name, "b": b.name, "delta": best.get("delta"), "fixed": best.get("fixed"),
            "broken": best.get("broken"), "n_flips": len(rows), "rows": flip_entries(rows, a, b)}


def write_sweep_report(out_dir: str | Path, runs_dir: str | Path, runs: pl.DataFrame, board: pl.DataFrame,
                       swept: list[str], cmp: Any, plots: dict[str, Path]) -> Path:
    """Write ``report.html`` next to the sweep's leaderboard.csv; returns its path."""
    return write_html(sweep_data(runs_dir, runs, board, swept, cmp, plots), Path(out_dir) / REPORT_NAME)


def compare_data(configs: list[Config], comparison: Any, metric: Metric, counts: list[dict[str, Any]],
                 all_flips: dict[str, list[dict[str, Any]]], pairs: list[tuple[int, int]]) -> dict[str, Any]:
    """scripts/compare.py's report: the pairs (``comparison.pairs``, in ``pairs`` order), each
    configuration's interval, components and error classes, and every pair's flips with both
    sides' contexts (for sources that are run dirs)."""
    blocks = Blocks()
    dirs = [Path(c.sources[0]) if Path(c.sources[0]).is_dir() else None for c in configs]
    sides = _sides([c.name for c in configs], dirs, blocks)
    flip_sets = []
    for (label, rows), (a, b), pair in zip(all_flips.items(), pairs, comparison.pairs):
        flip_sets.append({"label": label, "a": configs[a].name, "b": configs[b].name, "n_flips": len(rows),
                          "fixed": pair.fixed, "broken": pair.broken,
                          "rows": flip_entries(rows, sides[a], sides[b])})
    return {
        "kind": "compare", "title": "kohaku comparison: " + " vs ".join(c.name for c in configs),
        "generated": _now(),
        "compare": {
            "metric": metric.describe(), "level": comparison.level, "resamples": comparison.n_resamples,
            "components": [c.name for c in metric.components],
            "pairs": [{"a": p.a, "b": p.b, "n": p.n, "delta": p.delta, "lo": p.lo, "hi": p.hi, "p": p.p,
                       "p_holm": p.p_holm, "mde": p.mde, "fixed": p.fixed, "broken": p.broken,
                       "sig": p.significant} for p in comparison.pairs],
            "intervals": [{"name": it.name, "score": it.score, "lo": it.lo, "hi": it.hi, "seed_sd": it.seed_sd,
                           "n_seeds": it.n_seeds, "components": it.components} for it in comparison.intervals],
            "errors": {c.name: cnt for c, cnt in zip(configs, counts)},
            # the error classes split by answer kind (with a typed task's page classes)
            "kinds": [{"label": f"{c.name} · {kind}", "counts": kc}
                      for c in configs for kind, kc in kind_counts(c, classes=class_names(configs)).items()],
            "flips": flip_sets,
        },
        "blocks": blocks.texts,
        "notes": [n for s in sides if s.tables is not None for n in s.tables.notes]
                 + [f"{s.name}: not a run dir; no contexts or samples" for s in sides if s.tables is None],
    }


def write_compare_report(path: str | Path, configs: list[Config], comparison: Any, metric: Metric,
                         counts: list[dict[str, Any]], all_flips: dict[str, list[dict[str, Any]]],
                         pairs: list[tuple[int, int]]) -> Path:
    """Write scripts/compare.py's ``--html`` report; returns its path."""
    return write_html(compare_data(configs, comparison, metric, counts, all_flips, pairs), path)


def try_write(what: str, fn: Any, *args: Any) -> Path | None:
    """``fn(*args)``, the report's path; any error is a warning naming ``what`` (a report must
    never fail the run or sweep it describes)."""
    try:
        path = fn(*args)
    except Exception as exc:  # noqa: BLE001 - see the docstring
        log.warning("%s: could not write %s (%s: %s); the run's other outputs are unaffected",
                    what, REPORT_NAME, type(exc).__name__, exc)
        return None
    log.info("report: %s", path)
    return path
