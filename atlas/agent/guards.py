"""Loop guards: a call that keeps failing the same way is warned about, then halted.

A failure is an `Error:` result, or a result the tool marks failed (a command's non-zero exit).
Two failures of one tool within a turn are "the same failure" when
- their arguments are equal once normalised (key order, runs of whitespace, a trailing slash,
  a null value left out), whatever the errors say (a failed output must be the same too); or
- their errors are equal once normalised (whitespace, every number read as one) and their
  arguments are near-identical: equal once every number is read as one, or alike by difflib's
  ratio (>= NEAR_IDENTICAL, for arguments up to COMPARED_CHARS) — `sleep 5` then `sleep 10`,
  or a path changed by one letter, both answered by the same error.
A failure-tolerant tool (run_command, web_fetch, a browser, MCP tools) fails for reasons the
model is diagnosing, so it is warned and never halted. A call the approval gate denied is not
a tool failing: the loop counts it as an ordinary failure even for a failure-tolerant tool.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Any

WARN_AT = 2
HALT_AT = 3
NEAR_IDENTICAL = 0.9  # difflib ratio of two calls' normalised arguments
ERROR_CHARS = 300  # the start of an error is what says what went wrong
# difflib is quadratic: longer arguments (a file's content) count only when equal as above.
COMPARED_CHARS = 2_000

_SPACES = re.compile(r"\s+")
_NUMBERS = re.compile(r"\d+(?:\.\d+)?")


def _normal_value(value: Any) -> Any:
    if isinstance(value, str):
        text = _SPACES.sub(" ", value).strip()
        return text.rstrip("/") if len(text) > 1 else text  # "dir/" and "dir" name one folder
    if isinstance(value, dict):
        return {k: _normal_value(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_normal_value(v) for v in value]
    return value


def normalise_arguments(arguments: str) -> str:
    """The arguments as one canonical JSON text; text that is not JSON, with its spaces evened."""
    try:
        parsed = json.loads(arguments)
    except (json.JSONDecodeError, TypeError):
        return _SPACES.sub(" ", str(arguments)).strip()
    return json.dumps(_normal_value(parsed), sort_keys=True, ensure_ascii=False)


def normalise_error(error: str) -> str:
    """What says how a call failed: an error's start, and a long output's end too (a command's
    last lines and exit code)."""
    if len(error) > ERROR_CHARS:
        error = error[: ERROR_CHARS // 2] + " " + error[-ERROR_CHARS // 2 :]
    return _NUMBERS.sub("0", _SPACES.sub(" ", error).strip().lower())


@dataclass
class _Failure:
    """The latest failure of one group of same failures, and how many the group has had."""

    name: str
    arguments: str  # normalised
    error: str  # normalised
    count: int = 1

    def same_as(self, name: str, arguments: str, error: str, output: bool) -> bool:
        if name != self.name:
            return False
        if arguments == self.arguments and not output:
            return True
        if error != self.error:
            return False
        if arguments == self.arguments:
            return True
        if _NUMBERS.sub("0", arguments) == _NUMBERS.sub("0", self.arguments):
            return True
        if max(len(arguments), len(self.arguments)) > COMPARED_CHARS:
            return False
        alike = SequenceMatcher(None, arguments, self.arguments)
        return alike.real_quick_ratio() >= NEAR_IDENTICAL and alike.ratio() >= NEAR_IDENTICAL


@dataclass
class RepeatGuard:
    """Counts the same failure within one turn: warns at WARN_AT; halts at HALT_AT, except a
    failure-tolerant tool's, which is warned again instead."""

    failures: list[_Failure] = field(default_factory=list)
    halted: str | None = None

    def record_failure(
        self, name: str, arguments: str, error: str, *, tolerant: bool, output: bool = False
    ) -> str:
        """Returns a note to add to the result (empty when none); sets `halted` past the limit.
        `output`: the failure is a result marked failed, not an error (a command's non-zero
        exit); the same call counts only with the same output, since running a command again
        after a change is how work goes."""
        count = self._count(name, normalise_arguments(arguments), normalise_error(error), output)
        if count < WARN_AT:
            return ""
        if tolerant:
            return (
                f"\nNote: {name} has now failed {count} times the same way in this turn. Find "
                "out why before trying again (read the error, check what it depends on), or "
                "tell the user what is in the way."
            )
        if count >= HALT_AT:
            self.halted = (
                f"I stopped: the call {name} failed {count} times the same way (the same or "
                f"near-identical arguments). Last error: {error[:500]}"
            )
            return ""
        return (
            f"\nWarning: this call has now failed {count} times the same way. Do not repeat it "
            "or a near copy of it: change the approach, or explain the problem to the user."
        )

    def _count(self, name: str, arguments: str, error: str, output: bool) -> int:
        for failure in self.failures:
            if failure.same_as(name, arguments, error, output):
                # The group follows its latest member: a call drifting a little each time
                # (sleep 1, sleep 2, sleep 3) stays one failure.
                failure.arguments, failure.error = arguments, error
                failure.count += 1
                return failure.count
        self.failures.append(_Failure(name, arguments, error))
        return 1
