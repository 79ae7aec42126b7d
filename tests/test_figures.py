"""Figures cut from PDF pages (kohaku/ingest/text/figures.py) and the figures table of the parse stage:
the sample charts (a matplotlib image and a vector chart), a matplotlib PDF chart, the filters
(tiny images, repeated logos, full-page scans), render failures, and that finding figures leaves
the text blocks as they are."""

from __future__ import annotations

import hashlib
import io
import sys
from pathlib import Path

import polars as pl
import pytest
from PIL import Image

from kohaku.ingest.corpus import read_metadata
from kohaku.ingest.parsing import FIGURES_SCHEMA, ParseConfig, read_corpus
from kohaku.ingest.text import pdf as pdf_mod
from kohaku.ingest.text.figures import FigureOptions, RenderError
from kohaku.ingest.text.pdf import PdfOptions, read_pdf

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "sample"
CHEN = SAMPLE / "chen2024.pdf"
sys.path.insert(0, str(REPO / "scripts"))
import kohaku.tools.sample_pdf as make_sample_pdf  # noqa: E402


def _read(path, **opts):
    figures: list = []
    blocks, _, warnings = read_pdf(path, PdfOptions(figures=FigureOptions(**opts)), figures)
    return blocks, figures, warnings


def test_sample_pdf_is_what_the_script_writes(tmp_path):
    out = make_sample_pdf.write_figures_pdf(tmp_path / "chen2024.pdf")
    assert out.read_bytes() == CHEN.read_bytes()


def test_sample_charts_found_with_captions_and_place():
    blocks, figures, warnings = _read(CHEN)
    assert warnings == []
    assert [(f.page, f.source) for f in figures] == [(2, "image"), (2, "vector")]
    assert figures[0].caption == make_sample_pdf.BAR_CAPTION
    assert figures[1].caption == make_sample_pdf.WATER_CAPTION
    # each follows the paragraph above it on its page, not its own tick labels or caption
    assert blocks[figures[0].anchor]["text"].startswith("The newest accelerator type")
    assert blocks[figures[1].anchor]["text"].startswith("Water use follows")
    # the vector chart's box holds its tick labels (left of the axis) and its bars
    x0, top, x1, bottom = figures[1].bbox
    assert x0 < make_sample_pdf.MARGIN * 72 / 25.4 + 30 * 72 / 25.4 - 20   # labels left of the y axis
    assert bottom - top > 55 * 72 / 25.4                                   # the 55 mm plot and more
    for f in figures:
        image = Image.open(io.BytesIO(f.png))
        assert image.format == "PNG"
        assert abs(image.width - f.width * 150 / 72) <= 2 and abs(image.height - f.height * 150 / 72) <= 2


def test_finding_figures_leaves_the_text_blocks_unchanged():
    with_figures, figures, _ = _read(CHEN)
    without, _, _ = read_pdf(CHEN, PdfOptions())
    assert len(figures) == 2 and with_figures == without


def test_vector_needs_a_figure_caption_and_tables_are_not_figures():
    _, figures, _ = _read(CHEN, vector=False)
    assert [f.source for f in figures] == ["image"]
    okafor = SAMPLE / "pdfs" / "okafor2023.pdf"   # a ruled table, no figure
    assert _read(okafor)[1] == []


