"""Honest selection: how much of the best configuration's lead survives on new questions.

Every tool that ranks configurations (a sweep's leaderboard, ``compare.py`` with several runs,
``eval_retrieval``'s variants, ``ensemble.py``'s choices) scores each configuration on the same
questions it is then picked on. The best of N configurations therefore looks better than it will
be on questions nobody chose on (the private split of a competition): with N equal
configurations the in-sample best is the maximum of N noisy scores, above their common mean.
:func:`select` measures that, from the per-question scores already in the artifacts (no re-run):

- **in-sample best**: the configuration with the highest score on all questions, and its score;
- **out-of-sample estimate** of the *selection procedure* (pick the best, use it): repeated
  random splits of the questions (``n_splits``, a ``select_share`` part to choose on and the rest
  to score the chosen configuration on); the estimate is the mean held-out score of the chosen
  configuration. Its 95 % interval: the same procedure on bootstrap resamples of the questions
  (``n_outer`` resamples, each with ``outer_splits`` splits; a question drawn twice stays on one
  side of a split), percentile interval. Choosing on a part of the questions is a little noisier
  than choosing on all of them, so the estimate leans slightly pessimistic where one
  configuration is truly better, and is unbiased where none is;
- **optimism**: in-sample best minus the estimate (what the leaderboard overstates);
- **P(best)**: each configuration's share of paired bootstrap resamples of the questions on which
  it scores highest (ties shared);
- **the pick**: the simplest configuration (``simplicity``: the caller's order, simplest first,
  e.g. the baseline or default first, then fewest changed keys) within the noise of the best:
  ``rule="bootstrap"``, the paired bootstrap 95 % interval of its difference to the best contains
  0; ``rule="one_se"``, its difference to the best is at most one bootstrap standard error of
  that difference.

A score is either the mean of a (questions x configurations) matrix over the questions, or any
statistic given as ``scorer``: a function of question weights (B, n) returning the (B, R)
scores of every configuration on each weighting (a split's 0/1 masks, a bootstrap's counts;
:func:`kohaku.report.paired.resample_scores` for a task's metric with masked or set-level
components). Everything is deterministic given ``seed``; numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

Scorer = Callable[[np.ndarray], np.ndarray]

RULES = ("bootstrap", "one_se")


@dataclass
class SelectionConfig:
    """How :func:`select` estimates and picks.

    n_splits: random splits for the estimate; select_share: the share of questions chosen on in
    each split (the rest is scored); n_outer, outer_splits: bootstrap resamples of the questions
    for the estimate's interval and splits within each; n_resamples: paired bootstrap resamples
    for P(best) and the differences to the best; level: interval level; rule: bootstrap | one_se
    (see the module docstring); seed: every random draw."""

    n_splits: int = 500
    select_share: float = 0.5
    n_outer: int = 200
    outer_splits: int = 50
    n_resamples: int = 2000
    level: float = 0.95
    rule: str = "bootstrap"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"selection rule {self.rule!r}: use one of {', '.join(RULES)}")
        if not 0 < self.select_share < 1:
            raise ValueError(f"selection select_share={self.select_share}: give a share strictly "
                             "between 0 and 1 (the part of the questions chosen on)")
        if min(self.n_splits, self.n_outer, self.outer_splits, self.n_resamples) < 1:
            raise ValueError("selection n_splits, n_outer, outer_splits and n_resamples must be >= 1")


@dataclass
class Selection:
    """What :func:`select` found; ``rows()`` is the per-configuration table."""

    names: list[str]
    n_questions: int
    scores: np.ndarray            # (R,) in-sample score of each configuration
    best: int                     # index of the in-sample best
    estimate: float               # out-of-sample estimate of choosing the best
    estimate_lo: float
    estimate_hi: float
    optimism: float               # scores[best] - estimate
    p_best: np.ndarray            # (R,) paired bootstrap probability of being best
    chosen_share: np.ndarray      # (R,) share of the splits whose selection part chose it
    delta: np.ndarray             # (R,) score minus the best's
    delta_lo: np.ndarray
    delta_hi: np.ndarray
    within_noise: np.ndarray      # (R,) bool
    pick: int                     # index of the simplest configuration within the noise
    config: SelectionConfig = field(default_factory=SelectionConfig)
    # the questions the score reads, where fewer than n_questions (a recall over the answerable
    # ones): the splits draw from all n_questions, each half holding its share of these
    n_scored: int | None = None

    def _questions(self) -> str:
        if self.n_scored is None or self.n_scored >= self.n_questions:
            return f"{self.n_questions} questions"
        return f"{self.n_scored} of {self.n_questions} questions scored"

    @property
    def best_name(self) -> str:
        return self.names[self.best]

    @property
    def pick_name(self) -> str:
        return self.names[self.pick]

    def summary(self) -> dict[str, Any]:
        """One row: the in-sample winner and its score, the estimate and interval, the optimism,
        the pick and its score."""
        return {"questions": self.n_questions,
                "scored": self.n_questions if self.n_scored is None else self.n_scored,
                "configs": len(self.names),
                "in_sample_best": self.best_name, "in_sample_score": float(self.scores[self.best]),
                "estimate": self.estimate, "estimate_lo": self.estimate_lo,
                "estimate_hi": self.estimate_hi, "optimism": self.optimism,
                "pick": self.pick_name, "pick_score": float(self.scores[self.pick])}

    def rows(self) -> list[dict[str, Any]]:
        """Per configuration (given order): score, difference to the best with its interval,
        P(best), the share of splits that chose it, whether it is within the noise, picked."""
        return [{"config": n, "score": float(self.scores[i]), "delta_to_best": float(self.delta[i]),
                 "delta_lo": float(self.delta_lo[i]), "delta_hi": float(self.delta_hi[i]),
                 "p_best": float(self.p_best[i]), "chosen_share": float(self.chosen_share[i]),
                 "within_noise": bool(self.within_noise[i]), "picked": i == self.pick}
                for i, n in enumerate(self.names)]

    def lines(self) -> list[str]:
        """The summary in words (for printing)."""
        c = self.config
        pct = round(c.level * 100)
        return [
            f"in-sample best: {self.best_name} {self.scores[self.best]:.4f} (of {len(self.names)} "
            f"configurations, {self._questions()})",
            f"out-of-sample estimate of picking the best: {self.estimate:.4f} [{self.estimate_lo:.4f}, "
            f"{self.estimate_hi:.4f}] ({pct} %; {c.n_splits} random splits, chosen on "
            f"{c.select_share:.0%} of the questions, scored on the rest)",
            f"optimism (in-sample best - estimate): {self.optimism:+.4f}",
            f"pick ({'paired bootstrap interval of the difference to the best contains 0' if c.rule == 'bootstrap' else 'within one standard error of the best'}"
            f", simplest first): {self.pick_name} {self.scores[self.pick]:.4f}",
        ]

    def markdown(self) -> str:
        """A "Selection" section: the summary lines and the per-configuration table."""
        head = "| config | score | vs best [95 %] | P(best) | chosen in splits | within noise | pick |"
        out = ["## Selection\n", *[f"- {line}" for line in self.lines()], "", head,
               "|" + "---|" * 7]
        for r in self.rows():
            out.append(f"| {r['config']} | {r['score']:.4f} | {r['delta_to_best']:+.4f} "
                       f"[{r['delta_lo']:+.4f}, {r['delta_hi']:+.4f}] | {r['p_best']:.3f} | "
                       f"{r['chosen_share']:.3f} | {'yes' if r['within_noise'] else 'no'} | "
                       f"{'**pick**' if r['picked'] else ''} |")
        return "\n".join(out) + "\n"


def mean_scorer(scores: np.ndarray) -> Scorer:
    """The scorer of a (questions x configurations) matrix: the weighted mean over questions."""
    s = np.asarray(scores, dtype=np.float64)

    def scorer(weights: np.ndarray) -> np.ndarray:
        w = np.atleast_2d(weights)
        total = np.maximum(w.sum(axis=1, keepdims=True), 1e-300)
        return w @ s / total

    return scorer


def split_masks(weights: np.ndarray, n_splits: int, share: float,
                rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(selection, held-out) question weights (n_splits, n) of random splits of the questions
    with weight > 0: ``share`` of them (at least one, at most all but one) to choose on, the
    rest to score on; each keeps its weight (a bootstrap count) on its side."""
    present = np.flatnonzero(weights > 0)
    k = int(np.clip(round(share * present.size), 1, max(present.size - 1, 1)))
    keys = rng.random((n_splits, present.size))
    chosen = np.argsort(keys, axis=1)[:, :k]
    sel = np.zeros((n_splits, weights.size))
    sel[np.arange(n_splits)[:, None], present[chosen]] = 1.0
    held = np.zeros_like(sel)
    held[:, present] = 1.0
    held -= sel
    return sel * weights, held * weights


