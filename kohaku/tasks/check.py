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
swapped (answerable questions given it, unanswerable ones given a value). A row agrees when
every compared column is equal (within 1e-9).
"""

from __future__ import annotations

import csv
import io
import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import polars as pl

from kohaku.core.config import ConfigError
from kohaku.tasks import registry
from kohaku.tasks.catalog import DEFAULT_VARIANT
from kohaku.tasks.io import read_rows
from kohaku.tasks.scoring import score_submission
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


@dataclass
class Layout:
    """A submission's columns as the perturbations write them: every column in order, the id,
    value and refs columns, the not-answerable token, the cell of a column the gold lacks, and
    (``blank_refs``) the refs cell of a row whose value is the token (None: the gold's refs).
    A fixed-format writer's room gives its own (kohaku.tasks.catalog's ``layout``)."""
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
    from kohaku.tasks.scoring import submission_columns

    id_col, value_col = submission_columns(task)
    refs_col = next((c for c, s in task.submission.columns.items() if s == "refs"), None)
    return Layout(list(task.submission.columns), id_col, value_col, refs_col, task.submission.blank)


def perturbations(task: Task, solutions: Path) -> dict[str, pl.DataFrame]:
    """Submissions made from the gold, one per perturbation (module doc), in the task's columns:
    the id, the value (perturbed), the refs from the gold's refs; other submission columns from
    the solutions' column of that name, else the layout's filler (empty unless the writer's room
    says otherwise)."""
    sol = read_rows(solutions, task.solutions.format, "solutions", skip_blank_lines=True)
    layout = _layout(task)
    id_col, value_col, refs_col = layout.id, layout.value, layout.refs
    spec = task.solutions
    out_cols = list(layout.columns)
    token = layout.blank
    if task.score.scorer == "components":
        tokens = [str(m.params.get("token")) for m in task.score.metric_specs if m.params.get("token")]
        token = tokens[0] if tokens else token
    blanks = {b.lower() for b in task.answer.blank_values} | {token.lower(), "is_blank"}
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
                      variant: str = DEFAULT_VARIANT) -> list[Check]:
    """Every real submission and every perturbation of the gold, scored both ways."""
    checks = []
    sources = [(str(p), Path(p)) for p in submissions]
    for name, df in perturbations(task, solutions).items():
        sources.append((f"gold:{name}", write_submission(df, out_dir / f"{name}.csv")))
    for name, path in sources:
        checks.append(compare(name, kohaku_rows(task, solutions, path, variant),
                              scorer_rows(command, solutions, path)))
    return checks
