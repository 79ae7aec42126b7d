#!/usr/bin/env python
"""Parse speed beside the PDF text layer's own speed, on the same files in the same run.

    python scripts/bench_parse.py outputs/data/financebench            # a corpus root (metadata.csv)
    python scripts/bench_parse.py ROOT --engines pdfium pdfplumber --workers 1 2
    python scripts/bench_parse.py ROOT --save outputs/bench/parse      # keep each engine's blocks
    python scripts/bench_parse.py ROOT --baseline outputs/bench/parse/pdfplumber-w1
    python scripts/bench_parse.py ROOT --ocr tests/data/ocr/*.pdf   # + OCR pages/s per worker
    python scripts/bench_parse.py ROOT --rounds 3           # ratios per round, and their median

For each engine and worker count it runs kohaku's parse (kohaku.ingest.parsing.read_corpus: layout,
tables, figures) on every PDF of the corpus and prints pages/s and pages/s per worker beside the
raw text layer's rate (PDFium reading each page's text, nothing else: the floor no parser goes
below), measured before and after in the same run; then the tree each parse gives (sentences,
short sentences, median paragraph, heading sections, tables, figures, documents lost, pages
without text). ``--baseline DIR`` compares the blocks with a saved run's (kind, text, page,
order). With several workers, the raw rate is also read by as many processes at once, and each
worker's rate is shown beside one such process's ("raw per process"). Timings on a busy
machine are upper bounds: compare within one run (ratios); with
``--rounds N`` the raw rate and the parse runs alternate N times, each ratio is taken against
its own round's raw rate and the median is printed as round 0.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path


import polars as pl  # noqa: E402

from kohaku.ingest.corpus import read_metadata  # noqa: E402
from kohaku.core.config import available_cpus  # noqa: E402
from kohaku.ingest.parsing import ParseConfig, find_documents, read_corpus  # noqa: E402
from kohaku.ingest.tree import TreeConfig, build_tree, corpus_report  # noqa: E402


def pdf_paths(root: Path, metadata: pl.DataFrame) -> list[Path]:
    found = find_documents(root, metadata["id"].to_list(), ParseConfig())
    return [hits[0][1] for hits in found.values() if hits and hits[0][0] == "pdf"]


def raw_text_rate(paths: list[Path]) -> tuple[int, float]:
    """(pages, seconds) to read every page's text with PDFium, one process."""
    import pypdfium2 as pdfium

    pages = 0
    t0 = time.perf_counter()
    for path in paths:
        pdf = pdfium.PdfDocument(str(path))
        try:
            for page in pdf:
                textpage = page.get_textpage()
                textpage.get_text_range()
                textpage.close()
                page.close()
                pages += 1
        finally:
            pdf.close()
    return pages, time.perf_counter() - t0


def _raw_pages(paths: list[str]) -> int:
    return raw_text_rate([Path(p) for p in paths])[0]


def raw_text_rate_parallel(paths: list[Path], processes: int) -> tuple[int, float]:
    """(pages, seconds) to read every page's text with PDFium in ``processes`` processes at once
    (the files dealt out longest first; the pool started and warmed before the clock starts):
    what one worker's share of the machine reads when that many read together."""
    import multiprocessing

    sizes = {p: p.stat().st_size for p in paths}
    groups: list[list[str]] = [[] for _ in range(processes)]
    load = [0] * processes
    for p in sorted(paths, key=lambda p: -sizes[p]):
        k = load.index(min(load))
        groups[k].append(str(p))
        load[k] += sizes[p]
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        pool.map(_raw_pages, [[] for _ in range(processes)])   # started and imported
        t0 = time.perf_counter()
        pages = sum(pool.map(_raw_pages, groups))
        return pages, time.perf_counter() - t0


def tree_stats(documents: pl.DataFrame, blocks: pl.DataFrame, figures: pl.DataFrame) -> dict[str, object]:
    nodes = build_tree(documents, blocks, TreeConfig()) if blocks.height else None
    report = corpus_report(nodes) if nodes is not None else {}
    no_text = [f"{row['doc_id']}: {w}" for row in documents.iter_rows(named=True) for w in row["warnings"]
               if "no text layer" in w]
    return {
        "documents_ok": documents.filter(pl.col("status") != "error").height,
        "documents_lost": documents.filter(pl.col("status") == "error")["doc_id"].to_list(),
        "pages_without_text": no_text,
        "headings": blocks.filter(pl.col("kind") == "heading").height,
        "tables": blocks.filter(pl.col("kind") == "table").height,
        "figures": figures.height,
        "blocks": blocks.height,
        **{k: report.get(k) for k in ("n_sections", "n_paragraphs", "n_sentences", "short_sentence_share",
                                      "median_paragraph_chars", "multi_section_doc_share")},
    }


