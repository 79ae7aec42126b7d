"""OCR engine module (kohaku/ingest/text/ocr.py): garbage detection of text layers, word accuracy on a
rendered scan with known text, boxes in PDF points in reading order, timeouts and a missing
engine as named errors, pdfplumber's image-only and OCR-layered test files.

The tests that run the engine skip (with the install command) where Tesseract is not installed:
``bash scripts/setup_ocr.sh``. pdfplumber's 3.4 MB ``pr-136-example.pdf`` (a scan with an OCR
layer) is read from ``$KOHAKU_PDFPLUMBER_PDFS`` (its tests/pdfs folder) when set.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from kohaku.ingest.text.ocr import (OcrOptions, OcrPage, OcrUnavailable, engine_identity, layer_stats, ocr_available,
                             ocr_page, ocr_pdf, page_needs_ocr, plan_pages, render_page, rotate_back, text_layer_usable,
                             word_accuracy)

DATA = Path(__file__).parent / "data" / "ocr"
RENDERED = DATA / "rendered_scan.pdf"
IMAGE_ONLY = DATA / "pdfplumber-issue-203-decimalize.pdf"
OPTS = OcrOptions()
MISSING = ocr_available(OPTS)
needs_engine = pytest.mark.skipif(MISSING is not None, reason=f"OCR engine not installed: {MISSING}")


def _layer_text(path: Path) -> list[str]:
    import pdfplumber

    with pdfplumber.open(path) as pdf:
        return [p.extract_text() or "" for p in pdf.pages]


# --- options ---------------------------------------------------------------------------------

@pytest.mark.parametrize("key,value", [("mode", "sometimes"), ("engine", "abbyy"), ("lang", "eng; rm"),
                                       ("dpi", 10), ("timeout_s", 0), ("max_pages", -1), ("min_chars", -5),
                                       ("min_wordlike", 1.5), ("psm", 7), ("threads", 0)])
def test_validate_names_the_bad_key(key, value):
    opts = OcrOptions(**{key: value})
    with pytest.raises(ValueError, match=rf"ocr\.{key}\b"):
        opts.validate()


def test_defaults_validate():
    OcrOptions().validate()
    OcrOptions(mode="always", lang="eng+deu", dpi=200).validate()


# --- is the text layer usable? ---------------------------------------------------------------

USABLE = [
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Revenue 2024 2023\n12,345 11,020\n4,512 3,998",                       # a table of numbers
    "关于浙江菲达环保科技股份有限公司年度报告中有关财务事项的说明",              # CJK: no spaces
    "Привет, как дела? Это обычный русский текст для проверки.",
    "Thecurrentissueandfulltextarchiveofthisjournalisavailableat www.emeraldinsight.com",  # tight setting
    "1. Mise en contexte ........................................ 4\n1.1. Pourquoi? ........ 5",  # dot leaders
]
GARBAGE = [
    "",
    "   \n\t ",
    "Page 3",                                                                # too short: none
    "(cid:12)(cid:34)(cid:56)(cid:78)(cid:90)(cid:11)(cid:22)(cid:33)(cid:44)(cid:55)",
    "#$%^&*!@ ~~ }{|?><;: ++== ##@@!! %%^^&&** ()[]{}",
    "\x01\x02\x03\x04\x05\x06\x07\x08\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a",
    "".join(chr(0xE000 + i) for i in range(30)),                             # private-use glyph codes
    "\ufffd" * 30,
    "xKqZ vBnMwR pLkJhG tRwQz XcVbNm zXcVbN qWrTpS",                        # consonant soup, rAnDoM case
    "Ã©Ã¨Ã Ã¢Ã®Ã´Ã»Ã§ Ã©Ã¨Ã Ã¢Ã®Ã´Ã»Ã§ Ã©Ã¨Ã Ã¢Ã®",                               # mojibake
]


@pytest.mark.parametrize("text", USABLE)
def test_real_text_is_usable(text):
    assert text_layer_usable(text, OPTS), layer_stats(text)


@pytest.mark.parametrize("text", GARBAGE)
def test_garbage_is_not_usable(text):
    assert not text_layer_usable(text, OPTS), layer_stats(text)


def test_cid_soup_with_a_few_words_is_not_usable():
    text = "Annual report " + "(cid:3)(cid:17)(cid:42) " * 20
    assert not text_layer_usable(text, OPTS)


def test_modes_and_page_budget():
    assert page_needs_ocr("", OPTS) and not page_needs_ocr(USABLE[0], OPTS)
    assert page_needs_ocr(USABLE[0], OcrOptions(mode="always"))
    assert not page_needs_ocr("", OcrOptions(mode="off"))
    keep, warning = plan_pages([True, False, True, True, True], OcrOptions(max_pages=2))
    assert keep == [0, 2] and "ocr.max_pages=2" in warning and "2 page(s)" in warning and "page 4" in warning
    assert plan_pages([True, False], OPTS) == ([0], None)


def test_fixture_text_layers():
    """The rendered scan: page 1 has no text layer (-> OCR), page 2's invisible layer is usable
    (-> not OCRed again in auto). pdfplumber's image-only file: no usable layer on any page."""
    p1, p2 = _layer_text(RENDERED)
    assert p1.strip() == ""
    assert page_needs_ocr(p1, OPTS) and not page_needs_ocr(p2, OPTS)
    assert [text_layer_usable(t, OPTS) for t in (p1, p2)] == [False, True]
    assert word_accuracy(p2, (DATA / "rendered_scan.p2.truth.txt").read_text()) == 1.0
    layers = _layer_text(IMAGE_ONLY)
    assert len(layers) == 3 and not any(text_layer_usable(t, OPTS) for t in layers)


