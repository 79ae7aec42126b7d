"""GPU check: the KohakuRAG recipe's speed on this machine, in one command. The command's code is kohaku/tools/gpu_check.py
(importable and tested there); its options: ``--help``."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kohaku.tools.gpu_check import main  # noqa: E402

if __name__ == "__main__":   # the vLLM engine starts its workers with spawn
    sys.exit(main())
