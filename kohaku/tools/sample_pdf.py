#!/usr/bin/env python
"""Write the sample corpus PDFs (data/sample/pdfs/okafor2023.pdf, data/sample/chen2024.pdf) with fpdf2.

The documents are invented for this project. okafor2023: one A4 page, a full-width title, two
text columns with numbered headings in a larger bold font, and a ruled table under the columns
(the PDF parser's column detection, font-size headings and table extraction). chen2024 (the
figures corpus, ``corpus=sample_figures``): two pages whose second page holds a bar chart drawn
with matplotlib and embedded as a PNG image, and a vector bar chart drawn with PDF rectangles and
lines; the values of both charts are printed nowhere in the text (the figure finder and the
caption stage).

    python scripts/make_sample_pdf.py                 # writes both
    python scripts/make_sample_pdf.py --out x.pdf --figures-out y.pdf   # somewhere else

``write_two_column_pdf`` and ``write_figures_pdf`` are also used by the tests to build small
PDFs on the fly. Needs fpdf2 (``pip install fpdf2``; it is in the ``dev`` extra) and matplotlib.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

# (kind, text): kind "h" is a heading, "p" a paragraph
Item = tuple[str, str]

PAGE_W, PAGE_H = 210.0, 297.0
MARGIN = 18.0
GUTTER = 8.0
BODY_SIZE = 9.5
HEADING_SIZE = 12.0
LINE_H = 4.3


def write_two_column_pdf(
    path: str | Path,
    title: str,
    left: Sequence[Item],
    right: Sequence[Item],
    table: Sequence[Sequence[str]] | None = None,
    table_caption: str | None = None,
    subtitle: str | None = None,
    user_password: str | None = None,
) -> Path:
    """One-page two-column PDF. ``table`` rows (first row = header) are drawn as a ruled table
    across the full width below the columns. ``user_password`` encrypts the file."""
    from fpdf import FPDF

    pdf = FPDF(format="A4", unit="mm")
    pdf.set_auto_page_break(False)
    pdf.set_creation_date(datetime(2023, 1, 1, tzinfo=timezone.utc))  # reproducible bytes
    pdf.set_margins(MARGIN, MARGIN, MARGIN)
    pdf.add_page()
    full_w = PAGE_W - 2 * MARGIN
    pdf.set_font("Helvetica", "B", 16)
    pdf.set_xy(MARGIN, MARGIN)
    pdf.multi_cell(full_w, 7, title, align="C", new_x="LMARGIN", new_y="NEXT")
    if subtitle:
        pdf.set_font("Helvetica", "", 10)
        pdf.multi_cell(full_w, 5, subtitle, align="C", new_x="LMARGIN", new_y="NEXT")
    top = pdf.get_y() + 6
    col_w = (full_w - GUTTER) / 2
    bottoms = []
    for x, items in ((MARGIN, left), (MARGIN + col_w + GUTTER, right)):
        bottoms.append(_items(pdf, items, x, top, col_w))
    y = max(bottoms) + 4
    if table:
        if table_caption:
            pdf.set_font("Helvetica", "", BODY_SIZE)
            pdf.set_xy(MARGIN, y)
            pdf.multi_cell(full_w, LINE_H, table_caption, align="L")
            y = pdf.get_y() + 2
        pdf.set_xy(MARGIN, y)
        pdf.set_font("Helvetica", "", BODY_SIZE)
        with pdf.table(width=full_w, line_height=5.5, first_row_as_headings=True) as t:
            for row in table:
                r = t.row()
                for cell in row:
                    r.cell(str(cell))
    if pdf.page_no() != 1 or pdf.get_y() > PAGE_H - MARGIN / 2:
        raise ValueError("the content does not fit on one page; shorten the text")
    if user_password is not None:
        pdf.set_encryption(owner_password=user_password + "-owner", user_password=user_password)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    pdf.output(str(out))
    return out


SAMPLE_TITLE = "Liquid Cooling Retrofit of a University GPU Cluster: Measured PUE, Temperatures and Water Use"
SAMPLE_SUBTITLE = "A. Okafor, L. Brandt and T. Nakamura - Northfield Institute of Computing (2023)"

SAMPLE_LEFT: list[Item] = [
    ("h", "1 Introduction"),
    ("p", "Accelerator clusters for machine learning draw far more power per rack than the "
          "general-purpose servers that most university machine rooms were designed for. "
          "The Kestrel cluster at Northfield has 64 nodes with 8 GPUs each, 512 GPUs in total, "
          "and every GPU is rated at 700 W. Under air cooling the room could not keep the "
          "hottest racks below their thermal limits during long training runs."),
    ("p", "This report describes how the cluster was moved from air cooling to direct-to-chip "
          "liquid cooling in two steps, and what the change did to facility overhead, chip "
          "temperatures and water consumption."),
    ("h", "2 Setup"),
    ("p", "All figures were measured over a period of 14 weeks for each configuration, with the "
          "same mix of training and inference jobs scheduled by the batch system. Facility power "
          "was read from the main switchboard and IT power from the rack power distribution units."),
    ("h", "2.1 Cooling configurations"),
    ("p", "The baseline used computer room air handlers. The first step added rear-door heat "
          "exchangers to every GPU rack. The second step installed cold plates on the GPUs and "
          "CPUs, fed by a coolant distribution unit that rejects heat through dry coolers on the roof."),
]

SAMPLE_RIGHT: list[Item] = [
    ("h", "3 Results"),
    ("p", "Power usage effectiveness (PUE) fell from 1.48 with air cooling to 1.27 with rear-door "
          "heat exchangers and to 1.11 with direct-to-chip liquid cooling. Fan power dropped from "
          "11% of the IT load to 3%, because the servers could run their fans at minimum speed."),
    ("p", "The mean GPU temperature under load fell by 18 degrees Celsius between the baseline and "
          "the liquid-cooled configuration. No thermal throttling was recorded after the retrofit, "
          "compared with 41 throttling events per week before it."),
    ("p", "Because the dry coolers need no evaporation, the water usage effectiveness (WUE) of the "
          "cluster dropped from 1.8 L/kWh with the old evaporative towers to 0.42 L/kWh."),
    ("h", "4 Conclusion"),
    ("p", "The retrofit cost 1.9 million USD and pays for itself in about 3.4 years from the saved "
          "electricity alone. We recommend direct-to-chip cooling for any rack above 30 kW."),
]

SAMPLE_TABLE = [
    ["Configuration", "PUE", "Cooling power (kW)", "Mean GPU temperature (C)"],
    ["Air cooling (baseline)", "1.48", "212", "78"],
    ["Rear-door heat exchanger", "1.27", "119", "71"],
    ["Direct-to-chip liquid", "1.11", "49", "60"],
]
SAMPLE_CAPTION = "Table 1: Measured facility overhead and GPU temperature for the three cooling configurations."


FIG_TITLE = "Inference Energy and Cooling Water of the Harbour AI Cluster"
FIG_SUBTITLE = "M. Chen and D. Varga - Harbour Computing Centre (2024)"
FIG_PAGE1: list[Item] = [
    ("h", "1 Introduction"),
    ("p", "The Harbour cluster serves language model inference for three hospitals and a port "
          "authority. Its operators wanted to know which of the installed accelerator types spends "
          "the least energy on a typical request, and how much water the evaporative cooling loop "
          "uses over the year."),
    ("p", "This note reports both measurements. The detailed numbers are given in the two charts "
          "on the next page; the text only summarises them."),
    ("h", "2 Method"),
    ("p", "Energy was read from the power distribution units of each accelerator server while a "
          "fixed mix of chat requests was replayed, and divided by the number of completed "
          "requests. Water use is the make-up water of the cooling towers, read from the "
          "utility meter every quarter."),
]
FIG_PAGE2_BEFORE: list[Item] = [
    ("h", "3 Results"),
    ("p", "The newest accelerator type needs clearly less energy per request than the older ones, "
          "as Figure 1 shows for the four server types of the cluster."),
]
FIG_PAGE2_AFTER: list[Item] = [
    ("p", "Water use follows the outdoor temperature: the cooling towers evaporate most in the "
          "summer quarter and least in the winter quarter (Figure 2)."),
]
# values shown only in the charts (the sample question asks for one of them)
BAR_CHART = {"Model": ["A100", "H100", "L40S", "MI300X"], "Wh": [2.9, 1.7, 3.6, 2.2]}
BAR_CAPTION = "Figure 1: Energy per chat request by accelerator type (Wh), measured on the Harbour cluster."
WATER_CHART = {"Quarter": ["Q1", "Q2", "Q3", "Q4"], "m3": [410, 690, 1240, 520]}
WATER_CAPTION = "Figure 2: Make-up water of the cooling towers per quarter of 2023 (cubic metres)."


def bar_chart_png(labels: Sequence[str], values: Sequence[float], ylabel: str) -> bytes:
    """A matplotlib bar chart as PNG bytes (reproducible: no metadata, fixed size)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.8, 2.8), dpi=100)
    bars = ax.bar(list(labels), list(values), color="#4472c4")
    ax.bar_label(bars, fmt="%.1f")
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, max(values) * 1.25)
    ax.set_title("Energy per request")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def _items(pdf, items: Sequence[Item], x: float, y: float, w: float) -> float:
    for kind, text in items:
        if kind == "h":
            y += 1.5
            pdf.set_font("Helvetica", "B", HEADING_SIZE)
            pdf.set_xy(x, y)
            pdf.multi_cell(w, 5.5, text, align="L")
            y = pdf.get_y() + 1.0
        else:
            pdf.set_font("Helvetica", "", BODY_SIZE)
            pdf.set_xy(x, y)
            pdf.multi_cell(w, LINE_H, text, align="L")
            y = pdf.get_y() + 2.5
    return y


