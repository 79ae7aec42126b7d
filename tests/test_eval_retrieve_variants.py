"""scripts/eval_retrieval.py --retrieve with -o variants: retrieval keys swept over one run's
index (nothing re-embedded; a sweep through scripts/run.py -m, one point per variant, each
scored by the recall stage), each variant's figures beside the run's own config."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from kohaku.runner.pipeline import compose_config, run_pipeline
from kohaku.tools import eval_retrieval
from kohaku.tasks.analysis.recall import evaluate, summarise
from kohaku.tools.eval_retrieval import merged, retrieve_variants

from conftest import SAMPLE


def test_variants_are_read_from_the_overrides():
    got = retrieve_variants(["wide.retrieve.breadth_share=0.9", "wide.retrieve.evidence.pool=100",
                             "plain.planner.focus=false"])
    assert got == {"run": {}, "wide": {"retrieve": {"breadth_share": 0.9, "evidence": {"pool": 100}}},
                   "plain": {"planner": {"focus": False}}}
    assert merged({"top_k": 8, "evidence": {"pool": 200, "term_weight": 3.0}},
                  {"evidence": {"pool": 100}}) == {"top_k": 8, "evidence": {"pool": 100, "term_weight": 3.0}}
    for bad in ("wide.embed.model=x", "wide.retrieve", "breadth_share=0.9"):
        with pytest.raises(SystemExit, match="NAME.retrieve.key=value"):
            retrieve_variants([bad])


@pytest.fixture(scope="module")
def indexed(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("run")
    cache = tmp_path_factory.mktemp("cache")
    # retrieve.dedup_text=false: a value of the run's own config that the points must keep (a run
    # made without Hydra records no overrides: its resolved config says it)
    run_pipeline(compose_config(["stages=[index]", "embed.model=hash:64", "embed.dtype=float32",
                                 "retrieve.dedup_text=false", f"cache.dir={cache}"]), run_dir)
    return run_dir


def test_retrieve_sweeps_variants_over_one_index(indexed, tmp_path, capsys):
    out = tmp_path / "out"
    argv = [str(indexed), "--retrieve", "--questions-file", str(SAMPLE / "solutions.csv"),
            "--question-id", "id", "--stores", "shared", "--budgets", "400",
            "--gold", str(SAMPLE / "solutions.csv"), "--gold-qid", "id", "--gold-doc", "ref_id",
            "--cache-dir", str(tmp_path / "enc"), "--out", str(out),
            "-o", "one.retrieve.max_hits=1", "-o", "one.retrieve.evidence.pool=0",
            "-o", "nofocus.planner.focus=false"]
    assert eval_retrieval.main([*argv, "--select-on", "doc_hit", "page_hit"]) == 0
    table = pl.read_csv(out / "gold_recall.csv")
    assert table["variant"].to_list() == ["run", "one", "nofocus"]
    by = {r["variant"]: r for r in table.iter_rows(named=True)}
    # one ranked node per question: one document in each context, fewer tokens than the budget
    assert by["one"]["mean_docs"] == 1.0 and by["run"]["mean_docs"] > 1.0
    assert by["one"]["mean_tokens"] < by["run"]["mean_tokens"]
    assert by["run"]["gold_questions"] == by["one"]["gold_questions"] > 0
    # the sample's questions carry no answer-format instruction: the focus changes nothing
    assert by["nofocus"]["doc_recall"] == by["run"]["doc_recall"]
    for name in ("gold_shared_400", "gold_one_shared_400", "gold_nofocus_shared_400"):
        assert (out / f"{name}.parquet").is_file()
    printed = capsys.readouterr().out
    assert "variant" in printed
    # the selection report over the three variants (page_hit is null here: no page column)
    sel = pl.read_csv(out / "selection.csv")
    assert sel["metric"].to_list() == ["doc_hit"] and sel["configs"].to_list() == [3]
    assert sel["pick"][0] in ("run", "one", "nofocus")
    assert (out / "selection.md").read_text().startswith("# Selection")
    assert "out-of-sample estimate" in printed
    # through the sweep machinery: one point per variant over the run's own config, the run's
    # parse, tree, embed and index artifacts reused, each point scored by its recall stage
    sweep = out / "sweep_shared_400"
    run = json.loads((indexed / "run.json").read_text())
    points = [json.loads((sweep / str(i) / "run.json").read_text()) for i in range(3)]
    for point in points:
        for stage in ("parse", "tree", "embed", "index"):
            assert point["stages"][stage]["cache_hit"]
            assert point["stages"][stage]["key"] == run["stages"][stage]["key"]
    assert "retrieve.max_hits=1" in points[1]["overrides"] and "planner.focus=false" in points[2]["overrides"]
    assert [p["config"]["retrieve"]["dedup_text"] for p in points] == [False] * 3
    assert [p["config"]["retrieve"]["max_context_tokens"] for p in points] == [400] * 3
    gold = {n: pl.read_parquet(out / f"{f}.parquet") for n, f in
            (("run", "gold_shared_400"), ("one", "gold_one_shared_400"))}
    assert [p["stages"]["recall"]["summary"]["doc_recall"] for p in points[:2]] == \
        [by["run"]["doc_recall"], by["one"]["doc_recall"]] == [float(g["doc_hit"].mean()) for g in gold.values()]
    cmp = pl.read_csv(sweep / "comparison.csv")
    assert cmp.height == 3 and cmp["retrieve.max_hits"].to_list()[1] == 1
    summary = pl.read_csv(sweep / "selection_summary.csv").row(0, named=True)
    assert summary["configs"] == 3 and summary["optimism"] == pytest.approx(
        summary["in_sample_score"] - summary["estimate"])
    assert f"sweep reports (shared store, 400 tokens" in printed
    with pytest.raises(SystemExit, match="variant 'odd'"):
        eval_retrieval.main([*argv[:argv.index("-o")], "-o", "odd.retrieve.no_such_key=1"])


def test_selection_report_over_variants(tmp_path, capsys):
    """Per-question hits of three variants: the report names the winner, the estimate, the
    optimism and the pick (the run's own config first: the others are within its noise)."""
    import numpy as np

    rng = np.random.default_rng(0)
    base = rng.random(60) < 0.7
    frames = {}
    for name, flips in (("run", []), ("a", [0, 1, 2]), ("b", [3])):
        hit = base.copy()
        hit[flips] = ~hit[flips]
        frames[name] = pl.DataFrame({"qid": [f"q{i}" for i in range(60)], "page_hit": hit.tolist(),
                                     "text_hit": [None] * 60}, schema_overrides={"text_hit": pl.Boolean})
    table = eval_retrieval.selection_report({("single", 2000): frames}, ["page_hit", "text_hit"],
                                            tmp_path, "run")
    assert table is not None and table.height == 1          # text_hit: every value null, skipped
    row = table.row(0, named=True)
    scores = {n: float(f["page_hit"].mean()) for n, f in frames.items()}
    assert row["in_sample_best"] == max(scores, key=scores.get)
    assert row["in_sample_score"] == pytest.approx(max(scores.values()))
    assert row["optimism"] == pytest.approx(row["in_sample_score"] - row["estimate"])
    assert row["pick"] == "run"
    per = pl.read_csv(tmp_path / "selection_single_2000_page_hit.csv")
    assert per["config"].to_list() == ["run", "a", "b"]
    assert per["p_best"].sum() == pytest.approx(1.0)
    assert "Selection: single store, 2000 tokens, page_hit" in capsys.readouterr().out


def test_compare_variants_are_config_keys():
    """Every default --compare variant is a set of config keys the composed config takes: the
    shipped one (hier) sets none, the others only what they change."""
    from omegaconf import OmegaConf

    from kohaku.report.tracking import flatten
    from kohaku.tools.eval_retrieval import default_variants, variant_keys

    given = ["corpus=wattbot", "planner=none", "retrieve.attempts=1"]
    base = flatten(OmegaConf.to_container(compose_config(given), resolve=True))
    keys = {name: variant_keys(spec, base) for name, spec in default_variants().items()}
    assert keys["hier"] == {}
    assert keys["before"] == {"retrieve.top_k": 16, "retrieve.span_share": 0.25, "retrieve.evidence.pool": 0}
    assert keys["no-prior"] == {"retrieve.doc_prior.enabled": False}
    assert keys["flat"]["tree.mode"] == "flat" and keys["flat"]["embed.parents"] == "direct"
    for name, own in keys.items():
        cfg = compose_config([*given, *(eval_retrieval.override_text(k, v) for k, v in own.items())])
        for key, value in own.items():
            assert OmegaConf.select(cfg, key) == value, (name, key)
    text = eval_retrieval.override_text
    assert [text("a", None), text("a", [3, 2]), text("a", "/x y")] == ["a=null", "a=[3,2]", "a='/x y'"]
    for odd in ("it's", "/x y", "${x}", "a\\"):
        assert OmegaConf.select(compose_config([text("reranker.model", odd)]), "reranker.model") == odd
    assert OmegaConf.select(compose_config([text("reranker.model", "/x/it's here")]), "reranker.model") == "/x/it's here"
    with pytest.raises(SystemExit, match="group tree, embed, index, retrieve or planner"):
        eval_retrieval.apply_override({}, "hier/x.llm.model=y")


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory) -> Path:
    """A 1-layer BERT sequence classifier (1 label, a few words) saved as a folder that
    sentence-transformers' CrossEncoder loads offline (no download)."""
    torch = pytest.importorskip("torch")
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    folder = tmp_path_factory.mktemp("tiny-ce")
    words = ["the", "power", "cooling", "gpu", "energy", "water", "what", "is", "of", "data"]
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=len(words) + 5, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=512, num_labels=1)
    BertForSequenceClassification(cfg).eval().save_pretrained(folder)
    BertTokenizerFast(vocab_file=str(folder / "vocab.txt"), do_lower_case=True).save_pretrained(folder)
    return folder


