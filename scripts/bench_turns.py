"""Turns per second and the daemon's own overhead per turn, under many concurrent chats.

    uv run python scripts/bench_turns.py [--bots 10] [--conversations 200] [--turns 5]
        [--warmup 2] [--latency 0.5] [--lockstep] [--seed 1] [--concurrent-turns N]
        [--workers N] [--spread] [--profile out.prof] [--keep-log PATH] [--json]
        [--postgres [--pg-settings "-c name=value ..."] | --store-url postgresql://...]

The daemon runs as a child process (`atlas run` plus probes, see scripts/loadkit.py) with B
Telegram bots, each on its own fake Bot API, all on one fake OpenAI-compatible model that
answers after `--latency` seconds and makes a `read_file` call in half the turns (so those
turns take two model calls). C conversations each send a message, wait for its reply and send
the next: `--warmup` turns, then `--turns` more. Each conversation starts at a random moment
within one turn's model time (seeded), as people would; `--lockstep` starts all C at once, so
every turn after comes in a wave of C (the worst case). Figures cover the steady window: from
the moment every conversation is past its warm-up to the moment the first one has no turns
left, so all C are busy throughout. Everything listens on 127.0.0.1 only.

`--workers N` writes `[daemon] workers = N` in the home (and sets $ATLAS_WORKERS to N for the
daemon); without it the daemon picks its default (one per core, at most one per bot).
`--spread` marks every bot `spread = true` (its conversations spread over the workers).

The home is SQLite files by default. `--postgres` serves it from PostgreSQL instead (issue 36):
a throwaway cluster of Debian's binaries started as the tests start theirs
(tests/postgres_cluster.py, as the `postgres` user on a free loopback port), a database made
in it and written as the home's `[store] url`; the cluster is removed at the end. Its settings
are PostgreSQL's defaults but `synchronous_commit = off` (`--pg-settings` to change them): a
commit does not wait for its WAL flush, as atlas.db's commits (WAL, synchronous=NORMAL) do
not. `--store-url URL` uses a server of yours instead: an empty database (the run's rows stay
in it), its password in $ATLAS_STORE_PASSWORD, which the daemon inherits. On PostgreSQL the
home runs in one process (atlas/workers/plan.py), so `--workers 1` on SQLite is the fair
comparison.

Printed as `name: value` lines (or one JSON object with `--json`):
- turns_per_s, and its ratio to C/L and to the set-up's real limit C/(L x model calls per turn);
- overhead per turn p50/p95/p99: from the update entering the fake Bot API (the person's
  message sent) to the reply arriving at sendMessage, minus the time the fake model spent on
  that turn's calls; the wait for the bot's next getUpdates is part of it;
- the daemon's CPU time per turn over the window, summed over every process (the home's and
  its workers), and its CPU share (cores busy) split into home_cpu_share and
  workers_cpu_share; workers: how many processes served (the home's + its live workers);
- with `--postgres`, the server's CPU per turn and share over the same window, apart
  (postgres_cpu_ms_per_turn: the postmaster and every backend of the cluster started here,
  read from /proc), and total_cpu_ms_per_turn (the daemon's plus the server's);
- event-loop lag p99 (a task sleeping 20 ms: how late it wakes), garbage collections and
  their pauses, peak RSS: the home's process only (its workers run no probe); rss_after_mb_all:
  the RSS of every process at the end;
- where the overhead sits (the breakdown): p50/p99 of the wait until getUpdates hands the
  update out (poll_wait), p50 of the overhead from that moment (overhead_from_served, the
  figure this script reported as overhead before), of the time from there to the first model
  call and from the last model answer to the reply;
- the harness's own CPU share (the fakes and the drivers run in this process, on uvloop as the
  daemon does: on asyncio's own loop they cost more, and their lag counts as overhead).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from atlas.process import run as run_on_uvloop  # the harness too: its fakes cost less
from scripts.loadkit import (
    FIRST_CHAT,
    Daemon,
    Fakes,
    LagMonitor,
    machine,
    percentile,
    print_result,
    process_cpu_seconds,
)
from tests.fakes.load_fakes import TOOL_MARK
from tests.postgres_cluster import SUPERUSER, Cluster, find_postgres_bin, start_cluster

# PostgreSQL's defaults but one: a commit does not wait for its WAL to reach the disk (the
# WAL writer flushes it within 200 ms), as atlas.db's commits do not (synchronous=NORMAL).
BENCH_PG_SETTINGS = "-c synchronous_commit=off"
BENCH_DATABASE = "atlas_bench"

TURN_TIMEOUT = 120.0


@dataclass
class Turn:
    tool: bool
    overhead: float  # seconds: pushed (entered the fake Bot API) -> replied, minus the model's
    end_to_end: float  # pushed -> replied
    poll_wait: float  # pushed -> handed to the bot by getUpdates
    from_served: float  # served -> replied, minus the model's time
    model: float
    replied: float  # monotonic time the reply arrived
    before_model: float  # served -> the first model request arrived
    after_model: float  # the last model answer was ready -> the reply arrived


class Window:
    """The steady part of the run: from the moment every conversation has finished its
    warm-up turns to the moment the first one runs out of turns. Only there are all C
    conversations busy; the daemon's CPU and the probes are read at its two ends."""

    def __init__(
        self,
        conversations: int,
        daemon: Daemon,
        server_cpu: Callable[[], float] | None = None,
    ) -> None:
        self.daemon = daemon
        # The PostgreSQL server's CPU (every process of the cluster started here), apart.
        self.server_cpu = server_cpu
        self.server_cpu_started = self.server_cpu_ended = 0.0
        # This process's own loop (the fakes, the drivers): its delays count as overhead too.
        self.harness_lag = LagMonitor()
        self.harness_lags: list[float] = []
        self.warming = conversations
        self.opened = asyncio.Event()
        self.closed = asyncio.Event()
        self.started = self.ended = 0.0
        self.cpu_started = self.cpu_ended = (0.0, 0.0)  # the home's process, its workers
        self.probe: dict[str, Any] = {}
        self._tasks: list[asyncio.Task[None]] = []

    def warmed(self) -> None:
        self.warming -= 1
        if self.warming == 0:
            self._tasks.append(asyncio.create_task(self._open()))

    def finished(self) -> None:
        if not self.closed.is_set():
            self.closed.set()
            self._tasks.append(asyncio.create_task(self._close()))

    async def _open(self) -> None:
        await self.daemon.window_start()
        self.cpu_started = self.daemon.cpu_split()
        if self.server_cpu:
            self.server_cpu_started = self.server_cpu()
        self.harness_lag.reset()
        self.started = time.monotonic()
        self.opened.set()

    async def _close(self) -> None:
        await self.opened.wait()
        self.ended = time.monotonic()
        self.cpu_ended = self.daemon.cpu_split()
        if self.server_cpu:
            self.server_cpu_ended = self.server_cpu()
        self.harness_lags = list(self.harness_lag.samples)
        self.probe = await self.daemon.window_report()

    async def wait(self) -> None:
        await asyncio.gather(*self._tasks)


