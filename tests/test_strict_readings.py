"""Reading a submission as strictly as a competition's own scorer does (issue 54), on the typed
worked example (conf/task/cited_pages.yaml, data/sample/cited_pages/): a strict number, a names
delimiter, list-looking text, integer pages, untrimmed document ids, a duplicate answer policy
and unknown ids; one unanswered rule (a missing row and an empty value told apart, per metric,
set-level metrics and kind_value included); the gold as it comes (a JSON object keyed by id or
by question text, a list gold meaning "any of these" for every kind); the JSON writer's
``ensure_ascii`` and the ensemble writing as its members do; full cited pages in compare's flips.

Each test scores small JSON documents written here against the example's gold (answers.csv:
q001 number 1.11 in pool okafor2023:0; q009/q010 names; q012 boolean True; q005, q008, q011,
q014 N/A)."""

from __future__ import annotations

import copy
import csv
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import REPO, SAMPLE
from kohaku.core.config import ConfigError
from kohaku.core.errors import CorpusError, MetricError
from kohaku.report.compare import flip_lines
from kohaku.runner.pipeline import task_values
from kohaku.tasks import build_task
from kohaku.tasks.files.documents import escapes_non_ascii, write_json
from kohaku.tasks.score.scoring import score_submission

ANSWERS = SAMPLE / "cited_pages" / "answers.csv"
QUESTIONS = SAMPLE / "cited_pages" / "questions.csv"
BASE = task_values("cited_pages")


def task(**changes):
    """The cited_pages task with ``changes`` (a dotted key -> value; ``score.metrics.1.empty``
    indexes the metric list)."""
    values = copy.deepcopy(BASE)
    for path, value in changes.items():
        node = values
        *head, last = path.split(".")
        for part in head:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        node[last] = value
    return build_task(values)


def answer(qid: str, kind: str, value, refs=(("okafor2023", 0),)) -> dict:
    return {"question_id": qid, "kind": kind, "value": value,
            "references": [{"doc": d, "page_index": p} for d, p in refs]}


def document(path: Path, *answers: dict) -> Path:
    path.write_text(json.dumps({"team": "t", "answers": list(answers)}), encoding="utf-8")
    return path


def scores(t, sub: Path, gold: Path = ANSWERS) -> dict[str, dict[str, float]]:
    """qid -> {value, pages} of the questions the submission answers."""
    result = score_submission(t, gold, sub)
    return {r["qid"]: {"value": r["value"], "pages": r["pages"]} for r in result.table.to_dicts()}


# -- strict readings, per kind --------------------------------------------------------------

def test_a_strict_number_reads_only_what_float_reads(tmp_path):
    sub = document(tmp_path / "s.json", answer("q001", "number", "1.11%"), answer("q002", "number", "$71"),
                   answer("q003", "number", "18"), answer("q004", "number", 9400))
    lenient = scores(task(), sub)
    strict = scores(task(**{"answer.kinds.types.number.strict": True}), sub)
    assert [lenient[q]["value"] for q in ("q001", "q002", "q003", "q004")] == [1.0, 1.0, 1.0, 1.0]
    # "1.11%" and "$71" are no number under strict; "18" (a string) and 9400 are
    assert [strict[q]["value"] for q in ("q001", "q002", "q003", "q004")] == [0.0, 0.0, 1.0, 1.0]


def test_a_names_delimiter_splits_one_string_into_names(tmp_path):
    sub = document(tmp_path / "s.json", answer("q009", "names",
                   "air cooling, rear-door heat exchangers, direct-to-chip liquid cooling"))
    assert scores(task(), sub)["q009"]["value"] == 0.0          # one name, not in the gold's three
    split = scores(task(**{"answer.kinds.types.names.delimiter": ","}), sub)
    assert split["q009"]["value"] == 1.0


def test_list_looking_text_is_a_list_only_with_list_text(tmp_path):
    sub = document(tmp_path / "s.json",
                   answer("q010", "names", "['Threshold', 'Forecast-Greedy', 'Oracle']"),
                   answer("q009", "names", ["air cooling", "rear-door heat exchangers",
                                            "direct-to-chip liquid cooling"]))
    assert scores(task(), sub)["q010"]["value"] == 1.0
    strict = scores(task(**{"answer.kinds.types.names.list_text": False}), sub)
    assert strict["q010"]["value"] == 0.0       # the text is one name
    assert strict["q009"]["value"] == 1.0       # a JSON array is still the list


