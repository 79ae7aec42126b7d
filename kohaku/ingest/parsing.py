"""Parsing a corpus: its files -> ``documents`` and ``blocks`` tables.

Documents are found by their metadata id: ``pdfs/<id>.pdf``, ``corpus/<id>.json`` (the WattBot
pre-extracted format), ``<id>.md``, ``<id>.txt`` (also under ``docs/``); ``parse.priority`` says
which format wins when several exist. PDFs are read by kohaku/ingest/text/pdf.py (``parse.engine``:
PDFium's text layer, or pdfplumber; columns, font-size headings, ruled tables; OCR for pages
without a usable text layer) in page ranges by a pool of spawned workers, which a SIGINT or
SIGTERM of the run stops; JSON, Markdown and text are read directly.

A document that cannot be read (missing, zero bytes, encrypted, corrupt, no text layer, a file
without a metadata row) becomes a ``documents`` row with status ``error`` and the reason; the
run goes on and a summary of the bad documents is logged at the end.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import polars as pl
from tqdm import tqdm

from kohaku.core.config import ConfigError, available_cpus, not_keyed
from kohaku.ingest.corpus import CorpusConfig, read_metadata
from kohaku.ingest.text.clean import valid_text
from kohaku.ingest.text.figures import FigureBox, FigureOptions, png_bytes, png_size, sha256
from kohaku.ingest.text.ocr import OcrOptions, OcrUnavailable, engine_identity
from kohaku.ingest.workers import JobFailure, Limits, run_jobs

log = logging.getLogger("kohaku.parse")

FORMATS = ("pdf", "json", "md", "txt")
_EXT = {"pdf": ".pdf", "json": ".json", "md": ".md", "txt": ".txt"}

DOCUMENTS_SCHEMA = {
    "doc_id": pl.String,
    "title": pl.String,
    "url": pl.String,
    "year": pl.String,
    "type": pl.String,
    "citation": pl.String,
    "source": pl.String,
    "format": pl.String,
    "n_pages": pl.Int64,
    "n_blocks": pl.Int64,
    "status": pl.String,
    "error": pl.String,
    "warnings": pl.List(pl.String),
    # the failure may not recur (a worker died, parse.doc_timeout_s or parse.worker_memory_gb
    # passed): the next run parses the document again without force
    "retry": pl.Boolean,
}
BLOCKS_SCHEMA = {
    "doc_id": pl.String,
    "page": pl.Int64,
    "order": pl.Int64,
    "kind": pl.String,
    "text": pl.String,
    "font_size": pl.Float64,
    "level": pl.Int64,
    "source": pl.String,         # text (the file's own text) | ocr (recognised from the page image)
    "confidence": pl.Float64,    # OCR: the page's mean word confidence (0-100); null otherwise
}
# one row per figure cut from a PDF page (kohaku/ingest/text/figures.py); ``after_order`` is the
# ``order`` of the block the figure follows in reading order (-1: before the first block)
FIGURES_SCHEMA = {
    "doc_id": pl.String,
    "figure": pl.Int64,
    "page": pl.Int64,
    "bbox": pl.List(pl.Float64),
    "source": pl.String,
    "caption": pl.String,
    "after_order": pl.Int64,
    "replaces_orders": pl.List(pl.Int64),
    "sha256": pl.String,
    "width": pl.Int64,
    "height": pl.Int64,
    "image": pl.Binary,
}


def _default_search() -> dict[str, list[str]]:
    return {"pdf": ["pdfs", "docs", "."], "json": ["corpus", "docs"], "md": ["docs", "."], "txt": ["docs", "."]}


@dataclass
class ParseConfig:
    """The ``parse`` config group."""

    workers: int | None = not_keyed(None)   # PDF worker processes; null = min(4, cores available); not in the key
    # pdfium: PDFium's compiled text layer + pdfplumber's table finder on pages with ruling
    # lines (~25x faster); pdfplumber: pdfplumber for every page (kohaku/ingest/text/pdf.py)
    engine: str = "pdfium"
    # a long PDF is read in page ranges of this size, one per job (the blocks are the same
    # whatever the size: not in the key)
    pages_per_job: int = not_keyed(48)
    # which file wins when a document exists in several formats
    priority: list[str] = field(default_factory=lambda: list(FORMATS))
    # folders (relative to corpus.root) searched for <id>.<ext>, in order
    search: dict[str, list[str]] = field(default_factory=_default_search)
    tables: bool = True                 # extract ruled PDF tables as table blocks
    min_gutter: float = 8.0             # points; narrowest empty band taken as a column gutter
    heading_ratio: float = 1.12         # font size / body size from which a short line is a heading
    # figures cut from PDF pages for the caption stage (kohaku/ingest/text/figures.py)
    figures: FigureOptions = field(default_factory=FigureOptions)
    # OCR of PDF pages without a usable text layer (kohaku/ingest/text/ocr.py): mode off | auto (pages
    # that need it) | always; the engine's name, version and language are in the parse key
    ocr: OcrOptions = field(default_factory=OcrOptions)
    # seconds one parse job (a whole document, or one parse.pages_per_job page range of a PDF)
    # may run in a worker before the worker is stopped and the document fails, named; 0 = no
    # limit. Not in the key: a document that passed it is tried again on the next run
    doc_timeout_s: float = not_keyed(1800.0)
    # GiB of address space (RLIMIT_AS) each parse worker may map; an allocation past it fails
    # that document alone, named; 0 = no limit. Not in the key (like doc_timeout_s)
    worker_memory_gb: float = not_keyed(8.0)

    def validate(self) -> None:
        bad = [p for p in self.priority if p not in FORMATS]
        if bad or not self.priority:
            raise ValueError(f"priority {self.priority}: use a non-empty list of {list(FORMATS)}")
        bad = [k for k in self.search if k not in FORMATS]
        if bad:
            raise ValueError(f"search has unknown format(s) {bad}; formats are {list(FORMATS)}")
        if self.workers is not None and int(self.workers) < 1:
            raise ValueError(f"workers={self.workers}: use a positive number or null")
        from kohaku.ingest.text.pdf import ENGINES

        if self.engine not in ENGINES:
            raise ValueError(f"engine={self.engine!r}: use one of {', '.join(ENGINES)}")
        if not float(self.doc_timeout_s) >= 0:
            raise ValueError(f"doc_timeout_s={self.doc_timeout_s}: use seconds (0 = no limit)")
        if not float(self.worker_memory_gb) >= 0:
            raise ValueError(f"worker_memory_gb={self.worker_memory_gb}: use GiB (0 = no limit)")
        if int(self.pages_per_job) < 1:
            raise ValueError(f"pages_per_job={self.pages_per_job}: use 1 or more")
        self.figures.validate()
        self.ocr.validate()

    def __post_init__(self) -> None:
        if isinstance(self.figures, dict):  # rebuilt from plain values in a worker process
            self.figures = FigureOptions(**self.figures)
        if isinstance(self.ocr, dict):
            self.ocr = OcrOptions(**self.ocr)

    @property
    def n_workers(self) -> int:
        return int(self.workers) if self.workers else max(1, min(4, available_cpus()))

    @property
    def limits(self) -> Limits:
        """The per-job limits of the worker pool (a worker that dies is replaced, its job sent
        once more)."""
        timeout, memory = float(self.doc_timeout_s), float(self.worker_memory_gb)
        return Limits(timeout_s=timeout or None, memory_bytes=int(memory * 2**30) or None, tries=2)


# ----------------------------------------------------------------------- discovery


def _search_dirs(root: Path, cfg: ParseConfig, fmt: str) -> list[Path]:
    return [root / d if d not in (".", "") else root for d in cfg.search.get(fmt, [])]


def find_documents(root: Path, ids: list[str], cfg: ParseConfig) -> dict[str, list[tuple[str, Path]]]:
    """doc id -> [(format, path), ...] in priority order (all formats found)."""
    found: dict[str, list[tuple[str, Path]]] = {}
    for doc_id in ids:
        hits: list[tuple[str, Path]] = []
        for fmt in cfg.priority:
            for folder in _search_dirs(root, cfg, fmt):
                path = folder / f"{doc_id}{_EXT[fmt]}"
                if path.is_file():
                    hits.append((fmt, path))
                    break
        found[doc_id] = hits
    return found


def find_orphans(root: Path, ids: set[str], cfg: ParseConfig) -> list[tuple[str, Path]]:
    """Document files in the dedicated folders (not the root) that have no metadata row."""
    orphans: dict[str, Path] = {}
    for fmt in cfg.priority:
        for folder in _search_dirs(root, cfg, fmt):
            if folder == root or not folder.is_dir():
                continue
            for path in sorted(folder.glob(f"*{_EXT[fmt]}")):
                if path.is_file() and path.stem not in ids and path.stem not in orphans:
                    orphans[path.stem] = path
    return sorted(orphans.items())


IMAGE_DIR = "images"
IMAGE_EXTS = (".png", ".jpg", ".jpeg")
IMAGE_CAPTIONS = "captions.csv"


def image_files(root: Path) -> dict[str, list[Path]]:
    """``images/<doc_id>/*.png|jpg|jpeg`` under the corpus root: a document's figures given as
    image files (a corpus of images with metadata), by doc_id, in file-name order."""
    folder = Path(root) / IMAGE_DIR
    if not folder.is_dir():
        return {}
    out: dict[str, list[Path]] = {}
    for d in sorted(p for p in folder.iterdir() if p.is_dir()):
        files = sorted(f for f in d.iterdir() if f.is_file() and f.suffix.lower() in IMAGE_EXTS)
        if files:
            out[d.name] = files
    return out


def image_captions(root: Path, warnings: list[str]) -> dict[str, str]:
    """``images/captions.csv`` (columns ``file``, ``caption``; file relative to images/, e.g.
    ``patterson2021/fig3.png``): each image's own caption line, where the corpus has one."""
    path = Path(root) / IMAGE_DIR / IMAGE_CAPTIONS
    if not path.is_file():
        return {}
    from kohaku.ingest.corpus import CorpusError
    from kohaku.core.csvfile import read_csv_strings, require_columns

    df = read_csv_strings(path, "image captions", CorpusError, warnings)
    require_columns(df, ("file", "caption"), str(path), "image captions", CorpusError)
    return {f.strip(): c.strip() for f, c in zip(df["file"].to_list(), df["caption"].to_list()) if f}


def _image_rows(doc_id: str, files: list[Path], root: Path, captions: dict[str, str], first: int,
                after_order: int, warnings: list[str]) -> list[dict[str, Any]]:
    """Figures-table rows for a document's image files (PNG kept as it is, JPEG converted to
    PNG); an unreadable file is a warning naming it, not a crash."""
    import io

    from PIL import Image

    rows = []
    for path in files:
        rel = path.relative_to(Path(root) / IMAGE_DIR).as_posix()
        try:
            data = path.read_bytes()
            if path.suffix.lower() != ".png" or png_size(data) == (0, 0):
                with Image.open(io.BytesIO(data)) as im:
                    data = png_bytes(im)
        except Exception as exc:  # PIL raises many types for a broken file
            warnings.append(f"{IMAGE_DIR}/{rel}: cannot read the image ({type(exc).__name__}: {exc}); "
                            "it is left out of the figures table (replace or remove the file)")
            continue
        width, height = png_size(data)
        rows.append({
            "doc_id": doc_id, "figure": first + len(rows), "page": None, "bbox": [], "source": "file",
            "caption": captions.get(rel, ""), "after_order": after_order, "replaces_orders": [],
            "sha256": sha256(data), "width": width, "height": height, "image": data,
        })
    return rows


def corpus_files(corpus: CorpusConfig, cfg: ParseConfig) -> list[Path]:
    """metadata.csv and every document file found (hashed into the parse stage's key)."""
    meta_path = corpus.metadata_path
    if not meta_path.is_file():
        raise ConfigError(
            f"{meta_path}: metadata file not found (config keys corpus.root / corpus.metadata)"
        )
    ids = read_metadata(meta_path)["id"].to_list()
    files = [meta_path]
    for hits in find_documents(corpus.root_path, ids, cfg).values():
        files.extend(path for _, path in hits)
    files.extend(path for _, path in find_orphans(corpus.root_path, set(ids), cfg))
    files.extend(path for paths in image_files(corpus.root_path).values() for path in paths)
    captions = corpus.root_path / IMAGE_DIR / IMAGE_CAPTIONS
    if captions.is_file():
        files.append(captions)
    return sorted(set(files))


# ------------------------------------------------------------------------- parsing


def parse_file(fmt: str, path: Path, cfg: ParseConfig,
               figures: list[FigureBox] | None = None) -> tuple[list[dict[str, Any]], int, list[str]]:
    """One document file -> (blocks, n_pages, warnings); raises DocumentError when unreadable.
    A PDF's figures are appended to ``figures`` when it is given."""
    from kohaku.ingest.text import formats

    _check_file(path)
    if fmt == "pdf":
        from kohaku.ingest.text.pdf import read_pdf

        return read_pdf(path, _pdf_options(cfg), figures)
    if fmt == "json":
        return formats.read_json(path)
    if fmt == "md":
        return formats.read_markdown(path)
    return formats.read_text(path)


# A reader of one document file of a format -> (blocks, n_pages, warnings), raising
# DocumentError (or any exception) when it cannot; ``read_corpus(readers=...)`` puts one in place
# of the built-in reader of a format (a module-level function: workers import it by name).
Reader = Callable[[Path], "tuple[list[dict[str, Any]], int, list[str]]"]

# A job: (doc_id, format, path, config values, first page, page after the last; 0/None for a
# whole document, the reader given for the format or None). PDFs are read in page ranges
# (kohaku.ingest.text.pdf.read_pdf_part) and assembled here; other formats are read whole.
Job = tuple[str, str, str, dict[str, Any], int, "int | None", "Reader | None"]


def _job_pages(job: Job) -> int:
    """The pages a job reads (1 for a whole document: its size is not known before it is read)."""
    return job[5] - job[4] if job[5] is not None else 1


def _pdf_options(cfg: ParseConfig) -> Any:
    from kohaku.ingest.text.pdf import PdfOptions

    return PdfOptions(min_gutter=cfg.min_gutter, heading_ratio=cfg.heading_ratio, tables=cfg.tables,
                      figures=cfg.figures if cfg.figures.enabled else None, engine=cfg.engine,
                      ocr=cfg.ocr if cfg.ocr.mode != "off" else None)


def ocr_key(values: dict[str, Any]) -> dict[str, Any]:
    """The ``parse.ocr`` part of the parse key: its settings and, unless OCR is off, the
    engine's identity (name, version, language): another engine or version reads other words.
    An engine that is not installed keys as unavailable (the documents are read without it)."""
    if values.get("mode") == "off":
        return values
    try:
        identity: Any = engine_identity(OcrOptions(**values))
    except OcrUnavailable:
        identity = "unavailable"
    return {**values, "identity": identity}


def ocr_usable(cfg: ParseConfig, logger: logging.Logger) -> ParseConfig:
    """``cfg`` as the workers should run it: OCR off, with one warning naming the package to
    install, when the engine is not there (the documents keep today's behaviour: a page
    without text is named, a document without any is an error)."""
    if cfg.ocr.mode == "off":
        return cfg
    try:
        engine_identity(cfg.ocr)
    except OcrUnavailable as exc:
        logger.warning("parse.ocr.mode=%s but %s; pages without a text layer are not read", cfg.ocr.mode, exc)
        return dataclasses.replace(cfg, ocr=dataclasses.replace(cfg.ocr, mode="off"))
    return cfg


def _check_file(path: Path) -> None:
    from kohaku.ingest.text.formats import DocumentError

    if not path.is_file():
        raise DocumentError(f"file not found: {path}")
    if path.stat().st_size == 0:
        raise DocumentError("empty file (0 bytes); re-download it or remove its metadata row")


def parse_job(job: Job) -> dict[str, Any]:
    """One parse job, in whatever process runs it (module level so a spawned worker can
    import it): a PDF's page range or a whole document of another format ->
    ``{"doc_id", "error", ...}``: a PDF ``part`` or the document's ``blocks``, ``n_pages``,
    ``warnings``, ``figures``; ``error`` names why the document cannot be read. Never raises but
    MemoryError (a bad document must not stop the corpus; the pool names the memory limit)."""
    doc_id, fmt, path, cfg_values, start, stop, reader = job
    cfg = ParseConfig(**cfg_values)
    try:
        if reader is not None:
            _check_file(Path(path))
            blocks, n_pages, warnings = reader(Path(path))
            return {"doc_id": doc_id, "blocks": blocks, "n_pages": n_pages, "warnings": warnings,
                    "error": "", "figures": []}
        if fmt == "pdf":
            from kohaku.ingest.text.pdf import read_pdf_part

            _check_file(Path(path))
            part = read_pdf_part(Path(path), _pdf_options(cfg), start, stop, want_figures=cfg.figures.enabled)
            return {"doc_id": doc_id, "part": part, "error": ""}
        figures: list[FigureBox] = []
        blocks, n_pages, warnings = parse_file(fmt, Path(path), cfg, figures)
        return {"doc_id": doc_id, "blocks": blocks, "n_pages": n_pages, "warnings": warnings, "error": "",
                "figures": figures}
    except MemoryError:
        raise
    except Exception as exc:
        return {"doc_id": doc_id, "error": _error_text(exc)}


def _error_text(exc: BaseException) -> str:
    from kohaku.ingest.text.formats import DocumentError

    return str(exc) if isinstance(exc, DocumentError) else f"{type(exc).__name__}: {exc}"


def _failure_text(failure: JobFailure, job: Job, cfg: ParseConfig) -> str:
    """The documents-table error of a job the pool could not finish: the limit's config key or
    what happened to the worker, the pages of a PDF part, and what to do."""
    pages = f"pages {job[4] + 1}-{job[5]}: " if job[5] is not None else ""
    if failure.kind == "timeout":
        what = (f"over the time limit parse.doc_timeout_s={float(cfg.doc_timeout_s):g} ({failure.message}); "
                "raise the limit if the document is sound")
    elif failure.kind == "memory":
        what = (f"over the memory limit parse.worker_memory_gb={float(cfg.worker_memory_gb):g} "
                f"({failure.message}); raise the limit if the document is sound")
        if not float(cfg.worker_memory_gb):
            what = f"out of memory ({failure.message})"
    elif failure.kind == "died":
        what = f"worker died: {failure.message}"
    else:
        what = failure.message
    return f"{pages}{what}{RETRY_NOTE}" if failure.kind != "error" else pages + what


RETRY_NOTE = "; the next run tries it again"
AGAIN_NOTE = ("; it failed again when the next run retried it and is recorded as failed "
              "(force=[parse] parses the corpus once more)")


def _plan_jobs(found: dict[str, list[tuple[str, Path]]], cfg: ParseConfig, cfg_values: dict[str, Any],
               readers: dict[str, Reader] | None = None) -> tuple[list[Job], dict[str, int]]:
    """Jobs (long PDFs split into ``cfg.pages_per_job`` page ranges, the longest first so no
    document is left to run alone at the end) and the number of jobs of each document."""
    readers = readers or {}
    from kohaku.ingest.text.pdf import pdf_page_count

    jobs: list[Job] = []
    counts: dict[str, int] = {}
    step = int(cfg.pages_per_job)
    for doc_id, hits in found.items():
        if not hits:
            continue
        fmt, path = hits[0]
        n = 0
        if fmt == "pdf" and fmt not in readers:
            try:
                n = pdf_page_count(path) if path.stat().st_size else 0
            except Exception:  # unreadable: one job reports the reason
                n = 0
        ranges: list[tuple[int, int | None]] = [(a, min(a + step, n)) for a in range(0, n, step)] or [(0, None)]
        counts[doc_id] = len(ranges)
        jobs.extend((doc_id, fmt, str(path), cfg_values, a, b, readers.get(fmt)) for a, b in ranges)
    jobs.sort(key=lambda j: -_job_pages(j))
    return jobs, counts


# Runs the parse jobs elsewhere (run.executor=ray: kohaku.core.executors.RaySession.map): gets
# a function and its items (here: batches of jobs, parse_batch), yields (item, its result or the
# exception that lost it)
MapJobs = Callable[[Callable[[Any], Any], list[Any]], Iterable[tuple[Any, Any]]]

# Ray parse tasks per task slot of the cluster: each task starts one child process (its imports:
# about a second; docs/guides/ray-cluster.md has the figures), so few tasks a slot keep that
# cost small, and more than one lets a slot whose tasks finish early take another's
RAY_TASKS_PER_SLOT = 2


def ray_batches(jobs: list[Job], slots: int) -> list[list[Job]]:
    """The jobs dealt round-robin into RAY_TASKS_PER_SLOT tasks a slot (the jobs come largest
    first, so the tasks get about equal pages); never more tasks than jobs."""
    if not jobs:
        return []
    n = min(len(jobs), RAY_TASKS_PER_SLOT * max(1, int(slots)))
    return [jobs[k::n] for k in range(n)]


def parse_batch(batch: tuple[list[Job], Limits]) -> list[dict[str, Any] | JobFailure]:
    """Run a batch of parse jobs as the local pool does (kohaku/ingest/workers.py, one worker:
    a child process with the address-space limit, stopped past the time limit, replaced when it
    dies) -> each job's result, or the JobFailure that ended it (the Ray task behind
    run.executor=ray: the same per-document isolation and limits as locally)."""
    jobs, limits = batch
    results: list[dict[str, Any] | JobFailure | None] = [None] * len(jobs)

    def take(index: int, res: dict[str, Any] | JobFailure) -> None:
        results[index] = res

    run_jobs(jobs, parse_job, 1, limits, take, name="parse",
             describe=lambda job: f"document {job[0]} ({Path(job[2]).name})")
    return results  # type: ignore[return-value]


class Checkpoint:
    """The documents a parse has read so far, one JSON file each in ``folder`` (written as each
    document is read: its blocks, warnings and figures, their PNG in base64; no pickles), so a
    parse killed in the middle (the run's own process: SIGKILL, power loss) resumes from them.
    A failure that may not recur is not kept (the resumed parse tries it). The folder belongs to
    one corpus and configuration (the parse stage uses ``.partial-<key>`` beside its artifacts)
    and is removed once the parse is complete."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def _file(self, doc_id: str) -> Path:
        import hashlib

        return self.folder / f"{hashlib.sha256(doc_id.encode('utf-8', 'surrogatepass')).hexdigest()[:24]}.json"

    def get(self, doc_id: str) -> dict[str, Any] | None:
        """The document's result when a parse kept it (None when not, or unreadable)."""
        import base64
        import json

        try:
            data = json.loads(self._file(doc_id).read_text(encoding="utf-8"))
            if data["doc_id"] != doc_id:
                return None
            data["figures"] = [FigureBox(**{**f, "png": base64.b64decode(f["png"]) if f["png"] else None})
                               for f in data["figures"]]
            return data
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def put(self, res: dict[str, Any]) -> None:
        import base64
        import json

        from kohaku.core.artifacts import atomic_write

        if res.get("retry"):
            return
        keep = ("page", "kind", "text", "font_size", "level", "source", "confidence")
        data = {
            "doc_id": res["doc_id"], "n_pages": res.get("n_pages") or 0, "error": res["error"],
            "warnings": list(res.get("warnings") or []),
            "blocks": [{k: b.get(k) for k in keep} for b in res.get("blocks") or []],
            "figures": [{**dataclasses.asdict(f), "png": base64.b64encode(f.png).decode() if f.png else None}
                        for f in res.get("figures") or []],
        }
        self.folder.mkdir(parents=True, exist_ok=True)
        text = json.dumps(data)
        atomic_write(self._file(res["doc_id"]), lambda tmp: tmp.write_text(text, encoding="utf-8"))

    def clear(self) -> None:
        import shutil

        shutil.rmtree(self.folder, ignore_errors=True)


def _run_jobs(jobs: list[Job], counts: dict[str, int], cfg: ParseConfig, workers: int,
              checkpoint: Checkpoint | None = None, map_jobs: MapJobs | None = None,
              map_slots: int = 1) -> dict[str, dict[str, Any]]:
    """Run the jobs (by ``map_jobs`` when given: a Ray cluster; else in worker processes,
    kohaku/ingest/workers.py, when ``workers`` > 1: a worker that dies or passes a limit costs
    its own document only) -> one result per document:
    PDF parts assembled in page order. ``retry`` marks a failure that may not recur (a worker
    died, a limit was passed)."""
    from kohaku.ingest.text.pdf import assemble_pdf

    parts: dict[str, list[dict[str, Any]]] = {}
    results: dict[str, dict[str, Any]] = {}
    opts = _pdf_options(cfg)
    engine: Counter = Counter()

    def done(res: dict[str, Any]) -> None:
        results[res["doc_id"]] = res
        if checkpoint is not None:
            checkpoint.put(res)

    def take(res: dict[str, Any]) -> None:
        doc_id = res["doc_id"]
        if "part" not in res and "blocks" in res:   # a whole non-PDF document
            done(res)
            return
        got = parts.setdefault(doc_id, [])
        got.append(res)
        if len(got) < counts[doc_id]:
            return
        del parts[doc_id]
        for r in got:
            if r.get("part") is not None:
                engine["pages"] += len(r["part"].pages)
                engine.update(r["part"].engine)
        errors = [r for r in got if r["error"]]
        if errors:
            first = next((r for r in errors if r.get("retry")), errors[0])
            done({"doc_id": doc_id, "blocks": [], "n_pages": 0, "warnings": [],
                  "error": first["error"], "figures": [], "retry": bool(first.get("retry"))})
            return
        figures: list[FigureBox] = []
        try:
            blocks, n_pages, warnings = assemble_pdf([r["part"] for r in got], opts,
                                                     figures if cfg.figures.enabled else None)
            done({"doc_id": doc_id, "blocks": blocks, "n_pages": n_pages, "warnings": warnings,
                  "error": "", "figures": figures})
        except Exception as exc:
            done({"doc_id": doc_id, "blocks": [], "n_pages": 0, "warnings": [],
                  "error": _error_text(exc), "figures": []})

    total = sum(_job_pages(j) for j in jobs)
    if cfg.engine == "pdfium" and any(j[1] == "pdf" for j in jobs):
        from kohaku.ingest.text import native

        native.library()   # built here once (or its warning given once), not by every worker
    bar = tqdm(total=total, desc="parse", unit="page", disable=total < 50)
    limits = cfg.limits

    def failed(job: Job, res: JobFailure) -> dict[str, Any]:
        return {"doc_id": job[0], "error": _failure_text(res, job, cfg), "retry": res.kind != "error"}

    def take_job(job: Job, res: dict[str, Any] | JobFailure) -> None:
        take(failed(job, res) if isinstance(res, JobFailure) else res)
        bar.update(_job_pages(job))

    def take_pooled(index: int, res: dict[str, Any] | JobFailure) -> None:
        take_job(jobs[index], res)

    try:
        if map_jobs is not None:
            batches = [(batch, limits) for batch in ray_batches(jobs, map_slots)]
            for (batch, _), got in map_jobs(parse_batch, batches):
                for k, job in enumerate(batch):
                    res = got if isinstance(got, BaseException) else got[k]
                    if isinstance(res, BaseException):  # its Ray worker lost on every try: may not recur
                        res = {"doc_id": job[0], "error": f"worker failed: {type(res).__name__}: {res}{RETRY_NOTE}",
                               "retry": True}
                    take_job(job, res)
        elif workers <= 1 or not jobs:
            for job in jobs:
                try:
                    res = parse_job(job)
                except MemoryError:
                    res = {"doc_id": job[0], "error": f"out of memory (MemoryError){RETRY_NOTE}", "retry": True}
                take(res)
                bar.update(_job_pages(job))
        else:
            run_jobs(jobs, parse_job, min(workers, len(jobs)), limits, take_pooled, name="parse",
                     describe=lambda job: f"document {job[0]} ({Path(job[2]).name})")
    finally:
        bar.close()
    if engine["pages"]:
        log.info("PDF pages read: %d (engine %s); pdfplumber asked for ruled tables on %d, opened %d",
                 engine["pages"], cfg.engine, engine["table_pages"], engine["plumber_pages"])
    return results


def parse_corpus(
    root: Path, metadata: pl.DataFrame, cfg: ParseConfig
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Parse every document of ``metadata`` under ``root`` -> (documents, blocks)."""
    documents, blocks, _ = read_corpus(root, metadata, cfg)
    return documents, blocks


def read_corpus(
    root: Path, metadata: pl.DataFrame, cfg: ParseConfig, readers: dict[str, Reader] | None = None,
    only: set[str] | None = None, checkpoint: Checkpoint | None = None, map_jobs: MapJobs | None = None,
    map_slots: int = 1,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Parse every document of ``metadata`` under ``root`` -> (documents, blocks, figures).
    ``readers``: format -> a reader used in place of the built-in one; ``only``: parse these
    documents alone (their rows only; no rows for files metadata.csv does not list);
    ``checkpoint``: each document is kept there as it is read, and the documents an interrupted
    parse kept there are not read again; ``map_jobs``: runs the parse jobs elsewhere (a Ray
    cluster: kohaku.core.executors, of ``map_slots`` task slots, which the jobs are dealt into
    tasks to fill), the tables are the same.
    A documents row with ``retry`` true failed for a cause that may not recur."""
    root = Path(root)
    if only is not None:
        metadata = metadata.filter(pl.col("id").is_in(sorted(only)))
    ids = metadata["id"].to_list()
    found = find_documents(root, ids, cfg)
    cfg = ocr_usable(cfg, log)
    cfg_values = dataclasses.asdict(cfg)
    kept: dict[str, dict[str, Any]] = {}
    if checkpoint is not None:
        kept = {d: r for d, hits in found.items() if hits for r in [checkpoint.get(d)] if r is not None}
        if kept:
            log.info("parse: %d document(s) reused from an interrupted parse (%s), %d to read",
                     len(kept), checkpoint.folder, sum(1 for d, h in found.items() if h and d not in kept))
    todo = {d: hits for d, hits in found.items() if d not in kept}
    jobs, counts = _plan_jobs(todo, cfg, cfg_values, readers)
    results = {**kept, **_run_jobs(jobs, counts, cfg, cfg.n_workers, checkpoint, map_jobs, map_slots)}

    doc_rows: list[dict[str, Any]] = []
    block_tables: list[pl.DataFrame] = []    # one a document, each checked on its own
    figure_tables: list[pl.DataFrame] = []
    images = image_files(root) if cfg.figures.enabled else {}
    caption_warnings: list[str] = []
    captions = image_captions(root, caption_warnings) if images else {}
    for meta in metadata.iter_rows(named=True):
        doc_id = meta["id"]
        hits = found[doc_id]
        row = {
            "doc_id": doc_id, "title": meta["title"], "url": meta["url"], "year": meta["year"],
            "type": meta["type"], "citation": meta["citation"], "source": "", "format": "",
            "n_pages": 0, "n_blocks": 0, "status": "error", "error": "", "warnings": [], "retry": False,
        }
        if not hits and doc_id in images:  # a document given only as its figures
            warnings = list(caption_warnings)
            rows = _image_rows(doc_id, images[doc_id], root, captions, 1, -1, warnings)
            row.update(source=f"{IMAGE_DIR}/{doc_id}", format="images", warnings=warnings)
            if not rows:
                row["error"] = f"no readable image in {IMAGE_DIR}/{doc_id}"
            else:
                try:
                    figure_tables.append(document_table(rows, FIGURES_SCHEMA, "figure"))
                    row["status"] = "warning" if warnings else "ok"
                except BadValue as exc:
                    row["error"] = str(exc)
            doc_rows.append(_valid_row(row))
            continue
        if not hits:
            looked = ", ".join(
                str((d.relative_to(root) if d != root else Path(".")) / f"{doc_id}{_EXT[f]}")
                for f in cfg.priority for d in _search_dirs(root, cfg, f)
            )
            row["error"] = (f"no document file found (looked for {looked}); add the file or remove "
                            "the metadata row")
            doc_rows.append(_valid_row(row))
            continue
        fmt, path = hits[0]
        res = results[doc_id]
        row.update(source=_rel(path, root), format=fmt, n_pages=int(res["n_pages"] or 0))
        warnings = list(res["warnings"])
        if len(hits) > 1:
            others = ", ".join(_rel(p, root) for _, p in hits[1:])
            warnings.append(f"also found {others}; used {_rel(path, root)} (parse.priority)")
        if res["error"]:
            row["error"] = res["error"]
            row["retry"] = bool(res.get("retry"))
        else:
            kept = [k for k, b in enumerate(res["blocks"]) if (b.get("text") or "").strip()]
            blocks = [res["blocks"][k] for k in kept]
            doc_figures = _figure_rows(doc_id, res.get("figures") or [], kept)
            if doc_id in images:  # image files of the document: after its text
                doc_figures += _image_rows(doc_id, images[doc_id], root, captions, len(doc_figures) + 1,
                                           len(blocks) - 1, warnings)
            block_rows = [{
                "doc_id": doc_id, "page": b.get("page") or 1, "order": i, "kind": b.get("kind") or "text",
                "text": b["text"], "font_size": b.get("font_size"), "level": b.get("level"),
                "source": b.get("source") or "text", "confidence": b.get("confidence"),
            } for i, b in enumerate(blocks)]
            if not blocks:
                row["error"] = "no text extracted"
            else:
                # a value the table cannot hold (text UTF-8 cannot encode, a page that is no
                # number) fails this document alone, named; the rest of the corpus is kept
                try:
                    tables = (document_table(block_rows, BLOCKS_SCHEMA, "block"),
                              document_table(doc_figures, FIGURES_SCHEMA, "figure"))
                except BadValue as exc:
                    row["error"] = f"{exc}; the document is left out, the rest of the corpus is parsed"
                else:
                    block_tables.append(tables[0])
                    figure_tables.append(tables[1])
                    row["n_blocks"] = len(blocks)
                    row["status"] = "warning" if warnings else "ok"
        row["warnings"] = warnings
        doc_rows.append(_valid_row(row))
    for doc_id in sorted(set(images) - set(ids)) if only is None else ():
        doc_rows.append(_orphan_row(doc_id, f"{IMAGE_DIR}/{doc_id}", "images", "image folder"))
    for doc_id, path in find_orphans(root, set(ids), cfg) if only is None else ():
        doc_rows.append(_orphan_row(doc_id, _rel(path, root), path.suffix.lstrip("."), "file"))
    documents = pl.DataFrame(doc_rows, schema=DOCUMENTS_SCHEMA).sort("doc_id")
    blocks = pl.concat([pl.DataFrame(schema=BLOCKS_SCHEMA), *block_tables]).sort(["doc_id", "order"])
    figures = pl.concat([pl.DataFrame(schema=FIGURES_SCHEMA), *figure_tables]).sort(["doc_id", "figure"])
    return documents, blocks, figures


def reread_corpus(
    root: Path, metadata: pl.DataFrame, cfg: ParseConfig,
    previous: tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame], readers: dict[str, Reader] | None = None,
    map_jobs: MapJobs | None = None, map_slots: int = 1,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, list[str]]:
    """``previous`` (documents, blocks, figures of this corpus and config) with the documents
    whose ``retry`` is true parsed again and every other row kept -> (documents, blocks,
    figures, the ids parsed again). A document that fails again for a cause that may not recur is
    recorded as failed (``retry`` false), so the run after this one reuses the tables."""
    documents, blocks, figures = previous
    again = sorted(documents.filter(pl.col("retry"))["doc_id"].to_list())
    new_docs, new_blocks, new_figures = read_corpus(root, metadata, cfg, readers, only=set(again),
                                                       map_jobs=map_jobs, map_slots=map_slots)
    new_docs = new_docs.with_columns(
        error=pl.when(pl.col("retry")).then(pl.col("error").str.replace(RETRY_NOTE, "", literal=True) + AGAIN_NOTE)
        .otherwise(pl.col("error")),
        retry=pl.lit(False),
    )
    kept = pl.col("doc_id").is_in(again).not_()
    return (pl.concat([documents.filter(kept), new_docs]).sort("doc_id"),
            pl.concat([blocks.filter(kept), new_blocks]).sort(["doc_id", "order"]),
            pl.concat([figures.filter(kept), new_figures]).sort(["doc_id", "figure"]),
            again)


class BadValue(ValueError):
    """A document's row holds a value its table cannot take."""


def document_table(rows: list[dict[str, Any]], schema: dict[str, Any], what: str) -> pl.DataFrame:
    """One document's rows as a table of ``schema``; BadValue naming the first row, its page
    and column that the table refuses (and why) when one does."""
    try:
        return pl.DataFrame(rows, schema=schema)
    except Exception as exc:
        for k, r in enumerate(rows):
            for column in schema:
                try:
                    pl.DataFrame([{column: r.get(column)}], schema={column: schema[column]})
                except Exception as cell:
                    page = f" (page {r['page']})" if "page" in r else ""
                    raise BadValue(f"{what} {k}{page}, column {column}: {type(cell).__name__}: "
                                   f"{valid_text(str(cell))[:200]}") from exc
        raise BadValue(f"{what} rows: {type(exc).__name__}: {valid_text(str(exc))[:200]}") from exc


def _valid_row(row: dict[str, Any]) -> dict[str, Any]:
    """A documents row whose texts (metadata, errors, warnings that quote a document) UTF-8 can
    encode."""
    return {k: valid_text(v) if isinstance(v, str) else [valid_text(w) for w in v] if isinstance(v, list) else v
            for k, v in row.items()}


def _orphan_row(doc_id: str, source: str, fmt: str, what: str) -> dict[str, Any]:
    """The documents row of a corpus file or image folder that metadata.csv does not list."""
    return {
        "doc_id": doc_id, "title": "", "url": "", "year": "", "type": "", "citation": "",
        "source": source, "format": fmt, "n_pages": 0, "n_blocks": 0, "status": "error",
        "error": f"{what} has no row in metadata.csv; add one (id,type,title,year,citation,url) to include it",
        "warnings": [], "retry": False,
    }


def _figure_rows(doc_id: str, figures: list[FigureBox], kept: list[int]) -> list[dict[str, Any]]:
    """Rows of the figures table; a figure's anchor (an index into the reader's blocks) becomes
    the ``order`` of the kept block it follows."""
    from bisect import bisect_right

    position = {block: order for order, block in enumerate(kept)}
    rows = []
    for n, fig in enumerate(sorted(figures, key=lambda f: (f.page, f.top, f.x0)), start=1):
        data = fig.png or b""
        width, height = png_size(data)
        rows.append({
            "doc_id": doc_id, "figure": n, "page": int(fig.page),
            "bbox": [round(float(v), 2) for v in fig.bbox], "source": fig.source,
            "caption": fig.caption, "after_order": bisect_right(kept, fig.anchor) - 1,
            "replaces_orders": [position[i] for i in fig.replaces if i in position],
            "sha256": sha256(data), "width": width, "height": height, "image": data,
        })
    return rows


def _rel(path: Path, root: Path) -> str:
    try:
        return str(Path(path).relative_to(root))
    except ValueError:
        return str(path)


def log_summary(documents: pl.DataFrame, logger: logging.Logger) -> None:
    counts = {s: documents.filter(pl.col("status") == s).height for s in ("ok", "warning", "error")}
    logger.info(
        "parsed %d documents: %d ok, %d with warnings, %d failed",
        documents.height, counts["ok"], counts["warning"], counts["error"],
    )
    for row in documents.filter(pl.col("status") != "ok").iter_rows(named=True):
        if row["status"] == "error":
            logger.warning("document %s (%s): %s", row["doc_id"], row["source"] or "-", row["error"])
        else:
            for w in row["warnings"]:
                logger.warning("document %s (%s): %s", row["doc_id"], row["source"], w)


def document_problems(documents: pl.DataFrame) -> dict[str, Any]:
    """``{"what": "documents", "count": N, "items": ["id (source): reason", ...]}`` for the
    documents with status error or warning (the runner lists them at the end of the run)."""
    bad = documents.filter(pl.col("status") != "ok").sort(["status", "doc_id"])
    items = []
    for row in bad.iter_rows(named=True):
        reason = row["error"] if row["status"] == "error" else "; ".join(row["warnings"])
        where = f" ({row['source']})" if row["source"] else ""
        items.append(f"{row['doc_id']}{where} {row['status']}: {reason}")
    return {"what": "documents", "count": bad.height, "items": items}


def parse_summary(documents: pl.DataFrame, blocks: pl.DataFrame,
                  figures: pl.DataFrame | None = None) -> dict[str, Any]:
    """The parse stage's figures: counts by status and format, and the problem list (and the
    number of figures cut from PDF pages, by source, when ``figures`` is given)."""
    problems = document_problems(documents)
    extra: dict[str, Any] = {}
    if figures is not None:
        extra = {"n_figures": figures.height,
                 "figure_sources": dict(sorted(Counter(figures["source"].to_list()).items()))}
    return {**extra,
        "n_documents": documents.height,
        "n_ok": documents.filter(pl.col("status") == "ok").height,
        "n_warning": documents.filter(pl.col("status") == "warning").height,
        "n_error": documents.filter(pl.col("status") == "error").height,
        "n_problems": problems["count"],
        "n_blocks": blocks.height,
        "formats": dict(sorted(Counter(f for f in documents["format"].to_list() if f).items())),
        "problems": problems,
        # failed for a cause that may not recur: the next run parses these again (the runner)
        "retry": sorted(documents.filter(pl.col("retry"))["doc_id"].to_list()),
    }
