"""Ensembles of submission files: the default task's CSV (:func:`ensemble_submissions`,
``scripts/ensemble.py``; the table its writer's room names, kohaku.tasks.named.catalog's ``table``) and any
task's (:func:`ensemble_task`, ``scripts/ensemble.py --task``), CSV or the task's JSON document.

Each input is a submission in the task's format (kohaku.tasks.files.submissions: its flat columns, list
format and blank cell, or its JSON writer's document). Per question the inputs vote exactly as the
pipeline's vote stage votes the samples (kohaku.answer.voting.task_vote, the same function): each
question with the grouping of its answer kind (``task.answer.kinds``: numbers within
``vote.tolerance``, booleans by the task's true/false words, names, sets of names, dates; the kind
from the questions file, or from the submissions' kind column), else the task's ``vote.group``;
abstention-aware: a cell is a blank vote when it is empty or the task's blank cell, and, for a
task that lets a model abstain (``answer.abstention: allowed``), one of its
``answer.blank_values``; for a task that never abstains a not-answerable token such as ``N/A`` is
an answer and can win, and a question no input answers gets the task's ``answer.fallback``. The
winner is written as a member wrote it when the task keeps the surface form
(``vote.keep_surface``), else rendered as the vote stage renders it (a kind's rendering: ``True``,
``406.1``, ``["a", "b"]``); the other columns (or answer-object keys) come from a member that
agrees with the winner, the refs (or cited pages, or reference objects) from the agreeing members
(``VoteConfig.ref_mode``). Rows follow the first input.
"""

from __future__ import annotations

import json
from typing import Any

import polars as pl

from kohaku.answer.voting import (SUBMISSION_CANDIDATES, TaskVote, VoteConfig, finalize_answers, never_blank,
                                  task_vote, vote)
from kohaku.core.cells import check_ids, parse_ref_list, require_columns
from kohaku.core.config import ConfigError
from kohaku.core.values import BLANK, is_blank_value
from kohaku.tasks import kinds as kinds_mod
from kohaku.tasks.named import registry
from kohaku.tasks.named.builtin import _list_cell, is_blank_answer
from kohaku.tasks.score.scoring import submission_columns
from kohaku.tasks.spec import DEFAULT, Task
from kohaku.tasks.files.submissions import SubmissionFile


def _source_column(task: Task, *sources: str) -> str | None:
    return next((c for s in sources for c, src in task.submission.columns.items() if src == s), None)


def _list(cell: str, fmt: str) -> list[str]:
    text = (cell or "").strip()
    if fmt == "semicolon" and not text.startswith("["):
        return [p.strip() for p in text.split(";") if p.strip()]
    if fmt == "json" and text.startswith("["):
        try:
            return [str(x) for x in json.loads(text)]
        except ValueError:
            pass
    return parse_ref_list(text)


def _kinds_table(task: Task, members: list[SubmissionFile], questions: pl.DataFrame | None) -> pl.DataFrame:
    """qid and the kinds column: from ``questions``, else from the members' column whose source is
    ``kind``; an error when the task has answer kinds and neither gives them."""
    kinds = task.answer.kinds
    if not kinds.enabled:
        return pl.DataFrame(schema={"qid": pl.String})
    if questions is not None:
        return questions
    col = _source_column(task, "kind")
    of: dict[str, str] = {}
    id_col = _source_column(task, "qid")
    for m in members:
        if col in m.rows.columns:
            for qid, kind in m.rows.select(id_col, col).iter_rows():
                if (kind or "").strip() and kind != task.submission.blank:
                    of.setdefault((qid or "").strip(), kind.strip())
    ids = [(q or "").strip() for m in members for q in m.rows[id_col].to_list()]
    lacking = [q for q in dict.fromkeys(ids) if q not in of]
    if lacking:
        raise ConfigError(f"task {task.name} votes each question by its answer kind "
                          f"(task.answer.kinds.column {kinds.column!r}), but no submission names the "
                          f"kind of {', '.join(lacking[:5])}" + (" ..." if len(lacking) > 5 else "")
                          + ": give the questions file (scripts/ensemble.py --questions)")
    return pl.DataFrame({"qid": list(of), kinds.column: list(of.values())},
                        schema={"qid": pl.String, kinds.column: pl.String})


