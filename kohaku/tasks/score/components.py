"""What a run's score is made of: a task's metric components, as the score stage writes them
and the reports read them.

The score stage writes the metric into ``scores.json`` (key ``metric``)::

    {"name": "<task>", "components": [
        {"name": "value", "column": "value_ok", "weight": 0.75, "over": null, "empty": null}, ...]}

A component's value on a set of questions is the mean of ``column`` (bool or float, in the
per-question table ``scores.parquet``) over the rows where the boolean column ``over`` is true
(every row when ``over`` is null); when ``over`` selects no row the component is ``empty``
(null: 0.0). A component with ``"combine": "sum"`` (a task whose score is a sum over questions,
``task.score.combine: sum``) is the total of ``column`` over those rows instead: points, not a
mean. A set-level component (``"stat"``) is one statistic of the whole question set, computed
from per-question counts so that a resample of the questions recomputes it: ``f1`` (the F1 of a
class from the columns ``<column>_tp``, ``<column>_fp``, ``<column>_fn``; 1 when all three sum to
0), ``f1_macro`` (the mean of that F1 and the other class's, from ``<column>_tn`` too), or
``fixed`` (a set-level figure kohaku cannot decompose: ``column`` holds its value on every row and
a resample keeps it). The score is the sum of weight x component; weight-0 components are
reported beside the score, not in it. A ``scores.json`` without ``metric`` (runs scored before tasks existed) is
the metric of its ``variant`` key, as the task's room describes it (kohaku.tasks.named.catalog's
``variant`` table; the default task's room's when it names none).
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kohaku.core.errors import MetricError
from kohaku.tasks.named import registry
from kohaku.tasks.named.catalog import DEFAULT_VARIANT

log = logging.getLogger(__name__)


#: the count columns (suffixes) of each decomposable set-level statistic
SET_PARTS = {"f1": ("tp", "fp", "fn"), "f1_macro": ("tp", "fp", "fn", "tn")}
STATS = (*SET_PARTS, "fixed")
COMBINE = ("mean", "sum")


@dataclass(frozen=True)
class Component:
    """One named part of a task's score (see the module doc)."""

    name: str
    column: str
    weight: float
    over: str | None = None
    empty: float | None = None
    combine: str = "mean"          # mean | sum: the mean over the questions it covers, or their total
    stat: str | None = None        # a set-level statistic: f1 | f1_macro | fixed (see the module doc)

    @property
    def parts(self) -> list[str]:
        """The per-question columns a set-level statistic is computed from ([] for others)."""
        if self.stat in ("f1", "f1_macro"):
            return [f"{self.column}_{k}" for k in SET_PARTS[self.stat]]
        return []

    @property
    def empty_value(self) -> float:
        """The component's value on a question set where ``over`` selects no row."""
        return 0.0 if self.empty is None else float(self.empty)

    @property
    def label(self) -> str:
        """``name (weight)``, as plots and tables show it."""
        return f"{self.name} ({self.weight:.2f})"

    def key(self) -> tuple[Any, ...]:
        """What makes two components the same measure (``empty`` only matters with ``over``)."""
        return (self.name, self.column, float(self.weight), self.over,
                None if self.over is None else self.empty_value, self.combine, self.stat)

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "column": self.column, "weight": self.weight,
                               "over": self.over, "empty": self.empty}
        if self.combine != "mean":
            out["combine"] = self.combine
        if self.stat is not None:
            out["stat"] = self.stat
        return out


@dataclass(frozen=True)
class Metric:
    """A task's score: its name and components (``variant``: the scorer's variant, where known).
    A room's own description of its metric (kohaku.tasks.named.catalog's ``variant`` table) also says
    how reports show it: ``title``, the registry's ``classes`` function for tables without error
    classes, and ``class_names`` in order; none of them is part of what the metric measures."""

    name: str
    components: tuple[Component, ...]
    variant: str | None = None
    title: str | None = None
    classes: str | None = None
    class_names: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()           # the per-question columns its classes function reads
    classes_source: str | None = None     # where its classes are defined, as reports cite it

    def key(self) -> tuple:
        return tuple(c.key() for c in self.components)

    def same_as(self, other: Metric) -> bool:
        """Whether scores under the two metrics measure the same thing (same components)."""
        return self.key() == other.key()

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.components]

    @property
    def columns(self) -> list[str]:
        """The per-question columns the metric reads: components' columns (a set-level
        statistic's count columns), then ``over`` columns."""
        out = self.value_columns
        out += [c.over for c in self.components if c.over and c.over not in out]
        return list(dict.fromkeys(out))

    @property
    def value_columns(self) -> list[str]:
        return list(dict.fromkeys(x for c in self.components for x in (c.parts or [c.column])))

    @property
    def summed(self) -> bool:
        """Whether the score is in points (a component summed over questions)."""
        return any(c.combine == "sum" for c in self.components)

    @property
    def known(self) -> Metric | None:
        """The room's description of this metric when it is one of the catalog's variants' (the
        same components), else None (a task's own components)."""
        for v in registry.names("variant"):
            described = variant_metric(v)
            if self.same_as(described):
                return described
        return None

    @property
    def display(self) -> str:
        """The metric's name as titles show it (the room's title for a known metric)."""
        known = self.known
        return (known.title or known.name) if known is not None else self.name

    def describe(self) -> str:
        """``<name>: 0.75 value + 0.15 ref + 0.10 na``, with where a component is taken over
        some questions only and the weight-0 components listed beside."""
        def part(c: Component) -> str:
            s = f"{c.weight:.2f} {c.name}"
            if c.combine == "sum":
                s += " (summed)"
            if c.stat:
                s += f" ({c.stat} over the set{', not resampled' if c.stat == 'fixed' else ''})"
            if c.over:
                s += f" (over {c.over}, {c.empty_value:g} when none)"
            return s

        scored = [part(c) for c in self.components if c.weight != 0]
        beside = [c.name + (f" (over {c.over})" if c.over else "") for c in self.components if c.weight == 0]
        name = self.name + (f" {self.variant}" if self.variant and self.variant != self.name else "")
        text = f"{name}: {' + '.join(scored) or '0'}"
        return text + (f"; beside: {', '.join(beside)}" if beside else "")

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "components": [c.as_json() for c in self.components]}

    def dumps(self) -> str:
        """Compact JSON (the runs table's ``metric`` column)."""
        return json.dumps({**self.as_json(), **({"variant": self.variant} if self.variant else {})},
                          separators=(",", ":"))


