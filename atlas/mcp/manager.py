"""Connections to the home's MCP servers: one keeper task per server, retried with backoff.

The SDK's context managers (the transport, the ClientSession) run anyio task groups, which must
be entered and exited in the same task; so each server has one keeper task that connects, lists
the tools, holds the session open, notices when it is lost (a failed ping, a call that found the
connection closed, the transport failing), and connects again. Turns call tools on the session
from their own tasks, which the SDK allows. A server that is down costs the bot its tools, never
the turn: a call answers with an error the model reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO

from atlas.errors import ConfigError
from atlas.mcp.config import (
    HttpServer,
    McpConfig,
    McpServer,
    StdioServer,
    load_mcp_config,
    mcp_config_path,
)
from atlas.mcp.launch import stdio_parameters
from atlas.mcp.launchers import ProgramMissing
from atlas.mcp.refusals import explain_refusals
from atlas.mcp.tools import McpTool, make_tool, registry_with_mcp, to_tool_result
from atlas.sandbox.egress_watch import ChannelWatch
from atlas.tools.registry import RunContext, Tool, ToolRegistry, ToolResult

if TYPE_CHECKING:
    from mcp import ClientSession

    from atlas.config import McpSettings
    from atlas.home import Bot, Home

log = logging.getLogger(__name__)

ServerState = Literal["starting", "ready", "failed", "stopped"]
_LOG_MARK = "--- started "  # heads each run of a stdio server in its log file
STABLE_AFTER = 60.0  # seconds connected before a later loss counts as a first failure again


@dataclass(frozen=True)
class McpTimeouts:
    connect: float = 30.0  # starting the server and the MCP handshake
    call: float = 300.0  # one tool call
    ping_interval: float = 30.0  # how often a quiet connection is checked
    ping: float = 10.0  # how long a ping may take
    retry_base: float = 1.0  # first wait before reconnecting; doubles each failure
    retry_max: float = 300.0  # the longest wait between attempts

    @classmethod
    def from_settings(cls, settings: McpSettings) -> McpTimeouts:
        """The [mcp] table of config.toml; the ping and first backoff are not settings."""
        return cls(
            connect=settings.connect_timeout,
            call=settings.call_timeout,
            retry_max=settings.retry_max_delay,
        )


@dataclass(frozen=True)
class ServerStatus:
    """What `atlas doctor` and the logs say about one server."""

    name: str
    state: ServerState
    tools: int
    error: str | None
    failures: int
    next_attempt: datetime | None


class _Lost(Exception):
    """The connection to a server is gone; the keeper reconnects."""


@dataclass
class _Link:
    """One server: its keeper task, its live session, its last known tools."""

    server: McpServer
    state: ServerState = "starting"
    session: ClientSession | None = None
    tools: list[McpTool] = field(default_factory=list)  # kept while down: the tool list is stable
    error: str | None = None
    failures: int = 0
    next_attempt: datetime | None = None
    lost: str | None = None  # why a call found the connection gone
    relist: bool = False  # the server said its tools changed
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    settled: asyncio.Event = field(default_factory=asyncio.Event)  # first attempt done
    connected: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    egress: ChannelWatch | None = None  # this attempt's proxy channel: extra hosts, refusals

    @property
    def name(self) -> str:
        return self.server.name


def _describe(exc: BaseException) -> str:
    """The innermost useful message of an exception (anyio wraps failures in groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    message = str(exc) or type(exc).__name__
    plain = isinstance(exc, _Lost | ProgramMissing)  # already in Atlas's words
    return message if plain else f"{type(exc).__name__}: {message}"


def _log_tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ""
    start = text.rfind(_LOG_MARK)
    if start >= 0:  # this run's lines only, without the marker
        text = text[start:].partition("\n")[2]
    tail = [line for line in text.splitlines() if line.strip()][-lines:]
    return "\n".join(tail)


class McpManager:
    """The home's MCP servers: started together, kept alive, their tools offered per bot."""

    def __init__(
        self,
        home: Home,
        *,
        config: McpConfig | None = None,
        timeouts: McpTimeouts | None = None,
    ) -> None:
        self.home = home
        self.config = config if config is not None else load_mcp_config(mcp_config_path(home))
        self.timeouts = timeouts or McpTimeouts.from_settings(home.settings.mcp)
        # Only the servers a bot of this process may use: with worker processes, each starts
        # its own bots' servers, not every server of the home once per process.
        needed = {server.name for bot in home.served_bots() for server in self.config.for_bot(bot)}
        self._links = {
            name: _Link(server) for name, server in self.config.servers.items() if name in needed
        }
        self._stopping = False
        self.generation = 0  # goes up whenever a server's tools change
        self._registry: tuple[ToolRegistry, int, ToolRegistry] | None = None
        for bot in home.bots.values():
            for name in self.config.unknown_for_bot(bot):
                log.warning(
                    "%s: mcp_servers names %r, which %s does not define; ignored",
                    bot.root / "bot.toml",
                    name,
                    self.config.path,
                )

    @property
    def logs_dir(self) -> Path:
        """Where stdio servers' stderr goes (one file per server), out of the terminal."""
        return self.home.root / "logs" / "mcp"

    async def start(self, wait: float | None = None) -> None:
        """Connect every server concurrently; wait up to `wait` seconds (default: [mcp]
        startup_wait) for the first attempts, so the first turn sees the tools (a slow server
        joins when it is ready)."""
        if wait is None:
            wait = self.home.settings.mcp.startup_wait
        self._stopping = False
        for link in self._links.values():
            if link.task is None or link.task.done():
                link.task = asyncio.create_task(self._keep(link), name=f"mcp:{link.name}")
        if wait and self._links:
            settled = [asyncio.create_task(link.settled.wait()) for link in self._links.values()]
            done, pending = await asyncio.wait(settled, timeout=wait)
            for task in pending:
                task.cancel()
            slow = [link.name for link in self._links.values() if not link.settled.is_set()]
            if slow:
                log.info("MCP servers still starting after %.0f s: %s", wait, ", ".join(slow))

    async def stop(self, timeout: float = 10.0) -> None:
        """Close every session and stop every server (each keeper exits its own contexts)."""
        self._stopping = True
        tasks = [link.task for link in self._links.values() if link.task is not None]
        for link in self._links.values():
            link.wake.set()
        if not tasks:
            return
        done, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:  # a server that will not close is abandoned, not waited for
            log.warning(
                "MCP server %s did not close within %.0f s; cancelled", task.get_name(), timeout
            )
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for link in self._links.values():
            link.task = None
            link.state = "stopped"

    async def wait_connected(self, server: str, timeout: float) -> bool:
        """True once `server` is connected (again), False after `timeout` seconds."""
        link = self._links[server]
        try:
            await asyncio.wait_for(link.connected.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def status(self) -> list[ServerStatus]:
        return [
            ServerStatus(
                link.name, link.state, len(link.tools), link.error, link.failures, link.next_attempt
            )
            for link in self._links.values()
        ]

    def tools_for(self, bot: Bot) -> list[Tool]:
        """The tools of the servers a bot may use, in mcp.json's order then each server's."""
        tools: list[Tool] = []
        for server in self.config.for_bot(bot):
            tools.extend(self._links[server.name].tools)
        return tools

    def all_tools(self) -> list[Tool]:
        """Every server's tools; each answers for itself whether a bot may use it."""
        return [t for link in self._links.values() for t in link.tools]

    def registry_over(self, base: ToolRegistry) -> ToolRegistry:
        """`base` then every MCP tool: one registry for every bot, rebuilt only when a
        server's tools change (McpTool.unavailable_reason keeps each bot to its servers)."""
        cached = self._registry
        if cached is None or cached[0] is not base or cached[1] != self.generation:
            tools = self.all_tools()
            cached = (base, self.generation, registry_with_mcp(base, tools, self.why_missing))
            self._registry = cached
        return cached[2]

    def why_missing(self, name: str) -> str | None:
        """Why `mcp__<server>__<tool>` is not a tool now: its server is down, or never listed
        it; None for a name that is no MCP server's."""
        for link in self._links.values():
            if name.startswith(f"mcp__{link.name}__"):
                if link.session is None:
                    return f"its MCP server {link.name!r} is {self._why_down(link)}"
                return f"MCP server {link.name!r} has no such tool (it lists {len(link.tools)})"
        if name.startswith("mcp__"):
            configured = ", ".join(self.config.servers) or "none"
            return f"no MCP server of this process has it (mcp.json's servers: {configured})"
        return None

    async def call(
        self, server: str, tool: str, arguments: dict[str, Any], run: RunContext
    ) -> ToolResult:
        """Call a tool on a server; every failure is an error result naming the server."""
        import anyio
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        link = self._links[server]
        name = next((t.name for t in link.tools if t.remote_name == tool), tool)
        session = link.session
        if session is None:
            return ToolResult(
                f"Error: MCP server {server!r} is {self._why_down(link)}", is_error=True
            )
        try:
            result = await session.call_tool(
                tool, arguments, read_timeout_seconds=self.timeouts.call
            )
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                return ToolResult(
                    f"Error: MCP server {server!r} did not answer {tool} within "
                    f"{self.timeouts.call:.0f} s",
                    is_error=True,
                )
            if exc.code == CONNECTION_CLOSED:
                return self._lost_during_call(link, "the connection closed during the call")
            return ToolResult(
                f"Error: MCP server {server!r} refused the call to {tool}: {exc.message}",
                is_error=True,
            )
        except (OSError, RuntimeError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            # The transport broke under the call.
            return self._lost_during_call(link, _describe(exc))
        return to_tool_result(name, server, result, run.supports_images)

    def _lost_during_call(self, link: _Link, why: str) -> ToolResult:
        if link.session is not None and link.lost is None:
            link.lost = why
            link.session = None  # later calls fail fast instead of trying the dead session
            link.connected.clear()
            link.wake.set()  # the keeper reconnects now rather than at the next ping
        return ToolResult(
            f"Error: MCP server {link.name!r} failed: {why} (it may have crashed). Atlas is "
            "restarting it; try again in a moment.",
            is_error=True,
        )

    def _why_down(self, link: _Link) -> str:
        if link.state == "stopped" or self._stopping:
            return "stopped"
        if link.state != "failed":
            last = f" (last error: {link.error})" if link.error else ""
            return f"connecting{last}; try again in a moment"
        when = ""
        if link.next_attempt:
            seconds = max(0, (link.next_attempt - datetime.now(UTC)).total_seconds())
            when = f"; Atlas retries in {seconds:.0f} s"
        return f"not connected (last error: {link.error}){when}"

    async def _keep(self, link: _Link) -> None:
        """Connect, serve until lost, wait with backoff, connect again; until stop()."""
        while not self._stopping:
            link.state, link.lost = "starting", None
            started = time.monotonic()
            try:
                await self._serve(link)
            except ConfigError as exc:  # a missing ${VAR}: retrying cannot help
                self._fail(link, str(exc), retry=None)
                return
            except Exception as exc:  # a foreign server's fault must never reach the daemon
                if self._stopping:
                    break
                if time.monotonic() - started >= STABLE_AFTER:
                    link.failures = 0
                link.failures += 1
                delay = min(
                    self.timeouts.retry_base * 2 ** (link.failures - 1), self.timeouts.retry_max
                )
                self._fail(link, self._failure_message(link, exc), retry=delay)
                await self._pause(link, delay)
        link.state, link.session = "stopped", None

    async def _pause(self, link: _Link, seconds: float) -> None:
        """Wait before the next attempt; stop() ends the wait."""
        link.wake.clear()
        if self._stopping:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(link.wake.wait(), seconds)

    def _fail(self, link: _Link, message: str, retry: float | None) -> None:
        was_ready = link.state == "ready"
        link.session = None
        link.state, link.error = "failed", message
        link.connected.clear()
        link.settled.set()
        link.next_attempt = datetime.now(UTC) + timedelta(seconds=retry) if retry else None
        verb = "disconnected" if was_ready else "failed to start"
        then = f"; retrying in {retry:.1f} s" if retry is not None else "; not retried"
        log.warning("MCP server %s %s: %s%s", link.name, verb, message, then)

    def _failure_message(self, link: _Link, exc: Exception) -> str:
        message = link.lost or _describe(exc)
        if link.egress is not None and link.egress.refusals:
            message = f"{explain_refusals(link.server, link.egress.refusals)}\n  ({message})"
        if isinstance(link.server, StdioServer):
            tail = _log_tail(self.logs_dir / f"{link.name}.log")
            if tail:
                message += f"\n  last lines of {self.logs_dir / f'{link.name}.log'}:\n{tail}"
        return message

    async def _serve(self, link: _Link) -> None:
        """One connection's life: open, list tools, watch; raises _Lost when it ends."""
        from mcp import ClientSession

        server = link.server.expanded(self.home.root)
        async with contextlib.AsyncExitStack() as stack:
            read, write = await stack.enter_async_context(self._transport(link, server))
            session = await stack.enter_async_context(
                ClientSession(read, write, message_handler=self._message_handler(link))
            )
            with _deadline(self.timeouts.connect, "the MCP handshake"):
                await session.initialize()
                await self._list(link, server, session)
            if link.egress is not None and isinstance(server, StdioServer):
                # Installed and answering: the launcher's registries are no longer needed.
                link.egress.also_allowed = tuple(server.allowed_domains)
            link.session, link.state, link.error, link.next_attempt = session, "ready", None, None
            link.connected.set()
            link.settled.set()
            log.info("MCP server %s ready: %d tool(s)", link.name, len(link.tools))
            try:
                await self._watch(link, session)
            finally:
                link.session = None
                link.connected.clear()

    @contextlib.asynccontextmanager
    async def _transport(self, link: _Link, server: McpServer) -> AsyncIterator[tuple[Any, Any]]:
        if isinstance(server, HttpServer):
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            timeout = httpx2.Timeout(self.timeouts.connect, read=max(self.timeouts.call, 300.0))
            async with (
                httpx2.AsyncClient(headers=server.headers, timeout=timeout) as http,
                streamable_http_client(server.url, http_client=http) as streams,
            ):
                yield streams
            return
        from mcp.client.stdio import stdio_client

        # The server's stderr goes to a file: in `atlas chat` it would write over the terminal.
        errlog = await asyncio.to_thread(self._open_log, server.name)
        link.egress = ChannelWatch()
        try:
            async with (
                stdio_parameters(
                    self.home, server, link.egress
                ) as params,  # in the sandbox, unless opted out
                stdio_client(params, errlog=errlog) as streams,
            ):
                yield streams
        finally:
            errlog.close()

    def _open_log(self, name: str) -> TextIO:
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        errlog = open(self.logs_dir / f"{name}.log", "a", encoding="utf-8")  # noqa: SIM115
        errlog.write(f"{_LOG_MARK}{datetime.now(UTC).isoformat()} ---\n")
        errlog.flush()
        return errlog

    async def _list(self, link: _Link, server: McpServer, session: ClientSession) -> None:
        listed = await _list_tools(session)
        untrusted = server.trust == "untrusted"
        link.tools = [
            make_tool(link.name, untrusted, server.always_load, t, self.call) for t in listed
        ]
        self.generation += 1

    def _message_handler(self, link: _Link) -> Any:
        async def on_message(message: Any) -> None:
            from mcp_types import ToolListChangedNotification

            if isinstance(message, ToolListChangedNotification):
                link.relist = True
                link.wake.set()  # the keeper lists again, in its own task
            elif isinstance(message, Exception):
                log.debug("MCP server %s: transport error: %s", link.name, _describe(message))

        return on_message

    async def _watch(self, link: _Link, session: ClientSession) -> None:
        """Wait for stop(), a call that found the connection gone, or a failed ping; list the
        tools again when the server says they changed."""
        while True:
            link.wake.clear()
            if self._stopping:
                return
            if link.lost:
                raise _Lost(link.lost)
            if link.relist:
                link.relist = False
                with _deadline(self.timeouts.connect, "listing the tools"):
                    await self._list(link, link.server, session)
                log.info("MCP server %s: tools changed, now %d", link.name, len(link.tools))
            try:
                await asyncio.wait_for(link.wake.wait(), self.timeouts.ping_interval)
                continue
            except TimeoutError:
                pass
            try:
                with _deadline(self.timeouts.ping, "a ping"):
                    await session.send_ping()
            except Exception as exc:  # any failure of the ping means the connection is gone
                raise _Lost(f"it did not answer a ping ({_describe(exc)})") from exc


@contextlib.contextmanager
def _deadline(seconds: float, what: str) -> Any:
    """anyio's deadline (the SDK's task groups need anyio cancellation), as a clear error."""
    import anyio

    try:
        with anyio.fail_after(seconds):
            yield
    except TimeoutError:
        raise _Lost(f"{what} took longer than {seconds:.0f} s") from None


async def _list_tools(session: ClientSession) -> list[Any]:
    """Every page of the server's tool listing."""
    from mcp_types import PaginatedRequestParams

    listing = await session.list_tools()
    tools = list(listing.tools)
    while listing.next_cursor:
        listing = await session.list_tools(
            params=PaginatedRequestParams(cursor=listing.next_cursor)
        )
        tools.extend(listing.tools)
    return tools
