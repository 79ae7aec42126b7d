"""The question's focus: what is asked, apart from how the answer is to be written.

A question often carries instructions for the answer besides the thing asked for: "If there is
no mention, return False.", "Answer in USD billions.", "If operating margin is not a useful
metric for a company like this, then state that and explain why.", "Assume that you are a public
equities analyst. Answer the following question by primarily using ...: what is ...". Their words
("mention", "useful", "analyst", "explain") are in the query but say nothing about the page that
holds the answer, and in a long report they pull boilerplate to the top.

:func:`question_focus` splits a question into sentences and clauses (``.``, ``?``, ``!``, ``;`` and
a colon before a question word) and marks a clause as an *instruction* by its form, not by a list
of one benchmark's phrasings:

- it opens (after "please") with a verb of answering or of how to answer: answer, respond,
  reply, return, output, state, give, provide, write, express, format, round, report, present,
  use, rely, base, assume, suppose, imagine, consider, act, pretend, keep, do not, don't;
- it is a condition on the answer: an "if"/"where"/"when"/"in case"/"unless" clause whose main
  part is such a verb ("If there is no mention, return False"; "if X is not relevant, then state
  that"), or opens "otherwise";
- it speaks to the answerer: "you are", "you're", "as an analyst, ...";
- it is no question (no "?") and speaks of the answering: "the (following) question", "your
  answer / response / judgment / abilities".

References to the document itself ("in the annual report", "according to its 10-K", "in this
paper") and a yes/no question's verb of saying ("Did X mention any ...", "Has X disclosed ...") are taken
out of the other clauses the same way: they say where and how the thing is stated, not what it is.

The focus is the other clauses (the whole question when every clause is an instruction, so a
one-sentence imperative question, "Give the total revenue of X in 2020.", keeps its words).
The retrieval uses the focus as the question's first query and weights the instruction-only
terms down in the evidence scorer (kohaku/retrieval/evidence.py).

The words that name the question's documents (the company of a filing) are the other part that
picks no page once the search is restricted to those documents:
kohaku.retrieval.docprior.DocPrior.named_words finds them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# verbs of answering (the imperative that opens an instruction clause)
_ANSWER_VERBS = (
    "answer", "respond", "reply", "return", "output", "state", "give", "provide", "write",
    "express", "format", "round", "report", "present", "use", "rely", "base", "assume", "suppose",
    "imagine", "consider", "act", "pretend", "keep", "treat", "ignore", "note", "mark", "put",
    "say", "show", "include", "leave", "respond", "indicate", "specify", "enter", "only",
)
_VERB = "(?:" + "|".join(sorted(set(_ANSWER_VERBS), key=len, reverse=True)) + ")"
_LEAD = r"^\s*(?:please\s+|kindly\s+|also\s+|then\s+|and\s+)*"
_IMPERATIVE = re.compile(_LEAD + rf"(?:{_VERB}\b|do\s+not\b|don['’]t\b|never\b)", re.I)
# a condition on the answer: "If <cond>, (then) <verb>", "Where <cond> then <verb>", "Otherwise ..."
_CONDITION = re.compile(
    r"^\s*(?:if|where|when|in\s+case|unless|should)\b.*?(?:,|\bthen\b)\s*(?:please\s+|simply\s+|just\s+)?"
    rf"(?:{_VERB}\b|do\s+not\b|don['’]t\b|the\s+answer\b|answer\b)", re.I)
_OTHERWISE = re.compile(r"^\s*(?:otherwise|else|if\s+not|if\s+so)\b", re.I)
_TO_YOU = re.compile(r"^\s*(?:you\s+are|you['’]re|as\s+an?\s+\w+(?:\s+\w+)?\s*,)", re.I)
# a clause about the answering itself ("Approach the question by ...", "... in your answer")
_ABOUT_ANSWER = re.compile(r"\b(?:the\s+(?:following\s+)?question|your\s+(?:answer|response|reply|"
                           r"judg(?:e)?ments?|abilities))\b", re.I)
# clause boundaries: sentence ends, semicolons, a colon before a question word
_SPLIT = re.compile(r"(?<=[.?!])\s+(?=\S)|;\s*|:\s+(?=(?:what|which|who|whom|whose|when|where|why|how|"
                    r"is|are|was|were|do|does|did|has|have|had|can|could|should|would|will)\b)", re.I)


# a reference to the document itself ("in the annual report", "according to its 10-K", "in
# this paper"): it names where to look, which the search already is, not what to find
_DOC_REF = re.compile(
    r"\s*\b(?:in|within|from|throughout|according\s+to|based\s+on|of)\s+(?:the|its|their|this|that|"
    r"his|her|our)\s+(?:(?:most\s+recent|latest|last|current|recent|annual|quarterly|full|fiscal|"
    r"(?:fy\s*)?\d{2,4})\s+)*(?:annual\s+report|report|filing|10-?k|10-?q|8-?k|document|paper|"
    r"article|study|publication|transcript|press\s+release|release)\b", re.I)
# a verb of saying as a yes/no question's main verb ("Did X mention any ...", "Has the company
# disclosed ..."): it asks whether the thing is there
_SAYING = re.compile(
    r"^(\s*(?:did|does|do|has|have|had|will|would)\s+(?:[\w&'’.-]+\s+){1,5}?)"
    r"(?:mention(?:s|ed)?|discuss(?:es|ed)?|disclose(?:s|d)?|refer(?:s|red)?\s+to|talk(?:s|ed)?\s+about|"
    r"say|cite(?:s|d)?|outline(?:s|d)?|report(?:s|ed)?)\b", re.I)


@dataclass(frozen=True)
class Focus:
    """A question split into what is asked (``focus``) and its answer instructions (the
    clauses, and the document references and verbs of saying taken out of the others)."""

    focus: str
    instructions: tuple[str, ...]


def clauses(question: str) -> list[str]:
    """The question's sentences and clauses (see the module doc), stripped, none empty."""
    return [c.strip() for c in _SPLIT.split(question or "") if c and c.strip()]


def is_instruction(clause: str) -> bool:
    """True when a clause says how to answer rather than what is asked (the module doc)."""
    return bool(_IMPERATIVE.match(clause) or _CONDITION.match(clause)
                or _OTHERWISE.match(clause) or _TO_YOU.match(clause)
                or (not clause.rstrip().endswith("?") and _ABOUT_ANSWER.search(clause) is not None))


def question_focus(question: str) -> Focus:
    """The question's focus and its instruction clauses; the whole question is the focus when
    no clause is left once the instructions are taken out."""
    parts = clauses(question)
    kept = [c for c in parts if not is_instruction(c)]
    if not kept:
        return Focus((question or "").strip(), ())
    told = [c for c in parts if is_instruction(c)]
    focus = []
    for clause in kept:
        left = _SAYING.sub(r"\1", _DOC_REF.sub("", clause))
        if len(re.findall(r"[A-Za-z0-9]{2,}", left)) < 2:  # nothing left to search: keep it
            left = clause
        elif left != clause:
            told.extend(m.group(0).strip() for m in _DOC_REF.finditer(clause))
            told.extend(m.group(0)[len(m.group(1)):].strip() for m in _SAYING.finditer(clause))
        focus.append(left.strip())
    return Focus(re.sub(r"\s+", " ", " ".join(focus)).strip(), tuple(told))
