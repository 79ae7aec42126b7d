"""Voting core, ref modes, tie-breaks and the vote stage (kohaku/stages/vote.py)."""

from __future__ import annotations

import logging
from pathlib import Path

import polars as pl
import pytest
from omegaconf import OmegaConf

from kohaku.core.config import ConfigError, build
from kohaku.runner.stage import StageContext
from kohaku.stages.vote import STAGE
from kohaku.runner.pipeline import option_values
from kohaku.answer.ensemble import ensemble_submissions
from kohaku.answer.voting import VoteConfig, generations_to_candidates, vote
from kohaku.tasks.rooms.wattbot.submission import SUBMISSION_COLUMNS, read_csv_str, validate_submission


def cands(values: list[str], refs: list[list[str]] | None = None, qid: str = "q1",
          blank: list[bool] | None = None) -> pl.DataFrame:
    n = len(values)
    return pl.DataFrame(
        {
            "qid": [qid] * n,
            "source_idx": list(range(n)),
            "answer_value": values,
            "ref_id": refs if refs is not None else [["d1"]] * n,
            "answer": [f"answer {i}" for i in range(n)],
            "explanation": [f"expl {i}" for i in range(n)],
            "is_blank": blank if blank is not None else [False] * n,
        },
        schema={"qid": pl.String, "source_idx": pl.Int64, "answer_value": pl.String,
                "ref_id": pl.List(pl.String), "answer": pl.String, "explanation": pl.String,
                "is_blank": pl.Boolean},
    )


def one(df: pl.DataFrame, **cfg) -> dict:
    out = vote(df, VoteConfig(**cfg))
    assert out.height == 1
    return out.to_dicts()[0]


def test_canonical_vote_beats_raw_string_vote() -> None:
    df = cands(["1000", "1,000", "1000.0", "900", "900"])
    raw = one(df, canonical=False)
    assert raw["answer_value"] == "900" and raw["agreement"] == pytest.approx(0.4)
    can = one(df)
    assert can["answer_value"] == "1000" and can["agreement"] == pytest.approx(0.6)
    assert can["explanation"] == "expl 0"  # from a sample that agrees with the winner


def test_ignore_blank_drops_blanks_when_any_sample_answers() -> None:
    df = cands(["is_blank", "is_blank", "is_blank", "42"], blank=[True, True, True, False])
    assert one(df)["answer_value"] == "42"
    kept = one(df, ignore_blank=False)
    assert kept["is_blank"] and kept["answer_value"] == "is_blank" and kept["ref_id"] == []
    assert kept["agreement"] == pytest.approx(0.75) and kept["n_blank"] == 3


def test_all_blank_and_invalid_samples() -> None:
    df = cands(["is_blank", "7"], blank=[True, True])  # "7" comes from an invalid generation
    out = one(df)
    assert out["is_blank"] and out["explanation"] == "is_blank"
    assert out["answer"].startswith("Unable to answer")


def test_tolerance_groups_close_values() -> None:
    out = one(cands(["100", "100.05", "250"]))
    assert out["answer_value"] == "100" and out["agreement"] == pytest.approx(2 / 3)


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("answer_priority", ["a"]),  # the most common ref set among the agreeing samples
        ("union", ["a", "b", "c"]),
        ("intersection", ["a"]),
        ("majority", ["a"]),  # a: 3/3, b: 1/3, c: 1/3
    ],
)
def test_ref_modes(mode: str, expected: list[str]) -> None:
    df = cands(["5", "5", "5", "6"], refs=[["a"], ["a", "b"], ["a", "c"], ["z"]])
    # sets: {a} x1, {a,b} x1, {a,c} x1 -> tie, answer_priority takes the first
    out = one(df, ref_mode=mode)
    assert out["ref_id"] == expected
    assert "z" not in out["ref_id"]  # refs only from samples agreeing with the winner


def test_answer_priority_majority_set_and_consistent_row() -> None:
    df = cands(["5", "5", "5"], refs=[["b"], ["a", "c"], ["c", "a"]])
    out = one(df)
    assert sorted(out["ref_id"]) == ["a", "c"]
    assert out["explanation"] == "expl 1" and out["source_idx"] == 1  # the row holding those refs


def test_intersection_falls_back_when_empty() -> None:
    out = one(cands(["5", "5"], refs=[["a"], ["b"]]), ref_mode="intersection")
    assert out["ref_id"] == ["a"] and out["ref_fallback"]


