"""The configuration reference (docs/reference/config.md, task.md) against what a plain run
composes, and against conf/: every key's "plain run" cell is the value `scripts/run.py --cfg job`
prints (no overrides), and every option file of every config group is on the page. Also: the
reference check does not depend on the folder the repository is in, nor on the terminal."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kohaku.tools import reference

REPO = Path(__file__).resolve().parents[1]
PAGES = REPO / "docs" / "reference"
#: a key's heading and its line: type (where it has one), the code's default, a plain run's value
ENTRY = re.compile(r"^### `(?P<key>[^`]+)` \{ #[^}]+ \}\n\n(?:type (?P<type>.*?) · )?default (?P<code>.*?) "
                   r"· plain run (?P<plain>.*)$", re.M)


def _cell_value(cell: str) -> str:
    """A table cell's code text: bold and the code span taken off, ``\\|`` unescaped."""
    cell = cell.strip()
    if cell.startswith("**") and cell.endswith("**"):
        cell = cell[2:-2]
    if cell.startswith("`` ") and cell.endswith(" ``"):
        cell = cell[3:-3]
    elif cell.startswith("`") and cell.endswith("`"):
        cell = cell[1:-1]
    return cell.replace("\\|", "|")


def page_plain_values(*names: str) -> dict[str, str]:
    """key -> its "plain run" cell, from the committed pages' key tables."""
    out: dict[str, str] = {}
    for name in names:
        for m in ENTRY.finditer((PAGES / name).read_text(encoding="utf-8")):
            # the same key may be listed by several llm backends: the one a plain run uses has a value
            value = _cell_value(m["plain"])
            if value != reference.NOT_USED or m["key"] not in out:
                out[m["key"]] = value
    return out


def page_entries(name: str) -> dict[str, re.Match]:
    """key -> its entry's match (the first, for a key several llm backends share)."""
    out: dict[str, re.Match] = {}
    for m in ENTRY.finditer((PAGES / name).read_text(encoding="utf-8")):
        out.setdefault(m["key"], m)
    return out


def _plain(value):
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _matches(cell: str, value) -> bool:
    """Whether a page's cell writes ``value``: read back as a Python literal, or, where the page
    cut a long value (``...``), the start of its repr."""
    if cell.endswith("...") and len(cell) == reference.VALUE_CHARS:
        return repr(_plain(value)).startswith(cell[:-3])
    if cell == "null":
        return value is None
    try:
        return ast.literal_eval(cell) == _plain(value)
    except (ValueError, SyntaxError):
        return False


def _leaves(data, prefix: str, keys: set[str]):
    """(dotted key, value) of every leaf, stopping at a key the page lists (a dict-valued key
    such as ``embed.model_kwargs`` is one value)."""
    for name, value in data.items():
        path = f"{prefix}.{name}" if prefix else str(name)
        if isinstance(value, dict) and value and path not in keys:
            yield from _leaves(value, path, keys)
        else:
            yield path, value


@pytest.fixture(scope="module")
def cfg_job(tmp_path_factory) -> dict:
    """What `scripts/run.py --cfg job --resolve` prints with no overrides (in a bare folder: it
    composes conf/ from the repository, as any run does)."""
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "run.py"), "--cfg", "job", "--resolve"],
                          capture_output=True, text=True, env=env, cwd=tmp_path_factory.mktemp("cfg"),
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return yaml.safe_load(proc.stdout)


def test_every_key_of_a_plain_run_is_on_the_pages_with_its_value(cfg_job):
    page = page_plain_values("config.md", "task.md")
    leaves = dict(_leaves(cfg_job, "", {k for k, v in page.items() if v != reference.NESTED}))
    assert len(leaves) > 250                      # the whole config, not a part of it
    missing = sorted(k for k in leaves if k not in page)
    assert missing == [], f"keys a plain run composes that the reference does not list: {missing}"
    differ = [f"{k}: page {page[k]!r}, run {v!r}" for k, v in leaves.items() if not _matches(page[k], v)]
    assert differ == [], "\n".join(differ)
    # and no page value for a key a plain run does not have (another backend's key is marked)
    extra = sorted(k for k, v in page.items() if k not in leaves and v not in (reference.NOT_USED, reference.NESTED))
    assert extra == [], f"plain-run values the composed config does not hold: {extra}"


def test_the_keys_the_issue_named_read_a_plain_runs_values(cfg_job):
    """The seven keys whose code default a plain run overrides (issue 57) read the run's value,
    in bold, beside the code's."""
    rows = page_entries("config.md")
    assert _cell_value(rows["infer.max_retries"]["code"]) == "2"
    assert rows["infer.max_retries"]["plain"] == "**`0`**"
    assert rows["embed.batch_size"]["plain"] == "**`512`**" and _cell_value(rows["embed.batch_size"]["code"]) == "64"
    assert rows["embed.cpu_fallback"]["plain"] == "**`'int8'`**"
    assert rows["corpus.solutions"]["plain"] == "**`'solutions.csv'`**"
    assert rows["retrieve.top_k"]["plain"] == "`64`"       # the same as the code's: not bold
    assert cfg_job["infer"]["max_retries"] == 0 and cfg_job["embed"]["batch_size"] == 512


def test_a_wrong_plain_value_is_found():
    assert not _matches("0", 2) and _matches("0", 0) and _matches("null", None)
    assert _matches("['a', 'b']", ("a", "b")) and not _matches("'x'", "y")
    assert _matches("'" + "a" * 56 + "...", "a" * 80) and not _matches("'" + "b" * 56 + "...", "a" * 80)


def test_every_option_file_of_every_group_is_on_the_page():
    text = (PAGES / "config.md").read_text(encoding="utf-8")
    files = sorted(p.relative_to(REPO / "conf") for p in (REPO / "conf").rglob("*.yaml")
                   if p.name != "config.yaml")
    assert len(files) >= 70 and Path("hydra/launcher/slurm.yaml") in files
    absent = [str(f) for f in files if f"| `{f.parent.as_posix()}={f.stem}`" not in text
              or f"`conf/{f.as_posix()}`" not in text]
    assert absent == [], f"option files not on docs/reference/config.md: {absent}"
    # each with its line: the GPU models are findable by what they are
    row = next(line for line in text.splitlines() if line.startswith("| `llm=vllm_qwen2_5_7b`"))
    assert "Qwen2.5-7B-Instruct on one GPU" in row and "`llm.tensor_parallel_size`" in row
    assert "| `llm=smollm2_cpu` *(plain run)*" in text and "| `llm=fake`<br>" in text


@pytest.mark.slow
def test_the_reference_check_passes_from_a_long_path_and_a_narrow_terminal(tmp_path):
    """A copy of the repository's files (what a clone of this tree holds) in a folder whose path
    is over 120 characters: `gen_reference.py --check` passes there, with COLUMNS=37."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True)
    deep = tmp_path / ("a-checkout-in-a-folder-with-a-long-name-" * 4)[:120] / "kohaku"
    assert len(str(deep)) >= 120
    for rel in filter(None, listed.stdout.decode().split("\0")):
        src = REPO / rel
        if src.is_file() and not src.is_symlink():
            (deep / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, deep / rel)
    env = dict(os.environ, PYTHONPATH=str(deep), COLUMNS="37", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    proc = subprocess.run([sys.executable, str(deep / "scripts" / "gen_reference.py"), "--check"],
                          capture_output=True, text=True, cwd=deep, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
