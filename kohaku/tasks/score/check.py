"""Checking kohaku's metric against a competition's own scorer (``scripts/check_scorer.py``).

The competition's scorer is a command that reads a solutions file and a submission file
(``{solutions}`` and ``{submission}`` in the command are replaced by their paths) and prints
per-question scores as CSV on stdout: a header line starting with ``id,`` and one line per
question; every other line before the header is ignored. A column named like one of kohaku's
per-question components (a components task: its metric names; a competition's own scorer: the
components its room's ``rows`` function gives) is compared with it; a column ``score`` with
kohaku's weighted per-question total.

The submissions compared are real ones and perturbations of the gold (:func:`perturbations`):
the gold itself, numbers off by 0.5 % and by 5 %, a unit or magnitude written into the number,
lists reordered and partial, case and punctuation changed, and the not-answerable token
swapped (answerable questions given it, unanswerable ones given a value). A task with answer
kinds is perturbed by each question's kind (:func:`kind_perturbations`), its cited pages too. A row agrees when
every compared column is equal (within 1e-9).
"""

from __future__ import annotations

import csv
import io
import json
import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import polars as pl

from kohaku.core.config import ConfigError
from kohaku.core.values import format_number, parse_number
from kohaku.tasks.score import refs
from kohaku.tasks.named import registry
from kohaku.tasks.named.builtin import _list_cell
from kohaku.tasks.kinds import list_cell, parse_names
from kohaku.tasks.named.catalog import DEFAULT_VARIANT
from kohaku.tasks.score.scoring import read_solutions, score_submission
from kohaku.tasks.spec import Task

TOL = 1e-9
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _numbers(cell: str, f: Callable[[float], float]) -> str:
    def sub(m: re.Match) -> str:
        x = f(float(m.group(0)))
        return f"{x:.6g}"
    return _NUMBER.sub(sub, cell)


def _list_items(cell: str) -> list[str] | None:
    s = cell.strip()
    if not (s.startswith("[") and s.endswith("]")):
        return None
    inner = s[1:-1].strip()
    return [t.strip() for t in inner.split(",")] if inner else []


def _unit(cell: str) -> str:
    m = re.fullmatch(r"\s*(-?\d+(?:\.\d+)?)\s*", cell)
    if not m:
        return cell
    x = float(m.group(1))
    return f"{x / 1000:g}k" if abs(x) >= 1000 else f"{m.group(1)} units"


PERTURB: dict[str, Callable[[str, bool, str], str]] = {
    # (value cell, the gold is not-answerable, the not-answerable token) -> perturbed cell
    "exact": lambda v, na, tok: v,
    "off_0.5pct": lambda v, na, tok: v if na else _numbers(v, lambda x: x * 1.005),
    "off_5pct": lambda v, na, tok: v if na else _numbers(v, lambda x: x * 1.05),
    "units": lambda v, na, tok: v if na else _unit(v),
    "list_reordered": lambda v, na, tok: (v if _list_items(v) is None
                                          else "[" + ",".join(reversed(_list_items(v) or [])) + "]"),
    "list_partial": lambda v, na, tok: (v if not _list_items(v) or len(_list_items(v) or []) < 2
                                        else "[" + ",".join((_list_items(v) or [])[:-1]) + "]"),
    "case_punct": lambda v, na, tok: v if na else (v.upper() if v.lower() != v else v.title()) + ".",
    "na_swapped": lambda v, na, tok: "0" if na else tok,
}


@dataclass
class Check:
    name: str
    rows: int
    agree: int
    columns: list[str]
    disagree: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None   # a submission that cannot be read or scored: its error, one line


@dataclass
class Layout:
    """A submission's columns as the perturbations write them: every column in order, the id,
    value and refs columns, the not-answerable token, the cell of a column the gold lacks, and
    (``blank_refs``) the refs cell of a row whose value is the token (None: the gold's refs).
    A fixed-format writer's room gives its own (kohaku.tasks.named.catalog's ``layout``)."""
    columns: list[str]
    id: str
    value: str
    refs: str | None
    blank: str
    filler: str = ""
    blank_refs: str | None = None


def _layout(task: Task) -> Layout:
    """The layout of the task's submission: its writer's room's, else the task's columns."""
    if task.submission.writer in registry.names("layout"):
        return registry.lookup("layout", task.submission.writer, "task.submission.writer")(task)
    from kohaku.tasks.score.scoring import submission_columns

    id_col, value_col = submission_columns(task)
    refs_col = next((c for c, s in task.submission.columns.items() if s == "refs"), None)
    return Layout(list(task.submission.columns), id_col, value_col, refs_col, task.submission.blank)