def test_majority_mode_keeps_ids_cited_by_more_than_half() -> None:
    df = cands(["5"] * 4, refs=[["a", "b"], ["a"], ["a", "b", "c"], ["b"]])
    assert one(df, ref_mode="majority")["ref_id"] == ["a", "b"]  # a 3/4, b 3/4, c 1/4


def test_majority_mode_excludes_ids_cited_by_exactly_half() -> None:
    """More than half, not half: b is cited by 2 of 4 agreeing samples and is left out
    (mutation survivor: >= half)."""
    df = cands(["5"] * 4, refs=[["a", "b"], ["a", "b"], ["a"], ["a"]])
    assert one(df, ref_mode="majority")["ref_id"] == ["a"]
    weighted = cands(["5"] * 3, refs=[["a", "b"], ["a"], ["a", "b"]])
    assert one(weighted, ref_mode="majority", weights=[1.0, 2.0, 1.0])["ref_id"] == ["a"]  # b: 2 of 4


def test_agreement_is_winner_weight_over_all_samples_blanks_included() -> None:
    """agreement = winner weight / weight of every sample, blanks included, even when the
    blanks are dropped from the vote (mutation survivor: dividing by non-blank weight)."""
    df = cands(["42", "42", "is_blank", "7"], blank=[False, False, True, False])
    out = one(df)
    assert out["answer_value"] == "42" and out["agreement"] == pytest.approx(2 / 4)
    weighted = one(df, weights=[1.0, 1.0, 3.0, 1.0])
    assert weighted["answer_value"] == "42" and weighted["agreement"] == pytest.approx(2 / 6)


def test_tiebreak_first_and_priority() -> None:
    df = cands(["10", "20", "20", "10"])
    assert one(df)["answer_value"] == "10"  # first
    weighted = one(df, weights=[1, 1, 1, 1], tiebreak="priority")
    assert weighted["answer_value"] == "10"  # equal weights: priority = first
    assert one(df, weights=[1, 1.5, 0.5, 1], tiebreak="priority")["answer_value"] == "20"
    # weights change the vote itself: 10 -> 3+1, 20 -> 1+1
    assert one(df, weights=[3, 1, 1, 1])["answer_value"] == "10"
    assert one(df, weights=[0.5, 1, 1, 0.5])["answer_value"] == "20"


def test_tiebreak_blank_after_blank_filtering() -> None:
    df = cands(["10", "20", "is_blank"], blank=[False, False, True])
    assert one(df, tiebreak="blank")["is_blank"]
    # a clear winner is not affected; the blank sample does not create a tie (fix of §11.14)
    assert one(cands(["10", "10", "is_blank", "is_blank"], blank=[False, False, True, True]),
               tiebreak="blank")["answer_value"] == "10"


def test_tiebreak_random_is_seeded_per_question() -> None:
    frames = [cands(["10", "20", "30"], qid=f"q{i}") for i in range(40)]
    df = pl.concat(frames)
    a = vote(df, VoteConfig(tiebreak="random", seed=1))["answer_value"].to_list()
    b = vote(df, VoteConfig(tiebreak="random", seed=1))["answer_value"].to_list()
    c = vote(df, VoteConfig(tiebreak="random", seed=2))["answer_value"].to_list()
    assert a == b and a != c
    assert set(a) == {"10", "20", "30"}
    # independent of question order
    rev = vote(pl.concat(frames[::-1]), VoteConfig(tiebreak="random", seed=1))
    assert dict(zip(rev["qid"], rev["answer_value"])) == dict(zip([f"q{i}" for i in range(40)], a))


def test_ranges_and_names_are_voted_canonically() -> None:
    assert one(cands(["[80,90]", "80-90", "85"]))["answer_value"] == "[80,90]"
    assert one(cands(["Hivemind", "hivemind.", "Lamina"]))["answer_value"] == "Hivemind"


def test_config_validation() -> None:
    with pytest.raises(ConfigError, match="vote.ref_mode"):
        build(VoteConfig, {"ref_mode": "nope"}, "vote")
    with pytest.raises(ConfigError, match="vote.tiebreak"):
        build(VoteConfig, {"tiebreak": "coin"}, "vote")
    with pytest.raises(ConfigError, match="vote.colour"):
        build(VoteConfig, {"colour": 1}, "vote")
    with pytest.raises(ConfigError, match="vote.weights has 2 entries"):
        vote(cands(["1", "2", "3"]), VoteConfig(weights=[1, 1]))


