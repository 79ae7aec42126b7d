"""Every shell command of docs/guides/scoring-many-submissions.md runs as written, in its order,
from the repository root (its outputs go under outputs/scoring-many/, which the test clears
first), and prints the figures the guide quotes."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys

from conftest import REPO

GUIDE = REPO / "docs" / "guides" / "scoring-many-submissions.md"


def commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", GUIDE.read_text(encoding="utf-8"), flags=re.S)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def test_the_guides_commands_run_as_written():
    shutil.rmtree(REPO / "outputs" / "scoring-many", ignore_errors=True)
    cmds = commands()
    assert len(cmds) == 10 and all(c.startswith(".venv/bin/python scripts/") for c in cmds)
    out = {}
    for cmd in cmds:
        argv = shlex.split(cmd)
        done = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, cwd=REPO,
                              timeout=600, env={**__import__("os").environ, "HF_HUB_OFFLINE": "1",
                                                "TRANSFORMERS_OFFLINE": "1"})
        assert done.returncode == 0, (cmd, done.stderr[-2000:])
        out[cmd] = done.stdout
    text = "\n".join(out.values())
    assert "score: 17.43" in out[cmds[0]]
    assert all(x in out[cmds[1]] for x in ("17.43", "15.85", "15.08"))
    assert (REPO / "outputs" / "scoring-many" / "scores.csv").read_text().startswith("submission,score,value,pages")
    assert "18.73" in out[cmds[4]] and "17.43" in out[cmds[4]]
    assert "+1.3000  [+0.0000, +3.9000]" in out[cmds[5]] and "in points" in out[cmds[5]]
    assert '["okafor2023:5"]' in text
    assert "na (f1 over the set)" in out[cmds[6]]
    assert "9.3" in out[cmds[8]]                                  # the run's score, in points
    scores = {line.split("┆")[0].strip("│ "): line.split("┆")[1].strip()
              for line in out[cmds[9]].splitlines() if "submission." in line}
    assert len(scores) == 2 and len(set(scores.values())) == 1, scores   # its CSV and its JSON
