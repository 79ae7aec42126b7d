"""How a task's vote groups answer values: the :class:`Grouping` a named ``task.vote.group``
function returns, and the canonical grouping (kohaku.core.values) the vote uses by default."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from kohaku.core.values import canonical, is_blank_value, render, same


@dataclass(frozen=True)
class Grouping:
    """How a task groups answer values in the vote (``task.vote.group``).

    parse: raw value -> its parsed form (what ``same`` compares);
    same: whether two parsed values are the same answer;
    render: (parsed, raw) -> the value written when the task does not keep the surface form;
    blank_raw / blank_parsed: whether a raw / parsed value is an abstention.
    """

    parse: Callable[[str], Any]
    same: Callable[[Any, Any], bool]
    render: Callable[[Any, str], str]
    blank_raw: Callable[[str], bool]
    blank_parsed: Callable[[Any], bool]


#: canonical forms (kohaku.core.values: "1,000" = "1000.0" = "1e3"), written canonically; the
#: vote's default (the default task's ``vote.group``)
CANONICAL_GROUPING = Grouping(parse=canonical, same=same, render=lambda c, raw: render(c),
                            blank_raw=is_blank_value, blank_parsed=lambda c: c.kind == "blank")
