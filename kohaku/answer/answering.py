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

With ``task.answer.kinds`` each question's kind (kohaku.tasks.kinds) replaces the value field's
schema, fills the prompt's ``{kind}`` and ``{kind_instruction}``, and a sample whose JSON does
not follow its question's schema is invalid (``off_schema``); the not-answerable token is an
answer, never a blank, so it is never retried.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import polars as pl

from kohaku.core.config import ConfigError
from kohaku.llm.base import Backend, ChatRequest, Counters
from kohaku.llm.cache import GenerationCache, generate_cached
from kohaku.llm.prompts import render, trim_blocks
from kohaku.core.schema_check import problems
from kohaku.tasks import kinds as answer_kinds
from kohaku.tasks.spec import ORDERS, AnswerSpec, KindSpec
from kohaku.llm.json_text import first_json_object

log = logging.getLogger("kohaku.infer")

@dataclass
class PromptTemplates:
    system: str
    user: str


@dataclass
class InferConfig:
    """How to generate. What to ask (prompts, answer fields, blank tokens) is the task's
    (``task.answer``, kohaku.tasks.spec.AnswerSpec)."""

    # context_first (C->Q, KohakuRAG's better order) | question_first: picks task.answer.prompts
    prompt_order: str = "context_first"
    n: int = 1                                  # samples per prompt
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0              # nucleus sampling share (1: off)
    seed: int = 0                   # sample k of a question uses seed + k
    max_tokens: int = 512  # per sample; the context is trimmed so prompt + this fits the model
    max_retries: int = 2                        # rounds after round 0 for all-blank questions
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
        for key in ("n", "max_tokens"):
            if getattr(self, key) < 1:
                raise ConfigError(f"infer.{key} must be >= 1")
        if self.max_retries < 0:
            raise ConfigError("infer.max_retries must be >= 0")



def templates(cfg: InferConfig, spec: AnswerSpec) -> PromptTemplates:
    """The task's prompt pair for ``infer.prompt_order``."""
    if cfg.prompt_order not in spec.prompts:
        raise ConfigError(f"task.answer.prompts has no entry '{cfg.prompt_order}' (infer.prompt_order); "
                          f"it has {', '.join(spec.prompts) or 'none'}")
    return PromptTemplates(**spec.prompts[cfg.prompt_order])


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


def answer_schema(doc_ids: list[str], cfg: InferConfig, spec: AnswerSpec,
                  kind: KindSpec | None = None) -> dict[str, Any]:
    """JSON schema of an answer: the task's fields in the order the model should write them
    (text: a string with ``infer.max_chars`` as maxLength; number; list of strings; choice: an
    enum; refs: the context's document ids with ``infer.ref_enum``, at most ``infer.max_refs``);
    with a ``kind`` the value field's schema is the kind's (kohaku.tasks.kinds.value_schema)."""
    limits = field_limits(cfg)

    def text(name: str) -> dict[str, Any]:
        prop: dict[str, Any] = {"type": "string"}
        if name in limits:
            prop["maxLength"] = limits[name]
        return prop

    def refs() -> dict[str, Any]:
        items: dict[str, Any] = {"type": "string"}
        if cfg.ref_enum and doc_ids:
            items = {"type": "string", "enum": list(dict.fromkeys(doc_ids))}
        return {"type": "array", "items": items,
                "maxItems": cfg.max_refs if doc_ids or not cfg.ref_enum else 0}

    props: dict[str, Any] = {}
    for name, ftype in spec.fields.items():
        if ftype == "refs":
            props[name] = refs()
        elif ftype == "number":
            props[name] = {"type": "number"}
        elif ftype == "list":
            props[name] = {"type": "array", "items": text(name)}
        elif ftype == "choice":
            props[name] = {"type": "string", "enum": list(spec.choices[name])}
        else:
            props[name] = text(name)
    if kind is not None:
        props[spec.value] = answer_kinds.value_schema(kind, spec.kinds)
    return {
        "type": "object",
        "properties": props,
        "required": list(spec.fields),
        "additionalProperties": False,
    }