# ---------------------------------------------------------------------------------------------
# generations -> candidates


def generations() -> pl.DataFrame:
    rows = [
        # q1: attempt 0 was blank (both samples), attempt 1 answered
        ("q1", 0, 0, "is_blank", [], True, True),
        ("q1", 0, 1, "is_blank", [], True, True),
        ("q1", 1, 0, "12", ["d1"], False, True),
        ("q1", 1, 1, "13", ["d2"], False, True),
        ("q1", 1, 2, "13", ["d2"], False, True),
        # q2: one attempt; sample 1 is invalid (parse failure)
        ("q2", 0, 1, "99", ["d1"], False, False),
        ("q2", 0, 0, "Hivemind", ["d2", "ghost"], False, True),
    ]
    return pl.DataFrame(
        [dict(zip(("qid", "attempt", "sample_idx", "answer_value", "ref_id", "is_blank", "valid"), r),
              raw="{}", answer=f"ans {r[3]}", explanation=f"because {r[3]}") for r in rows],
        schema_overrides={"ref_id": pl.List(pl.String)},
    )


def test_last_attempt_and_first_n_samples() -> None:
    c = generations_to_candidates(generations(), None)
    q1 = c.filter(pl.col("qid") == "q1")
    assert q1["answer_value"].to_list() == ["12", "13", "13"]
    q2 = c.filter(pl.col("qid") == "q2").sort("source_idx")
    assert q2["is_blank"].to_list() == [False, True]  # invalid -> blank
    assert vote(c).sort("qid")["answer_value"].to_list() == ["13", "Hivemind"]
    c1 = generations_to_candidates(generations(), 1)
    assert c1.filter(pl.col("qid") == "q1")["answer_value"].to_list() == ["12"]
    assert vote(c1).sort("qid")["answer_value"].to_list() == ["12", "Hivemind"]


# ---------------------------------------------------------------------------------------------
# the stage


def run_stage(tmp_path: Path, vote_cfg: dict | None = None) -> tuple[pl.DataFrame, Path, dict]:
    dirs = {name: tmp_path / name for name in ("questions", "infer", "parse")}
    for d in dirs.values():
        d.mkdir()
    pl.DataFrame({
        "qid": ["q1", "q2", "q3"],
        "question": ["How many?", "Which system?", "Unanswered?"],
        "answer_unit": ["kWh", "is_blank", "percent"],
    }).write_parquet(dirs["questions"] / "questions.parquet")
    generations().write_parquet(dirs["infer"] / "generations.parquet")
    pl.DataFrame({
        "doc_id": ["d1", "d2"], "title": ["Doc one", "Doc two"], "url": ["https://x/1", "https://x/2"],
    }).write_parquet(dirs["parse"] / "documents.parquet")
    out = tmp_path / "out"
    out.mkdir()
    cfg = OmegaConf.create({"seed": 0, "vote": {**option_values("vote", "default"), **(vote_cfg or {})},
                            "task": option_values("task", "wattbot")})
    ctx = StageContext(stage=STAGE, cfg=cfg, input_dirs=dirs, out_dir=out, services=None,
                       log=logging.getLogger("test"))
    tables = STAGE.compute(ctx)
    return tables["answers"], out, ctx.summary


def test_vote_stage_writes_consistent_answers_and_submission(tmp_path: Path) -> None:
    answers, out, summary = run_stage(tmp_path)
    assert answers["qid"].to_list() == ["q1", "q2", "q3"]
    q1, q2, q3 = answers.to_dicts()
    assert q1["answer_value"] == "13" and q1["ref_id"] == ["d2"] and q1["ref_url"] == ["https://x/2"]
    assert q1["explanation"] == "because 13" and q1["answer_unit"] == "kWh"
    assert q1["agreement"] == pytest.approx(2 / 3) and q1["n_votes"] == 3
    # unknown doc id: kept in ref_id, no url
    assert q2["ref_id"] == ["d2", "ghost"] and q2["ref_url"] == ["https://x/2"]
    assert q3["is_blank"] and q3["n_votes"] == 0
    assert summary["n_questions"] == 3 and summary["n_blank"] == 1 and summary["n_unanswered"] == 1
    assert summary["n_unknown_refs"] == 1

    sub = read_csv_str(out / "submission.csv")
    assert tuple(sub.columns) == SUBMISSION_COLUMNS
    assert validate_submission(sub) == []
    rows = {r["id"]: r for r in sub.to_dicts()}
    assert rows["q1"]["ref_id"] == "['d2']" and rows["q1"]["ref_url"] == "['https://x/2']"
    assert rows["q2"]["ref_id"] == "['d2','ghost']" and rows["q2"]["answer_unit"] == "is_blank"
    assert rows["q2"]["supporting_materials"] == "Doc two"
    assert rows["q3"] == {
        "id": "q3", "question": "Unanswered?",
        "answer": "Unable to answer with confidence based on the provided documents.",
        "answer_value": "is_blank", "answer_unit": "percent", "ref_id": "is_blank", "ref_url": "is_blank",
        "supporting_materials": "is_blank", "explanation": "is_blank",
    }


