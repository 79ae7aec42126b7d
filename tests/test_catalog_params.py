"""Every named function declares its params (kohaku.tasks.named.catalog.PARAMS), and a task that gives
one a function does not declare is refused when it is built (kohaku.tasks.spec, which run.py and
score.py --task use), naming the valid ones. The test walks the whole catalog: every kind, every
name; a misspelling of each declared param of each metric is refused, each one spelled right is
taken; a function of a kind whose settings are its task section (a vote group's ``vote``, a
writer's ``submission``, a scorer's ``score``) declares none, and a misspelled key of that section
is refused the same way. The declarations are checked against the code: the params a metric's
source reads and its docstring names are all declared."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import re

import pytest

from kohaku.core.config import ConfigError
from kohaku.runner.pipeline import task_values
from kohaku.tasks import build_task
from kohaku.tasks.named import registry
from kohaku.tasks.named.catalog import CATALOG, PARAMS, declared_params
from kohaku.tasks.spec import ScoreSpec, SubmissionSpec, VoteSpec

BASE = task_values("cited_pages")
#: the task section holding the settings of each kind that takes no params of its own
SECTION = {"group": ("vote", VoteSpec), "writer": ("submission", SubmissionSpec),
           "table": ("submission", SubmissionSpec), "columns": ("submission", SubmissionSpec),
           "layout": ("submission", SubmissionSpec), "classes": ("score", ScoreSpec),
           "scorer": ("score", ScoreSpec), "rows": ("score", ScoreSpec), "frames": ("score", ScoreSpec),
           "variant": ("score", ScoreSpec)}
ENTRIES = [(kind, name) for kind, table in CATALOG.items() for name in sorted(table)]


def misspell(key: str) -> str:
    """``key`` with its middle letter dropped (``missing`` -> ``mising``), or a letter added."""
    mid = len(key) // 2
    return key[:mid] + key[mid + 1:] if len(key) > 3 else key + "x"


def metric_task(name: str, params: dict):
    values = copy.deepcopy(BASE)
    values["score"]["metrics"] = [{"name": "m", "fn": name, "params": params}]
    values["score"]["correct"] = "m"
    return build_task(values)


def test_the_walk_covers_every_kind_and_declares_no_unknown_function():
    assert {k for k, _ in ENTRIES} == set(CATALOG) and set(SECTION) | {"metric"} == set(CATALOG)
    assert len([e for e in ENTRIES if e[0] == "metric"]) >= 9
    for kind, table in PARAMS.items():
        assert set(table) <= set(CATALOG[kind]), kind


@pytest.mark.parametrize("kind,name", ENTRIES, ids=[f"{k}:{n}" for k, n in ENTRIES])
def test_a_misspelled_param_of_every_named_function_is_refused(kind, name):
    declared = declared_params(kind, name)
    if kind != "metric":
        assert declared == (), f"{kind} {name} takes its settings from its task section"
        section, cls = SECTION[kind]
        field = next(f.name for f in dataclasses.fields(cls) if len(f.name) > 3)
        values = copy.deepcopy(BASE)
        values[section][misspell(field)] = values[section].get(field)
        with pytest.raises(ConfigError, match=rf"unknown key\(s\) .*{section}\.{misspell(field)}; valid keys: "):
            build_task(values)
        return
    valid = ", ".join(sorted(declared)) if declared else r"none \(it takes no params\)"
    for key in declared or ("threshold",):
        wrong = misspell(key)
        assert wrong not in declared
        with pytest.raises(ConfigError, match=rf"unknown param\(s\) task.score.metrics\[0\].params.{wrong} "
                                              rf"of the metric '{name}'; valid params: {valid}$"):
            metric_task(name, {wrong: 1})
    metric_task(name, {key: None for key in declared})   # each declared param, spelled right, is taken


def _source_params(fn) -> set[str]:
    text = inspect.getsource(fn)
    return set(re.findall(r"params\.get\(\s*[\"'](\w+)[\"']", text)) | set(re.findall(r"params\[[\"'](\w+)[\"']\]", text))


@pytest.mark.parametrize("name", sorted(CATALOG["metric"]))
def test_each_metric_declares_what_its_code_reads_and_its_docstring_names(name):
    fn = registry.lookup("metric", name, "test")
    declared = set(declared_params("metric", name))
    assert _source_params(fn) <= declared
    assert set(re.findall(r"params\.(\w+)", inspect.getdoc(fn) or "")) <= declared


def test_the_metrics_with_a_params_dataclass_declare_its_fields():
    from kohaku.tasks.score.judge import JudgeConfig
    from kohaku.tasks.score.kind_metrics import KindValueParams

    for name, cls in (("llm_judge", JudgeConfig), ("kind_value", KindValueParams)):
        assert set(declared_params("metric", name)) == {f.name for f in dataclasses.fields(cls)}


def test_run_py_refuses_a_misspelled_param_when_the_config_is_composed(tmp_path):
    import subprocess
    import sys

    from conftest import REPO

    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "run.py"), "task=cited_pages",
                           "corpus.questions=cited_pages/questions.csv",
                           "corpus.solutions=cited_pages/answers.csv", "llm=fake",
                           "+task.score.metrics.1.params.repets=each", f"hydra.run.dir={tmp_path}"],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode != 0
    assert ("unknown param(s) task.score.metrics[1].params.repets of the metric 'page_pools'; valid "
            "params: extra, gold, gold_page_base, missing, page_base, points, pred, repeats") in proc.stderr + proc.stdout
    assert not list(tmp_path.glob("**/submission.csv"))    # refused before any stage ran
