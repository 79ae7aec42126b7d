"""report.html (kohaku.report.html) of a run, a sweep and a comparison.

A real run of data/sample and a real 4-point sweep (fake LLM, hashing encoder: ~10 s together),
then each report kind opened in headless Chromium (Debian's ``chromium`` and ``chromium-driver``,
installed by scripts/setup_browser.sh; selenium is told where the driver is, so it downloads
nothing): what the page shows is checked through the DOM against the tables the reports come
from, the question table is filtered and searched, a screenshot is saved, and any SEVERE entry in
the browser console fails the test. The browser tests skip (saying why) where Chromium is not
installed; the pure-Python ones (content, escaping, size, a report that cannot be written) run
everywhere. ``KOHAKU_REPORT_SHOTS=docs/img`` saves the screenshots there too (README's)."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

import polars as pl
import pytest

from conftest import compose
from kohaku.runner.pipeline import run_pipeline
from kohaku.report import html as report_html
from kohaku.report.html import MAX_BLOCK_CHARS, Blocks, render, script_json
from test_compare import load_script
from test_sweep import run_sweep

FAST = ["llm=fake", "embed.model=hash:64", "embed.dtype=float32"]
SWEEP = ["retrieve.top_k=2,4", "infer.prompt_order=context_first,question_first", "embed.dtype=float32",
         "report.baseline='retrieve.top_k=2,infer.prompt_order=question_first'"]
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
EVIL = "</script><script>window.pwned=1</script> <b>bold</b> & \"quoted\" 'single' \u2028 x<y>z"

# q001's answer as the gold document says it: in its conclusion or its table of cooling set-ups
ANSWER = re.compile(r"(?i)1\.11 with direct-to-chip liquid cooling|direct-to-chip liquid \| 1\.11")


def page_data(path: Path) -> dict:
    """The JSON blob of a report page, read back as the browser reads it."""
    text = path.read_text(encoding="utf-8")
    m = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', text, re.S)
    assert m, f"{path}: no report-data blob"
    return json.loads(m.group(1))


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def run_dir(cache_dir, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("run") / "sample-run"
    run_pipeline(compose([f"cache.dir={cache_dir}", *FAST]), run)
    return run


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("sweep")
    rc, log = run_sweep(tmp, SWEEP)
    assert rc == 0, log[-3000:]
    return tmp / "sweep"


@pytest.fixture(scope="module")
def compare_html(sweep_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("compare") / "compare.html"
    points = {" ".join(json.loads((p / "run.json").read_text())["overrides"]): p for p in sweep_dir.glob("[0-9]")}
    base = next(p for o, p in points.items() if "question_first" in o and "top_k=2" in o)
    best = next(p for o, p in points.items() if "context_first" in o and "top_k=2" in o)
    assert load_script().main([f"question_first={base}", f"context_first={best}", "--html", str(out),
                               "--json", str(out.with_suffix(".json")), "--resamples", "1000"]) == 0
    return out


# ---- the pages' content, no browser ---------------------------------------------------------


def test_run_report_holds_the_run_tables(run_dir):
    path = run_dir / "report.html"
    assert path.is_file(), "report.html is written next to scores.json"
    data = page_data(path)
    scores = json.loads((run_dir / "scores.json").read_text())
    table = pl.read_parquet(run_dir / "scores.parquet")
    run = data["run"]
    assert data["kind"] == "run" and run["score"] == pytest.approx(scores["score"])
    assert run["interval"]["lo"] <= scores["score"] <= run["interval"]["hi"] and run["interval"]["n"] == 11
    assert run["interval"]["score"] == pytest.approx(scores["score"])
    assert {c["name"]: c["value"] for c in run["components"]} == pytest.approx(scores["components"])
    assert run["errors"]["counts"] == scores["errors"]["counts"]
    assert run["errors"]["by_kind"] == scores["errors"]["by_kind"]
    qs = {q["qid"]: q for q in run["questions"]}
    assert list(qs) == table["qid"].to_list()
    assert {q: r["class"] for q, r in qs.items()} == dict(zip(table["qid"], table["error_class"]))
    # every question has its sample(s), the vote's agreement and the context the model saw
    for q in qs.values():
        assert q["samples"] and q["contexts"] and q["agreement"] == 1.0
        assert q["samples"][0]["agrees"] and q["samples"][0]["value"] == q["voted"]
    # the gold document's blocks are marked: q001's truth cites okafor2023, whose blocks lead its context
    q1 = qs["q001"]
    assert q1["gold"] == ["okafor2023"]
    marks = [(doc, gold) for _, doc, gold in q1["contexts"][0]["blocks"]]
    assert ("okafor2023", True) in marks and all(gold == (doc == "okafor2023") for doc, gold in marks)
    first = q1["contexts"][0]["blocks"][0][0]
    assert ANSWER.search(data["blocks"][first])   # the answer, as the sentence or the table row says it
    assert path.stat().st_size < 200_000


def test_sweep_report_holds_the_leaderboard_and_the_flips(sweep_dir):
    data = page_data(sweep_dir / "report.html")
    sweep = data["sweep"]
    board = pl.read_csv(sweep_dir / "leaderboard.csv")
    cells = pl.read_csv(sweep_dir / "comparison.csv")
    assert [r["run_id"] for r in sweep["board"]] == [str(x) for x in board["run_id"]]
    assert [r["score"] for r in sweep["board"]] == pytest.approx(board["score"].to_list())
    assert sweep["baseline"] == {"retrieve.top_k": 2, "infer.prompt_order": "question_first"}
    assert {p["name"] for p in sweep["plots"]} == {"score_vs_retrieve.top_k", "score_by_infer.prompt_order",
                                                   "components"}
    assert all(p["src"].startswith("data:image/png;base64,iVBOR") for p in sweep["plots"])
    flips = sweep["flips"]
    others = cells.filter(pl.col("sig") != "baseline")
    best = others.sort("score", descending=True, maintain_order=True).row(0, named=True)
    assert flips["b"] == f"retrieve.top_k={best['retrieve.top_k']}, infer.prompt_order={best['infer.prompt_order']}"
    assert (flips["fixed"], flips["broken"]) == (best["fixed"], best["broken"]) and best["fixed"] > 0
    assert flips["n_flips"] == len(flips["rows"]) == best["fixed"] + best["broken"]
    row = flips["rows"][0]
    assert row["change"] == "fixed" and row["a"]["contexts"] and row["b"]["contexts"]
    assert row["a"]["answer"] != row["b"]["answer"]


def test_compare_report_holds_the_pairs_and_flips(compare_html):
    data = page_data(compare_html)
    printed = json.loads(compare_html.with_suffix(".json").read_text())
    pair = data["compare"]["pairs"][0]
    assert (pair["a"], pair["b"]) == ("question_first", "context_first")
    assert pair["delta"] == pytest.approx(printed["pairs"][0]["delta"])
    assert [pair["lo"], pair["hi"]] == pytest.approx(printed["pairs"][0]["ci"])
    flips = data["compare"]["flips"][0]
    assert [r["qid"] for r in flips["rows"]] == [r["qid"] for r in printed["flips"]["question_first vs context_first"]]
    assert all(r["a"]["contexts"] and r["b"]["contexts"] for r in flips["rows"])


def test_script_json_cannot_end_the_script_and_round_trips():
    data = {"kind": "run", "title": EVIDENCE_TITLE, "blocks": [EVIL], "x": float("nan")}
    page = render(data)
    assert "window.pwned" in page  # it is there, but only as escaped JSON text
    assert page.count("</script>") == 2 and "<script>window" not in page and "<b>" not in page
    assert "<title>kohaku &lt;run&gt; &amp; &quot;x&quot;</title>" in page
    back = json.loads(re.search(r'id="report-data">(.*?)</script>', page, re.S).group(1))
    assert back["blocks"] == [EVIL] and back["x"] is None and back["title"] == EVIDENCE_TITLE
    assert "\\u003c/script\\u003e" in script_json(EVIL)


EVIDENCE_TITLE = 'kohaku <run> & "x"'


def test_blocks_are_stored_once_and_long_blocks_cut():
    blocks = Blocks()
    assert blocks.id("a") == blocks.id("a") == 0 and blocks.id("b") == 1 and len(blocks.texts) == 2
    long = blocks.texts[blocks.id("x" * (MAX_BLOCK_CHARS + 500))]
    assert long.startswith("x" * MAX_BLOCK_CHARS) and long.endswith("[500 more characters]")


def test_a_report_that_cannot_be_written_is_a_warning(cache_dir, tmp_path, monkeypatch, caplog):
    def broken(*_args, **_kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(report_html, "write_run_report", broken)
    with caplog.at_level(logging.WARNING, logger="kohaku.report.html"):
        result = run_pipeline(compose([f"cache.dir={cache_dir}", *FAST]), tmp_path / "run")
    assert (result.run_dir / "scores.json").is_file() and not (result.run_dir / "report.html").exists()
    assert json.loads((result.run_dir / "run.json").read_text())["status"] == "ok"
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("could not write report.html (RuntimeError: disk on fire)" in w for w in warned), warned


# ---- the pages in Chromium ------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).is_file()]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (bash scripts/setup_browser.sh installs Debian's "
                    "chromium and chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is in the dev extra")
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"  # selenium-manager never fetches a browser or a driver
    profile = tempfile.mkdtemp(prefix="kohaku-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--window-size=1280,900"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def open_page(driver, path: Path, timeout_s: float = 10.0) -> float:
    """Load a report from file:// and wait until its script has drawn it; seconds taken."""
    started = time.perf_counter()
    driver.get(path.resolve().as_uri())
    while driver.execute_script("return document.body.dataset.ready") != "1":
        assert time.perf_counter() - started < timeout_s, f"{path} not drawn in {timeout_s} s"
        time.sleep(0.02)
    return time.perf_counter() - started