def test_vote_stage_n_samples(tmp_path: Path) -> None:
    answers, _, _ = run_stage(tmp_path, {"n_samples": 1})
    assert answers["answer_value"].to_list() == ["12", "Hivemind", "is_blank"]


def _submission(rows: list[tuple[str, ...]]) -> pl.DataFrame:
    cols = ["id", "question", "answer", "answer_value", "answer_unit", "ref_id", "ref_url",
            "supporting_materials", "explanation"]
    return pl.DataFrame([dict(zip(cols, r)) for r in rows])


def test_ensemble_submissions_in_process() -> None:
    """ensemble_submissions votes per id across inputs in any row order: canonical values,
    blanks dropped, refs and the row from an agreeing input, question/unit from the first input,
    ref_url from the inputs' pairs or from ``urls``."""
    from kohaku.answer.ensemble import ensemble_submissions

    s1 = _submission([("q1", "Q one", "a1", "1,000", "kWh", "['d1']", "['http://u1']", "s1", "e1"),
                      ("q2", "Q two", "x", "is_blank", "", "[]", "[]", "is_blank", "x")])
    s2 = _submission([("q2", "other", "a2", "7", "t", "['d2']", "['http://u2']", "s2", "e2"),
                      ("q1", "other", "b1", "1000", "MWh", "['d1', 'd3']", "['http://u1', 'http://u3']", "t1", "f1")])
    s3 = _submission([("q1", "Q one", "c1", "900", "kWh", "['d9']", "['http://u9']", "s9", "e9"),
                      ("q2", "Q two", "c2", "7.0", "", "['d2']", "['http://u2']", "s3", "e3")])
    answers, sub = ensemble_submissions([s1, s2, s3])
    assert sub.to_dicts() == [
        {"id": "q1", "question": "Q one", "answer": "a1", "answer_value": "1000", "answer_unit": "kWh",
         "ref_id": "['d1']", "ref_url": "['http://u1']", "supporting_materials": "s1", "explanation": "e1"},
        {"id": "q2", "question": "Q two", "answer": "a2", "answer_value": "7", "answer_unit": "is_blank",
         "ref_id": "['d2']", "ref_url": "['http://u2']", "supporting_materials": "s2", "explanation": "e2"},
    ]
    a = {r["qid"]: r for r in answers.to_dicts()}
    assert a["q1"]["agreement"] == pytest.approx(2 / 3) and a["q1"]["source_idx"] == 0
    assert a["q2"]["n_blank"] == 1 and a["q2"]["source_idx"] == 1 and a["q2"]["n_votes"] == 3
    # urls given: they replace the inputs' pairs; an id without one gets no url
    _, sub = ensemble_submissions([s1, s2, s3], urls={"d1": "https://one"})
    assert sub["ref_url"].to_list() == ["['https://one']", "is_blank"]
    # a blank majority with ignore_blank off: blank answer, blank supporting materials
    _, sub = ensemble_submissions([s1, s1.with_columns(pl.lit("is_blank").alias("answer_value")),
                                   s1.with_columns(pl.lit("is_blank").alias("answer_value"))],
                                  VoteConfig(ignore_blank=False))
    assert sub["answer_value"].to_list() == ["is_blank", "is_blank"]
    assert sub["supporting_materials"].to_list() == ["is_blank", "is_blank"]
    # a missing column names the input
    from kohaku.tasks.rooms.wattbot.submission import SubmissionError

    with pytest.raises(SubmissionError, match="second"):
        ensemble_submissions([s1, s2.drop("answer_value")], names=["first", "second"])