def test_matplotlib_pdf_chart_is_a_vector_figure(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(6, 6))
    ax = fig.add_axes([0.15, 0.35, 0.8, 0.55])
    ax.plot([2019, 2020, 2021, 2022], [12.0, 15.5, 19.0, 26.5], marker="o", label="training")
    ax.plot([2019, 2020, 2021, 2022], [3.0, 4.5, 7.0, 9.5], marker="s", label="inference")
    ax.set_xlabel("year")
    ax.set_ylabel("energy (GWh)")
    ax.legend()
    fig.text(0.05, 0.18, "Figure 3: Yearly energy of training and inference (GWh).", fontsize=10)
    fig.text(0.05, 0.08, "The text below the figure is an ordinary paragraph of the page body.", fontsize=10)
    path = tmp_path / "mpl.pdf"
    fig.savefig(path, format="pdf")
    plt.close(fig)
    _, figures, warnings = _read(path)
    assert warnings == [] and len(figures) == 1
    f = figures[0]
    assert f.source == "vector" and f.caption == "Figure 3: Yearly energy of training and inference (GWh)."
    # the axes (0.15..0.95 of 432 pt wide, 0.35..0.90 of 432 pt high from the bottom) are inside
    assert f.x0 <= 0.15 * 432 and f.x1 >= 0.95 * 432 - 1
    assert f.top <= (1 - 0.90) * 432 and f.bottom >= (1 - 0.35) * 432 - 1
    assert f.bottom < (1 - 0.18) * 432 - 8   # the caption line stays out of the box


def _png(w: int, h: int, color: tuple[int, int, int]) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), color).save(buf, format="PNG")
    return buf.getvalue()


def _filters_pdf(path: Path) -> Path:
    """Four pages: a logo at the same place on pages 1-3, a tiny mark on page 1, a chart on
    page 2, a full-page scan on page 4; a line of text on every page."""
    from datetime import datetime, timezone

    from fpdf import FPDF

    pdf = FPDF(format="A4", unit="pt")
    pdf.set_creation_date(datetime(2024, 1, 1, tzinfo=timezone.utc))
    pdf.set_auto_page_break(False)
    pdf.set_font("Helvetica", "", 10)
    logo, tiny, chart, scan = _png(120, 50, (200, 0, 0)), _png(8, 8, (0, 0, 0)), _png(300, 200, (0, 90, 200)), \
        _png(595, 842, (240, 240, 230))
    for page in range(1, 5):
        pdf.add_page()
        if page == 4:
            pdf.image(io.BytesIO(scan), x=0, y=0, w=595, h=842)
        pdf.text(60, 120, f"Body text of page {page} with enough words to be a text layer.")
        if page <= 3:
            pdf.image(io.BytesIO(logo), x=440, y=20, w=120, h=50)
        if page == 1:
            pdf.image(io.BytesIO(tiny), x=60, y=700, w=8, h=8)
        if page == 2:
            pdf.image(io.BytesIO(chart), x=100, y=200, w=300, h=200)
            pdf.text(100, 420, "Figure 1: A chart that is a real figure.")
    pdf.output(str(path))
    return path


def test_filters_drop_tiny_images_repeated_logos_and_scans(tmp_path):
    path = _filters_pdf(tmp_path / "filters.pdf")
    _, figures, _ = _read(path)
    assert [(f.page, f.source, f.caption) for f in figures] == [(2, "image", "Figure 1: A chart that is a real figure.")]
    assert [round(v) for v in figures[0].bbox] == [100, 200, 400, 400]
    # asked for: full-page scans; a logo is a figure only when it repeats on fewer pages
    _, figures, _ = _read(path, full_page=True)
    assert [f.page for f in figures] == [2, 4]
    _, figures, _ = _read(path, repeat_pages=4)
    assert sorted((f.page, round(f.x0)) for f in figures) == [(1, 440), (2, 100), (2, 440), (3, 440)]
    # smaller min_size keeps the 8 pt mark (its area share is still too small: 64 / 500990)
    _, figures, _ = _read(path, min_size=4, min_area_share=0.0)
    assert (1, 60) in {(f.page, round(f.x0)) for f in figures}


