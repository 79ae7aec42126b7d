"""A scripted backend for plumbing tests: deterministic outputs, counted calls, no model.

The output of a sample is a function of (request, sample seed): by default

- a planner request (schema with a ``queries`` property) gets ``{"queries": [...]}`` made of the
  question's longest words;
- an answer request (schema with ``answer_value``) gets an answer that cites the first
  document of the schema's ref_id choices found in the prompt (else the first
  ``[ref_id=...]`` marker) and takes the first number of the context as its value, or
  ``is_blank`` when the context has no document;
- a request whose last message carries images (the caption stage) gets a caption made from
  the SHA-256 of the first image's bytes (same image, same caption; no model reads it);
- a judge's verdict request (a schema with ``correct``) gets ``{"correct": true}``;
- another task's answer request (a schema with a string property, a prompt with ``Question:``)
  gets every field filled by its type (kohaku.tasks); a field of an answer kind (``anyOf`` its
  type and the not-answerable token, kohaku.tasks.kinds) gets its type's value: the context's
  first number, ``true``, a list of one name, the context's first ISO date, or the token where
  the context has no number or date;
- anything else gets a JSON echo of the last message's length.

Tests pass their own ``responder(request, sample_seed) -> str`` to script other behaviour.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import time
from dataclasses import dataclass
from typing import Any, Callable

from kohaku.core.config import build
from kohaku.llm.base import ChatRequest, Completion, content_images, content_text, identity_of
from kohaku.core.tokens import count_tokens

Responder = Callable[[ChatRequest, int], str]

_REF = re.compile(r"\[ref_id=([^\]\s]+)\]")
_NUM = re.compile(r"(?<![\w.])\d+(?:\.\d+)?")
_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")


@dataclass
class FakeConfig:
    name: str                       # the option's label (conf/llm/fake.yaml)
    backend: str                    # fake
    model: str = "fake"             # a label only: no model is loaded
    revision: str = "0"             # a label only
    script: str = "default"       # default: the behaviour described in kohaku/llm/fake.py
    max_context: int = 8192       # tokens (counted with kohaku.core.tokens)


def _cited(req: ChatRequest, text: str) -> list[str]:
    """The documents the fake can cite: the schema's ref_id choices (``infer.ref_enum``) that
    appear in the prompt, whatever the context's block format; without choices, the ids of
    ``[ref_id=...]`` markers (the default block format)."""
    items = (((req.json_schema or {}).get("properties") or {}).get("ref_id") or {}).get("items") or {}
    choices = items.get("enum")
    if choices:
        return [d for d in choices if d in text]
    return _REF.findall(text)


def image_sha256(url: str) -> str:
    """SHA-256 of the bytes of a ``data:...;base64,`` URL ("" for any other URL)."""
    head, _, data = url.partition(",")
    if not head.startswith("data:") or ";base64" not in head:
        return ""
    return hashlib.sha256(base64.b64decode(data)).hexdigest()


def fake_caption(sha: str) -> str:
    """The fake backend's caption of an image with hash ``sha``: deterministic, no values."""
    return (f"A chart from the document (fake caption of image {sha[:16]}). The fake backend "
            f"reads no values; use a vision-language model for real captions.")


def default_responder(req: ChatRequest, seed: int) -> str:
    content = req.messages[-1]["content"] if req.messages else ""
    images = content_images(content)
    if images:
        return fake_caption(image_sha256(images[0]))
    text = content_text(content)
    props = (req.json_schema or {}).get("properties", {})
    if "queries" in props:
        m = re.search(r"Question:\s*(.+)", text)
        q = (m.group(1) if m else text).strip()
        words = sorted({w for w in re.findall(r"[A-Za-z][\w-]{3,}", q)}, key=lambda w: (-len(w), w))
        return json.dumps({"queries": [" ".join(words[:4]), " ".join(words[4:8])]})
    if "answer_value" in props:
        refs = _cited(req, text)
        if not refs:
            return json.dumps({"explanation": "no context", "answer": "is_blank",
                               "answer_value": "is_blank", "ref_id": []})
        body = text.split("Question:")[0] if "Question:" in text else text
        for ref in refs:  # document ids are not values
            body = body.replace(ref, " ")
        nums = _NUM.findall(body)
        value = nums[0] if nums else "is_blank"
        return json.dumps({"explanation": f"from {refs[0]} (seed {seed})", "answer": value,
                           "answer_value": value, "ref_id": [refs[0]]})
    if "correct" in props:    # an LLM judge's verdict (kohaku.tasks.score.judge): always "correct"
        return json.dumps({"correct": True})
    if any(p.get("type") == "string" or "anyOf" in p for p in props.values()) and "Question:" in text:
        return _task_answer(req, text, props, seed)
    return json.dumps({"length": len(text), "seed": seed})