def build_messages(t: PromptTemplates, values: dict[str, str]) -> list[dict[str, str]]:
    """System and user messages; ``values`` fill the templates (context, question, qid and the
    task's question fields)."""
    return [{"role": "system", "content": render(t.system, **values)},
            {"role": "user", "content": render(t.user, **values)}]


def prompt_values(question: dict[str, Any], fields: list[str] | tuple[str, ...], context: str,
                  kind: tuple[str, str] | None = None) -> dict[str, str]:
    """What a prompt template may use for one question row (``kind``: its kind's name and
    instruction, with answer kinds)."""
    values = {"context": context, "question": question["question"], "qid": question["qid"]}
    if kind is not None:
        values["kind"], values["kind_instruction"] = kind
    for f in fields:
        if f not in values:
            values[f] = question.get(f) or ""
    return values


def fit_context(backend: Backend, t: PromptTemplates, cfg: InferConfig, *, blocks: list[str],
                separator: str, values: dict[str, str]) -> tuple[str, int, int, bool]:
    """The context (``separator.join(blocks)``) trimmed to what the model accepts next to the
    rest of the prompt (``values`` with an empty context): (text, blocks kept, blocks dropped,
    whether the last kept one was cut)."""
    empty = build_messages(t, {**values, "context": ""})
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


def parse_answer(raw: str, allowed: list[str], spec: AnswerSpec,
                 schema: dict[str, Any] | None = None) -> dict[str, Any]:
    """Fields of one sample; ``dropped_refs`` counts cited ids that are not in ``allowed``.

    ``answer_value`` holds the task's value field, ``answer`` and ``explanation`` those fields
    when the task has them, ``ref_id`` the refs field, ``fields`` every text field as a JSON
    object. Blank: with abstention allowed, the value is a blank token (``task.answer.blank_values``)
    or, with ``blank_without_refs``, no reference is kept; with abstention never, only an
    empty value (or an output that is no JSON) is blank. With answer kinds, ``schema`` is the
    question's request schema: a sample that does not follow it is invalid (``off_schema``
    counts it), and the not-answerable token is not a blank token."""
    obj = first_json_object(raw)
    blanks = {b.strip().lower() for b in spec.abstain_values}
    if obj is None:
        return {"valid": False, "answer": "", "answer_value": "", "ref_id": [], "explanation": "",
                "is_blank": True, "dropped_refs": 0, "fields": "{}"}
    by_lower = {d.lower(): d for d in allowed}
    refs: list[str] = []
    dropped = 0
    for r in _ref_list(obj.get(spec.refs)) if spec.refs else []:
        if r.lower() in blanks:
            continue
        doc = by_lower.get(r.lower())
        if doc is None:
            dropped += 1
        elif doc not in refs:
            refs.append(doc)
    texts = {name: _as_text(obj.get(name)) for name in spec.text_fields}
    off_schema = False
    if spec.kinds.enabled:
        texts[spec.value] = answer_kinds.value_text(obj.get(spec.value))
        off_schema = bool(schema) and bool(problems(obj, schema))
    value = texts[spec.value]
    if spec.abstention == "never":
        blank = not value
    else:
        blank = value.lower() in blanks or (spec.blank_without_refs and not refs)
    out = {
        "valid": not off_schema,
        "answer": texts.get("answer", ""),
        "answer_value": value,
        "ref_id": refs,
        "explanation": texts.get("explanation", ""),
        "is_blank": blank,
        "dropped_refs": dropped,
        "fields": json.dumps(texts, ensure_ascii=False),
    }
    if spec.kinds.enabled:
        out["off_schema"] = off_schema
        out["is_blank"] = blank or off_schema
    return out


# -- the rounds ---------------------------------------------------------------------------

