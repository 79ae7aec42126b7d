"""Any bytes in, a named error out (issue 55): every reader of a user's file, fed hostile bytes.

Each reader (questions as CSV and JSON lines, solutions, submissions as CSV and as the task's
JSON document, metadata, gold evidence as CSV and JSON lines, task YAML) gets
:data:`EXAMPLES` files built from the sample's real files: random bytes, truncations,
re-encodings (UTF-16/32 with and without a byte-order mark, latin-1), deep nesting, large
cells, byte-level mutations (hostile tokens inserted, ranges cut, lines repeated) and, for the
JSON documents, structured mutations (a value anywhere replaced by another JSON value). The
reader either returns or raises a KohakuError whose message names the file; any other
exception fails the test. Derandomized and small inputs, so CI runs the same cases in seconds.
The limits themselves (a cell or a file over its size, nesting over the depth) are checked
once each below.
"""

from __future__ import annotations

import csv
import io
import json
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kohaku.core import readfile
from kohaku.core.errors import KohakuError

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "sample"
EXAMPLES = int(os.environ.get("KOHAKU_FUZZ_EXAMPLES", 2000))   # fewer while debugging a reader
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))

HOSTILE = [b"\x00", b"\xff", b"\xfe\xff", b"\xef\xbb\xbf", b"\xc3", b"\xed\xa0\x80", b'"', b",", b"\n",
           b"\r", b"\r\n", b"{", b"}", b"[", b"]", b":", b"NaN", b"Infinity", b"-Infinity", b"1e999",
           b"9" * 5000, b"null", b"true", b"[]", b"{}", b"\\", b"\\u", b"\\ud800", b"'", b"\t",
           b"- ", b"? ", b"&a", b"*a", b"!!python/object:os.system", b"${x}", b"%YAML 1.1\n", b"\x1b",
           b"2024-13-45", b"\xe2\x80\xa8"]


def _csv_text(rows: list[dict[str, Any]]) -> bytes:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue().encode("utf-8")


def _sample_rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(path.read_text(encoding="utf-8").splitlines()))


def _jsonl(rows: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")


# ------------------------------------------------------------------------------ the readers

def _cited_task():
    from kohaku.tasks import load_task

    return load_task("cited_pages")


def _readers() -> dict[str, tuple[str, list[bytes], Callable[[Path], Any]]]:
    """name -> (file suffix, seed files' bytes, the reader of a file)."""
    from kohaku.ingest.corpus import read_metadata, read_solutions
    from kohaku.retrieval.gold import GoldSpec, read_gold
    from kohaku.tasks import load_task
    from kohaku.tasks.files.io import read_questions, read_rows
    from kohaku.tasks.spec import QuestionsSpec
    from kohaku.tasks.files.submissions import read_submission

    task = _cited_task()
    questions = (SAMPLE / "questions.csv").read_bytes()
    cited_questions = (SAMPLE / "cited_pages" / "questions.csv").read_bytes()
    solutions = (SAMPLE / "solutions.csv").read_bytes()
    answers = (SAMPLE / "cited_pages" / "answers.csv").read_bytes()
    teams = [p.read_bytes() for p in sorted((SAMPLE / "cited_pages" / "teams").glob("*.json"))]
    flat = [{"id": a["question_id"], "kind": a["kind"], "value": json.dumps(a["value"]),
             "pages": json.dumps([f"{r['doc']}:{r['page_index']}" for r in a["references"]])}
            for a in json.loads(teams[0])["answers"]]
    gold_rows = [{"id": r["id"], "ref_id": r["ref_id"], "page": str(i % 4 + 1)}
                 for i, r in enumerate(_sample_rows(SAMPLE / "solutions.csv")) if r["ref_id"] != "is_blank"]
    gold = GoldSpec(file="gold.csv", qid="id", doc="ref_id", page="page")
    gold_jsonl = GoldSpec(file="gold.jsonl", qid="id", doc="ref_id", page="page")
    spec_jsonl = QuestionsSpec(format="jsonl", fields=["kind"])
    tasks = [p.read_bytes() for p in sorted((REPO / "conf" / "task").glob("*.yaml"))
             if p.stem in ("cited_pages", "short_answer", "typed_answers")]
    return {
        "questions_csv": (".csv", [questions, cited_questions], lambda p: read_questions(p)),
        "questions_jsonl": (".jsonl", [_jsonl(_sample_rows(SAMPLE / "cited_pages" / "questions.csv"))],
                            lambda p: read_questions(p, spec_jsonl)),
        "solutions": (".csv", [solutions, answers],
                      lambda p: (read_solutions(p) if b"answer_value" in p.read_bytes()[:400]
                                 else read_rows(p, "csv", "solutions", skip_blank_lines=True))),
        "submission_csv": (".csv", [_csv_text(flat)], lambda p: read_submission(p, task, "csv")),
        "submission_json": (".json", teams, lambda p: read_submission(p, task)),
        "metadata": (".csv", [(SAMPLE / "metadata.csv").read_bytes()], lambda p: read_metadata(p)),
        "gold_csv": (".csv", [_csv_text(gold_rows)],
                     lambda p: read_gold(gold, p.parent) if p.name == "gold.csv" else None),
        "gold_jsonl": (".jsonl", [_jsonl(gold_rows)],
                       lambda p: read_gold(gold_jsonl, p.parent) if p.name == "gold.jsonl" else None),
        "task_yaml": (".yaml", tasks, lambda p: load_task(p)),
    }


READERS = _readers()
FILE_NAMES = {"gold_csv": "gold.csv", "gold_jsonl": "gold.jsonl"}


# ------------------------------------------------------------------------------ hostile bytes

# Hypothesis draws the kind of damage and a seed; the damage itself is made with random.Random(seed)
# (one draw per case instead of dozens: the strategies cost more than the readers otherwise).

LEAVES = [None, True, False, 0, -1, 7, 2**63, 1.5, -0.0, 1e300, "", "N/A", "q001", "okafor2023",
          "1,000", "True", "[", "\u2028", "x" * 300]


def _json_value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 3 or roll < 0.6:
        return rng.choice(LEAVES)
    if roll < 0.8:
        return [_json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["doc", "page_index", "question_id", "value", "kind", "", "id"]): _json_value(rng, depth + 1)
            for _ in range(rng.randint(0, 3))}


