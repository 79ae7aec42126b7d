"""Pluggable competitions. What a task is stays at the top: :mod:`kohaku.tasks.spec` (the task
spec built from a task YAML), :mod:`kohaku.tasks.kinds` (answer kinds), :mod:`kohaku.tasks.grouping`
(how the vote groups values), :mod:`kohaku.tasks.whole` (the task checked whole). Beside them, one
folder per job:

- ``files/``: reading and writing a task's files (questions, solutions, submissions, JSON shapes);
- ``score/``: scoring with the task's metric, the metrics' rules, a competition's own scorer
  adopted unedited and checked against, calibration against people's labels;
- ``analysis/``: why a run loses (error classes);
- ``named/``: the catalog and registry of named functions, and the generic ones;
- ``rooms/``: one subpackage per competition (wattbot, financebench, squad).

:func:`load_task` reads a task YAML (``conf/task/<name>.yaml`` or any path) without Hydra, for
scripts such as ``scripts/score.py --task``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kohaku.core.config import ConfigError, ConfigFileNotFound
from kohaku.tasks.spec import Task, build_task

TASK_DIR = Path(__file__).resolve().parents[2] / "conf" / "task"


def task_file(name_or_path: str | Path) -> Path:
    """``conf/task/<name>.yaml`` for a name, else the path itself."""
    text = str(name_or_path)
    if "/" not in text and not text.endswith((".yaml", ".yml")):
        path = TASK_DIR / f"{text}.yaml"
        if not path.is_file():
            known = sorted(p.stem for p in TASK_DIR.glob("*.yaml"))
            raise ConfigFileNotFound(f"task {text!r}: no {path}; known tasks: {', '.join(known)} "
                                     "(or give a YAML file's path)")
        return path
    path = Path(text).expanduser()
    if not path.is_file():
        raise ConfigFileNotFound(f"{path}: task file not found")
    return path


def read_task_yaml(path: Path) -> dict[str, Any]:
    """A task file's mapping, its Hydra ``defaults`` list left out; errors name the file."""
    from kohaku.core import readfile

    text = readfile.read_text(path, "task file", ConfigError, ConfigFileNotFound)
    data: Any = readfile.load_yaml(text, path, "task file", ConfigError)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a task file holds a mapping of the task's parts")
    data.pop("defaults", None)
    from kohaku.tasks.score.adopted import anchor_files   # an adopted script's path, from the task file

    return anchor_files(data, path.resolve().parent)


def load_task(name_or_path: str | Path) -> Task:
    """The Task of a task YAML (its Hydra ``defaults`` list is ignored; a task needs no
    interpolation); errors name the file and the key."""
    path = task_file(name_or_path)
    data = read_task_yaml(path)
    try:
        return build_task(data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc


__all__ = ["Task", "build_task", "load_task", "read_task_yaml", "task_file"]