def _vector_bars(pdf, x: float, y: float, w: float, h: float, labels: Sequence[str],
                 values: Sequence[float], unit: str) -> None:
    """A bar chart drawn with PDF rectangles and lines (axes, ticks, bars, labels)."""
    top = max(values) * 1.1
    pdf.set_draw_color(0, 0, 0)
    pdf.set_line_width(0.3)
    pdf.line(x, y, x, y + h)                      # y axis
    pdf.line(x, y + h, x + w, y + h)              # x axis
    pdf.set_font("Helvetica", "", 7)
    for k in range(0, 5):
        v = top * k / 4
        ty = y + h - h * k / 4
        pdf.line(x - 1.5, ty, x, ty)
        pdf.text(x - 10, ty + 1, f"{v:.0f}")
    slot = w / len(values)
    pdf.set_fill_color(230, 120, 40)
    for i, (label, v) in enumerate(zip(labels, values)):
        bh = h * v / top
        bx = x + i * slot + slot * 0.2
        pdf.rect(bx, y + h - bh, slot * 0.6, bh, style="DF")
        pdf.text(bx + slot * 0.15, y + h + 4, label)
    pdf.set_font("Helvetica", "", 7)
    pdf.text(x - 12, y - 2, unit)


def write_figures_pdf(path: str | Path, image_png: bytes | None = None) -> Path:
    """The two-page figures sample: text on page 1, a raster and a vector chart on page 2,
    each with a "Figure n:" caption below it."""
    import io

    from fpdf import FPDF

    pdf = FPDF(format="A4", unit="mm")
    pdf.set_auto_page_break(False)
    pdf.set_creation_date(datetime(2024, 1, 1, tzinfo=timezone.utc))
    pdf.set_margins(MARGIN, MARGIN, MARGIN)
    full_w = PAGE_W - 2 * MARGIN
    pdf.add_page()
    pdf.set_font("Helvetica", "B", 16)
    pdf.set_xy(MARGIN, MARGIN)
    pdf.multi_cell(full_w, 7, FIG_TITLE, align="C", new_x="LMARGIN", new_y="NEXT")
    pdf.set_font("Helvetica", "", 10)
    pdf.multi_cell(full_w, 5, FIG_SUBTITLE, align="C", new_x="LMARGIN", new_y="NEXT")
    _items(pdf, FIG_PAGE1, MARGIN, pdf.get_y() + 6, full_w)
    pdf.add_page()
    y = _items(pdf, FIG_PAGE2_BEFORE, MARGIN, MARGIN, full_w) + 2
    png = image_png if image_png is not None else bar_chart_png(BAR_CHART["Model"], BAR_CHART["Wh"], "Wh per request")
    pdf.image(io.BytesIO(png), x=MARGIN + 20, y=y, w=120)
    y += 120 * 2.8 / 4.8 + 3
    pdf.set_font("Helvetica", "", BODY_SIZE)
    pdf.set_xy(MARGIN, y)
    pdf.multi_cell(full_w, LINE_H, BAR_CAPTION, align="L")
    y = _items(pdf, FIG_PAGE2_AFTER, MARGIN, pdf.get_y() + 5, full_w) + 8
    _vector_bars(pdf, MARGIN + 30, y + 4, 100, 55, WATER_CHART["Quarter"], WATER_CHART["m3"], "m3")
    y += 4 + 55 + 8
    pdf.set_font("Helvetica", "", BODY_SIZE)
    pdf.set_xy(MARGIN, y)
    pdf.multi_cell(full_w, LINE_H, WATER_CAPTION, align="L")
    if pdf.get_y() > PAGE_H - MARGIN / 2:
        raise ValueError("the figures page does not fit; shorten the text")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    pdf.output(str(out))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="data/sample/pdfs/okafor2023.pdf", help="output PDF path")
    parser.add_argument("--figures-out", default="data/sample/chen2024.pdf",
                        help="output path of the figures sample (corpus=sample_figures)")
    args = parser.parse_args(argv)
    try:
        out = write_two_column_pdf(
            args.out, SAMPLE_TITLE, SAMPLE_LEFT, SAMPLE_RIGHT, SAMPLE_TABLE, SAMPLE_CAPTION, SAMPLE_SUBTITLE
        )
        figures = write_figures_pdf(args.figures_out)
    except ImportError as exc:
        print(f"{exc.name} is not installed: pip install fpdf2 matplotlib", file=sys.stderr)
        return 2
    for path in (out, figures):
        print(f"wrote {path} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
