"""Shared builders of the segmenter's tests (tests/test_segment*.py)."""

from __future__ import annotations

from kohaku.ingest.text.segment import _Item


def _text_block(text: str, page: int = 1) -> dict:
    return {"page": page, "kind": "text", "text": text, "font_size": None, "level": None}


def _items(*texts, width=80.0, page=1):
    """Items from texts, all on ``page``: "" a blank line, "|" a block break, "#..." a heading,
    else a line of line width ``width``."""
    out = []
    for t in texts:
        if t == "":
            out.append(_Item("blank", page=page))
        elif t == "|":
            out.append(_Item("break", page=page))
        elif t.startswith("#"):
            out.append(_Item("heading", text=t[1:], page=page))
        else:
            out.append(_Item("line", text=t, page=page, width=width))
    return out

