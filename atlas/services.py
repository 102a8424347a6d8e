"""What runs beside the tool loop in any process that serves a home (`atlas run`, `atlas chat`):
the runtime, the dispatcher, the channel bots use to talk to each other, and MCP servers."""

from __future__ import annotations

import logging

from atlas.agents.channel import AGENTS_CHANNEL, AgentChannel
from atlas.agents.services import HomeServices, provide_services
from atlas.channels.base import Channel
from atlas.dispatch import Dispatcher
from atlas.home import Home
from atlas.mcp.manager import McpManager
from atlas.providers.base import ModelClient
from atlas.runtime import Runtime
from atlas.secrets import redact_logs
from atlas.store.home_db import HomeStore
from atlas.store.home_engines import HomeEngines

log = logging.getLogger(__name__)


async def start_core(
    home: Home,
    channels: dict[str, Channel],
    *,
    model: ModelClient | None = None,
    audit: HomeStore | None = None,
    engines: HomeEngines | None = None,
) -> Dispatcher:
    """Runtime + dispatcher + agents channel, MCP servers started. A malformed mcp.json fails
    here, before anything runs. `engines`: the home's (atlas/store/home_engines.py), else
    atlas.db (`audit`) and the bots' files."""
    redact_logs(home)
    mcp = McpManager(home)
    runtime = Runtime(home, model=model, mcp=mcp, audit=audit, engines=engines)
    channels[AGENTS_CHANNEL] = AgentChannel(home.settings.agents.reply_seconds)
    dispatcher = Dispatcher(runtime, channels)
    provide_services(dispatcher)  # what delegate, message_agent, cronjob_manage... reach
    await mcp.start()
    for server in mcp.status():
        log.info(
            "MCP server %s: %s, %d tool(s)%s",
            server.name,
            server.state,
            server.tools,
            f" ({server.error})" if server.error else "",
        )
    return dispatcher


def home_services(dispatcher: Dispatcher) -> HomeServices:
    """The services start_core gave the dispatcher (the daemon hands them its scheduler)."""
    services = dispatcher.services
    if not isinstance(services, HomeServices):
        raise TypeError(f"the dispatcher has no HomeServices (it has {services!r})")
    return services


async def stop_turns(dispatcher: Dispatcher) -> None:
    """Subagents, lanes and the agents channel. The runtime (stores, MCP, jobs) is closed after,
    by its owner, once the platform channels have stopped too."""
    if isinstance(dispatcher.services, HomeServices):
        await dispatcher.services.close()
    await dispatcher.shutdown()
    await dispatcher.channels[AGENTS_CHANNEL].stop()
