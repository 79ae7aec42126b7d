"""The caption stage (kohaku/ingest/captioning.py) and figures in the tree: fake captions from the image
hash, the generation cache (a second run makes no model call, a new prompt recaptions), the
OpenAI-compatible backend over HTTP (the PNG really travels as an image_url part), figure
paragraphs in the right section, and caption=none leaving the tree as it is."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import polars as pl
import pytest

from conftest import compose
from helpers_http import LocalServer, chat_completion
from kohaku.ingest.captioning import CAPTIONS_SCHEMA, CaptionConfig, caption_figures, figure_blocks
from kohaku.ingest.corpus import read_metadata
from kohaku.llm import Counters, load_backend
from kohaku.llm.cache import GenerationCache
from kohaku.llm.fake import FakeBackend, fake_caption
from kohaku.ingest.parsing import ParseConfig, read_corpus
from kohaku.runner.pipeline import run_pipeline
from kohaku.ingest.tree import TreeConfig, build_tree

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample"


@pytest.fixture(scope="module")
def parsed():
    return read_corpus(SAMPLE, read_metadata(SAMPLE / "metadata_figures.csv"), ParseConfig(workers=1))


def _fake_cfg(**over) -> CaptionConfig:
    return CaptionConfig(llm={"name": "fake_vlm", "backend": "fake", "model": "fake-vlm"}, **over)


def test_fake_captions_come_from_the_image_hash_in_one_call(parsed, tmp_path):
    _, _, figures = parsed
    backend = FakeBackend(identity="fake:fake-vlm@0")
    counters = Counters()
    captions = caption_figures(figures, backend, None, _fake_cfg(), counters)
    assert captions.schema == pl.Schema(CAPTIONS_SCHEMA)
    assert captions["sha256"].to_list() == sorted(figures["sha256"].to_list())
    assert captions["text"].to_list() == [fake_caption(s) for s in captions["sha256"].to_list()]
    assert captions["model"].unique().to_list() == ["fake:fake-vlm@0"]
    assert counters.model_calls == 1 and len(backend.calls) == 1 and len(backend.calls[0]) == 2
    # the request: the prompt, then the PNG itself as a data URL
    part = backend.calls[0][0].messages[0]["content"]
    assert part[0] == {"type": "text", "text": CaptionConfig().prompt}
    url = part[1]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert hashlib.sha256(base64.b64decode(url.split(",", 1)[1])).hexdigest() == captions["sha256"][0]


def test_generation_cache_captions_once_and_a_new_prompt_recaptions(parsed, tmp_path):
    _, _, figures = parsed
    backend = FakeBackend(identity="fake:fake-vlm@0")
    cache = GenerationCache(tmp_path, backend.identity)
    first, second, third = Counters(), Counters(), Counters()
    a = caption_figures(figures, backend, cache, _fake_cfg(), first)
    b = caption_figures(figures, backend, GenerationCache(tmp_path, backend.identity), _fake_cfg(), second)
    assert (first.model_calls, first.cache_hits) == (1, 0)
    assert (second.model_calls, second.cache_hits) == (0, 2) and len(backend.calls) == 1
    assert a["text"].to_list() == b["text"].to_list() and b["cached"].to_list() == [True, True]
    caption_figures(figures, backend, cache, _fake_cfg(prompt="Read every bar of this chart."), third)
    assert (third.model_calls, third.prompts, third.cache_hits) == (1, 2, 0)
    assert backend.calls[-1][0].messages[0]["content"][0]["text"] == "Read every bar of this chart."


def test_openai_backend_sends_the_png_as_an_image_url_part(parsed, monkeypatch):
    _, _, figures = parsed
    wanted = set(figures["sha256"].to_list())
    seen: list[str] = []

    def respond(path, headers, body):
        (message,) = body["messages"]
        text, image = message["content"]
        assert text["type"] == "text" and "axes" in text["text"]
        assert image["type"] == "image_url"
        head, data = image["image_url"]["url"].split(",", 1)
        assert head == "data:image/png;base64"
        png = base64.b64decode(data)
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        sha = hashlib.sha256(png).hexdigest()
        seen.append(sha)
        assert "response_format" not in body
        return 200, chat_completion([f"A bar chart; image {sha[:8]}."], model=body["model"]), {}

    with LocalServer(respond) as srv:
        monkeypatch.setenv("KOHAKU_TEST_VLM_URL", srv.url)
        monkeypatch.setenv("KOHAKU_TEST_KEY", "k")
        llm = {"name": "openai_vlm", "backend": "openai", "model": "local-vlm", "base_url_env": "KOHAKU_TEST_VLM_URL",
               "api_key_env": "KOHAKU_TEST_KEY", "max_context": 8192, "json_mode": "none", "progress": False,
               "max_retries": 0}
        cfg = CaptionConfig(llm=llm)
        captions = caption_figures(figures, load_backend(llm), None, cfg, Counters())
    assert sorted(seen) == sorted(wanted)
    assert captions["text"].to_list() == [f"A bar chart; image {s[:8]}." for s in captions["sha256"].to_list()]


def test_figure_paragraphs_land_after_the_paragraph_they_follow(parsed):
    docs, blocks, figures = parsed
    captions = caption_figures(figures, FakeBackend(identity="fake:v@0"), None, _fake_cfg(), Counters())
    fig_blocks = figure_blocks(figures, captions)
    nodes = build_tree(docs, blocks, TreeConfig(), figures=fig_blocks)
    paras = nodes.filter((pl.col("doc_id") == "chen2024") & (pl.col("level") == 2))
    figs = paras.filter(pl.col("block_kind") == "figure")
    assert figs["node_id"].to_list() == ["chen2024#s4.p2", "chen2024#s4.p4"]
    assert figs["section"].to_list() == ["3 Results", "3 Results"] and figs["page"].to_list() == [2, 2]
    text = figs["text"].to_list()
    assert text[0].startswith("[Figure, page 2] Figure 1: Energy per chat request by accelerator type (Wh)")
    assert text[1].startswith("[Figure, page 2] Figure 2: Make-up water of the cooling towers")
    assert fake_caption(figures["sha256"][0]) in text[0]
    after = dict(zip(paras["node_id"].to_list(), paras["text"].to_list()))
    assert after["chen2024#s4.p1"].startswith("The newest accelerator type")
    assert after["chen2024#s4.p3"].startswith("Water use follows")
    sentences = nodes.filter((pl.col("parent_id") == "chen2024#s4.p2"))
    assert sentences.height >= 2 and set(sentences["block_kind"]) == {"figure"}
    # without captions the tree is the text's tree, node for node
    plain = build_tree(docs, blocks, TreeConfig())
    empty = figure_blocks(figures, pl.DataFrame(schema=CAPTIONS_SCHEMA))
    assert empty.height == 0
    assert build_tree(docs, blocks, TreeConfig(), figures=empty).equals(plain)
    # a captioned figure stands for its caption paragraph and the labels drawn as text in its box
    plain_paras = plain.filter((pl.col("doc_id") == "chen2024") & (pl.col("level") == 2))["text"].to_list()
    gone = [t for t in plain_paras if t not in paras["text"].to_list()]
    assert gone == ["Figure 1: Energy per chat request by accelerator type (Wh), measured on the Harbour cluster.",
                    "0 Q1 Q2 Q3 Q4",
                    "Figure 2: Make-up water of the cooling towers per quarter of 2023 (cubic metres)."]
    assert figures["replaces_orders"].to_list()[0] == [figures["after_order"][0] + 1]
    assert not any("Figure 1:" in t and not t.startswith("[Figure") for t in paras["text"].to_list())


def _run(tmp_path: Path, name: str, *overrides: str):
    cfg = compose(["corpus=sample_figures", f"cache.dir={tmp_path / 'cache'}", "stages=[parse,tree]",
                   *overrides])
    return run_pipeline(cfg, tmp_path / name)


def test_pipeline_caption_fake_then_cache_then_new_prompt(tmp_path):
    r1 = _run(tmp_path, "r1", "caption=fake")
    s = r1.summary("caption")
    assert s["enabled"] and s["n_captions"] == 2 and s["model_calls"] == 1
    assert r1.summary("tree")["n_figure_paragraphs"] == 2
    r2 = _run(tmp_path, "r2", "caption=fake", "force=[caption]")
    assert r2.summary("caption")["model_calls"] == 0 and r2.summary("caption")["cache_hits"] == 2
    assert r2.stages["tree"].key == r1.stages["tree"].key   # same captions, same tree key
    r3 = _run(tmp_path, "r3", "caption=fake", "caption.prompt=List every value of the chart.")
    assert r3.summary("caption")["model_calls"] == 1 and r3.summary("caption")["cache_hits"] == 0
    r0 = _run(tmp_path, "r0")
    assert r0.summary("caption") == {"enabled": False, "n_figures": 2, "n_captions": 0}
    assert r0.summary("tree")["n_figure_paragraphs"] == 0
    nodes = pl.read_parquet(Path(r0.stages["tree"].path) / "nodes.parquet")
    docs, blocks, _ = read_corpus(SAMPLE, read_metadata(SAMPLE / "metadata_figures.csv"), ParseConfig())
    assert nodes.equals(build_tree(docs, blocks, TreeConfig()))
    run = json.loads((tmp_path / "r1" / "run.json").read_text())
    assert list(run["stages"]) == ["parse", "caption", "tree"]


def test_caption_config_validation():
    from kohaku.core.config import ConfigError, build

    with pytest.raises(ConfigError, match="caption: llm has no 'backend'"):
        build(CaptionConfig, {"llm": {"model": "x"}}, "caption")
    with pytest.raises(ConfigError, match="prompt is empty"):
        build(CaptionConfig, {"prompt": " "}, "caption")
    assert not build(CaptionConfig, {}, "caption").enabled


VLLM_PYTHON = Path(__file__).resolve().parents[1] / ".venv-vllm" / "bin" / "python"
_VLLM_CHECK = r"""
import hashlib, json, sys
from vllm.multimodal.utils import fetch_image
from vllm.renderers.chat_utils import _parse_chat_message_content_mm_part
out = []
for messages in json.loads(sys.stdin.read()):
    (message,) = messages
    parts = [_parse_chat_message_content_mm_part(p) for p in message["content"]]
    (kind, url), = [p for p in parts if p[0] != "text"]
    image = fetch_image(url).convert("RGB")
    out.append({"types": [p[0] for p in parts], "size": list(image.size),
                "pixels": hashlib.sha256(image.tobytes()).hexdigest()})
