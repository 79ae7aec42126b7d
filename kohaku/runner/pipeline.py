"""Run the stage graph with the artifact cache.

``run_pipeline(cfg, run_dir)`` computes (or reuses) every stage the targets need, in an order
derived from the stages' declared inputs (a topological sort; ties keep the registry order), and
writes ``run_dir/run.json`` after each stage, so even a crashed run leaves a record. The runner
knows no stage by name: each ``Stage`` declares its inputs, config, problem counters and the
files to copy into the run dir.

A stage that stops on bad input or a bad setting (any :class:`kohaku.core.errors.KohakuError`: a
config key, a corpus or CSV file, a model backend) fails the run with a :class:`StageError`
whose message names the stage and keeps the original message (file, row or key, and what to
do); ``scripts/run.py`` prints it without a traceback. run.json records the failed stage and the error either way. Problems a run survives (unreadable documents, invalid model
outputs, dropped references, ...) are listed at the end of the run log and in run.json.
"""

from __future__ import annotations

import graphlib
import heapq
import json
import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
from omegaconf import DictConfig, OmegaConf

from kohaku.core.artifacts import (
    Artifact,
    ArtifactStore,
    CorruptArtifact,
    atomic_write,
)
from kohaku.core.config import ConfigError, build
from kohaku.core.errors import KohakuError
from kohaku.runner.services import Services
from kohaku.runner.stage import Stage, StageContext, plain, select
from kohaku.stages import STAGE_MODULES, get_stage
from kohaku.core.versions import library_versions

log = logging.getLogger("kohaku.pipeline")


class StageError(ConfigError):
    """A stage stopped on bad input or a bad setting; the message names the stage, then the
    file, row or config key at fault and what to do (the original exception is the cause)."""

    def __init__(self, stage: str, error: BaseException) -> None:
        self.stage = stage
        self.error = error
        super().__init__(f"stage '{stage}': {error}")


@dataclass
class StageRecord:
    key: str
    path: str
    cache_hit: bool
    seconds: float
    summary: dict[str, Any] = field(default_factory=dict)
    reason: str = ""


@dataclass
class RunResult:
    run_dir: Path
    stages: dict[str, StageRecord]
    seconds: float

    def summary(self, stage: str) -> dict[str, Any]:
        return self.stages[stage].summary if stage in self.stages else {}


class Registry:
    """Stage name -> Stage, in pipeline order. The default loads kohaku.stages lazily."""

    def __init__(self, stages: list[Stage] | None = None) -> None:
        self._stages = {s.name: s for s in stages} if stages is not None else None

    @property
    def names(self) -> list[str]:
        return list(self._stages) if self._stages is not None else list(STAGE_MODULES)

    def get(self, name: str) -> Stage:
        if self._stages is None:
            return get_stage(name)
        if name not in self._stages:
            raise ConfigError(f"unknown stage '{name}'; stages are: {', '.join(self._stages)}")
        return self._stages[name]


def plan_stages(targets: list[str], registry: Registry | None = None) -> list[Stage]:
    """Targets plus everything upstream of them, ordered from the declared inputs (a stage
    after all its inputs; of the stages ready to run, the earliest registered first). A cycle or an input
    that no stage produces is a ConfigError naming the stages."""
    registry = registry or Registry()
    needed: dict[str, Stage] = {}

    def visit(name: str, wanted_by: str | None) -> None:
        if name in needed:
            return
        if name not in registry.names:
            if wanted_by is None:
                raise ConfigError(f"stages: unknown stage '{name}'; stages are: {', '.join(registry.names)}")
            raise ConfigError(f"stage '{wanted_by}' reads '{name}', but no stage produces it; "
                              f"stages are: {', '.join(registry.names)}")
        needed[name] = stage = registry.get(name)
        for dep in stage.inputs:
            visit(dep, name)

    for target in targets:
        visit(target, None)
    position = {name: i for i, name in enumerate(registry.names)}
    sorter = graphlib.TopologicalSorter({name: set(s.inputs) for name, s in needed.items()})
    try:
        sorter.prepare()
    except graphlib.CycleError as exc:
        raise ConfigError(f"stages: the declared inputs form a cycle: {' -> '.join(exc.args[1])}") from exc
    order: list[Stage] = []
    ready: list[tuple[int, str]] = []
    while sorter.is_active():
        for name in sorter.get_ready():
            heapq.heappush(ready, (position[name], name))
        _, name = heapq.heappop(ready)  # one at a time: the earliest registered ready stage
        order.append(needed[name])
        sorter.done(name)
    return order


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for k, v in value.items():
            flat.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return flat
    return {prefix: value}


