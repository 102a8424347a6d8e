"""`atlas run`: load the home, open every bot's store, serve until SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal

from atlas.channels.manager import RunningChannels, start_channels, stop_channels
from atlas.dispatch import Dispatcher
from atlas.home import Home
from atlas.runtime import Runtime

log = logging.getLogger("atlas.daemon")


async def serve(home: Home, *, stop: asyncio.Event | None = None) -> None:
    """Run until `stop` is set or a signal arrives; then stop everything in order."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    runtime = Runtime(home)
    dispatcher = Dispatcher(runtime, {})
    running = RunningChannels()
    try:
        log.info("home %s: %d bot(s), main %s", home.root, len(home.bots), home.settings.main)
        for bot in home.bots.values():
            store = await runtime.store(bot)
            log.info("serving bot %s (model %s, store %s)", bot.name, bot.model, store.path)
        # Each channel registers itself in the dispatcher; one that fails is retried alone.
        running = await start_channels(home, dispatcher)
        log.info("channels: %s", ", ".join(running) or "none configured")
        log.info("ready; stop with Ctrl-C or SIGTERM")
        await stop.wait()
        log.info("stopping")
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await dispatcher.shutdown()
        await stop_channels(running)
        await runtime.close()
        log.info("stopped cleanly")
