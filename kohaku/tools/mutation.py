"""Mutation score of the core modules: mutate one module at a time, run only its fast tests.

Each module is mutated in its own scratch copy of the repository (kohaku/, tests/, conf/,
data/sample and pyproject.toml with a generated ``[tool.mutmut]`` section), so the checkout is
never touched and each run sees only the test files listed for that module. mutmut maps every
test to the functions it calls and runs, for each mutant, only the tests that reach it.

Needs mutmut >= 3.8 importable by this interpreter, e.g. ``pip install -e '.[mutation]'`` or, to
keep it out of a shared venv, ``pip install --target .mutmut-env/lib 'mutmut>=3.8'`` and
``PYTHONPATH=.mutmut-env/lib``.

    python scripts/mutation.py                      # every module, one after the other
    python scripts/mutation.py metrics voting       # only these
    python scripts/mutation.py --list               # modules and their test files

Writes ``<out>/<module>.json`` (counts and the surviving mutants with their diffs) and prints
one line per module: killed / total and the survivors' names. docs/mutation.md records the last
full run and why each remaining survivor is equivalent.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

log = logging.getLogger("mutation")

REPO = Path(__file__).resolve().parents[2]

from kohaku.tools.defaults import METRIC_FILE, METRIC_MODULE  # noqa: E402

# module name -> (file to mutate, its fast test files)
MODULES: dict[str, tuple[str, list[str]]] = {
    "metrics": (METRIC_FILE, ["tests/test_metrics.py"]),   # the default task's competition metric
    "values": ("kohaku/core/values.py", ["tests/test_values.py"]),
    "voting": ("kohaku/answer/voting.py", ["tests/test_vote.py"]),
    "rerank": ("kohaku/retrieval/rerank.py", ["tests/test_rerank.py"]),
    "context": ("kohaku/retrieval/context.py", ["tests/test_context.py"]),
    "artifacts": ("kohaku/core/artifacts.py", ["tests/test_pipeline_cache.py", "tests/test_cache_lock.py"]),
    "segment": ("kohaku/ingest/text/segment.py", ["tests/test_segment.py", "tests/test_segment_headings.py",
                                          "tests/test_segment_layout.py"]),
}

PRELOAD = ["pytest", "numpy", "polars", "pyarrow", "torch", "hypothesis", "yaml", "omegaconf", "hydra", "kohaku.runner.pipeline", "kohaku.stages", "kohaku.answer.voting", METRIC_MODULE, "kohaku.retrieval.retrieve", "kohaku.core.artifacts", "kohaku.ingest.text.segment"]

LOG_CALL = r"^\s*(log|logger)\.(debug|info|warning|error|exception)\("

COPY = ["kohaku", "tests", "conf", "data/sample", "README.md"]


def _mutmut_path() -> str:
    spec = importlib.util.find_spec("mutmut")
    if spec is None or not spec.submodule_search_locations:
        sys.exit(
            "mutmut is not importable: pip install -e '.[mutation]' "
            "(or pip install --target .mutmut-env/lib 'mutmut>=3.8' and PYTHONPATH=.mutmut-env/lib)"
        )
    return str(Path(list(spec.submodule_search_locations)[0]).parent)


def _toml_list(items: list[str]) -> str:
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


def _tests_from_rev(work: Path, rev: str) -> None:
    """Replace the scratch copy's tests/ with tests/ as of git revision ``rev``."""
    shutil.rmtree(work / "tests")
    archive = subprocess.run(["git", "archive", rev, "tests"], cwd=REPO, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(work)], input=archive, check=True)


