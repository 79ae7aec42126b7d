"""The own-competition tutorial's table of task keys explains each key by hand beside the
generated reference (docs/reference/task.md, from kohaku/tasks/spec.py): every key it names
must be a task key, every task key must be in it, and a default it gives as one plain value
must be the code's."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest

from kohaku.tasks.spec import MetricSpec

REPO = Path(__file__).resolve().parents[1]
TUTORIAL = REPO / "docs" / "tutorials" / "own-competition.md"
REFERENCE = REPO / "docs" / "reference" / "task.md"
HEADER = "| key | default | what it does |"


def tutorial_rows(text: str) -> list[tuple[list[str], list[str]]]:
    """(keys, defaults) of each row of the table under HEADER; a cell lists several keys as
    ``a.b``, ``c`` (``c`` is a sibling of ``a.b``)."""
    lines = text.splitlines()
    start = lines.index(HEADER) + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        keys = re.findall(r"`([^`]+)`", cells[0])
        parent = keys[0].rsplit(".", 1)[0] if "." in keys[0] else ""
        keys = [k if "." in k or not parent else f"{parent}.{k}" for k in keys]
        rows.append((keys, [d.strip() for d in cells[1].split(", ")]))
    return rows


def reference_keys(text: str) -> dict[str, str]:
    """task key (without ``task.``) -> its default as the reference prints it."""
    out = {}
    for m in re.finditer(r"^### `task\.([^`]+)` \{[^}]*\}\n\n(?:type .*? · )?default `(.*?)` · ", text, re.M):
        out[m.group(1)] = m.group(2)
    return out


def plain(default: str) -> str | None:
    """A reference default as a YAML reader writes it: 'csv' -> csv, True -> true; None for a
    value that is not one scalar."""
    if default.startswith("(") or default[:1] in "[{":
        return None
    return {"True": "true", "False": "false"}.get(default, default.strip("'"))


ROWS = tutorial_rows(TUTORIAL.read_text())
REF = reference_keys(REFERENCE.read_text())


def test_the_table_is_read():
    assert len(ROWS) > 40 and len(REF) > 50


@pytest.mark.parametrize("keys", [k for k, _ in ROWS], ids=lambda k: k[0])
def test_every_key_of_the_table_is_a_task_key(keys):
    metric_fields = {f.name for f in fields(MetricSpec)}
    for key in keys:
        if key.startswith("score.metrics[]."):  # a metric's own keys (MetricSpec)
            assert key.split(".", 2)[2] in metric_fields, key
        else:
            assert key in REF, f"{key}: not a task key (docs/reference/task.md)"


def test_every_task_key_is_in_the_table():
    named = {k for keys, _ in ROWS for k in keys}
    parents = {k.rsplit(".", 1)[0] for k in REF if "." in k}
    missing = [k for k in REF if k not in named and k not in parents]
    assert missing == [], f"task keys the tutorial's table does not explain: {missing}"


def test_the_plain_defaults_are_the_codes():
    wrong, compared = [], 0
    for keys, defaults in ROWS:
        if len(defaults) != len(keys):
            continue  # one default for several keys, or a list written out
        for key, shown in zip(keys, defaults):
            m = re.fullmatch(r"`([^`]*)`", shown)
            code = plain(REF.get(key, "(")) if key in REF else None
            if m and code is not None and m.group(1) != '""':
                compared += 1
                if m.group(1) != code:
                    wrong.append(f"{key}: the table says {m.group(1)!r}, the code {code!r}")
    assert wrong == []
    assert compared >= 25  # the check reads the table's plain defaults, not none of them
