#!/usr/bin/env python
"""What reading and scoring a very large submission costs: seconds and peak memory.

    python scripts/bench_read.py [--rows 200000] [--only NAME ...] [--timeout 120]

Writes submissions of ``--rows`` answers to a temporary folder and scores each with
``scripts/score.py`` in its own process (as a user runs it), printing one row per file: its
rows, its size, the wall seconds the command took, its CPU seconds (user + system: on a shared
machine the fairer figure) and its peak resident memory (the child's ``ru_maxrss``). The files, against the sample's gold:

- ``json-one-id``: the cited_pages task's JSON document, one question id repeated (the case of
  issue 55: a hostile file that took minutes to reach its first error);
- ``json-distinct``: the same document with distinct ids (``q000001`` ...), the sample's questions
  among them;
- ``csv-one-id`` / ``csv-distinct``: the same answers as the task's flat CSV;
- ``wattbot-csv-distinct``: WattBot's submission CSV (the default scorer) with distinct ids.

A file refused with a named error (exit 2) is a result too: the point is that the answer, a
score or an error, comes in seconds and in memory bounded by the file's size. The exit code and
the last line of stderr are shown.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "sample"


def _answer(qid: str, i: int) -> dict:
    return {"question_id": qid, "kind": "number", "value": i % 97,
            "references": [{"doc": "okafor2023", "page_index": i % 5}]}


def write_files(folder: Path, rows: int) -> dict[str, tuple[Path, list[str]]]:
    """name -> (file, the score.py arguments before it)."""
    cited = ["--task", "cited_pages"]
    gold = str(SAMPLE / "cited_pages" / "answers.csv")
    wattbot_gold = str(SAMPLE / "solutions.csv")
    out: dict[str, tuple[Path, list[str]]] = {}
    for name, qid in (("one-id", lambda i: "q001"), ("distinct", lambda i: f"q{i:06d}")):
        answers = [_answer(qid(i), i) for i in range(rows)]
        path = folder / f"json-{name}.json"
        path.write_text(json.dumps({"team": "bench", "answers": answers}), encoding="utf-8")
        out[f"json-{name}"] = (path, [gold, *cited])
        path = folder / f"csv-{name}.csv"
        with path.open("w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["id", "kind", "value", "pages"])
            for a in answers:
                w.writerow([a["question_id"], "number", a["value"], f'["okafor2023:{a["references"][0]["page_index"]}"]'])
        out[f"csv-{name}"] = (path, [gold, *cited])
    path = folder / "wattbot-csv-distinct.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "question", "answer", "answer_value", "answer_unit", "ref_id", "ref_url",
                    "supporting_materials", "explanation"])
        for i in range(rows):
            w.writerow([f"q{i:06d}", "q", "1", str(i % 97), "is_blank", "['okafor2023']", "is_blank",
                        "is_blank", "bench"])
    out["wattbot-csv-distinct"] = (path, [wattbot_gold])
    return out


def run(args: list[str], timeout: float) -> tuple[float, float, float, int, str]:
    """(wall seconds, CPU seconds, peak RSS in MiB, exit code, last stderr line) of score.py
    with ``args``."""
    started = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, str(REPO / "scripts" / "score.py"), *args],
                                cwd=REPO, stdout=subprocess.DEVNULL, stderr=err)
        deadline = started + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        seconds = time.perf_counter() - started
        err.seek(0)
        lines = err.read().decode("utf-8", "replace").strip().splitlines()
    code = os.waitstatus_to_exitcode(status)
    cpu = usage.ru_utime + usage.ru_stime
    return seconds, cpu, usage.ru_maxrss / 1024, code, (lines[-1][:80] if lines else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000, help="answers per file (default 200000)")
    parser.add_argument("--only", action="append", default=[], help="only this file (repeatable)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds before a run is killed")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        files = write_files(Path(tmp), args.rows)
        print(f"{'file':<22}{'rows':>8}{'MiB':>7}{'seconds':>9}{'CPU s':>8}{'peak RSS MiB':>14}{'exit':>6}  "
              "last stderr line")
        for name, (path, before) in files.items():
            if args.only and name not in args.only:
                continue
            seconds, cpu, rss, code, last = run([*before[:1], str(path), *before[1:]], args.timeout)
            size = path.stat().st_size / 2**20
            print(f"{name:<22}{args.rows:>8}{size:>7.1f}{seconds:>9.2f}{cpu:>8.2f}{rss:>14.0f}{code:>6}  {last}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
