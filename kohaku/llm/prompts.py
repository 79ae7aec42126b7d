"""Prompt templates: placeholder checks, rendering, and fitting a context's blocks into a token budget.

Templates live in the config (the task's ``task.answer.prompts``, conf/planner/llm.yaml) as plain
``str.format`` strings (no Jinja): ``{context}``, ``{question}``, ``{qid}`` and the task's
question fields (WattBot: ``{answer_unit}``) for answers, ``{question}``, ``{n_extra}`` for the
planner. Literal braces are written ``{{`` ``}}``.
"""

from __future__ import annotations

import string
from typing import Callable, Sequence

from kohaku.core.config import ConfigError

PLANNER_FIELDS = ("question", "n_extra")


def template_fields(template: str) -> set[str]:
    return {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}


def check_template(template: str, allowed: tuple[str, ...], where: str) -> None:
    """Fail with the config key when ``template`` uses an unknown placeholder or bad braces."""
    try:
        fields = template_fields(template)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc} (write literal braces as {{{{ and }}}})") from exc
    bad = sorted(f for f in fields if f not in allowed)
    if bad:
        raise ConfigError(
            f"{where} uses unknown placeholder(s) {', '.join('{' + b + '}' for b in bad)}; "
            f"allowed: {', '.join('{' + a + '}' for a in allowed)}"
        )


def render(template: str, **values: object) -> str:
    return template.format(**values)


def trim_blocks(blocks: Sequence[str], separator: str, budget: int,
                count: Callable[[str], int]) -> tuple[str, int, int, bool]:
    """Fit the context ``separator.join(blocks)`` (blocks in rank order) into ``budget`` tokens.

    The lowest-ranked blocks are dropped first; if the top block alone is still too long, its
    text is cut at the end. Returns (text, blocks kept, blocks dropped, whether the last kept
    block was cut).
    """
    blocks = list(blocks)
    context = separator.join(blocks)
    if budget <= 0:
        return "", 0, len(blocks), bool(context)
    if count(context) <= budget:
        return context, len(blocks), 0, False
    sizes = [count(b) for b in blocks]
    sep = count(separator)
    keep = len(blocks)
    # estimate with per-block counts, then confirm with the real count
    while keep > 1 and sum(sizes[:keep]) + sep * (keep - 1) > budget:
        keep -= 1
    while keep > 1 and count(separator.join(blocks[:keep])) > budget:
        keep -= 1
    text = separator.join(blocks[:keep])
    dropped = len(blocks) - keep
    if count(text) <= budget:
        return text, keep, dropped, False
    lo, hi = 0, len(text)
    while lo < hi:  # longest prefix that fits
        mid = (lo + hi + 1) // 2
        if count(text[:mid]) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo], keep, dropped, True
