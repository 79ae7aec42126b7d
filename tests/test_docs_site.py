"""The documentation site (mkdocs.yml): it builds with --strict, and its search works offline
(the site served from this machine, as `mkdocs serve` or `python -m http.server` serve it; no
request leaves it), finding what newcomers looked for by grep (a config key, the page-pool
format, a metric's parameter, an error message). Skips where mkdocs (the dev extra) or Chromium
(scripts/setup_browser.sh) is not installed; scripts/test.sh builds the site either way."""

from __future__ import annotations

import functools
import http.server
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from test_report_html import browser  # noqa: F401 - the headless Chromium fixture

REPO = Path(__file__).resolve().parents[1]
MKDOCS = Path(sys.executable).parent / "mkdocs"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    if not MKDOCS.is_file():
        pytest.skip(f"{MKDOCS} not installed (the dev extra: bash scripts/setup.sh)")
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run([str(MKDOCS), "build", "--strict", "--site-dir", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_the_readme_is_short_and_its_links_resolve():
    """The README is a page a newcomer reads in minutes (issue 49: <= 200 lines); the rest is
    the site, and every docs/ page it points at exists."""
    import re

    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    links = re.findall(r"\]\((docs/[^)#]+)", text)
    assert len(links) >= 15 and [link for link in links if not (REPO / link).is_file()] == []


def test_the_site_builds_with_every_page_and_no_web_font(site):
    for page in ("index.html", "getting-started/index.html", "tutorials/end-to-end/index.html",
                 "reference/config/index.html", "reference/errors/index.html",
                 "reference/formats/index.html", "search/search_index.json"):
        assert (site / page).is_file(), page
    html = (site / "index.html").read_text(encoding="utf-8")
    assert "fonts.googleapis" not in html and "fonts.gstatic" not in html


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:   # no request lines in the test output
        pass


@pytest.fixture(scope="module")
def served(site):
    """The built site on 127.0.0.1 (a free port), as a user serves it; its base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        thread.join(timeout=10)


def search(driver, base: str, words: str, timeout_s: float = 60.0, settle_s: float = 0.5) -> list[str]:
    """The result links of the site's search for ``words``, as ``path#fragment``.

    The search runs on every keystroke, so the first results shown may be those of a prefix of
    ``words``; the list is read once it has stayed the same for ``settle_s`` seconds after the
    last key. ``timeout_s`` is generous: on a loaded machine the search worker builds its index
    slowly, which is not what these tests check."""
    from selenium.webdriver.common.by import By

    driver.get(base)
    box = driver.find_element(By.CSS_SELECTOR, "input.md-search__input")
    box.send_keys(words)
    started = time.perf_counter()
    seen: list[str] = []
    since = started
    while True:
        links = [urlsplit(a.get_attribute("href")) for a in
                 driver.find_elements(By.CSS_SELECTOR, ".md-search-result__list a")]
        now = [u.path + (f"#{u.fragment}" if u.fragment else "") for u in links]
        if now != seen:
            seen, since = now, time.perf_counter()
        elif seen and time.perf_counter() - since >= settle_s:
            return seen
        assert time.perf_counter() - started < timeout_s, f"no search result for {words!r}"
        time.sleep(0.1)


@pytest.mark.parametrize("words, page", [
    ("restrict_column", "/reference/config/#retrieve-restrict_column"),
    ("pools", "/reference/formats/#cited-pages-and-page-pools"),
    ("params.average", "/reference/functions/#metric-na_f1"),
    ("unknown key", "/reference/errors/#configerror"),
])
def test_search_finds_it_offline(browser, served, words, page):  # noqa: F811 - the fixture
    links = search(browser, served, words)
    assert page in links, links
    # nothing failed to load (a font or script from the network would, here)
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []


#: (config key, the page that defines it, a word inside its name): each found by its full dotted
#: name, by its last part and by that word (issue 57: words split at _ and . too: mkdocs.yml's
#: search separator). score.unanswered is a task key (task.score.unanswered) whose last part is
#: its only word.
KEYS = [
    ("parse.doc_timeout_s", "/reference/config/", "timeout"),
    ("retrieve.restrict_column", "/reference/config/", "restrict"),
    ("score.unanswered", "/reference/task/", "unanswered"),
    ("infer.max_retries", "/reference/config/", "retries"),
    ("embed.cpu_fallback", "/reference/config/", "fallback"),
    ("embed.batch_size", "/reference/config/", "batch"),
    ("retrieve.max_context_tokens", "/reference/config/", "context"),
    ("retrieve.evidence.term_weight", "/reference/config/", "evidence"),
    ("cache.locking", "/reference/config/", "locking"),
    ("tree.max_paragraph_chars", "/reference/config/", "paragraph"),
    ("index.ef_construction", "/reference/config/", "construction"),
    ("planner.n_queries", "/reference/config/", "queries"),
    ("vote.ignore_blank", "/reference/config/", "ignore"),
    ("llm.gpu_memory_utilization", "/reference/config/", "utilization"),
    ("run.ray_address", "/reference/config/", "address"),
    ("report.bootstrap_seed", "/reference/config/", "bootstrap"),
    ("parse.ocr.min_wordlike", "/reference/config/", "wordlike"),
    ("reranker.max_passage_chars", "/reference/config/", "passage"),
    ("embed.truncate_dim", "/reference/config/", "truncate"),
    ("submission.page_base", "/reference/task/", "base"),
]


def _first_pages(links: list[str], n: int = 5) -> list[str]:
    """The first ``n`` distinct pages among the result links (a page's sections follow it)."""
    return list(dict.fromkeys(link.partition("#")[0] for link in links))[:n]


@pytest.mark.parametrize("key, page, word", KEYS, ids=[k for k, _, _ in KEYS])
def test_search_finds_a_config_key_by_any_part_of_its_name(browser, served, key, page, word):  # noqa: F811
    assert len(KEYS) == 20 and word in key
    for words in (key, key.rsplit(".", 1)[1], word):
        pages = _first_pages(search(browser, served, words))
        assert page in pages, f"{words!r}: {pages}"


@pytest.mark.parametrize("words", ["parse.doc_timeout_s", "doc_timeout_s", "timeout", "doc"])
def test_search_finds_the_reference_and_the_guide_of_a_key(browser, served, words):  # noqa: F811
    """A key's parts find both the page that defines it and the guide that explains it (issue
    57: `timeout` found neither)."""
    pages = _first_pages(search(browser, served, words))
    assert "/reference/config/" in pages and "/guides/faults-and-limits/" in pages, pages


@pytest.mark.parametrize("words, page", [("unknown key", "/troubleshooting/"), ("troubleshooting", "/troubleshooting/"),
                                         ("glossary", "/concepts/"), ("llm=vllm_qwen2_5_7b", "/reference/config/"),
                                         ("pipeline diagram", "/reference/pipeline/"),
                                         # newcomers' questions as typed (the glossary's terms
                                         # are headings, so each is a search section of its own)
                                         ("what is a pool", "/concepts/"),
                                         ("why did my run abstain", "/troubleshooting/"),
                                         ("how to add my own metric", "/examples/custom-metric/"),
                                         ("compare two runs", "/tutorials/scoring-and-comparing/")])
def test_search_finds_the_new_pages(browser, served, words, page):  # noqa: F811
    assert page in _first_pages(search(browser, served, words))
