"""Is a difference real? Paired bootstrap over questions for any task's score.

Every configuration is scored on the same questions, so two configurations are compared
question by question: one resample draws n questions with replacement and scores every
configuration on that same draw (the pairing), which keeps the questions' shared difficulty out
of the difference. A resample is a vector of counts (how often each question was drawn), so the
scores of B resamples are matrix products (:func:`resample_scores`): 10,000 resamples of 282
questions for 6 configurations take well under a second.

The statistic is the metric itself, recomputed on each resample, on the task's own scale. A
metric is a weighted sum of components (:mod:`kohaku.tasks.score.components`); a component is the mean
of its per-question values over the questions its ``over`` mask selects (every question without
one), and its ``empty`` value when a resample draws none of them; a summed component
(``combine: sum``, a task scored in points) is their total on the resample; a set-level
statistic (an F1 over the set) is recomputed from its per-question counts summed over the
resample (a ``fixed`` one keeps its value). WattBot: 0.75·value + 0.15·ref + 0.10·NA, NA over every
question (``wattbot``) or the recall over the resample's unanswerable questions, 1.0 when it
draws none (``wattbot-recall``). A configuration with several seeds enters with its
seed-averaged components per question; the seeds' own spread is reported beside
(:attr:`ScoreMatrix.seed_scores`) and is not part of the interval.

What each figure covers: the interval and p-value cover the noise of *which questions* were asked
(a new question set from the same population), for these fixed generations; the seed spread covers
the noise of *sampling the model* on these questions. Neither covers the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Sequence

import numpy as np

from kohaku.tasks.named import registry
from kohaku.tasks.named.catalog import DEFAULT_VARIANT
from kohaku.tasks.score.components import Component, Metric, variant_metric

N_RESAMPLES = 10_000
SEED = 0
LEVEL = 0.95
POWER = 0.80
_CHUNK = 2_000  # resamples per matrix product (bounds memory at ~ chunk x n x 8 bytes)


@dataclass
class ComponentMatrix:
    """One metric component of R configurations on n questions.

    values: (R, n) per-question values (seed-averaged where a configuration has seeds; 0 where
    the question does not count); over: None (every question counts), or the (n,) mask of the
    questions that count, as 0/1 floats ((R, n) where configurations' masks differ; a fraction
    where a configuration's seeds disagree); empty: the component on a question set where the
    mask selects nothing. Its value on a resample is sum(counts·values·over) / sum(counts·over).
    """

    name: str
    weight: float
    values: np.ndarray
    over: np.ndarray | None = None
    empty: float = 0.0
    combine: str = "mean"                     # mean | sum (points: the total, not the mean)
    stat: str | None = None                   # f1 | f1_macro (from ``parts``) | fixed (``values``)
    parts: dict[str, np.ndarray] | None = None  # a set statistic's per-question counts: tp, fp, fn, tn (R, n)

    def __post_init__(self) -> None:
        self.values = np.atleast_2d(np.asarray(self.values, dtype=np.float64))
        if self.parts is not None:
            self.parts = {k: np.atleast_2d(np.asarray(v, dtype=np.float64)) for k, v in self.parts.items()}
        self.weight = float(self.weight)
        self.empty = float(self.empty)
        if self.over is not None:
            self.over = np.asarray(self.over, dtype=np.float64)
        self._hits: np.ndarray | None = None

    @property
    def hits(self) -> np.ndarray:
        """values·over (R, n): the numerator's per-question terms."""
        if self._hits is None:
            self._hits = self.values if self.over is None else self.values * self.over
        return self._hits


class ScoreMatrix:
    """Per-question components of R configurations on the same n questions.

    ``ScoreMatrix(names, qids, components=[ComponentMatrix, ...], metric=Metric)`` for any task;
    ``ScoreMatrix(names, qids, value, ref, na, blank, variant)`` for WattBot (value, ref, na:
    (R, n) arrays in [0, 1]; blank: (n,) whether the truth is unanswerable, the NA recall's
    denominator). names: R labels; seed_scores: each configuration's per-seed scores (one entry
    without seeds).
    """

    def __init__(
        self,
        names: Sequence[str],
        qids: Sequence[str],
        value: np.ndarray | None = None,
        ref: np.ndarray | None = None,
        na: np.ndarray | None = None,
        blank: np.ndarray | None = None,
        variant: str | None = DEFAULT_VARIANT,
        seed_scores: list[list[float]] | None = None,
        *,
        components: Sequence[ComponentMatrix] | None = None,
        metric: Metric | None = None,
    ) -> None:
        self.names = list(names)
        self.qids = list(qids)
        shape = (len(self.names), len(self.qids))
        self.blank = np.zeros(shape[1], dtype=bool) if blank is None else np.asarray(blank, dtype=bool)
        if self.blank.shape != (shape[1],):
            raise ValueError(f"ScoreMatrix.blank has shape {self.blank.shape}; expected ({shape[1]},)")
        if components is None:  # a variant's components by name (WattBot's value, ref, na)
            known = registry.names("variant")
            if variant not in known:
                raise ValueError(f"unknown metric variant '{variant}'; use one of {', '.join(known)}")
            described = variant_metric(variant)
            metric = metric or described
            arrays = {"value": value, "ref": ref, "na": na}
            components = [ComponentMatrix(c.name, c.weight, arrays[c.name],  # type: ignore[arg-type]
                                          self.blank if c.over else None, c.empty_value if c.over else 0.0)
                          for c in described.components]
        else:
            variant = metric.variant if metric is not None else None
        self.variant = variant
        self.components = list(components)
        for c in self.components:
            if c.values.shape != shape:
                raise ValueError(f"ScoreMatrix.{c.name} has shape {c.values.shape}; expected {shape} "
                                 "(configurations x questions)")
            if c.over is not None and c.over.shape not in ((shape[1],), shape):
                raise ValueError(f"ScoreMatrix.{c.name}: its mask has shape {c.over.shape}; expected "
                                 f"({shape[1]},) or {shape}")
        names_ = [c.name for c in self.components]
        if len(set(names_)) != len(names_):
            raise ValueError(f"ScoreMatrix: component names repeat: {names_}")
        self.metric = metric or Metric("custom", tuple(
            Component(c.name, c.name, c.weight, None if c.over is None else f"{c.name}:over",
                      None if c.over is None else c.empty) for c in self.components))
        self.seed_scores = seed_scores or [[s] for s in self.scores()]

    def __getitem__(self, name: str) -> ComponentMatrix:
        for c in self.components:
            if c.name == name:
                return c
        raise KeyError(f"no component {name!r}; components: {', '.join(c.name for c in self.components)}")

    # WattBot's arrays by their old names
    @property
    def value(self) -> np.ndarray:
        return self["value"].values

    @property
    def ref(self) -> np.ndarray:
        return self["ref"].values

    @property
    def na(self) -> np.ndarray:
        return self["na"].values

    @property
    def n(self) -> int:
        return len(self.qids)

    @property
    def n_scored(self) -> int:
        """The questions the score reads: those some weighted component counts (its mask) for
        some configuration; ``n`` when a weighted component counts every question (a recall
        over the answerable questions only: fewer)."""
        weighted = [c for c in self.components if c.weight != 0] or self.components
        counted = np.zeros(self.n, dtype=bool)
        for c in weighted:
            if c.over is None:
                return self.n
            counted |= np.atleast_2d(c.over).max(axis=0) > 0
        return int(counted.sum())

    def scores(self) -> np.ndarray:
        """The metric of each configuration on all questions, (R,)."""
        return resample_scores(self, np.ones((1, self.n)))[0]

    def component_scores(self) -> dict[str, np.ndarray]:
        """Each component of each configuration on all questions: name -> (R,) (weight-0 ones
        included)."""
        parts = resample_components(self, np.ones((1, self.n)), scored_only=False)
        return {c.name: x[0] for c, x in zip(self.components, parts)}

    def per_question(self) -> np.ndarray:
        """(R, n) contributions whose mean over questions is the score (a masked component's
        share spread over the questions it covers, its empty value over all when it covers
        none): what 'fixed' and 'broken' compare."""
        out: np.ndarray | None = None
        for c in self.components:
            if c.weight == 0 or c.stat is not None:   # a set statistic has no per-question share
                continue
            if c.combine == "sum":
                term = c.weight * c.hits * self.n
            elif c.over is None:
                term = c.weight * c.values
            elif c.over.ndim == 1:
                size = float(c.over.sum())
                term = c.weight * c.empty if size == 0 else c.weight * c.values * c.over * (self.n / size)
            else:
                size = c.over.sum(axis=1, keepdims=True)
                with np.errstate(invalid="ignore", divide="ignore"):
                    term = np.where(size > 0, c.weight * c.values * c.over * (self.n / np.where(size > 0, size, 1.0)),
                                    c.weight * c.empty)
            out = term if out is None else out + term
        if out is None:
            return np.zeros((len(self.names), self.n))
        return np.broadcast_to(out, (len(self.names), self.n)).astype(np.float64, copy=False)

    def seed_sd(self) -> list[float | None]:
        """Sample standard deviation of each configuration's per-seed scores (None with one)."""
        return [float(np.std(s, ddof=1)) if len(s) > 1 else None for s in self.seed_scores]


def resample_counts(n: int, n_resamples: int, seed: int = SEED):
    """Yield (chunk, n) count matrices: how often each question is drawn in each resample."""
    rng = np.random.default_rng(seed)
    done = 0
    while done < n_resamples:
        b = min(_CHUNK, n_resamples - done)
        idx = rng.integers(0, n, size=(b, n))
        flat = (idx + (np.arange(b) * n)[:, None]).ravel()
        yield np.bincount(flat, minlength=b * n).reshape(b, n).astype(np.float64)
        done += b


def resample_components(m: ScoreMatrix, counts: np.ndarray, scored_only: bool = True) -> list[np.ndarray | None]:
    """(B, R) value of each component (in ``m.components`` order; None for weight-0 ones when
    ``scored_only``) on each resample of ``counts`` (B, n): sum(counts·values·over) /
    sum(counts·over), the component's empty value where that sum is 0."""
    n = np.maximum(counts.sum(axis=1, keepdims=True), 1.0)  # no questions: every score 0
    out: list[np.ndarray | None] = []
    for c in m.components:
        if scored_only and c.weight == 0:
            out.append(None)
        elif c.stat is not None:
            out.append(_set_statistic(c, counts))
        elif c.combine == "sum":
            out.append(counts @ c.hits.T)
        elif c.over is None:
            out.append(counts @ c.values.T / n)
        else:
            size = counts @ c.over.T
            if size.ndim == 1:
                size = size[:, None]
            hits = counts @ c.hits.T
            with np.errstate(invalid="ignore", divide="ignore"):
                out.append(np.where(size > 0, hits / np.where(size > 0, size, 1.0), c.empty))
    return out


def _f1(tp: np.ndarray, fp: np.ndarray, fn: np.ndarray) -> np.ndarray:
    den = 2 * tp + fp + fn
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, 2 * tp / np.where(den > 0, den, 1.0), 1.0)


