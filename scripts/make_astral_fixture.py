"""Write the test fixture of characters outside the Basic Multilingual Plane (tests/data/astral/).

    python scripts/make_astral_fixture.py [--out tests/data/astral]

A two-page PDF, made with fpdf2 from two Debian font packages (each font embedded as the
subset of glyphs the page uses): DejaVu Sans (``fonts-dejavu-core``) and Symbola
(``fonts-symbola``, for the check mark U+1F5F8 that a real annual report draws in its tables).
Page 1: a heading, a paragraph with an emoji, mathematical letters and an Old Italic letter, and
a ruled table whose cells hold check marks; page 2: a paragraph with the characters next to
accented and combining letters, then a line of two emoji in one word. The text is made up for
this fixture. ``astral.truth.json`` beside the PDF holds each page's words as written, which
the tests compare with both parse engines. The committed PDF is what the tests read; run this
again only to change the fixture (apt-get install fonts-dejavu-core fonts-symbola).
"""
from __future__ import annotations

import argparse
import json
from datetime import datetime, timezone
from pathlib import Path

DEJAVU = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
SYMBOLA = Path("/usr/share/fonts/truetype/ancient-scripts/Symbola_hint.ttf")
CHECK = "\U0001F5F8"   # LIGHT CHECK MARK, Symbola

PAGE1_HEADING = "Sustainability scorecard \U0001D538"
PAGE1_TEXT = ("Our targets for 2025 were met \U0001F600 across the group; the index \U0001D465 rose by "
              "4.2 points and site \U00010300 reported no incidents.")
TABLE = [["Target", "2024", "2025"],
         ["Renewable power", CHECK, CHECK],
         ["Water reuse", "", CHECK],
         ["Zero waste", CHECK, ""]]
PAGE2_TEXT = ("Caf\u00e9 sales and the re\u0301sume\u0301 team \U0001F4C8 grew; "
              "\U0001D400\U0001D401\U0001D402 stands for the three divisions.")
PAGE2_LINE = "Mood: \U0001F600\U0001F601 fine"


def build(out: Path) -> Path:
    from fpdf import FPDF

    pdf = FPDF(format="A4")
    pdf.set_creation_date(datetime(2026, 1, 1, tzinfo=timezone.utc))
    pdf.add_font("dejavu", "", str(DEJAVU))
    pdf.add_font("symbola", "", str(SYMBOLA))
    pdf.set_fallback_fonts(["symbola"])
    pdf.add_page()
    pdf.set_font("dejavu", size=16)
    pdf.cell(text=PAGE1_HEADING, new_x="LMARGIN", new_y="NEXT")
    pdf.ln(4)
    pdf.set_font("dejavu", size=11)
    pdf.multi_cell(w=0, text=PAGE1_TEXT, new_x="LMARGIN", new_y="NEXT")
    pdf.ln(6)
    with pdf.table(col_widths=(60, 30, 30), width=120, text_align="LEFT", first_row_as_headings=False) as table:
        for cells in TABLE:
            row = table.row()
            for cell in cells:
                row.cell(cell)
    pdf.add_page()
    pdf.multi_cell(w=0, text=PAGE2_TEXT, new_x="LMARGIN", new_y="NEXT")
    pdf.ln(4)
    pdf.cell(text=PAGE2_LINE)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "astral.pdf"
    pdf.output(str(path))
    pages = [PAGE1_HEADING.split() + PAGE1_TEXT.split() + [w for row in TABLE for c in row for w in c.split()],
             PAGE2_TEXT.split() + PAGE2_LINE.split()]
    (out / "astral.truth.json").write_text(json.dumps({"pages": pages}, ensure_ascii=False, indent=1) + "\n",
                                          encoding="utf-8")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "tests/data/astral")
    path = build(ap.parse_args().out)
    print(f"wrote {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