def _task_answer(req: ChatRequest, text: str, props: dict[str, Any], seed: int) -> str:
    """Another task's answer schema (kohaku.tasks): every field filled by its type, text fields
    with the context's first number (its first words when it has none), refs with the first
    citable document, choice fields with their first value."""
    ref_names = [n for n, p in props.items() if p.get("type") == "array" and (p.get("items") or {}).get("enum")]
    refs = _cited(req, text) if not ref_names else [
        d for d in props[ref_names[0]]["items"]["enum"] if d in text]
    body = text.split("Question:")[0]
    for ref in refs:
        body = body.replace(ref, " ")
    nums = _NUM.findall(body)
    words = re.findall(r"[A-Za-z]{3,}", body)
    value = nums[0] if nums else " ".join(words[:3])
    out: dict[str, Any] = {}
    for name, prop in props.items():
        token = None
        if "anyOf" in prop:   # an answer kind: its type, or the not-answerable token
            token = next((b["enum"][0] for b in prop["anyOf"] if b.get("enum")), None)
            prop = prop["anyOf"][0]
        kind = prop.get("type")
        if kind == "number" and not nums and token is not None:
            out[name] = token
            continue
        if "pattern" in prop:      # a date (YYYY-MM-DD)
            dates = _DATE.findall(body)
            out[name] = dates[0] if dates or token is None else token
            if not dates and token is None:
                out[name] = "2000-01-01"
            continue
        if kind == "array":
            out[name] = refs[:1] if "enum" in (prop.get("items") or {}) or name in ref_names else [
                value[: (prop.get("items") or {}).get("maxLength", len(value))]]
        elif kind == "number":
            out[name] = float(nums[0]) if nums else 0.0
        elif kind == "boolean":
            out[name] = True
        elif "enum" in prop:
            out[name] = prop["enum"][0]
        elif name == "explanation":
            out[name] = f"from {refs[0] if refs else 'the context'} (seed {seed})"
        else:
            out[name] = value[: prop.get("maxLength", len(value))]
    return json.dumps(out)


def config_identity(llm_cfg: dict[str, Any]) -> str:
    """The backend's identity (kohaku.llm.base.backend_identity): identity_of, whose
    ``llm.revision`` (conf/llm/fake.yaml) is the fake's decoder version: bump it when the
    default script answers differently, so its artifacts and cached samples are not reused."""
    return identity_of(llm_cfg)


class FakeBackend:
    """Deterministic backend; ``calls`` holds the request lists of every generate call."""

    def __init__(self, responder: Responder | None = None, *, name: str = "fake",
                 max_context: int = 8192, identity: str | None = None):
        self.responder = responder or default_responder
        self.name = name
        self._max_context = max_context
        self._identity = identity or f"fake:{name}@0"
        self.calls: list[list[ChatRequest]] = []
        self.closed = False

    @classmethod
    def from_config(cls, llm_cfg: dict[str, Any]) -> "FakeBackend":
        cfg = build(FakeConfig, llm_cfg, "llm")
        if cfg.script != "default":
            from kohaku.core.config import ConfigError

            raise ConfigError(f"llm.script={cfg.script!r}: the fake backend knows only 'default'")
        return cls(name=cfg.name, max_context=cfg.max_context, identity=config_identity(llm_cfg))

    @property
    def identity(self) -> str:
        return self._identity

    @property
    def max_context(self) -> int:
        return self._max_context

    def count_tokens(self, text: str) -> int:
        return count_tokens(text)

    @property
    def n_requests(self) -> int:
        return sum(len(c) for c in self.calls)

    def generate(self, requests: list[ChatRequest]) -> list[Completion]:
        self.calls.append(list(requests))
        out = []
        for r in requests:
            t0 = time.perf_counter()
            texts = [self.responder(r, r.seed + k) for k in range(r.n)]
            ptoks = sum(count_tokens(content_text(m.get("content"))) for m in r.messages)
            ctoks = [min(count_tokens(t), r.max_tokens) for t in texts]
            out.append(Completion(texts=texts, prompt_tokens=ptoks, completion_tokens=ctoks,
                                  finish_reasons=["stop"] * r.n, seconds=time.perf_counter() - t0))
        return out

    def close(self) -> None:
        self.closed = True