def explain_miss(previous: dict[str, Any] | None, current: dict[str, Any]) -> str:
    """Say why a stage is computed, compared with the last time this stage was computed here."""
    if previous is None:
        return "first time this stage is computed in this cache"
    reasons = []
    old_cfg, new_cfg = _flatten(previous.get("config", {})), _flatten(current["config"])
    changed = sorted(k for k in set(old_cfg) | set(new_cfg) if old_cfg.get(k) != new_cfg.get(k))
    if changed:
        shown = ", ".join(f"{k}={new_cfg.get(k)!r}" for k in changed[:4])
        reasons.append(f"config changed: {shown}" + (" ..." if len(changed) > 4 else ""))
    inputs = sorted(
        k for k in current["inputs"] if previous.get("inputs", {}).get(k) != current["inputs"][k]
    )
    if inputs:
        reasons.append(f"input changed: {', '.join(inputs)}")
    old_files, new_files = previous.get("files", {}), current["files"]
    files = sorted(k for k in set(old_files) | set(new_files) if old_files.get(k) != new_files.get(k))
    if files:
        reasons.append(f"files changed: {', '.join(files[:3])}" + (" ..." if len(files) > 3 else ""))
    if previous.get("version") != current["version"]:
        reasons.append(f"stage version {previous.get('version')} -> {current['version']}")
    return "; ".join(reasons) or "no cached artifact for this key (cache was cleared?)"


def retry_items(manifest: dict[str, Any]) -> list[str]:
    """The items (document ids...) a cached artifact's stage reported as failed for a cause that
    may not recur (its summary's ``retry`` list): the runner computes the stage again with the
    artifact as ``ctx.previous``, so those are tried again and the rest reused."""
    retry = (manifest.get("summary") or {}).get("retry") or []
    return [str(x) for x in retry] if isinstance(retry, list) else []


def input_key(artifact: Artifact) -> str:
    """What a downstream stage's key holds of an upstream artifact: its key, and its revision
    once it was recomputed under that key to retry items (its tables changed)."""
    revision = int(artifact.manifest.get("revision") or 0)
    return artifact.key if not revision else f"{artifact.key}-r{revision}"


def _write_json(path: Path, data: Any) -> None:
    """Write ``data`` atomically; the temporary name is unique, so concurrent writers of one
    file (two runs sharing a cache write ``last.json``) never trample each other."""
    text = json.dumps(data, indent=2, sort_keys=False, default=str)
    atomic_write(path, lambda tmp: tmp.write_text(text))


def problem_lines(records: dict[str, "StageRecord"],
                  events: dict[str, Any] | None = None) -> list[tuple[str, list[str]]]:
    """(headline, items) per stage that survived problems, e.g.
    ``("parse: 2 documents with problems", ["zero (pdfs/zero.pdf) error: empty file ..."])``.
    A stage reports ``problems = {"what": ..., "count": N, "items": [...]}`` in its summary
    (``"headline"`` in place of "N <what> with problems" where it gives one);
    ``events`` maps a stage name to its declared ``summary_events`` (counter -> words)."""
    declared = events or {}
    lines: list[tuple[str, list[str]]] = []
    for name, rec in records.items():
        summary = rec.summary or {}
        problems = summary.get("problems")
        if isinstance(problems, dict) and problems.get("count"):
            items = [str(x) for x in problems.get("items") or []]
            headline = (problems.get("headline")
                        or f"{problems['count']} {problems.get('what', 'items')} with problems")
            lines.append((f"{name}: {headline}", items))
        events = [
            f"{summary[key]} {label}"
            for key, label in declared.get(name, {}).items()
            if isinstance(summary.get(key), (int, float)) and summary.get(key)
        ]
        if events:
            lines.append((f"{name}: " + ", ".join(events), []))
    return lines