def _scratch(work: Path, target: str, tests: list[str], tests_rev: str | None) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", ".hypothesis")
    for rel in COPY:
        src = REPO / rel
        if src.is_dir():
            shutil.copytree(src, work / rel, ignore=ignore)
        elif src.is_file():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, work / rel)
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    pyproject += (
        "\n[tool.mutmut]\n"
        'source_paths = ["kohaku"]\n'
        f"only_mutate = {_toml_list([target])}\n"
        f"also_copy = {_toml_list(['conf', 'data', 'README.md'])}\n"
        f"pytest_add_cli_args_test_selection = {_toml_list(tests)}\n"
        'pytest_add_cli_args = ["-p", "no:cacheprovider", "-q"]\n'
        "use_git_change_detection = false\n"
        # polars' thread pool does not survive fork(): a worker forked from a process that has
        # run a polars query hangs. A fork server that has only imported the heavy modules is safe.
        'process_isolation = "forkserver"\n'
        # log calls are left alone: their text is for people, the tests pin values and errors
        f"do_not_mutate_patterns = {_toml_list([LOG_CALL])}\n"
        'forkserver_warmup = "import"\n'
        'preload_modules_file = "preload.txt"\n'
    )
    (work / "preload.txt").write_text("\n".join(PRELOAD) + "\n", encoding="utf-8")
    (work / "pyproject.toml").write_text(pyproject, encoding="utf-8")
    if tests_rev:
        _tests_from_rev(work, tests_rev)


def _mutant_functions(work: Path, target: str) -> dict[str, str]:
    """Source of every function in mutmut's mutated copy of ``target``, by name (the original of
    ``x_f`` is ``x_f__mutmut_orig``, its mutants ``x_f__mutmut_<n>``)."""
    source = (work / "mutants" / target).read_text(encoding="utf-8")
    lines = source.splitlines()
    return {
        node.name: "\n".join(lines[node.lineno - 1:node.end_lineno])
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }


def _survivor_diffs(work: Path, env: dict, names: list[str], target: str) -> dict[str, str]:
    """Each mutant's diff against its original function; read from the mutated copy in one pass
    (``mutmut show`` per mutant costs a second each, minutes for a module with many survivors)."""
    try:
        funcs = _mutant_functions(work, target)
    except (OSError, SyntaxError):
        funcs = {}
    diffs = {}
    for name in names:
        short = name.rsplit(".", 1)[-1]
        orig, mutant = funcs.get(short.rsplit("__mutmut_", 1)[0] + "__mutmut_orig"), funcs.get(short)
        if orig is not None and mutant is not None:
            body = [f.split("\n", 1)[-1].splitlines() for f in (orig, mutant)]
            diffs[name] = "\n".join(difflib.unified_diff(*body, target, f"{target} ({short})", lineterm="", n=1))
            continue
        out = subprocess.run(
            [sys.executable, "-m", "mutmut", "show", name], cwd=work, env=env, capture_output=True, text=True
        )
        diffs[name] = out.stdout.strip()
    return diffs


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = _mutmut_path()  # never the checkout: the mutated copy must be imported
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.setdefault("CUDA_VISIBLE_DEVICES", "")
    return env


def _statuses(work: Path, env: dict) -> dict[str, str]:
    """mutant name -> mutmut status (killed, survived, timeout, no tests, not checked, ...)."""
    listing = subprocess.run(
        [sys.executable, "-m", "mutmut", "results", "--all", "true"], cwd=work, env=env, capture_output=True, text=True
    ).stdout
    out = {}
    for line in listing.splitlines():
        if ": " in line:
            key, status = line.strip().rsplit(": ", 1)
            out[key] = status
    return out


