"""delegate's executor part: tasks handed to Claude Code or Codex, the workbench in `list`,
steer and stop by an instance's id, resume, and an account's login (docs/tools.md, delegate).

The work itself is atlas/executors/tasks.py's, reached through `run.services.executors`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from atlas.errors import ToolError
from atlas.executors.base import ExecutorError
from atlas.executors.workbench import describe
from atlas.tools.paths import resolve_path
from atlas.tools.services import NEEDS_DISPATCHER, ExecutorWork
from atlas.trust.gate import Ask

if TYPE_CHECKING:
    from atlas.tools.registry import RunContext

# Asked of the person every time, past the guardian and auto mode (atlas/trust/gate.py).
PERSON_INSTANCE_RULE = "workbench:person"
LOGIN_RULE = "workbench:login"

EXECUTOR_HELP = """
With an executor ({targets}): `executor` hands the tasks to it instead, each task with its
`folder` (its own instance on the workbench; the result comes back as a notice; its questions
and permission requests go to the user). `route`: target names where a task goes on when its
account reaches its plan's limit. action resume: subagent_id's session goes on with message
(executor: elsewhere); account: log the `executor` account in by the harness's own login
(`account`: an email), only when the user asks. list shows every instance (yours, the user's);
steer/stop take an instance's id."""


NO_EXECUTOR = (
    "no executor is turned on: set enabled = true under [executors.claude-code] or "
    "[executors.codex] in config.toml (docs/executors.md)"
)


def no_executor(run: RunContext) -> bool:
    """No executor is turned on: delegate hands work to subagents only."""
    return not any(settings.enabled for settings in run.home.settings.executors.values())


def describe_delegate(run: RunContext, base: str) -> str:
    """delegate's description, with the executor paragraph where one is turned on."""
    targets = []
    for name, settings in run.home.settings.executors.items():
        if settings.enabled:  # every account named where there are several
            several = len(settings.accounts) > 1
            targets += [f"{name}@{n}" for n in settings.accounts] if several else [name]
    if not targets:
        return base
    return base + "\n" + EXECUTOR_HELP.strip().format(targets=", ".join(targets))


def work(run: RunContext) -> ExecutorWork:
    if run.services is None:
        raise ToolError(NEEDS_DISPATCHER)
    executors = run.services.executors
    if executors is None:
        raise ToolError(NO_EXECUTOR)
    return executors


def _workbench(run: RunContext) -> ExecutorWork | None:
    return None if run.services is None else run.services.executors


async def spawn(
    run: RunContext,
    target: str,
    tasks: list[Any],
    route: list[str] | None,
    waits: bool,
) -> str:
    executors = work(run)
    missing = [t.goal[:60] for t in tasks if not t.folder]
    if missing:
        raise ToolError(f"with `executor`, each task needs its `folder` (missing: {missing})")
    started = []
    for task in tasks:
        goal = task.goal if not task.context else f"{task.goal}\n\n# Context\n{task.context}"
        try:
            folder = resolve_path(run, task.folder)  # as the gate judged it
            instance = await executors.start(run, target, folder, goal, route)
        except ExecutorError as exc:
            done = f" (started before it: {', '.join(i.id for i in started)})" if started else ""
            raise ToolError(f"{exc}{done}") from exc
        started.append(instance)
    if waits:
        return await executors.wait([i.id for i in started])
    lines = "\n".join(f"- {i.id}: {i.account} in {i.folder}: {i.title}" for i in started)
    return (
        f"Started {len(started)} executor task(s):\n{lines}\nEach one's result comes back as a "
        "notice when it ends; its questions and permission requests go to the user. Carry on "
        "meanwhile; do not wait or poll."
    )


async def resume(
    run: RunContext,
    instance_id: str | None,
    message: str | None,
    target: str | None,
    route: list[str] | None,
    waits: bool,
) -> str:
    if not instance_id or not message or not message.strip():
        raise ToolError("resume needs `subagent_id` (an executor task's id) and a `message`")
    executors = work(run)
    try:
        instance = await executors.resume(run, instance_id, message.strip(), target, route)
    except ExecutorError as exc:
        raise ToolError(str(exc)) from exc
    if waits:
        return await executors.wait([instance.id])
    return (
        f"{instance.id} goes on on {instance.account} in {instance.folder}; its result comes "
        "back as a notice."
    )


async def login(run: RunContext, target: str | None, email: str | None) -> str:
    if not target:
        raise ToolError("account needs `executor`: the account to log in (`claude-code@work`)")
    try:
        return await work(run).login(run, target, email)
    except ExecutorError as exc:
        raise ToolError(str(exc)) from exc


def workbench_lines(run: RunContext) -> list[str]:
    executors = _workbench(run)
    if executors is None:
        return []
    bench = executors.workbench.list()
    return [describe(i, run.bot.name, run.conversation_id) for i in bench]


async def act(run: RunContext, action: str, instance_id: str, message: str | None) -> str | None:
    """steer or stop an instance on the workbench; None when the id is not one (a subagent)."""
    executors = _workbench(run)
    instance = executors.workbench.get(instance_id) if executors is not None else None
    if instance is None:
        return None
    if instance.ended:  # first: one of an earlier process's, back from its row, has no control
        raise ToolError(
            f"{instance.id} has already ended ({instance.state}); to go on with it, action=resume"
        )
    if instance.control is None:
        raise ToolError(
            f"{instance.id} is the user's own session and Atlas cannot {action} it from here"
        )
    try:
        if action == "steer":
            if not message or not message.strip():
                raise ToolError("steer needs a `message`")
            how = await instance.control.steer(message.strip())
            return f"Sent to {instance.id}: {how}."
        await instance.control.stop(message or "no reason given")
    except ExecutorError as exc:
        raise ToolError(str(exc)) from exc
    return f"Stopped {instance.id}."


def gate_rule(args: dict[str, Any], run: RunContext) -> Ask | None:
    """The gate's question for delegate's acts that are the user's alone: acting on one of the
    user's own instances, and an account's login. Asked every time (never remembered)."""
    action = args.get("action")
    if action == "account":
        target = args.get("executor") or "an executor account"
        email = f" as {args['account']}" if args.get("account") else ""
        return Ask(
            f"Log {target} in{email} by the harness's own login (a link for your browser)? "
            "Only say yes if you asked for it.",
            LOGIN_RULE,
        )
    if action not in ("steer", "stop") or not args.get("subagent_id"):
        return None
    executors = _workbench(run)
    instance = executors.workbench.get(args["subagent_id"]) if executors is not None else None
    if instance is None or instance.owner != "person":
        return None
    said = f": {args['message']}" if args.get("message") else ""
    return Ask(
        f"Atlas wants to {action} your own {instance.executor} session {instance.id} in "
        f"{instance.folder}{said}. Allow?",
        PERSON_INSTANCE_RULE,
    )
