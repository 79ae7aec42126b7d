"""Write the documentation site's reference pages (docs/reference/*.md) from the code. The
command's code is kohaku/tools/reference.py (importable and tested there); its options: ``--help``."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kohaku.tools.reference import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
