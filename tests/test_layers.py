"""The layer rule, checked on the import statements of every module (ast, so imports inside
functions count too):

- only the pipeline (kohaku/runner/pipeline.py) imports ``kohaku.stages``; stages never import each
  other (the registry kohaku/stages/__init__.py names them as strings);
- library modules (everything in kohaku/ but the runner layer and the stages) import neither
  the stages, the runner layer, nor omegaconf/hydra;
- scripts import the library (scripts/run.py, the Hydra entry point, may import the runner);
  kohaku/tools/ (the commands' code) is held to the scripts' rule;
- no import circles among kohaku's modules, and no arrow from a lower layer to a higher one
  (LAYERS below, the order docs/design.md draws); the generic task machinery and the reports
  import no competition's room.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RUNNER = {"kohaku.runner"}
CONFIG_LIBS = ("omegaconf", "hydra")


def module_name(path: Path, root: Path = REPO) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, root: Path = REPO) -> list[tuple[int, str]]:
    """(line, imported module) for every import in ``path``; ``from a import b`` gives both
    ``a`` and ``a.b`` (b may be a module)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out: list[tuple[int, str]] = []
    package = module_name(path, root).rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            out.append((node.lineno, base))
            out.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names)
    return out


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def violations(root: Path = REPO) -> list[str]:
    found = []
    for path in sorted((root / "kohaku").rglob("*.py")) + sorted((root / "scripts").glob("*.py")):
        mod = module_name(path, root)
        is_stage = within(mod, "kohaku.stages") and mod != "kohaku.stages"
        is_runner = any(within(mod, r) for r in RUNNER)
        is_tool = within(mod, "kohaku.tools")   # the commands' library: held to the scripts' rule
        is_library = (within(mod, "kohaku") and not is_stage and not is_runner and not is_tool
                      and mod != "kohaku.stages")
        for line, name in imports(path, root):
            where = f"{path.relative_to(root)}:{line} imports {name}"
            if within(name, "kohaku.stages") and name != "kohaku.stages.__init__":
                if is_stage and name != mod:
                    found.append(f"{where}: a stage imports another stage; move the shared code "
                                 "into a library module")
                elif not is_stage and mod != "kohaku.runner.pipeline":
                    found.append(f"{where}: only kohaku/runner/pipeline.py imports stages")
            if is_library and any(within(name, r) for r in RUNNER):
                found.append(f"{where}: the library must not import the runner layer")
            if is_library and any(within(name, c) for c in CONFIG_LIBS):
                found.append(f"{where}: the library must not import omegaconf/hydra")
            if ((mod.startswith("scripts.") and mod != "scripts.run") or is_tool) and any(within(name, r) for r in RUNNER):
                if name not in ("kohaku.runner.pipeline", "kohaku.runner.pipeline.option_values",
                                "kohaku.runner.pipeline.compose_config", "kohaku.runner.pipeline.task_values",
                                "kohaku.runner.pipeline.config_schemas",
                                "kohaku.runner.pipeline.stage_graph"):
                    found.append(f"{where}: scripts use the library (config helpers excepted)")
    return found


def test_the_layer_rule_holds():
    assert violations() == []


def test_the_rule_catches_a_stage_importing_another_stage(tmp_path):
    """A copy of the tree with one stage importing another fails the check, naming the line."""
    for sub in ("kohaku", "scripts"):
        for path in (REPO / sub).rglob("*.py"):
            target = tmp_path / path.relative_to(REPO)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(path.read_text())
    plan = tmp_path / "kohaku" / "stages" / "plan.py"
    plan.write_text(plan.read_text() + "\n\ndef _bad():\n    from kohaku.stages.infer import compute\n")
    lib = tmp_path / "kohaku" / "answer" / "voting.py"
    lib.write_text(lib.read_text() + "\nfrom omegaconf import OmegaConf\n")
    found = violations(tmp_path)
    assert any(v.startswith("kohaku/stages/plan.py:") and "a stage imports another stage" in v for v in found)
    assert any(v.startswith("kohaku/answer/voting.py:") and "omegaconf" in v for v in found)


@pytest.mark.parametrize("path", sorted((REPO / "kohaku" / "stages").glob("*.py")), ids=lambda p: p.name)
def test_stage_modules_are_thin(path):
    assert len(path.read_text().splitlines()) <= 120, f"{path.name}: move the domain code into the library"


# -- the house: no import circles, no arrow from a lower layer up --------------------------

#: kohaku's layers, lowest first (docs/design.md "Layers and the import rule"); a module belongs to
#: the layer of the longest prefix that names it. A module may import its own layer and lower
#: ones, never a higher one. ``tasks`` holds the generic task machinery and the competitions'
#: rooms (kohaku/tasks/rooms/<name>/); the registry reads its table (kohaku/tasks/named/catalog.py:
#: ``module:function`` strings) and imports a room only when a task names one of its functions.
LAYERS = (
    ("core", ("kohaku", "kohaku.core")),
    ("llm", ("kohaku.llm",)),
    ("ingest", ("kohaku.ingest",)),
    ("retrieval", ("kohaku.retrieval",)),
    ("tasks", ("kohaku.tasks",)),
    ("answer", ("kohaku.answer",)),
    ("report", ("kohaku.report",)),
    ("stage contract", ("kohaku.runner.stage", "kohaku.runner.services")),
    ("stages", ("kohaku.stages",)),
    ("runner", ("kohaku.runner",)),
    ("tools", ("kohaku.tools",)),
)

