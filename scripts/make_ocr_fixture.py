"""Write the OCR test fixture: a PDF whose pages are pictures of known text (tests/data/ocr/).

    python scripts/make_ocr_fixture.py [--out tests/data/ocr]

Page 1 is image-only (no text layer at all): a heading in a larger bold font, a one-line byline,
two columns of body paragraphs and a full-width closing paragraph, drawn with PIL at 300 dpi in
DejaVu Serif (Debian ``fonts-dejavu-core``; PIL's built-in scalable font where it is missing) and
embedded as a grayscale PNG picture. Page 2 is a "scan that carries an OCR layer": a picture of
one paragraph with the same words written over it as invisible text (render mode 3, as OCRmyPDF
and scanners write it), so auto mode must leave it alone.

The truth is written beside it: ``rendered_scan.truth.txt`` is page 1's words in reading order
(heading, byline, left column, right column, closing paragraph), one printed line a line;
``rendered_scan.p2.truth.txt`` is page 2's. The text is made up for this fixture (nothing from a
corpus). The committed PDF is what the tests read; run this again only to change the fixture.
"""
from __future__ import annotations

import argparse
import io
import random
from datetime import datetime, timezone
from pathlib import Path

from PIL import Image, ImageDraw, ImageFilter, ImageFont

DPI = 300
PAGE_W_PT, PAGE_H_PT = 612.0, 792.0  # US Letter
FONT_DIR = Path("/usr/share/fonts/truetype/dejavu")

HEADING = "Halvorsen Wind Cooperative: Annual Review"
BYLINE = "Prepared by the members' audit committee, March 2026"
LEFT = [
    "The cooperative was founded in 2011 by forty-two households on the northern ridge. Its "
    "first turbine, a refurbished machine bought from a coastal farm, began turning in the "
    "autumn of 2012 and paid back its loan in just under seven years.",
    "In 2025 the array of nine turbines delivered 7,340 megawatt-hours to the regional grid, "
    "which is 12.5 percent more than in the previous year. Most of the gain came from the two "
    "new rotors installed in April.",
    "Maintenance costs fell to 38 euros per megawatt-hour because the members now service the "
    "gearboxes themselves instead of hiring an outside crew.",
]
RIGHT = [
    "Members voted in June to keep the dividend at 4.2 percent and to place the remaining "
    "surplus in a reserve for replacing the oldest blades. The vote passed with 311 in favour "
    "and 17 against.",
    "Bird surveys carried out by volunteers recorded no collisions during the migration season. "
    "The curtailment schedule that stops the turbines at dusk in October will continue.",
    "A battery store of 2.4 megawatt-hours is planned for 2027, subject to a grant from the "
    "county energy fund and the approval of the next general meeting.",
]
CLOSING = [
    "Questions about this review may be sent to the committee secretary, who will answer them "
    "at the winter assembly on 14 December.",
]
P2 = [
    "This page is a scan that already carries a text layer, as a scanner or OCRmyPDF writes it. "
    "The words are drawn as a picture and written again as invisible text over the picture, so "
    "the reader finds them without running any recognition.",
]


def _font(bold: bool, size_pt: float) -> ImageFont.FreeTypeFont:
    px = round(size_pt * DPI / 72)
    path = FONT_DIR / ("DejaVuSerif-Bold.ttf" if bold else "DejaVuSerif.ttf")
    if path.exists():
        return ImageFont.truetype(str(path), px)
    return ImageFont.load_default(size=px)  # Pillow >= 10.1: a scalable built-in font


def _wrap(text: str, font: ImageFont.FreeTypeFont, width_px: int) -> list[str]:
    lines: list[str] = []
    cur: list[str] = []
    for word in text.split():
        trial = " ".join([*cur, word])
        if cur and font.getlength(trial) > width_px:
            lines.append(" ".join(cur))
            cur = [word]
        else:
            cur.append(word)
    if cur:
        lines.append(" ".join(cur))
    return lines


def _pt(v: float) -> int:
    return round(v * DPI / 72)


def _paragraphs(draw: ImageDraw.ImageDraw, paras: list[str], x_pt: float, y_pt: float, width_pt: float,
                size_pt: float, lead_pt: float, gap_pt: float) -> tuple[float, list[str]]:
    font = _font(False, size_pt)
    y = y_pt
    printed: list[str] = []
    for para in paras:
        for line in _wrap(para, font, _pt(width_pt)):
            draw.text((_pt(x_pt), _pt(y)), line, font=font, fill=0)
            printed.append(line)
            y += lead_pt
        y += gap_pt
    return y, printed