def _set_statistic(c: ComponentMatrix, counts: np.ndarray) -> np.ndarray:
    """(B, R) a set-level statistic on each resample: its counts summed over the drawn questions."""
    if c.stat == "fixed":
        return np.broadcast_to(c.values[:, 0], (counts.shape[0], c.values.shape[0])).copy()
    if c.parts is None:
        raise ValueError(f"component {c.name}: statistic {c.stat} needs its per-question counts (parts)")
    total = {k: counts @ v.T for k, v in c.parts.items()}
    positive = _f1(total["tp"], total["fp"], total["fn"])
    if c.stat == "f1":
        return positive
    if c.stat == "f1_macro":
        return (positive + _f1(total["tn"], total["fn"], total["fp"])) / 2
    raise ValueError(f"component {c.name}: unknown set statistic {c.stat!r}")


def resample_scores(m: ScoreMatrix, counts: np.ndarray) -> np.ndarray:
    """(B, R) metric of every configuration on each resample of ``counts`` (B, n): the weighted
    sum of its components (weight-0 components are not computed)."""
    total: np.ndarray | None = None
    for c, x in zip(m.components, resample_components(m, counts)):
        if x is None:
            continue
        term = c.weight * x
        total = term if total is None else total + term
    return np.zeros((counts.shape[0], len(m.names))) if total is None else total