async def converse(
    fakes: Fakes,
    index: int,
    warmup: int,
    count: int,
    start_after: float,
    window: Window,
    turns: list[Turn],
) -> None:
    """One conversation: `warmup` then `count` turns, each waiting for its reply."""
    bots = len(fakes.telegrams)
    bot = index % bots
    chat = FIRST_CHAT + index
    telegram = fakes.telegrams[bot]
    await asyncio.sleep(start_after)
    for number in range(warmup + count):
        if number == warmup:
            window.warmed()
        tag = f"T{bot}-{chat}-{number}"
        tool = (index + number) % 2 == 0
        text = f"{tag} please {TOOL_MARK if tool else 'answer'}"
        reply = telegram.expect(tag)
        pushed = time.monotonic()
        update_id = await telegram.push(telegram.message(text, user_id=chat))
        try:
            replied = await asyncio.wait_for(reply, TURN_TIMEOUT)
        except TimeoutError:
            raise RuntimeError(f"{tag}: no reply within {TURN_TIMEOUT:.0f} s") from None
        served = telegram.served_at.get(update_id, pushed)
        model = fakes.model.model_seconds.pop(tag, 0.0)
        first_request = fakes.model.first_request_at.pop(tag, served)
        last_answer = fakes.model.last_answer_at.pop(tag, replied)
        if number >= warmup:
            turns.append(
                Turn(
                    tool,
                    overhead=replied - pushed - model,
                    end_to_end=replied - pushed,
                    poll_wait=served - pushed,
                    from_served=replied - served - model,
                    model=model,
                    replied=replied,
                    before_model=first_request - served,
                    after_model=replied - last_answer,
                )
            )
    window.finished()