def test_a_strict_reading_on_a_kind_of_another_type_is_refused():
    with pytest.raises(ConfigError, match="delimiter reads a names value; this kind's type is number"):
        task(**{"answer.kinds.types.number.delimiter": ","})
    with pytest.raises(ConfigError, match="strict reads a number value; this kind's type is boolean"):
        task(**{"answer.kinds.types.boolean.strict": True})


def test_a_page_that_is_no_integer_is_no_page_never_its_floor(tmp_path):
    sub = document(tmp_path / "s.json", answer("q001", "number", 1.11, [("okafor2023", 0.5)]),
                   answer("q002", "number", 71, [("okafor2023", 0.0)]),
                   answer("q003", "number", 18, [("sato2025", 1)]))
    number = scores(task(), sub)
    # page 0.5 cites no page: its pool is missed (-0.5) and it is a page outside the pools (-0.1)
    assert number["q001"]["pages"] == pytest.approx(0.4)
    assert number["q002"]["pages"] == 1.0 and number["q003"]["pages"] == 1.0   # 0.0 is page 0
    integer = scores(task(**{"submission.pages": "integer"}), sub)
    assert integer["q001"]["pages"] == pytest.approx(0.4)
    assert integer["q002"]["pages"] == pytest.approx(0.4)   # 0.0 is no integer
    assert integer["q003"]["pages"] == 1.0
    with pytest.raises(ConfigError, match="task.submission.pages='float'"):
        task(**{"submission.pages": "float"})


def test_document_ids_are_trimmed_unless_the_task_says_not(tmp_path):
    sub = document(tmp_path / "s.json", answer("q001", "number", 1.11, [("okafor2023 ", 0)]))
    assert scores(task(), sub)["q001"]["pages"] == 1.0
    assert scores(task(**{"submission.trim_doc_ids": False}), sub)["q001"]["pages"] == pytest.approx(0.4)


# -- duplicates and unknown ids -------------------------------------------------------------

def test_a_question_answered_twice_scores_first_last_or_is_refused(tmp_path):
    sub = document(tmp_path / "s.json", answer("q001", "number", 1.11), answer("q001", "number", 5),
                   answer("q999", "number", 1))
    first = score_submission(task(), ANSWERS, sub)
    last = score_submission(task(**{"submission.duplicates": "last"}), ANSWERS, sub)
    assert first.table.filter(first.table["qid"] == "q001")["value"].item() == 1.0
    assert last.table.filter(last.table["qid"] == "q001")["value"].item() == 0.0
    assert first.details["duplicates"] == {"policy": "first", "ids": ["q001"]}
    assert any("1 id(s) with more than one row, the last scored" in w for w in last.warnings)
    assert first.details["unknown_ids"] == ["q999"] and first.n_extra == 1
    with pytest.raises(MetricError, match=r"1 question id\(s\) answered more than once: q001"):
        score_submission(task(**{"submission.duplicates": "error"}), ANSWERS, sub)


def test_the_batch_table_counts_duplicates_and_names_unknown_ids(tmp_path):
    dup = document(tmp_path / "dup.json", answer("q001", "number", 1.11), answer("q001", "number", 5))
    unknown = document(tmp_path / "unknown.json", answer("q001", "number", 1.11),
                       answer("q 999", "number", 1), answer("q998", "number", 1))
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "score.py"), str(ANSWERS), str(dup),
                           str(unknown), "--task", "cited_pages", "--format", "json"],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = {Path(r["submission"]).name: r for r in json.loads(proc.stdout)}
    assert rows["dup.json"]["duplicates"] == 1 and rows["dup.json"]["unknown_ids"] == "[]"
    assert rows["unknown.json"]["duplicates"] == 0
    assert json.loads(rows["unknown.json"]["unknown_ids"]) == ["q 999", "q998"]


# -- one unanswered rule ----------------------------------------------------------------------

