"""A test-only document reader whose documents misbehave on purpose (``read_corpus(readers=
{"txt": hostile.read})``): a module of its own so that the spawned parse workers import it by
name. A document's first line says what its job does:

    KILL            the worker kills itself with SIGKILL (what the kernel's OOM killer does)
    KILL-UNTIL <n> <f>  the same while counter file <f> has fewer than n lines (it adds one first)
    SLEEP <s>       sleeps s seconds (a hang)
    SLEEP-ONCE <s> <f>  the same while flag file <f> does not exist (it creates it first)
    HOG <gib>       allocates gib GiB at once (a decompression bomb)
anything else is read as a text file. Every call adds the document's id to ``reads.log`` beside it.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any


def read(path: Path) -> tuple[list[dict[str, Any]], int, list[str]]:
    from kohaku.ingest.text.formats import read_text

    with open(path.parent / "reads.log", "a", encoding="utf-8") as log:
        log.write(path.stem + "\n")
    first = path.read_text(encoding="utf-8").split("\n", 1)[0].split()
    verb = first[0] if first else ""
    if verb == "KILL":
        os.kill(os.getpid(), signal.SIGKILL)
    elif verb == "KILL-UNTIL":
        counter = Path(first[2])
        kills = len(counter.read_text().splitlines()) if counter.exists() else 0
        if kills < int(first[1]):
            with open(counter, "a", encoding="utf-8") as out:
                out.write("killed\n")
            os.kill(os.getpid(), signal.SIGKILL)
    elif verb == "SLEEP":
        time.sleep(float(first[1]))
    elif verb == "SLEEP-ONCE" and not Path(first[2]).exists():
        Path(first[2]).write_text("slept once")
        time.sleep(float(first[1]))
    elif verb == "HOG":
        hog = bytearray(int(float(first[1]) * 2**30))
        hog[-1] = 1
    return read_text(path)


# two documents that parse
GOOD = {"good1": "Cooling water use was 12 litres per kWh.\n", "good2": "The chiller ran for 40 days.\n"}


def text_corpus(root: Path, docs: dict[str, str]) -> Path:
    """A corpus of text documents (id -> text; ``{root}`` in a text is the corpus's folder) with
    its metadata.csv, for this reader -> ``root``."""
    (root / "docs").mkdir(parents=True)
    for doc_id, text in docs.items():
        (root / "docs" / f"{doc_id}.txt").write_text(text.replace("{root}", str(root)), encoding="utf-8")
    rows = "".join(f"{d},paper,{d},2024,{d},https://example.org/{d}\n" for d in docs)
    (root / "metadata.csv").write_text("id,type,title,year,citation,url\n" + rows, encoding="utf-8")
    return root