#: the generic task machinery and the reports: they know no competition (no room's module)
GENERIC = ("kohaku.tasks.spec", "kohaku.tasks.kinds", "kohaku.tasks.grouping", "kohaku.tasks.whole",
           "kohaku.tasks.files", "kohaku.tasks.score", "kohaku.tasks.analysis", "kohaku.tasks.named",
           "kohaku.answer.ensemble", "kohaku.report")
ROOMS = ("kohaku.tasks.rooms.wattbot", "kohaku.tasks.rooms.financebench", "kohaku.tasks.rooms.squad")


def layer_of(mod: str) -> tuple[int, str] | None:
    best: tuple[int, int, str] | None = None
    for rank, (name, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if within(mod, p) and (best is None or len(p) > best[0]):
                best = (len(p), rank, name)
    return None if best is None else (best[1], best[2])


def import_graph(root: Path = REPO) -> dict[str, dict[str, int]]:
    """kohaku module -> {imported kohaku module: first line}; ``from a import b`` counts ``a.b``
    when ``a/b`` is a module, else ``a``."""
    modules = {module_name(p, root): p for p in (root / "kohaku").rglob("*.py")}
    graph: dict[str, dict[str, int]] = {}
    for mod, path in sorted(modules.items()):
        edges: dict[str, int] = {}
        for line, name in imports(path, root):
            target = name if name in modules else None
            if target is None:   # an attribute of a module: the module
                parent = name.rsplit(".", 1)[0]
                target = parent if parent in modules else None
            if target and target != mod:
                edges.setdefault(target, line)
        graph[mod] = edges
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The import circles: each strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def upward(graph: dict[str, dict[str, int]]) -> list[str]:
    found = []
    for mod, edges in graph.items():
        here = layer_of(mod)
        for target, line in edges.items():
            there = layer_of(target)
            if here and there and there[0] > here[0]:
                found.append(f"{mod}:{line} imports {target}: layer {here[1]} must not import "
                             f"the higher layer {there[1]}")
    return found


def test_no_import_circles():
    assert cycles(import_graph()) == []


def test_no_arrow_from_a_lower_layer_up():
    assert upward(import_graph()) == []


def test_the_generic_machinery_imports_no_competition():
    graph = import_graph()
    found = [f"{m}:{line} imports {t}" for m, edges in graph.items() if any(within(m, g) for g in GENERIC)
             for t, line in edges.items() if any(within(t, r) for r in ROOMS)]
    assert found == []


def test_every_module_has_a_layer():
    assert [m for m in import_graph() if layer_of(m) is None] == []


def test_the_house_rules_catch_a_planted_circle_and_an_upward_import(tmp_path):
    """A copy of the library with a circle (core.errors -> core.config -> core.errors) and an
    upward arrow (the retrieval layer importing a report module) fails both checks."""
    for path in (REPO / "kohaku").rglob("*.py"):
        target = tmp_path / path.relative_to(REPO)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text())
    errors = tmp_path / "kohaku" / "core" / "errors.py"
    errors.write_text(errors.read_text() + "\n\ndef _bad():\n    from kohaku.core.config import ConfigError\n")
    context = tmp_path / "kohaku" / "retrieval" / "context.py"
    context.write_text(context.read_text() + "\n\ndef _up():\n    from kohaku.report import tables\n")
    graph = import_graph(tmp_path)
    assert ["kohaku.core.config", "kohaku.core.errors"] in cycles(graph)
    assert any(v.startswith("kohaku.retrieval.context:") and "kohaku.report.tables" in v
               and "layer retrieval must not import the higher layer report" in v for v in upward(graph))


@pytest.mark.parametrize("rel", ["kohaku/tasks/named/catalog.py", "kohaku/tasks/spec.py"])
def test_catalog_and_spec_name_no_room(rel):
    """The catalog finds the rooms (the subpackages of kohaku/tasks/rooms/) and reads their tables;
    the spec's defaults are the default task's (its room's DEFAULTS): neither names a room."""
    text = (REPO / rel).read_text().lower()
    assert not [r for r in ROOMS if r.rsplit(".", 1)[1] in text]


def test_tasks_top_holds_what_a_task_is_and_the_groups():
    """kohaku/tasks/ stays legible: what a task is at the top, every other module in the folder
    of its job (files, score, analysis, named) and the competitions under rooms/."""
    top = REPO / "kohaku" / "tasks"
    assert sorted(p.name for p in top.glob("*.py")) == ["__init__.py", "grouping.py", "kinds.py", "spec.py",
                                                        "whole.py"]
    assert sorted(p.name for p in top.iterdir() if (p / "__init__.py").is_file()) == [
        "analysis", "files", "named", "rooms", "score"]
    assert sorted(p.parent.name for p in (top / "rooms").glob("*/__init__.py")) == sorted(
        r.rsplit(".", 1)[1] for r in ROOMS)


def test_catalog_reads_every_room():
    from kohaku.tasks.named import catalog

    assert sorted(catalog.rooms()) == sorted(r.rsplit(".", 1)[1] for r in ROOMS)
    assert sum(1 for r in catalog.rooms() if getattr(catalog._room(r), "DEFAULTS", None)) == 1