@pytest.mark.parametrize("unanswered", [0.0, 0.25])
def test_an_empty_value_is_scored_only_by_the_metrics_that_say_so(tmp_path, unanswered):
    # q001: "value": [] with its right page; q002: no row at all
    sub = document(tmp_path / "s.json", answer("q001", "number", []), answer("q003", "number", 18, [("sato2025", 1)]))
    default = scores(task(**{"score.unanswered": unanswered}), sub)
    assert default["q001"] == {"value": unanswered, "pages": unanswered}
    assert default["q002"] == {"value": unanswered, "pages": unanswered}
    pages_scored = scores(task(**{"score.unanswered": unanswered, "score.metrics.1.empty": "score"}), sub)
    assert pages_scored["q001"] == {"value": unanswered, "pages": 1.0}     # the page metric sees the page
    assert pages_scored["q002"] == {"value": unanswered, "pages": unanswered}   # a missing row stays unanswered
    both = scores(task(**{"score.unanswered": unanswered, "score.metrics.0.empty": "score",
                          "score.metrics.1.empty": "score"}), sub)
    assert both["q001"] == {"value": 0.0, "pages": 1.0}    # kind_value scores "" against 1.11: 0
    assert both["q003"] == {"value": 1.0, "pages": 1.0}
    with pytest.raises(ConfigError, match=r"empty='scored'; use one of unanswered, score"):
        task(**{"score.metrics.1.empty": "scored"})


SET_METRIC = '''
from kohaku.tasks.score.kind_metrics import kind_value_metric

def mean_value(rows, params, env):
    values = kind_value_metric(rows, {}, env)
    return sum(values) / len(values)
'''


def test_a_set_level_metric_that_calls_kind_value_follows_the_rule(tmp_path, monkeypatch):
    (tmp_path / "set_metric_54.py").write_text(SET_METRIC)
    monkeypatch.syspath_prepend(str(tmp_path))
    metrics = copy.deepcopy(BASE["score"]["metrics"]) + [
        {"name": "mean", "fn": "set_metric_54:mean_value", "level": "set", "weight": 0.0}]
    sub = document(tmp_path / "s.json", answer("q001", "number", 1.11), answer("q002", "number", []))
    result = score_submission(task(**{"score.metrics": metrics, "score.unanswered": 0.5}), ANSWERS, sub)
    # q001 right (1), q002 empty and q003..q014 missing: 13 unanswered at 0.5 each
    assert result.components["mean"] == pytest.approx(round((1 + 13 * 0.5) / 14, 2))
    metrics[-1]["empty"] = "score"
    result = score_submission(task(**{"score.metrics": metrics, "score.unanswered": 0.5}), ANSWERS, sub)
    assert result.components["mean"] == pytest.approx(round((1 + 0 + 12 * 0.5) / 14, 2))


# -- the gold as it comes -------------------------------------------------------------------

