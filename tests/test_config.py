"""Every config option and every experiment composes; bad keys fail with Hydra's error."""

from __future__ import annotations

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from conftest import CONF, compose

EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
GROUPS = ["corpus", "parse", "tree", "embed", "index", "planner", "retrieve", "infer", "llm", "vote", "score"]


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
