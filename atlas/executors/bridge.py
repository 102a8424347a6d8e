"""The daemon's side of the Claude Code plugin: an HTTP server on `<home>/run/executors.sock`
(a node's, `atlas run --node NAME`: `<home>/run/nodes/NAME/executors.sock`, atlas/run_files.py).

The plugin's hook (atlas/executors/claude_plugin/hooks/atlas_hook.py) posts every session event
of the person's own Claude Code sessions here: they go on the workbench as the person's
instances (owner `person`). A permission prompt is asked of the person through Atlas's approval
flow (atlas/executors/desk_approvals.py: the channel's buttons); the answer goes back to the
hook, which tells Claude Code. No answer within `[trust] ask_timeout`, nobody to ask, or
"answer at the desk": no decision, and Claude Code asks at the desk itself.

What arrives is untrusted (any process of the user may write to the socket): sizes are capped,
the JSON is checked strictly, and only a person's answer ever allows.

On a node, the channels asked through are the ones this node runs (the bots whose lease it
holds, atlas/cluster/home_node.py): with the approvals' channel elsewhere, Claude Code asks at
the desk as when there is none.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from aiohttp import web
from pydantic import BaseModel, ConfigDict, StringConstraints, ValidationError

from atlas.executors.desk_record import DeskEvent, DeskRecord
from atlas.executors.task_model import short
from atlas.executors.workbench import Instance, Workbench, new_instance_id
from atlas.run_files import run_dir

if TYPE_CHECKING:
    from atlas.channels.base import Address, Channel
    from atlas.executors.desk_approvals import StoreOf
    from atlas.executors.record import DelegationRecord
    from atlas.home import Home
    from atlas.pending_asks import PendingAsks
    from atlas.tools.registry import Asker

log = logging.getLogger(__name__)

EXECUTOR = "claude-code"
DEFAULT_CONFIG_DIR = "~/.claude"  # Claude Code's, without CLAUDE_CONFIG_DIR
SOCKET_NAME = "executors.sock"  # the hook looks for it by this name too
MAX_BODY = 1 << 20  # the hook sends at most this much too
MAX_WAIT = 590.0  # below hooks.json's 600 s: the answer reaches the hook before Claude Code's cut
ALLOW_ONCE, DENY, AT_THE_DESK = "allow once", "deny", "answer at the desk"
DENIED = "The person denied this from {where}, through Atlas."
SessionId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._:-]{1,200}$")]
Text = Annotated[str, StringConstraints(max_length=4096)]


def _cut(limit: int) -> Any:
    """A field that keeps its first `limit` characters (a prompt, a title) instead of failing."""
    from pydantic import BeforeValidator

    return BeforeValidator(lambda v: v[:limit] if isinstance(v, str) else v)


class HookEvent(BaseModel):
    """The fields Atlas reads of Claude Code's hook input; others (new versions add some) are
    ignored."""

    model_config = ConfigDict(extra="ignore", strict=True)

    hook_event_name: Literal[
        "SessionStart", "UserPromptSubmit", "Stop", "SessionEnd", "PermissionRequest"
    ]
    session_id: SessionId
    cwd: Text
    transcript_path: Text | None = None
    permission_mode: Annotated[str, StringConstraints(max_length=40)] | None = None
    source: Annotated[str, StringConstraints(max_length=40)] | None = None  # SessionStart
    session_title: Annotated[str | None, _cut(200)] = None
    reason: Annotated[str, StringConstraints(max_length=80)] | None = None  # SessionEnd
    prompt: Annotated[str | None, _cut(500)] = None  # UserPromptSubmit: the title, once
    tool_name: Annotated[str, StringConstraints(max_length=200)] | None = None
    tool_input: dict[str, Any] | None = None


class HookReport(BaseModel):
    """What the hook posts: Claude Code's event and the account's config folder."""

    model_config = ConfigDict(extra="forbid", strict=True)

    hook: HookEvent
    config_dir: Text | None = None


AskerSource = Callable[[], Awaitable["tuple[Asker, Address] | None"]]
WorkbenchSource = Callable[[], "Workbench | None"]


class ExecutorBridge:
    """The plugin's server. `workbench()` is looked up at each event (delegate makes it on first
    use); `asker()` says whom to ask a permission prompt, at each prompt."""

    def __init__(
        self,
        home: Home,
        workbench: WorkbenchSource,
        asker: AskerSource,
        *,
        wait_seconds: float | None = None,
        desk_record: DeskRecord | None = None,
        node: str | None = None,
    ) -> None:
        self.home = home
        self.workbench = workbench
        self.asker = asker
        self.desk_record = desk_record  # the person's turns into the delegation record
        self.wait_seconds = min(wait_seconds or home.settings.trust.ask_timeout, MAX_WAIT)
        self.path = socket_path(home, node)
        self._runner: web.AppRunner | None = None

    # ---- serving -----------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post("/v1/session", self._session)
        app.router.add_post("/v1/permission", self._permission)
        return app

    async def start(self) -> None:
        """Listen on the socket (0600, in a 0700 folder). Raises OSError when it cannot: another
        daemon serves it, or the path is too long for a Unix socket."""
        await asyncio.to_thread(_prepare_socket, self.path)
        # A hook that gives up (Claude Code's timeout, Esc) cancels the question it waits on.
        runner = web.AppRunner(self.app(), access_log=None, handler_cancellation=True)
        await runner.setup()
        try:
            await web.UnixSite(runner, str(self.path)).start()
            await asyncio.to_thread(os.chmod, self.path, 0o600)
        except OSError:
            await runner.cleanup()
            raise
        self._runner = runner
        log.info("the Claude Code plugin's socket: %s", self.path)

    async def stop(self) -> None:
        if self.desk_record is not None:
            await self.desk_record.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        with contextlib.suppress(FileNotFoundError):
            await asyncio.to_thread(self.path.unlink)

    # ---- routes ------------------------------------------------------------------------------

    async def _read(self, request: web.Request) -> HookReport:
        try:
            data = json.loads(await request.read())
            return HookReport.model_validate(data)
        except (ValueError, ValidationError) as exc:
            # Shown as the reason, never echoed back with the input.
            raise web.HTTPBadRequest(
                text=f"not a hook report Atlas reads: {type(exc).__name__}"
            ) from None

    async def _session(self, request: web.Request) -> web.Response:
        report = await self._read(request)
        instance = self.report(report)
        if self.desk_record is not None and instance is not None:
            event = report.hook
            self.desk_record.note(
                DeskEvent(
                    event.hook_event_name,
                    instance,
                    event.session_id,
                    event.prompt or "",
                    report.config_dir,
                )
            )
        return web.json_response({})

    async def _permission(self, request: web.Request) -> web.Response:
        report = await self._read(request)
        if report.hook.hook_event_name != "PermissionRequest" or not report.hook.tool_name:
            raise web.HTTPBadRequest(text="a permission request needs a PermissionRequest event")
        decision, message = await self.decide(report)
        return web.json_response({"decision": decision, "message": message})

    # ---- the workbench -----------------------------------------------------------------------

    def report(self, report: HookReport) -> Instance | None:
        """Put the session's event on the workbench; None for Atlas's own sessions (or no
        workbench)."""
        bench = self.workbench()
        if bench is None:
            return None
        event = report.hook
        instance = bench.find_session(event.session_id)
        if instance is not None and instance.owner != "person":
            return None  # Atlas's own run: its task keeps its instance up to date
        if instance is None:
            instance = bench.add(
                Instance(
                    new_instance_id(),
                    EXECUTOR,
                    account_name(self.home, report.config_dir),
                    Path(event.cwd),
                    state="idle",
                    owner="person",
                    session_id=event.session_id,
                    title=short(event.session_title or "", 100),
                )
            )
        changes: dict[str, Any] = {}
        name = event.hook_event_name
        if name == "SessionStart":
            changes = {"state": "idle", "detail": "at the desk, waiting for a prompt"}
            changes["ended_at"] = None
        elif name == "UserPromptSubmit":
            changes = {"state": "running", "detail": ""}
            if not instance.title and event.prompt and event.prompt.strip():
                changes["title"] = short(event.prompt.strip().splitlines()[0], 100)
        elif name == "Stop":
            changes = {"state": "idle", "detail": "its turn ended; waiting at the desk"}
        elif name == "SessionEnd":
            changes = {"state": "done", "detail": f"ended ({event.reason or 'other'})"}
        if event.session_title and event.session_title != instance.title:
            changes["title"] = short(event.session_title, 100)
        return bench.update(instance.id, **changes) if changes else instance

    async def decide(self, report: HookReport) -> tuple[str | None, str]:
        """`allow`, `deny` (with the message for Claude) or None: Claude Code asks at the desk."""
        event = report.hook
        instance = self.report(report)
        bench = self.workbench()
        if bench is not None and instance is None:
            return None, ""  # Atlas's own session: never the plugin's to answer
        found = await self.asker()
        if found is None:
            return None, ""
        ask, where = found
        label = instance.id if instance is not None else "a Claude Code session"
        account = instance.account if instance is not None else account_name(self.home, None)
        question = (
            f"{label} (your own Claude Code session, {account}, in {event.cwd}) wants to use "
            f"{event.tool_name}: {shown_input(event.tool_input)}\nAllow?"
        )
        if instance is not None and bench is not None:
            bench.update(instance.id, state="asking", detail=f"wants to use {event.tool_name}")
        try:
            answer = await asyncio.wait_for(
                ask(question, [ALLOW_ONCE, DENY, AT_THE_DESK]), self.wait_seconds
            )
        except TimeoutError:
            answer = None
        finally:
            if instance is not None and bench is not None:
                bench.update(instance.id, state="running", detail="")
        log.info(
            "Claude Code session %s: %s %s -> %s",
            event.session_id,
            event.tool_name,
            short(shown_input(event.tool_input), 80),
            answer or "no answer (asked at the desk)",
        )
        self._record_answer(report, instance, answer)
        if answer == ALLOW_ONCE:
            return "allow", ""
        if answer == DENY:
            return "deny", DENIED.format(where=where.channel)
        return None, ""

    def _record_answer(
        self, report: HookReport, instance: Instance | None, answer: str | None
    ) -> None:
        """The prompt and what came of it, in the session's turn of the delegation record."""
        if self.desk_record is None or instance is None:
            return
        event = report.hook
        shown = f"{event.tool_name} {short(shown_input(event.tool_input), 1500)}"
        verdict = {
            ALLOW_ONCE: "allowed",
            DENY: "denied",
            AT_THE_DESK: "left to the desk",
        }.get(answer or "", "no answer in time: asked at the desk")
        who = "the person" if answer is not None else "nobody (no answer in time)"
        self.desk_record.note(
            DeskEvent(
                "PermissionRequest",
                instance,
                event.session_id,
                f"wants to use {shown}",
                report.config_dir,
                answer=f"{shown}: {verdict}",
                who=who,
            )
        )


