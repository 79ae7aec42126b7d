"""OCR for pages without a usable text layer (scans, slides exported as pictures).

The engine is Tesseract 5 (Debian ``tesseract-ocr`` + ``tesseract-ocr-eng``; ``bash
scripts/setup_ocr.sh`` installs it), called as a command with hOCR output: no Python wrapper, no
model download, one process per page, so a per-page timeout is a plain ``subprocess`` timeout
and a crash of the engine is an error string for that page. Why Tesseract and not an ONNX engine
(RapidOCR, OnnxTR): ``scripts/bench_ocr.py`` and the notes in tests/data/ocr/README.md.

What the parse stage uses, per page:

- ``text_layer_usable(text, opts)``: is the page's own text layer worth reading (enough
  characters, mostly printable, mostly word-like tokens)? In ``auto`` mode a page is recognised
  only when it is not; ``page_needs_ocr`` says it for each mode;
- ``engine_identity(opts)``: ``{"engine", "version", "lang"}`` for the cache key; raises
  ``OcrUnavailable`` with one line naming the package to install when the engine or its language
  data is missing;
- ``ocr_page(image, page_width_pt, page_height_pt, opts)``: the page picture (any resolution:
  pixels are mapped to points by the image's size against the page's) -> ``OcrPage`` whose words
  are the dicts the layout code reads from pdfplumber (``text, x0, x1, top, bottom, size,
  fontname``) plus ``conf`` (0-100) and ``block``/``line`` numbers, in the engine's reading order
  (block, paragraph, line, word). ``top``/``bottom`` are the line's box, not the word's, so all
  words of a printed line share one ``top`` (ascenders and descenders do not split a row);
  ``size`` is the line's height estimate in points (tesseract's ``x_size``, ascender to
  descender, checked against the line's x-height: ``_line_sizes``), snapped to the most frequent
  size within 8 % on the page (``_even_sizes``), so body text has one size and headings are
  larger: 10.1 for 10.5 pt and 17.2 for 18 pt DejaVu Serif (about 0.96 x the font size);
  a page scanned sideways or upside down is turned first (``OcrPage.rotation``, ``rotate_back``);
- ``plan_pages(needs, opts)``: which pages to recognise within ``max_pages``, and the warning.
"""

from __future__ import annotations

import functools
import io
import os
import re
import resource
import shutil
import signal
import subprocess
import time
import unicodedata
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kohaku.core.config import not_keyed

if TYPE_CHECKING:  # PIL is only needed by the caller that renders pages
    from PIL import Image

MODES = ("off", "auto", "always")
ENGINES = ("tesseract",)
SETUP_HINT = "bash scripts/setup_ocr.sh"


class OcrUnavailable(Exception):
    """The OCR engine or its language data is not installed (the message is one line naming it)."""


