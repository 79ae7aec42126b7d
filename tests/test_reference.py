"""The documentation site's reference pages (kohaku/tools/reference.py): every config key, task
key and catalog entry has a line of meaning; the committed pages are what the code generates."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kohaku.tools import reference
from kohaku.tasks.named import catalog

REPO = Path(__file__).resolve().parents[1]
PAGES = REPO / "docs" / "reference"


@dataclass
class _Documented:
    beside: int = 1   # the comment beside the field
    # the comment above the field,
    # two lines of it
    above: str = "x"
    nested: "_Inner" = field(default_factory=lambda: _Inner())   # a nested part


@dataclass
class _Inner:
    """The inner part.

    depth: from the class docstring's name: meaning list
    """

    depth: float = 0.5


@dataclass
class _Undocumented:
    fine: int = 0  # has its line
    bare: int = 1


def test_meanings_come_from_beside_above_and_the_docstring():
    keys = {k.path: k for k in reference.dataclass_keys(_Documented, "g")}
    assert keys["g.beside"].meaning == "the comment beside the field"
    assert keys["g.beside"].type == "int" and keys["g.beside"].default == "1"
    assert keys["g.above"].meaning == "the comment above the field, two lines of it"
    assert keys["g.above"].default == "'x'"
    assert keys["g.nested"].meaning == "a nested part"
    assert keys["g.nested.depth"].meaning == "from the class docstring's name: meaning list"
    assert keys["g.nested.depth"].default == "0.5"


def test_real_keys_read_as_the_code_writes_them():
    from kohaku.ingest.tree.build import TreeConfig
    from kohaku.retrieval.retrieve import RetrieveConfig

    keys = {k.path: k for k in reference.dataclass_keys(RetrieveConfig, "retrieve")}
    assert "questions-table column" in keys["retrieve.restrict_column"].meaning
    assert keys["retrieve.restrict_column"].default == "null"
    assert "retrieve.evidence.pool" in keys and keys["retrieve.evidence.pool"].default == "200"
    # a field TreeConfig inherits is found in the class that declares it
    tree = {k.path: k for k in reference.dataclass_keys(TreeConfig, "tree")}
    inherited = [k for k in tree.values() if k.where.endswith(":SegmentConfig")]
    assert inherited and all(k.meaning for k in inherited)
    root = {k.path: k for k in reference.root_keys()}
    assert root["cache.locking"].default == "required" and "flock" in root["cache.locking"].meaning
    assert "report.baseline" not in root and not any(p.startswith("hydra") for p in root)


def test_every_config_key_task_key_and_catalog_entry_has_a_line():
    assert reference.missing_lines() == []


def test_a_key_without_a_line_fails(monkeypatch):
    groups = reference.config_groups()
    monkeypatch.setattr(reference, "config_groups", lambda: groups + [("extra", "extra", _Undocumented)])
    missing = reference.missing_lines()
    assert len(missing) == 1 and missing[0].startswith("config key extra.bare (")
    assert "_Undocumented" in missing[0]


def test_a_catalog_entry_without_a_docstring_fails(monkeypatch):
    table = {kind: dict(entries) for kind, entries in catalog.CATALOG.items()}
    table["metric"]["bare"] = f"{__name__}:_bare_metric"
    monkeypatch.setattr(catalog, "CATALOG", table)
    assert reference.missing_lines() == [
        f"catalog entry metric 'bare' ({__name__}:_bare_metric): no docstring"]


def _bare_metric(rows, params, env):
    return [None for _ in rows]


def test_catalog_entries_carry_their_parameters():
    entries = {(e.kind, e.name): e for e in reference.catalog_entries()}
    assert entries["metric", "na_f1"].params == ["average", "token"]
    assert {"points", "missing", "extra", "gold", "pred"} <= set(entries["metric", "page_pools"].params)
    assert entries["writer", "columns"].meaning.startswith("A CSV with ``submission.columns``")
    assert set(reference.kind_signatures()) == set(catalog.CATALOG)
    # a function whose params are a dataclass lists its keys (llm_judge: JudgeConfig)
    page = reference.functions_page()
    judge = page[page.index("### metric `llm_judge`"):page.index("### metric `na_f1`")]
    assert "| `params.max_tokens` | `int` | `64` | room for the JSON verdict |" in judge


def test_committed_pages_are_fresh():
    """Regenerate with `.venv/bin/python scripts/gen_reference.py` when this fails (the scripts'
    --help page is checked whole by `scripts/gen_reference.py --check` in scripts/test.sh)."""
    stale = [name for name, text in reference.pages(with_scripts=False).items()
             if not (PAGES / name).is_file() or (PAGES / name).read_text(encoding="utf-8") != text]
    assert stale == [], f"stale reference pages {stale}: run .venv/bin/python scripts/gen_reference.py"
    listed = re.findall(r"^## (\S+)$", (PAGES / "scripts.md").read_text(encoding="utf-8"), re.M)
    assert listed == [p.name for p in reference.scripts_list()]


def test_pages_hold_no_path_of_this_machine():
    for page in PAGES.glob("*.md"):
        text = page.read_text(encoding="utf-8")
        for where in (REPO, REPO.parent):  # a path, not a word that begins like one (/workers.py)
            assert not re.search(re.escape(str(where)) + r"(?![\w.-])", text), (page.name, str(where))


def test_errors_page_names_messages_by_their_text():
    classes = reference.error_classes()
    assert {"KohakuError", "ConfigError", "CorpusError", "SubmissionError", "BackendError"} <= set(classes)
    messages = reference.error_messages(classes)
    texts = [t for t, _ in messages["ConfigError"]]
    assert "unknown key(s) …; valid keys: …" in texts
    # a validate()'s ValueError is a ConfigError's message (config.build wraps it)
    assert any(t == "prompt is empty; set caption.prompt" for t in texts)


def test_check_mode_exits_1_on_a_stale_page(tmp_path, monkeypatch):
    monkeypatch.setattr(reference, "pages", lambda with_scripts=True: {"config.md": "new\n"})
    (tmp_path / "config.md").write_text("old\n")
    assert reference.main(["--check", "--out", str(tmp_path)]) == 1
    assert (tmp_path / "config.md").read_text() == "old\n"
    assert reference.main(["--out", str(tmp_path)]) == 0
    assert reference.main(["--check", "--out", str(tmp_path)]) == 0
