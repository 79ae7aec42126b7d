"""Ensembles of submission files: the default task's CSV (:func:`ensemble_submissions`,
``scripts/ensemble.py``; the table its writer's room names, kohaku.tasks.catalog's ``table``) and any task's (:func:`ensemble_task`, ``scripts/ensemble.py --task``).

Each input is a submission in the task's format (``task.submission``: its columns, list format
and blank cell). Per question the inputs vote with the task's grouping (``task.vote.group``:
amounts, names, text, the default task's canonical values, or your own), abstention-aware as the
pipeline's vote (kohaku.answer.voting.vote): a cell is a blank vote when it is empty or the task's
blank cell, and, for a task that lets a model abstain (``answer.abstention: allowed``), one of
its ``answer.blank_values``; for a task that never abstains a not-answerable token such as
``N/A`` is an answer and can win. The winner is written as a member wrote it when the task keeps
the surface form (``vote.keep_surface``), else in its canonical form; the other columns come
from a member that agrees with the winner, the refs from the agreeing members
(``VoteConfig.ref_mode``), written in the task's list format. Rows follow the first input.
"""

from __future__ import annotations

import json
from typing import Any

import polars as pl

from kohaku.answer.voting import SUBMISSION_CANDIDATES, VoteConfig, finalize_answers, vote
from kohaku.core.cells import check_ids, parse_ref_list, require_columns
from kohaku.core.config import ConfigError
from kohaku.core.values import BLANK, is_blank_value
from kohaku.tasks import registry
from kohaku.tasks.builtin import _list_cell, is_blank_answer
from kohaku.tasks.scoring import submission_columns
from kohaku.tasks.spec import DEFAULT, Task


def _source_column(task: Task, source: str) -> str | None:
    return next((c for c, s in task.submission.columns.items() if s == source), None)


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


def ensemble_task(frames: list[pl.DataFrame], task: Task, cfg: VoteConfig | None = None,
                  names: list[str] | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(answers, submission) voted from ``frames`` (the task's submission files, in priority
    order). Errors name the input and the column it lacks."""
    if task.submission.writer in registry.names("table"):
        raise ConfigError(f"the {task.submission.writer} writer's submissions are ensembled by "
                          "kohaku.answer.ensemble.ensemble_submissions (scripts/ensemble.py without --task)")
    names = names or [f"input {i + 1}" for i in range(len(frames))]
    id_col, value_col = submission_columns(task)
    refs_col = _source_column(task, "refs")
    spec = task.submission
    blanks = task.answer.blank_values if task.answer.abstention == "allowed" else None
    grouping = registry.lookup("group", task.vote.group, "task.vote.group")(task.vote)
    cands: list[dict[str, Any]] = []
    order: dict[str, None] = {}
    columns: list[str] = []
    for idx, (df, name) in enumerate(zip(frames, names)):
        missing = [c for c in (id_col, value_col) if c not in df.columns]
        if missing:
            raise ConfigError(f"{name}: lacks column(s) {missing} of task {task.name}'s submission "
                              f"(task.submission.columns); it has {df.columns}")
        columns = columns or list(df.columns)
        for r in df.with_columns(pl.all().cast(pl.String).fill_null("")).to_dicts():
            qid = (r[id_col] or "").strip()
            order.setdefault(qid)
            value = r[value_col]
            cands.append({"qid": qid, "source_idx": idx, "answer_value": value,
                          "ref_id": _list(r.get(refs_col, ""), spec.list_format) if refs_col else [],
                          "answer": "", "explanation": "",
                          "is_blank": is_blank_answer(value, spec.blank, blanks),
                          "row": json.dumps(r, ensure_ascii=False)})
    table = pl.DataFrame(cands, schema={"qid": pl.String, "source_idx": pl.Int64, "answer_value": pl.String,
                                        "ref_id": pl.List(pl.String), "answer": pl.String,
                                        "explanation": pl.String, "is_blank": pl.Boolean, "row": pl.String})
    answers = vote(table, cfg or VoteConfig(), grouping, keep_surface=task.vote.keep_surface)
    by_qid = {a["qid"]: a for a in answers.to_dicts()}
    out = []
    for qid in order:
        a = by_qid[qid]
        row = json.loads(a["row"]) if a["row"] and a["row"].startswith("{") else {c: "" for c in columns}
        row[id_col] = qid
        row[value_col] = spec.blank if a["is_blank"] else a["answer_value"]
        if refs_col:
            row[refs_col] = _list_cell(list(a["ref_id"] or []), spec)
        out.append({c: row.get(c, "") for c in columns})
    return answers.drop("row"), pl.DataFrame(out, schema={c: pl.String for c in columns})


def ensemble_submissions(
    submissions: list[pl.DataFrame],
    cfg: VoteConfig | None = None,
    urls: dict[str, str] | None = None,
    names: list[str] | None = None,
    writer: str = DEFAULT["writer"],
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Vote submission tables question by question (list order = priority order), submissions
    in the CSV of ``writer`` (a fixed-format writer: kohaku.tasks.catalog's ``table``; the
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
