"""`atlas run`: load the home, open every bot's store, start channels, MCP servers and routines,
serve until SIGINT or SIGTERM, then stop everything in order."""

from __future__ import annotations

import asyncio
import logging
import signal
from datetime import UTC, datetime

from atlas.channels.health_file import HealthWriter, health_path
from atlas.channels.manager import RunningChannels, start_channels, stop_channels
from atlas.dashboard.chat_channel import WEB_CHANNEL, BrowserChannel
from atlas.dashboard.server import DashboardServer, dashboard_listen, start_dashboard
from atlas.executors.bridge import ExecutorBridge, serve_plugin
from atlas.executors.record import DelegationRecord
from atlas.home import Home
from atlas.process import freeze_long_lived_objects
from atlas.recovery import resume_interrupted_turns
from atlas.routines.scheduler import RoutineScheduler
from atlas.sandbox.proxy import stop_proxies
from atlas.services import home_services, start_core, stop_turns
from atlas.start_checks import check_before_start

log = logging.getLogger("atlas.daemon")


async def serve(home: Home, *, stop: asyncio.Event | None = None) -> None:
    """Run until `stop` is set or a signal arrives; then stop everything in order."""
    # Damaged databases, wrong [channels.*] keys, unset tokens, unknown tool names: the daemon
    # stops here, having started and changed nothing.
    check_before_start(home)
    listen = dashboard_listen(home)  # beyond loopback without allow_remote: stops here too
    started_at = datetime.now(UTC)  # before anything is stored: older messages are a crash's
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    dispatcher = await start_core(home, {})
    runtime = dispatcher.runtime
    running = RunningChannels()
    health: HealthWriter | None = None
    routines: RoutineScheduler | None = None
    dashboard: DashboardServer | None = None
    bridge: ExecutorBridge | None = None
    try:
        log.info("home %s: %d bot(s), main %s", home.root, len(home.bots), home.settings.main)
        for bot in home.bots.values():
            store = await runtime.store(bot)
            log.info("serving bot %s (model %s, store %s)", bot.name, bot.model, store.path)
        # Each channel registers itself in the dispatcher; one that fails is retried alone.
        running = await start_channels(home, dispatcher)
        log.info("channels: %s", ", ".join(running) or "none configured")
        if listen is not None:  # the dashboard's Chat, there before recovery resumes its turns
            dispatcher.channels[WEB_CHANNEL] = BrowserChannel()
        # For `atlas doctor`, another process: each channel's health, rewritten as it changes.
        health = HealthWriter(health_path(home.root), running.health)
        # Turns a crash cut short: answered now, or the person is told (atlas/recovery.py).
        recovered = await resume_interrupted_turns(dispatcher, started_at=started_at)
        log.info("interrupted turns: %s", recovered.summary())
        # After the channels, so that catch-up runs of missed routines can be delivered.
        routines = RoutineScheduler(home, runtime.audit, dispatcher)
        home_services(dispatcher).serve_routines(routines)  # cronjob_manage's, once started
        log.info("routine files: %s", (await routines.start()).summary())
        if listen is not None:  # the web dashboard (docs/dashboard.md), over this runtime
            dashboard = await start_dashboard(runtime, listen, lambda: running.health, dispatcher)
        # The Claude Code plugin's socket: the person's own sessions (docs/executors.md).
        services = home_services(dispatcher)
        bridge = await serve_plugin(
            home,
            dispatcher.channels,
            lambda bot: runtime.store(home.bot(bot)),
            lambda: services.workbench,  # the home's, delegate's tasks on it too
            DelegationRecord(runtime.audit, home=home),  # the person's turns, recorded
            dispatcher.asks,  # their prompts wait on the dashboard's Waiting page too
        )
        freeze_long_lived_objects()
        log.info("ready; stop with Ctrl-C or SIGTERM")
        await stop.wait()
        log.info("stopping")
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        if dashboard is not None:
            await dashboard.stop()  # first: no page reads a store being closed
        if bridge is not None:
            await bridge.stop()  # the hooks fall back to Claude Code's own prompt
        if routines is not None:
            await routines.stop()  # cancels and records runs still going
        await stop_turns(dispatcher)
        await stop_proxies()  # after the turns: no command needs the network any more
        await stop_channels(running)
        if health is not None:
            health.close()
        await runtime.close()
        log.info("stopped cleanly")