def _replace_somewhere(doc: Any, rng: random.Random) -> Any:
    """``doc`` with one node (chosen by walking down) replaced by another JSON value, or a key
    of an object dropped."""
    if not isinstance(doc, (list, dict)) or not doc or rng.random() < 0.2:
        return _json_value(rng)
    if isinstance(doc, list):
        i = rng.randrange(len(doc))
        return [*doc[:i], _replace_somewhere(doc[i], rng), *doc[i + 1:]]
    key = rng.choice(sorted(doc))
    out = dict(doc)
    if rng.random() < 0.15:
        del out[key]
    else:
        out[key] = _replace_somewhere(doc[key], rng)
    return out


def _structured(seed: bytes, rng: random.Random) -> bytes:
    """A JSON document or JSON lines with values replaced; a CSV with cells replaced."""
    try:
        doc = json.loads(seed)
    except ValueError:
        lines = seed.splitlines()
        if not lines:
            return seed
        i = rng.randrange(len(lines))
        try:
            lines[i] = json.dumps(_replace_somewhere(json.loads(lines[i]), rng)).encode()
        except ValueError:   # a CSV line: a cell replaced
            cells = lines[i].split(b",")
            cells[rng.randrange(len(cells))] = rng.choice(HOSTILE)
            lines[i] = b",".join(cells)
        return b"\n".join(lines)
    for _ in range(rng.randint(1, 3)):
        doc = _replace_somewhere(doc, rng)
    return json.dumps(doc).encode("utf-8")


def _mutate(seed: bytes, rng: random.Random) -> bytes:
    out = bytearray(seed)
    for _ in range(rng.randint(1, 4)):
        at = rng.randint(0, len(out))
        op = rng.randrange(4)
        if op == 0:
            out[at:at] = rng.choice(HOSTILE)
        elif op == 1:
            out[at:at + rng.randint(1, 40)] = b""
        elif op == 2:
            out[at:at] = rng.randbytes(rng.randint(1, 8))
        else:   # a line repeated
            start = out.rfind(b"\n", 0, at) + 1
            end = out.find(b"\n", at)
            end = len(out) if end < 0 else end + 1
            out[end:end] = out[start:end]
    return bytes(out)


def _reencode(seed: bytes, rng: random.Random) -> bytes:
    codec = rng.choice(["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be",
                        "latin-1", "utf-8-sig", "cp1252"])
    raw = seed.decode("utf-8").encode(codec, errors="replace")
    return raw[:rng.randint(0, len(raw))] if rng.random() < 0.5 else raw


def _deep(suffix: str, rng: random.Random) -> bytes:
    n = rng.choice([rng.randint(1, 80), rng.randint(1, 3000)])
    opener, closer = rng.choice([("[", "]"), ('{"a":', "}"), ('[{"x":', "}]"), ("- ", ""), ("a:\n ", ""),
                                 ("{a: ", "}")])
    body = opener * n + "1" + closer * rng.randint(0, n)
    if suffix == ".csv":
        body = "id,question\nq1," + json.dumps(body) + "\n"
    return body.encode("utf-8")