GENERATIONS_SCHEMA = {
    "qid": pl.String, "attempt": pl.Int64, "sample_idx": pl.Int64, "raw": pl.String,
    "valid": pl.Boolean, "answer": pl.String, "answer_value": pl.String,
    "ref_id": pl.List(pl.String), "explanation": pl.String, "is_blank": pl.Boolean,
    "prompt_tokens": pl.Int64, "completion_tokens": pl.Int64, "seconds": pl.Float64,
    "prompt_hash": pl.String, "dropped_refs": pl.Int64, "cached": pl.Boolean,
    "finish_reason": pl.String, "k": pl.Int64, "trimmed_snippets": pl.Int64, "fields": pl.String,
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
              cfg: InferConfig, spec: AnswerSpec, fields: list[str] | tuple[str, ...] = (),
              cache: GenerationCache | None = None) -> tuple[pl.DataFrame, dict[str, Any]]:
    """The generations table and the summary figures (questions + retrieve contexts in).
    ``spec`` is the task's answer; ``fields`` the question columns its prompts may use."""
    for col in ("qid", "question", *fields):
        if col not in questions.columns:
            raise ConfigError(f"questions table lacks column '{col}' (task.questions.fields); "
                              "re-run the questions stage with the task that names it")
    for col in ("qid", "attempt", "blocks", "block_doc_ids", "separator"):
        if col not in contexts.columns:
            raise ConfigError(f"retrieve contexts table lacks column '{col}'; re-run the retrieve "
                              "stage (force=[retrieve]) with this version of kohaku")
    check_attempts(contexts, cfg.max_retries)
    t = templates(cfg, spec)
    by_key = {(r["qid"], r["attempt"]): r for r in contexts.iter_rows(named=True)}
    qrows = {r["qid"]: r for r in questions.iter_rows(named=True)}
    kind_names = answer_kinds.kind_of(questions, spec.kinds)
    kind_specs = spec.kinds.specs if spec.kinds.enabled else {}
    prompt_kinds = {name: (name, answer_kinds.instruction(k, spec.kinds)) for name, k in kind_specs.items()}
    counters = Counters()
    stats = {"invalid": 0, "empty": 0, "truncated": 0, "dropped_refs": 0, "trimmed": 0,
             "trimmed_snippets": 0, "retried": 0, "rounds": 0}
    if spec.kinds.enabled:
        stats["off_schema"] = 0
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
            kind = kind_names.get(qid)
            values = prompt_values(qrows[qid], fields, "", prompt_kinds.get(kind))
            text, kept, dropped_snips, cut = fit_context(
                backend, t, cfg, blocks=list(c["blocks"] or []), separator=c["separator"] or "",
                values=values)
            if dropped_snips or cut:
                stats["trimmed"] += 1
                stats["trimmed_snippets"] += dropped_snips
            allowed = list(dict.fromkeys((c["block_doc_ids"] or [])[:kept] if text else []))
            messages = build_messages(t, {**values, "context": text})
            schema = answer_schema(allowed, cfg, spec, kind_specs.get(kind))
            requests.append(ChatRequest(messages=messages, n=cfg.n, temperature=cfg.temperature,
                                        top_p=cfg.top_p, max_tokens=cfg.max_tokens, seed=cfg.seed,
                                        json_schema=schema))
            metas.append((qid, allowed, c.get("k"), dropped_snips, schema if kind else None))
        if stats["trimmed"]:
            log.info("round %d: trimmed %d context(s) to fit %s (%d snippet(s) dropped so far)",
                     attempt, stats["trimmed"], backend.identity, stats["trimmed_snippets"])
        samples = generate_cached(backend, requests, cache, counters, cfg.chunk_size)
        next_pending = []
        for (qid, allowed, k, dropped_snips, schema), ss in zip(metas, samples):
            all_blank = True
            for idx, s in enumerate(ss):
                parsed = parse_answer(s.text, allowed, spec, schema)
                if parsed.pop("off_schema", False):
                    stats["off_schema"] += 1
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
