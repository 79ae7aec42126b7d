"""kohaku: an offline batch harness for document question answering (KohakuRAG)."""

__version__ = "0.1.0"
