"""Why a typed, page-cited run loses, in the task's own terms: error classes by answer kind,
not-answerable both ways, and a page dimension beside them.

The classes function ``typed`` (kohaku.tasks.named.catalog) serves tasks with answer kinds
(``task.answer.kinds``): a task with kinds and no ``score.classes`` gets it. It reads the
scorer's per-question table (kohaku.tasks.score.scoring: ``qid``, ``truth``, ``pred``, ``pred_blank``,
``missing``, ``correct``, and ``kind``, each question's kind name) with the task (its kinds, the
not-answerable token, the true/false words) and adds

- ``answer_kind``: the question's kind as the task names it (``number``, ``names``, ...);
- ``error_class`` and ``error_detail``: one class per question, tried in this order:

  1. ``missing``: the submission has no row for the question;
  2. ``unanswered``: its value cell is empty (the task scores it ``score.unanswered``);
  3. ``answered_na``: the gold is the not-answerable token (``N/A``) and the answer is a value;
  4. ``needless_na``: the answer is the token and the gold has a value;
  5. ``correct``: the task's primary judgement (``score.correct``) says so; for a ``names``
     question only when the two sets of names are the same (a partial-credit Jaccard of 2/3
     is ``missing_names``, detail ``credit 0.67``);
  6. by the kind's type:

     - number: the generic number classes (kohaku.tasks.analysis.classes): ``sign``, ``near_miss``
       (within 10 %), ``scale`` (a power of ten), ``wrong_number`` (detail ``not a number``,
       ``currency``, ``format``);
     - name: ``wrong_name`` (detail ``f1 0.67`` when half the words agree);
     - names: ``missing_names`` (the answer is a strict subset of the gold: detail ``2 of 3;
       missing: Oracle``), ``extra_names`` (a strict superset: ``+1: Random``), else
       ``wrong_names`` (``1 of 3 right, 2 missing, 1 extra``);
     - boolean: ``flipped`` (the other truth value), ``wrong_boolean`` (not a true/false word);
     - date: ``wrong_date`` (detail ``+31 days``, or ``not a date``);
     - text: ``partial`` (token F1 >= 0.5), ``wrong_text``.

  A question whose kind is unknown (no ``kind`` column) takes the generic classes.

The page dimension (:func:`page_columns`, added by the scorer when the task scores pages with
``page_pools`` or ``page_prf``; a ``page_prf`` gold page is a pool of one) is reported beside the
value class, never mixed into it: ``pages_cited`` / ``pages_cited_hit`` (each cited page as the
submission numbers it, and whether it lies in a gold pool), ``pages_pools`` / ``pages_pools_hit``
(each gold pool, its pages joined by ``|``, and whether a cited page hits it), and from them
``page_class`` with ``page_detail`` (``2/3 pools, 1 extra``):

- ``all_pools``: every gold pool has a cited page and no cited page lies outside them;
- ``extra_pages``: every pool hit (or none to hit), and pages outside the pools cited too;
- ``some_pools``: some pools hit, not all;
- ``no_pools``: no pool hit (nothing cited, or only pages outside them);
- ``none_needed``: no gold pool and nothing cited (an ``N/A`` answered ``N/A``).

This module is library code: no stages, no Hydra.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import polars as pl

from kohaku.tasks.score import refs
from kohaku.tasks.score.amounts import parse_amount
from kohaku.tasks.analysis.classes import classify_row, number_class
from kohaku.tasks.score.kind_metrics import norm_name
from kohaku.tasks.kinds import parse_date, parse_names
from kohaku.tasks.analysis.slips import class_counts
from kohaku.tasks.spec import KindsSpec, Task
from kohaku.tasks.score.text_match import token_f1

#: the classes of every kind
COMMON = ("correct", "missing", "unanswered", "answered_na", "needless_na")
#: kind type -> the classes only its questions can take
BY_TYPE: dict[str, tuple[str, ...]] = {
    "number": ("sign", "scale", "near_miss", "wrong_number"),
    "name": ("wrong_name",),
    "names": ("missing_names", "extra_names", "wrong_names"),
    "boolean": ("flipped", "wrong_boolean"),
    "date": ("wrong_date",),
    "text": ("partial", "wrong_text"),
}
CLASSES = COMMON + tuple(c for cs in BY_TYPE.values() for c in cs)
ERROR_CLASSES = CLASSES[1:]
PAGE_CLASSES = ("all_pools", "extra_pages", "some_pools", "no_pools", "none_needed")
PAGE_METRICS = {"page_pools": "pools", "page_prf": "pages"}   # fn -> its params.gold default
PARTIAL_F1 = 0.5
PAGE_COLUMNS = {"pages_cited": pl.List(pl.String), "pages_cited_hit": pl.List(pl.Boolean),
                "pages_pools": pl.List(pl.String), "pages_pools_hit": pl.List(pl.Boolean)}


def classes_for(kind_type: str) -> tuple[str, ...]:
    """The classes a question of this kind type can take, in :data:`CLASSES` order."""
    return COMMON + BY_TYPE.get(kind_type, ())


# -- values -------------------------------------------------------------------------------

def _is_token(text: str, kinds: KindsSpec) -> bool:
    token = (kinds.not_answerable or "").strip().lower()
    return bool(token) and text.strip().lower() == token


def _boolean(text: str, kinds: KindsSpec) -> bool | None:
    truth = {v.strip().lower() for v in kinds.true_values} | {kinds.write_true.strip().lower()}
    falsity = {v.strip().lower() for v in kinds.false_values} | {kinds.write_false.strip().lower()}
    x = text.strip().strip("'\"").lower()
    return True if x in truth else False if x in falsity else None


def _names_class(truth: str, pred: str, correct: bool, credit: float | None) -> tuple[str, str]:
    written = {norm_name(n): n for n in parse_names(pred)}
    written.update({norm_name(n): n for n in parse_names(truth)})   # as the gold writes them
    gold = {norm_name(n) for n in parse_names(truth)}
    got = {norm_name(n) for n in parse_names(pred)}
    if got == gold and correct:
        return "correct", ""
    missing = [written[n] for n in sorted(gold - got)]
    extra = [written[n] for n in sorted(got - gold)]
    paid = f"; credit {credit:.2f}" if credit else ""
    if not missing and not extra:
        return "wrong_names", "format" + paid
    if not extra:
        return "missing_names", f"{len(gold & got)} of {len(gold)}; missing: {', '.join(missing)}" + paid
    if not missing:
        return "extra_names", f"+{len(extra)}: {', '.join(extra)}" + paid
    return "wrong_names", (f"{len(gold & got)} of {len(gold)} right, {len(missing)} missing, "
                           f"{len(extra)} extra" + paid)


def _value_class(kind_type: str, truth: str, pred: str, kinds: KindsSpec) -> tuple[str, str]:
    """The class of a wrong value of a kind (neither side the not-answerable token)."""
    if kind_type == "number":
        gold = parse_amount(truth)
        if gold is None:
            for item in parse_names(truth):   # a JSON list of accepted answers: the first amount
                gold = parse_amount(item)
                if gold is not None:
                    break
        if gold is None:
            return "wrong_number", "the gold is no amount"
        return number_class(gold, pred)
    if kind_type == "boolean":
        got, gold = _boolean(pred, kinds), _boolean(truth, kinds)
        if got is None:
            return "wrong_boolean", "not true/false"
        return ("flipped", f"{pred.strip()} for {truth.strip()}") if gold is not None and got != gold \
            else ("wrong_boolean", "")
    if kind_type == "date":
        got, gold = parse_date(pred), parse_date(truth)
        if got is None:
            return "wrong_date", "not a date"
        return "wrong_date", (f"{(got - gold).days:+d} days" if gold is not None else "")
    f1 = token_f1(pred, [truth])
    if kind_type == "text":
        return ("partial", f"f1 {f1:.2f}") if f1 >= PARTIAL_F1 else ("wrong_text", "")
    return "wrong_name", (f"f1 {f1:.2f}" if f1 >= PARTIAL_F1 else "")


def classify_typed_row(row: dict[str, Any], kinds: KindsSpec, credit: float | None = None) -> tuple[str, str, str]:
    """(answer_kind, error_class, error_detail) of one row (module doc); ``credit``: the
    question's value component (a names answer's partial credit in the detail)."""
    name = (row.get("kind") or "").strip() or kinds.default
    spec = kinds.specs.get(name) if name else None
    if spec is None:
        return classify_row(row)
    truth, pred = str(row.get("truth") or ""), row.get("pred")
    if row.get("missing"):
        return name, "missing", ""
    if pred is None or not str(pred).strip() or (row.get("pred_blank") and not _is_token(str(pred), kinds)):
        return name, "unanswered", ""
    pred = str(pred)
    gold_na, pred_na = _is_token(truth, kinds), _is_token(pred, kinds)
    if gold_na and not pred_na:
        return name, "answered_na", ""
    if pred_na and not gold_na:
        return name, "needless_na", ""
    if spec.type == "names" and not gold_na:
        return (name, *_names_class(truth, pred, bool(row.get("correct")), credit))
    if row.get("correct"):
        return name, "correct", ""
    if gold_na:   # N/A answered N/A but not counted correct (the task's na_vs_na is 0)
        return name, "answered_na", "N/A not credited"
    return (name, *_value_class(spec.type, truth, pred, kinds))


# -- pages --------------------------------------------------------------------------------

def page_metric(task: Task) -> Any:
    """The task's first page metric (``page_pools`` or ``page_prf``), None without one."""
    if task.score.scorer != "components":
        return None
    return next((m for m in task.score.metric_specs if m.fn in PAGE_METRICS), None)