class Runner:
    def __init__(
        self,
        cfg: DictConfig,
        run_dir: Path,
        services: Services | None = None,
        registry: Registry | None = None,
    ) -> None:
        self.cfg = cfg
        self.registry = registry or Registry()
        self.run_dir = Path(run_dir)
        self.store = ArtifactStore(select(cfg, "cache.dir"), verify=bool(cfg.cache.get("verify", True)),
                                   locking=str(cfg.cache.get("locking", "required")))
        self.services = services or Services()
        self.force = set(cfg.get("force") or [])
        self.records: dict[str, StageRecord] = {}
        self.artifacts: dict[str, Artifact] = {}
        self.current: str | None = None  # the stage being run (named in run.json on failure)

    def run(self, targets: list[str]) -> RunResult:
        unknown = sorted(set(self.force) - set(self.registry.names))
        if unknown:
            raise ConfigError(f"force={unknown}: unknown stage(s); stages are {self.registry.names}")
        stages = plan_stages(targets, self.registry)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        removed = self.store.clean_scratch()
        if removed:
            log.info("removed %d scratch folder(s) left by crashed runs in %s", removed, self.store.root)
        started = time.perf_counter()
        status, error = "ok", None
        try:
            for stage in stages:
                self.current = stage.name
                try:
                    self._run_stage(stage)
                except KohakuError as exc:
                    if isinstance(exc, StageError):
                        raise
                    raise StageError(stage.name, exc) from exc
                self._write_run_json(time.perf_counter() - started, "running", None)
        except BaseException as exc:  # record the failure, then let it propagate
            status, error = "failed", f"{type(exc).__name__}: {exc}"
            if isinstance(exc, StageError):
                log.error("run failed: %s", exc)
            elif self.current:
                log.error("run failed in stage '%s': %s", self.current, error)
            raise
        finally:
            total = time.perf_counter() - started
            self._write_run_json(total, status, error)
            self.services.close()
        self._log_table(total)
        if (self.run_dir / "scores.json").is_file():  # report.html beside it; a failure is a warning
            from kohaku.report.html import try_write, write_run_report
            try_write(str(self.run_dir), write_run_report, self.run_dir)
        return RunResult(self.run_dir, self.records, total)

    def _run_stage(self, stage: Stage) -> None:
        inputs = {name: input_key(self.artifacts[name]) for name in stage.inputs}
        key, identity = stage.cache_identity(self.cfg, inputs)
        slice_, files = identity["config"], identity["files"]
        last_file = self.store.root / stage.name / "last.json"

        # One worker computes a key at a time: a sweep point that needs an artifact another point
        # is computing waits for it and then reads it, instead of computing it twice.
        with self.store.lock(stage.name, key):
            artifact = None
            reason = f"forced (force={sorted(self.force)})" if stage.name in self.force else ""
            if not reason:
                try:
                    artifact = self.store.load(stage.name, key)
                except CorruptArtifact as exc:
                    log.warning("%s: corrupt cache entry, recomputing: %s", stage.name, exc)
                    self.store.discard(stage.name, key)
                    reason = f"corrupt cache entry ({exc})"
            retry_of = None   # the cached artifact whose failed-for-now items are retried
            retry = retry_items(artifact.manifest) if artifact is not None else []
            if retry:
                shown = ", ".join(retry[:5]) + (f" and {len(retry) - 5} more" if len(retry) > 5 else "")
                reason = (f"retrying {len(retry)} item(s) that failed last time for a cause that may "
                          f"not recur ({shown}); the rest is reused")
                retry_of, artifact = artifact, None
            if artifact is not None:
                self.artifacts[stage.name] = artifact
                self.records[stage.name] = StageRecord(
                    key, str(artifact.path), True, 0.0, artifact.manifest.get("summary", {}), "cache hit"
                )
                log.info("%-9s cache hit  %s", stage.name, key)
            else:
                if not reason:
                    previous = None
                    if last_file.is_file():
                        try:
                            previous = json.loads(last_file.read_text())
                        except (OSError, json.JSONDecodeError):
                            previous = None
                    reason = explain_miss(previous, identity)
                log.info("%-9s computing  %s (%s)", stage.name, key, reason)
                seconds = self._compute(stage, key, slice_, inputs, files, retry_of)
                artifact = self.artifacts[stage.name]
                self.records[stage.name] = StageRecord(
                    key, str(artifact.path), False, seconds, artifact.manifest.get("summary", {}), reason
                )
                log.info("%-9s computed   %s in %.2fs", stage.name, key, seconds)
        last_file.parent.mkdir(parents=True, exist_ok=True)
        _write_json(last_file, {**identity, "key": key})
        for name in stage.run_dir_files:
            source = artifact.path / name
            if source.is_file():
                shutil.copyfile(source, self.run_dir / name)

    def _compute(self, stage: Stage, key: str, slice_: dict, inputs: dict, files: dict,
                 previous: Artifact | None = None) -> float:
        tmp = self.store.scratch(stage.name, key)
        ctx = StageContext(
            stage=stage,
            cfg=self.cfg,
            input_dirs={name: self.artifacts[name].path for name in stage.inputs},
            out_dir=tmp,
            services=self.services,
            log=logging.getLogger(f"kohaku.{stage.name}"),
            previous=previous.path if previous is not None else None,
            key=key,
        )
        started = time.perf_counter()
        try:
            tables = stage.compute(ctx)
            rows = {}
            for name, table in (tables or {}).items():
                if not isinstance(table, pl.DataFrame):
                    raise TypeError(f"stage '{stage.name}' returned {type(table).__name__} for '{name}'")
                table.write_parquet(tmp / f"{name}.parquet")
                rows[name] = table.height
            missing = [name for name in stage.outputs if name not in rows]
            if missing:
                raise RuntimeError(f"stage '{stage.name}' did not produce table(s) {missing}")
            seconds = time.perf_counter() - started
            manifest = {
                "config": slice_,
                "inputs": inputs,
                "input_files": files,
                "version": stage.version,
                "seconds": round(seconds, 3),
                "rows": rows,
                "summary": ctx.summary,
                "libraries": library_versions(),
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                # how many times the artifact was recomputed to retry its items (downstream
                # stages key on it: their inputs changed)
                "revision": int(previous.manifest.get("revision", 0)) + 1 if previous is not None else 0,
            }
            self.artifacts[stage.name] = self.store.commit(
                stage.name, key, tmp, manifest, replace=stage.name in self.force or previous is not None
            )
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return seconds

    def _write_run_json(self, seconds: float, status: str, error: str | None) -> None:
        overrides = []
        overrides_file = self.run_dir / ".hydra" / "overrides.yaml"
        if overrides_file.is_file():
            overrides = [str(x) for x in (OmegaConf.load(overrides_file) or [])]
        data = {
            "run_id": self.run_dir.name,
            "run_dir": str(self.run_dir),
            "overrides": overrides,
            "config": OmegaConf.to_container(self.cfg, resolve=True),
            "stages": {name: rec.__dict__ for name, rec in self.records.items()},
            "problems": [headline for headline, _ in problem_lines(self.records, self._events())],
            # the same with every item (each document left out and why...), uncut
            "problem_items": {headline: items for headline, items in problem_lines(self.records, self._events())},
            "seconds": round(seconds, 3),
            "status": status,
            "error": error,
            "failed_stage": self.current if status == "failed" else None,
            "libraries": library_versions(),
        }
        _write_json(self.run_dir / "run.json", data)

    def _events(self) -> dict[str, Any]:
        return {name: dict(self.registry.get(name).summary_events) for name in self.records}

    def _log_table(self, total: float) -> None:
        lines = [f"{'stage':<10}{'cache':<7}{'seconds':>9}  key"]
        for name, rec in self.records.items():
            lines.append(f"{name:<10}{'hit' if rec.cache_hit else 'miss':<7}{rec.seconds:>9.2f}  {rec.key}")
        lines.append(f"{'total':<17}{total:>9.2f}  run dir: {self.run_dir}")
        log.info("run summary\n%s", "\n".join(lines))
        for headline, items in problem_lines(self.records, self._events()):
            shown = items[:20] + ([f"... {len(items) - 20} more (run.json's problem_items lists them all)"]
                                  if len(items) > 20 else [])
            log.warning("%s", "\n    ".join([headline + (":" if shown else "")] + shown))


