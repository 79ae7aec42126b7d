"""PDFs made inside the tests, for the fuzz test of the two parse engines (tests/test_parse_unicode.py).

Two kinds:
- ``truetype_pdf``: fpdf2 with DejaVu Sans, the copy matplotlib ships (a kohaku dependency; its
  licence in matplotlib's mpl-data/fonts/ttf/LICENSE_DEJAVU), embedded as the subset a page
  uses: characters outside the BMP (emoji, mathematical letters, Old Italic), combining marks,
  Hebrew and Arabic, ligature characters, zero-width characters; pages can be left empty or
  turned (/Rotate) afterwards with PDFium.
- ``type3_pdf``: a hand-written PDF whose only font is a Type3 font (each glyph a filled box)
  with a ToUnicode map from its one-byte codes to any text, CJK and astral characters included:
  no font file is needed for characters no installed font has.
"""

from __future__ import annotations

import os
from pathlib import Path


def dejavu_path() -> Path:
    import matplotlib

    return Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"


def truetype_pdf(path: Path, pages: list[list[str]], rotate: dict[int, int] | None = None, size: float = 11) -> Path:
    """One PDF page per item of ``pages`` (its lines, each written as one line; an empty list
    is an empty page); ``rotate``: page index -> /Rotate degrees."""
    from fpdf import FPDF

    pdf = FPDF(format="A4")
    pdf.add_font("dejavu", "", str(dejavu_path()))
    for lines in pages:
        pdf.add_page()
        pdf.set_font("dejavu", size=size)
        for line in lines:
            pdf.cell(text=line, new_x="LMARGIN", new_y="NEXT")
    pdf.output(str(path))
    if rotate:
        import pypdfium2 as pdfium

        doc = pdfium.PdfDocument(str(path))
        for index, degrees in rotate.items():
            doc[index].set_rotation(degrees)
        tmp = path.with_suffix(".rotated.pdf")
        doc.save(str(tmp))
        doc.close()
        os.replace(tmp, path)
    return path


def _utf16_hex(text: str) -> str:
    return text.encode("utf-16-be").hex().upper()


def type3_pdf(path: Path, lines: list[list[str]], size: float = 12) -> Path:
    """A one-page PDF in a Type3 font: ``lines`` of words, each word a list of characters
    (one glyph each, whatever Unicode text it stands for: a CJK ideograph, an emoji, a letter
    with its combining mark), words a glyph-width apart, lines 20 points apart."""
    chars = sorted({ch for line in lines for word in line for ch in word})
    if len(chars) > 200:
        raise ValueError("at most 200 distinct characters in one Type3 font")
    code = {ch: 33 + k for k, ch in enumerate(chars)}
    # the content: one text object a line, each word shown at its own position
    ops = []
    for n, line in enumerate(lines):
        x = 72.0
        for word in line:
            hexs = "".join(f"{code[ch]:02X}" for ch in word)
            ops.append(f"BT /T3 {size} Tf 1 0 0 1 {x:.2f} {720 - 20 * n:.2f} Tm <{hexs}> Tj ET")
            x += size * 0.6 * (len(word) + 1)
    content = "\n".join(ops).encode("ascii")
    glyph = b"600 0 50 0 550 700 d1 50 0 500 700 re f"
    procs = {ch: f"g{code[ch]}" for ch in chars}
    first, last = 33, 33 + len(chars) - 1
    cmap = ("/CIDInit /ProcSet findresource begin 12 dict begin begincmap /CMapName /T3U def "
            "/CMapType 2 def 1 begincodespacerange <00> <FF> endcodespacerange "
            f"{len(chars)} beginbfchar\n"
            + "\n".join(f"<{code[ch]:02X}> <{_utf16_hex(ch)}>" for ch in chars)
            + "\nendbfchar endcmap CMapName currentdict /CMap defineresource pop end end").encode("ascii")
    objects: list[bytes] = []

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    catalog = add(b"")
    pages = add(b"")
    page = add(b"")
    contents = add(b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream")
    glyph_ids = {ch: add(b"<< /Length %d >>\nstream\n" % len(glyph) + glyph + b"\nendstream") for ch in chars}
    tounicode = add(b"<< /Length %d >>\nstream\n" % len(cmap) + cmap + b"\nendstream")
    char_procs = " ".join(f"/{procs[ch]} {glyph_ids[ch]} 0 R" for ch in chars)
    differences = " ".join(f"{code[ch]} /{procs[ch]}" for ch in chars)
    widths = " ".join("600" for _ in chars)
    font = add((f"<< /Type /Font /Subtype /Type3 /FontBBox [0 0 600 700] /FontMatrix [0.001 0 0 0.001 0 0] "
                f"/CharProcs << {char_procs} >> /Encoding << /Type /Encoding /Differences [{differences}] >> "
                f"/FirstChar {first} /LastChar {last} /Widths [{widths}] /ToUnicode {tounicode} 0 R "
                f"/Resources << >> >>").encode("ascii"))
    objects[catalog - 1] = f"<< /Type /Catalog /Pages {pages} 0 R >>".encode()
    objects[pages - 1] = f"<< /Type /Pages /Kids [{page} 0 R] /Count 1 >>".encode()
    objects[page - 1] = (f"<< /Type /Page /Parent {pages} 0 R /MediaBox [0 0 612 792] /Contents {contents} 0 R "
                         f"/Resources << /Font << /T3 {font} 0 R >> >> >>").encode()
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for k, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % k + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, catalog, xref)
    Path(path).write_bytes(bytes(out))
    return Path(path)