def perturbations(task: Task, solutions: Path) -> dict[str, pl.DataFrame]:
    """Submissions made from the gold, one per perturbation (module doc), in the task's columns:
    the id, the value (perturbed), the refs from the gold's refs; other submission columns from
    the solutions' column of that name, else the layout's filler (empty unless the writer's room
    says otherwise)."""
    sol = read_solutions(solutions, task)
    layout = _layout(task)
    id_col, value_col, refs_col = layout.id, layout.value, layout.refs
    spec = task.solutions
    out_cols = list(layout.columns)
    token = layout.blank
    if task.score.scorer == "components":
        tokens = [str(m.params.get("token")) for m in task.score.metric_specs if m.params.get("token")]
        token = tokens[0] if tokens else token
    if task.answer.kinds.not_answerable:   # the task's not-answerable answer, not a blank cell
        token = task.answer.kinds.not_answerable
    blanks = {b.lower() for b in task.answer.blank_values} | {token.lower(), "is_blank"}
    kind_col = _kind_column(task, sol)
    if kind_col is not None:
        return kind_perturbations(task, sol, layout, kind_col, token)
    out = {}
    for name, fn in PERTURB.items():
        rows = []
        for s in sol.to_dicts():
            gold = s[spec.answer] or ""
            row = {}
            for c in out_cols:
                if c == id_col:
                    row[c] = s[spec.id]
                elif c == value_col:
                    row[c] = fn(gold, gold.strip().lower() in blanks, token)
                elif c == refs_col and spec.refs:
                    row[c] = s.get(spec.refs) or ""
                else:   # a writer that refuses an empty cell gives a filler
                    row[c] = s.get(c) or layout.filler
            if layout.blank_refs is not None and refs_col and name == "na_swapped":
                row[refs_col] = layout.blank_refs if row[value_col] == token else row[refs_col]
            rows.append(row)
        out[name] = pl.DataFrame(rows, schema={c: pl.String for c in out_cols})
    return out


# -- perturbations by answer kind ----------------------------------------------------------

#: the perturbations of a task with answer kinds, each for every question (kind_perturbations)
KIND_PERTURB = ("exact", "inside_tol", "outside_tol", "rewritten", "case_punct", "partial",
                "na_swapped", "pages_extra", "pages_none", "unanswered")


def _kind_column(task: Task, sol: pl.DataFrame) -> str | None:
    """The solutions column naming each question's kind (a kind_value metric's ``column``, else
    ``task.answer.kinds.column``) when the task has kinds and the solutions hold it."""
    kinds = task.answer.kinds
    if not kinds.types:
        return None
    column = kinds.column
    if task.score.scorer == "components":
        for m in task.score.metric_specs:
            if m.fn == "kind_value" and m.params.get("column"):
                column = m.params["column"]
    return column if column in sol.columns else None


def _tolerance(task: Task, kind: str) -> float:
    """The relative tolerance a kind_value metric gives numbers of ``kind`` (0 without one)."""
    for m in task.score.metric_specs if task.score.scorer == "components" else []:
        if m.fn == "kind_value":
            return float(((m.params.get("kinds") or {}).get(kind) or {}).get("rel_tol", 0.0))
    return 0.0


def _kind_value(name: str, value: str, type_: str, tol: float, kinds: Any) -> str:
    """The gold ``value`` of a kind's ``type_`` perturbed as ``name`` says."""

    if type_ == "number":
        got = parse_number(value)     # a gold number as written (plain digits)
        if got is None:
            return value
        x = got[0]
        return {"inside_tol": format_number(x * (1 + tol / 2)),
                "outside_tol": format_number(x * (1 + max(2 * tol, 0.05)) + (1 if x == 0 else 0)),
                "rewritten": (f"{x / 1000:g} thousand" if abs(x) >= 1000
                              else f"{x:.1f}" if x.is_integer() else f"{x:.6f}"),
                "case_punct": f"({format_number(x)})",           # parentheses: a negative amount
                "partial": format_number(float(round(x)))}.get(name, value)
    if type_ == "names":
        items = parse_names(value)
        return {"inside_tol": list_cell(list(reversed(items)), kinds.list_format),
                "outside_tol": list_cell([*items, "Someone Else"], kinds.list_format),
                "rewritten": "; ".join(items),
                "case_punct": list_cell([i.upper() for i in items], kinds.list_format),
                "partial": list_cell(items[:-1], kinds.list_format)}.get(name, value)
    if type_ == "boolean":
        low = value.strip().lower()
        truth = low in {v.lower() for v in kinds.true_values} | {kinds.write_true.lower()}
        words = (kinds.true_values if truth else kinds.false_values) or [value]
        return {"inside_tol": words[-1],
                "outside_tol": kinds.write_false if truth else kinds.write_true,
                "rewritten": low,
                "case_punct": value.upper(),
                "partial": "maybe"}.get(name, value)
    return {"inside_tol": value.lower(),                       # name, date, text
            "outside_tol": value + " Group",
            "rewritten": f'"{value}."',
            "case_punct": value.upper() + ".",
            "partial": value.split()[0] if value.split() else value}.get(name, value)


