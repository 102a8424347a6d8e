"""A verdict on a command: block, ask, guardian or allow, with the rule that decided and why."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

VerdictKind = Literal["block", "ask", "guardian", "allow"]
SEVERITY: dict[str, int] = {"allow": 0, "guardian": 1, "ask": 2, "block": 3}


@dataclass(frozen=True)
class Verdict:
    verdict: VerdictKind
    rule: str
    reason: str


ALLOW = Verdict("allow", "ordinary", "no rule matched")


def worst(verdicts: list[Verdict | None]) -> Verdict:
    """The most severe verdict (the first of equals); ALLOW when there is none."""
    found = ALLOW
    for verdict in verdicts:
        if verdict and SEVERITY[verdict.verdict] > SEVERITY[found.verdict]:
            found = verdict
    return found