def gold_rows() -> list[dict[str, str]]:
    with ANSWERS.open(encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def typed(row: dict[str, str]):
    """A gold cell as the competition's JSON writes it: numbers and booleans typed, lists as lists."""
    text = row["answer"]
    if text.startswith("["):
        return json.loads(text)
    if row["kind"] == "number" and text != "N/A":
        return float(text)
    if row["kind"] == "boolean" and text != "N/A":
        return text == "True"
    return text


def perfect(tmp_path: Path, id_of=lambda r: r["id"]) -> Path:
    answers = []
    for r in gold_rows():
        pools = json.loads(r["pools"])
        refs = [(p[0].rsplit(":", 1)[0], int(p[0].rsplit(":", 1)[1])) for p in pools]
        answers.append(answer(id_of(r), r["kind"], typed(r), refs))
    return document(tmp_path / "perfect.json", *answers)


def test_a_gold_json_object_keyed_by_id_scores_as_the_csv(tmp_path):
    gold = tmp_path / "gold.json"
    # pretty-printed: the object spans lines (read as JSON lines, it was "line 1 ... is not JSON")
    gold.write_text(json.dumps({r["id"]: {"kind": r["kind"], "answer": typed(r), "pools": json.loads(r["pools"])}
                                for r in gold_rows()}, indent=2))
    sub = perfect(tmp_path)
    team = SAMPLE / "cited_pages" / "teams" / "team_a.json"
    for s in (sub, team):
        by_json = score_submission(task(**{"solutions.format": "json"}), gold, s)
        by_csv = score_submission(task(), ANSWERS, s)
        assert by_json.score == by_csv.score and by_json.components == by_csv.components
    # solutions.format null: the format from the extension
    assert score_submission(task(**{"solutions.format": None}), gold, sub).score == 14 * 1.5


def test_a_gold_json_object_keyed_by_question_text(tmp_path):
    with QUESTIONS.open(encoding="utf-8") as fh:
        text = {r["id"]: r["question"] for r in csv.DictReader(fh)}
    gold = tmp_path / "gold.json"
    gold.write_text(json.dumps({text[r["id"]]: {"kind": r["kind"], "answer": typed(r),
                                                 "pools": json.loads(r["pools"])} for r in gold_rows()}))
    sub = perfect(tmp_path, lambda r: text[r["id"]])
    result = score_submission(task(**{"solutions.id": "question", "solutions.format": "json"}), gold, sub)
    assert result.score == 14 * 1.5 and result.n == 14 and result.n_missing == 0


def test_a_gold_of_another_shape_is_refused_naming_what_was_found(tmp_path):
    mixed = tmp_path / "mixed.json"
    mixed.write_text(json.dumps({"q001": {"kind": "number", "answer": 1}, "q002": 5}, indent=1))
    with pytest.raises(CorpusError, match="whose values are numbers and objects; expected all objects"):
        score_submission(task(**{"solutions.format": "json"}), mixed, perfect(tmp_path))
    scalar = tmp_path / "scalar.json"
    scalar.write_text('"q001"')
    with pytest.raises(CorpusError, match="is a JSON string; expected a JSON array of objects"):
        score_submission(task(**{"solutions.format": "json"}), scalar, perfect(tmp_path))


def list_gold(tmp_path: Path, cells: dict[str, str]) -> Path:
    rows = gold_rows()
    for r in rows:
        r["answer"] = cells.get(r["id"], r["answer"])
    path = tmp_path / "gold_lists.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


LISTS = {"q001": '[1.11, "1.110"]', "q005": '["N/A"]', "q006": '["Site A", "site a."]', "q008": '["N/A"]',
         "q009": '[["air cooling", "rear-door heat exchangers", "direct-to-chip liquid cooling"]]',
         "q011": '["N/A"]', "q012": "[true]", "q013": '["True", "yes"]', "q014": '["N/A"]'}


def test_a_list_gold_means_any_of_these_for_every_kind_na_and_booleans_included(tmp_path):
    gold = list_gold(tmp_path, LISTS)
    sub = perfect(tmp_path)
    by_list, by_scalar = scores(task(), sub, gold), scores(task(), sub)
    assert by_list == by_scalar
    assert all(v["value"] == 1.0 for v in by_list.values())          # 14 of 14, N/A and booleans too
    wrong = document(tmp_path / "wrong.json", answer("q012", "boolean", "N/A"),
                     answer("q005", "number", 3), answer("q013", "boolean", False))
    got = scores(task(), wrong, gold)
    assert [got[q]["value"] for q in ("q012", "q005", "q013")] == [0.0, 0.0, 0.0]


def test_a_list_gold_that_is_no_list_of_answers_is_refused(tmp_path):
    with pytest.raises(MetricError, match=r"question q001: the gold .* is a list holding lists; a number gold"):
        score_submission(task(), list_gold(tmp_path, {"q001": "[[1.11], 2]"}), perfect(tmp_path))
    with pytest.raises(MetricError, match="question q012: the gold is an empty list"):
        score_submission(task(), list_gold(tmp_path, {"q012": "[]"}), perfect(tmp_path))


# -- writers for picky readers ----------------------------------------------------------------

def test_the_json_writer_escapes_non_ascii_when_the_task_says(tmp_path):
    doc = {"team": "t", "answers": [{"question_id": "q006", "value": "Site \u00c5\u2010B"}]}
    raw = write_json(doc, task().submission, tmp_path / "raw.json")
    escaped = write_json(doc, task(**{"submission.ensure_ascii": True}).submission, tmp_path / "esc.json")
    assert "Site \u00c5\u2010B" in raw.read_text(encoding="utf-8") and escapes_non_ascii(raw) is False
    assert escaped.read_bytes().isascii() and b"Site \\u00c5\\u2010B" in escaped.read_bytes()
    assert escapes_non_ascii(escaped) is True
    assert json.loads(escaped.read_text()) == json.loads(raw.read_text(encoding="utf-8"))


@pytest.mark.parametrize("escape", [True, False])
def test_the_ensemble_writes_as_its_members_do(tmp_path, escape):
    members = []
    for i, team in enumerate("abc"):
        doc = json.loads((SAMPLE / "cited_pages" / "teams" / f"team_{team}.json").read_text())
        for a in doc["answers"]:
            if a["question_id"] == "q006":
                a["value"] = "Site \u00c5"
        path = tmp_path / f"m{i}.json"
        path.write_text(json.dumps(doc, ensure_ascii=escape, indent=1), encoding="utf-8")
        members.append(path)
    out = tmp_path / "ensemble.json"
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "ensemble.py"), "--task", "cited_pages",
                           "--out", str(out), *map(str, members)],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr
    data = out.read_bytes()
    assert data.isascii() is escape
    assert (b"\\u00c5" in data) is escape and ("\u00c5".encode() in data) is (not escape)