def run_module(name: str, out_dir: Path, max_children: int, keep: bool, tests_rev: str | None = None,
               retest: dict | None = None, functions: list[str] | None = None) -> dict:
    """Mutate one module in a fresh scratch copy, or (``retest``: a previous result kept with
    --keep) copy today's tests into that scratch copy and rerun only its survivors."""
    target, tests = MODULES[name]
    if retest:
        work = Path(retest["workdir"])
        for dest in (work / "tests", work / "mutants" / "tests"):
            shutil.rmtree(dest)
            shutil.copytree(REPO / "tests", dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        # the survivors, and the mutants no test reached (new tests may reach them now)
        names = list(retest["survivors"]) + [
            line.split(":")[0] for line in retest["not_killed_other"] if line.endswith("no tests")
        ]
    else:
        work = Path(tempfile.mkdtemp(prefix=f"kohaku-mut-{name}-"))
        dotted = target.removesuffix(".py").replace("/", ".")
        names = [f"{dotted}.x_{fn}__mutmut_*" for fn in functions or []]
    try:
        if not retest:
            _scratch(work, target, tests, tests_rev)
        env = _env()
        start = time.monotonic()
        out_dir.mkdir(parents=True, exist_ok=True)
        suffix = ".retest" if retest else ""
        with open(out_dir / f"{name}{suffix}.log", "w", encoding="utf-8") as run_log:
            proc = subprocess.run(
                [sys.executable, "-m", "mutmut", "run", "--max-children", str(max_children), *names],
                cwd=work,
                env=env,
                stdout=run_log,
                stderr=subprocess.STDOUT,
            )
        seconds = time.monotonic() - start
        if proc.returncode != 0:
            log.error("%s: mutmut run failed (rc %s), see %s", name, proc.returncode, out_dir / f"{name}.log")
            return {"module": name, "error": proc.returncode}
        status = _statuses(work, env)
        if functions or (retest and retest.get("functions")):
            keep_fns = functions or retest["functions"]
            status = {k: v for k, v in status.items() if any(f".x_{fn}__mutmut_" in k for fn in keep_fns)}
        stats = {"total": len(status)}
        for value in status.values():
            stats[value] = stats.get(value, 0) + 1
        survivors = [k for k, v in status.items() if v == "survived"]
        others = [f"{k}: {v}" for k, v in status.items() if v not in ("survived", "killed")]
        result = {
            "module": name,
            "file": target,
            "tests": tests,
            "tests_rev": None if retest else tests_rev,
            "functions": functions or (retest or {}).get("functions"),
            "retest_of": sorted(retest["survivors"]) if retest else None,
            "workdir": str(work) if keep else None,
            "seconds": round(seconds, 1),
            "stats": stats,
            "survivors": _survivor_diffs(work, env, survivors, target),
            "not_killed_other": others,
        }
        (out_dir / f"{name}{suffix}.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
        return result
    finally:
        if keep:
            log.info("%s: scratch copy kept at %s", name, work)
        else:
            shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("modules", nargs="*", help=f"modules to mutate (default: all of {', '.join(MODULES)})")
    parser.add_argument("--list", action="store_true", help="print the modules and their test files, then exit")
    parser.add_argument("--max-children", type=int, default=2, help="mutants run in parallel (default 2)")
    parser.add_argument("--out", type=Path, default=REPO / "outputs" / "mutation", help="where the JSON reports go")
    parser.add_argument("--keep", action="store_true", help="keep each scratch copy (for --retest or mutmut browse)")
    parser.add_argument("--tests-rev", help="run against tests/ as of this git revision (a 'before' score)")
    parser.add_argument("--functions", nargs="+", metavar="NAME",
                        help="mutate only these functions of the module(s) (a partial run; the report says so)")
    parser.add_argument(
        "--retest",
        action="store_true",
        help="rerun only the survivors of the last --keep run (<out>/<module>.json) against today's tests",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.list:
        for name, (target, tests) in MODULES.items():
            print(f"{name:10s} {target:32s} {' '.join(tests)}")
        return 0
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        parser.error(f"unknown module(s) {unknown}; choose from {list(MODULES)}")
    failed = False
    for name in args.modules or list(MODULES):
        log.info("%s: mutating %s against %s", name, MODULES[name][0], " ".join(MODULES[name][1]))
        previous = None
        if args.retest:
            report = args.out / f"{name}.json"
            if (args.out / f"{name}.retest.json").is_file():  # the latest survivors
                report = args.out / f"{name}.retest.json"
            previous = json.loads(report.read_text()) if report.is_file() else None
            if not previous or not previous.get("workdir") or not Path(previous["workdir"]).is_dir():
                log.error("%s: --retest needs a kept scratch copy from an earlier --keep run (%s)", name, report)
                failed = True
                continue
        res = run_module(name, args.out, args.max_children, args.keep or args.retest, args.tests_rev, previous,
                         args.functions)
        if "error" in res:
            failed = True
            continue
        s = res["stats"]
        log.info(
            "%s: killed %d / %d (%s) in %.0f s",
            name,
            s.get("killed", 0),
            s["total"],
            ", ".join(f"{k} {v}" for k, v in sorted(s.items()) if k not in ("killed", "total")),
            res["seconds"],
        )
        for mutant in res["survivors"]:
            log.info("  survived: %s", mutant)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