def bootstrap(m: ScoreMatrix, n_resamples: int = N_RESAMPLES, seed: int = SEED) -> np.ndarray:
    """(n_resamples, R) scores of every configuration on the same resamples (fixed seed)."""
    if m.n == 0:
        return np.zeros((n_resamples, len(m.names)))
    return np.vstack([resample_scores(m, c) for c in resample_counts(m.n, n_resamples, seed)])


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjustment (family-wise error), in the input order."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def minimum_detectable(sd: float, level: float = LEVEL, power: float = POWER) -> float:
    """The smallest true difference a two-sided test at ``level`` finds with ``power``, for a
    difference whose resampled standard deviation is ``sd``: (z_{1-α/2} + z_power)·sd."""
    z = NormalDist()
    return (z.inv_cdf(1 - (1 - level) / 2) + z.inv_cdf(power)) * sd


@dataclass
class Interval:
    """A configuration's score with its percentile bootstrap interval."""

    name: str
    score: float
    lo: float
    hi: float
    seed_sd: float | None
    n_seeds: int
    components: dict[str, float] = field(default_factory=dict)  # each component on all questions


@dataclass
class Pair:
    """B against A on the same questions: delta = score(B) - score(A)."""

    a: str
    b: str
    n: int
    delta: float
    lo: float
    hi: float
    p: float
    p_holm: float
    sd: float
    mde: float
    fixed: int
    broken: int
    fixed_ids: list[str]
    broken_ids: list[str]

    @property
    def significant(self) -> bool:
        """The interval excludes zero."""
        return self.lo > 0 or self.hi < 0

    def as_json(self) -> dict:
        return {"a": self.a, "b": self.b, "delta": self.delta, "ci": [self.lo, self.hi], "p": self.p,
                "p_holm": self.p_holm, "fixed": self.fixed, "broken": self.broken, "n": self.n,
                "sd": self.sd, "mde": self.mde, "significant": self.significant,
                "fixed_ids": self.fixed_ids, "broken_ids": self.broken_ids}


