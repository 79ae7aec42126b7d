"""Content-addressed artifact cache.

An artifact is a folder ``<cache_dir>/<stage>/<key>/`` holding the stage's tables (Parquet), any
extra files it wrote, and ``manifest.json``. The manifest is written last and lists a SHA-256 of
every file, so a folder without a manifest, or whose files do not match it, is never read.

Computing a key holds an flock on ``<cache_dir>/.locks/<stage>-<key>.lock``, so concurrent sweep
points compute each artifact once; a cache whose filesystem has no working flock is refused
(``locking="warn"`` goes on without it). Writes go to a temporary sibling folder that is renamed
into place. ``os.rename`` of a folder onto a missing path is atomic on POSIX; when two workers race
for the same key, the loser finds the winner's folder in place, discards its own copy and uses
the winner's.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import socket
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from kohaku.core.errors import KohakuError

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"


def stable_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def atomic_write(target: str | os.PathLike, write: Callable[[Path], object]) -> Path:
    """Write ``target`` through ``write(tmp)`` into a temporary file beside it, then rename it
    into place: readers see the old file or the new one, never half of one. The temporary name
    is unique (hidden, pid + random), so concurrent writers of one file never share it; it is
    removed if writing fails."""
    target = Path(target)
    tmp = target.with_name(f".{target.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    try:
        write(tmp)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def artifact_key(
    stage: str,
    version: str,
    config: Any,
    inputs: dict[str, str],
    files: dict[str, str] | None = None,
) -> str:
    """The cache key: a hash of everything that determines a stage's output."""
    payload = stable_json(
        {"stage": stage, "version": version, "config": config, "inputs": inputs, "files": files or {}}
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:20]


def fingerprint_files(paths: Iterable[Path], root: Path | None = None) -> dict[str, str]:
    """Map each file (relative to ``root`` when given) to the SHA-256 of its content."""
    out: dict[str, str] = {}
    for path in sorted(Path(p) for p in paths):
        name = str(path.relative_to(root)) if root and path.is_relative_to(root) else str(path)
        out[name] = sha256_file(path) if path.is_file() else "<missing>"
    return out


class CorruptArtifact(RuntimeError):
    """An artifact folder exists but its files do not match its manifest."""


@dataclass
class Artifact:
    stage: str
    key: str
    path: Path
    manifest: dict[str, Any]


class CacheLockError(KohakuError, RuntimeError):
    """The cache's filesystem cannot take the per-artifact lock (the message names cache.dir)."""


LOCKING_MODES = ("required", "warn")