print("RESULT " + json.dumps(out))
"""


@pytest.mark.skipif(not VLLM_PYTHON.exists(), reason="no vllm install in .venv-vllm")
def test_caption_requests_are_vllm_multimodal_chat_input(parsed):
    """vLLM's own chat parser and image loader read the caption requests: an image_url part per
    request whose pixels are the figure's."""
    import io
    import subprocess

    from PIL import Image

    from kohaku.ingest.captioning import caption_requests

    _, _, figures = parsed
    shas, requests = caption_requests(figures, CaptionConfig())
    proc = subprocess.run([str(VLLM_PYTHON), "-c", _VLLM_CHECK], input=json.dumps([r.messages for r in requests]),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.split("RESULT ", 1)[1])
    image_of = dict(zip(figures["sha256"].to_list(), figures["image"].to_list()))
    for sha, got in zip(shas, result):
        image = Image.open(io.BytesIO(image_of[sha])).convert("RGB")
        assert got["types"] == ["text", "image_url"]
        assert got["size"] == list(image.size)
        assert got["pixels"] == hashlib.sha256(image.tobytes()).hexdigest()


def test_the_chart_question_retrieves_the_figure_within_2000_tokens(tmp_path):
    """q012 of corpus=sample_figures is answered only by the bar chart: with fake captions the
    figure paragraph (its caption line and description) is in q012's first context."""
    cfg = compose(["corpus=sample_figures", "caption=fake", f"cache.dir={tmp_path / 'cache'}",
                   "stages=[retrieve]", "retrieve.max_context_tokens=2000"])
    result = run_pipeline(cfg, tmp_path / "run")
    contexts = pl.read_parquet(Path(result.stages["retrieve"].path) / "contexts.parquet")
    first = contexts.filter((pl.col("qid") == "q012") & (pl.col("attempt") == 0)).row(0, named=True)
    assert first["n_tokens"] <= 2000
    # the figure paragraph, one of its sentences, or its section (the tree dedup keeps the parent)
    assert any(n in ("chen2024#s4", "chen2024#s4.p2") or n.startswith("chen2024#s4.p2.")
               for n in first["node_ids"]), first["node_ids"]
    assert "[Figure, page 2] Figure 1: Energy per chat request" in first["context"]
    # with captions off the chart's numbers are nowhere: no figure paragraph can be retrieved
    plain = run_pipeline(compose(["corpus=sample_figures", f"cache.dir={tmp_path / 'cache'}", "stages=[retrieve]",
                                  "retrieve.max_context_tokens=2000"]), tmp_path / "plain")
    ctx = pl.read_parquet(Path(plain.stages["retrieve"].path) / "contexts.parquet")
    assert "[Figure" not in " ".join(ctx["context"].to_list())