def _large_cell(seed: bytes, rng: random.Random) -> bytes:
    at = rng.randint(0, len(seed))
    return seed[:at] + rng.choice([b"x", b"\xc3\xa9", b'"', b",", b"["]) * rng.randint(1000, 20000) + seed[at:]


DAMAGE = ["truncate", "reencode", "deep", "large", "mutate", "structured", "structured", "seed"]


def _damaged(name: str, how: str, number: int) -> bytes:
    suffix, seeds, _ = READERS[name]
    rng = random.Random(number)
    seed = rng.choice(seeds)
    if how == "truncate":
        return seed[:rng.randint(0, len(seed))]
    if how == "reencode":
        return _reencode(seed, rng)
    if how == "deep":
        return _deep(suffix, rng)
    if how == "large":
        return _large_cell(seed, rng)
    if how == "structured":
        return _structured(seed, rng)
    if how == "mutate":
        return _mutate(seed, rng)
    return seed


def hostile(name: str) -> st.SearchStrategy[bytes]:
    """Random bytes, or a seed file damaged one way (see the module doc)."""
    damaged = st.builds(lambda how, n: _damaged(name, how, n), st.sampled_from(DAMAGE), st.integers(0, 2**32))
    return st.one_of(st.binary(max_size=300), damaged, damaged, damaged, damaged)


# ------------------------------------------------------------------------------ the test

RUNS: dict[str, tuple[int, float]] = {}


