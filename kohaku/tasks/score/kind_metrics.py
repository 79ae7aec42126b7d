"""Per-kind value metrics: a question's value scored by its answer kind (``task.answer.kinds``).

The metric ``kind_value`` (``score.metrics[].fn: kind_value``) reads each question's kind from
a solutions column (``params.column``, default ``task.answer.kinds.column``), looks the kind up
in ``task.answer.kinds.types`` and scores the submitted value against the gold one with the
kind's value metric (``params.kinds.<kind>.metric``; default by the kind's type):

- ``number`` (type number): both read as amounts (kohaku's amount rules,
  kohaku.tasks.score.amounts.parse_amount: thousands commas, currency signs and codes,
  hedges, ``%``, scale words and letters ``1.5 million``/``$2bn``, accounting parentheses
  ``(406.1)`` negative); 1 when ``|pred - gold| <= max(rel_tol * |gold|,
  abs_tol)`` (both 0: equal), else 0. ``scale_words: false`` reads ``406.1 million`` as 406.1.
- ``name`` (type name): normalised exact: case, surrounding quotes, a trailing period and
  runs of spaces ignored.
- ``names`` (type names): the two lists as sets of normalised names: ``measure`` ``exact``
  (the same set), ``jaccard`` (|both| / |either|) or ``f1`` (of precision and recall).
- ``boolean`` (type boolean): the task's true and false words (``kinds.true_values``,
  ``write_true``...), any case; a value that is neither scores 0.
- ``date`` (type date): the same day (kohaku.tasks.kinds.parse_date: ISO, ``March 1, 2023``).
- ``string`` (type text): ``measure`` ``exact`` (normalised as a name), ``token_f1`` (SQuAD's)
  or ``anls`` (1 - the normalised Levenshtein distance, 0 at or above ``anls_threshold``).

The not-answerable token (``task.answer.kinds.not_answerable``, e.g. ``N/A``) is an answer of
every kind: gold and submission both the token score ``na_vs_na`` (1); a gold token answered
with a value ``na_vs_answer`` (0); a gold value answered with the token ``answer_vs_na`` (0).
A question left unanswered (no row; an empty value unless the metric is ``empty: score``) scores
``task.score.unanswered`` as every metric does (kohaku.tasks.score.scoring); the metric applies the
rule itself (a row's ``unanswered`` flag), so a set-level metric that calls it follows it too.
A gold cell of any kind may list accepted answers as a JSON list, "any of these" (the best is
taken), the not-answerable token and booleans included (``["N/A"]``, ``[true]``); a names gold
is one JSON list of names, its alternatives a list of such lists (:func:`gold_answers`).

The submitted value is read as strictly as the kind says (``task.answer.kinds.types.<kind>``):
``strict: true`` reads a number with Python's ``float()`` only; ``delimiter`` splits a names
string that is no list. The gold is read by kohaku's rules.
"""

from __future__ import annotations

import json
import math
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from kohaku.core.config import ConfigError, build
from kohaku.core.errors import MetricError
from kohaku.tasks.score.amounts import parse_amount
from kohaku.tasks.kinds import parse_date, parse_names
from kohaku.tasks.spec import KindSpec, KindsSpec
from kohaku.tasks.score.text_match import token_f1

VALUE_METRICS = ("number", "name", "names", "boolean", "date", "string")
#: a kind type's value metric when the task names none
BY_TYPE = {"number": "number", "name": "name", "names": "names", "boolean": "boolean",
           "date": "date", "text": "string"}
MEASURES = {"names": ("exact", "jaccard", "f1"), "string": ("exact", "token_f1", "anls")}


@dataclass
class KindScore:
    """How the values of one kind are scored (``params.kinds.<kind name>``)."""

    metric: str | None = None     # number | name | names | boolean | date | string; null: the kind type's
    rel_tol: float = 0.0          # number: relative tolerance (of the gold value)
    abs_tol: float = 0.0          # number: absolute tolerance
    scale_words: bool = True      # number: read "1.5 million", "2k" with their scale (false: 1.5, 2)
    measure: str = "exact"        # names: exact | jaccard | f1; string: exact | token_f1 | anls
    anls_threshold: float = 0.5   # string, anls: a normalised edit distance at or above it scores 0

    def validate(self) -> None:
        if self.metric is not None and self.metric not in VALUE_METRICS:
            raise ConfigError(f"metric={self.metric!r}; use one of {', '.join(VALUE_METRICS)}")
        if self.rel_tol < 0 or self.abs_tol < 0:
            raise ConfigError("rel_tol and abs_tol must be >= 0")
        if not 0 < self.anls_threshold <= 1:
            raise ConfigError(f"anls_threshold={self.anls_threshold}; use a value in (0, 1]")


@dataclass
class KindValueParams:
    """The ``kind_value`` metric's ``params``."""

    column: str | None = None     # the solutions column naming each question's kind; null: task.answer.kinds.column
    # kind name (as task.answer.kinds.types names it) -> KindScore; a kind not listed is scored
    # with its type's metric, exactly
    kinds: dict[str, dict[str, Any]] = field(default_factory=dict)
    na_vs_na: float = 1.0         # gold not-answerable, the not-answerable token submitted
    na_vs_answer: float = 0.0     # gold not-answerable, a value submitted
    answer_vs_na: float = 0.0     # gold a value, the not-answerable token submitted