def _written(page: refs.Page, base: int) -> str:
    doc, n = page
    n = n - 1 + base
    return f"{doc}:{n}" if doc else str(n)


def page_columns(task: Task, rows: list[dict[str, Any]]) -> list[pl.Series]:
    """The page dimension's columns (module doc) of the scorer's rows (each with its whole
    ``solution`` and ``submission`` row), read as the task's page metric reads them; [] when the
    task scores no pages. Pages are shown as the submission numbers them
    (``submission.page_base``)."""
    m = page_metric(task)
    if m is None:
        return []
    base, gold_base = task.submission.page_base, task.gold_page_base
    gold_col, pred_col = m.params.get("gold", PAGE_METRICS[m.fn]), m.params.get("pred", "pages")
    out: dict[str, list[Any]] = {k: [] for k in PAGE_COLUMNS}
    for r in rows:
        sol, sub = r.get("solution") or {}, r.get("submission")
        try:
            if m.fn == "page_pools":
                pools = refs.parse_pools(sol.get(gold_col), gold_base)
            else:
                pools = [{p} for p in sorted(refs.parse_pages(sol.get(gold_col), gold_base), key=str)]
            cited = [] if sub is None else refs.page_list(sub.get(pred_col), base)
        except ValueError:    # the metric has said so already; the question shows no pages
            for k in out:
                out[k].append(None)
            continue
        out["pages_cited"].append([_written(c, base) for c in cited])
        out["pages_cited_hit"].append([any(refs._same(c, g) for p in pools for g in p) for c in cited])
        out["pages_pools"].append(["|".join(_written(g, base) for g in sorted(p, key=str)) for p in pools])
        out["pages_pools_hit"].append([any(refs._same(c, g) for c in cited for g in p) for p in pools])
    return [pl.Series(k, v, dtype=PAGE_COLUMNS[k]) for k, v in out.items()]


