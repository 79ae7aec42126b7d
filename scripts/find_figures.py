"""Which figures the parse stage finds in PDFs, and what it drops: a table per file.

Usage:
  python scripts/find_figures.py PDF [PDF ...] [--dpi N] [--full-page] [--out DIR]

For each PDF (parsed as the parse stage parses it, parse.figures defaults): pages, embedded
images on its pages, the figures kept (image / vector charts), and what was dropped or changed:
tiny images and drawings (a side under parse.figures.min_size points or under
min_area_share of the page), full-page scans, images repeated at one place on several pages
(logos), gridded charts that pdfplumber took for ruled tables and that became figures, and
figures that could not be rendered. Then one line per figure: page, bbox (x0, top, x1, bottom
in PDF points), source, pixel size and its caption line. --out DIR writes each figure's PNG
there, to look at.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kohaku.ingest.text.figures import FigureBox, FigureOptions  # noqa: E402
from kohaku.ingest.text.formats import DocumentError  # noqa: E402
from kohaku.ingest.text.pdf import PdfOptions, read_pdf  # noqa: E402

DROPS = ("tiny image", "tiny vector", "full_page", "repeated", "charts_not_tables", "unrendered")


def page_images(path: Path) -> int:
    import pdfplumber

    with pdfplumber.open(path) as pdf:
        return sum(len(p.images) for p in pdf.pages)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("pdfs", nargs="+", type=Path)
    parser.add_argument("--dpi", type=int, default=FigureOptions.dpi)
    parser.add_argument("--full-page", action="store_true", help="keep full-page images (scans)")
    parser.add_argument("--out", type=Path, help="write each figure's PNG here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    opts = PdfOptions(figures=FigureOptions(dpi=args.dpi, full_page=args.full_page))
    head = f"{'file':<34}{'pages':>6}{'images':>7}{'kept':>6}{'vector':>7}" + "".join(f"{d:>18}" for d in DROPS)
    rows, details = [head], []
    status = 0
    for path in args.pdfs:
        figures: list[FigureBox] = []
        stats: Counter = Counter()
        try:
            _, n_pages, warnings = read_pdf(path, opts, figures, stats)
        except (DocumentError, OSError) as exc:
            rows.append(f"{path.name[:33]:<34}error: {exc}")
            status = 1
            continue
        vector = sum(1 for f in figures if f.source == "vector")
        rows.append(f"{path.name[:33]:<34}{n_pages:>6}{page_images(path):>7}{len(figures):>6}{vector:>7}"
                    + "".join(f"{stats.get(d, 0):>18}" for d in DROPS))
        for k, f in enumerate(figures, start=1):
            details.append(f"  {path.name[:30]:<31}{k:>3} p{f.page:<4}({f.x0:.0f}, {f.top:.0f}, {f.x1:.0f}, {f.bottom:.0f}) "
                           f"{f.source:<7}{f.caption[:60]}")
            if args.out and f.png:
                args.out.mkdir(parents=True, exist_ok=True)
                (args.out / f"{path.stem}_{k}_p{f.page}.png").write_bytes(f.png)
        details += [f"  {path.name[:30]:<31}warning: {w}" for w in warnings if "figure" in w]
    print("\n".join(rows + [""] + details))
    return status


if __name__ == "__main__":
    sys.exit(main())
