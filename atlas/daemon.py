"""`atlas run`: load the home, open every bot's store, start channels, MCP servers and routines,
serve until SIGINT or SIGTERM, then stop everything in order."""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from atlas.dashboard.listen import Listen, dashboard_listen
from atlas.errors import AtlasError
from atlas.home import Home
from atlas.preload import start_loading_sdks
from atlas.process import freeze_long_lived_objects
from atlas.start_checks import check_before_start
from atlas.store.integrity import remember_clean_stop
from atlas.workers.link import Link
from atlas.workers.plan import Placement, one_process_on_postgres, worker_count
from atlas.workers.pool import WorkerPool

if TYPE_CHECKING:
    from atlas.channels.base import Channel
    from atlas.channels.health_file import HealthWriter
    from atlas.channels.supervisor import ChannelHealth
    from atlas.cluster.home_node import HomeNode
    from atlas.cluster.run_lock import RunLock
    from atlas.dashboard.server import DashboardServer
    from atlas.executors.bridge import ExecutorBridge
    from atlas.routines.scheduler import RoutineScheduler
    from atlas.store.pg.server import PgServer
    from atlas.workers.fork import ForkedWorker

log = logging.getLogger("atlas.daemon")

WORKERS_READY_WAIT = 60.0  # seconds; a worker still starting is logged, and joins when it can


def _pool(pool: WorkerPool | None) -> WorkerPool:
    if pool is None:
        raise AtlasError("this home runs in one process: no worker serves another share")
    return pool


@dataclass
class Start:
    """What is settled before the daemon's event loop runs: the checks have passed, where the
    dashboard listens, which process serves which bot, the workers forked already."""

    listen: Listen | None
    placement: Placement
    forked: dict[int, ForkedWorker] = field(default_factory=dict)


def check_node(home: Home, node: str) -> None:
    """`atlas run --node NAME` needs a home on PostgreSQL (the leases live there) and a name
    other nodes can tell apart; a ConfigError names what is wrong."""
    import re

    from atlas.config import NAME_PATTERN
    from atlas.errors import ConfigError

    if home.settings.store.url is None:
        raise ConfigError(
            f"atlas run --node {node}: nodes share a home through PostgreSQL, and "
            f"{home.config_path} sets no [store] url; set one (docs/scaling.md) or run "
            "`atlas run` without --node"
        )
    if not re.fullmatch(NAME_PATTERN, node) or len(node) > 64:
        raise ConfigError(
            f"atlas run --node {node!r}: a node's name is lower-case letters, digits, '-' and "
            "'_', starting with a letter or digit, at most 64 characters"
        )


async def refuse_beside_nodes(home: Home, server: PgServer) -> None:
    """A plain `atlas run` serves every bot and runs the routines: beside live nodes of the
    same database it would answer their bots' messages a second time. Stop, naming them."""
    from atlas.cluster.nodes import NodeRegistry

    live = await NodeRegistry(server).live_nodes(home.settings.cluster.lease_seconds)
    if live:
        raise AtlasError(
            f"nodes of this home are running on its PostgreSQL store ({', '.join(live)}): "
            "`atlas run` without --node would serve their bots too; run it with --node NAME"
        )


def prepare(home: Home, *, fork: bool = False) -> Start:
    """The checks, then (with `fork`, called before any event loop) the workers forked from
    this process once it has imported what they use (atlas/workers/fork.py); where that is not
    safe, or without `fork`, `serve` spawns them."""
    # Damaged databases, wrong [channels.*] keys, unset tokens, unknown tool names: the daemon
    # stops here, having started and changed nothing.
    check_before_start(home)
    from atlas.sandbox.limits import shield_daemon

    shield_daemon()  # before the workers fork: they inherit it; a sandboxed command gets 1000
    listen = dashboard_listen(home)  # beyond loopback without allow_remote: stops here too
    # The bots spread over worker processes ([daemon] workers); this process serves share 0
    # and the home's shared duties (atlas/workers/).
    start = Start(listen, Placement.of(home, one_process_on_postgres(home, worker_count(home))))
    if fork and start.placement.count > 1:
        from atlas.workers.fork import can_fork, fork_workers

        if can_fork():
            start.forked = fork_workers(home, start.placement, log.getEffectiveLevel())
            pids = ", ".join(f"{n}: pid {w.process.pid}" for n, w in start.forked.items())
            log.info("workers forked (%s)", pids)
        else:
            log.info("workers: started afresh (this process cannot fork them safely here)")
    return start