def _members(frames: list[pl.DataFrame | SubmissionFile]) -> list[SubmissionFile]:
    from pathlib import Path

    return [f if isinstance(f, SubmissionFile) else SubmissionFile(Path(f"input {i + 1}"), "csv", f)
            for i, f in enumerate(frames)]


def ensemble_task(frames: list[pl.DataFrame | SubmissionFile], task: Task, cfg: VoteConfig | None = None,
                  names: list[str] | None = None, questions: pl.DataFrame | None = None,
                  ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(answers, submission) voted from ``frames`` (the task's submissions, in priority order: flat
    tables or read files, kohaku.tasks.files.submissions.read_submission); the submission is the flat
    table of the first input's columns (:func:`ensemble_document` writes the JSON document).
    ``questions`` (qid and the kinds column) give each question's kind; without them the inputs'
    kind column does. Errors name the input and the column it lacks."""
    answers, rows, _ = _ensemble(_members(frames), task, cfg, names, questions)
    columns = list(dict.fromkeys(c for r in rows[:1] for c in r))
    return answers, pl.DataFrame([{c: r.get(c, "") for c in columns} for r in rows],
                                 schema={c: pl.String for c in columns})


def ensemble_document(members: list[SubmissionFile], task: Task, cfg: VoteConfig | None = None,
                      names: list[str] | None = None, questions: pl.DataFrame | None = None,
                      ) -> tuple[pl.DataFrame, dict[str, Any]]:
    """(answers, document): the vote of :func:`ensemble_task` as the task's JSON document: the first
    JSON input's top-level keys (else ``submission.document``), one answer object per question, the
    winner's object with its value and references replaced by the voted ones."""
    answers, _, objects = _ensemble(members, task, cfg, names, questions)
    header = next((m.header for m in members if m.format == "json"), dict(task.submission.document))
    return answers, {**header, task.submission.answers_key: objects}


def _ensemble(members: list[SubmissionFile], task: Task, cfg: VoteConfig | None, names: list[str] | None,
              questions: pl.DataFrame | None) -> tuple[pl.DataFrame, list[dict[str, str]], list[dict[str, Any]]]:
    if task.submission.writer in registry.names("table"):
        raise ConfigError(f"the {task.submission.writer} writer's submissions are ensembled by "
                          "kohaku.answer.ensemble.ensemble_submissions (scripts/ensemble.py without --task)")
    names = names or [str(m.path) for m in members]
    id_col, value_col = submission_columns(task)
    refs_col = _source_column(task, "refs", "ref_pages")
    spec = task.submission
    blanks = task.answer.blank_values if task.answer.abstention == "allowed" else None
    for m, name in zip(members, names):
        missing = [c for c in (id_col, value_col) if c not in m.rows.columns]
        if missing:
            raise ConfigError(f"{name}: lacks column(s) {missing} of task {task.name}'s submission "
                              f"(task.submission.columns); it has {m.rows.columns}")
    kinds_table = _kinds_table(task, members, questions)
    how: TaskVote = task_vote(task.vote, task.answer.kinds, kinds_table, task.answer.abstention,
                              task.answer.fallback)
    cands: list[dict[str, Any]] = []
    order: dict[str, None] = {}
    for idx, m in enumerate(members):
        rows = m.rows.with_columns(pl.all().cast(pl.String).fill_null("")).to_dicts()
        for pos, r in enumerate(rows):
            qid = (r[id_col] or "").strip()
            order.setdefault(qid)
            value = r[value_col]
            cands.append({"qid": qid, "source_idx": idx, "answer_value": value,
                          "ref_id": _list(r.get(refs_col, ""), spec.list_format) if refs_col else [],
                          "answer": "", "explanation": "",
                          "is_blank": is_blank_answer(value, spec.blank, blanks),
                          "row": json.dumps(r, ensure_ascii=False),
                          "object": json.dumps(m.objects[pos], ensure_ascii=False) if m.objects else ""})
    table = pl.DataFrame(cands, schema={"qid": pl.String, "source_idx": pl.Int64, "answer_value": pl.String,
                                        "ref_id": pl.List(pl.String), "answer": pl.String,
                                        "explanation": pl.String, "is_blank": pl.Boolean, "row": pl.String,
                                        "object": pl.String})
    answers = vote(table, cfg or VoteConfig(), how.grouping, how.keep_surface, how.by_qid)
    if how.fallback is not None:
        answers = never_blank(answers, how.fallback)
    refs_of = _reference_objects(members, task, refs_col)
    kind_of = kinds_mod.kind_of(kinds_table, task.answer.kinds) if task.answer.kinds.enabled else {}
    by_qid = {a["qid"]: a for a in answers.to_dicts()}
    rows_out, objects = [], []
    for qid in order:
        a = by_qid[qid]
        row = json.loads(a["row"]) if (a["row"] or "").startswith("{") else {}
        row[id_col] = qid
        row[value_col] = spec.blank if a["is_blank"] else a["answer_value"]
        refs = list(a["ref_id"] or [])
        if refs_col:
            row[refs_col] = _list_cell(refs, spec)
        rows_out.append(row)
        obj = json.loads(a["object"]) if (a["object"] or "").startswith("{") else {}
        objects.append(_answer_object(task, qid, a, obj, refs, [refs_of.get(r) or _reference(r, task)
                                                                for r in refs], kind_of.get(qid)))
    return answers.drop("row", "object"), rows_out, objects


def members_escape(members: list[SubmissionFile]) -> bool | None:
    """Whether the ensemble's JSON document escapes non-ASCII as its members do: True when every
    JSON member that shows it writes ``\\uXXXX`` escapes, False when one writes raw non-ASCII
    text, None when none tells (the task's ``submission.ensure_ascii`` then)."""
    from kohaku.tasks.files.documents import escapes_non_ascii

    told = [f for m in members if m.format == "json" and (f := escapes_non_ascii(m.path)) is not None]
    return all(told) if told else None


def _reference_objects(members: list[SubmissionFile], task: Task, refs_col: str | None) -> dict[str, Any]:
    """A flat ref item (``doc:page``) -> the reference object a JSON input wrote for it."""
    from kohaku.tasks.files.submissions import _Reader

    out: dict[str, Any] = {}
    key = next((k for k, s in task.submission.answer.items() if s == "references"), None)
    if not refs_col or key is None:
        return out
    reader = _Reader(task, None)
    for m in members:
        for obj in m.objects or []:
            for ref in obj.get(key) or []:
                flat = reader.row({key: [ref]}, str(m.path)).get(refs_col)
                for item in _list(flat or "", task.submission.list_format):
                    out.setdefault(item, ref)
    return out


def _reference(item: str, task: Task) -> Any:
    """A reference object rebuilt from a CSV's ``doc:page`` item where the task's reference
    objects hold only the document id and the page (else the item as written)."""
    spec = task.submission.reference
    doc, _, page = item.rpartition(":")
    if not spec or not set(spec.values()) <= {"doc_id", "page"} or not page.strip().lstrip("-").isdigit():
        return item
    return {key: doc if source == "doc_id" else int(page) for key, source in spec.items()}


def _answer_object(task: Task, qid: str, a: dict[str, Any], obj: dict[str, Any], refs: list[str],
                   references: list[Any], kind: str | None) -> dict[str, Any]:
    """The winner's answer object (``obj``; built from the sources where the winner came from a
    CSV) with the voted value (typed by the question's kind) and refs or reference objects."""
    spec, kinds = task.submission, task.answer.kinds
    out = dict(obj)
    text = None if a["is_blank"] else a["answer_value"]
    for key, source in spec.answer.items():
        if source == "qid":
            out[key] = qid
        elif source == "kind" and kind is not None:
            out[key] = kind
        elif source == "value":
            out[key] = text
        elif source == "typed_value":
            typed = text is not None and kind in kinds.specs
            out[key] = kinds_mod.typed_value(kinds.specs[kind], kinds, text) if typed else text
        elif source == "references":
            out[key] = references
        elif source in ("refs", "ref_pages"):
            out[key] = refs
    return out


def ensemble_submissions(
    submissions: list[pl.DataFrame],
    cfg: VoteConfig | None = None,
    urls: dict[str, str] | None = None,
    names: list[str] | None = None,
    writer: str = DEFAULT["writer"],
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Vote submission tables question by question (list order = priority order), submissions
    in the CSV of ``writer`` (a fixed-format writer: kohaku.tasks.named.catalog's ``table``; the
    default task's).

    Returns (answers, submission). A row is a blank vote when its answer_value is blank. ref_url
    comes from ``urls`` (doc id -> url, e.g. metadata.csv) when given, else from the ref_id /
    ref_url pairs of the inputs. Question text and answer_unit come from the first input that
    has the question; output rows follow the first appearance of each id.
    """
    names = names or [f"input {i + 1}" for i in range(len(submissions))]
    frames = []
    questions: dict[str, dict[str, str]] = {}
    seen_urls: dict[str, str] = {}
    for idx, (df, name) in enumerate(zip(submissions, names)):
        require_columns(df, ("id", "answer_value", "ref_id"), name)
        check_ids(df, name)
        df = df.with_columns(pl.all().cast(pl.String).fill_null(""))
        rows = df.to_dicts()
        for r in rows:
            qid = r["id"].strip()
            questions.setdefault(
                qid, {"qid": qid, "question": r.get("question", ""), "answer_unit": r.get("answer_unit", "")}
            )
            ids, links = parse_ref_list(r["ref_id"]), parse_ref_list(r.get("ref_url", ""))
            if len(ids) == len(links):
                for d, u in zip(ids, links):
                    seen_urls.setdefault(d, u)
        frames.append(
            pl.DataFrame(
                {
                    "qid": [r["id"].strip() for r in rows],
                    "source_idx": [idx] * len(rows),
                    "answer_value": [r["answer_value"] for r in rows],
                    "ref_id": [parse_ref_list(r["ref_id"]) for r in rows],
                    "answer": [r.get("answer", "") for r in rows],
                    "explanation": [r.get("explanation", "") for r in rows],
                    "is_blank": [is_blank_value(r["answer_value"]) for r in rows],
                    "supporting_materials": [r.get("supporting_materials", "") for r in rows],
                },
                schema=SUBMISSION_CANDIDATES,
            )
        )
    candidates = pl.concat(frames) if frames else pl.DataFrame(schema=SUBMISSION_CANDIDATES)
    voted = vote(candidates, cfg)
    urls = dict(urls) if urls is not None else seen_urls
    documents = pl.DataFrame(
        {"doc_id": list(urls), "url": list(urls.values())}, schema={"doc_id": pl.String, "url": pl.String}
    )
    qtable = pl.DataFrame(
        list(questions.values()), schema={"qid": pl.String, "question": pl.String, "answer_unit": pl.String}
    )
    voted = voted.with_columns(
        pl.when(pl.col("is_blank")).then(pl.lit(BLANK)).otherwise(pl.col("supporting_materials"))
        .alias("supporting_materials")
    )
    answers, _ = finalize_answers(voted, qtable, documents)
    table = registry.lookup("table", writer, "writer")
    return answers, table(answers, qtable)