def test_word_accuracy_definition():
    assert word_accuracy("a b c d", "a b c d") == 1.0
    assert word_accuracy("a x c d", "a b c d") == 0.75           # one substitution
    assert word_accuracy("a b c", "a b c d") == 0.75             # one deletion
    assert word_accuracy("A b, c d", "a b c d") == 0.5           # case and punctuation count
    assert word_accuracy("c d a b", "a b c d") == 0.0            # order counts (columns swapped)
    assert word_accuracy("", "") == 1.0 and word_accuracy("x y z w v", "a") == 0.0


# --- missing engine ----------------------------------------------------------------------------

def test_missing_engine_names_the_package():
    opts = OcrOptions(command="/nonexistent/bin/tesseract-kohaku-test")
    with pytest.raises(OcrUnavailable) as exc:
        engine_identity(opts)
    msg = str(exc.value)
    assert "\n" not in msg and "tesseract-ocr" in msg and "scripts/setup_ocr.sh" in msg
    assert ocr_available(opts) == msg


def test_missing_engine_page_is_an_error_not_an_exception():
    from PIL import Image

    page = ocr_page(Image.new("L", (100, 100), 255), 72, 72, OcrOptions(command="/nonexistent/tesseract"))
    assert page.words == [] and page.error and "did not start" in page.error


def _fake_engine(tmp_path: Path, body: str) -> str:
    exe = tmp_path / "fake-tesseract"
    exe.write_text("#!/bin/sh\n" + body + "\n")
    exe.chmod(0o755)
    return str(exe)


def test_a_hanging_engine_is_killed_at_the_timeout(tmp_path):
    import time

    from PIL import Image

    # the shell waits on a child that holds the output pipe: the whole process group must go
    opts = OcrOptions(command=_fake_engine(tmp_path, "sleep 30; echo late"), timeout_s=0.5)
    t0 = time.perf_counter()
    page = ocr_page(Image.new("L", (200, 200), 255), 144, 144, opts)
    assert time.perf_counter() - t0 < 5
    assert page.words == [] and page.error == "OCR timed out after 0.5 s (ocr.timeout_s)"


def test_a_failing_engine_is_a_page_error(tmp_path):
    from PIL import Image

    opts = OcrOptions(command=_fake_engine(tmp_path, "cat >/dev/null; echo 'Error: bad page' >&2; exit 3"))
    page = ocr_page(Image.new("L", (200, 200), 255), 144, 144, opts)
    assert page.words == [] and page.error == "tesseract exited 3: Error: bad page"
    garbled = OcrOptions(command=_fake_engine(tmp_path, "cat >/dev/null; echo '<html><body'"))
    assert ocr_page(Image.new("L", (200, 200), 255), 144, 144, garbled).error.startswith("unreadable tesseract output")


def test_an_engine_that_is_not_tesseract_is_unavailable(tmp_path):
    opts = OcrOptions(command=_fake_engine(tmp_path, "echo 'something 1.0'"))
    with pytest.raises(OcrUnavailable, match="tesseract-ocr"):
        engine_identity(opts)


@needs_engine
def test_missing_language_names_its_package():
    with pytest.raises(OcrUnavailable, match=r"tesseract-ocr-xqz\b"):
        engine_identity(OcrOptions(lang="eng+xqz"))


