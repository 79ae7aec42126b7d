#!/usr/bin/env python
"""What answer kinds cost (issue 41): the kinds code paths timed on a finished run's tables,
against the run's infer and vote stage seconds (docs/typed_answers.md).

    python scripts/bench_kinds.py outputs/runs/<time> typed_answers     # the run dir, its task

Times (median of 30) the infer-side paths (kind lookup, per-kind schemas and instructions,
parsing each sample with its schema check) minus the plain ones, and the vote with per-kind
groupings, typed values, page limits, references and the document's schema check minus the
plain vote; prints one JSON line.
"""
import json
import statistics
import sys
import time
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kohaku.answer.answering import InferConfig, answer_schema, parse_answer, prompt_values  # noqa: E402
from kohaku.ingest.corpus import resolve_against_root  # noqa: E402
from kohaku.tasks.files import documents  # noqa: E402
from kohaku.tasks import kinds, load_task
from kohaku.tasks.named.builtin import COLUMN_SOURCES  # noqa: E402
from kohaku.answer.voting import VoteConfig, vote_generations, with_ref_pages  # noqa: E402

REPEATS = 30


def median_seconds(fn) -> float:
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(run: Path, task_name: str) -> dict:
    task = load_task(task_name)
    record = json.loads((run / "run.json").read_text())
    stages = record["stages"]

    def table(stage: str, name: str) -> pl.DataFrame:
        return pl.read_parquet(Path(stages[stage]["path"]) / f"{name}.parquet")

    questions, gens = table("questions", "questions"), table("infer", "generations")
    contexts, nodes, docs = table("retrieve", "contexts"), table("tree", "nodes"), table("parse", "documents")
    spec, kspec, sub, cfg = task.answer, task.answer.kinds, task.submission, InferConfig()
    allowed = {q: list(dict.fromkeys(ids or [])) for q, a, ids in
               contexts.select("qid", "attempt", "block_doc_ids").iter_rows() if a == 0}
    samples = list(gens.select("qid", "raw").iter_rows())

    def infer_kinds() -> None:
        names = kinds.kind_of(questions, kspec)
        specs = kspec.specs if kspec.enabled else {}
        prompt = {n: (n, kinds.instruction(k, kspec)) for n, k in specs.items()}
        schemas = {}
        for q in questions.iter_rows(named=True):
            name = names.get(q["qid"])
            prompt_values(q, (), "", prompt.get(name))
            schemas[q["qid"]] = answer_schema(allowed[q["qid"]], cfg, spec, specs.get(name))
        for qid, raw in samples:
            parse_answer(raw, allowed[qid], spec, schemas[qid] if kspec.enabled else None)

    def infer_plain() -> None:
        for q in questions.iter_rows(named=True):
            prompt_values(q, (), "")
            answer_schema(allowed[q["qid"]], cfg, spec)
        for qid, raw in samples:
            parse_answer(raw, allowed[qid], spec)

    vote_cfg = VoteConfig()
    fallback = spec.fallback if spec.abstention == "never" else None

    def vote_plain(by_qid=None):
        answers, _ = vote_generations(gens, questions, docs, vote_cfg, fallback=fallback,
                                      value_field=spec.value, by_qid=by_qid)
        return with_ref_pages(answers, gens, contexts, nodes) if task.references == "doc_page" else answers

    def vote_kinds() -> None:
        answers = vote_plain(kinds.groupings(questions, kspec, task.vote.tolerance))
        answers = kinds.limit_pages(kinds.with_kinds(answers, questions, kspec), kspec)
        if sub.reference:
            refs = None
            if documents.metadata_columns(sub):
                root = Path(record["config"]["corpus"]["root"])
                refs = documents.read_reference_table(resolve_against_root(root, sub.metadata), sub)
            answers = documents.with_references(answers, refs, sub)
            doc = documents.json_document(answers, questions, sub, COLUMN_SOURCES)
            documents.check_schema([("document", doc)], sub, run / "submission.json")

    extra_infer = median_seconds(infer_kinds) - median_seconds(infer_plain)
    extra_vote = median_seconds(vote_kinds) - median_seconds(vote_plain)
    infer_vote = stages["infer"]["seconds"] + stages["vote"]["seconds"]
    total = sum(s["seconds"] for s in stages.values())
    return {"run": str(run), "task": task.name, "samples": gens.height, "questions": questions.height,
            "infer_stage_s": round(stages["infer"]["seconds"], 3),
            "vote_stage_s": round(stages["vote"]["seconds"], 3), "stages_total_s": round(total, 3),
            "kinds_infer_extra_s": round(extra_infer, 6), "kinds_vote_extra_s": round(extra_vote, 6),
            "share_of_infer_plus_vote_pct": round(100 * (extra_infer + extra_vote) / infer_vote, 4),
            "share_of_run_pct": round(100 * (extra_infer + extra_vote) / total, 4)}


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 2:
        sys.exit(__doc__)
    print(json.dumps(measure(Path(args[0]), args[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
