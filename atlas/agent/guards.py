"""Loop guards: a call that keeps failing the same way is warned about, then halted."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

WARN_AT = 2
HALT_AT = 3


def _call_key(name: str, arguments: str) -> tuple[str, str]:
    try:
        canonical = json.dumps(json.loads(arguments), sort_keys=True)
    except (json.JSONDecodeError, TypeError):
        canonical = arguments
    return name, canonical


@dataclass
class RepeatGuard:
    """Counts identical failing calls within one turn. Failure-tolerant tools (the web, a
    browser) fail for reasons outside the model's control, so they are never counted."""

    failures: Counter[tuple[str, str]] = field(default_factory=Counter)
    halted: str | None = None

    def record_failure(self, name: str, arguments: str, error: str, *, tolerant: bool) -> str:
        """Returns a note to add to the result (empty when none); sets `halted` past the limit."""
        if tolerant:
            return ""
        key = _call_key(name, arguments)
        self.failures[key] += 1
        count = self.failures[key]
        if count >= HALT_AT:
            self.halted = (
                f"I stopped: the call {name} failed {count} times with the same arguments. "
                f"Last error: {error[:500]}"
            )
            return ""
        if count >= WARN_AT:
            return (
                f"\nWarning: this exact call has now failed {count} times. Do not repeat it: "
                "change the arguments or the approach, or explain the problem to the user."
            )
        return ""