def kind_scores(params: dict[str, Any], kinds: KindsSpec, where: str) -> tuple[KindValueParams, dict[str, KindScore]]:
    """The metric's params and each kind's KindScore (the metric and measure resolved), checked
    against ``kinds``: errors name the key."""
    p = build(KindValueParams, params, where)
    if not kinds.types:
        raise ConfigError(f"{where}: the kind_value metric needs task.answer.kinds.types (kind name -> "
                          "{type: number|boolean|name|names|date|text})")
    unknown = sorted(set(p.kinds) - set(kinds.types))
    if unknown:
        raise ConfigError(f"{where}.kinds: {unknown} not in task.answer.kinds.types ({', '.join(kinds.types)})")
    if (p.column or kinds.column) is None:
        raise ConfigError(f"{where}.column: name the solutions column with each question's kind "
                          "(or set task.answer.kinds.column)")
    out = {}
    for name, spec in kinds.specs.items():
        s = build(KindScore, p.kinds.get(name) or {}, f"{where}.kinds.{name}")
        s.metric = s.metric or BY_TYPE[spec.type]
        if s.measure != "exact" and s.measure not in MEASURES.get(s.metric, ()):
            raise ConfigError(f"{where}.kinds.{name}.measure={s.measure!r}: the {s.metric} metric takes "
                              f"{', '.join(MEASURES.get(s.metric, ('exact',)))}")
        out[name] = s
    return p, out


# -- reading values -----------------------------------------------------------------------

def read_number(text: str, scale_words: bool = True, strict: bool = False) -> float | None:
    """A number as the ``number`` metric reads it (kohaku's amount rules, the ``amounts`` vote
    grouping's: kohaku.tasks.score.amounts.parse_amount); None when it is none.
    ``scale_words: false``: the number without its scale (``406.1 million`` -> 406.1).
    ``strict`` (a kind's ``strict: true``): only what Python's ``float()`` reads (no ``%``,
    currency, thousands commas or scale words: ``0.25%`` is no number)."""
    if strict:
        try:
            value = float((text or "").strip())
        except ValueError:
            return None
        return value if math.isfinite(value) else None
    amount = parse_amount(text or "")
    if amount is None:
        return None
    if amount.magnitude and not scale_words:
        return amount.value / amount.magnitude
    return amount.value


def norm_name(text: str) -> str:
    """A name as ``name`` compares it: NFKC, lower case, spaces collapsed, surrounding quotes
    and a trailing period removed."""
    s = " ".join(unicodedata.normalize("NFKC", text or "").lower().split())
    prev = None
    while s != prev:
        prev = s
        s = s.strip().strip("'\"").strip().rstrip(".").strip()
    return s


def levenshtein(a: str, b: str) -> int:
    """Edit distance (insertions, deletions, substitutions)."""
    if len(a) < len(b):
        a, b = b, a
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, start=1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


def anls(pred: str, gold: str, threshold: float = 0.5) -> float:
    """Average normalised Levenshtein similarity of one pair (lower case, spaces collapsed)."""
    a, b = " ".join(pred.lower().split()), " ".join(gold.lower().split())
    if not a and not b:
        return 1.0
    nl = levenshtein(a, b) / max(len(a), len(b))
    return 0.0 if nl >= threshold else 1.0 - nl


def _golds(text: str) -> list[str]:
    s = (text or "").strip()
    if s.startswith("["):
        try:
            items = json.loads(s)
            if isinstance(items, list) and not any(isinstance(i, (list, dict)) for i in items):
                return [str(i) for i in items]
        except (ValueError, RecursionError):   # malformed, or nested past the parser's stack
            pass
    return [s]


def _set_score(pred: set[str], gold: set[str], measure: str) -> float:
    if measure == "exact":
        return float(pred == gold)
    both = len(pred & gold)
    if measure == "jaccard":
        union = len(pred | gold)
        return 1.0 if union == 0 else both / union
    if not pred and not gold:
        return 1.0
    if both == 0:
        return 0.0
    p, r = both / len(pred), both / len(gold)
    return 2 * p * r / (p + r)


