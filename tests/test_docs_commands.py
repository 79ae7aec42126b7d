"""Every command of the documentation runs (README.md and docs/**/*.md; the rules are in
kohaku/tools/doc_commands.py): each ``scripts/run.py`` line composes, the blocks marked
``<!-- docs-test: run -->`` run end to end with the fake LLM on data/sample, each Python snippet
runs."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from kohaku.tools import doc_commands as dc

REPO = Path(__file__).resolve().parents[1]
COMMANDS, SNIPPETS = dc.collect(REPO)
#: options of scripts/run.py that are not overrides (Hydra's flags; their value follows)
FLAGS_WITH_VALUE = {"--cfg", "-c", "--package", "-p", "--config-name", "-cn", "--config-dir", "-cd",
                    "--info", "-i", "--experimental-rerun"}
FLAGS = {"-m", "--multirun", "--help", "-h", "--hydra-help", "--resolve", "--shell-completion", "-sc"}


@functools.lru_cache(maxsize=1)
def _run_script():
    """scripts/run.py as a module (its argv rewriting: ``+experiment=NAME``)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("kohaku_run_script", REPO / "scripts" / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def overrides(args: list[str]) -> list[str]:
    """The overrides of a scripts/run.py command line, as scripts/run.py passes them to Hydra;
    a sweep (``a=1,2``, ``range(...)``) is composed at its first value."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    words, skip = [], False
    for w in _run_script()._accept_plus_experiment(list(args)):
        if skip:
            skip = False
        elif w in FLAGS_WITH_VALUE:
            skip = True
        elif w not in FLAGS:
            words.append(w)
    parsed = OverridesParser.create().parse_overrides(words)
    out = []
    for word, o in zip(words, parsed):
        if o.is_sweep_override():
            first = next(iter(o.sweep_string_iterator()))
            out.append(f"{o.get_key_element()}={first}")
        else:
            out.append(word)
    return out


def _other_env(c: dc.Command) -> bool:
    """The command runs in another venv (``.venv-cluster/bin/python``: the launcher plugins)."""
    return not any(w in (".venv/bin/python", "python", "python3") for w in c.argv[:1])


def compose_errors(cmds: list[dc.Command], skipped: list[str] | None = None) -> list[str]:
    """A line per command that does not compose; a command of another venv whose Hydra launcher
    plugin is not installed here (submitit) goes to ``skipped`` instead."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import MissingConfigException

    from kohaku.runner.pipeline import CONF_DIR, register_config_schemas

    register_config_schemas()
    errors = []
    done: set[tuple[str, ...]] = set()   # the same overrides on several pages compose once
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR), job_name="docs"):
        for c in cmds:
            words = tuple(overrides(c.run_args or []))
            if words in done:
                continue
            try:
                compose("config", overrides=list(words), return_hydra_config=True)
                done.add(words)
            except MissingConfigException as exc:
                if _other_env(c) and "hydra/launcher/" in str(exc) and skipped is not None:
                    skipped.append(f"{c.where}: {exc}")
                else:
                    errors.append(f"{c.where}: {c.text}\n    {type(exc).__name__}: {exc}")
            except Exception as exc:  # noqa: BLE001 - every failure is reported with its place
                errors.append(f"{c.where}: {c.text}\n    {type(exc).__name__}: {(str(exc) or ' ').splitlines()[0]}")
    return errors


def test_the_docs_hold_commands_and_the_collector_reads_them():
    run_py = [c for c in COMMANDS if c.run_args is not None]
    assert len(COMMANDS) > 60 and len(run_py) > 20
    assert any(c.mark == "run" for c in COMMANDS)
    readme = [c for c in COMMANDS if c.path == "README.md"]
    assert [c.text for c in readme[:2]] == [
        "bash scripts/setup.sh && .venv/bin/python scripts/run.py", "bash scripts/test.sh"]