def page_class(cited_hit: list[bool] | None, pools_hit: list[bool] | None) -> tuple[str | None, str]:
    """(page_class, page_detail) from one question's hit flags (module doc); None without pages."""
    if cited_hit is None or pools_hit is None:
        return None, ""
    n_pools, n_hit, n_extra = len(pools_hit), sum(pools_hit), sum(not h for h in cited_hit)
    detail = f"{n_hit}/{n_pools} pools" + (f", {n_extra} extra" if n_extra else "")
    if n_pools == 0:
        return ("none_needed", "") if not cited_hit else ("extra_pages", f"{n_extra} extra, no pool")
    if n_hit == n_pools:
        return ("extra_pages" if n_extra else "all_pools"), detail
    if n_hit:
        return "some_pools", detail
    return "no_pools", detail + ("" if cited_hit else ", nothing cited")


# -- the classes function -----------------------------------------------------------------

def classify(table: pl.DataFrame, task: Task) -> pl.DataFrame:
    """``table`` with ``answer_kind``, ``error_class``, ``error_detail`` and, where it holds the
    page columns, ``page_class`` and ``page_detail``."""
    kinds = task.answer.kinds
    credit_col = task.score.correct if task.score.correct in table.columns else None
    triples = []
    for row in table.iter_rows(named=True):
        credit = row.get(credit_col) if credit_col else None
        triples.append(classify_typed_row(row, kinds, credit))
    kinds_col, classes, details = (list(c) for c in zip(*triples)) if triples else ([], [], [])
    out = table.with_columns(pl.Series("answer_kind", kinds_col, dtype=pl.String),
                             pl.Series("error_class", classes, dtype=pl.String),
                             pl.Series("error_detail", details, dtype=pl.String))
    if {"pages_cited_hit", "pages_pools_hit"} <= set(table.columns):
        pages = [page_class(c, p) for c, p in zip(table["pages_cited_hit"].to_list(),
                                                  table["pages_pools_hit"].to_list())]
        out = out.with_columns(pl.Series("page_class", [p[0] for p in pages], dtype=pl.String),
                               pl.Series("page_detail", [p[1] for p in pages], dtype=pl.String))
    return out