def value_score(pred: str, gold: str, s: KindScore, kinds: KindsSpec,
                reading: KindSpec | None = None) -> float:
    """One submitted value against one gold value of a kind scored by ``s`` (no N/A here);
    ``reading``: the kind (task.answer.kinds.types.<kind>), whose ``strict`` and ``delimiter``
    say how the submitted value is read (the gold is read by kohaku's rules)."""
    m = s.metric
    strict = bool(reading and reading.strict)
    if m == "names":
        p = {norm_name(n) for n in parse_names(pred, reading.delimiter if reading else None)}
        g = {norm_name(n) for n in parse_names(gold)}
        return _set_score(p, g, s.measure)
    best = 0.0
    for g in _golds(gold):
        if m == "number":
            a, b = read_number(pred, s.scale_words, strict), read_number(g, s.scale_words)
            ok = a is not None and b is not None and abs(a - b) <= max(s.rel_tol * abs(b), s.abs_tol)
            score = float(ok or (a is not None and a == b))
        elif m == "boolean":
            truth = {v.strip().lower() for v in kinds.true_values} | {kinds.write_true.strip().lower()}
            falsity = {v.strip().lower() for v in kinds.false_values} | {kinds.write_false.strip().lower()}

            def read(x: str) -> bool | None:
                x = x.strip().strip("'\"").lower()
                return True if x in truth else False if x in falsity else None

            a, b = read(pred), read(g)
            score = float(a is not None and a == b)
        elif m == "date":
            a, b = parse_date(pred), parse_date(g)
            score = float(a == b if a is not None and b is not None else norm_name(pred) == norm_name(g))
        elif m == "string" and s.measure == "token_f1":
            score = token_f1(pred, [g])
        elif m == "string" and s.measure == "anls":
            score = anls(pred, g, s.anls_threshold)
        else:   # name, string exact
            score = float(norm_name(pred) == norm_name(g))
        best = max(best, score)
        if best == 1.0:
            break
    return best if math.isfinite(best) else 0.0


def kind_value_metric(rows: list[dict[str, Any]], params: dict[str, Any], env: Any) -> list[float | None]:
    """Each question's value scored by its kind (module doc)."""
    task = getattr(env, "task", None)
    if task is None:
        raise ConfigError("the kind_value metric needs the task (its answer.kinds); score through "
                          "kohaku.tasks.score.scoring")
    kinds = task.answer.kinds
    p, scores = kind_scores(params, kinds, "task.score.metrics[kind_value].params")
    column = p.column or kinds.column
    token = (kinds.not_answerable or "").strip().lower() or None
    specs = kinds.specs
    out: list[float | None] = []
    for r in rows:
        if r.get("unanswered"):
            # the scorer's one rule, here too so a set-level metric that calls this one follows
            # it: a missing row (or an empty value the metric does not score) scores unanswered
            out.append(task.score.unanswered)
            continue
        sol = r["solution"]
        if column not in sol:
            raise ConfigError(f"kind_value: the solutions have no column {column!r} (params.column or "
                              f"task.answer.kinds.column); they have {', '.join(sol)}")
        name = (sol[column] or "").strip() or kinds.default
        if name not in scores:
            raise MetricError(f"kind_value: question {r['qid']}: kind {sol[column]!r} (solutions column "
                              f"{column!r}) is not one of task.answer.kinds.types ({', '.join(scores)})")
        pred = (r["pred"] or "").strip()
        pred_na = token is not None and pred.lower() == token
        best: float | None = None
        for gold in gold_answers(r["truth"] or "", specs[name].type, token, r["qid"]):
            gold_na = token is not None and gold.lower() == token
            if gold_na or pred_na:
                score = p.na_vs_na if gold_na and pred_na else p.na_vs_answer if gold_na else p.answer_vs_na
            else:
                score = value_score(pred, gold, scores[name], kinds, specs[name])
            best = score if best is None else max(best, score)
        out.append(best)
    return out


def gold_answers(cell: str, kind_type: str, token: str | None, qid: str) -> list[str]:
    """The accepted answers of a gold cell: the cell itself, or each item of a JSON list ("any
    of these", N/A and booleans included: ``["N/A"]``, ``[true]``, ``[12, "12.0"]``). A names
    gold is one list of names; its alternatives are a list of such lists, and a list holding
    only the not-answerable token is that token. A list this cannot read is refused, naming what
    was found and what is expected."""
    s = cell.strip()
    if not s.startswith("["):
        return [s]
    try:
        items = json.loads(s)
    except ValueError:
        return [s]      # no JSON list: read as written (a Python list of names, a bracketed name)
    if not isinstance(items, list):
        return [s]

    def text(x: Any) -> str:
        return ("true" if x else "false") if isinstance(x, bool) else str(x).strip()

    if kind_type == "names":
        if items and all(isinstance(i, list) for i in items):
            return [json.dumps(i, ensure_ascii=False) for i in items]
        if items and token is not None and all(isinstance(i, str) and i.strip().lower() == token for i in items):
            return [text(items[0])]
        if all(isinstance(i, (str, int, float)) and not isinstance(i, bool) for i in items):
            return [s]
        found = "a list of lists and values" if any(isinstance(i, list) for i in items) else "a list holding objects"
        raise MetricError(f"kind_value: question {qid}: the gold {s[:80]!r} is {found}; a names gold is "
                          "a list of names, or a list of such lists (any of them)")
    if not items:
        raise MetricError(f"kind_value: question {qid}: the gold is an empty list; give the answer, or "
                          "a list of the accepted answers")
    nested = [i for i in items if isinstance(i, (list, dict))]
    if nested:
        raise MetricError(f"kind_value: question {qid}: the gold {s[:80]!r} is a list holding "
                          f"{'lists' if isinstance(nested[0], list) else 'objects'}; a {kind_type} gold is a "
                          "value or a list of accepted values (numbers, strings, booleans, the "
                          "not-answerable token)")
    return [text(i) for i in items]
