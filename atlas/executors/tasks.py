"""Executor tasks: what `delegate` hands to Claude Code or Codex, driven to their end.

Each task is an instance of Atlas's on the workbench (atlas/executors/workbench.py), run in the
sandbox in its folder (atlas/executors/launch.py). Its events are mapped here:

- a question (AskUserQuestion, request_user_input) goes to the person as ask_user's questions,
  through the channel of the conversation that delegated it; with nobody to ask, the harness is
  told to decide by itself;
- a permission request goes to the person as an approval (allow once or deny), every time; a
  command the gate's hardline blocks is denied without asking; with nobody to ask, denied;
- the plan's limit hands the task over along its route: another account of the same executor
  goes on in a copy of the session, another executor starts fresh from a handoff packet
  (atlas/executors/handoff.py); with no route left it stops, to be resumed later;
- the end (its final result, a failure, the limit) comes back as a notice into that
  conversation, as a subagent's does; a routine's delegate waits for it instead.

Every turn goes into the delegation record when there is one (`record`: DelegationRecord,
atlas/executors/record.py), and every task is a row (`rows`: TaskRows,
atlas/executors/task_rows.py) written at each change that matters after a restart: a resume
after one rebuilds the task from its row; a task the daemon's stop cuts short ends
`interrupted`, to be reported at the next start (atlas/executors/restart.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from atlas.executors.accounts import hand_over, limit_state, observed_windows
from atlas.executors.asking import TaskAsking
from atlas.executors.base import (
    Account,
    Executor,
    ExecutorError,
    TaskSpec,
)
from atlas.executors.egress import task_host_asker
from atlas.executors.handoff import Handoff, diff_stat, folder_diff
from atlas.executors.task_model import (
    CONTINUE,
    Origin,
    Task,
    TurnRecord,
    detail,
    report,
    short,
)
from atlas.executors.task_rows import (
    CUT_BY_STOP,
    TaskRows,
    instance_of,
    is_ended,
    route_of,
    snapshot,
)
from atlas.executors.workbench import INTERRUPTED, Instance, Workbench, new_instance_id

if TYPE_CHECKING:
    from atlas.executors.registry import ExecutorSet
    from atlas.home import Home
    from atlas.tools.registry import RunContext

log = logging.getLogger(__name__)


class ExecutorTasks(TaskAsking):
    """A home's executor tasks and its workbench; one per running dispatcher, kept by its
    services (atlas/agents/services.py)."""

    def __init__(
        self,
        home: Home,
        *,
        executors: ExecutorSet | None = None,
        workbench: Workbench | None = None,
        record: TurnRecord | None = None,
        rows: TaskRows | None = None,
    ) -> None:
        self.home = home
        self._executors = executors
        self.workbench = workbench or Workbench()
        self.record = record
        self.rows = rows
        self._closing = False  # the daemon stops: a task cut now is interrupted, not stopped
        self.tasks: dict[str, Task] = {}
        self._logins: set[asyncio.Task[None]] = set()

    @property
    def executors(self) -> ExecutorSet:
        if self._executors is None:
            from atlas.executors.registry import ExecutorSet

            self._executors = ExecutorSet.for_home(self.home)
        return self._executors

    def targets(self) -> list[str]:
        return self.executors.targets()

    # ---- starting ----------------------------------------------------------------------------

    async def start(
        self,
        run: RunContext,
        target: str,
        folder: Path,
        goal: str,
        route: list[str] | None = None,
    ) -> Instance:
        """Start one task; it runs in the background. Raises ExecutorError (a wrong target or
        folder, a binary not found) before anything starts."""
        folder = await asyncio.to_thread(lambda: folder.expanduser().resolve())
        if not await asyncio.to_thread(folder.is_dir):
            raise ExecutorError(f"the task's folder {folder} does not exist (or is not a folder)")
        executor, account = self.executors.resolve(target, folder)
        for hop in route or []:
            self.executors.resolve(hop, None)  # a wrong name fails now, not at the limit
        task = Task(new_instance_id(), goal, folder, Origin.of(run), route, executor, account)
        await self._launch(task, TaskSpec(folder, goal, account, bot=task.origin.bot))
        self.workbench.add(
            Instance(
                task.id,
                executor.name,
                account.target,
                folder,
                title=short(goal.strip().splitlines()[0] if goal.strip() else "", 100),
                bot=task.origin.bot,
                conversation_id=task.origin.conversation_id,
                control=_Control(self, task.id),
            )
        )
        self.tasks[task.id] = task
        await self._save(task, "started")
        task.driver = asyncio.create_task(self._drive(task, goal), name=f"executor {task.id}")
        return self.workbench.get(task.id)  # type: ignore[return-value]

    async def resume(
        self,
        run: RunContext,
        instance_id: str,
        message: str,
        target: str | None = None,
        route: list[str] | None = None,
    ) -> Instance:
        """Continue an ended task's session with `message`: on its own account, or with
        `target` on another (a copy of the session, or a handoff packet to another executor)."""
        task = self.tasks.get(instance_id.strip()) or await self._restored(run, instance_id)
        if task is None:
            raise ExecutorError(
                f"no task {instance_id!r} of Atlas's to resume (see action=list; a session the "
                "person started is resumed where they started it)"
            )
        if not task.ended.is_set():
            raise ExecutorError(f"{task.id} is still running: steer it instead")
        task.origin = Origin.of(run)
        task.route = route if route is not None else task.route
        task.tried, task.hops = [], []
        prompt = message
        if target is None or self.executors.resolve(target, None)[1] == task.account:
            spec = TaskSpec(
                task.folder, message, task.account, task.session_id, bot=task.origin.bot
            )
            await self._launch(task, spec)
        else:
            executor, account = self.executors.resolve(target, None)
            why = f"it ended there and goes on on {account.target}"
            prompt = await self._move(task, executor, account, why, message)
        # Started: only now is it running again (a failed start leaves it as it ended).
        task.result, task.failure, task.limit, task.stop_reason = None, None, None, None
        task.ended = asyncio.Event()
        task.messages.append(f"user: {message}")
        await self._mark(task, "resumed", state="running", detail="", ended_at=None)
        task.driver = asyncio.create_task(self._drive(task, prompt), name=f"executor {task.id}")
        return self.workbench.get(task.id)  # type: ignore[return-value]

    async def _restored(self, run: RunContext, instance_id: str) -> Task | None:
        """A task of an earlier process, rebuilt from its row (it ended there, or was cut by
        its stop), back on the workbench; None when there is no such row."""
        row = await self.rows.get(instance_id) if self.rows is not None else None
        if row is None:
            return None
        if not is_ended(row):
            raise ExecutorError(f"{row['id']} is {row['state']} in another Atlas process")
        executor, account = self.executors.resolve(row["account"], None)
        task = Task(
            row["id"],
            row["goal"],
            Path(row["folder"]),
            Origin.of(run),
            route_of(row),
            executor,
            account,
            session_id=row.get("session_id"),
        )
        task.ended.set()
        control = _Control(self, task.id)
        if self.workbench.get(task.id) is None:
            self.workbench.add(instance_of(row, control))
        else:
            self.workbench.update(task.id, control=control)
        self.tasks[task.id] = task
        return task

    async def _launch(self, task: Task, spec: TaskSpec) -> None:
        # Hosts beyond the harness's own are asked of the person who delegated (egress.py).
        ask_host = task_host_asker(task, self.home.settings.trust.ask_timeout)
        task.instance = await task.executor.start(dataclasses.replace(spec, ask_host=ask_host))
        task.account = spec.account
        task.tried.append(spec.account.target)

    async def _move(
        self, task: Task, executor: Executor, account: Account, why: str, message: str = ""
    ) -> str:
        """Go on with `account`: a copy of the session on the same executor, else a fresh
        session from the handoff packet. Returns the prompt it started with."""
        same = executor.name == task.executor.name and task.session_id is not None
        if same:
            try:
                await asyncio.to_thread(
                    executor.copy_session, task.account, account, task.session_id, task.folder
                )
            except ExecutorError as exc:
                log.warning("executor %s: the session could not be copied (%s)", task.id, exc)
                same = False
        if same:
            prompt = f"{CONTINUE}\n\n{message}".strip() if message else CONTINUE
            spec = TaskSpec(
                task.folder, prompt, account, session_id=task.session_id, bot=task.origin.bot
            )
        else:
            packet = await self._packet(task, why)
            prompt = packet.prompt() + (f"\n\n# Now\n{message}" if message else "")
            spec = TaskSpec(task.folder, prompt, account, bot=task.origin.bot)
            task.session_id = None
        source = task.account.target
        task.executor = executor
        await self._launch(task, spec)
        task.hops.append(f"{source} → {account.target} ({why})")
        await self._mark(
            task, f"moved to {account.target}", executor=executor.name, account=account.target
        )
        return prompt

    async def _packet(self, task: Task, why: str) -> Handoff:
        return Handoff(
            goal=task.goal,
            folder=task.folder,
            source=task.account.target,
            reason=why,
            done=list(task.done),
            diff=await folder_diff(self.home, task.folder),
            questions=list(task.open_questions),
            last_messages=list(task.messages)[-6:],
        )

    # ---- driving -----------------------------------------------------------------------------

    async def _drive(self, task: Task, prompt: str) -> None:
        state = "failed"
        try:
            while True:
                await self._turn(task, prompt)
                if task.limit is None or task.stop_reason is not None:
                    break
                nxt = self._next(task)
                if nxt is None:
                    break
                why = f"{task.account.target} reached its plan's limit: {task.limit.message}"
                task.limit = None
                prompt = await self._move(task, *nxt, why=why)
            state = self._state(task)
        except asyncio.CancelledError:
            state = "stopped"
            task.stop_reason = task.stop_reason or "Atlas stopped"
            if task.instance is not None:
                await asyncio.shield(task.instance.stop())
            raise
        except ExecutorError as exc:
            task.failure = str(exc)
        except Exception as exc:  # one task's bug must not take the others with it
            log.exception("executor task %s crashed", task.id)
            task.failure = f"{type(exc).__name__}: {exc}"
        finally:
            await asyncio.shield(self._end(task, state))

    def _state(self, task: Task) -> str:
        if task.stop_reason is not None:
            return "stopped"
        if task.limit is not None:
            return "limit"
        if task.result is not None and not task.result.is_error and task.failure is None:
            return "done"
        return "failed"

    def _next(self, task: Task) -> tuple[Executor, Account] | None:
        """The next place on the route not tried yet, and not known to be at its limit."""
        order = task.route if task.route is not None else hand_over(task.executor, task.account)
        for target in order:
            try:
                executor, account = self.executors.resolve(target, None)
            except ExecutorError as exc:
                log.warning("executor %s: route %s skipped: %s", task.id, target, exc)
                continue
            if account.target in task.tried:
                continue
            observed = self.executors.book.observed(account.target)
            if limit_state(observed, observed_windows(observed))[0]:
                continue
            return executor, account
        return None

    async def _turn(self, task: Task, prompt: str) -> None:
        instance = task.instance
        assert instance is not None
        turn = await self._record(
            "start_turn",
            task.id,
            task.executor.name,
            task.account.target,
            str(task.folder),
            prompt,
            f"{task.origin.bot}:{task.origin.conversation_id}",
        )
        task.turn = turn
        state = "failed"
        try:
            async for event in instance.events():
                await self._event(task, instance, event, turn)
            state = self._state(task)
        finally:
            result = task.result
            usage = None
            if result is not None:
                usage = {**vars(result.usage), "cost_usd": result.cost_usd}
            final = result.text if result else (task.failure or "")
            await asyncio.shield(
                self._record(
                    "finish_turn",
                    turn,
                    final,
                    await diff_stat(self.home, task.folder),
                    usage,
                    "stopped" if task.stop_reason else state,
                )
            )

    # ---- the end -----------------------------------------------------------------------------

    async def _end(self, task: Task, state: str) -> None:
        if self._closing and state == "stopped":  # cut by the daemon's stop, not by anyone
            state = INTERRUPTED
        told = f"interrupted: {CUT_BY_STOP}" if state == INTERRUPTED else detail(task, state)
        self.workbench.update(task.id, state=state, detail=short(told, 200))
        summary = task.result.text if task.result is not None else task.failure
        await self._save(task, short(told, 200), summary)
        task.report = report(self.home, task, state, told)
        task.ended.set()
        notify = task.origin.notify
        if notify is None or task.origin.run_kind == "routine" or task.stop_reason:
            return  # the waiting call returns the report; a stop was the agent's own act
        try:
            await notify(task.report)
        except Exception:
            log.exception("executor %s: its notice could not be delivered", task.id)

    # ---- acting on a task --------------------------------------------------------------------

    async def wait(self, instance_ids: list[str]) -> str:
        """Until these tasks end; their reports (a routine's delegate)."""
        tasks = [self.tasks[i] for i in instance_ids if i in self.tasks]
        try:
            await asyncio.gather(*(t.ended.wait() for t in tasks))
        except asyncio.CancelledError:  # the waiting run was cancelled: its tasks stop too
            for task in tasks:
                if not task.ended.is_set():
                    task.stop_reason = "the run that started it was cancelled"
                    if task.driver is not None:
                        task.driver.cancel()
            raise
        return "\n\n".join(t.report for t in tasks)

    async def steer(self, instance_id: str, message: str) -> str:
        task = self.tasks.get(instance_id)
        if task is None or task.instance is None or task.ended.is_set():
            raise ExecutorError(
                f"{instance_id} is not running; to go on with its session, action=resume"
            )
        outcome = await task.instance.steer(message)
        task.messages.append(f"user: {message}")
        await self._record_latest(task, "steer", message)
        if outcome == "sent":
            return "sent into its running turn"
        return "queued: it goes on with it in the same session when its current turn ends"

    async def stop(self, instance_id: str, reason: str) -> None:
        task = self.tasks.get(instance_id)
        if task is None or task.ended.is_set():
            raise ExecutorError(f"{instance_id} is not running")
        task.stop_reason = reason
        if task.instance is not None:
            await task.instance.stop()
        if task.driver is not None:
            task.driver.cancel()
            await asyncio.gather(task.driver, return_exceptions=True)

    async def login(self, run: RunContext, target: str, email: str | None) -> str:
        """The harness's own login of an account (atlas/executors/login.py)."""
        from atlas.executors.login import start_login

        return await start_login(
            self.executors, target, email, run.notify, self._logins, run.ask_questions
        )

    async def close(self) -> None:
        """Stop every running task (the daemon is stopping): each ends `interrupted`, reported
        at the next start (atlas/executors/restart.py)."""
        self._closing = True
        running = [t for t in self.tasks.values() if not t.ended.is_set()]
        for task in running:
            task.stop_reason = "Atlas stopped"
            if task.driver is not None:
                task.driver.cancel()
        for login in self._logins:
            login.cancel()
        drivers = [t.driver for t in running if t.driver]
        await asyncio.gather(*drivers, *self._logins, return_exceptions=True)

    # ---- the rows -----------------------------------------------------------------------------

    async def _mark(self, task: Task, last_event: str, **changes: object) -> None:
        """Change the task's instance on the workbench, and its row."""
        self.workbench.update(task.id, **changes)
        await self._save(task, last_event)

    async def _save(self, task: Task, last_event: str, summary: str | None = None) -> None:
        """The task's row, as its instance is now; a failing write never stops a task (the
        workbench still has it; only a restart would lose it)."""
        instance = self.workbench.get(task.id)
        if self.rows is None or instance is None:
            return
        row = snapshot(
            instance,
            goal=task.goal,
            route=task.route,
            last_event=last_event,
            run_kind=task.origin.run_kind,
            result_summary=summary,
        )
        try:
            await self.rows.save(row)
        except Exception:
            log.exception("executors: the row of task %s could not be written", task.id)

    # ---- the record --------------------------------------------------------------------------

    async def _record(self, method: str, *args: Any) -> Any:
        """One call of the delegation record; a failing record never stops a task."""
        if self.record is None:
            return None
        try:
            return await getattr(self.record, method)(*args)
        except Exception:
            log.exception("executors: the delegation record failed (%s)", method)
            return None

    async def _record_latest(self, task: Task, kind: str, text: str) -> None:
        if task.turn is not None:
            await self._record("add", task.turn, kind, text)


class _Control:
    """The workbench's handle on one of Atlas's tasks."""

    def __init__(self, tasks: ExecutorTasks, instance_id: str) -> None:
        self.tasks, self.instance_id = tasks, instance_id

    async def steer(self, message: str) -> str:
        return await self.tasks.steer(self.instance_id, message)

    async def stop(self, reason: str) -> None:
        await self.tasks.stop(self.instance_id, reason)