def test_vote_generations_fills_every_column_and_the_summary(caplog) -> None:
    """The whole answers table of vote_generations: union refs, ref_url only for known ids with
    a url, supporting materials from the sample or else the cited titles, blank and unanswered
    questions, answer_unit, and the summary."""
    from kohaku.tasks.rooms.wattbot.submission import answers_to_submission
    from kohaku.answer.voting import vote_generations

    gens = pl.DataFrame({
        "qid": ["q1", "q1", "q1", "q2", "q2", "q4", "q4", "q5"],
        "attempt": [0] * 8,
        "sample_idx": [0, 1, 2, 0, 1, 0, 1, 0],
        "answer_value": ["5", "5", "6", "is_blank", "is_blank", "x", "x", "y"],
        "ref_id": [["d1", "d7"], ["d2"], ["d3"], [], [], ["d2"], ["d2"], ["d3"]],
        "answer": ["five", "5!", "six", "", "", "ex", "ex2", "why"],
        "explanation": ["e0", "e1", "e2", "b", "b", "ex0", "ex1", "y0"],
        "is_blank": [False, False, False, True, True, False, False, False],
        "supporting_materials": ["is_blank", "", "t", "", "", "quote", "q2", ""],
        "valid": [True] * 8,
    })
    questions = pl.DataFrame({"qid": ["q1", "q2", "q3", "q4", "q5"], "question": ["Q1", "Q2", "Q3", "Q4", "Q5"],
                              "answer_unit": ["kg", "", "m", "", "s"]})
    docs = pl.DataFrame({"doc_id": ["d1", "d2", "d3"], "url": ["http://1", "http://2", ""],
                         "title": [" Doc One ", "Doc Two", None]})
    blank = "Unable to answer with confidence based on the provided documents."
    with caplog.at_level(logging.WARNING, logger="kohaku.vote"):
        answers, summary = vote_generations(gens, questions, docs, VoteConfig(ref_mode="union"))
    sub = answers_to_submission(answers, questions)
    base = {"is_blank": False, "n_blank": 0, "source_idx": 0, "ref_fallback": False}
    assert answers.to_dicts() == [
        {**base, "qid": "q1", "answer": "five", "answer_value": "5", "answer_unit": "kg",
         "ref_id": ["d1", "d7", "d2"], "ref_url": ["http://1", "http://2"],
         "supporting_materials": "Doc One | Doc Two", "explanation": "e0",
         "agreement": pytest.approx(2 / 3), "n_votes": 3},
        {"qid": "q2", "answer": blank, "answer_value": "is_blank", "answer_unit": "is_blank", "ref_id": [],
         "ref_url": [], "supporting_materials": "is_blank", "explanation": "is_blank", "is_blank": True,
         "agreement": 1.0, "n_votes": 2, "n_blank": 2, "source_idx": 0, "ref_fallback": False},
        {"qid": "q3", "answer": blank, "answer_value": "is_blank", "answer_unit": "m", "ref_id": [],
         "ref_url": [], "supporting_materials": "is_blank", "explanation": "is_blank", "is_blank": True,
         "agreement": 0.0, "n_votes": 0, "n_blank": 0, "source_idx": None, "ref_fallback": False},
        {**base, "qid": "q4", "answer": "ex", "answer_value": "x", "answer_unit": "is_blank", "ref_id": ["d2"],
         "ref_url": ["http://2"], "supporting_materials": "quote", "explanation": "ex0", "agreement": 1.0,
         "n_votes": 2},
        {**base, "qid": "q5", "answer": "why", "answer_value": "y", "answer_unit": "s", "ref_id": ["d3"],
         "ref_url": [], "supporting_materials": "is_blank", "explanation": "y0", "agreement": 1.0,
         "n_votes": 1},
    ]
    assert summary == {"n_questions": 5, "n_blank": 2, "mean_agreement": pytest.approx((2 / 3 + 1 + 0 + 1 + 1) / 5),
                       "mean_votes": pytest.approx(8 / 5), "n_unanswered": 1, "n_unknown_refs": 1,
                       "n_ref_fallback": 0}
    assert sub["ref_id"].to_list() == ["['d1','d7','d2']", "is_blank", "is_blank", "['d2']", "['d3']"]
    assert "1 question(s) have no generations" in caplog.text and "no ref_url): d7" in caplog.text
    # two unanswered questions are counted as two
    _, two = vote_generations(gens.filter(pl.col("qid") == "q1"), questions.head(3), docs, VoteConfig())
    assert two["n_unanswered"] == 2 and two["n_blank"] == 2
    # no questions at all: typed empty answers and a zero summary
    answers, summary = vote_generations(gens.head(0), questions.head(0), docs, VoteConfig())
    assert answers.height == 0 and answers.schema["agreement"] == pl.Float64
    assert answers.schema["source_idx"] == pl.Int64 and answers.schema["ref_id"] == pl.List(pl.String)
    assert summary == {"n_questions": 0, "n_blank": 0, "mean_agreement": 0.0, "mean_votes": 0.0,
                       "n_unanswered": 0, "n_unknown_refs": 0, "n_ref_fallback": 0}


