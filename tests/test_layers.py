"""The layer rule, checked on the import statements of every module (ast, so imports inside
functions count too):

- only the pipeline (kohaku/runner/pipeline.py) imports ``kohaku.stages``; stages never import each
  other (the registry kohaku/stages/__init__.py names them as strings);
- library modules (everything in kohaku/ but the runner layer and the stages) import neither
  the stages, the runner layer, nor omegaconf/hydra;
- scripts import the library (scripts/run.py, the Hydra entry point, may import the runner).
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
        is_library = within(mod, "kohaku") and not is_stage and not is_runner and mod != "kohaku.stages"
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
            if mod.startswith("scripts.") and mod != "scripts.run" and any(within(name, r) for r in RUNNER):
                if name not in ("kohaku.runner.pipeline", "kohaku.runner.pipeline.option_values",
                                "kohaku.runner.pipeline.compose_config", "kohaku.runner.pipeline.task_values"):
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