def run_pipeline(
    cfg: DictConfig,
    run_dir: Path,
    services: Services | None = None,
    registry: Registry | None = None,
) -> RunResult:
    targets = list(cfg.get("stages") or [])
    if not targets:
        raise ConfigError("stages=[] names no stage to run; e.g. stages=[parse,tree]")
    check_composed_task(cfg)
    return Runner(cfg, run_dir, services, registry).run(targets)


def check_composed_task(cfg: DictConfig) -> None:
    """The composed config's task checked whole before any stage runs (kohaku.tasks.whole:
    named functions, writer sources, metric params and the columns they read in the questions
    and solutions files); errors name the key."""
    from kohaku.ingest.corpus import CorpusConfig
    from kohaku.retrieval.gold import GoldSpec, gold_path
    from kohaku.tasks.whole import check_task

    if "task" not in cfg:
        return
    if "corpus" not in cfg:
        check_task(plain(cfg, "task"), "task")
        return
    corpus = build(CorpusConfig, plain(cfg, "corpus"), "corpus")
    gold = build(GoldSpec, plain(cfg, "task.gold"), "task.gold") if select(cfg, "task.gold") is not None else None
    check_task(plain(cfg, "task"), "task", corpus.questions_path, corpus.solutions_path,
               gold_path(gold, corpus.root_path) if gold is not None else None)