def test_blank_never_matches_an_answer_and_random_tiebreak_is_pinned() -> None:
    """_matches: a blank only groups with blanks; the seeded draw is pinned for one qid."""
    # an invalid sample is blank whatever its value: it does not vote for "7"
    df = cands(["7", "7"], blank=[True, False])
    out = one(df, ignore_blank=False, tiebreak="first")
    assert out["is_blank"] and out["agreement"] == pytest.approx(0.5)  # two groups of one, blank first
    picks = [one(cands(["1", "2", "3", "4"], qid=f"q{i}"), tiebreak="random", seed=7)["answer_value"]
             for i in range(6)]
    assert picks == ["1", "1", "3", "3", "3", "3"]  # sha256(f"{seed}:{qid}")[:16] as the Random seed


def test_answer_priority_is_the_heaviest_identical_set_not_majority_ids() -> None:
    """answer_priority takes the most-voted identical ref set (ties: first), ignoring samples
    without refs; it is not the majority of ids and never a fallback."""
    df = cands(["5", "5", "5"], refs=[["a"], ["b"], ["a", "b"]])
    out = one(df)
    assert out["ref_id"] == ["a"] and out["ref_fallback"] is False
    assert one(df, ref_mode="majority")["ref_id"] == ["a", "b"]  # a 2/3, b 2/3
    no_refs = cands(["5", "5", "5"], refs=[[], [], ["a"]])
    assert one(no_refs)["ref_id"] == ["a"] and one(no_refs)["source_idx"] == 2


def test_generations_to_candidates_fills_nulls_and_names_missing_columns() -> None:
    gens = pl.DataFrame({
        "qid": ["q1", "q1", "q1"], "attempt": [0, 0, 0], "sample_idx": [0, 1, 2],
        "answer_value": [None, "4", "5"], "ref_id": [None, ["d1"], ["d2"]],
        "answer": [None, "a", "b"], "explanation": [None, "e", "f"], "is_blank": [None, False, False],
        "valid": [True, None, True], "supporting_materials": ["s0", None, "s2"],
    }, schema_overrides={"ref_id": pl.List(pl.String)})
    c = generations_to_candidates(gens, None)
    assert c.to_dicts() == [
        {"qid": "q1", "source_idx": 0, "answer_value": "", "ref_id": [], "answer": "", "explanation": "",
         "is_blank": True, "supporting_materials": "s0"},  # null is_blank: blank
        {"qid": "q1", "source_idx": 1, "answer_value": "4", "ref_id": ["d1"], "answer": "a", "explanation": "e",
         "is_blank": True, "supporting_materials": None},  # null valid: invalid, so blank
        {"qid": "q1", "source_idx": 2, "answer_value": "5", "ref_id": ["d2"], "answer": "b", "explanation": "f",
         "is_blank": False, "supporting_materials": "s2"},
    ]
    # without a valid column every sample is valid; without supporting_materials none is kept
    bare = generations_to_candidates(gens.drop("valid", "supporting_materials"), None)
    assert bare["is_blank"].to_list() == [True, False, False]
    assert "supporting_materials" not in bare.columns
    with pytest.raises(ConfigError) as err:
        generations_to_candidates(gens.drop("answer", "is_blank"), None)
    assert str(err.value).startswith("infer/generations lacks column(s) ['answer', 'is_blank']; has ")


def test_agreement_edges_and_the_blank_winners_source() -> None:
    assert one(cands(["5"]))["agreement"] == 1.0  # one sample of weight 1
    zero = one(cands(["5", "6"]), weights=[0.0, 0.0])
    assert zero["agreement"] == 0.0 and zero["answer_value"] == "5"  # no weight: no agreement, no crash
    # a blank majority (blanks kept) is reported with the first blank sample as its source
    out = one(cands(["7", "is_blank", "is_blank"], blank=[False, True, True]), ignore_blank=False)
    assert out["is_blank"] and out["source_idx"] == 1 and out["agreement"] == pytest.approx(2 / 3)