async def serve_plugin(
    home: Home,
    channels: Mapping[str, Channel],
    store_of: StoreOf,
    workbench: WorkbenchSource,
    record: DelegationRecord | None = None,
    asks: PendingAsks | None = None,
    node: str | None = None,
) -> ExecutorBridge | None:
    """`atlas run`'s bridge, while `[executors.claude-code]` is on; None when it is off or its
    socket cannot be served (logged: the daemon runs on, the hooks fall back to the desk). With
    `record`, the person's turns go into the delegation record too; with `node`, on that
    node's socket."""
    from atlas.executors.desk_approvals import DeskApprovals

    settings = home.settings.executors.get(EXECUTOR)
    if settings is None or not settings.enabled:
        return None
    approvals = DeskApprovals(settings, home.settings.main, channels, store_of, asks)
    desk_record = DeskRecord(record, home) if record is not None else None
    bridge = ExecutorBridge(home, workbench, approvals.asker, desk_record=desk_record, node=node)
    try:
        await bridge.start()
    except OSError as exc:
        log.error("the Claude Code plugin's socket %s cannot be served: %s", bridge.path, exc)
        return None
    return bridge


def socket_path(home: Home, node: str | None = None) -> Path:
    """The plain daemon's `run/executors.sock`, or the node's in its own run folder: nodes
    sharing one home folder each serve their own (a Unix socket answers on its machine only)."""
    return run_dir(home.root, node) / SOCKET_NAME


def _prepare_socket(path: Path) -> None:
    """The folder (0700), and no stale socket left by a crash; refuses a live one."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    if not path.exists():
        return
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        path.unlink()  # nobody answers: a crashed daemon's
        return
    finally:
        probe.close()
    raise OSError(f"{path} is served by another process (is another `atlas run` using this home?)")


def account_name(home: Home, config_dir: str | None) -> str:
    """The target name of the account whose config folder the session runs in, when config
    lists it; else `claude-code (<folder>)`."""
    from atlas.executors.accounts import accounts_of, expand

    settings = home.settings.executors.get(EXECUTOR)
    default = DEFAULT_CONFIG_DIR
    folder = expand(config_dir or default)
    if settings is not None:
        for account in accounts_of(EXECUTOR, settings, default):
            if account.config_dir == folder:
                return account.target
    return f"{EXECUTOR} ({config_dir or default})"


def shown_input(tool_input: dict[str, Any] | None) -> str:
    """What the person sees of the tool's input: the command or the file, else its JSON."""
    data = tool_input or {}
    for key in ("command", "file_path", "url", "pattern"):
        if isinstance(data.get(key), str):
            return short(data[key], 1500)
    return short(json.dumps(data, ensure_ascii=False), 1500)
