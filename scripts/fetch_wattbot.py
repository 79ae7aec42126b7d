#!/usr/bin/env python
"""Download the PDFs listed in a metadata.csv into <root>/pdfs/<id>.pdf.

    python scripts/fetch_wattbot.py                          # root ../shared/data/wattbot
    python scripts/fetch_wattbot.py --root data/mycorpus --timeout 30
    python scripts/fetch_wattbot.py --ids patterson2021,strubell2019 --force

Existing non-empty files are skipped (use --force to download again). A response is kept only
when it is a PDF (it starts with %PDF); an HTML landing page or an error is reported instead.
Without network access every download fails with a message and the script exits with status 1;
the corpus still works from corpus/<id>.json. The parse stage prefers PDFs over JSON by default
(parse.priority), so fetched PDFs change the parse stage's cache key and output.
"""

from __future__ import annotations

import argparse
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kohaku.ingest.corpus import CorpusError, read_metadata  # noqa: E402

USER_AGENT = "kohaku-fetch/0.1 (research corpus download)"


def pdf_url(url: str) -> str:
    """arXiv abstract pages -> their PDF address; other URLs unchanged."""
    url = url.strip()
    if "arxiv.org/abs/" in url:
        url = url.replace("/abs/", "/pdf/")
    return url


def fetch_one(url: str, dest: Path, timeout: float) -> tuple[bool, str]:
    """Download ``url`` to ``dest`` (atomically). Returns (ok, message)."""
    request = urllib.request.Request(pdf_url(url), headers={"User-Agent": USER_AGENT})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            data = response.read()
    except urllib.error.HTTPError as exc:
        return False, f"HTTP {exc.code} {exc.reason}"
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return False, f"network error: {reason}"
    if not data.startswith(b"%PDF"):
        return False, f"not a PDF (got {len(data)} bytes starting {data[:15]!r}); download it by hand"
    tmp = dest.with_suffix(".pdf.part")
    tmp.write_bytes(data)
    tmp.replace(dest)
    return True, f"{len(data) / 1e6:.1f} MB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default="../shared/data/wattbot", help="corpus root with metadata.csv")
    parser.add_argument("--metadata", default="metadata.csv", help="metadata CSV, relative to --root")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per download")
    parser.add_argument("--ids", default="", help="comma-separated ids to fetch (default: all)")
    parser.add_argument("--force", action="store_true", help="download even when the file exists")
    parser.add_argument("--delay", type=float, default=1.0, help="seconds to wait between downloads")
    args = parser.parse_args(argv)

    root = Path(args.root)
    try:
        meta = read_metadata(root / args.metadata)
    except CorpusError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    wanted = {x.strip() for x in args.ids.split(",") if x.strip()}
    out_dir = root / "pdfs"
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"error: cannot create {out_dir}: {exc}", file=sys.stderr)
        return 2

    fetched, skipped, failed = 0, 0, []
    rows = [r for r in meta.iter_rows(named=True) if not wanted or r["id"] in wanted]
    for n, row in enumerate(rows, start=1):
        doc_id, url = row["id"], row["url"]
        dest = out_dir / f"{doc_id}.pdf"
        if dest.exists() and dest.stat().st_size > 0 and not args.force:
            skipped += 1
            continue
        if not url:
            failed.append((doc_id, "no url in metadata"))
            continue
        ok, message = fetch_one(url, dest, args.timeout)
        print(f"[{n}/{len(rows)}] {doc_id}: {'ok' if ok else 'FAILED'} {message}")
        if ok:
            fetched += 1
        else:
            failed.append((doc_id, message))
        if args.delay > 0 and n < len(rows):
            time.sleep(args.delay)

    print(f"\n{fetched} downloaded, {skipped} already present, {len(failed)} failed -> {out_dir}")
    for doc_id, message in failed:
        print(f"  {doc_id}: {message}")
    if unknown := sorted(wanted - set(meta["id"].to_list())):
        print(f"ids not in metadata: {', '.join(unknown)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
