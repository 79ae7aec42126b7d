"""The document tree: its model (schema, ids, arrays, parent aggregation, TreeView) and how it
is built from parsed blocks."""

from kohaku.ingest.tree.build import (
    TreeConfig,
    build_tree,
    chunk_sentences,
    corpus_report,
    document_nodes,
    dropped_problems,
    format_report,
)
from kohaku.ingest.tree.model import KINDS, NODES_SCHEMA, TreeView, aggregate_parents, node_arrays

__all__ = [
    "KINDS", "NODES_SCHEMA", "TreeConfig", "TreeView", "aggregate_parents", "build_tree",
    "chunk_sentences", "corpus_report", "document_nodes", "dropped_problems", "format_report",
    "node_arrays",
]