@pytest.fixture
def folder(tmp_path: Path):
    """A folder in memory where there is one (each case writes its file: on a busy disk that is
    most of the time), else the test's tmp_path."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    with tempfile.TemporaryDirectory(dir=shm, prefix="kohaku-fuzz-") as tmp:
        yield Path(tmp)


@pytest.mark.parametrize("name", sorted(READERS))
def test_any_bytes_give_the_reader_s_result_or_a_named_error(name: str, folder: Path) -> None:
    suffix, _, reader = READERS[name]
    path = folder / FILE_NAMES.get(name, f"input{suffix}")
    counts = {"cases": 0, "read": 0, "refused": 0}

    @FUZZ
    @given(hostile(name))
    def run(raw: bytes) -> None:
        path.write_bytes(raw)
        counts["cases"] += 1
        try:
            reader(path)
        except KohakuError as exc:
            counts["refused"] += 1
            assert str(path) in str(exc), f"the message does not name the file: {exc}"
        else:
            counts["read"] += 1

    started = time.perf_counter()
    run()
    seconds = time.perf_counter() - started
    print(f"\n{name}: {counts['cases']} cases ({counts['read']} read, {counts['refused']} refused "
          f"with a named error) in {seconds:.1f} s")
    assert counts["cases"] >= EXAMPLES
    assert counts["read"] > 0 and counts["refused"] > counts["cases"] // 4   # both ways taken


# ------------------------------------------------------------------------------ the limits, one case each

def test_a_utf16_file_with_its_byte_order_mark_reads_as_its_utf8_twin(tmp_path: Path) -> None:
    from kohaku.tasks.files.io import read_questions

    text = (SAMPLE / "questions.csv").read_text(encoding="utf-8")
    expected = read_questions(SAMPLE / "questions.csv")
    for codec in ("utf-16", "utf-16-be", "utf-32", "utf-8-sig"):
        path = tmp_path / f"{codec}.csv"
        raw = text.encode(codec)
        if codec == "utf-16-be":
            raw = b"\xfe\xff" + raw
        path.write_bytes(raw)
        assert read_questions(path).equals(expected), codec


def test_utf16_without_a_byte_order_mark_is_named(tmp_path: Path) -> None:
    from kohaku.tasks.files.io import read_questions

    path = tmp_path / "q.csv"
    path.write_bytes((SAMPLE / "questions.csv").read_text(encoding="utf-8").encode("utf-16-le"))
    with pytest.raises(KohakuError, match=r"q.csv: questions holds a NUL byte at byte 1: it looks like "
                                          r"UTF-16 \(little endian\) saved without a byte-order mark"):
        read_questions(path)


def test_invalid_utf8_in_json_names_its_byte(tmp_path: Path) -> None:
    from kohaku.tasks.files.submissions import read_submission

    path = tmp_path / "s.json"
    path.write_bytes(b'{"answers": [{"question_id": "q\xff1"}]}')
    with pytest.raises(KohakuError, match=r"s.json: submission is not valid UTF-8 \(invalid start byte at "
                                          r"byte 31\)"):
        read_submission(path, _cited_task())


def test_nesting_deeper_than_the_limit_is_refused_with_its_place_and_no_recursion(tmp_path: Path) -> None:
    from kohaku.tasks.files.submissions import read_submission

    path = tmp_path / "deep.json"
    head = '{"answers": ['
    path.write_text(head + "[" * 100_000 + "]" * 100_000 + "]}")
    limit = readfile.MAX_JSON_DEPTH
    with pytest.raises(KohakuError, match=rf"deep.json: submission nests arrays/objects deeper than {limit} "
                                          rf"levels at line 1, column {len(head) + limit - 1}"):
        read_submission(path, _cited_task())
    # brackets inside strings are text, not nesting
    assert readfile.load_json(json.dumps({"a": "[" * 1000}), "x", "x") == {"a": "[" * 1000}


def test_nan_and_infinity_are_refused_where_a_number_is_expected(tmp_path: Path) -> None:
    from kohaku.tasks.files.submissions import read_submission

    for token, col in (("NaN", 47), ("-Infinity", 47), ("1e999", 47)):
        path = tmp_path / "nan.json"
        path.write_text('{"answers": [{"question_id": "q001", "value": ' + token + "}]}")
        with pytest.raises(KohakuError, match=rf"nan.json: submission holds {token} at line 1, column {col}, "
                                              "which is no finite number; expected a number"):
            read_submission(path, _cited_task())


def test_a_cell_over_the_limit_is_refused_with_its_row_and_column(tmp_path: Path) -> None:
    from kohaku.tasks.files.io import read_questions

    path = tmp_path / "q.csv"
    path.write_text("id,question,answer_unit\nq1,short,x\nq2," + "y" * (readfile.MAX_CELL_CHARS + 1) + ",x\n")
    with pytest.raises(KohakuError, match=r"q.csv: row 2, column 'question' of the questions holds "
                                          r"1,048,577 characters, over the limit of 1,048,576"):
        read_questions(path)


def test_a_file_over_the_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "big.csv"
    path.write_bytes(b"id\n" + b"1\n" * 50)
    with pytest.raises(KohakuError, match=r"big.csv: metadata is 103 bytes, over the limit of 100 bytes"):
        readfile.read_text(path, "metadata", limit=100)


def test_a_binary_csv_is_named_with_its_byte(tmp_path: Path) -> None:
    from kohaku.ingest.corpus import read_metadata

    path = tmp_path / "metadata.csv"
    path.write_bytes(b"id,type\n" + bytes(range(1, 9)) * 40 + b"\xff")
    with pytest.raises(KohakuError, match=r"metadata.csv: metadata holds the control character 0x01 at "
                                          r"line 2, column 1 \(byte ~8\): binary data"):
        read_metadata(path)


def test_debug_is_asked_by_the_flag_or_the_environment() -> None:
    assert readfile.debug_wanted(True, {}) and readfile.debug_wanted(False, {"KOHAKU_DEBUG": "1"})
    assert not readfile.debug_wanted(False, {"KOHAKU_DEBUG": "0"}) and not readfile.debug_wanted(False, {})


@pytest.mark.parametrize("name", ["submission_csv", "submission_json"])
def test_a_submission_read_is_scored_or_refused_with_a_named_error(name: str, folder: Path) -> None:
    """Past the reader: the scorer reads cells as JSON lists and pages as numbers (a cell nested
    thousands deep, a page of Infinity were a RecursionError and an OverflowError). A metric's
    error names the column, not always the file: the batch commands put the file before it
    (kohaku.core.errors.one_line)."""
    from kohaku.tasks.score.scoring import score_submission

    task, gold = _cited_task(), SAMPLE / "cited_pages" / "answers.csv"
    path = folder / f"input{READERS[name][0]}"
    counts = {"scored": 0, "refused": 0}

    @settings(FUZZ, max_examples=EXAMPLES // 2)
    @given(hostile(name))
    def run(raw: bytes) -> None:
        path.write_bytes(raw)
        try:
            score_submission(task, gold, path)
        except KohakuError:
            counts["refused"] += 1
        else:
            counts["scored"] += 1

    run()
    assert counts["scored"] > 0 and counts["refused"] > 0
    assert sum(counts.values()) >= EXAMPLES // 2


def test_a_task_yaml_of_a_billion_laughs_is_refused_before_it_is_built(tmp_path: Path) -> None:
    from kohaku.tasks import load_task

    lines = ["name: x", "a: &a [" + ", ".join(["1"] * 10) + "]"]
    for prev, name in zip("abcdef", "bcdefg"):
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 10) + "]")
    path = tmp_path / "laughs.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(KohakuError, match=r"laughs.yaml: task file stands for more than 1,000,000 values "
                                          r"with its aliases expanded at line 7, column 44"):
        load_task(path)
    assert readfile.load_yaml("a: &x {b: [1, 2]}\nc: *x\n", "p", "w") == {"a": {"b": [1, 2]}, "c": {"b": [1, 2]}}