@dataclass
class Comparison:
    """Every configuration's interval and the requested pairs (Holm-adjusted together)."""

    intervals: list[Interval]
    pairs: list[Pair]
    n_resamples: int
    seed: int
    level: float


def _percentiles(x: np.ndarray, level: float) -> tuple[float, float]:
    lo, hi = np.quantile(x, [(1 - level) / 2, 1 - (1 - level) / 2], axis=0)
    return float(lo), float(hi)


def compare(
    m: ScoreMatrix,
    pairs: list[tuple[int, int]] | None = None,
    *,
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
    level: float = LEVEL,
    power: float = POWER,
) -> Comparison:
    """Intervals for every configuration and paired tests for ``pairs`` ((a, b) indices;
    default: every configuration against the first).

    The interval is the percentile interval of the resampled differences; the two-sided p-value
    is the share of resampled differences at least as far from the observed one as the observed
    one is from zero (the bootstrap distribution shifted to the null), (1 + k) / (1 + B); the
    minimum detectable difference is :func:`minimum_detectable` of their standard deviation.
    """
    if pairs is None:
        pairs = [(0, j) for j in range(1, len(m.names))]
    boot = bootstrap(m, n_resamples, seed)
    point = m.scores()
    per_q = m.per_question()
    sds = m.seed_sd()
    parts = m.component_scores()
    intervals = []
    for j, name in enumerate(m.names):
        lo, hi = _percentiles(boot[:, j], level) if m.n else (float("nan"), float("nan"))
        intervals.append(Interval(name, float(point[j]), lo, hi, sds[j], len(m.seed_scores[j]),
                                  {k: float(v[j]) for k, v in parts.items()}))
    raw = []
    for a, b in pairs:
        d = boot[:, b] - boot[:, a]
        delta = float(point[b] - point[a])
        lo, hi = _percentiles(d, level) if m.n else (0.0, 0.0)
        far = np.abs(d - delta) >= abs(delta) - 1e-12
        p = float((1 + far.sum()) / (1 + len(d)))
        sd = float(d.std(ddof=1)) if len(d) > 1 else 0.0
        diff = per_q[b] - per_q[a]
        fixed = [m.qids[i] for i in np.flatnonzero(diff > 1e-9)]
        broken = [m.qids[i] for i in np.flatnonzero(diff < -1e-9)]
        raw.append((m.names[a], m.names[b], delta, lo, hi, p, sd, fixed, broken))
    adjusted = holm([r[5] for r in raw])
    out = [Pair(a=a, b=b, n=m.n, delta=delta, lo=lo, hi=hi, p=p, p_holm=ph, sd=sd,
                mde=minimum_detectable(sd, level, power), fixed=len(fx), broken=len(br),
                fixed_ids=fx, broken_ids=br)
           for (a, b, delta, lo, hi, p, sd, fx, br), ph in zip(raw, adjusted)]
    return Comparison(intervals, out, n_resamples, seed, level)