def test_config_and_candidate_errors_are_exact() -> None:
    with pytest.raises(ConfigError) as err:
        VoteConfig(ref_mode="nope").validate()
    assert str(err.value) == "vote.ref_mode='nope'; use one of answer_priority, union, intersection, majority"
    with pytest.raises(ConfigError) as err:
        VoteConfig(tiebreak="coin").validate()
    assert str(err.value) == "vote.tiebreak='coin'; use one of first, priority, random, blank"
    with pytest.raises(ConfigError) as err:
        VoteConfig(n_samples=0).validate()
    assert str(err.value) == "vote.n_samples=0; use a positive integer or null"
    with pytest.raises(ConfigError) as err:
        VoteConfig(weights=[1.0, -0.5]).validate()
    assert str(err.value) == "vote.weights=[1.0, -0.5]: weights must be >= 0"
    VoteConfig(weights=[0.0, 1.0]).validate()  # a zero weight is allowed
    with pytest.raises(ConfigError) as err:
        vote(cands(["1"]).drop("is_blank"))
    assert str(err.value).startswith("vote: candidate table lacks column(s) ['is_blank']; has ['qid', ")


def test_null_and_canonically_blank_values_are_blank_votes() -> None:
    # a null answer_value is the empty string, a blank token; "[]" is blank once canonical
    nulls = cands(["5", "5"]).with_columns(pl.Series("answer_value", [None, "5"], dtype=pl.String))
    assert one(nulls)["answer_value"] == "5" and one(nulls)["n_blank"] == 1
    empty_list = one(cands(["[]", "5"]))
    assert empty_list["answer_value"] == "5" and empty_list["n_blank"] == 1
    assert one(cands(["[]", "5"]), canonical=False)["n_blank"] == 0  # raw voting: "[]" is a value


def test_extra_columns_are_copied_and_the_output_is_typed() -> None:
    df = cands(["5", "6", "6"]).with_columns(
        pl.Series("note", [10, 20, 30], dtype=pl.Int32),
        pl.lit(0.123).alias("agreement"),  # an output column on the input is not copied over it
    )
    out = vote(df)
    assert out["note"].to_list() == [20] and out.schema["note"] == pl.Int32
    assert out["agreement"].to_list() == [pytest.approx(2 / 3)]
    assert out.schema["source_idx"] == pl.Int64 and out.schema["ref_id"] == pl.List(pl.String)
    tie_blank = vote(cands(["5", "6"]), VoteConfig(tiebreak="blank"))  # source_idx null in every row
    assert tie_blank.schema["source_idx"] == pl.Int64 and tie_blank["source_idx"].to_list() == [None]
    empty = vote(cands(["5"]).head(0))
    assert empty.height == 0 and empty.columns == list(vote(cands(["5"])).columns)


def test_samples_of_one_source_keep_their_input_order() -> None:
    df = cands(["6", "5"]).with_columns(pl.lit(0, dtype=pl.Int64).alias("source_idx"))
    out = one(df)
    assert out["answer_value"] == "6" and out["explanation"] == "expl 0"


def test_majority_mode_thresholds_and_its_fallback() -> None:
    # more than half, by weight: a 4/4 and b 3/4 are both kept (not only the most cited)
    df = cands(["5"] * 4, refs=[["a", "b"], ["a", "b"], ["a", "b"], ["a"]])
    out = one(df, ref_mode="majority")
    assert out["ref_id"] == ["a", "b"] and out["ref_fallback"] is False
    # nobody above half: the most cited id(s) only, exactly (b is 0.1 behind a)
    weighted = cands(["5"] * 3, refs=[["a"], ["b"], ["c"]])
    out = one(weighted, ref_mode="majority", weights=[2.5, 2.4, 1.1])
    assert out["ref_id"] == ["a"] and out["ref_fallback"] is False
    tie = one(weighted, ref_mode="majority")
    assert tie["ref_id"] == ["a", "b", "c"]  # all cited once
    assert one(df, ref_mode="union")["ref_fallback"] is False
    assert one(df, ref_mode="intersection")["ref_fallback"] is False