def cluster_cpu_seconds(cluster: Cluster) -> float:
    """CPU time of a PostgreSQL cluster so far: its postmaster (with the backends it has
    reaped) and its children (a backend per connection, the checkpointer, the WAL writer,
    autovacuum), from /proc: a backend that has ended but is not reaped yet (a zombie) still
    shows its times there, and in neither place once reaped between the two reads (rare, and
    an undercount, never a double one). The postmaster's pid is postmaster.pid's first line."""
    postmaster = int((cluster.data_dir / "postmaster.pid").read_text().split()[0])
    children = _children(postmaster)
    return process_cpu_seconds(postmaster, children=True) + sum(
        process_cpu_seconds(pid) for pid in children
    )


def _children(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue  # ended while we looked
        if int(fields[1]) == parent:
            found.append(int(entry.name))
    return found


@contextmanager
def bench_cluster(settings: str) -> Iterator[Cluster]:
    """A throwaway PostgreSQL cluster with a database for the bench's home; removed after."""
    bin_dir = find_postgres_bin()
    if bin_dir is None:
        raise SystemExit("--postgres: no PostgreSQL under /usr/lib/postgresql (apt postgresql)")
    cluster = start_cluster(bin_dir, settings)
    try:
        subprocess.run(
            [
                str(bin_dir / "createdb"),
                "-h",
                "127.0.0.1",
                "-p",
                str(cluster.port),
                "-U",
                SUPERUSER,
                BENCH_DATABASE,
            ],
            check=True,
            capture_output=True,
        )
        yield cluster
    finally:
        cluster.stop()


def bench(args: argparse.Namespace) -> dict[str, Any]:
    """The run, on the store asked for (a cluster started here for `--postgres`)."""
    if not args.postgres:
        return run_on_uvloop(bench_on(args, args.store_url, None))
    with bench_cluster(args.pg_settings) as cluster:
        return run_on_uvloop(bench_on(args, cluster.url(BENCH_DATABASE), cluster))


async def bench_on(
    args: argparse.Namespace, store_url: str | None, cluster: Cluster | None
) -> dict[str, Any]:
    concurrent = args.concurrent_turns or args.conversations
    # Staggered: each conversation starts at its own moment within one turn's model time, as
    # people would; in lockstep all C send at once and every later turn comes in waves.
    rng = random.Random(args.seed)
    spread = 0.0 if args.lockstep else args.latency * 1.5
    with tempfile.TemporaryDirectory(prefix="atlas-bench-") as tmp:
        home = Path(tmp) / "home"
        async with Fakes(args.bots, args.latency) as fakes:
            fakes.write_home(
                home,
                conversations=args.conversations,
                concurrent_turns=concurrent,
                workers=args.workers,
                spread=args.spread,
            )
            if store_url:
                config = home / "config.toml"
                config.write_text(config.read_text() + f'\n[store]\nurl = "{store_url}"\n')
            daemon = Daemon(
                home,
                fakes.env(home, workers=args.workers),
                Path(tmp) / "daemon.log",
                profile=args.profile,
            )
            before = fakes.polls()
            daemon.start()
            all_turns: list[Turn] = []
            try:
                await fakes.wait_polling(before, 60)
                window = Window(
                    args.conversations,
                    daemon,
                    (lambda: cluster_cpu_seconds(cluster)) if cluster else None,
                )
                harness_lag = asyncio.create_task(window.harness_lag.run())
                harness_before = time.process_time()
                wall_before = time.monotonic()
                async with asyncio.timeout(args.max_seconds):
                    await asyncio.gather(
                        *(
                            converse(
                                fakes,
                                i,
                                args.warmup,
                                args.turns,
                                rng.uniform(0, spread),
                                window,
                                all_turns,
                            )
                            for i in range(args.conversations)
                        )
                    )
                    await window.wait()
                harness_lag.cancel()
                harness_cpu = time.process_time() - harness_before
                harness_wall = time.monotonic() - wall_before
                memory = daemon.memory_kb()
                memory_all = daemon.memory_kb(every_process=True)
                processes = 1 + len(daemon.worker_pids())
            except BaseException:
                daemon.stop()
                print(_log_tail(Path(tmp) / "daemon.log", args.keep_log), file=sys.stderr)
                raise
            code = daemon.stop()
            log_tail = _log_tail(Path(tmp) / "daemon.log", args.keep_log)
            if code not in (0, None) or not all_turns:
                print(log_tail, file=sys.stderr)
    seconds = window.ended - window.started
    turns = [t for t in all_turns if window.started <= t.replied <= window.ended]
    if not turns:
        raise RuntimeError("no turn ended inside the steady window: run more --turns")
    home_cpu, workers_cpu = (
        end - start for end, start in zip(window.cpu_ended, window.cpu_started, strict=True)
    )
    cpu = home_cpu + workers_cpu
    probe = window.probe
    overheads = [t.overhead for t in turns]
    tool_turns = sum(t.tool for t in turns)
    calls_per_turn = (len(turns) + tool_turns) / len(turns)
    rate = len(turns) / seconds
    result: dict[str, Any] = {
        "store": "postgresql" if store_url else "sqlite",
        "bots": args.bots,
        "workers": processes,
        "spread": args.spread,
        "conversations": args.conversations,
        "concurrent_turns": concurrent,
        "latency_ms": args.latency * 1000,
        "arrivals": "lockstep" if args.lockstep else "staggered",
        "turns": len(turns),
        "tool_turns": tool_turns,
        "seconds": round(seconds, 2),
        "turns_per_s": round(rate, 1),
        "model_calls_per_turn": round(calls_per_turn, 2),
    }
    if args.latency > 0:
        c_over_l = args.conversations / args.latency
        limit = c_over_l / calls_per_turn
        result |= {
            "c_over_l": round(c_over_l, 1),
            "ratio_to_c_over_l": round(rate / c_over_l, 3),
            "limit_turns_per_s": round(limit, 1),
            "ratio_to_limit": round(rate / limit, 3),
        }
    result |= {
        "overhead_p50_ms": round(percentile(overheads, 0.50) * 1000, 2),
        "overhead_p95_ms": round(percentile(overheads, 0.95) * 1000, 2),
        "overhead_p99_ms": round(percentile(overheads, 0.99) * 1000, 2),
        "overhead_mean_ms": round(statistics.fmean(overheads) * 1000, 2),
        "overhead_p50_ms_tool_turns": round(
            percentile([t.overhead for t in turns if t.tool] or [0.0], 0.5) * 1000, 2
        ),
        "overhead_p50_ms_other_turns": round(
            percentile([t.overhead for t in turns if not t.tool] or [0.0], 0.5) * 1000, 2
        ),
        # Where the overhead sits: the wait for the next getUpdates, then before the first
        # model call (inbound, store, context), after the last (store, render, send); a tool
        # turn's rest is between its calls.
        "poll_wait_p50_ms": round(percentile([t.poll_wait for t in turns], 0.5) * 1000, 2),
        "poll_wait_p99_ms": round(percentile([t.poll_wait for t in turns], 0.99) * 1000, 2),
        "overhead_from_served_p50_ms": round(
            percentile([t.from_served for t in turns], 0.5) * 1000, 2
        ),
        "overhead_from_served_p99_ms": round(
            percentile([t.from_served for t in turns], 0.99) * 1000, 2
        ),
        "overhead_before_model_p50_ms": round(
            percentile([t.before_model for t in turns], 0.5) * 1000, 2
        ),
        "overhead_after_model_p50_ms": round(
            percentile([t.after_model for t in turns], 0.5) * 1000, 2
        ),
        "end_to_end_p50_ms": round(percentile([t.end_to_end for t in turns], 0.5) * 1000, 1),
        "daemon_cpu_ms_per_turn": round(cpu / len(turns) * 1000, 2),
        "daemon_cpu_share": round(cpu / seconds, 2),
        # Of which the home's process (its bots, atlas.db for every process, the routing)
        # and its workers together (their CPU in the window, in cores).
        "home_cpu_share": round(home_cpu / seconds, 2),
        "workers_cpu_share": round(workers_cpu / seconds, 2),
    }
    if cluster:
        server_cpu = window.server_cpu_ended - window.server_cpu_started
        result |= {
            "postgres_cpu_ms_per_turn": round(server_cpu / len(turns) * 1000, 2),
            "postgres_cpu_share": round(server_cpu / seconds, 2),
            "total_cpu_ms_per_turn": round((cpu + server_cpu) / len(turns) * 1000, 2),
        }
    result |= {
        # The fakes and the drivers share this process: near 1.0, their own delays are in
        # the overhead figures too (over the whole run, warm-up included).
        "harness_cpu_share": round(harness_cpu / harness_wall, 2),
        "harness_lag_p99_ms": round(percentile(window.harness_lags or [0.0], 0.99) * 1000, 2),
        "lag_p99_ms": round(probe["lag_p99_ms"], 2),
        "lag_max_ms": round(probe["lag_max_ms"], 2),
        "gc_collections": probe["gc_collections"],
        "gc_full_collections": probe["gc_full_collections"],
        "gc_pause_max_ms": round(probe["gc_pause_max_ms"], 2),
        "gc_pause_total_ms": round(probe["gc_pause_total_ms"], 1),
        "peak_rss_mb": round(memory["VmHWM"] / 1024, 1),
        "rss_after_mb": round(memory["VmRSS"] / 1024, 1),
        "rss_after_mb_all": round(memory_all["VmRSS"] / 1024, 1),
        **{f"machine_{key}": value for key, value in machine().items()},
    }
    return result


def _log_tail(log: Path, keep: Path | None) -> str:
    """The daemon's log's last lines (its workers' are prefixed w1, w2, ...); the whole log
    copied to `keep` first when asked."""
    text = log.read_text(errors="replace")
    if keep:
        keep.write_text(text)
    return text[-3000:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bots", type=int, default=10)
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--turns", type=int, default=5, help="measured turns per conversation")
    parser.add_argument("--warmup", type=int, default=2, help="uncounted turns first")
    parser.add_argument(
        "--lockstep", action="store_true", help="all conversations start at once (waves)"
    )
    parser.add_argument("--seed", type=int, default=1, help="for the staggered starts")
    parser.add_argument("--latency", type=float, default=0.5, help="fake model seconds per call")
    parser.add_argument(
        "--concurrent-turns", type=int, default=0, help="[limits] concurrent_turns (default: C)"
    )
    parser.add_argument(
        "--workers", type=int, help="[daemon] workers (default: the daemon's, one per core)"
    )
    parser.add_argument(
        "--spread", action="store_true", help="every bot's conversations spread over workers"
    )
    parser.add_argument("--max-seconds", type=float, default=600, help="give up after this long")
    parser.add_argument("--profile", type=Path, help="cProfile the daemon's loop over the window")
    parser.add_argument("--keep-log", type=Path, help="copy the daemon's whole log there")
    parser.add_argument("--json", action="store_true")
    store = parser.add_mutually_exclusive_group()
    store.add_argument(
        "--postgres",
        action="store_true",
        help="the home on a throwaway PostgreSQL cluster started here (its CPU apart)",
    )
    store.add_argument(
        "--store-url",
        help="the home on this PostgreSQL database (empty; password in $ATLAS_STORE_PASSWORD)",
    )
    parser.add_argument(
        "--pg-settings",
        default=BENCH_PG_SETTINGS,
        help=f"the --postgres server's options (default: {BENCH_PG_SETTINGS!r})",
    )
    args = parser.parse_args(argv)
    if args.conversations < args.bots:
        parser.error("--conversations must be at least --bots")
    result = bench(args)
    print_result(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