def register_config_schemas(registry: Registry | None = None) -> None:
    """Register each config group's dataclass as the Hydra schema ``<group>/<group>_schema``.

    The dataclasses are the single source of every key and default: a group's YAML options list
    ``<group>_schema`` in their defaults and set only what they change, so
    ``retrieve.top_k=8`` works on the command line, ``--cfg job`` shows every value, and a
    wrongly typed value fails at composition with the key's name. Call it before Hydra composes
    (scripts/run.py does; so do the tests).
    """
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    for group, cls in config_schemas(registry).items():
        store.store(group=group, name=f"{group}_schema", node=cls)


def config_schemas(registry: Registry | None = None) -> dict[str, type]:
    """Config group -> its dataclass, as :func:`register_config_schemas` registers them (the
    stages' groups in pipeline order, then ``task``, the competition: kohaku/tasks/spec.py, and
    ``run``, where the heavy stages run: kohaku/core/executors.py); the docs' configuration
    reference is generated from these (kohaku/tools/reference.py)."""
    from kohaku.core.executors import RunConfig
    from kohaku.tasks.spec import Task

    registry = registry or Registry()
    out: dict[str, type] = {}
    for name in registry.names:
        for key, cls in registry.get(name).configs.items():
            if "." not in key:
                out.setdefault(key, cls)
    out["task"] = Task
    out["run"] = RunConfig
    return out


def stage_graph(registry: Registry | None = None) -> list[dict[str, Any]]:
    """Every registered stage in pipeline order, as plain data: ``name``, ``inputs`` (the stages
    whose artifacts it reads), ``outputs`` (the tables it writes), ``files`` (what it copies into
    the run dir), ``config_keys`` (its cache key's config slice) and ``doc`` (its module's
    docstring). The docs' pipeline diagram and stage table are drawn from these
    (kohaku/tools/reference.py), so they follow the registry."""
    import inspect

    registry = registry or Registry()
    out = []
    for name in registry.names:
        stage = registry.get(name)
        module = inspect.getmodule(stage.compute)
        out.append({"name": stage.name, "inputs": list(stage.inputs), "outputs": list(stage.outputs),
                    "files": list(stage.run_dir_files), "config_keys": list(stage.config_keys),
                    "doc": inspect.cleandoc(module.__doc__ or "") if module else ""})
    return out


CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


def compose_config(overrides: list[str] | tuple[str, ...] = (), conf_dir: Path | None = None) -> DictConfig:
    """The run config as scripts/run.py composes it (schemas registered), for scripts and
    tests that need it outside a Hydra app."""
    from hydra import compose, initialize_config_dir

    register_config_schemas()
    with initialize_config_dir(version_base="1.3", config_dir=str(conf_dir or CONF_DIR), job_name="kohaku"):
        return compose("config", overrides=list(overrides))


def task_values(name_or_path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """A task YAML (a ``conf/task`` name or a file) as plain values, its interpolations
    (``${corpus.root}``, ``${task.name}``) resolved against the config a run composes
    (``conf/`` defaults and ``overrides`` such as ``corpus.root=/data``), as ``scripts/run.py``
    resolves them. Errors name the file and the key that does not resolve."""
    from omegaconf.errors import OmegaConfBaseException

    from kohaku.core.readfile import read_text
    from kohaku.tasks import read_task_yaml, task_file

    path = task_file(name_or_path)
    data = read_task_yaml(path)
    if "${" not in read_text(path, "task file", ConfigError):   # decoded as read_task_yaml decodes it
        return data
    root = OmegaConf.to_container(compose_config(list(overrides)), resolve=False)
    root["task"] = data  # type: ignore[index]
    try:
        return OmegaConf.to_container(OmegaConf.create(root).task, resolve=True)  # type: ignore[return-value]
    except OmegaConfBaseException as exc:
        raise ConfigError(f"{path}: an interpolation does not resolve ({exc}); give the value with "
                          "--set KEY=VALUE (e.g. --set corpus.root=/data)") from exc


def option_values(group: str, option: str, overrides: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """The resolved values of ``group=option`` (schema defaults + the option file), as a dict."""
    cfg = compose_config([f"{group}={option}", *overrides])
    return OmegaConf.to_container(cfg[group], resolve=True)  # type: ignore[return-value]
