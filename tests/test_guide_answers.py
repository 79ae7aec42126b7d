"""Every shell command of docs/guides/answers-and-citations.md runs as written (its ```bash
blocks, from the repository root, with the fake LLM the guide names), and what it prints is
the worked example's score."""

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
    for block in blocks:
        out = subprocess.run(["bash", "-e", "-c", block], cwd=REPO, env=env, capture_output=True,
                             text=True, timeout=600)
        assert out.returncode == 0, (block, out.stderr[-2000:])
    # the last command scores the run's submission: both components and the summed score
    assert re.search(r"^value\s+1\.00\s+\d+\.\d+\s+14$", out.stdout, flags=re.M), out.stdout
    assert re.search(r"^pages\s+0\.50\s+\d+\.\d+\s+14$", out.stdout, flags=re.M), out.stdout
    assert re.search(r"^score: \d+\.\d\d$", out.stdout, flags=re.M), out.stdout
