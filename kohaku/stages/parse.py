"""parse stage: corpus files -> ``documents``, ``blocks`` and ``figures`` (kohaku.ingest.parsing).

A document that cannot be read becomes a ``documents`` row with status ``error`` and the
reason; the run goes on and the bad documents are listed at the end of the run. A document that
failed for a cause that may not recur (its worker died, a limit was passed) is in the summary's
``retry`` list: the next run parses it again and keeps every other document's rows. Each document
is kept in ``<cache.dir>/parse/.partial-<key>`` as it is read, so a run killed mid-parse resumes.
"""

from __future__ import annotations

import time
from pathlib import Path

import polars as pl
from omegaconf import DictConfig

from kohaku.ingest.corpus import CorpusConfig, read_metadata
from kohaku.ingest.parsing import (Checkpoint, ParseConfig, Reader, corpus_files, log_summary, ocr_key,
                                   parse_summary, read_corpus, reread_corpus)
from kohaku.runner.stage import Stage, StageContext

CONFIGS = {"corpus": CorpusConfig, "parse": ParseConfig}


def compute(ctx: StageContext, readers: dict[str, Reader] | None = None) -> dict[str, pl.DataFrame]:
    """``readers``: format -> a reader in place of the built-in one (tests give hostile ones)."""
    corpus: CorpusConfig = ctx.config("corpus")
    metadata_warnings: list[str] = []
    metadata = read_metadata(corpus.metadata_path, metadata_warnings)
    ray = ctx.ray()  # run.executor=ray: the parse jobs as Ray tasks (the same tables)
    map_jobs = ray.map if ray else None
    slots = ray.slots if ray else 1   # the parse jobs are dealt into tasks to fill these
    t0 = time.perf_counter()
    if ctx.previous is not None:
        previous = tuple(pl.read_parquet(ctx.previous / f"{name}.parquet")
                         for name in ("documents", "blocks", "figures"))
        documents, blocks, figures, again = reread_corpus(corpus.root_path, metadata, ctx.config("parse"),
                                                          previous, readers, map_jobs, slots)  # type: ignore[arg-type]
        ctx.log.info("parse: %d document(s) parsed again (they failed last time for a cause that may not "
                     "recur), %d reused from the cached tables", len(again), documents.height - len(again))
    else:
        # each document kept as it is read: a run killed mid-parse resumes from them
        checkpoint = Checkpoint(ctx.partial_dir) if ctx.partial_dir is not None else None
        documents, blocks, figures = read_corpus(corpus.root_path, metadata, ctx.config("parse"), readers,
                                                 checkpoint=checkpoint, map_jobs=map_jobs,
                                                 map_slots=slots)
        if checkpoint is not None:
            checkpoint.clear()   # complete: the artifact holds it all
    seconds = time.perf_counter() - t0
    log_summary(documents, ctx.log)
    if documents.height and documents.filter(pl.col("status") != "error").height == 0:
        ctx.log.error("no document of %s could be read; every answer will be blank", corpus.root_path)
    ctx.report(**parse_summary(documents, blocks, figures), metadata_warnings=metadata_warnings,
               executor="ray" if ray else "local", parse_seconds=round(seconds, 3),
               pages_per_s=round(int(documents["n_pages"].sum() or 0) / seconds, 1) if seconds else None)
    if figures.height:
        ctx.log.info("%d figures cut from the PDF pages", figures.height)
    return {"documents": documents, "blocks": blocks, "figures": figures}


def files(cfg: DictConfig) -> list[Path]:
    """file_inputs: metadata.csv and every document file found."""
    return corpus_files(STAGE.typed(cfg, "corpus"), STAGE.typed(cfg, "parse"))


STAGE = Stage(
    name="parse",
    version="6",  # 2: problems in the summary, advice in the error texts; 3: the figures table;
    # 4: words split at font-relative gaps, captioned gridded charts are figures, replaces_orders;
    # 5: parse.engine (pdfium), OCR (blocks' source and confidence), pages without text named;
    # 6: documents' retry column (a worker died or a limit was passed), the summary's retry list
    inputs=(),
    config_keys=("corpus.root", "corpus.metadata", "parse"),  # the key ignores the questions file
    compute=compute,
    file_inputs=files,
    outputs=("documents", "blocks", "figures"),
    configs=CONFIGS,
    key_functions=(("parse.ocr", ocr_key),),
)
