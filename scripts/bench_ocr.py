"""OCR speed and accuracy per worker on this CPU: pages/s at each dpi, word accuracy where the
truth is known (tests/data/ocr/rendered_scan.pdf page 1).

    nice -n 10 .venv/bin/python scripts/bench_ocr.py [PDF ...] [--dpi 300 200] [--repeat 2]

One process, one engine thread (OMP_THREAD_LIMIT=1): the parse stage's workers are the
parallelism, so this is the rate of one worker. Pages are rendered with pypdfium2 as the parse
stage does; render time is counted apart from recognition. Without PDF arguments it reads the
committed fixtures (the rendered scan and pdfplumber's image-only file).

``--engine rapidocr`` measures RapidOCR (PyPI ``rapidocr-onnxruntime``: PP-OCRv4 ONNX models
inside the wheel, onnxruntime with one intra-op thread) on the same pages, for the engine choice;
kohaku itself runs Tesseract. RapidOCR returns lines sorted top to bottom, not column by column,
so besides the ordered word accuracy the table gives the order-free word recall (bag of words).

From the parse benchmark: ``from scripts.bench_ocr import bench_ocr`` (or copy the call):
``bench_ocr([path, ...]) -> {"engine", "version", "rows": [{pdf, dpi, pages, ocr_s, cpu_s,
render_s, pages_per_s, pages_per_cpu_s, mean_conf, words, word_accuracy, word_recall}]}``.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kohaku.ingest.text.ocr import OcrOptions, engine_identity, ocr_page, render_page, word_accuracy  # noqa: E402

FIXTURES = ROOT / "tests/data/ocr"
DEFAULT_PDFS = [FIXTURES / "rendered_scan.pdf", FIXTURES / "pdfplumber-issue-203-decimalize.pdf"]


def word_recall(hyp: str, ref: str) -> float:
    """Order-free: the share of truth words (with multiplicity) that the OCR text contains."""
    h, r = Counter(hyp.split()), Counter(ref.split())
    n = sum(r.values())
    return sum(min(c, h[w]) for w, c in r.items()) / n if n else 1.0


def _truths(paths: list[Path]) -> dict[tuple[str, int], str]:
    """Known page texts: ``X.truth.txt`` is page 1 of ``X.pdf``, ``X.pN.truth.txt`` page N."""
    out: dict[tuple[str, int], str] = {}
    for p in paths:
        for t in p.parent.glob(p.stem + ".*truth.txt"):
            mid = t.name[len(p.stem) + 1: -len("truth.txt") - 1]
            page = int(mid[1:]) - 1 if mid.startswith("p") and mid[1:].isdigit() else 0
            out[(str(p), page)] = t.read_text(encoding="utf-8")
    return out


class _Rapid:
    def __init__(self) -> None:
        from rapidocr_onnxruntime import RapidOCR  # type: ignore[import-not-found]

        self.engine = RapidOCR(intra_op_num_threads=1, inter_op_num_threads=1)

    def __call__(self, image, w_pt: float, h_pt: float, opts: OcrOptions) -> tuple[str, float, float, float]:
        import numpy as np

        t0, c0 = time.perf_counter(), time.process_time()
        result, _ = self.engine(np.asarray(image.convert("RGB")))
        secs, cpu = time.perf_counter() - t0, time.process_time() - c0
        lines = [r[1] for r in result or []]
        conf = 100 * statistics.fmean([float(r[2]) for r in result]) if result else 0.0
        return "\n".join(lines), conf, secs, cpu


def _tesseract(image, w_pt: float, h_pt: float, opts: OcrOptions) -> tuple[str, float, float, float]:
    page = ocr_page(image, w_pt, h_pt, opts)
    if page.error:
        raise RuntimeError(page.error)
    return page.text, page.mean_conf, page.seconds, page.cpu_seconds


def _layer_truths(paths: list[Path], max_pages: int) -> dict[tuple[str, int], str]:
    """A born-digital PDF's own text layer as the truth (OCR on its rendered pages): the word
    recall is meaningful, the ordered accuracy less so (the layer's order is pdfplumber's)."""
    import pdfplumber

    out: dict[tuple[str, int], str] = {}
    for p in paths:
        with pdfplumber.open(p) as pdf:
            for i, page in enumerate(pdf.pages[:max_pages]):
                text = page.extract_text() or ""
                if text.strip():
                    out[(str(p), i)] = text
    return out


def bench_ocr(pdf_paths: list[Path | str], dpis: tuple[int, ...] = (300, 200), repeat: int = 1,
              engine: str = "tesseract", max_pages: int = 10, layer_truth: bool = False) -> dict:
    """Render and recognise the first ``max_pages`` pages of each PDF at each dpi, one row per
    (PDF, dpi); the fastest of ``repeat`` runs per page counts (the machine is shared).
    ``pages_per_s`` is by wall time, ``pages_per_cpu_s`` by the engine's CPU time (what one
    worker gets from a core it has to itself)."""
    import pypdfium2 as pdfium

    paths = [Path(p) for p in pdf_paths]
    truths = _layer_truths(paths, max_pages) if layer_truth else _truths(paths)
    if engine == "tesseract":
        ident = engine_identity(OcrOptions())
        run, version = _tesseract, ident["version"]
    else:
        from importlib.metadata import version as pkg_version

        run, version = _Rapid(), pkg_version("rapidocr-onnxruntime")
    rows = []
    for p in paths:
        for dpi in dpis:
            opts = OcrOptions(dpi=dpi, timeout_s=600)
            n = 0
            ocr_s = cpu_s = render_s = 0.0
            confs: list[float] = []
            n_words = 0
            accs: list[float] = []
            recalls: list[float] = []
            pdf = pdfium.PdfDocument(str(p))
            for i in range(min(len(pdf), max_pages)):
                page = pdf[i]
                w, h = page.get_size()
                t0 = time.perf_counter()
                image = render_page(page, dpi)
                render_s += time.perf_counter() - t0
                runs = [run(image, w, h, opts) for _ in range(max(1, repeat))]
                text, conf, _, _ = runs[0]
                ocr_s += min(r[2] for r in runs)
                cpu_s += min(r[3] for r in runs)
                n += 1
                confs.append(conf)
                n_words += len(text.split())
                truth = truths.get((str(p), i))
                if truth is not None:
                    accs.append(word_accuracy(text, truth))
                    recalls.append(word_recall(text, truth))
                page.close()
            pdf.close()
            rows.append({"pdf": p.name, "dpi": dpi, "pages": n, "ocr_s": round(ocr_s, 2), "cpu_s": round(cpu_s, 2),
                         "render_s": round(render_s, 2),
                         "pages_per_s": round(n / ocr_s, 3) if ocr_s else None,
                         "pages_per_cpu_s": round(n / cpu_s, 3) if cpu_s else None,
                         "mean_conf": round(statistics.fmean(confs), 1) if confs else None, "words": n_words,
                         "word_accuracy": round(statistics.fmean(accs), 4) if accs else None,
                         "word_recall": round(statistics.fmean(recalls), 4) if recalls else None})
    return {"engine": engine, "version": version, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("pdfs", nargs="*", type=Path)
    ap.add_argument("--dpi", type=int, nargs="+", default=[300, 200])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--engine", choices=["tesseract", "rapidocr"], default="tesseract")
    ap.add_argument("--max-pages", type=int, default=10, help="pages read per PDF")
    ap.add_argument("--layer-truth", action="store_true",
                    help="born-digital PDFs: score the OCR of each rendered page against its own text layer")
    args = ap.parse_args()
    res = bench_ocr(args.pdfs or DEFAULT_PDFS, tuple(args.dpi), args.repeat, args.engine, args.max_pages,
                    args.layer_truth)
    print(f"engine {res['engine']} {res['version']}, one worker (one engine thread)")
    cols = ["pdf", "dpi", "pages", "ocr_s", "cpu_s", "render_s", "pages_per_s", "pages_per_cpu_s", "mean_conf", "words",
            "word_accuracy", "word_recall"]
    print(" | ".join(cols))
    for r in res["rows"]:
        print(" | ".join("-" if r[c] is None else str(r[c]) for c in cols))


if __name__ == "__main__":
    main()
