"""Readers that turn non-PDF documents into parse blocks.

A block is a dict ``{page, kind, text, font_size, level}`` with kind heading/text/table/caption.
Text keeps its raw line breaks; the tree stage re-flows it.

- WattBot JSON (``corpus/<id>.json``): every non-image paragraph of every section is a text
  block with its page number.
- Markdown: ``#`` headings (and setext underlines) become heading blocks with their level, pipe
  tables become table blocks (one row per line, cells joined by `` | ``), the rest text blocks
  split at blank lines.
- Plain text: decoded as UTF-8, else UTF-8 with BOM, cp1252 or latin-1 (with a warning); text
  blocks split at blank lines; form feeds start a new page.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from kohaku.core.errors import KohakuError

Block = dict[str, Any]


class DocumentError(KohakuError):
    """A document cannot be read; the message says why (shown in the documents table)."""


def _block(page: int, kind: str, text: str, font_size: float | None = None, level: int | None = None) -> Block:
    return {"page": page, "kind": kind, "text": text, "font_size": font_size, "level": level}


def decode_text(data: bytes) -> tuple[str, list[str]]:
    """Bytes -> (text, warnings). UTF-8 first; then a BOM-marked UTF-8, cp1252, latin-1."""
    if data.startswith(b"\xef\xbb\xbf"):
        return data[3:].decode("utf-8", errors="replace"), []
    try:
        return data.decode("utf-8"), []
    except UnicodeDecodeError as exc:
        first_error = exc
    for enc in ("cp1252", "latin-1"):
        try:
            text = data.decode(enc)
        except UnicodeDecodeError:
            continue
        return text, [f"not valid UTF-8 ({first_error.reason} at byte {first_error.start}); decoded as {enc}"]
    return data.decode("utf-8", errors="replace"), ["undecodable bytes replaced"]  # pragma: no cover


def read_json(path: Path) -> tuple[list[Block], int, list[str]]:
    """WattBot pre-extracted JSON -> (blocks, n_pages, warnings)."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8-sig"))
    except json.JSONDecodeError as exc:
        raise DocumentError(f"invalid JSON: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise DocumentError(f"JSON is not UTF-8: {exc}") from exc
    if not isinstance(doc, dict):
        raise DocumentError("JSON top level is not an object with 'sections'")
    blocks: list[Block] = []
    pages: set[int] = set()
    sections = doc.get("sections")
    if isinstance(sections, list) and sections:
        for s_idx, section in enumerate(sections, start=1):
            if not isinstance(section, dict):
                continue
            s_meta = section.get("metadata") or {}
            s_page = _page_of(s_meta, section.get("title"), s_idx)
            for para in section.get("paragraphs") or []:
                if not isinstance(para, dict):
                    continue
                meta = para.get("metadata") or {}
                if meta.get("attachment_type"):
                    continue  # image placeholders carry no text
                text = para.get("text") or ""
                if not text.strip():
                    continue
                page = _page_of(meta, None, s_page)
                pages.add(page)
                blocks.append(_block(page, "text", text))
    elif isinstance(doc.get("text"), str) and doc["text"].strip():
        blocks.append(_block(1, "text", doc["text"]))
        pages.add(1)
    else:
        raise DocumentError("JSON has neither 'sections' nor 'text'")
    if not blocks:
        raise DocumentError("JSON contains no text")
    return blocks, max(pages) if pages else 0, []


def _page_of(meta: dict[str, Any], title: Any, default: int) -> int:
    page = meta.get("page") if isinstance(meta, dict) else None
    if isinstance(page, int) or (isinstance(page, str) and page.isdigit()):
        return int(page)
    if isinstance(title, str):
        m = re.fullmatch(r"\s*page\s+(\d+)\s*", title, re.I)
        if m:
            return int(m.group(1))
    return default


_MD_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_MD_TABLE_SEP = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")


def _md_cells(line: str) -> list[str]:
    s = line.strip()
    if s.startswith("|"):
        s = s[1:]
    if s.endswith("|") and not s.endswith("\\|"):
        s = s[:-1]
    return [c.strip() for c in re.split(r"(?<!\\)\|", s)]


_MD_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_MD_EMPH = re.compile(r"(?<![\w*`])(\*\*|__|\*|_|`)(?=\S)(.+?)(?<=\S)\1(?![\w*`])", re.S)


def md_inline(text: str) -> str:
    """Drop inline Markdown: links keep their text, emphasis and code markers go."""
    text = _MD_LINK.sub(r"\1", text)
    for _ in range(2):  # nested emphasis: ***x***
        text = _MD_EMPH.sub(r"\2", text)
    return text


def parse_markdown(text: str) -> list[Block]:
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    blocks: list[Block] = []
    buf: list[str] = []

    def flush() -> None:
        if any(x.strip() for x in buf):
            blocks.append(_block(1, "text", md_inline("\n".join(buf).strip("\n"))))
        buf.clear()

    i = 0
    in_fence = False
    while i < len(lines):
        line = lines[i]
        if _FENCE.match(line):
            in_fence = not in_fence
            i += 1
            continue
        if in_fence:
            buf.append(line)
            i += 1
            continue
        m = _MD_HEADING.match(line)
        if m:
            flush()
            title = m.group(2).strip()
            if title:
                blocks.append(_block(1, "heading", md_inline(title), level=len(m.group(1))))
            i += 1
            continue
        if (
            i + 1 < len(lines)
            and line.strip()
            and re.fullmatch(r"\s*(=+|-+)\s*", lines[i + 1])
            and len(lines[i + 1].strip()) >= 3
            and not line.lstrip().startswith("|")
            and not buf
        ):
            flush()
            level = 1 if lines[i + 1].strip().startswith("=") else 2
            blocks.append(_block(1, "heading", md_inline(line.strip()), level=level))
            i += 2
            continue
        if line.lstrip().startswith("|") and i + 1 < len(lines) and _MD_TABLE_SEP.match(lines[i + 1]):
            flush()
            rows = [_md_cells(line)]
            i += 2
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                rows.append(_md_cells(lines[i]))
                i += 1
            text_rows = [" | ".join(md_inline(c) for c in row) for row in rows if any(c for c in row)]
            blocks.append(_block(1, "table", "\n".join(text_rows)))
            continue
        if not line.strip():
            flush()
        else:
            buf.append(line)
        i += 1
    flush()
    return blocks


def read_markdown(path: Path) -> tuple[list[Block], int, list[str]]:
    text, warnings = decode_text(Path(path).read_bytes())
    blocks = parse_markdown(text)
    if not blocks:
        raise DocumentError("Markdown file contains no text")
    return blocks, 1, warnings


def read_text(path: Path) -> tuple[list[Block], int, list[str]]:
    text, warnings = decode_text(Path(path).read_bytes())
    blocks: list[Block] = []
    pages = text.replace("\r\n", "\n").replace("\r", "\n").split("\f")
    for page_no, page in enumerate(pages, start=1):
        for chunk in re.split(r"\n[ \t]*\n", page):
            if chunk.strip():
                blocks.append(_block(page_no, "text", chunk.strip("\n")))
    if not blocks:
        raise DocumentError("text file contains no text")
    return blocks, len(pages), warnings
