"""A routine's pre-check: a command that decides whether the model is called at all.

An hourly "anything new?" routine costs a model call every hour, mostly to hear nothing. With a
`precheck`, the command runs first, in the bot's sandbox and through the gate (as run_command,
in a routine run: nothing is asked, so what the gate would ask about is refused):

- exit 0: something to report. The model runs, and reads the check's output (as data from
  outside, like a web page) after the routine's prompt.
- exit 1: nothing to report. The run is recorded as skipped, with the output; no model call.
- anything else (another code, killed after its timeout, refused by the gate): the check
  failed. The run is recorded as failed and its target told, as for any failed run.

`grep -q` and `test` already speak this way (0: found, 1: not found, 2: trouble).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from atlas.agent.untrusted import wrap_untrusted
from atlas.tools.shell import exit_status

if TYPE_CHECKING:
    from atlas.routines.store import Routine
    from atlas.tools.registry import RunKind, ToolResult

CHECK_TIMEOUT_S = 300  # a check that needs longer is a job for the routine itself
OUTPUT_FOR_MODEL = 8_000  # characters of the check's output the model reads
OUTPUT_KEPT = 2_000  # characters kept in a skipped run's record


class CallsTools(Protocol):
    async def call_tool_detached(
        self,
        bot_name: str,
        tool_name: str,
        arguments: dict[str, object],
        *,
        run_kind: RunKind,
        chat: str,
    ) -> ToolResult: ...


@dataclass(frozen=True)
class CheckOutcome:
    verdict: Literal["report", "quiet", "failed"]
    output: str  # the command's output, without Atlas's end line
    why: str = ""  # for failed: what went wrong


async def run_precheck(dispatcher: CallsTools, routine: Routine, chat: str) -> CheckOutcome:
    result = await dispatcher.call_tool_detached(
        routine.bot,
        "run_command",
        {"command": routine.precheck, "timeout": CHECK_TIMEOUT_S},
        run_kind="routine",
        chat=chat,
    )
    if result.is_error:
        return CheckOutcome("failed", "", result.text.removeprefix("Error: "))
    code = exit_status(result.text)
    output = result.text.rsplit("\n[", 1)[0].strip()
    if output == "(no output)":
        output = ""
    if code == 0:
        return CheckOutcome("report", output)
    if code == 1:
        return CheckOutcome("quiet", output)
    why = f"it exited {code}" if code is not None else "it was killed after its timeout"
    return CheckOutcome("failed", output, why)


def prompt_with_output(prompt: str, check: CheckOutcome, command: str) -> str:
    """The run's prompt, followed by what the check found (data, not instructions)."""
    found = check.output[:OUTPUT_FOR_MODEL] or "(no output)"
    return (
        f"{prompt}\n\nThe routine's pre-check `{command}` found something to report; "
        f"its output:\n{wrap_untrusted('precheck', found)}"
    )
