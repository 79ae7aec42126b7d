"""Issue 58: amounts judged as a careful person judges them (kohaku.tasks.score.amounts.AmountRules),
the calibration command (scripts/calibrate_metric.py, kohaku/tasks/score/calibration.py) and the
labelled-set generator (scripts/make_amount_labels.py, kohaku/tools/amount_labels.py).

Each rule: the issue's examples accepted with the rule on, rejected by the strict rules (the
default), and a wrong answer of the same shape (another figure, another quantity) rejected."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from kohaku.core.config import ConfigError
from kohaku.tasks.score.amounts import (CAREFUL, STRICT, AmountRules, numeric_match, question_decimals,
                                  question_unit)
from kohaku.tasks.named.builtin import MetricEnv
from kohaku.tasks.score.calibration import (LabelColumns, amount_category, calibrate, parse_label, read_labels,
                                      report_lines)
from kohaku.tasks.rooms.financebench.functions import numeric_match_metric, numeric_match_rules

ROOT = Path(__file__).resolve().parents[1]
MILLIONS = "What is Netflix's year end FY2017 total current liabilities (in USD millions)?"
TWO_DECIMALS = "What is the FY2022 dividend payout ratio? Round answer to two decimal places."


def careful(truth, pred, question=None, **only):
    """numeric_match with CAREFUL, or with only the named rules on (the others strict)."""
    rules = replace(STRICT, **only) if only else CAREFUL
    return numeric_match(truth, pred, 0.0, question_unit(question), rules, question_decimals(question))


def strict(truth, pred, question=None):
    return numeric_match(truth, pred, 0.0, question_unit(question))


# -- rounded_inputs_tol ---------------------------------------------------------------------

@pytest.mark.parametrize("truth,pred", [("42.69", "42.67"), ("24.26", "24.25"), ("93.86", "93.89"),
                                        ("42.69", "DPO is about 42.67 days.")])
def test_rounded_inputs_accepts_the_issues_answers(truth, pred):
    assert careful(truth, pred, rounded_inputs_tol=0.002) is True
    assert strict(truth, pred) is False                       # off by default


@pytest.mark.parametrize("truth,pred,why", [
    ("42.69", "42.57", "0.28 % off: another figure"),
    ("93.86", "95.12", "another figure"),
    ("2.8%", "2.7%", "one unit of a two-digit figure is 3.6 % off"),
    ("16%", "17%", "6 % off"),
    ("24.26", "0.04", "the inverse ratio: another quantity"),
    ("24.26", "24.26%", "the ratio's number as a percent: another quantity"),
])
def test_rounded_inputs_rejects_another_figure(truth, pred, why):
    assert careful(truth, pred) is False, why


def test_rounded_inputs_leaves_currency_amounts_exact():
    assert careful("$1577.00", "$1,578 million", "capex (in USD millions)?") is False   # a sum: exact
    assert careful("$1577.00", "$1,577 million", "capex (in USD millions)?") is True
    # a bare figure with no unit asked may be computed (days, a ratio): it gets the slack, 0.2 %
    assert careful("1577", "1578") is True
    assert careful("1577", "1581") is False


# -- ratio_percent --------------------------------------------------------------------------

@pytest.mark.parametrize("truth,pred", [("0.079", "7.8%"), ("0.654", "65.3%"), ("1.015", "101.4%"),
                                        ("0.019", "1.9%"), ("0.062", "6.2%"), ("65.4%", "0.653")])
def test_ratio_and_percent_are_one_quantity(truth, pred):
    assert careful(truth, pred, ratio_percent=True, rounded_inputs_tol=0.002) is True


def test_ratio_percent_double_rounding_needs_the_rule():
    assert strict("0.079", "7.8%") is False
    assert strict("0.654", "65.3%") is False
    assert careful("0.079", "7.8%", rounded_inputs_tol=0.002) is False   # rounded inputs alone: 1.3 % off


@pytest.mark.parametrize("truth,pred,why", [
    ("0.079", "7.6%", "another figure"),
    ("0.654", "64.8%", "another figure"),
    ("0.079", "0.079%", "the ratio's number as a percent: 100x"),
    ("-0.02", "The ROA is -1.53%.", "a finer percent: another rounding than the one asked"),
    ("0.004", "0.5%", "one significant digit: 0.5 % is another figure than 0.004"),
])
def test_ratio_percent_rejects_another_figure(truth, pred, why):
    assert careful(truth, pred) is False, why


def test_a_finer_percent_is_accepted_when_it_is_the_figure():
    assert careful("-0.02", "-2.00%") is True
    assert careful("-0.02", "-2%") is True
    assert strict("-0.02", "The ROA is -1.53%.") is True       # what the people rejected


# -- unit_conversion ------------------------------------------------------------------------

@pytest.mark.parametrize("truth,pred", [("5466", "$5,466,312,000"), ("$5466.00", "$5,466,312,000"),
                                        ("303", "$302,578,000"), ("382", "$381,603,000"),
                                        ("382", "$381.603 million"), ("$0.40", "$404,974,811")])
def test_an_amount_in_full_is_read_in_the_questions_unit(truth, pred):
    q = MILLIONS if truth != "$0.40" else "How much (in USD billions) was paid in dividends?"
    assert careful(truth, pred, q, unit_conversion=True) is True
    if truth != "382" or "million" not in pred:
        assert strict(truth, pred, q) is False


@pytest.mark.parametrize("truth,pred,why", [
    ("5466", "$5,466,312", "a 1,000x slip"),
    ("382", "$391,603,000", "another figure"),
    ("303", "$302,478,000", "rounds to 302, not 303"),
    ("5466", "$5,466,312,000 million", "another unit"),
])
def test_unit_conversion_rejects_another_figure(truth, pred, why):
    assert careful(truth, pred, MILLIONS) is False, why


def test_question_unit_reads_more_forms():
    assert question_unit("Answer in USD millions.") == 1e6
    assert question_unit("How much in USD million?") == 1e6
    assert question_unit("(in $ millions)") == 1e6
    assert question_unit("in thousands of dollars") == 1e3
    assert question_unit("What is the ratio?") is None


# -- final_figure ---------------------------------------------------------------------------

CHAIN = ("COGS was $28,925 million and average inventory was $8,376 million. Dividing COGS by average "
         "inventory, the ratio is approximately {}.")


def test_a_computations_final_figure_counts():
    assert careful("3.45", CHAIN.format("3.45"), final_figure=True) is True
    assert strict("3.45", CHAIN.format("3.45")) is False      # the first figure: $28,925 million
    md = "**Step 1**: the inputs are 28,925 and 8,376.\n**Step 2**: 28,925 / 8,376\n**Answer:** 3.45"
    assert careful("3.45", md, final_figure=True) is True
    assert careful("24.26", "Average PP&E = (1,000 + 1,200) / 2 = 1,100. Revenue of 26,690 / 1,100 gives "
                   "a ratio of 24.26.", final_figure=True) is True
    assert careful("3.45", "Therefore, the ratio is approximately 3.45 (28,925 / 8,376).",
                   final_figure=True) is True


@pytest.mark.parametrize("pred,why", [
    (CHAIN.format("2.91"), "another final figure"),
    ("First, 28,925 / 8,376 gives 3.45 for the prior year. Dividing the current year's figures, the "
     "result is approximately 3.12.", "the gold's figure an intermediate, the final figure another"),
    ("**Step 1**: the prior year gives 28,925 / 8,376 = 3.45.\n**Step 2**: the year asked gives 30,001 / "
     "9,616.\n**Answer:** 3.12", "Markdown steps: the final figure another"),
])
def test_final_figure_rejects_an_intermediate(pred, why):
    assert careful("3.45", pred) is False, why


def test_an_intermediate_figure_fools_the_strict_rules():
    pred = ("First, 28,925 / 8,376 gives 3.45 for the prior year. Dividing the current year's figures, "
            "the result is approximately 3.12.")
    assert strict("28925", pred) is True                     # the first figure of the sentence
    assert careful("28925", pred) is False


# -- refusals -------------------------------------------------------------------------------

@pytest.mark.parametrize("truth,pred", [
    ("0", "The restructuring costs are not disclosed in the income statement, so the amount is 0"),
    ("1.73", "The excerpts do not provide the balance sheet, so it cannot be determined; the value is 1.73."),
    ("$1577.00", "Unable to determine capex from the provided documents: $1,577 million"),
])
def test_a_refusal_is_no_answer(truth, pred):
    assert strict(truth, pred) is True                       # the strict rules read its number
    assert careful(truth, pred, refusals=True) is False


def test_refusals_keep_answers():
    assert careful("0", "0") is True
    assert careful("0", "AES reported restructuring costs of $0 in FY2022.") is True
    assert careful("1.73", "The working capital ratio is 1.73.") is True


# -- text_gold ------------------------------------------------------------------------------

GOLD87 = "87% of the total restructuring liability is related Employee liabilities."


@pytest.mark.parametrize("pred", [
    "Eighty-seven percent of the restructuring liability relates to employee costs.",
    "Of the 3 categories, employee costs make up 87% of the liability.",
    "About 87 percent of the liability relates to employees.",
])
def test_a_text_gold_is_matched_by_its_number(pred):
    assert careful(GOLD87, pred, text_gold=True) is True


def test_text_gold_needs_the_rule_for_words_and_later_figures():
    assert strict(GOLD87, "Eighty-seven percent of it relates to employee costs.") is False
    assert strict(GOLD87, "Of the 3 categories, employee costs make up 87% of the liability.") is False


@pytest.mark.parametrize("pred,why", [
    ("Seventy-eight percent relates to employees.", "another number in words"),
    ("13% of the total is the other part.", "another quantity"),
    ("Of the 3 categories, employee costs make up 78% of the liability.", "another figure"),
])
def test_text_gold_rejects_another_number(pred, why):
    assert careful(GOLD87, pred) is False, why


# -- asked_precision ------------------------------------------------------------------------

def test_the_questions_decimals_set_the_golds_precision():
    assert question_decimals(TWO_DECIMALS) == 2
    assert question_decimals("Answer in units of percents and round to one decimal place.") == 1
    assert question_decimals("What is the ratio?") is None
    assert strict("0.8", "0.84", TWO_DECIMALS) is True        # the written gold's half unit: 0.05
    assert careful("0.8", "0.84", TWO_DECIMALS) is False      # 0.80 asked to two decimals
    assert careful("0.8", "0.80", TWO_DECIMALS) is True
    assert careful("0.8", "80%", TWO_DECIMALS) is True


# -- the metric's params --------------------------------------------------------------------

def _rows(pairs, question=""):
    return [{"qid": str(i), "question": question, "truth": t, "pred": p, "pred_blank": not p.strip()}
            for i, (t, p) in enumerate(pairs)]


def test_the_metric_is_strict_unless_its_params_say():
    rows = _rows([("42.69", "42.67"), ("0.079", "7.8%"), ("Yes", "Yes"), ("1.0", "")])
    assert numeric_match_metric(rows, {}, MetricEnv()) == [0.0, 0.0, None, 0.0]
    params = {"rounded_inputs_tol": 0.002, "ratio_percent": True}
    assert numeric_match_metric(rows, params, MetricEnv()) == [1.0, 1.0, None, 0.0]


def test_the_metric_refuses_unknown_or_bad_params():
    with pytest.raises(ConfigError, match=r"task.score.metrics\[numeric_match\].params.rounded_input_tol"):
        numeric_match_rules({"rounded_input_tol": 0.002})
    with pytest.raises(ConfigError, match="rounded_inputs_tol must be a number >= 0"):
        numeric_match_rules({"rounded_inputs_tol": -1})
    with pytest.raises(ConfigError, match="final_figure must be true or false"):
        numeric_match_rules({"final_figure": "yes"})
    assert numeric_match_rules({"rel_tol": 0.01}) == (0.01, AmountRules())


def test_financebench_turns_the_rules_on_and_other_tasks_do_not():
    from kohaku.runner.pipeline import task_values
    from kohaku.tasks import build_task

    task = build_task(task_values("financebench", []), "financebench")
    spec = next(m for m in task.score.metric_specs if m.fn == "numeric_match")
    assert numeric_match_rules(spec.params) == (0.0, CAREFUL)
    for name in ("short_answer", "wattbot"):
        path = ROOT / "conf" / "task" / f"{name}.yaml"
        if path.is_file():
            assert "rounded_inputs_tol" not in path.read_text()


# -- calibration ----------------------------------------------------------------------------

LABELS = [
    # id, question, gold, answer, label
    ("a1", MILLIONS, "$5466.00", "$5,466,312,000", "correct"),        # unit_conversion
    ("a2", "What is the DPO?", "42.69", "42.67", "correct"),            # rounded_inputs_tol
    ("a3", "What is the DPO?", "42.69", "42.57", "incorrect"),
    ("a4", "What is the ratio?", "0.079", "7.8%", "correct"),           # ratio_percent
    ("a5", "Restructuring costs?", "0", "The costs are not disclosed, so the amount is 0", "incorrect"),
    ("a6", "What is the ratio?", "0.079", "7.1%", "correct"),           # a label the metric disputes
    ("a7", "Yes or no?", "Yes", "Yes", "correct"),                      # not an amount: not covered
    ("a8", "What is the ratio?", "3.45", CHAIN.format("3.45"), "correct"),
]


def _write_labels(path: Path, rows=LABELS, fmt: str = "csv", names=("id", "question", "gold", "answer", "label")):
    if fmt == "csv":
        with path.open("w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(names)
            w.writerows(rows)
    else:
        path.write_text("".join(json.dumps(dict(zip(names, r))) + "\n" for r in rows), encoding="utf-8")
    return path


def _script(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "calibrate_metric.py"), *args],
                          capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)


def test_calibrate_prints_agreement_confusion_and_disagreements(tmp_path):
    labels = _write_labels(tmp_path / "labels.csv")
    out = _script(str(labels), "--task", "financebench", "--metric", "numeric", "--json", str(tmp_path / "c.json"))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == ("metric: numeric (numeric_match) of task financebench   labelled answers: 8   covered: 7"
                        "   not covered: 1")
    assert lines[1] == "agreement: 0.8571 (6 of 7)"
    assert lines[2:6] == ["confusion (rows: label; columns: metric):",
                          "                   accepts rejects",
                          "  label correct          4       1",
                          "  label incorrect        0       2"]
    assert lines[6] == "disagreements: 1 (false accepts 0, false rejects 1)"
    assert lines[7] == "  other figure: 1"
    assert lines[8] == "    a6: gold '0.079' answer '7.1%' (label correct, metric rejects)"
    summary = json.loads((tmp_path / "c.json").read_text())
    assert summary["confusion"] == {"tp": 4, "fn": 1, "fp": 0, "tn": 2}
    assert summary["agreement"] == pytest.approx(6 / 7)


def test_calibrate_the_strict_metric_names_the_rule_it_lacks(tmp_path):
    labels = _write_labels(tmp_path / "labels.jsonl", fmt="jsonl")
    out = _script(str(labels), "--metric", "numeric_match")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[1] == "agreement: 0.1429 (1 of 7)"
    assert lines[4:6] == ["  label correct          0       5", "  label incorrect        1       1"]
    text = out.stdout
    for category, n in [("rounded_inputs_tol (off)", 1), ("ratio_percent (off)", 1), ("unit_conversion (off)", 1),
                        ("final_figure (off)", 1), ("refusal (off)", 1), ("other figure", 1)]:
        assert f"  {category}: {n}\n" in text, category
    # a param turns a rule on: the unit answer agrees, the others stay
    out = _script(str(labels), "--metric", "numeric_match", "--param", "unit_conversion=true")
    assert out.stdout.splitlines()[1] == "agreement: 0.2857 (2 of 7)"


def test_calibrate_the_llm_judge_with_the_fake_backend(tmp_path):
    labels = _write_labels(tmp_path / "labels.csv")
    out = _script(str(labels), "--task", "financebench", "--metric", "judge", "--llm", "fake",
                  "--cache-dir", str(tmp_path / "cache"))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    # the fake judge says "correct" to every answer: the 6 correct labels agree, the 2 incorrect do not
    assert lines[0] == "metric: judge (llm_judge) of task financebench   labelled answers: 8   covered: 8"
    assert lines[1] == "agreement: 0.7500 (6 of 8)"
    assert lines[4:6] == ["  label correct          6       0", "  label incorrect        2       0"]
    assert "  refusal: 1\n" in out.stdout and "  near miss: 1\n" in out.stdout


def test_calibrate_errors_name_the_file_row_and_column(tmp_path):
    bad = _write_labels(tmp_path / "bad.csv", rows=[("x", "q", "1", "1", "maybe")])
    out = _script(str(bad), "--metric", "numeric_match")
    assert out.returncode == 2
    assert f"{bad}: row 1, column 'label': label 'maybe' is neither correct nor incorrect" in out.stderr
    renamed = _write_labels(tmp_path / "renamed.csv", names=("id", "q", "truth", "response", "ok"))
    out = _script(str(renamed), "--metric", "numeric_match")
    assert out.returncode == 2 and "no column for gold ('gold')" in out.stderr
    out = _script(str(renamed), "--metric", "numeric_match", "--question-col", "q", "--gold-col", "truth",
                  "--answer-col", "response", "--label-col", "ok")
    assert out.returncode == 0 and out.stdout.splitlines()[1] == "agreement: 0.1429 (1 of 7)"
    out = _script(str(renamed), "--metric", "llm_judge", "--gold-col", "truth", "--answer-col", "response",
                  "--label-col", "ok")
    assert out.returncode == 2 and "give --llm" in out.stderr


def test_calibrate_library(tmp_path):
    items = read_labels(_write_labels(tmp_path / "l.csv"), LabelColumns())
    result = calibrate(items, numeric_match_metric, {}, MetricEnv(), "strict")
    assert (result.tp, result.fn, result.fp, result.tn, result.covered) == (0, 5, 1, 1, 7)
    assert report_lines(result)[1] == "agreement: 0.1429 (1 of 7)"
    assert parse_label(" TRUE ", "x") is True and parse_label("0", "x") is False
    assert amount_category("q", "42.69", "42.67", CAREFUL) == "rounded_inputs_tol"
    assert amount_category("q", "42.69", "42.67") == "rounded_inputs_tol (off)"
    assert amount_category("q", "1577", "1577000") == "scale"
    assert amount_category("q", "1.2", "-1.2") == "sign"
    assert amount_category("q", "Yes", "Yes") is None


# -- the generator --------------------------------------------------------------------------

MADE_UP = [  # questions of our own (no FinanceBench text), shaped like its public ones
    {"financebench_id": "m1", "company": "Acme", "question": "What is Acme's FY2020 quick ratio? Round your "
     "answer to two decimal places.", "answer": "0.83"},
    {"financebench_id": "m2", "company": "3M", "question": "What is 3M's FY2019 capex (in USD millions)?",
     "answer": "$1577.00"},
    {"financebench_id": "m3", "company": "Acme", "question": "What is Acme's FY2021 gross margin (in units of "
     "percents and round to one decimal place)?", "answer": "39.7%"},
    {"financebench_id": "m4", "company": "Acme", "question": "What is Acme's FY2019 DPO?", "answer": "42.69"},
    {"financebench_id": "m5", "company": "Acme", "question": "What share of the liability is employee related?",
     "answer": "87% of the total liability is related to employees."},
    {"financebench_id": "m6", "company": "Acme", "question": "Does Acme pay a dividend?", "answer": "Yes"},
]


def test_the_generator_labels_by_construction(tmp_path):
    from kohaku.tools.amount_labels import build_rows, write_csv

    rows = build_rows(MADE_UP, seed=1)
    assert {r["financebench_id"] for r in rows} == {"m1", "m2", "m3", "m4", "m5"}   # amounts only
    styles = {(r["style"], r["label"]) for r in rows}
    for style in ("exact", "rounded_inputs", "percent_for_ratio", "units", "chain", "text_gold"):
        assert (style, "correct") in styles, style
    for style in ("other_figure", "other_quantity", "chain_intermediate", "refusal"):
        assert (style, "incorrect") in styles, style
    assert build_rows(MADE_UP, seed=1) == rows                  # a fixed seed: the same set
    path = write_csv(rows, tmp_path / "set.csv")
    items = read_labels(path, LabelColumns(category=None))
    on = calibrate(items, numeric_match_metric, {k: getattr(CAREFUL, k) for k in CAREFUL.__dataclass_fields__},
                   MetricEnv(), "careful")
    off = calibrate(items, numeric_match_metric, {}, MetricEnv(), "strict")
    assert on.agreement >= 0.98, report_lines(on)
    assert off.agreement < 0.9


@pytest.mark.skipif(not os.environ.get("KOHAKU_FINANCEBENCH"),
                    reason="KOHAKU_FINANCEBENCH (a FinanceBench checkout or git directory) not set")
def test_the_financebench_set_agrees(tmp_path):
    from kohaku.tools.amount_labels import build_rows, read_questions

    rows = build_rows(read_questions(os.environ["KOHAKU_FINANCEBENCH"]))
    assert len(rows) >= 300
    path = tmp_path / "set.csv"
    from kohaku.tools.amount_labels import write_csv
    write_csv(rows, path)
    out = _script(str(path), "--task", "financebench", "--metric", "numeric")
    assert out.returncode == 0, out.stderr
    agreement = float(out.stdout.splitlines()[1].split()[1])
    assert agreement >= 0.98
