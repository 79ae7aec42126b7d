"""kohaku.runner.sweep: the launch order of sweep points (distinct upstream work first)."""

from __future__ import annotations

import itertools

from conftest import compose

from kohaku.runner.sweep import cached_fingerprint, order_points, order_sweep, predict_keys

STAGES = ("parse", "embed", "retrieve", "infer", "vote")


def chain(**keys: str) -> dict[str, str]:
    """A stage -> key chain; stages not named get the shared key 'same'."""
    return {stage: keys.get(stage, "same") for stage in STAGES}


def test_points_that_share_an_infer_artifact_are_not_launched_next_to_each_other():
    # Hydra's order for infer.prompt_order=a,b vote.n_samples=1,3: a1 a3 b1 b3; a3 needs a1's infer.
    points = [chain(infer=o, vote=f"{o}{n}") for o, n in itertools.product("ab", "13")]
    assert order_points(points) == [0, 2, 1, 3]  # a1 b1 a3 b3: both generations run at once


def test_distinct_retrieval_comes_before_distinct_prompts():
    # retrieve.top_k=2,4 x infer.prompt_order=a,b in Hydra's order: 2a 2b 4a 4b
    points = [chain(retrieve=k, infer=f"{k}{o}", vote=f"{k}{o}") for k, o in itertools.product("24", "ab")]
    assert order_points(points) == [0, 2, 1, 3]  # 2a 4a 2b 4b


def test_most_new_work_first_and_duplicates_last():
    points = [
        chain(vote="v1"),                      # 0
        chain(vote="v2"),                      # 1: only its vote is new
        chain(parse="other", vote="v3"),       # 2: a new corpus, everything new
        chain(vote="v1"),                      # 3: identical to 0
        chain(infer="i2", vote="v4"),          # 4
    ]
    assert order_points(points) == [0, 2, 4, 1, 3]


def test_order_is_a_permutation_and_keeps_a_sweep_without_shared_work():
    points = [chain(parse=str(i)) for i in range(5)]
    assert order_points(points) == [0, 1, 2, 3, 4]
    assert order_points([]) == []


def test_order_sweep_falls_back_to_the_given_order_when_keys_cannot_be_predicted(caplog):
    def broken(point):
        raise KeyError("no such config")

    points = [["a=1"], ["a=2"], ["a=3"]]
    assert order_sweep(points, broken) == points
    assert "launching them in Hydra's order" in caplog.text


def test_order_sweep_on_real_configs():
    # The real stage graph on data/sample: points that differ only in vote settings go last.
    points = [[f"infer.prompt_order={o}", f"vote.ref_mode={m}", "llm=fake"]
              for o, m in itertools.product(["context_first", "question_first"], ["answer_priority", "union"])]
    ordered = order_sweep(points, lambda point: compose(point))
    assert ordered == [points[0], points[2], points[1], points[3]]


def test_predicted_keys_follow_the_config():
    fingerprint = cached_fingerprint()
    a = predict_keys(compose(["llm=fake", "retrieve.top_k=2"]), fingerprint=fingerprint)
    b = predict_keys(compose(["llm=fake", "retrieve.top_k=4"]), fingerprint=fingerprint)
    assert list(a) == ["parse", "questions", "caption", "tree", "embed", "index", "plan", "retrieve", "infer",
                       "vote", "score"]
    same = [s for s in a if a[s] == b[s]]
    assert same == ["parse", "questions", "caption", "tree", "embed", "index", "plan"]


def test_a_points_file_lists_points_of_several_keys(tmp_path):
    """hydra.sweeper.points: each item a mapping or a list of overrides; the values come back
    from Hydra as they were written (quotes, backslashes, ${...}, lists of mappings)."""
    import pytest

    from kohaku.core.config import ConfigError
    from kohaku.runner.sweep import override_text, read_points

    odd = "it's, a=b\\x ${not.a.key} \\"
    file = tmp_path / "points.yaml"
    file.write_text("- {}\n- [retrieve.top_k=8, retrieve.window=0]\n"
                    "- {retrieve.top_k: 4, retrieve.evidence.pool: 0}\n")
    assert read_points(file) == [[], ["retrieve.top_k=8", "retrieve.window=0"],
                                 ["retrieve.top_k=4", "retrieve.evidence.pool=0"]]
    metrics = [{"name": "judge", "fn": "llm_judge", "weight": 1.0}]
    cfg = compose([override_text("task.answer.fallback", odd), override_text("task.score.metrics", metrics),
                   override_text("retrieve.restrict_column", None), override_text("stages", ["recall"])])
    assert cfg.task.answer.fallback == odd and cfg.task.score.metrics == metrics
    assert cfg.retrieve.restrict_column is None and list(cfg.stages) == ["recall"]
    file.write_text("- retrieve.top_k\n")
    with pytest.raises(ConfigError, match=r"points.yaml: item 0 \('retrieve.top_k'\) is neither"):
        read_points(file)