# --- the engine ---------------------------------------------------------------------------------

@needs_engine
def test_engine_identity():
    ident = engine_identity(OPTS)
    assert set(ident) == {"engine", "version", "lang"}
    assert ident["engine"] == "tesseract" and ident["lang"] == "eng" and re.match(r"\d+\.\d+", ident["version"])


@pytest.fixture(scope="module")
def rendered_page1() -> tuple[OcrPage, float, float]:
    if MISSING:
        pytest.skip(f"OCR engine not installed: {MISSING}")
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(str(RENDERED))
    page = pdf[0]
    w, h = page.get_size()
    result = ocr_page(render_page(page, OPTS.dpi), w, h, OPTS)
    page.close()
    pdf.close()
    return result, w, h


def test_rendered_scan_word_accuracy(rendered_page1):
    page, _, _ = rendered_page1
    assert page.error is None
    truth = (DATA / "rendered_scan.truth.txt").read_text(encoding="utf-8")
    acc = word_accuracy(page.text, truth)
    assert acc >= 0.95, (acc, page.text)
    assert 80 <= page.mean_conf <= 100 and page.seconds > 0


def test_boxes_in_points_within_the_page(rendered_page1):
    page, w, h = rendered_page1
    assert len(page.words) > 200
    for wd in page.words:
        assert set(wd) >= {"text", "x0", "x1", "top", "bottom", "size", "fontname", "upright", "conf"}
        assert 0 <= wd["x0"] < wd["x1"] <= w and 0 <= wd["top"] < wd["bottom"] <= h, wd
        assert wd["fontname"] == "" and 0 <= wd["conf"] <= 100 and wd["text"].strip() == wd["text"] != ""
    by_text = {wd["text"]: wd for wd in page.words}
    # the heading is drawn at 60 pt from the left edge, 64 pt from the top (scripts/make_ocr_fixture.py)
    head = by_text["Halvorsen"]
    assert 55 <= head["x0"] <= 65 and 55 <= head["top"] <= 72
    # the right column starts at 60 + 234 + 24 = 318 pt
    assert 312 <= by_text["Members"]["x0"] <= 324


def test_reading_order_and_rows(rendered_page1):
    """Engine order: heading, byline, the whole left column, then the right column, then the
    closing paragraph; the words of a printed line share one top (one row for the layout code)."""
    page, _, _ = rendered_page1
    texts = [wd["text"] for wd in page.words]
    order = [texts.index(t) for t in ("Halvorsen", "Prepared", "cooperative", "crew.", "Members", "meeting.",
                                      "Questions")]
    assert order == sorted(order)
    lines: dict[int, set[float]] = {}
    for wd in page.words:
        lines.setdefault(wd["line"], set()).add(wd["top"])
    assert all(len(tops) == 1 for tops in lines.values())
    # words of a line left to right
    for ln in lines:
        xs = [wd["x0"] for wd in page.words if wd["line"] == ln]
        assert xs == sorted(xs)


def test_sizes_heading_larger_body_uniform(rendered_page1):
    page, _, _ = rendered_page1
    body = [wd["size"] for wd in page.words if wd["block"] > 2]
    heading = [wd["size"] for wd in page.words if wd["text"] in ("Halvorsen", "Wind", "Annual", "Review")]
    assert len(set(body)) == 1, sorted(set(body))
    assert 9.0 <= body[0] <= 12.0  # 10.5 pt DejaVu Serif
    assert min(heading) >= 1.5 * body[0]  # 18 pt


@needs_engine
def test_timeout_is_an_error_string():
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(str(RENDERED))
    page = pdf[0]
    w, h = page.get_size()
    image = render_page(page, 100)
    page.close()
    pdf.close()
    res = ocr_page(image, w, h, OcrOptions(timeout_s=0.001))
    assert res.words == [] and res.error is not None and "timed out" in res.error and "ocr.timeout_s" in res.error


