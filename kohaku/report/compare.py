"""Paired comparisons of runs: per-question score tables in, intervals, tests and flips out.

A *configuration* is one or more scored runs of the same settings (several seeds); each run is a
per-question score table (a run dir's ``scores.parquet``; a submission scored by
the metric of a scorer variant, kohaku.tasks.named.catalog's ``frames``, or the task's scorer, :func:`score_with_task`)
read through its metric (:mod:`kohaku.tasks.score.components`: the components, from the run's
``scores.json``). :func:`score_matrix` aligns configurations on the solutions' questions and
averages each question's components over a configuration's seeds (it refuses configurations
scored with different metrics);
:func:`kohaku.report.paired.compare` does the statistics; :func:`flips` lists the questions
that changed, with both answers. ``scripts/compare.py`` and the sweep reports
(:mod:`kohaku.report.significance`) are built on these.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from kohaku.core.cells import read_csv_str
from kohaku.core.errors import MetricError
from kohaku.report.paired import Comparison, ComponentMatrix, ScoreMatrix
from kohaku.tasks.named import registry
from kohaku.tasks.named.catalog import DEFAULT_VARIANT
from kohaku.tasks.score.components import (Metric, class_order, describe_metrics, known_metric, metric_of,
                                     read_scores_json, variant_metric, with_classes)
from kohaku.tasks.analysis.typed_classes import PAGE_CLASSES

log = logging.getLogger(__name__)

#: the per-question columns of the default variant's table (the default task's)
REQUIRED = variant_metric().needs


class CompareError(MetricError):
    """A source that cannot be compared; the message names it and what to pass instead."""


@dataclass
class Config:
    """One configuration: its name, the per-question tables of its runs (seeds), the metric
    they were scored with (None: the default task's, by the variant :func:`score_matrix` is given) and the
    error classes their scores.json lists (their order in the tables; [] when unknown)."""

    name: str
    tables: list[pl.DataFrame]
    sources: list[str]
    metric: Metric | None = None
    classes: list[str] = field(default_factory=list)


@dataclass
class Scored:
    """One scored run: its per-question table, its metric and its error classes' order."""

    table: pl.DataFrame
    metric: Metric
    classes: list[str] = field(default_factory=list)


def submission_of(source: str | Path) -> Path:
    """The submission CSV of a source: the file itself, or a run dir's ``submission.csv``."""
    path = Path(source)
    if path.is_file():
        return path
    if path.is_dir():
        if (path / "submission.csv").is_file():
            return path / "submission.csv"
        points = sorted(p.parent.name for p in path.glob("*/run.json"))
        if points:
            raise CompareError(
                f"{path}: a sweep dir, not a run; pass its points ({', '.join(points[:6])}"
                f"{' ...' if len(points) > 6 else ''}), or use scripts/leaderboard.py for the whole sweep")
        raise CompareError(f"{path}: no submission.csv in this folder; pass a run dir or a submission CSV")
    raise CompareError(f"{path}: no such file or run dir")


def score_source(solutions: pl.DataFrame, source: str | Path, variant: str, solutions_name: str = "solutions") -> pl.DataFrame:
    """The classified per-question table of one source scored against ``solutions`` with
    the metric of ``variant`` (missing questions count as wrong; the subset is chosen later, over all
    sources)."""
    sub = submission_of(source)
    known = registry.names("frames")
    frames = registry.lookup("frames", variant if variant in known else DEFAULT_VARIANT, "variant")
    return frames(solutions, read_csv_str(sub), variant, (solutions_name, str(sub)))


def read_run(source: str | Path, variant: str | None = None) -> Scored:
    """A run dir's own per-question table (``scores.parquet``, written by the score stage) and
    its metric (``scores.json``'s ``metric``; else that of its ``variant``, else ``variant``,
    for runs scored before tasks)."""
    path = Path(source)
    if path.is_file():
        raise CompareError(f"{path}: a submission CSV is scored against --solutions (with --task for a "
                           "task other than the default task); without --solutions pass run dirs")
    table_path = path / "scores.parquet"
    if not table_path.is_file():
        submission_of(path)  # a sweep dir or no run: its own message
        raise CompareError(f"{path}: no scores.parquet in this run dir (scored without solutions?); pass "
                           "--solutions to score its submission.csv")
    scores = read_scores_json(path / "scores.json")
    metric = metric_of(scores, variant, str(path / "scores.json"))
    table = pl.read_parquet(table_path)
    table = with_classes(table, metric)
    return Scored(table, metric, class_order(scores))


def run_metric(source: str | Path) -> Metric | None:
    """The metric a run dir's scores.json names (None: a file, or no metric key)."""
    path = Path(source)
    if not path.is_dir():
        return None
    scores = read_scores_json(path / "scores.json")
    return metric_of(scores, where=str(path / "scores.json")) if scores.get("metric") else None


def score_with_task(task: Any, solutions: str | Path, source: str | Path, variant: str | None = None,
                    fmt: str | None = None) -> Scored:
    """One source's submission scored with a task's own scorer
    (:func:`kohaku.tasks.score.scoring.score_submission`; its summary names the metric); ``fmt``: the
    submission's format (csv | json; None: detected)."""
    from kohaku.tasks.score.scoring import score_submission

    sub = submission_of(source)
    result = score_submission(task, solutions, sub, variant=variant, subset=False, fmt=fmt)
    summary = result.summary()
    metric = metric_of(summary, variant, f"{sub} (scored with task {getattr(task, 'name', task)})")
    table = result.table
    table = with_classes(table, metric)
    return Scored(table, metric, class_order(summary))


def parse_source(arg: str) -> tuple[str, list[str]]:
    """``NAME=PATH[,PATH...]`` (a configuration over seeds) or ``PATH`` -> (name, paths)."""
    name, sep, rest = arg.partition("=")
    if sep and name and not Path(arg).exists():
        paths = [p for p in rest.split(",") if p]
        if not paths:
            raise CompareError(f"'{arg}': no path after '='; write NAME=PATH[,PATH...]")
        return name, paths
    return arg, [arg]


def _collapse(table: pl.DataFrame, where: str, metric: Metric) -> pl.DataFrame:
    """One row per question: duplicate submission rows are averaged (with a warning)."""
    needed = ["qid", *metric.columns]
    missing = [c for c in needed if c not in table.columns]
    if missing:
        raise CompareError(f"{where}: per-question table lacks column(s) {missing} (metric "
                           f"{metric.describe()}); rescore it with the score stage or scripts/score.py")
    if table["qid"].n_unique() == table.height:
        return table
    log.warning("%s: %d duplicate question row(s) averaged", where, table.height - table["qid"].n_unique())
    means = metric.value_columns
    firsts = [c for c in metric.columns if c not in means]
    return table.group_by("qid", maintain_order=True).agg(
        *[pl.col(c).cast(pl.Float64).mean() for c in means], *[pl.col(c).first() for c in firsts],
        pl.all().exclude(*means, *firsts).first(),
    )


def common_metric(configs: list[Config], metric: str | Metric | None = None) -> Metric:
    """The metric every configuration was scored with (a configuration without one: ``metric``,
    a Metric or a variant name); CompareError when they differ."""
    default = metric if isinstance(metric, Metric) else None
    metrics = [c.metric or default or variant_metric(metric if isinstance(metric, str) else None)
               for c in configs]
    if any(not m.same_as(metrics[0]) for m in metrics[1:]):
        named = ", ".join(f"{c.name}: {m.describe()}" for c, m in zip(configs, metrics))
        raise CompareError(f"the runs were scored with different metrics ({describe_metrics(metrics)}); "
                           f"no paired comparison ({named}); rescore them with the same task and variant")
    return metrics[0]


def _mask_stack(masks: list[np.ndarray]) -> np.ndarray:
    """One (n,) mask when every row's is the same, else the (rows, n) stack."""
    if all(np.array_equal(m, masks[0]) for m in masks[1:]):
        return masks[0]
    return np.vstack(masks)


def score_matrix(configs: list[Config], variant: str | Metric | None = None, subset: bool = False) -> ScoreMatrix:
    """Align configurations on the questions of their first table (the solutions' order).

    subset=False: every question counts, a missing one as wrong. subset=True: only the
    questions every run answered (not ``missing``). Each question's components are averaged
    over a configuration's runs (a masked component: its masked values, and the mask itself where
    the runs' masks differ); ``seed_scores`` holds each run's own score on those questions.
    ``variant``: the metric of configurations that name none (a variant name or a Metric;
    default the default task's variant). Raises CompareError for configurations whose metrics differ.
    """
    if not configs or not all(c.tables for c in configs):
        raise CompareError("nothing to compare: every configuration needs at least one scored run")
    metric = common_metric(configs, variant)
    collapsed = [[_collapse(t, f"{c.name} ({s})", metric) for t, s in zip(c.tables, c.sources)]
                 for c in configs]
    qids = collapsed[0][0]["qid"].to_list()
    for c, tables in zip(configs, collapsed):
        for t, s in zip(tables, c.sources):
            extra = set(t["qid"].to_list()) ^ set(qids)
            if extra:
                raise CompareError(f"{c.name} ({s}) was scored on other questions than {configs[0].name} "
                                   f"({len(extra)} differ, e.g. {sorted(extra)[:3]}); score both against "
                                   "the same solutions")
    if subset:
        answered = set(qids)
        for tables in collapsed:
            for t in tables:
                if "missing" in t.columns:
                    answered -= set(t.filter(pl.col("missing").fill_null(False))["qid"].to_list())
        qids = [q for q in qids if q in answered]
    frame = pl.DataFrame({"qid": qids})

    def aligned(t: pl.DataFrame) -> pl.DataFrame:
        return frame.join(t, on="qid", how="left", maintain_order="left")

    def arrays(t: pl.DataFrame) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        a = aligned(t)
        values = {c: a[c].cast(pl.Float64).fill_null(0.0).to_numpy() for c in metric.value_columns}
        masks = {c.over: a[c.over].cast(pl.Boolean).fill_null(False).to_numpy().astype(np.float64)
                 for c in metric.components if c.over}
        return values, masks

    first = aligned(collapsed[0][0])
    blank = (first["truth_blank"].cast(pl.Boolean).fill_null(False).to_numpy()
             if "truth_blank" in first.columns else None)
    per_config = [[arrays(t) for t in tables] for tables in collapsed]
    parts = [_component(comp, [_mean_runs(comp, per_run) for per_run in per_config]) for comp in metric.components]
    seed_scores = []
    for c, per_run in zip(configs, per_config):
        runs = ScoreMatrix(
            [f"{c.name}#{i}" for i in range(len(per_run))], qids, blank=blank, metric=metric,
            components=[_component(comp, [_mean_runs(comp, [run]) for run in per_run]) for comp in metric.components])
        seed_scores.append([float(s) for s in runs.scores()])
    return ScoreMatrix([c.name for c in configs], qids, blank=blank, seed_scores=seed_scores,
                       components=parts, metric=metric)


def _mean_runs(comp: Any, per_run: list[tuple[dict[str, np.ndarray], dict[str, np.ndarray]]],
               ) -> tuple[np.ndarray, np.ndarray | None, dict[str, np.ndarray] | None]:
    """(values, mask, counts) of one component of one configuration: its runs' (seeds') values
    averaged per question (a masked component: its masked values, and the mask itself where the
    runs' masks differ); a set statistic's per-question counts averaged over the runs."""
    if comp.parts:
        counts = {c.rsplit("_", 1)[1]: np.mean([v[c] for v, _ in per_run], axis=0) for c in comp.parts}
        return np.zeros_like(next(iter(counts.values()))), None, counts
    xs = [v[comp.column] for v, _ in per_run]
    if comp.over is None:
        return np.mean(xs, axis=0), None, None
    ws = [w[comp.over] for _, w in per_run]
    if all(np.array_equal(w, ws[0]) for w in ws[1:]):
        return np.mean(xs, axis=0), ws[0], None
    w = np.mean(ws, axis=0)   # the runs cover different questions: the masked mean over the runs
    hits = np.mean([x * wi for x, wi in zip(xs, ws)], axis=0)
    return np.where(w > 0, hits / np.where(w > 0, w, 1.0), 0.0), w, None


def _component(comp: Any, rows: list[tuple[np.ndarray, np.ndarray | None, dict[str, np.ndarray] | None]],
               ) -> ComponentMatrix:
    """A component's matrix over configurations (or runs): ``rows`` from :func:`_mean_runs`."""
    counts = None
    if comp.parts:
        counts = {k: np.array([r[2][k] for r in rows]) for k in rows[0][2]}  # type: ignore[index]
    return ComponentMatrix(comp.name, comp.weight, np.array([r[0] for r in rows]),
                           _mask_stack([r[1] for r in rows]) if comp.over else None,  # type: ignore[misc]
                           comp.empty_value if comp.over else 0.0, comp.combine, comp.stat, counts)


# The per-question table's columns flips show: the variant tables' names, then the task tables' names.
TRUTH = ("truth_value", "truth")
TRUTH_REF = ("truth_ref", "truth_refs")
PRED = ("pred_value", "pred")
PRED_REF = ("pred_ref", "pred_refs")


def flips(configs: list[Config], m: ScoreMatrix, a: int, b: int) -> list[dict[str, Any]]:
    """The questions whose score changed from configuration ``a`` to ``b`` (first run of each
    for the answers shown): qid, the change (``delta``: the question's share of the score; in
    points for a summed task; set-level statistics have no share), question, truth, both answers,
    the gold and cited refs or pages and the classes."""
    per_q = m.per_question()
    diff = per_q[b] - per_q[a]
    if m.metric.summed:    # in points: each question's share of the summed score
        diff = diff / max(m.n, 1)
    ta = configs[a].tables[0].unique("qid", keep="first", maintain_order=True)
    tb = configs[b].tables[0].unique("qid", keep="first", maintain_order=True)
    rows_a = {r["qid"]: r for r in ta.iter_rows(named=True)}
    rows_b = {r["qid"]: r for r in tb.iter_rows(named=True)}
    out = []

    def get(row: dict[str, Any], names: tuple[str, ...]) -> Any:
        return next((row[k] for k in names if row.get(k) is not None), None)

    for i in np.flatnonzero(np.abs(diff) > 1e-9):
        qid = m.qids[i]
        ra, rb = rows_a.get(qid, {}), rows_b.get(qid, {})
        out.append({
            "qid": qid,
            "change": "fixed" if diff[i] > 0 else "broken",
            "delta": float(diff[i]),
            "question": ra.get("question") or rb.get("question"),
            "truth": get(ra, TRUTH),
            "truth_ref": get(ra, TRUTH_REF),
            "a_answer": None if ra.get("missing") else get(ra, PRED),
            "a_ref": None if ra.get("missing") else get(ra, PRED_REF),
            "a_class": ra.get("error_class"),
            "b_answer": None if rb.get("missing") else get(rb, PRED),
            "b_ref": None if rb.get("missing") else get(rb, PRED_REF),
            "b_class": rb.get("error_class"),
            "kind": ra.get("answer_kind") or rb.get("answer_kind"),
        })
        if "page_class" in ra or "page_class" in rb:   # a typed task's cited pages (typed_classes)
            out[-1].update(a_page_class=ra.get("page_class"), a_pages=page_marks(ra),
                           b_page_class=rb.get("page_class"), b_pages=page_marks(rb))
    out.sort(key=lambda r: (r["change"] != "fixed", -abs(r["delta"]), r["qid"]))
    return out


#: the prefix of the page classes' columns beside the error classes (sweep cells, compare counts)
PAGE_PREFIX = "pages:"


def page_marks(row: dict[str, Any]) -> dict[str, Any] | None:
    """A typed question's cited pages and gold pools, each with whether it hits
    (``{"class", "detail", "cited": [[page, hit]], "pools": [[pool, hit]]}``); None for a row
    without the page dimension (kohaku.tasks.analysis.typed_classes)."""
    if row.get("pages_cited") is None or row.get("pages_pools") is None:
        return None
    return {"class": row.get("page_class"), "detail": row.get("page_detail") or "",
            "cited": [[p, bool(h)] for p, h in zip(row["pages_cited"], row.get("pages_cited_hit") or [])],
            "pools": [[p, bool(h)] for p, h in zip(row["pages_pools"], row.get("pages_pools_hit") or [])]}


def _mean_counts(per_run: list[Counter], keys: list[str]) -> dict[str, float]:
    mean = {k: sum(c.get(k, 0) for c in per_run) / len(per_run) for k in keys}
    return {k: (int(v) if float(v).is_integer() else round(v, 2)) for k, v in mean.items()}


def page_counts(config: Config, qids: list[str] | None = None) -> dict[str, float]:
    """The page classes of a typed configuration (``pages:<class>`` -> mean count over its
    runs, every page class present); {} when its tables have no page dimension."""
    per_run = []
    for t in config.tables:
        if "page_class" not in t.columns:
            continue
        if qids is not None:
            t = t.filter(pl.col("qid").is_in(qids))
        per_run.append(Counter(f"{PAGE_PREFIX}{c}" for c in t["page_class"].drop_nulls().to_list()))
    return _mean_counts(per_run, [f"{PAGE_PREFIX}{c}" for c in PAGE_CLASSES]) if per_run else {}


def kind_counts(config: Config, qids: list[str] | None = None, classes: list[str] | None = None,
                pages: bool = True) -> dict[str, dict[str, float]]:
    """Error classes split by answer kind: kind -> class -> mean count over the runs (the kinds
    in order of appearance; ``classes`` default :func:`class_names`), with the page classes
    (``pages:<class>``) where the tables have them; {} without error classes."""
    per_kind: dict[str, list[Counter]] = {}
    n_runs = 0
    for t in config.tables:
        t = _classified(config, t)
        if t is None or "answer_kind" not in t.columns:
            continue
        n_runs += 1
        if qids is not None:
            t = t.filter(pl.col("qid").is_in(qids))
        has_pages = pages and "page_class" in t.columns
        for kind in t["answer_kind"].drop_nulls().unique(maintain_order=True).to_list():
            sub = t.filter(pl.col("answer_kind") == kind)
            c = Counter(sub["error_class"].drop_nulls().to_list())
            if has_pages:
                c.update(f"{PAGE_PREFIX}{p}" for p in sub["page_class"].drop_nulls().to_list())
            per_kind.setdefault(kind, []).append(c)
    if not n_runs:
        return {}
    keys = [k for k in (class_names([config]) if classes is None else classes) if not k.startswith(PAGE_PREFIX)]
    keys += [f"{PAGE_PREFIX}{c}" for c in PAGE_CLASSES]
    out = {}
    for kind, counters in per_kind.items():
        counters = counters + [Counter()] * (n_runs - len(counters))   # a run without the kind: 0
        extra = [k for c in counters for k in c if k not in keys]
        out[kind] = _mean_counts(counters, [k for k in keys + list(dict.fromkeys(extra))
                                            if any(c.get(k) for c in counters)])
    return out


def _classified(config: Config, t: pl.DataFrame) -> pl.DataFrame | None:
    if "error_class" in t.columns:
        return t
    known = known_metric(config.metric)
    if known is not None and known.classes and all(c in t.columns for c in known.needs):
        return with_classes(t, known)
    return None


def class_names(configs: list[Config]) -> list[str]:
    """The error classes to show for these configurations, in order: the classes their
    scores.json lists (else the classes of its metric as the metric's room describes it), then
    any other class their tables hold, in order of appearance."""
    order: list[str] = []
    for c in configs:
        known = known_metric(c.metric)
        listed = c.classes or (list(known.class_names) if known is not None else [])
        order.extend(k for k in listed if k not in order)
    for c in configs:
        for t in c.tables:
            t = _classified(c, t)
            if t is not None:
                order.extend(k for k in t["error_class"].drop_nulls().unique(maintain_order=True).to_list()
                             if k not in order)
    return order


def error_counts(config: Config, qids: list[str] | None = None, classes: list[str] | None = None) -> dict[str, float]:
    """Error-class counts of a configuration (mean over its runs; on ``qids`` when given), for
    ``classes`` (default :func:`class_names` of the configuration; 0 for a class no question is
    in); {} when its tables have no error classes."""
    per_run = []
    for t in config.tables:
        t = _classified(config, t)
        if t is None:
            continue
        if qids is not None:
            t = t.filter(pl.col("qid").is_in(qids))
        per_run.append(Counter(t["error_class"].drop_nulls().to_list()))
    if not per_run:
        return {}
    keys = class_names([config]) if classes is None else classes
    return _mean_counts(per_run, list(keys))


def _f(x: float | None, digits: int = 4, signed: bool = False) -> str:
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return "-"
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def _p(p: float) -> str:
    return f"{p:.4f}" if p >= 1e-4 else "<1e-4"


def pair_lines(comparison: Comparison) -> list[str]:
    """The pairs table: delta, its interval, p, Holm p, MDE, fixed/broken, and a mark '*' where
    the interval excludes zero."""
    level = round(comparison.level * 100)
    lines = [f"{'A':<18}{'B':<18}{'n':>5}{'delta':>9}  {f'{level}% interval':<20}{'p':>8}{'p_holm':>8}"
             f"{'mde80':>8}{'fixed':>7}{'broken':>7}"]
    for p in comparison.pairs:
        ci = f"[{_f(p.lo, signed=True)}, {_f(p.hi, signed=True)}]"
        lines.append(f"{p.a[:17]:<18}{p.b[:17]:<18}{p.n:>5}{_f(p.delta, signed=True):>9}  {ci:<20}"
                     f"{_p(p.p):>8}{_p(p.p_holm):>8}{_f(p.mde):>8}{p.fixed:>7}{p.broken:>7}"
                     + ("  *" if p.significant else ""))
    return lines


def interval_lines(comparison: Comparison) -> list[str]:
    level = round(comparison.level * 100)
    lines = [f"{'run':<30}{'score':>8}  {f'{level}% interval':<18}{'seeds':>6}{'seed sd':>9}"]
    for it in comparison.intervals:
        ci = f"[{_f(it.lo)}, {_f(it.hi)}]"
        lines.append(f"{it.name[:29]:<30}{_f(it.score):>8}  {ci:<18}{it.n_seeds:>6}{_f(it.seed_sd):>9}")
    return lines


def error_table_lines(names: list[str], counts: list[dict[str, float]]) -> list[str]:
    """Error classes (rows) per configuration (columns)."""
    width = max(10, min(18, max(len(n) for n in names) + 2))
    lines = [f"{'class':<21}" + "".join(f"{n[:width - 1]:>{width}}" for n in names)]
    classes = list(dict.fromkeys(k for c in counts for k in c))
    for cls in classes:
        lines.append(f"{cls:<21}" + "".join(f"{c.get(cls, '-'):>{width}}" for c in counts))
    return lines


def component_lines(comparison: Comparison, metric: Metric) -> list[str]:
    """Each configuration's metric components on all questions (weight-0 ones included: they
    are reported beside the score, not in it)."""
    names = [c.name for c in metric.components]
    labels = [c.label for c in metric.components]
    width = max(10, min(22, max(len(x) for x in labels) + 2))
    lines = [f"{'run':<30}" + "".join(f"{x[:width - 1]:>{width}}" for x in labels)]
    for it in comparison.intervals:
        lines.append(f"{it.name[:29]:<30}" + "".join(f"{_f(it.components.get(n)):>{width}}" for n in names))
    return lines


def flip_lines(rows: list[dict[str, Any]], shown: int, width: int = 60) -> list[str]:
    def cut(x: Any, w: int) -> str:
        s = "<missing>" if x is None else str(x).replace("\n", " ")
        return s if len(s) <= w else s[: w - 1] + "…"

    def full(x: Any) -> str:
        # cited refs or pages in full: a flip is often a page, and the page is at the end
        return "<missing>" if x is None else str(x).replace("\n", " ")

    lines = []
    for r in rows[:shown]:
        kind = f"[{r['kind']}] " if r.get("kind") else ""
        lines.append(f"  {r['change']:<6} {r['qid']:<7} {r['delta']:+.3f}  {kind}{cut(r['question'], width)}")
        lines.append(f"         truth {cut(r['truth'], 28):<30}{'':<22}{full(r['truth_ref'])}")
        for side in ("a", "b"):
            pages = f" · pages {r[f'{side}_page_class']}" if r.get(f"{side}_page_class") else ""
            lines.append(f"         {side.upper()}     {cut(r[f'{side}_answer'], 28):<30}"
                         f"{((r[f'{side}_class'] or '') + pages):<22}{full(r[f'{side}_ref'])}")
    if len(rows) > shown:
        lines.append(f"  ... {len(rows) - shown} more (--flips N shows more; --json has them all)")
    return lines