def summary(table: pl.DataFrame, kinds: KindsSpec) -> dict[str, Any]:
    """``{"n", "n_errors", "counts", "by_kind": {kind name: counts}, "details": {class: {detail:
    n}}, "pages": {"counts", "by_kind"}}``: every class in :data:`CLASSES` order (zeros
    included); ``by_kind`` has each of the task's kinds with the classes its type can take;
    ``pages`` only where the table has the page dimension. Number details are grouped as the
    generic classes group them (``within 10%``); names details by their kind of difference."""
    classes = table["error_class"].to_list()
    names = table["answer_kind"].to_list()
    counts = class_counts(classes, CLASSES)
    extra = [c for c in dict.fromkeys(classes) if c not in CLASSES]   # generic classes of an unknown kind
    counts.update(Counter(c for c in classes if c in extra))
    details: dict[str, Counter] = {}
    for cls, detail in zip(classes, table["error_detail"].to_list()):
        if detail:
            if cls == "near_miss":
                detail = "within 10%"
            elif cls in ("partial", "wrong_name"):
                detail = f"f1 >= {PARTIAL_F1:g}"
            elif cls in ("missing_names", "extra_names", "wrong_names", "flipped"):
                detail = "credit" if "credit" in detail else ""
            elif cls == "wrong_date" and detail.endswith("days"):
                detail = "a date"
            if detail:
                details.setdefault(cls, Counter())[detail] += 1
    by_kind: dict[str, dict[str, int]] = {}
    for name, spec in kinds.specs.items():
        mine = [c for c, k in zip(classes, names) if k == name]
        by_kind[name] = class_counts(mine, classes_for(spec.type))
    for name in dict.fromkeys(n for n in names if n not in by_kind):
        by_kind[name] = dict(Counter(c for c, k in zip(classes, names) if k == name))
    out: dict[str, Any] = {
        "n": len(classes), "n_errors": len(classes) - counts["correct"], "counts": counts,
        "by_kind": by_kind, "details": {cls: dict(sorted(c.items())) for cls, c in details.items()},
    }
    if "page_class" in table.columns:
        pages = table["page_class"].to_list()
        out["pages"] = {
            "counts": class_counts([p for p in pages if p], PAGE_CLASSES),
            "by_kind": {name: class_counts([p for p, k in zip(pages, names) if k == name and p], PAGE_CLASSES)
                        for name in by_kind},
        }
    return out


def typed_classes(table: pl.DataFrame, task: Task) -> tuple[pl.DataFrame, dict[str, Any]]:
    """The error classes of a task with answer kinds (kohaku/tasks/analysis/typed_classes.py): per kind
    (number: sign, near_miss, scale, wrong_number; name: wrong_name; names: missing_names,
    extra_names, wrong_names; boolean: flipped; date: wrong_date; text: partial, wrong_text),
    answered_na and needless_na for the not-answerable token both ways, and beside them the
    cited pages against the gold pools (page_class: all_pools, extra_pages, some_pools,
    no_pools, none_needed), with their counts split by kind."""
    table = classify(table, task)
    return table, summary(table, task.answer.kinds)
