"""Every shell command of docs/guides/answers-and-citations.md runs as written (its ```bash
blocks, from the repository root, with the fake LLM the guide names), and what it prints is
the worked example's score and the sample teams' classes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import REPO

GUIDE = REPO / "docs" / "guides" / "answers-and-citations.md"


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M)


def test_the_guides_commands_run_as_written():
    blocks = bash_blocks(GUIDE.read_text(encoding="utf-8"))
    assert blocks and all("llm=fake" in b for b in blocks if "scripts/run.py" in b)
    # `python` is the interpreter running the tests (the project's environment)
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "PATH": path, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    outs = []
    for block in blocks:
        out = subprocess.run(["bash", "-e", "-c", block], cwd=REPO, env=env, capture_output=True,
                             text=True, timeout=600)
        assert out.returncode == 0, (block, out.stderr[-2000:])
        outs.append(out.stdout)
    # the first block scores the run's submission: both components and the summed score
    run_out = outs[0]
    assert re.search(r"^value\s+1\.00\s+\d+\.\d+\s+14$", run_out, flags=re.M), run_out
    assert re.search(r"^pages\s+0\.50\s+\d+\.\d+\s+14$", run_out, flags=re.M), run_out
    assert re.search(r"^score: \d+\.\d\d$", run_out, flags=re.M), run_out
    # the error-class block prints what the guide shows for team B, and the guide's table holds
    # each team's score and classes as score.py prints them
    team_b = next(o for b, o in zip(blocks, outs) if "team_b.json" in b)
    text = GUIDE.read_text(encoding="utf-8")
    shown = re.search(r"^```text\n(error classes: .*?)^```", text, flags=re.S | re.M)[1]
    assert shown.strip() in team_b, (shown, team_b)
    for team in ("team_a", "team_b", "team_c"):
        row = re.search(rf"^\| {team} \| ([\d.]+) \| (.*?) \| (.*?) \|$", text, flags=re.M)
        cmd = [sys.executable, "scripts/score.py", "data/sample/cited_pages/answers.csv",
               f"data/sample/cited_pages/teams/{team}.json", "--task", "cited_pages"]
        printed = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600).stdout
        assert f"score: {row[1]}" in printed and f"error classes: {row[2]}" in printed, printed
        assert f"cited pages: {row[3]}" in printed, printed