def _png(color: str, size=(60, 40)) -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def test_an_images_folder_corpus(tmp_path):
    """images/<doc_id>/*.png|jpg: figures of a document with text (after its text) or of a
    document given only as images; images/captions.csv gives caption lines; an unreadable file
    and a folder without metadata are named, not fatal."""
    import io

    from PIL import Image

    from kohaku.ingest.corpus import CorpusConfig
    from kohaku.ingest.parsing import corpus_files

    root = tmp_path / "corpus"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "alpha.md").write_text("# Alpha report\n\nThe cluster used 12 MWh in 2023.\n")
    (root / "metadata.csv").write_text("id,type,title,year,citation,url\n"
                                       "alpha,report,Alpha report,2023,A,u\nbeta,report,Beta charts,2024,B,u\n")
    for doc, name, data in (("alpha", "fig1.png", _png("red")), ("beta", "chart.png", _png("blue")),
                            ("gamma", "x.png", _png("green")), ("alpha", "broken.png", b"not an image")):
        (root / "images" / doc).mkdir(parents=True, exist_ok=True)
        (root / "images" / doc / name).write_bytes(data)
    jpg = io.BytesIO()
    Image.new("RGB", (50, 30), "yellow").save(jpg, format="JPEG")
    (root / "images" / "alpha" / "fig2.jpg").write_bytes(jpg.getvalue())
    (root / "images" / "captions.csv").write_text("file,caption\nalpha/fig1.png,Figure 1: Energy by year.\n")

    docs, blocks, figures = read_corpus(root, read_metadata(root / "metadata.csv"), ParseConfig(workers=1))
    by_doc = {r["doc_id"]: r for r in docs.iter_rows(named=True)}
    assert by_doc["beta"]["status"] == "ok" and by_doc["beta"]["format"] == "images"
    assert by_doc["gamma"]["status"] == "error" and "no row in metadata.csv" in by_doc["gamma"]["error"]
    assert by_doc["alpha"]["status"] == "warning"
    assert any("images/alpha/broken.png: cannot read the image" in w for w in by_doc["alpha"]["warnings"])
    got = [(r["doc_id"], r["figure"], r["source"], r["caption"], r["after_order"]) for r in figures.iter_rows(named=True)]
    n_alpha = blocks.filter(pl.col("doc_id") == "alpha").height
    assert got == [("alpha", 1, "file", "Figure 1: Energy by year.", n_alpha - 1),
                   ("alpha", 2, "file", "", n_alpha - 1), ("beta", 1, "file", "", -1)]
    assert figures["image"][1][:8] == b"\x89PNG\r\n\x1a\n"  # the JPEG, as PNG
    assert figures["sha256"][0] == hashlib.sha256(_png("red")).hexdigest()
    captions = caption_figures(figures, FakeBackend(identity="fake:v@0"), None, _fake_cfg(), Counters())
    nodes = build_tree(docs, blocks, TreeConfig(), figures=figure_blocks(figures, captions))
    paras = nodes.filter(pl.col("level") == 2)
    alpha = paras.filter(pl.col("doc_id") == "alpha")["text"].to_list()
    assert alpha[0].startswith("The cluster used 12 MWh") and alpha[1].startswith("[Figure] Figure 1: Energy by year.")
    beta = paras.filter(pl.col("doc_id") == "beta")
    assert beta.height == 1 and beta["block_kind"][0] == "figure" and beta["text"][0].startswith("[Figure] ")
    # image files are inputs of the parse stage's cache key
    files = corpus_files(CorpusConfig(root=str(root), questions=None, solutions=None), ParseConfig())
    assert root / "images" / "beta" / "chart.png" in files and root / "images" / "captions.csv" in files


def test_the_image_resolution_is_part_of_the_caption_identity():
    from kohaku.llm.base import identity_of

    base = {"backend": "vllm", "model": "Qwen/Qwen2.5-VL-7B-Instruct", "revision": None,
            "engine_kwargs": {"limit_mm_per_prompt": {"image": 1}, "mm_processor_kwargs": {"max_pixels": 1605632}}}
    smaller = {**base, "engine_kwargs": {**base["engine_kwargs"], "mm_processor_kwargs": {"max_pixels": 401408}}}
    assert identity_of(base) != identity_of(smaller)
    assert identity_of(base).startswith("vllm:Qwen/Qwen2.5-VL-7B-Instruct@main#mm-")
    # a text model's identity is unchanged (its answers stay in the generation cache)
    assert identity_of({"backend": "vllm", "model": "m", "engine_kwargs": {}}) == "vllm:m@main"
