"""What the person does on the dashboard, recorded in the gate's log (run_kind "dashboard",
answered by the user), as a mode change is: a routine run or paused, a memory or skill
edited, an executor steered or stopped."""

from __future__ import annotations

from atlas.store.home_db import GateRecord, HomeStore


async def record_action(
    audit: HomeStore,
    bot: str,
    tool: str,
    summary: str,
    reason: str,
    *,
    rule: str = "dashboard:person",
    conversation_id: int = 0,
) -> None:
    await audit.record_decision(
        GateRecord(
            bot=bot,
            conversation_id=conversation_id,
            run_kind="dashboard",
            tool=tool,
            arguments_digest="",
            summary=summary,
            verdict="allow",
            rule=rule,
            reason=reason,
            answered_by="user",
        )
    )
