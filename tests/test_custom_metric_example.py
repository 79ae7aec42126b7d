"""The custom-metric example (examples/custom_metric/, docs/examples/custom-metric.md): the
function's values, and the command of the page printing the figures it quotes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from examples.custom_metric.metric import closeness
from kohaku.core.config import ConfigError

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "examples" / "custom-metric.md"
COMMAND = ("scripts/score.py examples/custom_metric/solutions.csv examples/custom_metric/submission.csv "
           "--task examples/custom_metric/task.yaml")


def _row(truth, pred, blank=False):
    return {"qid": "q", "truth": truth, "pred": pred, "pred_blank": blank}


def test_closeness_values():
    values = closeness([_row("42", "42"), _row("38", "40"), _row("Kestrel", "x"), _row("20", "about 25"),
                        _row("1,000", "1.05 thousand"), _row("7", None, blank=True)], {"tolerance": 0.1}, None)
    assert values[0] == 1.0 and values[2] is None and values[3] == 0.0 and values[5] == 0.0
    assert values[1] == pytest.approx(1 - (2 / 38) / 0.1)
    assert values[4] == pytest.approx(0.5)
    assert closeness([_row("100", "104")], {"tolerance": 0.2}, None) == [pytest.approx(0.8)]
    with pytest.raises(ConfigError, match="tolerance"):
        closeness([_row("1", "1")], {"tolerance": 0}, None)


def test_the_pages_command_prints_its_figures():
    text = PAGE.read_text(encoding="utf-8")
    assert ".venv/bin/python " + COMMAND in text
    proc = subprocess.run([sys.executable, *COMMAND.split()], capture_output=True, text=True, cwd=REPO,
                          timeout=300, env=dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "close           1.00   0.4912       3" in proc.stdout
    assert "exact           0.00   0.5000       4" in proc.stdout
    assert proc.stdout.rstrip().endswith("score: 0.4912")
    for line in ("close           1.00   0.4912       3", "score: 0.4912"):
        assert line in text


def test_the_page_shows_the_functions_code():
    """The page's copy of the function is the file's, line by line (comments aside)."""
    import re

    text = PAGE.read_text(encoding="utf-8")
    block = re.search(r"```text\n(def closeness.*?)```", text, re.S)[1]
    source = (REPO / "examples" / "custom_metric" / "metric.py").read_text(encoding="utf-8")
    code = {line.split("#")[0].strip() for line in source.splitlines()}
    shown = [line.split("#")[0].strip() for line in block.splitlines() if line.split("#")[0].strip()]
    assert len(shown) > 10
    missing = [line for line in shown if line not in code and not line.startswith("def closeness")]
    assert missing == []
