"""Short-answer text matching, any task's (the answer kinds, ``kind_value``, the SQuAD room):
exact match and token F1, rule for rule as SQuAD v1.1's official evaluation script
(``evaluate-v1.1.py``) computes them.

- :func:`normalize_answer`: lower-case, drop every character of :data:`string.punctuation`
  (ASCII only: curly quotes, dashes and other Unicode punctuation stay), replace the whole words
  ``a``, ``an``, ``the`` (regex ``\\b(a|an|the)\\b``, Unicode word boundaries) by a space, then
  collapse whitespace (``str.split``) to single spaces.
- :func:`exact_match`: 1.0 when the normalised prediction equals a normalised ground truth.
- :func:`token_f1`: F1 of the normalised tokens (whitespace split) counted as multisets
  (``Counter & Counter``); 0 when no token is shared, so two answers that both normalise to
  the empty string score F1 0 (but exact match 1), as the official script does.

Both take the best score over the ground truths (``metric_max_over_ground_truths``). The
official script fails on an empty list of ground truths; here that scores 0.0. ``None`` is read
as the empty string. Scores are floats (the script returns ``True``/``False`` and ``0`` for some).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Iterable

_PUNCT = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(s: str | None) -> str:
    """Lower-case; punctuation, articles and extra whitespace out (see the module docstring)."""
    text = (s or "").lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _as_list(truths: str | Iterable[str] | None) -> list[str]:
    if truths is None:
        return []
    if isinstance(truths, str):
        return [truths]
    return [t if t is not None else "" for t in truths]


def _f1_one(pred_tokens: list[str], truth_tokens: list[str]) -> float:
    same = sum((Counter(pred_tokens) & Counter(truth_tokens)).values())
    if same == 0:
        return 0.0
    precision = same / len(pred_tokens)
    recall = same / len(truth_tokens)
    return 2 * precision * recall / (precision + recall)


def exact_match(pred: str | None, truths: str | Iterable[str] | None) -> float:
    """1.0 when the normalised ``pred`` equals one of the normalised ``truths``, else 0.0."""
    p = normalize_answer(pred)
    return 1.0 if any(p == normalize_answer(t) for t in _as_list(truths)) else 0.0


def token_f1(pred: str | None, truths: str | Iterable[str] | None) -> float:
    """The best token F1 of ``pred`` against the ``truths`` (0.0 with no truths)."""
    p = normalize_answer(pred).split()
    return max((_f1_one(p, normalize_answer(t).split()) for t in _as_list(truths)), default=0.0)
