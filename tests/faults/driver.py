"""Run the pipeline in a child process for the crash and concurrency tests.

    python tests/faults/driver.py RUN_DIR [--slow-embed S] [--slow-infer S] OVERRIDE...

Composes the project config like scripts/run.py (same conf/ tree and overrides), optionally slows
the model-free encoder (``embed.model=hash:<dim>``) and the fake LLM backend (``llm=fake``) down
by S seconds per call, so a test can SIGKILL the process while the embed or infer stage is half
done, then runs every configured stage. Exit code 0 when the run finished.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def _slow_down(embed_s: float, infer_s: float) -> None:
    if embed_s > 0:
        from kohaku.retrieval.embedding import HashingEncoder

        encode = HashingEncoder._encode

        def slow_encode(self, texts):
            time.sleep(embed_s)
            return encode(self, texts)

        HashingEncoder._encode = slow_encode
    if infer_s > 0:
        from kohaku.llm.fake import FakeBackend

        generate = FakeBackend.generate

        def slow_generate(self, requests):
            time.sleep(infer_s)
            return generate(self, requests)

        FakeBackend.generate = slow_generate


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("--slow-embed", type=float, default=0.0)
    parser.add_argument("--slow-infer", type=float, default=0.0)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_intermixed_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    _slow_down(args.slow_embed, args.slow_infer)

    from hydra import compose, initialize_config_dir

    from kohaku.runner.pipeline import register_config_schemas

    register_config_schemas()

    from kohaku.runner.pipeline import run_pipeline

    with initialize_config_dir(version_base="1.3", config_dir=str(REPO / "conf"), job_name="faults"):
        cfg = compose("config", overrides=args.overrides)
    run_pipeline(cfg, Path(args.run_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
