"""Answering: prompts, the JSON answer schema, context fitting, parsing and the retry rounds.

Round 0 sends the prompts of all questions (attempt-0 contexts) in one batched backend call.
Round ``a`` (up to ``max_retries``) sends, again in one call, the questions whose samples were
all blank in round ``a-1``, with their attempt-``a`` contexts (retrieval builds attempt ``a``
with ``k * (a + 1)``). Every sample goes through the generation cache, so changing voting
settings never calls a model and an interrupted run resumes.

Each sample is parsed as JSON only (``json.loads`` of the first ``{...}`` object; never eval).
Reference ids that are not among the context's documents are dropped and counted; a sample is
blank when its answer_value is a blank token or it keeps no reference. With ``ref_enum`` the
JSON schema itself restricts ref_id to the context's documents.

A context longer than the model allows (``max_context - max_tokens - prompt overhead``) is
trimmed from its lowest-ranked block (the contexts table carries its blocks, their document
ids and the separator); the documents of the kept blocks are the ones a sample may cite.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from kohaku.config import ConfigError
from kohaku.llm.base import Backend, ChatRequest, Counters
from kohaku.llm.cache import GenerationCache, generate_cached
from kohaku.prompts import ANSWER_FIELDS, check_template, render, trim_blocks
from kohaku.text.json_text import first_json_object
from kohaku.values import MODEL_BLANK_TOKENS

log = logging.getLogger("kohaku.infer")

ORDERS = ("context_first", "question_first")


@dataclass
class PromptTemplates:
    system: str
    user: str


@dataclass
class InferConfig:
    prompts: dict[str, dict[str, str]]          # {context_first: {system, user}, question_first: {...}}
    # context_first (C->Q, KohakuRAG's better order) | question_first
    prompt_order: str = "context_first"
    n: int = 1                                  # samples per prompt
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    seed: int = 0
    max_tokens: int = 512  # per sample; the context is trimmed so prompt + this fits the model
    max_retries: int = 2                        # rounds after round 0 for all-blank questions
    # answer_value tokens that mean "no answer"
    blank_values: list[str] = field(default_factory=lambda: list(MODEL_BLANK_TOKENS))
    ref_enum: bool = True                       # schema restricts ref_id to the context's doc ids
    max_refs: int = 4                           # maxItems of ref_id in the schema
    max_chars: dict[str, int] | None = None     # maxLength per string field in the schema
    chars_per_token: float = 1.5                # shrinks max_chars so the JSON closes within max_tokens
    context_margin: int = 16                    # tokens kept free for the chat template
    chunk_size: int | None = None               # requests per backend call; null: one call per round
    generation_cache: bool = True               # reuse samples under <cache.dir>/llm/

    def validate(self) -> None:
        if self.prompt_order not in ORDERS:
            raise ConfigError(f"infer.prompt_order={self.prompt_order!r}; choose one of {', '.join(ORDERS)}")
        if self.prompt_order not in self.prompts:
            raise ConfigError(f"infer.prompts has no entry '{self.prompt_order}' (infer.prompt_order)")
        for order, pair in self.prompts.items():
            if set(pair) != {"system", "user"}:
                raise ConfigError(f"infer.prompts.{order} needs exactly the keys system and user")
            for part, text in pair.items():
                check_template(text, ANSWER_FIELDS, f"infer.prompts.{order}.{part}")
        for key in ("n", "max_tokens"):
            if getattr(self, key) < 1:
                raise ConfigError(f"infer.{key} must be >= 1")
        if self.max_retries < 0:
            raise ConfigError("infer.max_retries must be >= 0")

    @property
    def templates(self) -> PromptTemplates:
        return PromptTemplates(**self.prompts[self.prompt_order])


# -- prompts and schema -------------------------------------------------------------------

def field_limits(cfg: InferConfig) -> dict[str, int]:
    """maxLength per string field: ``infer.max_chars``, scaled down when the fields could not
    all fit into ``max_tokens`` at ``chars_per_token`` (keys and quotes take ~40 tokens, each ref
    ~8), so a grammar-constrained answer closes its JSON before the token limit."""
    limits = {k: int(v) for k, v in (cfg.max_chars or {}).items() if v}
    if not limits or cfg.chars_per_token <= 0:
        return limits
    room = (cfg.max_tokens - 40 - 8 * cfg.max_refs) * cfg.chars_per_token
    total = sum(limits.values())
    if room < total:
        scale = max(room, 0) / total
        limits = {k: max(12, int(v * scale)) for k, v in limits.items()}
    return limits


def answer_schema(doc_ids: list[str], cfg: InferConfig) -> dict[str, Any]:
    """JSON schema of an answer; keys in the order the model should write them."""
    limits = field_limits(cfg)

    def text(name: str) -> dict[str, Any]:
        prop: dict[str, Any] = {"type": "string"}
        if name in limits:
            prop["maxLength"] = limits[name]
        return prop

    items: dict[str, Any] = {"type": "string"}
    if cfg.ref_enum and doc_ids:
        items = {"type": "string", "enum": list(dict.fromkeys(doc_ids))}
    refs: dict[str, Any] = {"type": "array", "items": items,
                            "maxItems": cfg.max_refs if doc_ids or not cfg.ref_enum else 0}
    return {
        "type": "object",
        "properties": {"explanation": text("explanation"), "answer": text("answer"),
                       "answer_value": text("answer_value"), "ref_id": refs},
        "required": ["explanation", "answer", "answer_value", "ref_id"],
        "additionalProperties": False,
    }


def build_messages(t: PromptTemplates, *, context: str, question: str, answer_unit: str,
                   qid: str) -> list[dict[str, str]]:
    values = {"context": context, "question": question, "answer_unit": answer_unit, "qid": qid}
    return [{"role": "system", "content": render(t.system, **values)},
            {"role": "user", "content": render(t.user, **values)}]


def fit_context(backend: Backend, t: PromptTemplates, cfg: InferConfig, *, blocks: list[str],
                separator: str, question: str, answer_unit: str, qid: str) -> tuple[str, int, int, bool]:
    """The context (``separator.join(blocks)``) trimmed to what the model accepts next to the
    rest of the prompt: (text, blocks kept, blocks dropped, whether the last kept one was cut)."""
    empty = build_messages(t, context="", question=question, answer_unit=answer_unit, qid=qid)
    overhead = sum(backend.count_tokens(m["content"]) for m in empty)
    budget = backend.max_context - cfg.max_tokens - overhead - cfg.context_margin
    return trim_blocks(blocks, separator, budget, backend.count_tokens)


# -- parsing ------------------------------------------------------------------------------

def _as_text(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, (list, dict)):
        return json.dumps(v, ensure_ascii=False, separators=(",", ":"))
    return str(v).strip()


def _ref_list(v: Any) -> list[str]:
    if v is None:
        return []
    if isinstance(v, str):
        s = v.strip()
        if s.startswith("[") and s.endswith("]"):
            s = s[1:-1]
        items: list[Any] = [p for p in s.split(",")]
    elif isinstance(v, list):
        items = v
    else:
        items = [v]
    out = []
    for item in items:
        s = str(item).strip().strip("'\"").strip()
        if s.lower().startswith("ref_id="):
            s = s[len("ref_id="):].strip()
        if s:
            out.append(s)
    return out


def parse_answer(raw: str, allowed: list[str], blank_values: list[str]) -> dict[str, Any]:
    """Fields of one sample; ``dropped_refs`` counts cited ids that are not in ``allowed``."""
    obj = first_json_object(raw)
    blanks = {b.strip().lower() for b in blank_values}
    if obj is None:
        return {"valid": False, "answer": "", "answer_value": "", "ref_id": [], "explanation": "",
                "is_blank": True, "dropped_refs": 0}
    by_lower = {d.lower(): d for d in allowed}
    refs: list[str] = []
    dropped = 0
    for r in _ref_list(obj.get("ref_id")):
        if r.lower() in blanks:
            continue
        doc = by_lower.get(r.lower())
        if doc is None:
            dropped += 1
        elif doc not in refs:
            refs.append(doc)
    value = _as_text(obj.get("answer_value"))
    return {
        "valid": True,
        "answer": _as_text(obj.get("answer")),
        "answer_value": value,
        "ref_id": refs,
        "explanation": _as_text(obj.get("explanation")),
        "is_blank": value.lower() in blanks or not refs,
        "dropped_refs": dropped,
    }


# -- the rounds ---------------------------------------------------------------------------

GENERATIONS_SCHEMA = {
    "qid": pl.String, "attempt": pl.Int64, "sample_idx": pl.Int64, "raw": pl.String,
    "valid": pl.Boolean, "answer": pl.String, "answer_value": pl.String,
    "ref_id": pl.List(pl.String), "explanation": pl.String, "is_blank": pl.Boolean,
    "prompt_tokens": pl.Int64, "completion_tokens": pl.Int64, "seconds": pl.Float64,
    "prompt_hash": pl.String, "dropped_refs": pl.Int64, "cached": pl.Boolean,
    "finish_reason": pl.String, "k": pl.Int64, "trimmed_snippets": pl.Int64,
}


def check_attempts(contexts: pl.DataFrame, max_retries: int) -> list[int]:
    attempts = sorted(contexts["attempt"].unique().to_list()) if contexts.height else []
    if max_retries >= len(attempts):
        raise ConfigError(
            f"infer.max_retries={max_retries} needs contexts for attempts 0..{max_retries}, but the "
            f"retrieve stage produced {len(attempts)} attempt(s) (retrieve.attempts={len(attempts)}); "
            f"lower infer.max_retries or raise retrieve.attempts above it"
        )
    return attempts


def run_infer(questions: pl.DataFrame, contexts: pl.DataFrame, backend: Backend,
              cfg: InferConfig, cache: GenerationCache | None = None
              ) -> tuple[pl.DataFrame, dict[str, Any]]:
    """The generations table and the summary figures (questions + retrieve contexts in)."""
    for col in ("qid", "question", "answer_unit"):
        if col not in questions.columns:
            raise ConfigError(f"questions table lacks column '{col}' (from the questions stage)")
    for col in ("qid", "attempt", "blocks", "block_doc_ids", "separator"):
        if col not in contexts.columns:
            raise ConfigError(f"retrieve contexts table lacks column '{col}'; re-run the retrieve "
                              "stage (force=[retrieve]) with this version of kohaku")
    check_attempts(contexts, cfg.max_retries)
    t = cfg.templates
    by_key = {(r["qid"], r["attempt"]): r for r in contexts.iter_rows(named=True)}
    qrows = {r["qid"]: r for r in questions.iter_rows(named=True)}
    counters = Counters()
    stats = {"invalid": 0, "empty": 0, "truncated": 0, "dropped_refs": 0, "trimmed": 0,
             "trimmed_snippets": 0, "retried": 0, "rounds": 0}
    rows: list[dict[str, Any]] = []
    pending = list(qrows)
    timings_before = dict(getattr(backend, "timings", None) or {})   # prefill/decode split (hf)
    for attempt in range(cfg.max_retries + 1):
        if not pending:
            break
        if attempt > 0:
            stats["retried"] += len(pending)
            log.info("round %d: %d question(s) were blank in every sample; retrying with the "
                     "attempt-%d contexts", attempt, len(pending), attempt)
        stats["rounds"] += 1
        requests, metas = [], []
        for qid in pending:
            c = by_key.get((qid, attempt))
            if c is None:
                raise ConfigError(
                    f"retrieve contexts have no row for qid={qid!r} attempt={attempt}; re-run the "
                    f"retrieve stage (force=[retrieve]) so every question has every attempt"
                )
            q = qrows[qid]
            unit = q.get("answer_unit") or ""
            text, kept, dropped_snips, cut = fit_context(
                backend, t, cfg, blocks=list(c["blocks"] or []), separator=c["separator"] or "",
                question=q["question"], answer_unit=unit, qid=qid)
            if dropped_snips or cut:
                stats["trimmed"] += 1
                stats["trimmed_snippets"] += dropped_snips
            allowed = list(dict.fromkeys((c["block_doc_ids"] or [])[:kept] if text else []))
            messages = build_messages(t, context=text, question=q["question"], answer_unit=unit, qid=qid)
            requests.append(ChatRequest(messages=messages, n=cfg.n, temperature=cfg.temperature,
                                        top_p=cfg.top_p, max_tokens=cfg.max_tokens, seed=cfg.seed,
                                        json_schema=answer_schema(allowed, cfg)))
            metas.append((qid, allowed, c.get("k"), dropped_snips))
        if stats["trimmed"]:
            log.info("round %d: trimmed %d context(s) to fit %s (%d snippet(s) dropped so far)",
                     attempt, stats["trimmed"], backend.identity, stats["trimmed_snippets"])
        samples = generate_cached(backend, requests, cache, counters, cfg.chunk_size)
        next_pending = []
        for (qid, allowed, k, dropped_snips), ss in zip(metas, samples):
            all_blank = True
            for idx, s in enumerate(ss):
                parsed = parse_answer(s.text, allowed, cfg.blank_values)
                stats["invalid"] += not parsed["valid"]
                stats["empty"] += not s.text.strip()
                stats["truncated"] += s.finish_reason == "length"
                stats["dropped_refs"] += parsed["dropped_refs"]
                all_blank &= parsed["is_blank"]
                rows.append({"qid": qid, "attempt": attempt, "sample_idx": idx, "raw": s.text,
                             **parsed, "prompt_tokens": s.prompt_tokens,
                             "completion_tokens": s.completion_tokens, "seconds": s.seconds,
                             "prompt_hash": s.prompt_hash, "cached": s.cached,
                             "finish_reason": s.finish_reason, "k": k,
                             "trimmed_snippets": dropped_snips})
            if all_blank:
                next_pending.append(qid)
        pending = next_pending
    gens = pl.DataFrame(rows, schema=GENERATIONS_SCHEMA).sort(["qid", "attempt", "sample_idx"])
    final_blank = len(pending)
    summary = {**counters.as_dict(), **stats, "questions": len(qrows), "blank_questions": final_blank,
               "backend_retries": int(getattr(backend, "retries", 0)), "identity": backend.identity}
    for key, value in (getattr(backend, "timings", None) or {}).items():
        summary[key] = round(value - timings_before.get(key, 0), 3)
    return gens, summary