async def serve(
    home: Home,
    *,
    stop: asyncio.Event | None = None,
    start: Start | None = None,
    node: str | None = None,
) -> None:
    """Run until `stop` is set or a signal arrives; then stop everything in order. `start`:
    what `prepare` settled before the event loop (else it is settled here, workers spawned).
    `node`: run as that node of a home on PostgreSQL (atlas/cluster/home_node.py): the bots
    and the routine scheduler whose leases it holds, no others."""
    if node is not None:
        check_node(home, node)
    start = start or prepare(home)
    listen, placement = start.listen, start.placement
    started_at = datetime.now(UTC)  # before anything is stored: older messages are a crash's
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    pool: WorkerPool | None = None
    routines: RoutineScheduler | None = None  # a worker's cronjob_manage reaches it, once set
    lost: list[str] = []

    def lost_lock(why: str) -> None:
        # Another `atlas run` serves the home now: this one stops, and says why as it exits.
        lost.append(why)
        stop.set()

    def serve_worker(link: Link) -> None:
        serve_home_db(link, audit)
        elsewhere.handle_on(link)
        serve_routines(link, lambda: routines)
        serve_asks(link, dispatchers_asks(elsewhere))  # its questions on the Waiting page

    if placement.count > 1:
        pool = WorkerPool(home, placement, on_link=serve_worker, log_level=log.getEffectiveLevel())
        await pool.spawn(start.forked)  # links open below, once this process can serve them
    # Unless forking workers already did, this process loads its bots' model SDKs in a thread
    # now, and the channels wait for it below: the first answer does not pay for them.
    here = [home.bot(name) for name in sorted(placement.served_by(0))]  # the home's share
    sdks = None if start.forked else start_loading_sdks(home, here)
    engines = None
    run_lock: RunLock | None = None
    try:
        # The rest of the daemon loads only now: spawned workers load theirs meanwhile (forked
        # ones have them already), so their start-up overlaps this process's imports.
        from atlas.channels.health_file import HealthWriter, health_path
        from atlas.channels.manager import RunningChannels, start_channels, stop_channels
        from atlas.dashboard.chat_channel import WEB_CHANNEL, BrowserChannel
        from atlas.recovery import resume_interrupted_turns
        from atlas.services import home_services, start_core, stop_turns
        from atlas.store.home_engines import HomeEngines
        from atlas.workers.asks import dispatchers_asks, serve_asks
        from atlas.workers.forwarded_channel import stand_ins
        from atlas.workers.home_db import serve_home_db
        from atlas.workers.routines import serve_routines
        from atlas.workers.routing import HOME_SHARE, Elsewhere, RoutedRuns

        # The home's engines, from `[store] url` (atlas/store/home_engines.py): atlas.db (its
        # one writer, for the workers too) and the bots' files, or the PostgreSQL server,
        # reached here or the start stops naming the url and what failed.
        engines = await HomeEngines.open(home)
        if engines.server is not None:
            from atlas.cluster.run_lock import RunLock

            if node is None:
                await refuse_beside_nodes(home, engines.server)
            # Held for the process's life: a node shares it, a plain daemon holds it alone, so
            # neither starts beside a plain daemon of the same database (atlas/cluster/run_lock.py).
            run_lock = RunLock(engines.server, on_lost=lost_lock)
            await run_lock.take(node)
        audit = engines.audit
        home.served = placement.served_by(HOME_SHARE)
        home.owned = frozenset(placement.shares[HOME_SHARE])
        channels: dict[str, Channel] = {}
        elsewhere = Elsewhere(placement, HOME_SHARE, lambda share: _pool(pool).link(share))
        if pool is not None:
            await pool.connect()
        dispatcher = await start_core(home, channels, engines=engines)
    except BaseException:
        if pool is not None:
            await pool.stop()
        if run_lock is not None:
            await run_lock.release()
        if engines is not None:
            await engines.close()
        raise
    if pool is not None:
        elsewhere.serve(dispatcher)
        dispatcher.elsewhere = elsewhere
        # Spread bots owned by a worker: their channels, as this process's turns reach them.
        channels.update(stand_ins(home, placement, HOME_SHARE, elsewhere.call))
    runtime = dispatcher.runtime
    running = RunningChannels()
    cluster: HomeNode | None = None
    if node is not None:
        from atlas.cluster.home_node import HomeNode, NodeRuns
        from atlas.routines.scheduler import RoutineScheduler

        assert engines.server is not None  # check_node: a url, so a server

        def node_scheduler() -> RoutineScheduler:
            assert cluster is not None
            return RoutineScheduler(
                home, runtime.audit, NodeRuns(cluster), store=runtime.engines.routines
            )

        def scheduler_changed(scheduler: RoutineScheduler | None) -> None:
            nonlocal routines
            routines = scheduler
            home_services(dispatcher).serve_routines(scheduler)

        # No bot is this node's until a lease says so: the channels and recovery below start
        # none; each bot's start when its lease is gained (atlas/cluster/home_node.py).
        cluster = HomeNode(
            home,
            engines.server,
            node,
            dispatcher,
            running,
            make_scheduler=node_scheduler,
            on_scheduler_change=scheduler_changed,
            routine_store=runtime.engines.routines,
        )
    health: HealthWriter | None = None
    dashboard: DashboardServer | None = None
    bridge: ExecutorBridge | None = None

    def every_health() -> dict[str, ChannelHealth]:
        return {**running.health, **(pool.health if pool is not None else {})}

    try:
        log.info("home %s: %d bot(s), main %s", home.root, len(home.bots), home.settings.main)
        for bot in home.served_bots():
            store = await runtime.store(bot)
            log.info("serving bot %s (model %s, store %s)", bot.name, bot.model, store.path)
        if sdks is not None:
            await sdks
        # Each channel registers itself in the dispatcher; one that fails is retried alone.
        running = await start_channels(home, dispatcher, into=running)
        log.info("channels: %s", ", ".join(running) or "none configured")
        if listen is not None:  # the dashboard's Chat, there before recovery resumes its turns
            dispatcher.channels[WEB_CHANNEL] = BrowserChannel()
        # Turns a crash cut short: answered now, or the person is told (atlas/recovery.py).
        recovered = await resume_interrupted_turns(dispatcher, started_at=started_at)
        log.info("interrupted turns: %s", recovered.summary())
        # Executor tasks of the last process: listed and resumable again, a cut one reported.
        from atlas.executors.restart import restore_executor_tasks

        log.info("executor tasks: %s", await restore_executor_tasks(dispatcher))
        if pool is not None:  # each has started its channels and recovered its turns
            ready = await pool.wait_ready(WORKERS_READY_WAIT)
            log.info("workers ready: %d of %d", len(ready), placement.count - 1)
        # For `atlas doctor`, another process: each channel's health, rewritten as it changes.
        health = HealthWriter(health_path(home.root, node), every_health)
        if cluster is not None:  # a node's channels start and stop with its leases
            cluster.channels_changed = health.refresh
        # After the channels, so that catch-up runs of missed routines can be delivered.
        runs = RoutedRuns(dispatcher, elsewhere) if pool is not None else dispatcher
        # The scheduler and the executor bridge (APScheduler, the plugin's socket) load only
        # now: their imports no longer delay the bots' first answers.
        from atlas.executors.bridge import serve_plugin
        from atlas.executors.record import DelegationRecord
        from atlas.routines.scheduler import RoutineScheduler

        if cluster is None:  # a node runs them while it holds the scheduler lease
            routines = RoutineScheduler(home, runtime.audit, runs, store=runtime.engines.routines)
            home_services(dispatcher).serve_routines(routines)  # cronjob_manage's, once started
            log.info("routine files: %s", (await routines.start()).summary())
        if listen is not None:  # the web dashboard (docs/dashboard.md), over this runtime
            from atlas.dashboard.server import start_dashboard  # aiohttp.web, the pages: late

            dashboard = await start_dashboard(runtime, listen, every_health, dispatcher, node)
        # The Claude Code plugin's socket: the person's own sessions (docs/executors.md).
        services = home_services(dispatcher)
        if cluster is not None:
            # Only now: a bot gained starts its channels and recovery against a ready daemon.
            await cluster.start()
        # A node's in its own run folder; its prompts are asked through the channels it runs.
        bridge = await serve_plugin(
            home,
            dispatcher.channels,
            lambda bot: runtime.store(home.bot(bot)),
            lambda: services.workbench,  # the home's, delegate's tasks on it too
            DelegationRecord(runtime.engines.records, home=home),  # the person's turns
            dispatcher.asks,  # their prompts wait on the dashboard's Waiting page too
            node,
        )
        freeze_long_lived_objects()
        log.info("ready; stop with Ctrl-C or SIGTERM")
        await stop.wait()
        log.info("stopping")
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        if cluster is not None:
            await cluster.stop()  # its bots stopped first, then their leases released
        if dashboard is not None:
            await dashboard.stop()  # first: no page reads a store being closed
        if bridge is not None:
            await bridge.stop()  # the hooks fall back to Claude Code's own prompt
        if routines is not None and cluster is None:  # a node's stopped with its lease
            await routines.stop()  # cancels and records runs still going
        await stop_turns(dispatcher)
        if pool is not None:
            await pool.stop()  # each stops its own turns, channels and stores
        from atlas.sandbox.proxy import stop_proxies  # loaded by a sandboxed command, if any

        await stop_proxies()  # after the turns: no command needs the network any more
        await stop_channels(running)
        if health is not None:
            health.close()
        await runtime.close()
        if run_lock is not None:
            await run_lock.release()  # last: nothing of this process serves the home any more
        remember_clean_stop(home)  # the next start need not check these files again
        log.info("stopped cleanly")
    if lost:
        raise AtlasError(lost[0])