def _gold_pages(task: Task, s: dict[str, Any]) -> tuple[list[str], str]:
    """One cited page per gold pool (its first), written as the submission counts pages, and a
    page in no pool; from the first page_pools or page_prf metric's gold column."""
    if task.score.scorer != "components":
        return [], ""
    for m in task.score.metric_specs:
        if m.fn in ("page_pools", "page_prf"):
            column = m.params.get("gold", "pools" if m.fn == "page_pools" else "pages")
            base = task.submission.page_base
            cell = s.get(column)
            if m.fn == "page_pools":
                pools = refs.parse_pools(cell, task.gold_page_base, f"solutions column {column}")
            else:
                pools = [{p} for p in refs.parse_pages(cell, task.gold_page_base, f"solutions column {column}")]
            chosen = [sorted(pool, key=lambda p: (p[0] or "", p[1]))[0] for pool in pools if pool]
            write = [f"{d}:{n - 1 + base}" if d else str(n - 1 + base) for d, n in chosen]
            every = [p for pool in pools for p in pool]
            doc = next((d for d, _ in every if d), None)
            out = 10_000 + max([n for _, n in every] or [0])
            return write, (f"{doc}:{out}" if doc else str(out))
    return [], ""


def kind_perturbations(task: Task, sol: pl.DataFrame, layout: Layout, kind_col: str,
                       token: str) -> dict[str, pl.DataFrame]:
    """Submissions made from the gold by each question's kind (:data:`KIND_PERTURB`): numbers
    inside and outside the kind_value metric's tolerance, rewritten (``9.4 thousand``, ``7.0``)
    and in parentheses; names recased, quoted, extended and cut; lists reordered, extended,
    partial and semicolon-separated; booleans as their other words and flipped; the task's
    not-answerable token (``answer.kinds.not_answerable``) swapped with a value of the kind;
    pages one per gold pool, with pages outside the pools listed twice, or none; and every
    value left empty (unanswered)."""
    kinds, spec = task.answer.kinds, task.solutions
    specs = kinds.specs
    pages_col = next((c for c, src in task.submission.columns.items() if src == "ref_pages"), None)
    out = {}
    for name in KIND_PERTURB:
        rows = []
        for s in sol.to_dicts():
            gold = (s[spec.answer] or "").strip()
            kind = (s[kind_col] or "").strip() or kinds.default or ""
            type_ = specs[kind].type if kind in specs else "text"
            na = gold.lower() == token.lower()
            if name == "unanswered":
                value = ""
            elif name == "na_swapped":
                value = ({"number": "0", "boolean": kinds.write_false, "names": json.dumps(["Someone Else"])}
                         .get(type_, "Someone Else") if na else token)
            elif na:
                value = token.lower() if name == "case_punct" else gold
            else:
                value = _kind_value(name, gold, type_, _tolerance(task, kind), kinds)
            pages, outside = _gold_pages(task, s)
            if name == "pages_extra" and outside:
                pages = [*pages, outside, outside, *pages[:1]]
            elif name == "pages_none":
                pages = []
            row = {}
            for c in layout.columns:
                if c == layout.id:
                    row[c] = s[spec.id]
                elif c == layout.value:
                    row[c] = value
                elif c == pages_col:
                    row[c] = _list_cell(pages, task.submission) if pages else "[]"
                elif c in sol.columns:
                    row[c] = s[c] or layout.filler
                else:
                    row[c] = layout.filler
            rows.append(row)
        out[name] = pl.DataFrame(rows, schema={c: pl.String for c in layout.columns})
    return out


