"""The default task's names for the commands that benchmark or check it: its task, corpus
config, experiment and competition-metric module (its room's ``DEFAULTS``,
:func:`kohaku.tasks.named.catalog.default_names`), and its corpus folder."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from kohaku.tasks.named.catalog import default_names

REPO = Path(__file__).resolve().parents[2]

DEFAULT = default_names()
TASK: str = DEFAULT["name"]                    # conf/task/<TASK>.yaml
CORPUS: str = DEFAULT["corpus"]                # conf/corpus/<CORPUS>.yaml
EXPERIMENT: str = DEFAULT["experiment"]        # conf/experiment/<EXPERIMENT>.yaml
METRIC_MODULE: str = DEFAULT["metric_module"]  # the competition metric's module
METRIC_FILE: str = METRIC_MODULE.replace(".", "/") + ".py"   # its file, from the repository root


@lru_cache(maxsize=None)
def corpus_root() -> Path:
    """The default task's corpus folder: ``conf/corpus/<CORPUS>.yaml``'s ``root``, a relative
    one read from the repository root (as scripts/run.py reads it there)."""
    from kohaku.runner.pipeline import option_values

    root = str(option_values("corpus", CORPUS)["root"])
    return Path(os.path.normpath(REPO / root))
