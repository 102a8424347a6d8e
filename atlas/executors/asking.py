"""An executor task's events, taken in: what it did (for the handoff packet and the notice),
its end, and what it asks, put to the person: its questions as ask_user's, its permission
requests as approvals asked every time (atlas/executors/tasks.py uses this mixin)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from atlas.executors.base import (
    AssistantText,
    Decision,
    ExecutorError,
    ExecutorInstance,
    Failure,
    LimitReached,
    PermissionRequest,
    Question,
    Result,
    SessionStarted,
    ToolResult,
    ToolUse,
)
from atlas.executors.task_model import NO_ANSWER, Task, short, tool_line

if TYPE_CHECKING:
    from atlas.executors.workbench import Workbench
    from atlas.home import Home

ALLOW_ONCE, DENY = "allow once", "deny"  # the gate's words for what is asked every time
HARDLINE_SECONDS = 2.0


class TaskAsking:
    """Taking in a task's events; needs `home`, `workbench`, `_record` and `_mark`."""

    home: Home
    workbench: Workbench

    async def _record(self, method: str, *args: Any) -> Any:
        raise NotImplementedError

    async def _mark(self, task: Task, last_event: str, **changes: object) -> None:
        """The workbench's instance and the task's row (ExecutorTasks._mark)."""
        raise NotImplementedError

    async def _event(self, task: Task, instance: ExecutorInstance, event: Any, turn: Any) -> None:
        if isinstance(event, SessionStarted):
            task.session_id = event.session_id
            await self._mark(task, f"session {event.session_id}", session_id=event.session_id)
        elif isinstance(event, AssistantText):
            task.messages.append(f"assistant: {event.text}")
        elif isinstance(event, ToolUse):
            task.done.append(tool_line(event))
        elif isinstance(event, ToolResult) and event.is_error and task.done:
            task.done[-1] += f" (failed: {short(event.output, 80)})"
        elif isinstance(event, Question):
            await self._question(task, instance, event, turn)
        elif isinstance(event, PermissionRequest):
            await self._permission(task, instance, event, turn)
        elif isinstance(event, Result):
            task.result, task.failure = event, None
            await self._record("add", turn, "final", event.text)
        elif isinstance(event, LimitReached):
            task.limit = event
            await self._record("add", turn, "error", event.message)
        elif isinstance(event, Failure):
            task.failure = event.message
            await self._record("add", turn, "error", event.message)

    async def _question(
        self, task: Task, instance: ExecutorInstance, event: Question, turn: Any
    ) -> None:
        from atlas.channels.base import Question as Asked

        texts = [item.question for item in event.questions]
        task.open_questions.extend(texts)
        for text in texts:
            await self._record("add", turn, "question", text)
        asks = f"asks: {short(texts[0])}"
        await self._mark(task, asks, state="asking", detail=asks)
        asked = [
            Asked(
                f"{task.id} ({task.account.target}, {task.folder.name}) asks: {item.question}",
                item.choices[:4],
                item.multi_select,
            )
            for item in event.questions
        ]
        answers: dict[str, str] = {}
        why = "nobody can be asked from where it was delegated"
        who = None
        try:
            if task.origin.ask_questions is not None:
                outcome = await task.origin.ask_questions(asked)
                if outcome.status == "submitted":
                    for item, answer in zip(event.questions, outcome.answers, strict=False):
                        picked = [*answer.chosen, *([answer.other] if answer.other else [])]
                        answers[item.question] = ", ".join(picked)
                        who = answer.by or "the person"
                else:
                    why = f"{outcome.status}{': ' + outcome.detail if outcome.detail else ''}"
            elif task.origin.ask is not None:  # a channel with approvals only: one at a time
                for item, put in zip(event.questions, asked, strict=True):
                    reply = await task.origin.ask(put.text, list(put.choices) or ["OK"])
                    if reply is not None:
                        answers[item.question], who = reply, "the person"
        finally:
            self.workbench.update(task.id, state="running", detail="")
        if answers:
            for question, answer in answers.items():
                await self._record("add", turn, "answer", f"{question}: {answer}", who)
                if question in task.open_questions:
                    task.open_questions.remove(question)
            await instance.answer(event.request_id, answers)
            return
        await self._record("add", turn, "answer", NO_ANSWER.format(why=why), "nobody")
        try:
            await instance.answer(event.request_id, Decision(False, NO_ANSWER.format(why=why)))
        except ExecutorError:  # a harness that takes only text answers (Codex)
            await instance.answer(event.request_id, {q: NO_ANSWER.format(why=why) for q in texts})

    async def _permission(
        self, task: Task, instance: ExecutorInstance, event: PermissionRequest, turn: Any
    ) -> None:
        shown = short(dict(event.input).get("command") or dict(event.input), 1500)
        blocked = await self._hardline(event, task.folder)
        if blocked:
            decision = Decision(False, f"refused by Atlas's rules: {blocked}")
            who = "rule"
        elif task.origin.ask is None:
            decision = Decision(False, "nobody can approve this where the task was delegated")
            who = "nobody"
        else:
            wants = f"wants to run {event.tool}"
            await self._mark(task, wants, state="asking", detail=wants)
            question = (
                f"{task.id} ({task.account.target}, in {task.folder}) wants to use "
                f"{event.tool}: {shown}"
                + (f"\n({event.reason})" if event.reason else "")
                + "\nAllow?"
            )
            try:
                answer = await asyncio.wait_for(
                    task.origin.ask(question, [ALLOW_ONCE, DENY]),
                    self.home.settings.trust.ask_timeout,
                )
            except TimeoutError:
                answer = None
            finally:
                self.workbench.update(task.id, state="running", detail="")
            allowed = answer == ALLOW_ONCE
            decision = Decision(allowed, "" if allowed else "the person did not allow it")
            who = "the person" if answer is not None else "nobody (no answer in time)"
        verdict = "allowed" if decision.allow else f"denied ({decision.message})"
        await self._record("add", turn, "answer", f"{event.tool} {shown}: {verdict}", who)
        await instance.answer(event.request_id, decision)

    async def _hardline(self, event: PermissionRequest, folder: Path) -> str | None:
        """Why the gate's rules block this command outright; None when they do not (asked)."""
        command = dict(event.input).get("command")
        if not isinstance(command, str):
            return None
        from atlas.trust.rules import classify

        try:
            verdict = await asyncio.wait_for(
                asyncio.to_thread(
                    classify,
                    command,
                    auto=False,
                    deny=self.home.settings.trust.deny,
                    home=self.home.root,
                    cwd=folder,
                ),
                HARDLINE_SECONDS,
            )
        except Exception:  # judged by the person instead
            return None
        return verdict.reason if verdict.verdict == "block" else None
