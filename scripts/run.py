"""Run the kohaku pipeline (Hydra entry point).

Examples:
  python scripts/run.py                                   # every stage on the sample corpus
  python scripts/run.py corpus=wattbot stages=[parse,tree]
  python scripts/run.py +experiment=cpu_smoke
  python scripts/run.py task=short_answer corpus.questions=short_answer/questions.csv corpus.solutions=short_answer/answers.csv
  python scripts/run.py +experiment=financebench          # another competition: its task and corpus
  python scripts/run.py -m retrieve.top_k=4,8 infer.prompt_order=context_first,question_first
  python scripts/run.py --cfg job                         # print the composed config

Outputs: run dirs under outputs/runs/ (run.json, run.log, submission.csv, scores.json) and the
artifact cache under outputs/cache/ (cache.dir=...). The stage table: README.md, docs/getting-started.md.
"""

from __future__ import annotations

import logging
import sys
import warnings
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kohaku.core.errors import KohakuError  # noqa: E402
from kohaku.runner.pipeline import StageError, register_config_schemas, run_pipeline  # noqa: E402

log = logging.getLogger("kohaku")


def _accept_plus_experiment(argv: list[str]) -> list[str]:
    """Let ``+experiment=NAME`` and ``experiment=NAME`` both work (and ``+hydra/callbacks=NAME``).

    conf/config.yaml lists ``experiment: null`` in its defaults (so every config names its
    experiment slot), and Hydra refuses to *append* a group that is already listed there
    ("Multiple values for experiment"). The documented ``+experiment=NAME`` form therefore
    becomes the equivalent override ``experiment=NAME``. Hydra's own defaults list
    ``hydra/callbacks: null`` the same way (``hydra/callbacks=mlflow``).
    """
    return [arg[1:] if arg.startswith(("+experiment=", "+hydra/callbacks=")) else arg for arg in argv]


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        result = run_pipeline(cfg, run_dir)
    except KohakuError as exc:
        log.error("%s: %s", "error" if isinstance(exc, StageError) else "configuration error", exc)
        raise SystemExit(2) from exc
    score = result.summary("score").get("score")
    if score is not None:
        log.info("score: %.4f", score)
    return score


if __name__ == "__main__":
    # conf/hydra/launcher/ray.yaml shares its name with the Ray plugin's config, which Hydra then
    # uses as its schema and says so on every composition; the files are meant to be that way.
    warnings.filterwarnings("ignore", message=r"\s*'hydra/launcher/ray' is validated against ConfigStore",
                            category=UserWarning)
    register_config_schemas()
    sys.argv = _accept_plus_experiment(sys.argv)
    main()