def variant_metric(variant: str | None = None) -> Metric:
    """The metric of a scorer ``variant`` as its room describes it (kohaku.tasks.named.catalog's
    ``variant`` table; its DEFAULT_VARIANT for None). Raises MetricError for an unknown one."""
    variant = variant or DEFAULT_VARIANT
    known = registry.names("variant")
    if variant not in known:
        raise MetricError(f"unknown metric variant '{variant}'; use one of {', '.join(known)}")
    return registry.lookup("variant", variant, "variant")(variant)


def known_metric(metric: Metric | None = None) -> Metric | None:
    """The room's description of ``metric`` (the default variant's for None), or None."""
    return (metric if metric is not None else variant_metric()).known


def with_classes(table: Any, metric: Metric | None = None) -> Any:
    """``table`` with the error classes of ``metric``'s room (the default variant's for None)
    when it has none, the metric is a known one that names a classes function and ``table`` holds
    the columns that function reads (a table scored before the error classes); else unchanged."""
    known = known_metric(metric)
    if ("error_class" in table.columns or known is None or not known.classes
            or not all(c in table.columns for c in known.needs)):
        return table
    return registry.lookup("classes", known.classes, "classes")(table)[0]


def _float(x: Any, where: str) -> float | None:
    if x is None:
        return None
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(float(x)):
        raise MetricError(f"{where}: {x!r} is not a number")
    return float(x)


def metric_from_json(data: Any, variant: str | None = None, where: str = "scores.json") -> Metric:
    """The metric of a ``scores.json`` ``metric`` entry; its ``variant``'s (variant_metric) when
    it is absent. Raises MetricError naming ``where`` for a malformed entry."""
    if data is None:
        return variant_metric(variant)
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as exc:
            raise MetricError(f"{where}: metric is not JSON ({exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("components"), list) or not data["components"]:
        raise MetricError(f"{where}: 'metric' must be {{\"name\": ..., \"components\": [...]}} with at "
                          "least one component")
    comps = []
    for i, c in enumerate(data["components"]):
        at = f"{where}: metric.components[{i}]"
        if not isinstance(c, dict) or not c.get("name") or not c.get("column"):
            raise MetricError(f"{at} needs a name and a column")
        weight = _float(c.get("weight", 1.0), f"{at}.weight")
        combine, stat = str(c.get("combine") or "mean"), c.get("stat")
        if combine not in COMBINE or (stat is not None and stat not in STATS):
            raise MetricError(f"{at}: combine {combine!r} / stat {stat!r}; use combine one of "
                              f"{', '.join(COMBINE)} and stat one of {', '.join(STATS)} or null")
        comps.append(Component(str(c["name"]), str(c["column"]), 1.0 if weight is None else weight,
                               str(c["over"]) if c.get("over") else None, _float(c.get("empty"), f"{at}.empty"),
                               combine, None if stat is None else str(stat)))
    names = [c.name for c in comps]
    if len(set(names)) != len(names):
        raise MetricError(f"{where}: metric component names repeat: {names}")
    return Metric(str(data.get("name") or "task"), tuple(comps), data.get("variant") or variant)


def read_scores_json(path: str | Path | None) -> dict[str, Any]:
    """A ``scores.json`` as a dict ({} when absent or unreadable, with a warning for the latter)."""
    if path is None:
        return {}
    path = Path(path)
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        log.warning("%s: cannot read (%s); its metric is taken as the default variant's", path, exc)
        return {}
    return data if isinstance(data, dict) else {}


#: the stage a run's score comes from -> (its per-question table, the JSON beside it with the
#: metric): the score stage's, or the recall stage's for a retrieval run without a score stage
RESULT_FILES = {"score": ("scores.parquet", "scores.json"), "recall": ("recall.parquet", "recall.json")}


def scores_json_of(table: str | Path) -> Path:
    """The JSON with the metric beside a per-question table (both in the run dir or the
    artifact): ``scores.json``, or ``recall.json`` beside the recall stage's ``recall.parquet``."""
    path = Path(table)
    beside = dict(RESULT_FILES.values())
    return path.with_name(beside.get(path.name, "scores.json"))


def metric_of(scores: dict[str, Any], variant: str | None = None, where: str = "scores.json") -> Metric:
    """The metric of a parsed ``scores.json`` (its ``metric``, else its ``variant``'s, else
    ``variant``'s)."""
    return metric_from_json(scores.get("metric"), scores.get("variant") or variant, where)


def class_order(scores: dict[str, Any]) -> list[str]:
    """The error classes a ``scores.json`` lists (``errors.counts`` keys, in its order)."""
    counts = (scores.get("errors") or {}).get("counts") if isinstance(scores.get("errors"), dict) else None
    return [str(k) for k in counts] if isinstance(counts, dict) else []


def describe_metrics(metrics: list[Metric]) -> str:
    """The distinct metrics of a list, for a warning."""
    seen: dict[tuple, Metric] = {}
    for m in metrics:
        seen.setdefault(m.key(), m)
    return "; ".join(m.describe() for m in seen.values())
