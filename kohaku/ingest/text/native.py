"""kohaku's one compiled helper: pdfium_scan.c, the per-word and per-segment loops of the
pdfium parse engine (kohaku/ingest/text/pdfium_page.py), built on first use with the system C compiler.

Why: with PDFium doing the reading, what is left of a page's cost is Python asking PDFium for
two characters of every word and four figures of every path segment, a few million ctypes
calls on a long filing. In C those loops cost next to nothing. The C functions do exactly what
the Python loops do (same calls, same arithmetic), so the parse gives the same blocks either
way; tests/test_pdfium_native.py compares them page by page.

The library is built once per source version into ``$KOHAKU_NATIVE_DIR`` (default
``$XDG_CACHE_HOME/kohaku/native``, else ``~/.cache/kohaku/native``) with ``$CC`` (default
``cc``), ``-O2 -ffp-contract=off``, and loaded with ctypes. Without a compiler, or with
``KOHAKU_NATIVE=0``, ``library()`` is None and the Python loops run: same output, slower
(one warning says so). Nothing here is part of any cache key: it cannot change an output.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

logger = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("pdfium_scan.c")
FLAGS = ("-O2", "-shared", "-fPIC", "-ffp-contract=off")


def cache_dir() -> Path:
    if os.environ.get("KOHAKU_NATIVE_DIR"):
        return Path(os.environ["KOHAKU_NATIVE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kohaku" / "native"


def enabled() -> bool:
    return os.environ.get("KOHAKU_NATIVE", "1").strip().lower() not in ("0", "false", "no", "off")


def _built_path(compiler: str) -> Path:
    digest = hashlib.sha256()
    digest.update(SOURCE.read_bytes())
    digest.update(" ".join((compiler, *FLAGS, sys.platform, os.uname().machine if hasattr(os, "uname") else ""))
                  .encode())
    return cache_dir() / f"pdfium_scan-{digest.hexdigest()[:16]}.so"


def build(compiler: str | None = None) -> Path:
    """Compile pdfium_scan.c (if not built yet) -> the shared library's path. Raises
    RuntimeError naming the compiler and its message when it cannot."""
    cc = compiler or os.environ.get("CC") or "cc"
    exe = shutil.which(cc)
    if exe is None:
        raise RuntimeError(f"no C compiler '{cc}' on PATH (set CC, or install gcc)")
    target = _built_path(cc)
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # built beside the target and renamed into place: workers building at once never load a half-written file
    fd, tmp = tempfile.mkstemp(prefix=target.stem + ".", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        run = subprocess.run([exe, *FLAGS, "-o", tmp, str(SOURCE)], capture_output=True, text=True, timeout=120)
        if run.returncode != 0:
            raise RuntimeError(f"{cc} failed on {SOURCE.name} (rc {run.returncode}): {run.stderr.strip()[-500:]}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    for old in target.parent.glob("pdfium_scan-*.so"):  # builds of earlier sources (0.1 s to make again)
        if old != target:
            old.unlink(missing_ok=True)
    return target


@lru_cache(maxsize=1)
def library() -> ctypes.CDLL | None:
    """The loaded helper library, or None (KOHAKU_NATIVE=0, or it cannot be built: one warning)."""
    if not enabled():
        return None
    try:
        lib = ctypes.CDLL(str(build()))
    except Exception as exc:  # no compiler, a failed build, an unloadable file: the Python loops run
        logger.warning("PDF parse: the compiled loops of kohaku/ingest/text/pdfium_scan.c are unavailable (%s); "
                       "the Python loops run instead (same output, about 2x slower)", exc)
        return None
    V, I, D, P = ctypes.c_void_p, ctypes.c_int, ctypes.c_double, ctypes.c_void_p
    lib.kohaku_word_ends.restype = None
    lib.kohaku_word_ends.argtypes = [V, I, P, P, V, V, V, V, V, V, P, P, P, P, P, P, P]
    lib.kohaku_page_objects.restype = I
    lib.kohaku_page_objects.argtypes = [V, I, I, I, V, V, V, V, V, V, I, P, P, P]
    lib.kohaku_path_edges.restype = I
    lib.kohaku_path_edges.argtypes = [I, P, P, D, D, V, V, V, V, V, V, I, I, P, P]
    return lib
