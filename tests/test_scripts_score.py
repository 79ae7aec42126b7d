"""scripts/score.py, scripts/ensemble.py and the score stage."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from omegaconf import OmegaConf

from kohaku.runner.pipeline import option_values
from kohaku.runner.stage import StageContext
from kohaku.stages.score import STAGE as SCORE
from kohaku.tasks.rooms.wattbot.submission import SUBMISSION_COLUMNS, read_csv_str, validate_submission

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = Path(__file__).resolve().parents[2] / "shared" / "data" / "wattbot" / "solutions_public.csv"


def run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / script), *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def write(path: Path, rows: list[dict[str, str]]) -> Path:
    base = {c: "is_blank" for c in SUBMISSION_COLUMNS}
    base.update(question="Q?", answer="a", answer_unit="kWh", explanation="e")
    pl.DataFrame([{**base, **r} for r in rows], schema={c: pl.String for c in SUBMISSION_COLUMNS}).write_csv(path)
    return path


@pytest.fixture
def small(tmp_path: Path) -> tuple[Path, Path]:
    sol = write(tmp_path / "sol.csv", [
        {"id": "q1", "answer_value": "1000", "ref_id": "['d1']"},
        {"id": "q2", "answer_value": "is_blank", "ref_id": "is_blank"},
        {"id": "q3", "answer_value": "[1,2]", "ref_id": "['d2']"},
    ])
    sub = write(tmp_path / "sub.csv", [
        {"id": "q1", "answer_value": "1,000", "ref_id": "['d1']"},
        {"id": "q2", "answer_value": "is_blank", "ref_id": "is_blank"},
        {"id": "q3", "answer_value": "[2,1]", "ref_id": "['d2','d3']"},
    ])
    return sol, sub


def test_score_script_last_line_and_variants(small: tuple[Path, Path]) -> None:
    sol, sub = small
    res = run("score.py", sol, sub)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    # wattbot: value 2/3 ("1,000" is not normalised), ref (1+1+0.5)/3, na 1
    expected = 0.75 * 2 / 3 + 0.15 * 2.5 / 3 + 0.10
    assert lines[-1] == f"score: {expected:.4f}"
    assert any(line.startswith("value ") for line in lines) and "first mismatches" in res.stdout
    recall = run("score.py", sol, sub, "--variant", "wattbot-recall")
    assert recall.stdout.strip().splitlines()[-1] == f"score: {0.75 + 0.15 * 2.5 / 3 + 0.10:.4f}"


def test_score_script_malformed_input_exit_2(small: tuple[Path, Path], tmp_path: Path) -> None:
    sol, _ = small
    bad = write(tmp_path / "bad.csv", [{"id": "q1", "answer_value": "1"}, {"id": "q1", "answer_value": "2"}])
    res = run("score.py", sol, bad)  # scored with a warning (the reference scorers score it)
    assert res.returncode == 0 and "row 2 (id 'q1'), column 'id': duplicate id (also row 1)" in res.stderr
    res = run("score.py", sol, bad, "--strict")
    assert res.returncode == 2
    assert "row 2 (id 'q1'), column 'id': duplicate id (also row 1)" in res.stderr
    nocol = tmp_path / "nocol.csv"
    pl.read_csv(sol).drop("explanation").write_csv(nocol)
    res = run("score.py", sol, nocol)
    assert res.returncode == 2 and "lacks column(s) ['explanation']" in res.stderr
    assert run("score.py", sol, tmp_path / "nothere.csv").returncode == 2


@pytest.mark.skipif(not PUBLIC.is_file(), reason="WattBot data not present")
def test_score_script_on_public_solutions(tmp_path: Path) -> None:
    res = run("score.py", PUBLIC, PUBLIC)
    assert res.returncode == 0 and res.stdout.strip().splitlines()[-1] == "score: 1.0000"
    assert "Quote" in res.stdout and "Public" in res.stdout
    damaged = read_csv_str(PUBLIC)
    values = damaged["answer_value"].to_list()
    for i in range(0, 20):  # 20 wrong values (none of the first 20 rows is NA)
        values[i] = "-12345"
    damaged = damaged.with_columns(pl.Series("answer_value", values)).slice(0, 180)  # 7 rows missing
    path = tmp_path / "damaged.csv"
    damaged.write_csv(path)
    res = run("score.py", PUBLIC, path)
    lines = res.stdout.strip().splitlines()
    n = 187
    missing = damaged_na = 0
    sol = read_csv_str(PUBLIC)
    for r in sol.slice(180).to_dicts():
        missing += 1
        damaged_na += r["answer_value"] == "is_blank"
    value = (n - 20 - missing) / n
    ref = (n - missing) / n
    na = (n - missing) / n
    assert lines[-1] == f"score: {0.75 * value + 0.15 * ref + 0.10 * na:.4f}"
    assert "missing from the submission (scored wrong): 7" in res.stdout


def test_ensemble_script_canonical_vs_raw(tmp_path: Path) -> None:
    inputs = []
    for i, value in enumerate(["1000", "1,000", "1000.0", "900", "900"]):
        inputs.append(write(tmp_path / f"in{i}.csv", [
            {"id": "q1", "answer_value": value, "ref_id": f"['d{i}']", "ref_url": f"['https://{i}']",
             "explanation": f"run {i}"},
            {"id": "q2", "answer_value": "is_blank" if i < 3 else "Lamina", "ref_id": "['x']" if i >= 3 else "is_blank"},
        ]))
    out = tmp_path / "out.csv"
    res = run("ensemble.py", "--out", out, *inputs)
    assert res.returncode == 0, res.stderr
    sub = read_csv_str(out)
    assert validate_submission(sub) == []
    q1, q2 = sub.to_dicts()
    assert q1["answer_value"] == "1000" and q1["ref_id"] == "['d0']" and q1["ref_url"] == "['https://0']"
    assert q1["explanation"] == "run 0"
    assert q2["answer_value"] == "Lamina"  # blanks ignored
    res = run("ensemble.py", "--raw", "--out", out, *inputs)
    assert read_csv_str(out)["answer_value"][0] == "900"
    res = run("ensemble.py", "--no-ignore-blank", "--ref-mode", "union", "--out", out, *inputs)
    assert read_csv_str(out)["answer_value"].to_list() == ["1000", "is_blank"]
    meta = tmp_path / "meta.csv"
    meta.write_text("id,url\nd0,https://meta/0\n")
    run("ensemble.py", "--metadata", meta, "--out", out, *inputs)
    assert read_csv_str(out)["ref_url"][0] == "['https://meta/0']"
    bad = run("ensemble.py", "--weights", "1,2", "--out", out, *inputs)
    assert bad.returncode == 2 and "--weights has 2 values for 5 inputs" in bad.stderr


def score_ctx(tmp_path: Path, solutions: str | None, root: str, sub_rows: list[dict[str, str]]) -> StageContext:
    vote_dir = tmp_path / "vote"
    vote_dir.mkdir(exist_ok=True)
    write(vote_dir / "submission.csv", sub_rows)
    out = tmp_path / "score_out"
    out.mkdir(exist_ok=True)
    cfg = OmegaConf.create({"corpus": {"root": root, "solutions": solutions},
                            "score": {"variant": "wattbot", "subset": False},
                            "task": option_values("task", "wattbot"), "llm": {"backend": "fake"}})
    return StageContext(stage=SCORE, cfg=cfg, input_dirs={"vote": vote_dir}, out_dir=out,
                        services=None, log=logging.getLogger("test"))


def test_score_stage(tmp_path: Path, small: tuple[Path, Path]) -> None:
    sol, _ = small
    ctx = score_ctx(tmp_path, "sol.csv", str(tmp_path), [
        {"id": "q1", "answer_value": "1000", "ref_id": "['d1']"},
        {"id": "q2", "answer_value": "5", "ref_id": "['d1']"},
        {"id": "q3", "answer_value": "1.5", "ref_id": "['d2']"},
    ])
    assert SCORE.file_inputs(ctx.cfg) == [sol]  # resolved under corpus.root
    tables = SCORE.compute(ctx)
    assert tables["scores"].height == 3
    data = json.loads((ctx.out_dir / "scores.json").read_text())
    # value 3/3 (blank truth always right; 1.5 inside [1,2]); ref (1+0+1)/3; na 2/3
    expected = 0.75 + 0.15 * 2 / 3 + 0.10 * 2 / 3
    assert data["score"] == pytest.approx(expected) and data["variant"] == "wattbot" and data["n"] == 3
    assert ctx.summary["score"] == pytest.approx(expected) and ctx.summary["na"] == pytest.approx(2 / 3)


def test_score_stage_without_solutions(tmp_path: Path) -> None:
    ctx = score_ctx(tmp_path, None, str(tmp_path), [{"id": "q1", "answer_value": "1"}])
    assert SCORE.file_inputs(ctx.cfg) == []
    tables = SCORE.compute(ctx)
    assert tables["scores"].height == 0
    assert json.loads((ctx.out_dir / "scores.json").read_text()) == {"skipped": "no solutions"}


def test_score_stage_missing_file_names_the_key(tmp_path: Path) -> None:
    ctx = score_ctx(tmp_path, "nope.csv", str(tmp_path), [{"id": "q1", "answer_value": "1"}])
    with pytest.raises(FileNotFoundError, match="corpus.solutions"):
        SCORE.compute(ctx)


def test_solutions_path_falls_back_to_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "here.csv").write_text("id\n")
    cfg = OmegaConf.create({"corpus": {"root": str(tmp_path / "elsewhere"), "solutions": "here.csv"}})
    assert SCORE.file_inputs(cfg) == [Path("here.csv")]
