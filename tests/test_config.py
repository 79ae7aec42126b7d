"""Every config option and every experiment composes; bad keys fail with Hydra's error."""

from __future__ import annotations

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from conftest import CONF, compose

EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
GROUPS = ["corpus", "parse", "caption", "tree", "embed", "index", "planner", "retrieve", "infer", "llm", "vote", "score"]


def test_default_config_composes_and_resolves():
    cfg = compose()
    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert resolved["stages"][0] == "parse" and resolved["stages"][-1] == "score"
    assert cfg.corpus.root.endswith("data/sample")


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_composes(name):
    cfg = compose([f"experiment={name}"], return_hydra_config=True)
    OmegaConf.to_container(cfg, resolve=False)  # every node is well-formed
    body = {k: v for k, v in cfg.items() if k != "hydra"}
    OmegaConf.to_container(OmegaConf.create(body), resolve=True)  # interpolations resolve
    # Every swept key exists: compose each sweep point's first and last value.
    params = cfg.hydra.sweeper.params or {}
    for which in (0, -1):
        point = [f"{k}={str(v).split(',')[which]}" for k, v in params.items()]
        swept = compose([f"experiment={name}", *point])
        OmegaConf.to_container(swept, resolve=True)


def test_there_are_experiments():
    assert {"kohaku_wattbot", "cpu_smoke"} <= set(EXPERIMENTS)


@pytest.mark.parametrize(
    "group,option",
    [(g, p.stem) for g in GROUPS for p in sorted((CONF / g).glob("*.yaml"))],
)
def test_every_group_option_composes(group, option):
    cfg = compose([f"{group}={option}"])
    OmegaConf.to_container(cfg, resolve=True)


def test_unknown_key_fails_with_hydra_error():
    with pytest.raises(ConfigCompositionException, match="retrieve.top_kk"):
        compose(["retrieve.top_kk=3"])


def test_local_launcher_composes():
    cfg = compose(["hydra/launcher=local"], return_hydra_config=True)
    assert cfg.hydra.launcher.n_jobs == 2
    assert "joblib" in cfg.hydra.launcher._target_.lower()


def test_run_script_accepts_plus_experiment(repo):
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, str(repo / "scripts" / "run.py"), "+experiment=cpu_smoke", "--cfg", "job"],
        capture_output=True, text=True, cwd=repo, check=True,
    ).stdout
    assert "max_context_tokens: 600" in out


def _stages():
    from kohaku.runner.pipeline import Registry

    registry = Registry()
    return [registry.get(name) for name in registry.names]


@pytest.mark.parametrize(
    "group,option",
    [(g, p.stem) for g in GROUPS if g != "llm" for p in sorted((CONF / g).glob("*.yaml"))],
)
def test_every_group_option_builds_its_dataclass(group, option):
    """Every option of every typed group composes over its schema and builds the stage's
    dataclass (validate() included): a YAML key the dataclass lacks, a wrongly typed value or
    an invalid setting fails here, not in the middle of a run."""
    import dataclasses

    cfg = compose([f"{group}={option}"])
    typed = [(s, key) for s in _stages() for key in s.configs if key == group]
    assert typed, f"no stage declares a dataclass for config group '{group}'"
    set_in_yaml = {k for k in OmegaConf.load(CONF / group / f"{option}.yaml") if k != "defaults"}
    composed = OmegaConf.to_container(cfg[group], resolve=True)
    for stage, key in typed:
        built = stage.typed(cfg, key)
        assert type(built) is stage.configs[key]
        # every key and value: the composed group is exactly the built dataclass, and a key the
        # option file leaves out carries the dataclass default
        fields = dataclasses.fields(built)
        assert set(composed) == {f.name for f in fields}, f"{group}/{option}.yaml"
        for f in fields:
            value = _plain(getattr(built, f.name))
            assert value == _plain(composed[f.name]), f"{group}/{option}.yaml: {f.name}"
            if f.name not in set_in_yaml:
                default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
                assert value == _plain(default), f"{group}/{option}.yaml: {f.name} is not the default"


def _plain(value):
    """Dataclasses as dicts and tuples as lists, to compare built values with YAML values."""
    import dataclasses

    if dataclasses.is_dataclass(value):
        value = dataclasses.asdict(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def test_group_yaml_sets_only_what_differs_from_the_dataclass():
    """The dataclass is the single source of defaults: a group's YAML options list the schema
    and set only keys whose value differs from the dataclass default (or interpolate)."""
    import dataclasses

    from omegaconf import OmegaConf

    schemas = {key: cls for s in _stages() for key, cls in s.configs.items() if "." not in key}
    for group, cls in schemas.items():
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for path in sorted((CONF / group).glob("*.yaml")):
            raw = OmegaConf.load(path)
            assert list(raw.defaults) == [f"{group}_schema", "_self_"], path.name
            for key in raw:
                if key == "defaults":
                    continue
                assert key in fields, f"{group}/{path.name}: {key} is not a field of {cls.__name__}"
                f = fields[key]
                if OmegaConf.is_interpolation(raw, key) or f.default is dataclasses.MISSING and \
                        f.default_factory is dataclasses.MISSING:
                    continue
                default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
                value = OmegaConf.to_container(raw, resolve=False)[key]
                assert value != default, f"{group}/{path.name}: {key}={value!r} repeats the default"


def test_cache_key_hashes_the_built_config_so_code_defaults_count():
    from kohaku.runner.pipeline import Registry
    from kohaku.retrieval.retrieve import RetrieveConfig

    retrieve = Registry().get("retrieve")
    cfg = compose()
    raw = OmegaConf.to_container(cfg.retrieve, resolve=True)
    sliced = retrieve.config_slice(cfg)["retrieve"]
    assert sliced["top_k"] == RetrieveConfig().top_k and sliced["separator"] == RetrieveConfig().separator
    assert set(sliced) == {f for f in RetrieveConfig.__dataclass_fields__}
    assert sliced == raw  # the schema gives the YAML every key; the slice is the built dataclass
    assert retrieve.config_slice(compose(["retrieve.top_k=8"]))["retrieve"]["top_k"] == 8
    # a slice that leaves keys out still hashes their code defaults
    bare = retrieve.config_slice(OmegaConf.create({"retrieve": {}, "embed": {}, "reranker": {},
                                                   "task": {"gold": {}}}))
    assert bare["retrieve"] == sliced and bare["embed"]["model"] == cfg.embed.model