@dataclass
class OcrOptions:
    mode: str = "auto"          # off | auto | always
    engine: str = "tesseract"   # the only engine: tests/data/ocr/README.md says why
    lang: str = "eng"           # tesseract language(s), "eng+deu"; Debian tesseract-ocr-<lang> each
    dpi: int = 200              # render resolution (200: as accurate as 300 here, 1.2-1.5x faster)
    timeout_s: float = 60.0     # per page; past it the page is an error string
    max_pages: int = 200        # pages recognised per document; the rest get a warning
    min_chars: int = 20         # a text layer with fewer non-space characters counts as none
    min_printable: float = 0.9  # share of printable characters a usable text layer needs
    min_wordlike: float = 0.5   # share of word-like token characters a usable text layer needs
    psm: int = 3                # tesseract page segmentation: 3 = automatic (columns, blocks)
    threads: int = not_keyed(1)  # OMP_THREAD_LIMIT per call: parse workers are the parallelism
    command: str = not_keyed("")  # the tesseract executable; "" = "tesseract" on PATH (its version is keyed)
    orient: bool = True         # turn pages whose text is sideways or upside down (see ocr_page)

    def validate(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"ocr.mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.engine not in ENGINES:
            raise ValueError(f"ocr.engine must be one of {', '.join(ENGINES)}, got {self.engine!r}")
        if not isinstance(self.lang, str) or not re.fullmatch(r"[A-Za-z0-9_]+(\+[A-Za-z0-9_]+)*", self.lang):
            raise ValueError(f"ocr.lang must be tesseract language codes joined by '+', got {self.lang!r}")
        if not 50 <= int(self.dpi) <= 1200:
            raise ValueError(f"ocr.dpi must be within 50..1200, got {self.dpi!r}")
        if not float(self.timeout_s) > 0:
            raise ValueError(f"ocr.timeout_s must be > 0, got {self.timeout_s!r}")
        if int(self.max_pages) < 0:
            raise ValueError(f"ocr.max_pages must be >= 0, got {self.max_pages!r}")
        if int(self.min_chars) < 0:
            raise ValueError(f"ocr.min_chars must be >= 0, got {self.min_chars!r}")
        for key in ("min_printable", "min_wordlike"):
            v = getattr(self, key)
            if not 0.0 <= float(v) <= 1.0:
                raise ValueError(f"ocr.{key} must be within 0..1, got {v!r}")
        if self.psm not in (1, 3, 4, 6, 11, 12):
            raise ValueError(f"ocr.psm must be a page-level tesseract mode (1, 3, 4, 6, 11, 12), got {self.psm!r}")
        if int(self.threads) < 1:
            raise ValueError(f"ocr.threads must be >= 1, got {self.threads!r}")


@dataclass
class OcrPage:
    words: list[dict[str, Any]] = field(default_factory=list)
    mean_conf: float = 0.0           # mean word confidence, 0-100 (0 when no words)
    seconds: float = 0.0             # wall time of this page's recognition
    cpu_seconds: float = 0.0         # the engine process's CPU time (user + sys), steadier on a busy machine
    error: str | None = None         # why the page has no words (failure, timeout); None when it ran
    rotation: int = 0                # clockwise degrees the page was turned to read it (0, 90, 180, 270)
    width_pt: float = 0.0            # the frame the words are in: the page's, or the turned page's
    height_pt: float = 0.0

    @property
    def text(self) -> str:
        """The words, one recognised line a line (engine order)."""
        lines: list[str] = []
        key = None
        for w in self.words:
            k = (w.get("block"), w.get("line"))
            if k != key or not lines:
                lines.append(w["text"])
                key = k
            else:
                lines[-1] += " " + w["text"]
        return "\n".join(lines)


# --- is the text layer usable? ---------------------------------------------------------------

_CID = re.compile(r"\(cid:\d+\)")
_LEADER = re.compile(r"([.\-_·…=*~ ])\1{2,}")  # dot leaders and rules in a table of contents
_LEADER_TRIPLES = tuple(c * 3 for c in ".-_·…=*~ ")  # _LEADER matches only where one of these is
_MOJIBAKE = re.compile("[\u00c2\u00c3][\u0080-\u00bf]|\u00e2\u20ac")  # UTF-8 read as Latin-1: "Ã©", "â€"
_RUN = re.compile(r"[^\W\d_]+|\d+")  # a run of letters (any script) or of digits
_LONG_LETTERS = re.compile(r"[^\W\d_]{4,}")  # a run of letters that _letters_ok can turn down
_LONG_ASCII_LETTERS = re.compile(r"[A-Za-z]{4,}")  # the same in a text whose only letters are ASCII
_WORD_CHAR = re.compile(r"\w")
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_LATIN_VOWELS = set("aeiouyAEIOUYàáâäæèéêëìíîïòóôöøùúûüýÿœÀÁÂÄÆÈÉÊËÌÍÎÏÒÓÔÖØÙÚÛÜÝŒ")
_CONSONANTS6 = re.compile(r"[b-df-hj-np-tv-xzB-DF-HJ-NP-TV-XZ]{7,}")  # seven consonants in a row


def _latin(ch: str) -> bool:
    return ch.isascii() or unicodedata.name(ch, "").startswith("LATIN")


def _printable(ch: str) -> bool:
    if ch == "\ufffd":
        return False
    cat = unicodedata.category(ch)
    return cat[0] in "LNPS" or cat == "Mn"


def _in_run(ch: str) -> bool:
    """Is the character part of a ``_RUN`` match (a letter or digit run)? Those are the word
    characters but "_"; each belongs to exactly one maximal run."""
    return ch != "_" and _WORD_CHAR.match(ch) is not None


@functools.lru_cache(maxsize=1 << 14)
def _char_kind(ch: str) -> tuple[bool, bool, bool]:
    """(space, printable, in a run) of one character, as ``layer_stats`` counts it."""
    return ch.isspace(), _printable(ch), _in_run(ch)


def _ascii_bytes(keep: Any) -> bytes:
    return bytes(b for b in range(128) if keep(chr(b)))


# ASCII characters by kind, for counting them in a text's UTF-8 bytes (bytes.translate):
# built from the same predicates as _char_kind, so the counts are the same
_ASCII_SPACE = _ascii_bytes(str.isspace)
_ASCII_PRINTABLE = _ascii_bytes(lambda c: not c.isspace() and _printable(c))
_ASCII_RUN = _ascii_bytes(_in_run)


@functools.lru_cache(maxsize=1 << 16)
def _letters_ok(run: str) -> bool:
    """Does a run of letters look like text? Other scripts (CJK, Cyrillic, ...) do; a Latin run
    does when it has vowels, no seven consonants in a row, few case flips (rAnDoM) and is not
    mostly accented letters. Words run together by a tight text layer
    ("Thecurrentissueandfulltext") still pass: that is real text. (Cached: words repeat.)"""
    if not run.isascii() and not all(_latin(c) for c in run):
        return True
    if len(run) <= 3:
        return True
    vowels = sum(1 for c in run if c in _LATIN_VOWELS)
    if vowels < 0.15 * len(run):
        return False
    if _CONSONANTS6.search(run):
        return False
    flips = sum(1 for a, b in zip(run, run[1:]) if a.islower() and b.isupper())
    if flips >= 3 and flips > 0.2 * len(run):
        return False
    if sum(1 for c in run if not c.isascii()) > 0.5 * len(run):
        return False
    return True


@functools.lru_cache(maxsize=1 << 16)
def _bad_run(run: str) -> int:
    """The length of a letter run that does not look like text (``_letters_ok``), else 0."""
    return 0 if run[0].isdigit() or _letters_ok(run) else len(run)


def layer_stats(text: str) -> dict[str, float]:
    """What ``text_layer_usable`` decides on: non-space characters, the printable share and the
    word-like share (characters in digit runs or in letter runs that look like text, over all
    non-space characters; dot leaders and rules left out). pdfminer's "(cid:N)" placeholder counts
    as one unprintable character, and so does each character of a mojibake pair ("Ã©").
    Known limit: letters shifted by a broken font map ("Wkh txlfn eurzq") still look like text.

    Counted without a Python step per character (it runs on every page): ASCII characters by
    kind in the text's UTF-8 bytes, the others per distinct character; every character of a
    letter or digit run is word-like but those of the letter runs ``_letters_ok`` turns down,
    which are four letters or longer."""
    if "(cid:" in text:
        n_cid = len(_CID.findall(text))
        rest = _CID.sub(" ", text)
    else:
        n_cid, rest = 0, text
    if any(t in rest for t in _LEADER_TRIPLES):
        rest = _LEADER.sub(" ", rest)
    if not rest.isascii() and ("\u00c2" in rest or "\u00c3" in rest or "\u00e2" in rest):
        rest = _MOJIBAKE.sub(lambda m: "\ufffd" * len(m.group()), rest)
    raw = rest.encode("utf-8", "surrogatepass")  # non-ASCII characters are bytes >= 0x80: in no class
    size = len(raw)
    spaces = size - len(raw.translate(None, _ASCII_SPACE))
    printable = size - len(raw.translate(None, _ASCII_PRINTABLE))
    in_runs = size - len(raw.translate(None, _ASCII_RUN))
    other_letters = False  # a non-ASCII character in a run: letter runs need the Unicode pattern
    if not rest.isascii():
        for ch, k in Counter(_NON_ASCII.findall(rest)).items():
            space, prt, run = _char_kind(ch)
            if space:
                spaces += k
            elif prt:
                printable += k
            if run:
                in_runs += k
                other_letters = True
    n = len(rest) - spaces + n_cid
    if n == 0:
        return {"chars": 0.0, "printable": 0.0, "wordlike": 0.0}
    long_runs = (_LONG_LETTERS if other_letters else _LONG_ASCII_LETTERS).findall(rest)
    good = in_runs - sum(map(_bad_run, long_runs))
    return {"chars": float(n), "printable": printable / n, "wordlike": good / n}


def text_layer_usable(text: str, opts: OcrOptions) -> bool:
    """False when the page's text layer is none (fewer than ``min_chars`` non-space characters)
    or mostly garbage: under ``min_printable`` printable characters (control and private-use
    codes, U+FFFD, pdfminer's "(cid:N)" for glyphs without a Unicode mapping) or under
    ``min_wordlike`` of its characters in word-like runs (letters of any script, digits; not
    symbol soup, vowel-less or mojibake Latin strings, rAnDoM case). See ``layer_stats``."""
    s = layer_stats(text or "")
    if s["chars"] < max(1, opts.min_chars):
        return False
    return s["printable"] >= opts.min_printable and s["wordlike"] >= opts.min_wordlike


def page_needs_ocr(text: str, opts: OcrOptions) -> bool:
    """off: never; always: every page; auto: the pages whose text layer is not usable."""
    if opts.mode == "off":
        return False
    if opts.mode == "always":
        return True
    return not text_layer_usable(text, opts)


def plan_pages(needs: list[bool], opts: OcrOptions) -> tuple[list[int], str | None]:
    """The page indices to recognise (the first ``max_pages`` that need it) and the warning for
    the rest (None when all fit the budget)."""
    want = [i for i, n in enumerate(needs) if n]
    keep = want[: opts.max_pages]
    if len(want) > len(keep):
        skipped = want[len(keep):]
        return keep, (f"OCR page budget (ocr.max_pages={opts.max_pages}) reached: {len(skipped)} page(s) "
                      f"without a usable text layer not read (first: page {skipped[0] + 1})")
    return keep, None


# --- the engine ----------------------------------------------------------------------------------

def _command(opts: OcrOptions) -> str:
    return opts.command or "tesseract"


def _debian_lang(code: str) -> str:
    return "tesseract-ocr-" + code.lower().replace("_", "-")


@functools.lru_cache(maxsize=16)
def _identity(command: str, lang: str) -> tuple[str, str, str]:
    exe = shutil.which(command)
    if exe is None:
        raise OcrUnavailable(f"OCR engine not found: no '{command}' command; install the Debian packages "
                             f"tesseract-ocr and {_debian_lang(lang.split('+')[0])} ({SETUP_HINT})")
    try:
        ver = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
        langs = subprocess.run([exe, "--list-langs"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        raise OcrUnavailable(f"OCR engine '{command}' does not run ({type(exc).__name__}: {exc}); reinstall the "
                             f"Debian package tesseract-ocr ({SETUP_HINT})") from None
    m = re.search(r"tesseract\s+v?(\d+\.\d+[\w.\-]*)", ver.stdout + ver.stderr)
    if ver.returncode != 0 or m is None:
        raise OcrUnavailable(f"'{command} --version' did not name a tesseract version; install the Debian "
                             f"package tesseract-ocr ({SETUP_HINT})")
    have = {ln.strip() for ln in (langs.stdout or "").splitlines()[1:] if ln.strip()}
    missing = [c for c in lang.split("+") if c not in have]
    if missing:
        pkgs = " ".join(_debian_lang(c) for c in missing)
        raise OcrUnavailable(f"tesseract {m.group(1)} has no language data for {'+'.join(missing)}: install the "
                             f"Debian package {pkgs} ({SETUP_HINT})")
    return "tesseract", m.group(1), lang


def engine_identity(opts: OcrOptions) -> dict[str, str]:
    """``{"engine", "version", "lang"}`` of the installed engine, for the parse cache key;
    ``OcrUnavailable`` (one line, naming the package) when it or its language data is missing.
    Cached per (command, lang) in the process."""
    engine, version, lang = _identity(_command(opts), opts.lang)
    return {"engine": engine, "version": version, "lang": lang}


def ocr_available(opts: OcrOptions) -> str | None:
    """None when the engine runs, else the one-line reason (``OcrUnavailable``'s message)."""
    try:
        engine_identity(opts)
    except OcrUnavailable as exc:
        return str(exc)
    return None


_BBOX = re.compile(r"bbox\s+(-?\d+)\s+(-?\d+)\s+(-?\d+)\s+(-?\d+)")
_WCONF = re.compile(r"x_wconf\s+(-?[\d.]+)")
_XSIZE = re.compile(r"x_size\s+([\d.]+)")
_XASC = re.compile(r"x_ascenders\s+([\d.]+)")
_XDESC = re.compile(r"x_descenders\s+([\d.]+)")
_MIN_PUNCT_CONF = 50.0  # a word without a letter or digit below this confidence is noise
_MIN_UPRIGHT_CONF = 60.0  # a first reading less confident than this may be upside down or sideways
_LINE_CLASSES = {"ocr_line", "ocr_header", "ocr_caption", "ocr_textfloat"}


def _parse_hocr(data: bytes) -> list[dict[str, Any]]:
    """Words (pixel boxes) from tesseract's hOCR, in its order; each with its line's box and
    x_size, and block/line numbers."""
    root = ET.fromstring(data)
    words: list[dict[str, Any]] = []
    n_line = 0
    n_block = 0

    def cls(el: ET.Element) -> str:
        return el.get("class", "")

    for el in root.iter():
        if cls(el) == "ocr_carea":
            n_block += 1
            for line in el.iter():
                if cls(line) not in _LINE_CLASSES:
                    continue
                title = line.get("title", "")
                lb = _BBOX.search(title)
                if lb is None:
                    continue
                lx0, ly0, lx1, ly1 = (int(v) for v in lb.groups())
                xs, xa, xd = (_XSIZE.search(title), _XASC.search(title), _XDESC.search(title))
                x_size = float(xs.group(1)) if xs else float(ly1 - ly0)
                x_height = x_size - float(xa.group(1)) - float(xd.group(1)) if xs and xa and xd else 0.0
                n_line += 1
                for w in line.iter():
                    if cls(w) != "ocrx_word":
                        continue
                    text = "".join(w.itertext()).strip()
                    wb = _BBOX.search(w.get("title", ""))
                    if not text or wb is None:
                        continue
                    conf = _WCONF.search(w.get("title", ""))
                    x0, _, x1, _ = (int(v) for v in wb.groups())
                    words.append({"text": text, "px0": x0, "px1": x1, "ptop": ly0, "pbottom": ly1,
                                  "lx0": lx0, "lx1": lx1,
                                  "xsize": x_size, "xheight": x_height,
                                  "conf": float(conf.group(1)) if conf else 0.0,
                                  "block": n_block, "line": n_line})
    return words


def _cjk(ch: str) -> bool:
    o = ord(ch)
    return (0x3000 <= o <= 0x30FF or 0x3400 <= o <= 0x4DBF or 0x4E00 <= o <= 0x9FFF or 0xAC00 <= o <= 0xD7AF
            or 0xF900 <= o <= 0xFAFF or 0xFF00 <= o <= 0xFFEF)


def _merge_cjk(words: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tesseract puts a space between Chinese/Japanese words ("行政 处 罚"); the layout code joins
    words with spaces, so neighbours on a line that meet at CJK characters become one word."""
    out: list[dict[str, Any]] = []
    for w in words:
        prev = out[-1] if out else None
        if prev is not None and prev["line"] == w["line"] and _cjk(prev["text"][-1]) and _cjk(w["text"][0]):
            n0, n1 = len(prev["text"]), len(w["text"])
            prev["conf"] = (prev["conf"] * n0 + w["conf"] * n1) / (n0 + n1)
            prev["text"] += w["text"]
            prev["px0"], prev["px1"] = min(prev["px0"], w["px0"]), max(prev["px1"], w["px1"])
            continue
        out.append(dict(w))
    return out


def _line_sizes(words: list[dict[str, Any]]) -> None:
    """Each word's ``xsize`` becomes its line's height estimate: the smaller of tesseract's
    x_size (ascender to descender; specks of dust below a line inflate it) and the line's
    x-height times the page's median x_size / x-height ratio (x-height is steady, but too
    small on a line without ascenders and descenders). Too large would make a body line a
    heading; too small is harmless."""
    per_line: dict[int, tuple[float, float]] = {}
    for w in words:
        per_line[w["line"]] = (w["xsize"], w["xheight"])
    ratios = sorted(xs / xh for xs, xh in per_line.values() if xh > 0.25 * xs)
    if not ratios:
        return
    k = ratios[len(ratios) // 2]
    for w in words:
        if w["xheight"] > 0:
            w["xsize"] = min(w["xsize"], k * w["xheight"])


def _even_sizes(values: list[float], tol: float = 0.08) -> dict[float, float]:
    """Each line height -> the most frequent height within ``tol`` of it, taken greedily from the
    most frequent down: a line without descenders ("was seen in the") measures ~7 % shorter
    than its neighbours, and must not look like a different font size. ``values`` has one entry
    per word, so frequency is weighted by words."""
    out: dict[float, float] = {}
    left = list(values)
    while left:
        counts: dict[float, int] = {}
        for v in left:
            counts[v] = counts.get(v, 0) + 1
        mode = max(counts, key=lambda v: (counts[v], v))
        near = [v for v in left if abs(v - mode) <= tol * mode]
        for v in near:
            out[v] = mode
        left = [v for v in left if v not in out]
    return out


class _PassError(Exception):
    pass


def _tesseract(gray: Image.Image, dpi: int, args: list[str], opts: OcrOptions, deadline: float,
               cpu: list[float], lang: str | None = None) -> bytes:
    """One tesseract run on a grayscale picture; its stdout. ``_PassError`` with the page's error
    string on a timeout (the page's whole budget: ``deadline``), a failure or a missing engine."""
    left = deadline - time.perf_counter()
    if left <= 0:
        raise _PassError(f"OCR timed out after {opts.timeout_s:g} s (ocr.timeout_s)")
    buf = io.BytesIO()
    gray.save(buf, "PPM")  # binary PGM: read by leptonica without decoding cost
    exe = shutil.which(_command(opts)) or _command(opts)
    cmd = [exe, "stdin", "stdout", "-l", lang or opts.lang, "--dpi", str(dpi), *args]
    env = {**os.environ, "OMP_THREAD_LIMIT": str(opts.threads)}
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        # its own process group: on a timeout the engine and anything it started are killed
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                start_new_session=True)
    except OSError as exc:
        raise _PassError(f"OCR engine did not start: {exc}") from None
    try:
        out, err = proc.communicate(buf.getvalue(), timeout=left)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise _PassError(f"OCR timed out after {opts.timeout_s:g} s (ocr.timeout_s)") from None
    except BaseException:
        _kill_group(proc)
        raise
    finally:
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu[0] += (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)  # other threads' children too
    if proc.returncode != 0:
        tail = (err or b"").decode("utf-8", "replace").strip().splitlines()
        raise _PassError(f"tesseract exited {proc.returncode}: {tail[-1] if tail else 'no message'}")
    return out


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.communicate()


def _recognise(gray: Image.Image, dpi: int, opts: OcrOptions, deadline: float,
               cpu: list[float]) -> list[dict[str, Any]]:
    data = _tesseract(gray, dpi, ["--psm", str(opts.psm), "-c", "tessedit_create_hocr=1", "-c", "hocr_font_info=0"],
                      opts, deadline, cpu)
    try:
        raw = _parse_hocr(data)
    except ET.ParseError as exc:
        raise _PassError(f"unreadable tesseract output: {exc}") from None
    # specks of dust come back as lone "." or "-" with confidence ~0: not words
    raw = [w for w in raw if w["conf"] >= _MIN_PUNCT_CONF or any(c.isalnum() for c in w["text"])]
    return _merge_cjk(raw)


def _tall(w: dict[str, Any]) -> bool:
    return w["pbottom"] - w["ptop"] > 1.5 * max(1, w["lx1"] - w["lx0"])


def _upright_score(raw: list[dict[str, Any]]) -> float:
    """Confidence summed over the words on lines wider than tall (what the layout can use)."""
    return sum(w["conf"] for w in raw if not _tall(w))


def _looks_sideways(raw: list[dict[str, Any]]) -> bool:
    """Text not upright: most words on lines taller than wide (tesseract read the lines turned),
    or a low mean confidence (upside-down text reads as garbage at ~40)."""
    if not raw:
        return False
    mean = sum(w["conf"] for w in raw) / len(raw)
    return sum(1 for w in raw if _tall(w)) > 0.5 * len(raw) or mean < _MIN_UPRIGHT_CONF


def _orientation(gray: Image.Image, dpi: int, opts: OcrOptions, deadline: float, cpu: list[float]) -> int:
    """Clockwise degrees that turn the picture upright (tesseract's orientation detection,
    ``--psm 0``; needs osd.traineddata, which tesseract-ocr brings); 0 when unsure."""
    try:
        # "-l osd": with a recognition language, 5.3 answers an upside-down page with "Rotate: 90"
        out = _tesseract(gray, dpi, ["--psm", "0"], opts, deadline, cpu, lang="osd").decode("utf-8", "replace")
    except _PassError as exc:
        if "timed out" in str(exc):
            raise
        return 0  # no osd data, too little text: keep the first reading
    rot = re.search(r"Rotate:\s*(\d+)", out)
    conf = re.search(r"Orientation confidence:\s*([\d.]+)", out)
    if rot is None or conf is None or float(conf.group(1)) < 2.0:
        return 0
    return int(rot.group(1)) % 360


def rotate_back(box: tuple[float, float, float, float], rotation: int, width_pt: float,
                height_pt: float) -> tuple[float, float, float, float]:
    """A box ``(x0, top, x1, bottom)`` in the frame of a page turned ``rotation`` degrees
    clockwise (``OcrPage.rotation``; ``width_pt`` x ``height_pt`` is that turned frame) -> the
    same box on the page as rendered (for figure crops and overlays)."""
    x0, t, x1, b = box
    if rotation == 90:     # turned frame (x', y') came from page (y', W' - x')
        return (t, width_pt - x1, b, width_pt - x0)
    if rotation == 180:
        return (width_pt - x1, height_pt - b, width_pt - x0, height_pt - t)
    if rotation == 270:    # turned frame (x', y') came from page (H' - y', x')
        return (height_pt - b, x0, height_pt - t, x1)
    return box


def ocr_page(image: Image.Image, page_width_pt: float, page_height_pt: float, opts: OcrOptions) -> OcrPage:
    """Recognise one rendered page. Never raises for the engine's sake: a missing engine, a
    failure or a timeout (``opts.timeout_s``, for the page as a whole) is ``OcrPage.error`` with
    no words.

    A page whose text is not upright (a landscape table scanned sideways, a page upside down) is
    turned: when the first reading looks sideways (``_looks_sideways``) and ``opts.orient``,
    tesseract's orientation detection says by how much, the picture is turned and read again,
    and the better reading is kept. Then ``OcrPage.rotation`` is the clockwise turn and the words
    are in the turned frame (``OcrPage.width_pt`` x ``height_pt``, swapped for 90 and 270), so
    rows read left to right; ``rotate_back`` maps a box to the page as rendered. Cost: a page
    read at a mean confidence under 60 (poor scans, a script the language data does not cover)
    pays one orientation check, ~1 CPU-s at 200 dpi, even when it is upright; a turned page
    about three readings."""
    t0 = time.perf_counter()
    deadline = t0 + float(opts.timeout_s)
    cpu = [0.0]
    gray = image.convert("L")
    w_px, h_px = gray.size
    if w_px <= 0 or h_px <= 0 or page_width_pt <= 0 or page_height_pt <= 0:
        return OcrPage(error=f"empty page image ({w_px}x{h_px} px, {page_width_pt}x{page_height_pt} pt)")
    sx, sy = page_width_pt / w_px, page_height_pt / h_px
    dpi = max(1, round(72.0 / sx))
    rotation = 0
    width_pt, height_pt = page_width_pt, page_height_pt
    try:
        raw = _recognise(gray, dpi, opts, deadline, cpu)
        if opts.orient and _looks_sideways(raw):
            turn = _orientation(gray, dpi, opts, deadline, cpu)
            if turn:
                turned = _recognise(gray.rotate(-turn, expand=True), dpi, opts, deadline, cpu)
                if _upright_score(turned) > _upright_score(raw):
                    raw, rotation = turned, turn
                    if turn in (90, 270):
                        width_pt, height_pt = page_height_pt, page_width_pt
                        sx, sy = sy, sx
    except _PassError as exc:
        return OcrPage(seconds=time.perf_counter() - t0, cpu_seconds=cpu[0], error=str(exc))
    _line_sizes(raw)
    sizes = _even_sizes([w["xsize"] for w in raw])
    words = []
    for w in raw:
        words.append({
            "text": w["text"],
            "x0": w["px0"] * sx, "x1": w["px1"] * sx,
            "top": w["ptop"] * sy, "bottom": w["pbottom"] * sy,
            "size": round(sizes.get(w["xsize"], w["xsize"]) * sy, 1),
            "fontname": "",
            "upright": True,  # as the pdfium engine's words; OCR words are read upright (turned pages too)
            "conf": w["conf"],
            "block": w["block"], "line": w["line"],
        })
    mean = sum(w["conf"] for w in words) / len(words) if words else 0.0
    return OcrPage(words=words, mean_conf=mean, seconds=time.perf_counter() - t0, cpu_seconds=cpu[0],
                   rotation=rotation, width_pt=width_pt, height_pt=height_pt)


# --- evaluation helpers (tests, bench) --------------------------------------------------------

def render_page(page: Any, dpi: int) -> Image.Image:
    """A pypdfium2 page rendered as the parse stage does (``render(scale=dpi/72).to_pil()``)."""
    return page.render(scale=dpi / 72).to_pil()


def ocr_pdf(path: Any, opts: OcrOptions, pages: list[int] | None = None) -> list[OcrPage]:
    """Render and recognise the given pages (all by default) of a PDF with pypdfium2."""
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(str(path))
    try:
        out = []
        for i in pages if pages is not None else range(len(pdf)):
            page = pdf[i]
            try:
                w, h = page.get_size()
                out.append(ocr_page(render_page(page, opts.dpi), w, h, opts))
            finally:
                page.close()
        return out
    finally:
        pdf.close()


def word_accuracy(hyp: str, ref: str) -> float:
    """1 - (word-level edit distance) / (number of reference words), floored at 0. Tokens are
    whitespace-separated, case-sensitive, punctuation kept (so "2025," != "2025"); order counts."""
    h, r = hyp.split(), ref.split()
    if not r:
        return 1.0 if not h else 0.0
    prev = list(range(len(h) + 1))
    for i, rw in enumerate(r, 1):
        cur = [i] + [0] * len(h)
        for j, hw in enumerate(h, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (rw != hw))
        prev = cur
    return max(0.0, 1.0 - prev[-1] / len(r))
