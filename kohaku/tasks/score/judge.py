"""An LLM judge: does a submitted answer say what the gold answer says?

For tasks whose answers are free text (sentences, explanations), exact match and token F1
under-count right answers written differently. :func:`judge` asks a model, through kohaku's
backend interface (kohaku/llm/base.py) and generation cache (kohaku/llm/cache.py), for one verdict
per question:

- one batched call: every question's :class:`~kohaku.llm.base.ChatRequest` goes to
  :func:`~kohaku.llm.cache.generate_cached` together, so cached verdicts are read back and only
  the others are generated (identical items are generated once);
- the reply is constrained to :data:`VERDICT_SCHEMA` (``{"correct": true|false}``, nothing
  else: a reason string would cost a 135M model tokens and accuracy) and read with
  :func:`kohaku.llm.json_text.first_json_object`; a reply without a boolean ``correct`` (a
  backend that ignores the schema, a cut-off output) gives ``correct=None``: no verdict, which
  the caller counts apart from right and wrong;
- a blank or abstained answer (:func:`kohaku.core.values.is_blank_value`: ``""``, ``is_blank``,
  ``n/a``, ``na``, "Unable to answer ...", or None) is judged incorrect **without calling the
  model** (``Verdict.blank`` is set, ``raw`` is empty).

The prompts are ``str.format`` templates (kohaku/llm/prompts.py) with the placeholders
``{question}``, ``{truth}`` and ``{answer}``; :meth:`JudgeConfig.validate` rejects any other
placeholder with a :class:`~kohaku.core.config.ConfigError` naming the key, and a pair of templates
that never shows the model the gold answer or the answer to grade. No Hydra here: the task
wiring builds a :class:`JudgeConfig` from its config node.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kohaku.core.config import ConfigError
from kohaku.llm.base import Backend, ChatRequest, Counters
from kohaku.llm.cache import GenerationCache, generate_cached
from kohaku.llm.prompts import check_template, render, template_fields
from kohaku.llm.json_text import first_json_object
from kohaku.core.values import is_blank_value

JUDGE_FIELDS = ("question", "truth", "answer")

VERDICT_SCHEMA = {
    "type": "object",
    "properties": {"correct": {"type": "boolean"}},
    "required": ["correct"],
    "additionalProperties": False,
}

DEFAULT_SYSTEM = (
    "You grade answers to questions about documents. You are given a question, the gold "
    "answer and an answer to grade. The answer is correct when it states the same fact as the "
    "gold answer; extra words or explanation do not matter. Numbers are equal when they agree "
    "after rounding to the precision of the gold answer and after converting units, scale or "
    "percent (2.8% = 0.028; $1,577 million = $1.577 billion). The answer is incorrect when it "
    "gives another number or fact, contradicts the gold answer, or does not answer. "
    'Reply with JSON only: {{"correct": true}} or {{"correct": false}}.'
)
DEFAULT_USER = (
    "Question: {question}\n"
    "Gold answer: {truth}\n"
    "Answer to grade: {answer}\n\n"
    "Is the answer to grade correct?"
)


@dataclass
class JudgeConfig:
    """The judge's prompts (templates over :data:`JUDGE_FIELDS`) and sampling settings."""

    system: str = DEFAULT_SYSTEM        # the judge's system prompt
    user: str = DEFAULT_USER            # the judge's prompt: {question}, {truth}, {answer}
    max_tokens: int = 64                # room for the JSON verdict
    temperature: float = 0.0            # sampling temperature (0: greedy)
    seed: int = 0                       # sampling seed

    def validate(self, where: str = "judge") -> None:
        """Raise :class:`ConfigError` naming ``<where>.<key>`` for an unknown placeholder, bad
        braces, a prompt pair without ``{truth}`` or ``{answer}``, or a bad sampling setting."""
        check_template(self.system, JUDGE_FIELDS, f"{where}.system")
        check_template(self.user, JUDGE_FIELDS, f"{where}.user")
        used = template_fields(self.system) | template_fields(self.user)
        for name in ("truth", "answer"):
            if name not in used:
                raise ConfigError(f"{where}.user (or {where}.system) must use {{{name}}}: "
                                  f"the judge cannot grade without it")
        if self.max_tokens < 1:
            raise ConfigError(f"{where}.max_tokens must be >= 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise ConfigError(f"{where}.temperature must be >= 0, got {self.temperature}")


@dataclass
class JudgeItem:
    """One answer to grade."""

    qid: str
    question: str
    truth: str
    answer: str | None


@dataclass
class Verdict:
    """The judge's verdict on one item.

    correct: True / False, or None when the judge's output was not a valid verdict
    raw:     the judge's output ("" for a blank answer, which the model never sees)
    cached:  read from the generation cache
    blank:   the answer was blank or an abstention, judged incorrect without the model
    """

    qid: str
    correct: bool | None
    raw: str
    cached: bool
    blank: bool = field(default=False)


def judge_request(item: JudgeItem, cfg: JudgeConfig) -> ChatRequest:
    """The chat request that asks for ``item``'s verdict."""
    values = {"question": item.question or "", "truth": item.truth or "",
              "answer": "" if item.answer is None else item.answer}
    messages = []
    system = render(cfg.system, **values)
    if system.strip():
        messages.append({"role": "system", "content": system})
    messages.append({"role": "user", "content": render(cfg.user, **values)})
    return ChatRequest(messages=messages, n=1, temperature=cfg.temperature,
                       max_tokens=cfg.max_tokens, seed=cfg.seed, json_schema=VERDICT_SCHEMA)


def parse_verdict(raw: str) -> bool | None:
    """The boolean ``correct`` of the first JSON object in ``raw``, else None (a string
    ``"true"`` is no verdict: the schema asks for a JSON boolean)."""
    obj = first_json_object(raw or "")
    value = obj.get("correct") if obj else None
    return value if isinstance(value, bool) else None


def judge(backend: Backend, items: list[JudgeItem], cfg: JudgeConfig,
          cache: GenerationCache | None = None, counters: Counters | None = None) -> list[Verdict]:
    """One verdict per item, in order (see the module docstring): blank answers are incorrect
    without a model call; the others are asked in one batched, cached call. ``counters`` (when
    given) gets the call's model and cache figures."""
    cfg.validate()
    verdicts: list[Verdict | None] = [None] * len(items)
    asked: list[int] = []
    for i, item in enumerate(items):
        if item.answer is None or is_blank_value(item.answer):
            verdicts[i] = Verdict(item.qid, False, "", False, blank=True)
        else:
            asked.append(i)
    if asked:
        requests = [judge_request(items[i], cfg) for i in asked]
        samples = generate_cached(backend, requests, cache, counters if counters is not None else Counters())
        for i, per_request in zip(asked, samples):
            s = per_request[0]
            verdicts[i] = Verdict(items[i].qid, parse_verdict(s.text), s.text, s.cached)
    return verdicts  # type: ignore[return-value]
