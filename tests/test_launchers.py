"""Every launcher config in conf/hydra/launcher composes and builds its launcher; the submitit ones
produce a valid executor (and, for SLURM, the sbatch header) without a cluster; the Ray launcher's
resource check. A launcher whose plugin is not installed is skipped (scripts/test_cluster.sh runs
these in .venv-cluster, which has them all)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from conftest import CONF, compose

# conf/hydra/launcher/ray.yaml is named like the Ray plugin's config, which Hydra then uses as its
# schema (and says so); scripts/run.py silences the same warning.
pytestmark = pytest.mark.filterwarnings(r"ignore:\s*'hydra/launcher/ray' is validated:UserWarning")

LAUNCHERS = sorted(p.stem for p in (CONF / "hydra" / "launcher").glob("*.yaml"))
# Launcher config name prefix -> the Hydra plugin module it needs.
PLUGINS = {
    "local": "hydra_plugins.hydra_joblib_launcher",
    "ray": "hydra_plugins.hydra_ray_launcher",
    "slurm": "hydra_plugins.hydra_submitit_launcher",
}


def plugin_for(name: str) -> str:
    prefix = name.split("_")[0]
    assert prefix in PLUGINS, f"conf/hydra/launcher/{name}.yaml: add its plugin to PLUGINS in this test"
    return PLUGINS[prefix]


def has_plugin(name: str) -> bool:
    return importlib.util.find_spec(plugin_for(name)) is not None


def need_plugin(name: str) -> None:
    if not has_plugin(name):
        pytest.skip(f"{plugin_for(name)} is not installed (bash scripts/setup_cluster.sh; scripts/test_cluster.sh)")


def launcher_cfg(name: str, tmp_path: Path):
    return compose([f"hydra/launcher={name}", f"hydra.sweep.dir={tmp_path / 'sweep'}"], return_hydra_config=True)


def test_every_launcher_config_is_listed():
    assert {"local", "ray", "ray_cluster", "ray_gpu", "slurm", "slurm_local"} <= set(LAUNCHERS)


@pytest.mark.parametrize("name", LAUNCHERS)
def test_launcher_config_composes_and_builds(name, tmp_path):
    from hydra.core.plugins import Plugins
    from hydra.plugins.launcher import Launcher

    if name.startswith("slurm"):  # these extend the plugin's own configs
        need_plugin(name)
    cfg = launcher_cfg(name, tmp_path)  # a config that includes itself dies here (RecursionError)
    assert cfg.hydra.sweeper._target_.endswith("KeyOrderedSweeper")
    if not has_plugin(name):  # the Ray configs compose without Ray, and say what to install
        with pytest.raises(Exception, match=r"needs the Ray extra .* pip install -e '\.\[ray\]'"):
            Plugins.instance()._instantiate(cfg.hydra.launcher)
        return
    launcher = Plugins.instance()._instantiate(cfg.hydra.launcher)  # as Hydra builds it for -m
    assert isinstance(launcher, Launcher)


@pytest.mark.parametrize("name", [n for n in LAUNCHERS if n.startswith("ray")])
def test_ray_configs_ask_for_what_they_say(name, tmp_path):
    ray = launcher_cfg(name, tmp_path).hydra.launcher.ray
    expected = {"ray": (0, 1), "ray_cluster": (0, 1), "ray_gpu": (1, 4)}[name]
    assert (ray.remote.num_gpus, ray.remote.num_cpus) == expected
    if name == "ray_cluster":
        assert ray.init.address == "auto"
        assert ray.init.object_store_memory is None  # ray.init refuses one when joining a cluster
    else:
        assert ray.init.address is None
        assert ray.init._node_ip_address == "127.0.0.1"
        assert ray.init.include_dashboard is False


def _launch_without_submitting(name, tmp_path, monkeypatch):
    """Run the submitit launcher up to the point of submitting; return the executor it built."""
    import submitit
    from hydra.utils import instantiate

    if name == "slurm":  # submitit's SLURM executor looks for srun; none is run here
        fake_bin = tmp_path / "bin"
        fake_bin.mkdir()
        (fake_bin / "srun").write_text("#!/bin/sh\nexit 1\n")
        (fake_bin / "srun").chmod(0o755)
        monkeypatch.setenv("PATH", f"{fake_bin}:{os.environ.get('PATH', '')}")
    captured = {}

    def fake_map_array(self, fn, *args):
        captured["executor"] = self
        captured["n"] = len(args[0])
        return []

    monkeypatch.setattr(submitit.AutoExecutor, "map_array", fake_map_array)
    cfg = launcher_cfg(name, tmp_path)
    launcher = instantiate(cfg.hydra.launcher)
    launcher.setup(hydra_context=None, task_function=None, config=cfg)
    assert list(launcher.launch([["a=1"], ["a=2"]], initial_job_idx=0)) == []
    assert captured["n"] == 2
    return captured["executor"]._executor


def test_slurm_defaults_are_one_gpu_per_point(tmp_path, monkeypatch):
    need_plugin("slurm")
    executor = _launch_without_submitting("slurm", tmp_path, monkeypatch)
    header = executor._make_submission_file_text("python scripts/run.py", "uid")
    for line in ("--gpus-per-node=1", "--cpus-per-task=8", "--mem=64GB", "--time=240", "--ntasks-per-node=1"):
        assert f"#SBATCH {line}\n" in header, header
    assert executor.parameters["array_parallelism"] == 16


def test_slurm_local_is_accepted_by_the_local_executor(tmp_path, monkeypatch):
    need_plugin("slurm_local")
    executor = _launch_without_submitting("slurm_local", tmp_path, monkeypatch)
    assert type(executor).__name__ == "LocalExecutor"
    assert executor.parameters["gpus_per_node"] == 0
    assert executor.parameters["timeout_min"] == 240


def test_ray_resource_check():
    from hydra_plugins.kohaku_plugins.ray_launcher import per_point_request, unmet_request

    cpu_box = [{"Alive": True, "Resources": {"CPU": 2.0, "memory": 1e10}}]
    gpu_box = [{"Alive": True, "Resources": {"CPU": 16.0, "GPU": 4.0}}, {"Alive": False, "Resources": {"GPU": 8.0}}]
    assert per_point_request({"num_cpus": 1, "num_gpus": 0}) == {"CPU": 1.0}
    assert per_point_request({}) == {"CPU": 1.0}
    gpu_point = per_point_request({"num_cpus": 4, "num_gpus": 1})
    assert gpu_point == {"CPU": 4.0, "GPU": 1.0}
    assert unmet_request(cpu_box, {"CPU": 1.0}) is None
    assert unmet_request(gpu_box, gpu_point) is None
    problem = unmet_request(cpu_box, gpu_point)
    assert problem is not None and "GPU 1" in problem and "GPU 0" in problem and "CPU 2" in problem
    # a dead node does not count
    assert unmet_request(gpu_box, {"GPU": 8.0}) is not None