def test_collector_rules(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("x\n")
    (tmp_path / "docs" / "p.md").write_text(
        "<!-- docs-test: run -->\n```bash\n# a comment\n.venv/bin/python scripts/run.py a=1 \\\n"
        "    b=2   # why\necho '# not a comment'\n```\n\n- item:\n\n  ```python\n  x = 1\n  ```\n"
        "<!-- docs-test: skip -->\n```sh\nscripts/run.py nope=[\n```\n")
    cmds, snippets = dc.collect(tmp_path)
    assert [(c.line, c.text, c.mark) for c in cmds] == [
        (4, ".venv/bin/python scripts/run.py a=1 b=2", "run"),
        (6, "echo '# not a comment'", "run"),
        (16, "scripts/run.py nope=[", "skip")]
    assert cmds[0].run_args == ["a=1", "b=2"] and cmds[1].run_args is None
    assert [(b.path, b.text, b.mark) for b in snippets] == [("docs/p.md", "x = 1", None)]


def test_every_run_py_line_composes():
    cmds = [c for c in COMMANDS if c.run_args is not None and c.mark != "skip"]
    skipped: list[str] = []
    assert compose_errors(cmds, skipped) == []
    # only the SLURM launcher lines of .venv-cluster (hydra-submitit-launcher not installed here)
    assert all("submitit" in s for s in skipped), skipped


def test_a_wrong_key_in_a_doc_command_fails():
    bad = dc.Command("docs/x.md", 3, "scripts/run.py retrieve.top_kk=4", ["scripts/run.py", "retrieve.top_kk=4"], None)
    typed = dc.Command("docs/x.md", 4, "scripts/run.py retrieve.top_k=many", ["scripts/run.py", "retrieve.top_k=many"], None)
    errors = compose_errors([bad, typed])
    assert len(errors) == 2 and "docs/x.md:3" in errors[0] and "top_kk" in errors[0]
    assert "docs/x.md:4" in errors[1]


def test_python_snippets_run():
    ran = 0
    for block in SNIPPETS:
        if block.mark == "skip":
            continue
        code = compile(block.text, f"{block.path}:{block.line}", "exec")
        exec(code, {"__name__": "docs_snippet"})   # noqa: S102 - the docs' own code
        ran += 1
    assert ran == len([b for b in SNIPPETS if b.mark != "skip"]) and ran >= 1


def _runnable(c: dc.Command, tmp: Path, n: int) -> str:
    """The command as the test runs it: this interpreter, outputs/ and the cache under tmp."""
    text = re.sub(r"(^|\s)\.venv/bin/python(?=\s)", lambda m: m[1] + sys.executable, c.text)
    text = re.sub(r"(^|[\s=])outputs/", lambda m: f"{m[1]}{tmp}/outputs/", text)
    args = c.run_args
    if args is not None and not any(a.startswith("--cfg") for a in args):
        assert "llm=fake" in args, f"{c.where}: a run block's scripts/run.py line must use llm=fake"
        if not any(a.startswith("cache.dir=") for a in args):
            text += f" cache.dir={tmp}/cache"
        if not any(a.startswith(("hydra.run.dir=", "hydra.sweep.dir=")) for a in args):
            text += f" hydra.run.dir={tmp}/runs/{n} hydra.sweep.dir={tmp}/sweeps/{n}"
    return text


@pytest.mark.slow
def test_cheap_commands_run_end_to_end(tmp_path):
    """The blocks marked run, in order (a page's later commands read its earlier outputs); the
    corpus stages run once (one cache for all). ~1-2 min on 2 cores."""
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    cheap = [c for c in COMMANDS if c.mark == "run"]
    assert len(cheap) >= 10
    for n, c in enumerate(cheap):
        proc = subprocess.run(["bash", "-c", _runnable(c, tmp_path, n)], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{c.where}: {c.text}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    # the tutorial's runs wrote what the page says they write
    run_a = tmp_path / "outputs" / "tutorial" / "a"
    assert {"submission.csv", "scores.json", "scores.parquet", "report.html", "run.json"} <= {
        p.name for p in run_a.iterdir()}
    assert (tmp_path / "outputs" / "tutorial" / "ensemble.csv").read_text().startswith("id,answer\n")
    assert (tmp_path / "outputs" / "tutorial" / "sweep" / "leaderboard.csv").is_file()
    # the retrieval sweep (stages=[recall]) got the selection report over its two points
    recall_sweep = tmp_path / "outputs" / "tutorial" / "recall_sweep"
    assert pl.read_csv(recall_sweep / "selection_summary.csv")["configs"].to_list() == [2]
