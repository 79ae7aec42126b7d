"""Throughput of LLM backends on answer prompts with ~1,500 context tokens (not a test). The command's code is kohaku/tools/bench_llm.py
(importable and tested there); its options: ``--help``."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kohaku.tools.bench_llm import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