def test_compare_text_flips_show_the_full_cited_pages():
    pages = '["okafor2023:0", "sato2025:1", "lindqvist2024:0", "mehta2022:0", "okafor2023:12"]'
    row = {"change": "fixed", "qid": "q001", "delta": 0.5, "question": "Q?", "truth": "1.11",
           "truth_ref": '[["okafor2023:12"]]', "a_answer": "5", "a_ref": pages, "a_class": "wrong_number",
           "b_answer": "1.11", "b_ref": pages, "b_class": "correct"}
    text = "\n".join(flip_lines([row], 1))
    assert text.count(pages) == 2 and '[["okafor2023:12"]]' in text


# -- every named function declares its params --------------------------------------------------

def test_a_misspelled_page_pools_param_is_refused_when_the_task_is_built(tmp_path):
    for key, value in (("missng", 0.25), ("repets", "each")):
        params = {**BASE["score"]["metrics"][1]["params"], key: value}
        with pytest.raises(ConfigError, match=rf"unknown param\(s\) task.score.metrics\[1\].params.{key} of the "
                                              r"metric 'page_pools'; valid params: extra, gold, gold_page_base, "
                                              r"missing, page_base, points, pred, repeats"):
            task(**{"score.metrics.1.params": params})
    # and score.py --task with a task file refuses it before scoring (exit 2)
    yaml_text = (REPO / "conf" / "task" / "cited_pages.yaml").read_text().replace(
        "missing: 0.5,", "missng: 0.25,")
    assert "missng: 0.25" in yaml_text
    path = REPO / "conf" / "task" / "_test_missng_54.yaml"
    path.write_text(yaml_text)
    try:
        proc = subprocess.run([sys.executable, str(REPO / "scripts" / "score.py"), str(ANSWERS),
                               str(SAMPLE / "cited_pages" / "teams" / "team_a.json"), "--task", str(path)],
                              capture_output=True, text=True, cwd=REPO, timeout=300)
    finally:
        path.unlink()
    assert proc.returncode == 2 and "params.missng" in proc.stderr and "valid params:" in proc.stderr


USER_METRICS = '''
from dataclasses import dataclass

def declared(rows, params, env):
    return [1.0 for _ in rows]
declared.PARAMS = ("alpha", "beta")

@dataclass
class Settings:
    gamma: float = 1.0

def by_class(rows, params, env):
    return [1.0 for _ in rows]
by_class.PARAMS = Settings

def undeclared(rows, params, env):
    return [1.0 for _ in rows]
'''


def test_a_function_of_your_own_may_declare_its_params(tmp_path, monkeypatch):
    (tmp_path / "user_metrics_54.py").write_text(USER_METRICS)
    monkeypatch.syspath_prepend(str(tmp_path))

    def with_metric(fn: str, params: dict):
        return task(**{"score.correct": "m", "score.metrics": [{"name": "m", "fn": f"user_metrics_54:{fn}", "params": params}]})

    with_metric("declared", {"alpha": 1})
    with pytest.raises(ConfigError, match=r"params.alpah of the metric 'user_metrics_54:declared'; valid params: alpha, beta"):
        with_metric("declared", {"alpah": 1})
    with_metric("by_class", {"gamma": 2})
    with pytest.raises(ConfigError, match="valid params: gamma"):
        with_metric("by_class", {"gama": 2})
    with_metric("undeclared", {"anything": 1})     # declares nothing: not checked