def no_console_errors(driver) -> None:
    severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == [], severe


def screenshot(driver, tmp_path: Path, name: str, full: bool = True) -> Path:
    if full:  # the whole page (capped), as the README shows it
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(1280, min(max(height, 600), 1800))
    driver.execute_script("window.scrollTo(0, 0)")
    out = tmp_path / f"{name}.png"
    assert driver.save_screenshot(str(out)) and out.stat().st_size > 10_000
    shots = os.environ.get("KOHAKU_REPORT_SHOTS")
    if shots:
        Path(shots).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out, Path(shots) / out.name)
    driver.set_window_size(1280, 900)
    return out


def visible_rows(driver) -> list[str]:
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('#qtable tr.q'))"
        ".filter(r => r.style.display !== 'none').map(r => r.dataset.qid)")


def test_run_page_in_chromium(browser, run_dir, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    scores = json.loads((run_dir / "scores.json").read_text())
    table = pl.read_parquet(run_dir / "scores.parquet")
    open_page(browser, run_dir / "report.html")   # drawn within open_page's bound (no timing assert: CI is shared)
    assert browser.find_element(By.ID, "score-value").text == f"{scores['score']:.4f}"
    assert re.fullmatch(r"95 % interval \[0\.\d{4}, 0\.\d{4}\]", browser.find_element(By.ID, "score-interval").text)
    shown = {r.get_attribute("data-class"): r.find_element(By.CSS_SELECTOR, "td[data-col='all']").text
             for r in browser.find_elements(By.CSS_SELECTOR, "#class-table tr.class-row")}
    assert shown == {k: str(v) for k, v in scores["errors"]["counts"].items() if v}
    assert len(visible_rows(browser)) == 11
    Select(browser.find_element(By.ID, "class-filter")).select_by_value("wrong_number")
    want = table.filter(pl.col("error_class") == "wrong_number")["qid"].to_list()
    assert visible_rows(browser) == want and len(want) == scores["errors"]["counts"]["wrong_number"]
    assert browser.find_element(By.ID, "shown").text == f"{len(want)} of 11 questions"
    Select(browser.find_element(By.ID, "class-filter")).select_by_value("")
    search = browser.find_element(By.ID, "search")
    search.send_keys("direct-to-chip")
    assert visible_rows(browser) == ["q001"]
    browser.find_element(By.CSS_SELECTOR, "#qtable tr.q[data-qid='q001']").click()
    detail = browser.find_element(By.CSS_SELECTOR, "#qtable tr.detail[data-qid='q001']")
    assert detail.find_element(By.CSS_SELECTOR, ".truth").text == "1.11"
    assert detail.find_element(By.CSS_SELECTOR, ".voted").text == table.filter(pl.col("qid") == "q001")["pred_value"][0]
    gold = detail.find_elements(By.CSS_SELECTOR, ".block.gold")
    assert gold and all(b.get_attribute("data-doc") == "okafor2023" for b in gold)
    assert ANSWER.search(gold[0].text)
    assert detail.find_elements(By.CSS_SELECTOR, "tr.sample")
    search.clear()
    search.send_keys("no question says this")
    assert visible_rows(browser) == []
    search.clear()
    search.send_keys(" ")  # clear() fires no input event
    screenshot(browser, tmp_path, "report-run")
    no_console_errors(browser)


def test_sweep_page_in_chromium(browser, sweep_dir, tmp_path):
    from selenium.webdriver.common.by import By

    data = page_data(sweep_dir / "report.html")["sweep"]
    open_page(browser, sweep_dir / "report.html")
    rows = browser.find_elements(By.CSS_SELECTOR, "#board tr.board-row")
    assert [r.get_attribute("data-run") for r in rows] == [r["run_id"] for r in data["board"]]
    shown = [r.find_element(By.CSS_SELECTOR, "td.score").text for r in rows]
    assert shown == [f"{r['score']:.4f}" for r in data["board"]]
    marks = [r.find_element(By.CSS_SELECTOR, ".mark").text for r in rows]
    assert marks.count("baseline") == 1 and "*" in marks
    assert browser.execute_script("return Array.from(document.images).every(i => i.complete && i.naturalWidth > 100)")
    assert len(browser.find_elements(By.CSS_SELECTOR, "img.plot")) == 3
    assert browser.find_elements(By.CSS_SELECTOR, "#class-table td[data-class='needless_abstention']")
    flip = browser.find_element(By.CSS_SELECTOR, "#flip-list .flip")
    first = data["flips"]["rows"][0]
    assert flip.get_attribute("data-qid") == first["qid"] and flip.get_attribute("data-change") == "fixed"
    sides = flip.find_elements(By.CSS_SELECTOR, ".side")
    answers = [s.find_element(By.CSS_SELECTOR, ".answer").text for s in sides]
    assert answers == [first["a"]["answer"], first["b"]["answer"]]
    summary = sides[1].find_element(By.CSS_SELECTOR, "details.context > summary")
    summary.click()
    block = sides[1].find_element(By.CSS_SELECTOR, "details.context .block pre")
    assert block.is_displayed() and block.text.strip() == page_data(sweep_dir / "report.html")["blocks"][
        first["b"]["contexts"][0]["blocks"][0][0]].strip()
    screenshot(browser, tmp_path, "report-sweep")
    no_console_errors(browser)


def test_compare_page_in_chromium(browser, compare_html, tmp_path):
    from selenium.webdriver.common.by import By

    data = page_data(compare_html)["compare"]
    open_page(browser, compare_html)
    row = browser.find_element(By.CSS_SELECTOR, "#pairs-table tr.pair-row")
    pair = data["pairs"][0]
    assert row.find_element(By.CSS_SELECTOR, "td.fixed").text == str(pair["fixed"])
    assert row.find_element(By.CSS_SELECTOR, "td.broken").text == str(pair["broken"])
    flips = browser.find_elements(By.CSS_SELECTOR, "#flip-list-0 .flip")
    assert len(flips) == pair["fixed"] + pair["broken"]
    assert [f.get_attribute("data-change") for f in flips].count("broken") == pair["broken"]
    first = flips[0]  # a fixed question whose truth cites a document: both contexts hold its blocks
    assert first.get_attribute("data-qid") == data["flips"][0]["rows"][0]["qid"]
    for summary in first.find_elements(By.CSS_SELECTOR, "details.context > summary"):
        summary.click()
    sides = first.find_elements(By.CSS_SELECTOR, ".side")
    gold = data["flips"][0]["rows"][0]["gold"]
    assert len(sides) == 2 and gold
    for side in sides:
        marked = side.find_elements(By.CSS_SELECTOR, ".block.gold")
        assert marked and all(b.is_displayed() and b.get_attribute("data-doc") in gold for b in marked)
    screenshot(browser, tmp_path, "report-compare")
    no_console_errors(browser)


def test_report_text_is_shown_as_text(browser, run_dir, tmp_path):
    """Corpus and question text with markup in it is displayed verbatim, never run or parsed."""
    from selenium.webdriver.common.by import By

    data = page_data(run_dir / "report.html")
    data["run"]["questions"][0]["question"] = EVIL
    data["blocks"][data["run"]["questions"][0]["contexts"][0]["blocks"][0][0]] = EVIL
    page = report_html.write_html(data, tmp_path / "evil.html")
    open_page(browser, page)
    row = browser.find_element(By.CSS_SELECTOR, "#qtable tr.q")
    assert row.find_elements(By.TAG_NAME, "td")[1].get_attribute("textContent") == EVIL
    row.click()
    pre = browser.find_element(By.CSS_SELECTOR, "#qtable tr.detail .block pre")
    assert pre.get_attribute("textContent") == EVIL
    assert browser.execute_script("return window.pwned === undefined && !document.querySelector('main b')")
    no_console_errors(browser)


def test_a_page_over_the_size_limit_has_its_blocks_cut(tmp_path, caplog):
    data = {"kind": "run", "title": "big", "blocks": [f"{i:02d} " + "y" * 99_997 for i in range(80)], "notes": [],
            "run": {"questions": []}}
    with caplog.at_level(logging.WARNING, logger="kohaku.report.html"):
        path = report_html.write_html(data, tmp_path / "big.html")
    assert 1_000_000 < path.stat().st_size < report_html.MAX_PAGE_BYTES
    back = page_data(path)
    assert back["notes"] == ["context blocks cut to 50000 characters to keep this page under 5 MB"]
    assert all(b.startswith(f"{i:02d} ") and b.endswith("[50000 more characters]")
               for i, b in enumerate(back["blocks"]))
    assert "context blocks cut to 50000 characters" in caplog.text


def test_a_sweep_report_that_cannot_be_written_is_a_warning(sweep_dir, tmp_path, monkeypatch, caplog):
    from kohaku.report.reports import write_reports

    def broken(*_args, **_kwargs):
        raise ValueError("no room")

    monkeypatch.setattr(report_html, "write_sweep_report", broken)
    with caplog.at_level(logging.WARNING, logger="kohaku.report.html"):
        paths = write_reports(sweep_dir, tmp_path / "rep")
    assert paths["leaderboard"].is_file() and "report_html" not in paths
    assert not (tmp_path / "rep" / "report.html").exists()
    assert "could not write report.html (ValueError: no room)" in caplog.text


def test_a_run_whose_artifacts_are_gone_still_gets_its_report(run_dir, tmp_path):
    run = tmp_path / "old-run"
    shutil.copytree(run_dir, run)
    record = json.loads((run / "run.json").read_text())
    for stage in ("retrieve", "infer"):
        record["stages"][stage]["path"] = str(tmp_path / "cleared" / stage)
    (run / "run.json").write_text(json.dumps(record))
    data = page_data(report_html.write_run_report(run))
    questions = data["run"]["questions"]
    assert len(questions) == 11 and all(q["contexts"] == [] and q["samples"] == [] for q in questions)
    assert questions[0]["voted"] is not None and questions[0]["class"] is not None  # vote, score: still there
    assert any("retrieve artifact 'contexts' not found" in n for n in data["notes"])
    assert any("infer artifact 'generations' not found" in n for n in data["notes"])


def test_gold_blocks_from_the_tasks_evidence_file(run_dir, tmp_path):
    """A task whose gold documents are in an evidence file (FinanceBench's task.gold.file) gets
    those documents' blocks marked too; an unreadable file is a note, the page still drawn."""
    before = {q["qid"]: q for q in page_data(run_dir / "report.html")["run"]["questions"]}
    q = before["q002"]
    other = next(doc for _, doc, gold in q["contexts"][0]["blocks"] if not gold)
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    (tmp_path / "evidence.csv").write_text(f"qid,doc\nq002,{other}\n")
    record = json.loads((run / "run.json").read_text())
    record["config"]["task"]["gold"] = {"file": "evidence.csv", "qid": "qid", "doc": "doc", "page": None}
    record["config"]["corpus"]["root"] = str(tmp_path)
    (run / "run.json").write_text(json.dumps(record))
    after = {q["qid"]: q for q in page_data(report_html.write_run_report(run))["run"]["questions"]}
    assert after["q002"]["gold"] == sorted(set(q["gold"]) | {other})
    marks = after["q002"]["contexts"][0]["blocks"]
    assert all(gold == (doc in after["q002"]["gold"]) for _, doc, gold in marks)
    assert any(doc == other for _, doc, _ in marks)
    assert after["q001"]["gold"] == before["q001"]["gold"]
    record["config"]["task"]["gold"]["file"] = "missing.csv"
    (run / "run.json").write_text(json.dumps(record))
    data = page_data(report_html.write_run_report(run))
    assert any(n.startswith("gold evidence file not read") and "missing.csv" in n for n in data["notes"])
    assert data["run"]["questions"][1]["gold"] == q["gold"]


# ---- a typed, page-cited task: the worked example (task=cited_pages) ---------------------------

TYPED = ["task=cited_pages", "corpus.questions=cited_pages/questions.csv",
         "corpus.solutions=cited_pages/answers.csv"]
WIDTH = 1400   # the reports must fit this window: no sideways scrolling


@pytest.fixture(scope="module")
def typed_sweep_dir(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("typed-sweep")
    rc, log = run_sweep(tmp, [*TYPED, "retrieve.top_k=1,4", "embed.dtype=float32"])
    assert rc == 0, log[-3000:]
    return tmp / "sweep"


@pytest.fixture(scope="module")
def typed_compare_html(typed_sweep_dir, tmp_path_factory) -> Path:
    """The sweep's first run (a run dir: contexts and samples) against a team's JSON document of
    the example, both scored with the task: flips on every kind, each side with its pages."""
    out = tmp_path_factory.mktemp("typed-compare") / "compare.html"
    run = next(p for p in sorted(typed_sweep_dir.glob("[0-9]")))
    sample = Path(__file__).resolve().parents[1] / "data" / "sample" / "cited_pages"
    assert load_script().main(["--task", "cited_pages", "--solutions", str(sample / "answers.csv"), f"run={run}",
                               f"team_b={sample / 'teams' / 'team_b.json'}", "--html", str(out), "--json",
                               str(out.with_suffix(".json")), "--resamples", "1000"]) == 0
    return out


def test_typed_run_report_splits_by_the_tasks_kinds_and_shows_pages(typed_sweep_dir):
    run = next(p for p in sorted(typed_sweep_dir.glob("[0-9]")))
    data = page_data(run / "report.html")["run"]
    table = pl.read_parquet(run / "scores.parquet")
    scores = json.loads((run / "scores.json").read_text())
    assert set(data["errors"]["by_kind"]) == {"number", "name", "names", "boolean"}
    assert data["errors"]["pages"] == scores["errors"]["pages"] and data["combine"] == "sum"
    qs = {q["qid"]: q for q in data["questions"]}
    assert {q: r["kind"] for q, r in qs.items()} == dict(zip(table["qid"], table["kind"]))
    for row in table.iter_rows(named=True):
        pages = qs[row["qid"]]["pages"]
        assert pages["class"] == row["page_class"]
        assert pages["cited"] == [[p, h] for p, h in zip(row["pages_cited"], row["pages_cited_hit"])]
        assert pages["pools"] == [[p, h] for p, h in zip(row["pages_pools"], row["pages_pools_hit"])]


def test_typed_sweep_leaderboard_has_the_typed_and_page_columns(typed_sweep_dir):
    """The sweep's error columns (comparison.csv, ablation.md) are the typed classes, with the page
    classes beside them, each point's counts those of its run's score table."""
    cells = pl.read_csv(typed_sweep_dir / "comparison.csv")
    assert {"answered_na", "needless_na", "flipped", "missing_names", "pages:all_pools",
            "pages:extra_pages", "pages:no_pools"} <= set(cells.columns)
    assert "wrong_text" in cells.columns and "wrong_ref" not in cells.columns   # not WattBot's classes
    for cell in cells.iter_rows(named=True):
        run = next(p for p in typed_sweep_dir.glob("[0-9]")
                   if f"retrieve.top_k={cell['retrieve.top_k']}" in json.loads((p / "run.json").read_text())["overrides"])
        table = pl.read_parquet(run / "scores.parquet")
        assert cell["answered_na"] == (table["error_class"] == "answered_na").sum()
        assert cell["pages:extra_pages"] == (table["page_class"] == "extra_pages").sum()
    md = (typed_sweep_dir / "ablation.md").read_text()
    assert "answered_na" in md and "pages:all_pools" in md
    kinds = page_data(typed_sweep_dir / "report.html")["sweep"]["kinds"]
    assert {k["label"].split(" · ")[1] for k in kinds} == {"number", "name", "names", "boolean"}


def test_typed_compare_flips_carry_kinds_and_pages(typed_compare_html):
    printed = json.loads(typed_compare_html.with_suffix(".json").read_text())
    assert set(printed["errors"]["run"]) >= {"answered_na", "needless_na", "pages:all_pools", "pages:no_pools"}
    assert printed["errors"]["team_b"]["flipped"] == 1 and printed["errors"]["team_b"]["answered_na"] == 1
    data = page_data(typed_compare_html)["compare"]
    assert {r["label"].split(" · ")[1] for r in data["kinds"]} == {"number", "name", "names", "boolean"}
    rows = printed["flips"]["run vs team_b"]
    assert {r["kind"] for r in rows} == {"number", "name", "names", "boolean"}
    for r in rows:
        for side in ("a", "b"):
            assert r[f"{side}_pages"]["class"] == r[f"{side}_page_class"]
    shown = data["flips"][0]["rows"]
    assert [r["kind"] for r in shown] == [r["kind"] for r in rows]
    assert all(r["b"]["pages"] == p["b_pages"] for r, p in zip(shown, rows))


def fits(driver) -> None:
    """No sideways scrolling at the window's width, and no element wider than the page."""
    width = driver.execute_script("return document.documentElement.clientWidth")
    assert width <= WIDTH and width > WIDTH - 40
    assert driver.execute_script("return document.documentElement.scrollWidth") <= width
    wide = driver.execute_script(
        "var w = document.documentElement.clientWidth; return Array.from(document.querySelectorAll('main *'))"
        ".filter(e => e.getBoundingClientRect().right > w + 1).map(e => e.tagName + '.' + e.className).slice(0, 5)")
    assert wide == []


def test_typed_reports_fit_1400px_with_the_kind_split_and_pages(browser, typed_sweep_dir, typed_compare_html, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    run = next(p for p in sorted(typed_sweep_dir.glob("[0-9]")))
    browser.set_window_size(WIDTH, 900)
    try:
        open_page(browser, run / "report.html")
        fits(browser)
        heads = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#class-table thead th")]
        assert {"kind: number", "kind: name", "kind: names", "kind: boolean"} <= set(heads)
        assert "cited pages vs gold" in [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#qtable thead th")]
        assert browser.find_elements(By.CSS_SELECTOR, "#page-table tr.page-row")
        assert browser.find_elements(By.CSS_SELECTOR, "#qtable td.pages-cell .pg.hit")
        # the component bars fit their card, on this summed score (points) too
        bars = browser.execute_script("return Array.from(document.querySelectorAll('#components .bar'))"
                                      ".map(b => b.getBoundingClientRect().width)")
        assert bars and max(bars) <= 120 and min(bars) > 0
        card = browser.execute_script("var c = document.querySelector('#components').closest('.card');"
                                      "return [c.scrollWidth, c.clientWidth]")
        assert card[0] <= card[1]
        table = pl.read_parquet(run / "scores.parquet")
        Select(browser.find_element(By.ID, "page-filter")).select_by_value("all_pools")
        assert visible_rows(browser) == table.filter(pl.col("page_class") == "all_pools")["qid"].to_list()
        Select(browser.find_element(By.ID, "page-filter")).select_by_value("")
        browser.find_element(By.CSS_SELECTOR, "#qtable tr.q").click()
        fits(browser)
        shot(browser, tmp_path, "typed-run")
        no_console_errors(browser)

        open_page(browser, typed_sweep_dir / "report.html")
        fits(browser)
        assert browser.find_elements(By.CSS_SELECTOR, "#kind-table tr.point-row")
        assert browser.find_elements(By.CSS_SELECTOR, "#page-table td[data-class='pages:all_pools']")
        shot(browser, tmp_path, "typed-sweep")
        no_console_errors(browser)

        open_page(browser, typed_compare_html)
        fits(browser)
        labels = [td.text for td in browser.find_elements(By.CSS_SELECTOR, "#kind-table tr.point-row td:first-child")]
        assert {label.split(" · ")[1] for label in labels} == {"number", "name", "names", "boolean"}
        assert browser.find_elements(By.CSS_SELECTOR, "#page-table tr.point-row")
        flips = browser.find_elements(By.CSS_SELECTOR, "#flip-list-0 .flip")
        assert flips and all(len(f.find_elements(By.CSS_SELECTOR, ".side .pages")) == 2 for f in flips)
        shot(browser, tmp_path, "typed-compare")
        no_console_errors(browser)
    finally:
        browser.set_window_size(1280, 900)


def shot(driver, tmp_path: Path, name: str) -> Path:
    """A screenshot of the page at the window's width (KOHAKU_REPORT_SHOTS: a copy there too)."""
    out = tmp_path / f"{name}.png"
    driver.execute_script("window.scrollTo(0, 0)")
    assert driver.save_screenshot(str(out)) and out.stat().st_size > 10_000
    if os.environ.get("KOHAKU_REPORT_SHOTS"):
        Path(os.environ["KOHAKU_REPORT_SHOTS"]).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out, Path(os.environ["KOHAKU_REPORT_SHOTS"]) / out.name)
    return out