def page1() -> tuple[Image.Image, list[str]]:
    im = Image.new("L", (_pt(PAGE_W_PT), _pt(PAGE_H_PT)), 255)
    d = ImageDraw.Draw(im)
    truth: list[str] = []
    margin, gutter = 60.0, 24.0
    heading_font = _font(True, 18)
    assert heading_font.getlength(HEADING) <= _pt(PAGE_W_PT - 2 * margin), "heading wider than the page"
    d.text((_pt(margin), _pt(64)), HEADING, font=heading_font, fill=0)
    truth.append(HEADING)
    d.text((_pt(margin), _pt(98)), BYLINE, font=_font(False, 11), fill=0)
    truth.append(BYLINE)
    col_w = (PAGE_W_PT - 2 * margin - gutter) / 2
    y_left, lines = _paragraphs(d, LEFT, margin, 140, col_w, 10.5, 14.5, 8)
    truth += lines
    y_right, lines = _paragraphs(d, RIGHT, margin + col_w + gutter, 140, col_w, 10.5, 14.5, 8)
    truth += lines
    _, lines = _paragraphs(d, CLOSING, margin, max(y_left, y_right) + 16, PAGE_W_PT - 2 * margin, 10.5, 14.5, 8)
    truth += lines
    return im, truth


def page2() -> tuple[Image.Image, list[str], list[tuple[float, float, str]]]:
    """The picture, its printed lines and where each line's baseline is (x, y in points)."""
    im = Image.new("L", (_pt(PAGE_W_PT), _pt(PAGE_H_PT)), 255)
    d = ImageDraw.Draw(im)
    font = _font(False, 11)
    ascent = font.getmetrics()[0] * 72 / DPI
    y = 80.0
    truth: list[str] = []
    placed: list[tuple[float, float, str]] = []
    for para in P2:
        for line in _wrap(para, font, _pt(PAGE_W_PT - 120)):
            d.text((_pt(60), _pt(y)), line, font=font, fill=0)
            truth.append(line)
            placed.append((60.0, y + ascent, line))
            y += 15
    return im, truth, placed


def _scanlike(im: Image.Image, seed: int) -> Image.Image:
    """A little of what a scanner does: a 0.4 degree skew, soft edges, specks of dust
    (seeded: the same picture every run)."""
    rng = random.Random(seed)
    im = im.rotate(0.4, resample=Image.Resampling.BICUBIC, fillcolor=255)
    im = im.filter(ImageFilter.GaussianBlur(0.8))
    d = ImageDraw.Draw(im)
    w, h = im.size
    for _ in range(300):
        x, y, r = rng.randrange(w), rng.randrange(h), rng.choice((1, 1, 2))
        d.ellipse((x, y, x + r, y + r), fill=rng.choice((0, 60, 110)))
    return im


def _png(im: Image.Image) -> io.BytesIO:
    buf = io.BytesIO()
    # bilevel (threshold, no dithering) like a fax or office scan: a small file
    im.point(lambda v: 255 if v >= 128 else 0).convert("1", dither=Image.Dither.NONE).save(buf, "PNG", optimize=True)
    buf.seek(0)
    return buf


def build(out: Path) -> dict[str, int]:
    from fpdf import FPDF

    out.mkdir(parents=True, exist_ok=True)
    im1, truth1 = page1()
    im2, truth2, placed = page2()
    pdf = FPDF(unit="pt", format=(PAGE_W_PT, PAGE_H_PT))
    pdf.set_creator("kohaku scripts/make_ocr_fixture.py")
    pdf.set_producer("fpdf2")
    pdf.set_creation_date(datetime(2026, 1, 1, tzinfo=timezone.utc))  # the same bytes on every run
    pdf.add_page()
    pdf.image(_png(_scanlike(im1, 1)), x=0, y=0, w=PAGE_W_PT, h=PAGE_H_PT)
    pdf.add_page()
    pdf.image(_png(_scanlike(im2, 2)), x=0, y=0, w=PAGE_W_PT, h=PAGE_H_PT)
    pdf.set_font("Helvetica", size=11)
    with pdf.local_context(text_mode="INVISIBLE"):
        for x, y, line in placed:
            pdf.text(x, y, line)
    path = out / "rendered_scan.pdf"
    pdf.output(str(path))
    (out / "rendered_scan.truth.txt").write_text("\n".join(truth1) + "\n", encoding="utf-8")
    (out / "rendered_scan.p2.truth.txt").write_text("\n".join(truth2) + "\n", encoding="utf-8")
    return {"bytes": path.stat().st_size, "words_p1": sum(len(t.split()) for t in truth1),
            "words_p2": sum(len(t.split()) for t in truth2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "tests/data/ocr")
    args = ap.parse_args()
    print(build(args.out))


if __name__ == "__main__":
    main()
