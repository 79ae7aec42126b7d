"""A bad file in a batch costs only itself (issue 55): ``scripts/score.py`` given 10 good and 10
hostile submissions scores the good ones exactly as each scores alone, names each bad file in
its row, exits 2 and prints no traceback; ``--debug`` (or KOHAKU_DEBUG=1) asks for it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kohaku.core import readfile

REPO = Path(__file__).resolve().parents[1]
CITED = REPO / "data" / "sample" / "cited_pages"
GOLD = CITED / "answers.csv"


def _flat_csv(document: dict) -> str:
    lines = ["id,kind,value,pages"]
    for a in document["answers"]:
        pages = json.dumps([f"{r['doc']}:{r['page_index']}" for r in a["references"]]).replace('"', '""')
        value = json.dumps(a["value"]) if not isinstance(a["value"], str) else a["value"]
        lines.append(f'{a["question_id"]},{a["kind"]},"{value.replace(chr(34), 2 * chr(34))}","{pages}"')
    return "\n".join(lines) + "\n"


def _files(folder: Path) -> tuple[list[Path], list[Path]]:
    teams = {p.stem: p.read_text(encoding="utf-8") for p in sorted((CITED / "teams").glob("*.json"))}
    a, b, c = (teams[k] for k in ("team_a", "team_b", "team_c"))
    good = {
        "a.json": a.encode(), "b.json": b.encode(), "c.json": c.encode(),
        "a_utf16.json": a.encode("utf-16"), "b_utf32.json": b.encode("utf-32"),
        "c_bom.json": a.encode("utf-8-sig").replace(b"team-a", b"team-c"),
        "a.csv": _flat_csv(json.loads(a)).encode(), "b.csv": _flat_csv(json.loads(b)).encode(),
        "c.csv": _flat_csv(json.loads(c)).encode(), "a_utf16.csv": _flat_csv(json.loads(a)).encode("utf-16"),
    }
    huge = json.loads(a)
    huge["answers"][0]["value"] = "x" * (readfile.MAX_CELL_CHARS + 1)
    huge["answers"][0]["kind"] = "name"
    bad = {
        "random.json": bytes(range(256)) * 2,
        "utf16_no_bom.json": a.encode("utf-16-le"),
        "deep.json": b'{"answers": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        "nan.json": a.replace("1.11", "NaN", 1).encode(),
        "inf.json": a.replace("1.11", "1e999", 1).encode(),
        "truncated.json": b.encode()[:700],
        "latin1.json": a.replace("q001", "q\u00e9001", 1).encode("latin-1"),
        "surrogate.json": a.replace("q001", "q\\ud800", 1).encode(),
        "huge_cell.json": json.dumps(huge).encode(),
        "answers_text.json": b'{"team": "x", "answers": "all of them"}',
    }
    for name, raw in {**good, **bad}.items():
        (folder / name).write_bytes(raw)
    return [folder / n for n in good], [folder / n for n in bad]


def _score(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "scripts" / "score.py"), str(GOLD), *args,
                           "--task", "cited_pages"], capture_output=True, text=True, cwd=REPO, timeout=300,
                          env={**os.environ, "KOHAKU_DEBUG": "", **(env or {})})


def test_ten_good_and_ten_hostile_files_the_good_scored_as_alone_each_bad_named(tmp_path: Path) -> None:
    from kohaku.tasks import load_task
    from kohaku.tasks.score.scoring import score_submission

    good, bad = _files(tmp_path)
    files = [p for pair in zip(good, bad) for p in pair]   # interleaved
    out = tmp_path / "table.json"
    run = _score(*map(str, files), "--format", "json", "--out", str(out))
    assert run.returncode == 2, run.stdout + run.stderr
    assert "Traceback" not in run.stderr
    rows = {r["submission"]: r for r in json.loads(out.read_text())}
    assert set(rows) == {str(p) for p in files}
    task = load_task("cited_pages")
    scores = set()
    for path in good:
        alone = score_submission(task, GOLD, path)
        row = rows[str(path)]
        assert row.get("error") in (None, ""), row
        assert row["score"] == alone.score and row["n"] == alone.n == 14
        assert {k: row[k] for k in alone.components} == alone.components
        scores.add(row["score"])
    assert len(scores) == 3   # teams a, b and c, whatever the encoding or format
    errors = run.stderr.strip().splitlines()
    assert len(errors) == len(bad)
    for path in bad:
        message = rows[str(path)]["error"]
        assert message.startswith(f"{path}: ") and "unexpected" not in message, message
        assert f"error: {message}" in errors
    expected = {"random.json": "holds a NUL byte at byte 0: binary data",
                "utf16_no_bom.json": "UTF-16 (little endian) saved without a byte-order mark",
                "deep.json": "nests arrays/objects deeper than 64 levels at line 1, column 76",
                "nan.json": "holds NaN at line", "inf.json": "holds 1e999 at line",
                "truncated.json": "is not JSON (", "latin1.json": "is not valid UTF-8 (invalid continuation byte at byte",
                "surrogate.json": "holds the escape \\ud800 at line",
                "huge_cell.json": "over the limit of 1,048,576", "answers_text.json": "no list of answers"}
    for path in bad:
        assert expected[path.name] in rows[str(path)]["error"], rows[str(path)]["error"]
    # one good file alone through the script: the same score as in the batch
    alone = _score(str(good[3]), "--format", "json", "--out", str(tmp_path / "alone.json"))
    assert alone.returncode == 0, alone.stderr
    assert json.loads((tmp_path / "alone.json").read_text())[0]["score"] == rows[str(good[3])]["score"]


@pytest.mark.parametrize("how", [["--debug"], []])
def test_debug_gives_the_traceback(tmp_path: Path, how: list[str]) -> None:
    path = tmp_path / "deep.json"
    path.write_bytes(b"[" * 100_000)
    run = _score(str(path), *how, env={} if how else {"KOHAKU_DEBUG": "1"})
    assert run.returncode == 1 and "Traceback" in run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith("kohaku.core.errors.SubmissionError: ")
    assert "nests arrays/objects deeper than 64 levels" in run.stderr
    quiet = _score(str(path))
    assert quiet.returncode == 2 and "Traceback" not in quiet.stderr
    assert quiet.stderr.strip() == f"error: {path}: submission nests arrays/objects deeper than 64 levels at " \
                                   "line 1, column 65; expected at most 64 (kohaku.core.readfile.MAX_JSON_DEPTH)"


def _script(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"{name}_script", REPO / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def _two_bad(folder: Path) -> list[Path]:
    deep, nan = folder / "deep.json", folder / "nan.json"
    deep.write_bytes(b"[" * 50_000)
    nan.write_text((CITED / "teams" / "team_a.json").read_text().replace("1.11", "NaN", 1))
    return [deep, nan]


def _named_each(err: str, bad: list[Path]) -> None:
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    for path in bad:
        assert any(line.startswith(f"error: {path}: submission ") for line in lines), err


def test_ensemble_and_compare_name_each_bad_input_and_write_nothing(tmp_path: Path, capsys) -> None:
    bad = _two_bad(tmp_path)
    team = str(CITED / "teams" / "team_a.json")
    out = tmp_path / "vote.json"
    assert _script("ensemble").main([team, str(bad[0]), team, str(bad[1]), "--task", "cited_pages",
                                     "--questions", str(CITED / "questions.csv"), "--out", str(out)]) == 2
    _named_each(capsys.readouterr().err, bad)
    assert not out.exists()
    assert _script("compare").main(["--solutions", str(GOLD), "--task", "cited_pages", team, str(bad[0]),
                                    str(bad[1])]) == 2
    _named_each(capsys.readouterr().err, bad)


def test_check_scorer_checks_the_good_submissions_and_names_the_bad(tmp_path: Path, capsys) -> None:
    example = REPO / "data" / "sample" / "pages_example"
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"id,answer,pages\n" + bytes(range(1, 32)) * 20 + b"\xff")
    scorer = tmp_path / "scorer.py"   # a scorer that gives every row full marks
    scorer.write_text("import csv, sys\nprint('id,answer,pages')\n"
                      "for r in csv.DictReader(open(sys.argv[2])): print(f\"{r['id']},1.0,1.0\")\n")
    code = _script("check_scorer").main([str(example / "solutions.csv"), str(example / "submission_a.csv"),
                                         str(bad), "--task", "pages_example", "--out-dir", str(tmp_path / "out"),
                                         "--scorer", f"{sys.executable} {scorer} {{solutions}} {{submission}}"])
    captured = capsys.readouterr()
    assert code == 2 and "Traceback" not in captured.err
    assert f"error: {bad}: submission holds the control character 0x01 at line 2, column 1" in captured.err
    row = next(line for line in captured.out.splitlines() if line.startswith(str(example / "submission_a.csv")))
    assert " / " in row and "error" not in row   # the good submission still checked
