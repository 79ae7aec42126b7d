#!/usr/bin/env python
"""Parse a corpus and build its tree without the pipeline; print the segmentation report.

    python scripts/tree_report.py                                  # data/sample
    python scripts/tree_report.py --root ../shared/data/wattbot    # the WattBot corpus
    python scripts/tree_report.py --root ../shared/data/wattbot --show strubell2019

--show prints one document's sections and paragraphs so the split can be checked by eye.
Targets on WattBot: sentences < 15 chars under 3 %, median paragraph under 1,200 chars, at least
80 % of documents with more than one section found from headings.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import polars as pl  # noqa: E402

from kohaku.ingest.corpus import read_metadata  # noqa: E402
from kohaku.ingest.parsing import ParseConfig, parse_corpus  # noqa: E402
from kohaku.ingest.tree import TreeConfig, build_tree, corpus_report  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default="data/sample", help="corpus root with metadata.csv")
    parser.add_argument("--mode", default="hier", choices=["hier", "flat"], help="tree.mode")
    parser.add_argument("--show", default="", help="doc id whose sections and paragraphs to print")
    parser.add_argument("--workers", type=int, default=None, help="parse.workers")
    args = parser.parse_args(argv)

    root = Path(args.root)
    documents, blocks = parse_corpus(root, read_metadata(root / "metadata.csv"), ParseConfig(workers=args.workers))
    nodes = build_tree(documents, blocks, TreeConfig(mode=args.mode))
    report = corpus_report(nodes)

    per_doc = (
        nodes.group_by("doc_id")
        .agg(
            (pl.col("kind") == "section").sum().alias("sections"),
            ((pl.col("kind") == "section") & (pl.col("section_source") == "heading")).sum().alias("from_headings"),
            (pl.col("kind") == "paragraph").sum().alias("paragraphs"),
            pl.col("text").filter(pl.col("kind") == "paragraph").str.len_chars().median().alias("median_para"),
            (pl.col("kind") == "sentence").sum().alias("sentences"),
            ((pl.col("kind") == "sentence") & (pl.col("text").str.len_chars() < 15)).sum().alias("short"),
        )
        .sort("doc_id")
    )
    with pl.Config(tbl_rows=200):
        print(per_doc)
    bad = documents.filter(pl.col("status") != "ok").select("doc_id", "status", "error", "warnings")
    if bad.height:
        print(bad)
    for key, value in report.items():
        print(f"{key:26s} {value}")
    if args.show:
        doc = nodes.filter(pl.col("doc_id") == args.show)
        for row in doc.filter(pl.col("level").is_in([1, 2])).iter_rows(named=True):
            if row["level"] == 1:
                print(f"\n=== {row['node_id']} [{row['section_source']}] {row['section']}")
            else:
                print(f"  -- {row['node_id']} ({row['block_kind']}, {len(row['text'])} chars): {row['text'][:200]!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