def test_compare_runs_its_variants_as_a_sweep(tmp_path, capsys, tiny_cross_encoder):
    """--compare on the sample corpus: one sweep point per variant (stages=[recall]) and one per
    variant with the cross-encoder; the later points reuse the first's parse, tree, embed and
    index; the printed table and the per-question files are the points' recall tables read as
    evaluate() reads the contexts."""
    out = tmp_path / "out"
    argv = ["--compare", "--data", str(SAMPLE), "--model", "hash:64", "--budgets", "400",
            "--kind-budget", "400", "--variants", "hier", "hier/one",
            "-o", "hier/one.retrieve.max_hits=1", "--cache-dir", str(tmp_path / "cache"), "--out", str(out)]
    assert eval_retrieval.main([*argv, "--cross-encoder", str(tiny_cross_encoder), "--rerank-top-n", "5"]) == 0
    printed = capsys.readouterr().out
    table = pl.read_csv(out / "compare.csv")
    assert table.columns == eval_retrieval.COMPARE_COLUMNS
    assert table["variant"].to_list() == ["hier", "hier+cross-encoder", "hier/one", "hier/one+cross-encoder"]
    assert table["budget"].to_list() == [400] * 4
    by = {r["variant"]: r for r in table.iter_rows(named=True)}
    assert by["hier/one"]["mean_docs"] == 1.0 and by["hier"]["mean_docs"] > 1.0
    assert by["hier"]["evidence_n"] == by["hier/one"]["evidence_n"] > 0
    sweep = out / "sweep_400"
    points = [json.loads((sweep / str(i) / "run.json").read_text()) for i in range(4)]
    assert not points[0]["stages"]["embed"]["cache_hit"]
    for point in points[1:]:
        for stage in ("parse", "tree", "embed", "index"):
            assert point["stages"][stage]["cache_hit"]
            assert point["stages"][stage]["key"] == points[0]["stages"][stage]["key"]
        assert not point["stages"]["retrieve"]["cache_hit"]
    assert "retrieve.max_hits=1" in points[2]["overrides"] and "stages=[recall]" in points[0]["overrides"]
    assert [p["config"]["reranker"]["kind"] for p in points] == ["none", "cross_encoder"] * 2
    assert points[1]["config"]["reranker"]["model"] == str(tiny_cross_encoder)
    assert points[3]["config"]["reranker"]["top_n"] == 5 and points[3]["config"]["retrieve"]["max_hits"] == 1
    assert points[0]["config"]["corpus"]["questions"] == "questions.csv"   # the sample's names
    assert points[0]["config"]["embed"]["model"] == "hash:64"
    # the per-question table is evaluate()'s over the point's own contexts and nodes
    sol = eval_retrieval.read_solutions(SAMPLE / "solutions.csv")
    for i, name in ((0, "hier"), (2, "hier_one")):
        stages = points[i]["stages"]
        want = evaluate(pl.read_parquet(Path(stages["retrieve"]["path"]) / "contexts.parquet"), sol,
                        pl.read_parquet(Path(stages["tree"]["path"]) / "nodes.parquet"),
                        ranking=pl.read_parquet(Path(stages["retrieve"]["path"]) / "ranking.parquet"))
        got = pl.read_parquet(out / f"per_question_{name}_400.parquet")
        assert got.drop("variant", "budget").sort("qid").equals(want.sort("qid"))
        figures = summarise(got)
        assert {k: by[got["variant"][0]][k] for k in table.columns if k in figures} == \
            {k: figures[k] for k in table.columns if k in figures}
    assert (out / "kinds_hier_one_400.csv").is_file()
    assert pl.read_csv(sweep / "comparison.csv").height == 4
    sel = pl.read_csv(out / "selection.csv")
    assert sel["metric"].to_list() == ["evidence", "doc_hit"] and sel["configs"].to_list() == [4, 4]
    assert "Selection: all store, 400 tokens, evidence" in printed and "out-of-sample estimate" in printed
    assert "sweep reports (400 tokens" in printed
    with pytest.raises(SystemExit, match="variant 'hier/odd'"):
        eval_retrieval.main([*argv[:argv.index("hier/one")], "hier/odd", "-o",
                             "hier/odd.retrieve.no_such_key=1", "--out", str(out)])
