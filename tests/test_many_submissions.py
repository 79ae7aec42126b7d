"""Scoring, ensembling and comparing many submissions of a task, CSV or its JSON documents, on the
task's own scale (issue 46, part B), on the cited_pages worked example (conf/task/cited_pages.yaml):
the JSON document reads as the flat CSV columns (the same score for both files of one run), the
ensemble votes each question by its answer kind as the vote stage does (N/A an answer, booleans
and numbers rendered by kind) and beats its best member, score.py scores many files in one call
into one table, compare.py and the reports give the summed score in points and bootstrap a
set-level F1 as the set statistic.

The three team submissions data/sample/cited_pages/teams/team_{a,b,c}.json are perturbations of
the gold (:func:`team_documents` below makes them, and a test checks the committed files are its
output): each cites the first page of every gold pool and writes the gold value, in its own
surface form (team b: names in lower case; team c: numbers as floats, lists reversed), except on
its own wrong questions (:data:`WRONG`), where the value is off by its kind and the cited page is
outside every pool."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from conftest import REPO, SAMPLE
from kohaku.answer.ensemble import ensemble_document, ensemble_task
from kohaku.core.config import ConfigError
from kohaku.report.compare import Config, read_run, score_matrix, score_with_task
from kohaku.report.paired import resample_scores
from kohaku.runner.pipeline import compose_config, run_pipeline
from kohaku.tasks import load_task
from kohaku.tasks.score.refs import na_f1
from kohaku.tasks.score.scoring import round_score, score_submission
from kohaku.tasks.files.submissions import detect_format, read_submission

TASK = load_task("cited_pages")
ANSWERS = SAMPLE / "cited_pages" / "answers.csv"
TEAMS = [SAMPLE / "cited_pages" / "teams" / f"team_{t}.json" for t in "abc"]
FILES = ["task=cited_pages", "corpus.questions=cited_pages/questions.csv",
         "corpus.solutions=cited_pages/answers.csv"]
FAST = ["llm=fake", "embed.model=hash:64", "embed.dtype=float32"]
WRONG = {"a": ("q002", "q006", "q010"), "b": ("q001", "q006", "q011", "q013"),
         "c": ("q003", "q007", "q010", "q012", "q014")}


def team_documents(answers: Path) -> dict[str, dict]:
    """The three team submissions, made from the gold (see the module doc)."""
    rows = list(csv.DictReader(answers.open(encoding="utf-8")))
    out = {}
    for i, (team, wrong) in enumerate(WRONG.items()):
        objs = []
        for r in rows:
            kind, text = r["kind"], r["answer"]
            na = text == "N/A"
            if na:
                value = "N/A"
            elif kind == "number":
                value = float(text) if i == 2 else (int(float(text)) if float(text).is_integer() else float(text))
            elif kind == "names":
                value = json.loads(text)
                value = [v.lower() for v in value] if i == 1 else (value[::-1] if i == 2 else value)
            elif kind == "boolean":
                value = text == "True"
            else:
                value = text.lower() if i == 1 else text
            pages = [pool[0] for pool in json.loads(r["pools"])]
            if r["id"] in wrong:
                pages = ["okafor2023:5"]
                if kind == "number":
                    value = 7 + i if na else value * (10 + i)
                elif kind == "name":
                    value = f"Site {'BCD'[i]}" if not na else "Kestrel"
                elif kind == "names":
                    value = [f"wrong {i}"] if na else value[:1]
                else:
                    value = (not value) if not na else True
            refs = [{"doc": p.rsplit(":", 1)[0], "page_index": int(p.rsplit(":", 1)[1])} for p in pages]
            objs.append({"question_id": r["id"], "kind": kind, "value": value, "references": refs})
        out[team] = {"team": f"team-{team}", "answers": objs}
    return out


def script(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "scripts" / name), *map(str, args)],
                          capture_output=True, text=True, cwd=REPO, timeout=300)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    return run_pipeline(compose_config([*FILES, *FAST, f"cache.dir={cache}", "infer.n=3"]),
                        tmp_path_factory.mktemp("run"))


def test_the_team_files_are_the_perturbations_of_the_gold():
    made = team_documents(ANSWERS)
    for team, path in zip("abc", TEAMS):
        assert json.loads(path.read_text()) == made[team], path


def test_the_json_document_reads_as_the_flat_csv_of_one_run(run):
    sub_json, sub_csv = run.run_dir / "submission.json", run.run_dir / "submission.csv"
    assert (detect_format(sub_json), detect_format(sub_csv)) == ("json", "csv")
    as_json, as_csv = read_submission(sub_json, TASK), read_submission(sub_csv, TASK)
    assert as_json.format == "json" and as_json.header == {"team": "kohaku-sample"}
    assert as_json.rows.columns == ["id", "kind", "value", "pages"]
    assert as_json.rows.equals(as_csv.rows.select(as_json.rows.columns))


def test_csv_and_json_of_one_run_score_the_same(run):
    a = score_submission(TASK, ANSWERS, run.run_dir / "submission.csv")
    b = score_submission(TASK, ANSWERS, run.run_dir / "submission.json")
    assert a.score == b.score and a.components == b.components
    cols = ["qid", "pred", "value", "pages", "pred_refs"]
    assert a.table.select(cols).equals(b.table.select(cols))
    assert a.score == json.loads((run.run_dir / "scores.json").read_text())["score"]


def test_typed_values_read_as_the_kinds_render_them(tmp_path):
    doc = {"team": "t", "answers": [
        {"question_id": "q1", "kind": "boolean", "value": True, "references": [{"doc": "d", "page_index": 0}]},
        {"question_id": "q2", "kind": "number", "value": 7.0, "references": []},
        {"question_id": "q3", "kind": "number", "value": 406.1, "references": []},
        {"question_id": "q4", "kind": "names", "value": ["a", "b"], "references": []},
        {"question_id": "q5", "kind": "name", "value": "N/A", "references": []},
        {"question_id": "q6", "kind": "number", "value": None, "references": []}]}
    path = tmp_path / "sub"          # no extension: detected by its first character
    path.write_text(json.dumps(doc))
    rows = read_submission(path, TASK).rows
    assert rows["value"].to_list() == ["True", "7", "406.1", '["a", "b"]', "N/A", ""]
    assert rows["pages"].to_list() == ['["d:0"]', "", "", "", "", ""]


def test_a_json_document_without_its_answers_key_is_an_error_naming_the_file(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"team": "t", "items": []}))
    with pytest.raises(Exception, match=r"bad.json: no list of answers under 'answers'"):
        read_submission(path, TASK)


def test_the_default_ensemble_of_three_teams_beats_its_best_member(tmp_path):
    out = tmp_path / "ensemble.json"
    done = script("ensemble.py", "--task", "cited_pages", "--out", out, *TEAMS)
    assert done.returncode == 0, done.stderr
    members = [score_submission(TASK, ANSWERS, p).score for p in TEAMS]
    voted = score_submission(TASK, ANSWERS, out)
    assert members == [17.43, 15.85, 15.08]
    assert voted.score == 18.73 and voted.score >= max(members)
    doc = json.loads(out.read_text())
    assert doc["team"] == "team-a"
    got = {a["question_id"]: a for a in doc["answers"]}
    assert got["q001"]["value"] == 1.11 and got["q004"]["value"] == 9400        # not 1110 or 9400000
    assert got["q005"]["value"] == "N/A" and got["q014"]["value"] == "N/A"       # N/A an answer, not blank
    assert got["q012"]["value"] is True and got["q013"]["value"] is True         # a boolean, not 1
    assert got["q002"]["value"] == 71 and got["q002"]["references"] == [{"doc": "okafor2023", "page_index": 0}]
    assert got["q006"]["value"] == "Site B"      # three different names: the first team's wins the tie
    # the CSV of the same vote holds the same cells as the document read back
    csv_out = tmp_path / "ensemble.csv"
    assert script("ensemble.py", "--task", "cited_pages", "--out", csv_out, *TEAMS).returncode == 0
    assert read_submission(csv_out, TASK).rows.equals(read_submission(out, TASK).rows)


def test_the_ensemble_groups_by_kind_as_the_vote_stage_does():
    frames = [pl.DataFrame({"id": ["q1", "q2", "q3"], "kind": ["number", "boolean", "name"],
                            "value": v, "pages": ["", "", ""]})
              for v in (["406.1", "true", "N/A"], ["406.10", "Yes", "N/A"], ["406100000", "no", "Site A"])]
    answers, sub = ensemble_task(frames, TASK)
    assert sub["value"].to_list() == ["406.1", "True", "N/A"]
    assert answers["agreement"].to_list() == pytest.approx([2 / 3, 2 / 3, 2 / 3])
    assert not answers["is_blank"].any()


def test_the_ensemble_refuses_a_task_with_kinds_when_no_kind_is_given():
    frames = [pl.DataFrame({"id": ["q1"], "value": ["1"], "pages": [""]})] * 2
    with pytest.raises(ConfigError, match=r"no submission names the kind of q1.*--questions"):
        ensemble_task(frames, TASK)
    objects = json.loads(TEAMS[0].read_text())["answers"]
    questions = pl.DataFrame({"qid": [a["question_id"] for a in objects], "kind": [a["kind"] for a in objects]})
    _, doc = ensemble_document([read_submission(TEAMS[0], TASK)], TASK, questions=questions)
    assert doc["answers"] == json.loads(TEAMS[0].read_text())["answers"]    # one member: itself


def test_score_scores_many_submissions_in_one_call(run, tmp_path):
    files = [*TEAMS, run.run_dir / "submission.csv", run.run_dir / "submission.json"]
    done = script("score.py", ANSWERS, *files, "--task", "cited_pages", "--format", "json")
    assert done.returncode == 0, done.stderr
    table = json.loads(done.stdout)
    want = {str(p): score_submission(TASK, ANSWERS, p) for p in files}
    assert {r["submission"]: r["score"] for r in table} == {k: v.score for k, v in want.items()}
    assert [r["score"] for r in table] == sorted((v.score for v in want.values()), reverse=True)
    assert {r["submission"]: (r["value"], r["pages"]) for r in table} == {
        k: (v.components["value"], v.components["pages"]) for k, v in want.items()}
    out = tmp_path / "scores.csv"
    bad = tmp_path / "missing.json"
    done = script("score.py", ANSWERS, TEAMS[0], bad, "--task", "cited_pages", "--format", "csv", "--out", out)
    assert done.returncode == 2 and f"error: {bad}" in done.stderr
    rows = list(csv.DictReader(out.open()))
    assert [(r["submission"], r["score"]) for r in rows] == [(str(TEAMS[0]), "17.43"), (str(bad), "")]
    assert "submission file not found" in rows[1]["error"]


def test_compare_prints_the_difference_in_points_with_its_interval_and_cited_pages():
    done = script("compare.py", "--solutions", ANSWERS, "--task", "cited_pages", "--flips", "20",
                  "--resamples", "2000", f"a={TEAMS[0]}", f"b={TEAMS[1]}")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "delta = B - A in points" in lines[0]
    pair = next(line for line in lines if line.startswith("a "))
    delta, lo, hi = pair.split()[3], pair.split()[4].strip("[,"), pair.split()[5].strip("]")
    a, b = (score_submission(TASK, ANSWERS, p) for p in TEAMS[:2])
    assert float(delta) == pytest.approx(b.score - a.score, abs=0.006)     # unrounded: -1.5833
    assert float(lo) < float(delta) < float(hi) and float(hi) - float(lo) > 1.0   # points, not a mean
    assert '["okafor2023:5"]' in done.stdout and "<missing>" not in done.stdout


def test_a_summed_run_is_read_in_points_from_its_own_score_files(run):
    scored = read_run(run.run_dir)
    assert scored.metric.summed
    m = score_matrix([Config("run", [scored.table], [str(run.run_dir)], scored.metric)])
    assert round(float(m.scores()[0]), 2) == json.loads((run.run_dir / "scores.json").read_text())["score"]


def test_a_set_level_f1_is_bootstrapped_as_the_set_statistic():
    task = load_task("pages_example")
    sol, sub = SAMPLE / "pages_example" / "solutions.csv", SAMPLE / "pages_example" / "submission_a.csv"
    result = score_submission(task, sol, sub)
    entry = next(c for c in result.metric if c["name"] == "na")
    assert entry["stat"] == "f1" and result.components["na"] == 0.5
    scored = score_with_task(task, sol, sub)
    m = score_matrix([Config("a", [scored.table], [str(sub)], scored.metric)])
    assert float(m.scores()[0]) == pytest.approx(12.25)                # the printed 12.3, unrounded
    t = result.table
    gold = [(x or "").strip().lower() == "n/a" for x in t["truth"].to_list()]
    pred = [bool(b) or (x or "").strip().lower() == "n/a" for x, b in zip(t["pred"].to_list(), t["pred_blank"].to_list())]
    rng = np.random.default_rng(3)
    for _ in range(20):              # each resample: the sums of the drawn questions + 0.5 x their F1
        idx = rng.integers(0, t.height, t.height)
        counts = np.bincount(idx, minlength=t.height).astype(float)[None, :]
        want = (sum(t["answer"][int(i)] + t["pages"][int(i)] for i in idx)
                + 0.5 * na_f1([gold[int(i)] for i in idx], [pred[int(i)] for i in idx]))
        assert float(resample_scores(m, counts)[0, 0]) == pytest.approx(want)


@pytest.mark.parametrize("average, fn, stat", [("macro", "na_f1", "f1_macro"),
                                               ("positive", "kohaku.tasks.named.builtin:na_f1_metric", "fixed")])
def test_a_macro_f1_is_resampled_and_an_unknown_set_metric_is_kept_fixed(average, fn, stat):
    task = load_task("pages_example")
    na = task.score.metrics[2]
    task.score.metrics[2] = {**na, "fn": fn, "params": {**na["params"], "average": average}}
    sol, subs = SAMPLE / "pages_example" / "solutions.csv", [SAMPLE / "pages_example" / f"submission_{x}.csv"
                                                              for x in "ab"]
    results = [score_submission(task, sol, s) for s in subs]
    assert [next(c for c in r.metric if c["name"] == "na")["stat"] for r in results] == [stat, stat]
    scored = [score_with_task(task, sol, s) for s in subs]
    m = score_matrix([Config(x, [s.table], [str(p)], s.metric) for x, s, p in zip("ab", scored, subs)])
    assert [round_score(float(x), 1) for x in m.scores()] == [r.score for r in results]   # half up
    t = results[0].table
    gold = [(x or "").strip().lower() == "n/a" for x in t["truth"].to_list()]
    pred = [bool(b) or (x or "").strip().lower() == "n/a" for x, b in zip(t["pred"].to_list(), t["pred_blank"].to_list())]
    idx = np.array([0, 0, 1, 2, 4, 4, 6, 7])
    counts = np.bincount(idx, minlength=t.height).astype(float)[None, :]
    na_part = (na_f1([gold[i] for i in idx], [pred[i] for i in idx], average) if stat != "fixed"
               else results[0].components["na"])
    want = sum(t["answer"][int(i)] + t["pages"][int(i)] for i in idx) + 0.5 * na_part
    assert float(resample_scores(m, counts)[0, 0]) == pytest.approx(want)


def test_a_json_document_without_the_task_is_refused_naming_the_file():
    done = script("score.py", SAMPLE / "solutions.csv", TEAMS[0])
    assert done.returncode == 2
    assert f"error: {TEAMS[0]} is a JSON document" in done.stderr and "--task" in done.stderr


def test_csv_and_json_members_make_one_json_document(run, tmp_path):
    out = tmp_path / "mixed.json"
    done = script("ensemble.py", "--task", "cited_pages", "--out", out, run.run_dir / "submission.csv", *TEAMS[:2])
    assert done.returncode == 0, done.stderr
    answers = json.loads(out.read_text())["answers"]
    assert [a["question_id"] for a in answers] == [f"q{i:03d}" for i in range(1, 15)]
    refs = [r for a in answers for r in a["references"]]
    assert refs and all(set(r) == {"doc", "page_index"} and isinstance(r["page_index"], int) for r in refs)
    # where teams a and b write the same value, two of three agree: the ensemble writes it
    mine = {a["question_id"]: a["value"] for a in answers}
    a_rows, b_rows = ({a["question_id"]: a["value"] for a in json.loads(p.read_text())["answers"]} for p in TEAMS[:2])
    agree = [q for q in mine if a_rows[q] == b_rows[q]]
    assert len(agree) == 7 and all(mine[q] == a_rows[q] for q in agree)


def test_the_format_told_overrides_the_detection(tmp_path):
    dat = tmp_path / "team_a.dat"
    dat.write_text(TEAMS[0].read_text())
    done = script("score.py", ANSWERS, dat, "--task", "cited_pages", "--submission-format", "json")
    assert done.returncode == 0 and done.stdout.strip().endswith("score: 17.43"), done.stderr
    done = script("score.py", ANSWERS, dat, "--task", "cited_pages", "--submission-format", "csv")
    assert done.returncode == 2 and f"error: {dat}: cannot parse submission as CSV" in done.stderr