def kohaku_rows(task: Task, solutions: Path, submission: Path,
                variant: str = DEFAULT_VARIANT) -> dict[str, dict[str, float]]:
    """kohaku's per-question components ({qid: {component: value}}) and ``score``, the
    weighted per-question total (a competition's own scorer: its room's ``rows`` function)."""
    if task.score.scorer in registry.names("rows"):
        rows = registry.lookup("rows", task.score.scorer, "task.score.scorer")
        return rows(task, solutions, submission, variant)
    result = score_submission(task, solutions, submission, subset=True)
    weights = {m.name: m.weight for m in task.score.metric_specs if m.level == "question"}
    out = {}
    for t in result.table.to_dicts():
        comp = {k: float(t[k]) for k in weights if t.get(k) is not None}
        comp["score"] = sum(weights[k] * v for k, v in comp.items())
        out[t["qid"]] = comp
    return out


def scorer_rows(command: str, solutions: Path, submission: Path, timeout: float = 600) -> dict[str, dict[str, float]]:
    """The competition scorer's per-question output ({qid: {column: value}}); errors name the
    command and what it printed."""
    args = [a.replace("{solutions}", str(solutions)).replace("{submission}", str(submission))
            for a in shlex.split(command)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise ConfigError(f"scorer command {args} failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
    lines = proc.stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("id,")), None)
    if start is None:
        raise ConfigError(f"scorer command {args} printed no CSV header starting with 'id,'; it "
                          f"printed: {proc.stdout[:300]!r}")
    out = {}
    for r in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        qid = (r.pop("id") or "").strip()
        out[qid] = {k: _float(v, k, qid) for k, v in r.items() if k}
    return out


def _float(v: str, column: str, qid: str) -> float:
    s = (v or "").strip().lower()
    if s in ("true", "false"):
        return 1.0 if s == "true" else 0.0
    try:
        return float(s)
    except ValueError:
        raise ConfigError(f"scorer output: question {qid}, column {column}: {v!r} is no number") from None


def compare(name: str, ours: dict[str, dict[str, float]], theirs: dict[str, dict[str, float]]) -> Check:
    """Row-by-row agreement on the columns both give, over the questions both score."""
    qids = [q for q in ours if q in theirs]
    columns = sorted({c for q in qids for c in theirs[q] if c in ours[q]})
    if qids and not columns:
        raise ConfigError(f"{name}: the scorer's columns ({', '.join(sorted(theirs[qids[0]]))}) match "
                          f"none of kohaku's ({', '.join(sorted(ours[qids[0]]))})")
    check = Check(name, len(qids), 0, columns)
    for q in qids:
        bad = {c: (ours[q][c], theirs[q][c]) for c in columns
               if c in theirs[q] and abs(ours[q][c] - theirs[q][c]) > TOL}
        if bad:
            check.disagree.append({"qid": q, "columns": bad})
        else:
            check.agree += 1
    return check


def write_submission(df: pl.DataFrame, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    df.write_csv(path)
    return path


def check_submissions(task: Task, solutions: Path, command: str, submissions: list[Path], out_dir: Path,
                      variant: str = DEFAULT_VARIANT, debug: bool = False) -> list[Check]:
    """Every real submission and every perturbation of the gold, scored both ways. A real
    submission that cannot be read or scored gets a Check with its ``error`` (one line naming
    it; kohaku.core.errors.one_line) and the others are still checked; ``debug`` re-raises."""
    from kohaku.core.errors import one_line

    checks = []
    sources = [(str(p), Path(p)) for p in submissions]
    for name, df in perturbations(task, solutions).items():
        if task.submission.shape:    # the competition's own JSON (kohaku.tasks.files.shapes)
            from kohaku.tasks.files.shapes import write_shaped

            sources.append((f"gold:{name}", write_shaped(df, task.submission.shape, out_dir / f"{name}.json")))
            continue
        sources.append((f"gold:{name}", write_submission(df, out_dir / f"{name}.csv")))
    for i, (name, path) in enumerate(sources):
        try:
            checks.append(compare(name, kohaku_rows(task, solutions, path, variant),
                                  scorer_rows(command, solutions, path)))
        except Exception as exc:   # one submission's fault (or a bug): its row, the others go on
            if debug or i >= len(submissions):   # a perturbation of the gold is kohaku's own file
                raise
            checks.append(Check(name, 0, 0, [], error=one_line(exc, name)))
    return checks