def test_output_row_fields_come_from_the_representative() -> None:
    df = cands(["1,000", "1000.0", "7"])
    assert one(df)["answer_value"] == "1000"  # canonical: rendered
    assert one(df, canonical=False)["answer_value"] == "1,000"  # raw: three groups of one, first wins
    raw = one(cands(["1,000", "1,000", "7"]), canonical=False)
    assert raw["answer_value"] == "1,000"  # raw voting returns the raw string
    nulls = cands(["5"]).with_columns(pl.lit(None, dtype=pl.String).alias("answer"),
                                      pl.lit(None, dtype=pl.String).alias("explanation"))
    out = one(nulls)
    assert out["answer"] == "" and out["explanation"] == ""
    # a blank winner: no fallback, String extras blank, other extras null
    blank = cands(["is_blank", "is_blank", "7"], blank=[True, True, False]).with_columns(
        pl.Series("supporting_materials", ["s0", "s1", "s2"]), pl.Series("note", [1, 2, 3], dtype=pl.Int32))
    out = one(blank, ignore_blank=False)
    assert out["is_blank"] and out["ref_fallback"] is False and out["source_idx"] == 0
    assert out["supporting_materials"] == "is_blank" and out["note"] is None


def test_ensemble_of_minimal_inputs_with_nulls_and_numbers() -> None:
    """Inputs with only id, answer_value and ref_id (numbers, nulls, empty ref lists) vote like
    strings; missing text columns become empty; errors name the input."""
    from kohaku.tasks.rooms.wattbot.submission import SubmissionError
    from kohaku.answer.ensemble import ensemble_submissions

    a = pl.DataFrame({"id": ["q1", "q2"], "answer_value": [5, None], "ref_id": ["[]", "[]"]})
    b = pl.DataFrame({"id": ["q1", "q2"], "answer_value": [5, 7], "ref_id": ["[]", "['d1']"],
                      "explanation": [None, "e"]})
    answers, sub = ensemble_submissions([a, b])
    assert sub.to_dicts() == [
        # an empty answer takes the value, an empty explanation is blank (answers_to_submission)
        {"id": "q1", "question": "", "answer": "5", "answer_value": "5", "answer_unit": "is_blank",
         "ref_id": "is_blank", "ref_url": "is_blank", "supporting_materials": "is_blank", "explanation": "is_blank"},
        {"id": "q2", "question": "", "answer": "7", "answer_value": "7", "answer_unit": "is_blank",
         "ref_id": "['d1']", "ref_url": "is_blank", "supporting_materials": "is_blank", "explanation": "e"},
    ]
    assert answers["n_blank"].to_list() == [0, 1]
    with pytest.raises(SubmissionError, match="input 2"):
        ensemble_submissions([a, b.drop("ref_id")])
    with pytest.raises(SubmissionError, match="input 1"):
        ensemble_submissions([pl.concat([a, a]), b])


def test_vote_generations_counts_ref_fallbacks_and_types_unanswered_rows() -> None:
    from kohaku.answer.voting import vote_generations

    gens = pl.DataFrame({
        "qid": ["q1", "q1"], "attempt": [0, 0], "sample_idx": [0, 1], "answer_value": ["5", "5"],
        "ref_id": [["a"], ["b"]], "answer": ["x", "y"], "explanation": ["e", "f"], "is_blank": [False, False],
    })
    questions = pl.DataFrame({"qid": ["q1", "q2"], "question": ["Q1", "Q2"], "answer_unit": ["", ""]})
    docs = pl.DataFrame({"doc_id": ["a"], "url": ["http://a"]})
    answers, summary = vote_generations(gens, questions, docs, VoteConfig(ref_mode="intersection"))
    assert answers["ref_fallback"].to_list() == [True, False] and summary["n_ref_fallback"] == 1
    assert answers["is_blank"].to_list() == [False, True]
    # every question unanswered: still the typed table
    answers, summary = vote_generations(gens.head(0), questions, docs, VoteConfig())
    assert answers.schema["source_idx"] == pl.Int64 and answers.schema["ref_url"] == pl.List(pl.String)
    assert answers["source_idx"].to_list() == [None, None] and summary["n_unanswered"] == 2


def test_an_answered_row_says_it_is_not_blank() -> None:
    out = vote(cands(["5"]))
    assert out["is_blank"].to_list() == [False] and out.schema["is_blank"] == pl.Boolean


def test_ensemble_of_no_submissions_is_empty_not_a_crash():
    answers, submission = ensemble_submissions([])
    assert answers.height == 0 and submission.height == 0
    assert "supporting_materials" in answers.columns and "id" in submission.columns