def _argmax_rows(x: np.ndarray) -> np.ndarray:
    """First maximum of each row (the given order breaks ties: the simpler configuration)."""
    return np.argmax(x, axis=1)


def _procedure(scorer: Scorer, weights: np.ndarray, n_splits: int, share: float,
               rng: np.random.Generator, r: int) -> tuple[float, np.ndarray]:
    """Mean held-out score of the configuration chosen on the selection part, over ``n_splits``
    random splits of the questions weighted by ``weights``; and each config's share of choices."""
    sel, held = split_masks(weights, n_splits, share, rng)
    chosen = _argmax_rows(scorer(sel))
    held_scores = scorer(held)[np.arange(n_splits), chosen]
    counts = np.bincount(chosen, minlength=r)
    return float(held_scores.mean()), counts / n_splits


def _bootstrap_counts(n: int, b: int, rng: np.random.Generator) -> np.ndarray:
    idx = rng.integers(0, n, size=(b, n))
    flat = (idx + (np.arange(b) * n)[:, None]).ravel()
    return np.bincount(flat, minlength=b * n).reshape(b, n).astype(np.float64)


def select(scores: np.ndarray | None = None, names: Sequence[str] | None = None,
           simplicity: Sequence[int] | Sequence[str] | None = None, *, scorer: Scorer | None = None,
           n_questions: int | None = None, config: SelectionConfig | None = None) -> Selection:
    """Selection-aware figures for R configurations on n questions.

    ``scores``: (n, R) per-question scores whose mean is the score (1/0 recall, a per-question
    points share); or ``scorer`` (see the module docstring) with ``n_questions``. ``names``: R
    labels (default c0, c1, ...). ``simplicity``: configurations (indices or names) simplest
    first; the ones not listed follow in the given order (default: the given order, so put the
    baseline first)."""
    config = config or SelectionConfig()
    if scorer is None:
        if scores is None:
            raise ValueError("select: give scores (questions x configurations) or a scorer")
        mat = np.asarray(scores, dtype=np.float64)
        if mat.ndim != 2:
            raise ValueError(f"select: scores has shape {mat.shape}; expected (questions, configurations)")
        n_questions = mat.shape[0]
        scorer = mean_scorer(mat)
    elif n_questions is None:
        raise ValueError("select: a scorer needs n_questions")
    n = int(n_questions)
    if n < 2:
        raise ValueError(f"select: {n} question(s); splits need at least 2")
    ones = np.ones(n)
    full = scorer(ones[None, :])[0]
    r = full.size
    names = [f"c{i}" for i in range(r)] if names is None else [str(x) for x in names]
    if len(names) != r:
        raise ValueError(f"select: {len(names)} names for {r} configurations")
    rng = np.random.default_rng(config.seed)
    best = int(np.argmax(full))

    estimate, chosen_share = _procedure(scorer, ones, config.n_splits, config.select_share, rng, r)
    outer = np.empty(config.n_outer)
    for i, counts in enumerate(_bootstrap_counts(n, config.n_outer, rng)):
        outer[i], _ = _procedure(scorer, counts, config.outer_splits, config.select_share, rng, r)
    alpha = (1 - config.level) / 2
    lo, hi = np.quantile(outer, [alpha, 1 - alpha])

    boot = np.vstack([scorer(c) for c in np.array_split(
        _bootstrap_counts(n, config.n_resamples, rng), max(1, config.n_resamples // 1000))])
    top = boot.max(axis=1, keepdims=True)
    winners = np.isclose(boot, top, rtol=0, atol=1e-12)
    p_best = (winners / winners.sum(axis=1, keepdims=True)).mean(axis=0)
    diff = boot - boot[:, [best]]
    d_lo, d_hi = np.quantile(diff, [alpha, 1 - alpha], axis=0)
    delta = full - full[best]
    if config.rule == "bootstrap":
        within = d_hi >= 0
    else:
        within = delta >= -diff.std(axis=0, ddof=1)
    within[best] = True

    order = _order(simplicity, names)
    pick = next(i for i in order if within[i])
    return Selection(names, n, full, best, estimate, float(lo), float(hi),
                     float(full[best] - estimate), p_best, chosen_share, delta, d_lo, d_hi,
                     within, pick, config)


def _order(simplicity: Sequence[int] | Sequence[str] | None, names: list[str]) -> list[int]:
    given: list[int] = []
    for item in simplicity or []:
        i = names.index(item) if isinstance(item, str) and item in names else (
            -1 if isinstance(item, str) else int(item))
        if not 0 <= i < len(names):
            raise ValueError(f"select: simplicity names configuration {item!r}, not among {names}")
        if i not in given:
            given.append(i)
    return given + [i for i in range(len(names)) if i not in given]


def matrix_scorer(m: Any) -> Scorer:
    """The scorer of a :class:`kohaku.report.paired.ScoreMatrix` (its task's metric, masked and
    set-level components included) for :func:`select`."""
    from kohaku.report.paired import resample_scores

    return lambda weights: resample_scores(m, np.atleast_2d(weights))


def select_matrix(m: Any, simplicity: Sequence[int] | Sequence[str] | None = None,
                  config: SelectionConfig | None = None) -> Selection:
    """:func:`select` over a ScoreMatrix's configurations with its task's metric."""
    found = select(names=m.names, simplicity=simplicity, scorer=matrix_scorer(m), n_questions=m.n,
                   config=config)
    found.n_scored = m.n_scored
    return found


def simplicity_by_changes(changes: Sequence[int], names: Sequence[str] | None = None) -> list[int]:
    """Indices simplest first: fewest changed keys, then the given order (stable)."""
    return sorted(range(len(changes)), key=lambda i: (changes[i], i))
