"""The figure finder and the PDF reader on real PDFs (tests/data/real_pdfs, sources and licences
in its README). Expected figures were checked by eye on the renderings
(scripts/find_figures.py --out)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from kohaku.ingest.text.figures import FigureBox, FigureOptions
from kohaku.ingest.text.pdf import PdfOptions, read_pdf

DATA = Path(__file__).resolve().parent / "data" / "real_pdfs"
LONGEVAL = DATA / "2023.eacl-main.121.pdf"
REGISTER = DATA / "federal-register-2020-17221.pdf"

# (page, bbox, source, caption start) per figure of LongEval, in reading order
LONGEVAL_FIGURES = [
    (2, (74, 71, 516, 251), "vector", "Figure 1: Overview of research questions"),
    (5, (79, 71, 517, 231), "vector", "Figure 2: 95% confidence intervals of Pearson"),
    (5, (74, 289, 521, 397), "vector", "Figure 3: 95% confidence intervals of estimated"),
    (6, (79, 71, 517, 257), "vector", "Figure 4: Accuracy and variance after annotating"),
    (16, (270, 372, 528, 535), "vector", "Figure 5: Learning effect over time"),
    (17, (71, 502, 293, 680), "vector", "Figure 6: A version of Figure 4 using Pearson"),
    (18, (79, 144, 517, 305), "vector", "Figure 7: A version of Figure 2 using Kendall"),
    (18, (73, 481, 522, 664), "image", "Figure 8: The AMT Sandbox annotation interface"),
    (19, (73, 241, 522, 579), "image", "Figure 9: The LabelStudio annotation interface"),
]
# the Federal Register's figures are embedded images: their boxes are the images' own
REGISTER_FIGURES = [
    (7, (108, 112, 504, 211)), (8, (108, 59, 504, 696)), (9, (98, 59, 515, 647)), (10, (108, 59, 504, 477)),
    (11, (108, 59, 504, 452)), (11, (108, 515, 504, 632)), (12, (108, 59, 504, 333)), (12, (108, 396, 504, 476)),
    (13, (108, 59, 504, 427)), (13, (108, 490, 504, 583)), (14, (90, 59, 522, 456)),
]


def parse(path: Path, **figure_options) -> tuple[list[dict], list[FigureBox], Counter]:
    figures: list[FigureBox] = []
    stats: Counter = Counter()
    blocks, _, warnings = read_pdf(path, PdfOptions(figures=FigureOptions(dpi=72, **figure_options)), figures, stats)
    assert not [w for w in warnings if "figure" in w], warnings
    return blocks, figures, stats


def close(a, b, tol: float = 3.0) -> bool:
    return all(abs(x - y) <= tol for x, y in zip(a, b))


@pytest.fixture(scope="module")
def longeval():
    return parse(LONGEVAL)


def test_longeval_every_figure_found_with_its_box_and_caption(longeval):
    _, figures, stats = longeval
    got = [(f.page, f.bbox, f.source, f.caption) for f in figures]
    assert len(got) == len(LONGEVAL_FIGURES), [(p, s, c[:30]) for p, _, s, c in got]
    for (page, box, source, caption), want in zip(got, LONGEVAL_FIGURES):
        assert (page, source) == (want[0], want[2]), (page, caption)
        assert close(box, want[1]), (page, [round(x) for x in box], want[1])
        assert caption.startswith(want[3]), caption
    # the gridded charts were ruled "tables" to pdfplumber; four icons under 40 points are dropped
    assert stats == Counter({"charts_not_tables": 7, "tiny image": 4})
    assert all(f.png and f.png[:8] == b"\x89PNG\r\n\x1a\n" for f in figures)


def test_longeval_charts_are_not_table_blocks_and_words_keep_their_spaces(longeval):
    blocks, _, _ = longeval
    text = " ".join(b["text"] for b in blocks)
    # a chart's tick labels were a garbage table block ("SQuALITY rouge-1_f1 FINE rouge-2_f1 ...")
    assert not [b for b in blocks if b["kind"] == "table" and "rouge-1_f1" in b["text"]]
    assert "rouge-1_f1" not in text
    # pdfplumber's 3-point word gap glued this paper's words ("individualauthorcontributions")
    assert "individual author contributions can be found here" in text
    assert "Allen Institute for AI" in text and "AllenInstitute" not in text
    # with figures off, the reader keeps the old table blocks (nothing looks for charts)
    plain, _, _ = read_pdf(LONGEVAL, PdfOptions())
    assert [b for b in plain if b["kind"] == "table" and "rouge-1_f1" in b["text"]]


def test_federal_register_embedded_images():
    _, figures, stats = parse(REGISTER)
    assert [(f.page, tuple(round(x) for x in f.bbox), f.source) for f in figures] == \
        [(p, b, "image") for p, b in REGISTER_FIGURES]
    assert stats == Counter()
    # the captions are drawn inside the images ("Figure 2 to paragraph (h)(3)"): no text caption
    assert {f.caption for f in figures} == {""}


def test_a_larger_min_size_drops_more_and_figures_off_finds_none():
    _, figures, stats = parse(REGISTER, min_size=200.0)
    # a side under 200 points: the four shallow text boxes (80-117 points high) go
    assert len(figures) == 7 and stats["tiny image"] == 4
    figures = []
    read_pdf(REGISTER, PdfOptions(figures=None), figures)
    assert figures == []


def test_a_chart_candidate_the_finder_does_not_confirm_stays_a_table():
    # with no drawing cluster large enough to be a chart, the gridded "tables" keep their blocks:
    # the reader never drops text it cannot place in a figure
    blocks, figures, stats = parse(LONGEVAL, min_vector_objects=100_000)
    assert [f.source for f in figures] == ["image", "image"]
    assert stats["charts_not_tables"] == 0
    assert [b for b in blocks if b["kind"] == "table" and "rouge-1_f1" in b["text"]]


def test_a_page_background_image_does_not_hide_the_chart_drawn_over_it(tmp_path):
    """Some reports draw each page over a full-page image (a scan or a tinted background, cut
    into strips): that image is dropped as a full-page image, and the chart drawn over it is
    still found."""
    import io

    from fpdf import FPDF
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (60, 85), (235, 235, 235)).save(buf, format="PNG")
    pdf = FPDF(format="A4", unit="pt")
    pdf.add_page()
    for k in range(4):  # the background in four strips, as such reports do
        pdf.image(io.BytesIO(buf.getvalue()), x=0, y=k * 842 / 4, w=595, h=842 / 4)
    pdf.set_font("Helvetica", size=10)
    pdf.set_xy(72, 60)
    pdf.multi_cell(450, 14, "The spreads rose sharply in the spring, as the chart below shows for five countries.")
    for i in range(6):  # a gridded line chart: axes, grid, one series
        pdf.line(100, 120 + 30 * i, 480, 120 + 30 * i)
        pdf.line(100 + 76 * i, 120, 100 + 76 * i, 270)
    points = [(100, 260), (176, 240), (252, 250), (328, 200), (404, 180), (480, 130)]
    for a, b in zip(points, points[1:]):
        pdf.line(*a, *b)
    pdf.set_xy(100, 285)
    pdf.cell(380, 12, "Figure 14: Sovereign CDS spreads (bp), data until 2 July 2010.")
    pdf.set_xy(72, 330)
    pdf.multi_cell(450, 14, "Market participants may not only trade to insure against a default.")
    path = tmp_path / "background.pdf"
    pdf.output(str(path))
    _, figures, stats = parse(path)
    assert [(f.source, f.caption) for f in figures] == [("vector", "Figure 14: Sovereign CDS spreads (bp), data until 2 July 2010.")]
    assert close(figures[0].bbox, (100, 120, 480, 270), tol=6), figures[0].bbox
    assert stats["full_page"] == 1