def test_figures_table_from_the_parse_stage_library():
    docs, blocks, figures = read_corpus(SAMPLE, read_metadata(SAMPLE / "metadata_figures.csv"), ParseConfig(workers=1))
    assert figures.schema == pl.Schema(FIGURES_SCHEMA)
    assert figures["doc_id"].to_list() == ["chen2024", "chen2024"] and figures["figure"].to_list() == [1, 2]
    assert figures["source"].to_list() == ["image", "vector"]
    for row in figures.iter_rows(named=True):
        assert hashlib.sha256(row["image"]).hexdigest() == row["sha256"]
        assert Image.open(io.BytesIO(row["image"])).size == (row["width"], row["height"])
        after = blocks.filter((pl.col("doc_id") == "chen2024") & (pl.col("order") == row["after_order"]))
        assert after["page"].to_list() == [2]
    texts = [blocks.filter((pl.col("doc_id") == "chen2024") & (pl.col("order") == o))["text"][0]
             for o in figures["after_order"]]
    assert texts[0].startswith("The newest accelerator") and texts[1].startswith("Water use follows")
    assert docs.filter(pl.col("doc_id") == "chen2024")["status"].to_list() == ["ok"]
    # the default sample corpus has no figure (a ruled table only)
    _, _, none = read_corpus(SAMPLE, read_metadata(SAMPLE / "metadata.csv"), ParseConfig(workers=1))
    assert none.height == 0 and none.schema == pl.Schema(FIGURES_SCHEMA)


def test_figures_off_gives_an_empty_table():
    cfg = ParseConfig(workers=1, figures=FigureOptions(enabled=False))
    _, _, figures = read_corpus(SAMPLE, read_metadata(SAMPLE / "metadata_figures.csv"), cfg)
    assert figures.height == 0


def test_a_figure_that_cannot_be_rendered_is_a_named_warning(monkeypatch):
    real = pdf_mod.render_figure

    def flaky(page, fig, opts):
        if fig.source == "vector":
            raise RenderError("PdfiumError: Failed to render page")
        return real(page, fig, opts)

    monkeypatch.setattr(pdf_mod, "render_figure", flaky)
    docs, blocks, figures = read_corpus(SAMPLE, read_metadata(SAMPLE / "metadata_figures.csv"), ParseConfig(workers=1))
    assert figures["source"].to_list() == ["image"]
    row = docs.filter(pl.col("doc_id") == "chen2024").row(0, named=True)
    assert row["status"] == "warning"
    assert len(row["warnings"]) == 1
    warning = row["warnings"][0]
    assert warning.startswith("page 2: vector figure at (")
    assert "could not be rendered (PdfiumError: Failed to render page)" in warning
    assert "parse.figures.dpi" in warning
    assert blocks.filter(pl.col("doc_id") == "chen2024").height > 10   # the text is all there


def test_figure_options_validate():
    from kohaku.core.config import ConfigError, build

    with pytest.raises(ConfigError, match="figures.dpi=1000"):
        build(ParseConfig, {"figures": {"dpi": 1000}}, "parse")
    with pytest.raises(ConfigError, match="repeat_pages"):
        build(ParseConfig, {"figures": {"repeat_pages": 1}}, "parse")
    assert build(ParseConfig, {"figures": {"dpi": 72}}, "parse").figures.dpi == 72


def _word(text, x0, top, x1, bottom):
    return {"text": text, "x0": x0, "top": top, "x1": x1, "bottom": bottom}


@pytest.mark.parametrize("first", ["Figure", "\u200bFigure", "\ufb01g.", "FİG"])
def test_a_gridded_table_under_a_figure_caption_is_a_chart(first):
    """chart_tables skips building lines when no "fig" is in the page's text; a caption whose
    first word hides it behind an invisible character, a ligature or a dotted capital is still
    found (the quick test reads the text as the caption line is made)."""
    from kohaku.ingest.text.figures import chart_tables

    table = (100.0, 100.0, 300.0, 200.0)
    caption = [_word(first, 100, 205, 130, 215), _word("3:", 132, 205, 140, 215), _word("Revenue", 142, 205, 190, 215)]
    other = (100.0, 400.0, 300.0, 500.0)
    note = [_word("Table", 100, 505, 130, 515), _word("4:", 132, 505, 140, 515)]
    assert chart_tables([table, other], caption + note, FigureOptions()) == [0]
    assert chart_tables([table, other], note, FigureOptions()) == []
    assert chart_tables([], caption, FigureOptions()) == []