class ArtifactStore:
    """``locking``: ``required`` (a filesystem without flock is an error) or ``warn``."""

    def __init__(self, root: Path | str, verify: bool = True, locking: str = "required") -> None:
        if locking not in LOCKING_MODES:
            raise ValueError(f"cache.locking={locking!r}: use one of {', '.join(LOCKING_MODES)}")
        self.root = Path(root)
        self.verify = verify
        self.locking = locking
        self._warned = False

    def folder(self, stage: str, key: str) -> Path:
        return self.root / stage / key

    def load(self, stage: str, key: str) -> Artifact | None:
        """The artifact if present and intact; None if absent; CorruptArtifact if damaged."""
        folder = self.folder(stage, key)
        manifest_file = folder / MANIFEST
        if not manifest_file.is_file():
            return None
        try:
            manifest = json.loads(manifest_file.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise CorruptArtifact(f"{manifest_file}: unreadable manifest ({exc})") from exc
        if self.verify:
            for name, digest in manifest.get("files", {}).items():
                file = folder / name
                if not file.is_file():
                    raise CorruptArtifact(f"{file}: listed in the manifest but missing")
                if sha256_file(file) != digest:
                    raise CorruptArtifact(f"{file}: checksum does not match {MANIFEST}")
        return Artifact(stage, key, folder, manifest)

    @contextmanager
    def lock(self, stage: str, key: str) -> Iterator[None]:
        """Hold an exclusive lock on ``stage/key`` (flock on ``.locks/<stage>-<key>.lock``) while computing it.

        Sweep points on several processes or nodes rely on it to compute each artifact once. Where
        flock fails (some network filesystems) this raises :class:`CacheLockError` naming
        ``cache.dir``, unless the store was made with ``locking="warn"``: then it warns once and goes
        on unlocked (the atomic rename in ``commit`` still leaves one intact copy, but concurrent
        points may compute the same artifact twice).
        """
        locks = self.root / ".locks"
        locks.mkdir(parents=True, exist_ok=True)
        lock_file = locks / f"{stage}-{key}.lock"
        with open(lock_file, "a") as handle:
            locked = False
            try:
                fcntl.flock(handle, fcntl.LOCK_EX)
                locked = True
            except OSError as exc:
                self._no_lock(lock_file, exc)
            try:
                yield
            finally:
                if locked:
                    try:
                        fcntl.flock(handle, fcntl.LOCK_UN)
                    except OSError:  # pragma: no cover - closing the file releases it anyway
                        pass

    def _no_lock(self, lock_file: Path, exc: OSError) -> None:
        what = (
            f"cache.dir={self.root}: file locking (flock) does not work there "
            f"({exc.strerror or exc} on {lock_file})"
        )
        if self.locking == "required":
            raise CacheLockError(
                f"{what}. Sweep points sharing this cache would compute the same artifact twice or "
                "race. Put cache.dir on a filesystem with working flock (a local disk for one "
                "machine; for several nodes shared storage whose flock works across nodes, e.g. "
                "NFSv4, or Lustre mounted with -o flock), or set cache.locking=warn if only one "
                "process at a time uses this cache."
            ) from exc
        if not self._warned:
            self._warned = True
            log.warning(
                "%s; cache.locking=warn: going on without locks. Only one process at a time may use "
                "this cache, or concurrent runs will compute the same artifacts twice.", what
            )

    def scratch(self, stage: str, key: str) -> Path:
        """A fresh temporary folder next to the final location, for a stage to compute into."""
        parent = self.root / stage
        parent.mkdir(parents=True, exist_ok=True)
        tmp = parent / f".tmp-{key}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        return tmp

    def commit(
        self, stage: str, key: str, tmp: Path, manifest: dict[str, Any], replace: bool = False
    ) -> Artifact:
        """Seal ``tmp`` with a manifest (checksums of all files) and move it into place.

        An intact artifact already in place (another worker finished first) is kept and ``tmp``
        is dropped, unless ``replace`` (a forced recomputation): then the new copy wins."""
        files = {
            str(p.relative_to(tmp)): sha256_file(p)
            for p in sorted(tmp.rglob("*"))
            if p.is_file() and p.name != MANIFEST
        }
        manifest = {**manifest, "files": files, "key": key, "stage": stage}
        manifest_tmp = tmp / (MANIFEST + ".part")
        manifest_tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))
        os.replace(manifest_tmp, tmp / MANIFEST)  # the manifest is the last file written
        final = self.folder(stage, key)
        if replace:
            self.discard(stage, key)
        try:
            os.rename(tmp, final)
        except OSError:
            # Another worker committed the same key first (or a damaged copy is in the way).
            existing = self._intact(stage, key)
            if existing is not None:
                shutil.rmtree(tmp, ignore_errors=True)
                log.info("%s/%s: another process wrote this artifact first; using its copy", stage, key)
                return existing
            self.discard(stage, key)
            os.rename(tmp, final)
        return Artifact(stage, key, final, manifest)

    def _intact(self, stage: str, key: str) -> Artifact | None:
        try:
            return self.load(stage, key)
        except CorruptArtifact:
            return None

    def discard(self, stage: str, key: str) -> None:
        """Move a (damaged) artifact out of the way atomically, then delete it."""
        folder = self.folder(stage, key)
        if not folder.exists():
            return
        trash = folder.with_name(f".trash-{key}-{uuid.uuid4().hex[:8]}")
        try:
            os.rename(folder, trash)
        except OSError:
            return
        shutil.rmtree(trash, ignore_errors=True)

    def clean_scratch(self, max_age_s: float = 24 * 3600) -> int:
        """Remove temporary folders left by crashed runs (older than ``max_age_s``): scratch
        folders, and a stage's resume folder (``.partial-<key>``) no run has touched since."""
        removed = 0
        now = time.time()
        for tmp in [*self.root.glob("*/.tmp-*"), *self.root.glob("*/.partial-*")]:
            try:
                if now - tmp.stat().st_mtime > max_age_s:
                    shutil.rmtree(tmp, ignore_errors=True)
                    removed += 1
            except OSError:
                continue
        return removed