def compare_blocks(new: pl.DataFrame, old: pl.DataFrame) -> dict[str, object]:
    """How many of the old run's blocks (kind, page, text) the new run has, document by document,
    and how many documents have exactly the same block list (kind, text, page, order)."""
    keys = ["doc_id", "kind", "page", "text"]
    same_docs = 0
    docs = sorted(set(old["doc_id"].to_list()) | set(new["doc_id"].to_list()))
    for doc in docs:
        a = old.filter(pl.col("doc_id") == doc).sort("order").select(keys[1:] + ["order"])
        b = new.filter(pl.col("doc_id") == doc).sort("order").select(keys[1:] + ["order"])
        same_docs += int(a.equals(b))
    kept = old.select(keys).join(new.select(keys).unique(), on=keys, how="semi").height
    return {"old_blocks": old.height, "new_blocks": new.height, "old_blocks_found": kept,
            "documents_identical": f"{same_docs}/{len(docs)}"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", help="corpus root with metadata.csv and the PDFs (kohaku's corpus layout)")
    parser.add_argument("--engines", nargs="+", default=["pdfium"], choices=["pdfium", "pdfplumber"])
    parser.add_argument("--workers", nargs="+", type=int, default=[1], help="parse.workers values to time")
    parser.add_argument("--no-figures", action="store_true", help="parse.figures.enabled=false")
    parser.add_argument("--ocr-mode", default="off", choices=["off", "auto", "always"],
                        help="parse.ocr.mode of the timed runs (off: the text layer's parse alone; --ocr times OCR)")
    parser.add_argument("--save", default="", help="folder to write each run's documents/blocks parquet into")
    parser.add_argument("--baseline", default="", help="a saved run's folder (--save) to compare blocks with")
    parser.add_argument("--rounds", type=int, default=1,
                        help="repeat raw rate + parse runs; each ratio against its own round's raw rate, "
                             "the median printed as round 0")
    parser.add_argument("--ocr", nargs="*", default=[], metavar="PDF",
                        help="PDFs whose every page is recognised (parse.ocr.mode=always): OCR pages/s per worker")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    root = Path(args.root)
    metadata = read_metadata(root / "metadata.csv")
    paths = pdf_paths(root, metadata)
    print(f"{len(paths)} PDFs under {root}; {available_cpus()} cores; load {os.getloadavg()[0]:.1f}")
    rows = []
    runs: dict[str, tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]] = {}
    # each round: the raw text rate, every parse run, the raw rate again; a run's ratio is taken
    # against its own round's raw rate (the machine's speed drifts between rounds)
    raw_rates: list[float] = []
    for r in range(args.rounds):
        pages, raw_s = raw_text_rate(paths)
        round_rows = []
        for engine in args.engines:
            for workers in args.workers:
                cfg = ParseConfig(engine=engine, workers=workers)
                cfg.ocr.mode = args.ocr_mode
                if args.no_figures:
                    cfg.figures.enabled = False
                t0 = time.perf_counter()
                documents, blocks, figures = read_corpus(root, metadata, cfg)
                seconds = time.perf_counter() - t0
                name = f"{engine}-w{workers}"
                runs[name] = (documents, blocks, figures)
                parallel = min(workers, available_cpus())
                round_rows.append({"run": name, "round": r + 1, "pages": pages, "seconds": round(seconds, 1),
                                   "pages/s": round(pages / seconds, 1),
                                   "pages/s/worker": round(pages / seconds / parallel, 1)})
                if args.save and r == 0:
                    out = Path(args.save) / name
                    out.mkdir(parents=True, exist_ok=True)
                    documents.write_parquet(out / "documents.parquet")
                    blocks.write_parquet(out / "blocks.parquet")
                    figures.drop("image").write_parquet(out / "figures.parquet")
        pages2, raw_s2 = raw_text_rate(paths)
        raw_rate = (pages + pages2) / (raw_s + raw_s2)
        raw_rates.append(raw_rate)
        print(f"\nround {r + 1}: raw text layer (PDFium text only, one process): {pages / raw_s:.1f} pages/s before, "
              f"{pages2 / raw_s2:.1f} after; mean {raw_rate:.1f}; load now {os.getloadavg()[0]:.1f}")
        # several workers share the machine: their rate per worker beside the raw rate per
        # process of as many processes reading at once
        per_process = {1: raw_rate}
        for n in sorted({min(w, available_cpus()) for w in args.workers} - {1}):
            pages_n, seconds_n = raw_text_rate_parallel(paths, n)
            per_process[n] = pages_n / seconds_n / n
            print(f"round {r + 1}: raw text layer in {n} processes at once: {pages_n / seconds_n:.1f} pages/s, "
                  f"{per_process[n]:.1f} per process")
        for row in round_rows:
            n = int(row["run"].rsplit("-w", 1)[1])
            n = min(n, available_cpus())
            row["raw pages/s"] = round(raw_rate, 1)
            row["raw / kohaku per worker"] = round(raw_rate / row["pages/s/worker"], 2)
            row["raw per process"] = round(per_process[n], 1)
            row["raw per process / kohaku per worker"] = round(per_process[n] / row["pages/s/worker"], 2)
        rows.extend(round_rows)
    table = pl.DataFrame(rows)
    if args.rounds > 1:
        table = pl.concat([table, table.group_by("run", maintain_order=True).agg(
            pl.lit(0).alias("round"), pl.col("pages").first(), pl.col("seconds").median(),
            pl.col("pages/s").median(), pl.col("pages/s/worker").median(), pl.col("raw pages/s").median(),
            pl.col("raw / kohaku per worker").median(), pl.col("raw per process").median(),
            pl.col("raw per process / kohaku per worker").median(),
        ).with_columns(pl.col("round").cast(table["round"].dtype))])
        print("\n(round 0: the median over the rounds)")
    raw_s = pages / (sum(raw_rates) / len(raw_rates))   # for the OCR line: the text layer's mean rate
    with pl.Config(tbl_rows=50, tbl_cols=20, tbl_width_chars=200, fmt_str_lengths=80):
        print(table)
        stats = []
        for name, (documents, blocks, figures) in runs.items():
            s = tree_stats(documents, blocks, figures)
            stats.append({"run": name, **{k: v for k, v in s.items() if not isinstance(v, list)},
                          "lost": len(s["documents_lost"]), "no-text notes": len(s["pages_without_text"])})
        print(pl.DataFrame(stats).transpose(include_header=True, header_name="tree", column_names="run"))
        for name, (documents, blocks, figures) in runs.items():
            s = tree_stats(documents, blocks, figures)
            for doc in s["documents_lost"]:
                print(f"{name}: document lost: {doc}")
            for note in s["pages_without_text"]:
                print(f"{name}: {note}")
        if args.baseline:
            base = Path(args.baseline)
            old = pl.read_parquet(base / "blocks.parquet")
            old_docs = pl.read_parquet(base / "documents.parquet")
            old_figures = pl.read_parquet(base / "figures.parquet") if (base / "figures.parquet").is_file() else None
            s = tree_stats(old_docs, old, old_figures if old_figures is not None else old.head(0))
            print(f"baseline {base}: " + ", ".join(f"{k} {v}" for k, v in s.items() if not isinstance(v, list)))
            for name, (_, blocks, _) in runs.items():
                print(f"{name} against {args.baseline}: {compare_blocks(blocks, old)}")
    if args.ocr:
        ocr_rate([Path(p) for p in args.ocr], pages / raw_s if raw_s else 0.0)
    return 0


def ocr_rate(paths: list[Path], raw_rate: float) -> None:
    """Every page of ``paths`` recognised through the parse (render, engine, layout), one
    process: pages/s per worker beside the text layer's rate."""
    from kohaku.ingest.text.ocr import OcrOptions, engine_identity
    from kohaku.ingest.text.pdf import PdfOptions, read_pdf_part

    ocr = OcrOptions(mode="always")
    identity = engine_identity(ocr)
    pages = 0
    t0 = time.perf_counter()
    for path in paths:
        part = read_pdf_part(path, PdfOptions(ocr=ocr))
        pages += part.engine["ocr_pages"]
    seconds = time.perf_counter() - t0
    print(f"\nOCR ({identity['engine']} {identity['version']}, {identity['lang']}, {ocr.dpi} dpi) of {pages} pages "
          f"of {len(paths)} PDFs: {pages / seconds:.2f} pages/s per worker (the text layer: {raw_rate:.1f})")


if __name__ == "__main__":
    sys.exit(main())