@needs_engine
@pytest.mark.parametrize("turn", [90, 180])
def test_sideways_and_upside_down_pages_are_turned(turn):
    """The rendered page as a scanner may store it: turned 90 degrees counter-clockwise (a
    landscape scan) or upside down. The words come back upright, in the page's own frame,
    with the same accuracy; rotate_back maps them onto the picture as given."""
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(str(RENDERED))
    page = pdf[0]
    image = render_page(page, 150)
    page.close()
    pdf.close()
    given = image.rotate(turn, expand=True)  # PIL turns counter-clockwise
    w, h = (792.0, 612.0) if turn == 90 else (612.0, 792.0)
    res = ocr_page(given, w, h, OcrOptions(dpi=150))
    assert res.error is None and res.rotation == turn and (res.width_pt, res.height_pt) == (612.0, 792.0)
    assert word_accuracy(res.text, (DATA / "rendered_scan.truth.txt").read_text(encoding="utf-8")) >= 0.95
    head = next(wd for wd in res.words if wd["text"] == "Halvorsen")
    assert 55 <= head["x0"] <= 65 and 55 <= head["top"] <= 72  # as on the upright page
    x0, top, x1, bottom = rotate_back((head["x0"], head["top"], head["x1"], head["bottom"]), res.rotation,
                                      res.width_pt, res.height_pt)
    if turn == 90:  # on the given picture the heading runs up the left edge
        assert 55 <= x0 <= 72 and x1 - x0 < bottom - top and bottom <= 612 - 55
    else:           # upside down: bottom right
        assert x1 >= 612 - 65 - 1 and bottom >= 792 - 72


def test_rotate_back_is_the_inverse_turn():
    box = (10.0, 20.0, 30.0, 60.0)  # in a 100 x 200 turned frame
    assert rotate_back(box, 0, 100, 200) == box
    assert rotate_back(box, 180, 100, 200) == (70.0, 140.0, 90.0, 180.0)
    assert rotate_back(box, 90, 100, 200) == (20.0, 70.0, 60.0, 90.0)   # given picture is 200 x 100
    assert rotate_back(box, 270, 100, 200) == (140.0, 10.0, 180.0, 30.0)


@needs_engine
def test_blank_page_has_no_words_and_no_error():
    from PIL import Image

    page = ocr_page(Image.new("RGB", (850, 1100), "white"), 612, 792, OPTS)
    assert page.error is None and page.words == [] and page.mean_conf == 0.0 and page.text == ""


@needs_engine
def test_image_only_pdfplumber_file_yields_words():
    """pdfplumber's issue-203 file (Chinese scan, no text layer): with English language data the
    digits come out: the customs registration code, the street number, the amount in yuan."""
    # orient=False: English data reads this page at confidence ~36, which would add an orientation
    # check (~1 CPU-s; it answers "upright") that other tests cover
    (page,) = ocr_pdf(IMAGE_ONLY, OcrOptions(dpi=200, orient=False), pages=[0])
    assert page.error is None and len(page.words) >= 20 and page.rotation == 0
    text = page.text
    assert "2301914001" in text and "1299" in text and re.search(r"668730\.\s?23", text), text


def test_cjk_neighbours_on_a_line_merge():
    from kohaku.ingest.text.ocr import _merge_cjk

    def w(text, x0, x1, line=1):
        return {"text": text, "px0": x0, "px1": x1, "conf": 90.0, "line": line}

    out = _merge_cjk([w("行政", 0, 20), w("处", 22, 30), w("罚", 32, 40), w("2019", 45, 70), w("年", 72, 80),
                      w("号", 0, 10, line=2), w("书", 12, 20, line=3)])
    assert [x["text"] for x in out] == ["行政处罚", "2019", "年", "号", "书"]
    assert (out[0]["px0"], out[0]["px1"]) == (0, 40)


@pytest.mark.skipif(ocr_available(OcrOptions(lang="chi_sim")) is not None,
                    reason="Chinese language data not installed: bash scripts/setup_ocr.sh eng chi_sim")
def test_image_only_pdfplumber_file_in_chinese():
    (page,) = ocr_pdf(IMAGE_ONLY, OcrOptions(lang="chi_sim", dpi=150), pages=[0])
    assert page.error is None
    assert "行政处罚决定书" in page.text and "2301914001" in page.text, page.text


@pytest.mark.skipif(not os.environ.get("KOHAKU_PDFPLUMBER_PDFS"),
                    reason="KOHAKU_PDFPLUMBER_PDFS (pdfplumber's tests/pdfs folder) not set")
def test_pdfplumber_scan_with_ocr_layer_is_not_ocred_again():
    path = Path(os.environ["KOHAKU_PDFPLUMBER_PDFS"]) / "pr-136-example.pdf"
    if not path.exists():
        pytest.skip(f"{path} not found")
    layers = _layer_text(path)
    assert len(layers) == 6
    assert all(text_layer_usable(t, OPTS) for t in layers)
    assert not any(page_needs_ocr(t, OPTS) for t in layers)
