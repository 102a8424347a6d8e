"""What the load scripts share: a home of B Telegram bots pointed at fakes on 127.0.0.1, the
fakes themselves, the daemon as a child process with probes, and readings from /proc.

The child (`python scripts/loadkit.py daemon --home H --report R`) is `atlas run` plus probes:
an event-loop lag monitor (SIGUSR1 starts a measuring window, SIGUSR2 writes the window's
figures to R) and, with `--profile P`, cProfile over that window. The probes (lag, garbage
collections, the profile) watch the home's process only (share 0: its bots, the scheduler,
atlas.db); its worker processes (atlas/workers/) run no probe. CPU and memory are read from
/proc for every process of the daemon (`Daemon.cpu_seconds`, `Daemon.memory_kb`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import os
import resource
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from atlas.process import pause_collection_while_starting, run, setup_logging
from atlas.store.message_index import INDEXES
from atlas.workers.child import WORKER_NAME_PREFIX
from atlas.workers.plan import WORKERS_ENV

if TYPE_CHECKING:
    from atlas.daemon import Start
    from atlas.home import Home

REPO = Path(__file__).resolve().parent.parent

FIRST_CHAT = 5000  # conversation i is the private chat of user FIRST_CHAT + i
# The model's timeout in a home whose fakes inject faults: a hung call costs this, not 30 s.
FAULT_TIMEOUT = 3.0
LAG_TICK = 0.02  # seconds between the lag monitor's wake-ups
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def bot_name(index: int) -> str:
    return "atlas" if index == 0 else f"bot{index:02d}"


def bot_token(index: int) -> str:
    return f"{700000 + index}:LOAD-token-{index:02d}"


def token_env(index: int) -> str:
    return f"LOAD_TELEGRAM_TOKEN_{index:02d}"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now: the home's dashboard listens there, so that it starts
    (and costs what it costs) even when another daemon on this machine holds the default."""
    with contextlib.closing(socket.socket()) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def percentile(values: Sequence[float], share: float) -> float:
    """The nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, int(round(share * len(ordered) + 0.5)) - 1))
    return ordered[rank]


def integrity_problems(home: Path, *, stopped_cleanly: bool = False) -> list[str]:
    """`PRAGMA integrity_check` on every SQLite file of the home, and FTS5's own check of the
    messages' indexes: what is not "ok". After a clean stop every message must be indexed
    exactly once; after a kill the indexes may lag behind, but must be sound."""
    problems = []
    for path in sorted(home.rglob("*.db")):
        with contextlib.closing(sqlite3.connect(path)) as db:
            verdict = db.execute("PRAGMA integrity_check").fetchone()[0]
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
            for index in (name for name in INDEXES if name in tables):
                try:
                    db.execute(
                        f"INSERT INTO {index} ({index}, rank) VALUES ('integrity-check', ?)",
                        [int(stopped_cleanly)],  # 1: also against the messages table
                    )
                except sqlite3.DatabaseError as exc:
                    problems.append(f"{path.relative_to(home)}: {index}: {exc}")
        if verdict != "ok":
            problems.append(f"{path.relative_to(home)}: {verdict}")
    return problems


def print_result(result: dict[str, Any], as_json: bool) -> None:
    """A script's figures as `name: value` lines, or one JSON object."""
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")


def machine() -> dict[str, str]:
    """What the figures were measured on."""
    memory = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    return {
        "cpus": str(os.cpu_count()),
        "memory": memory,
        "python": sys.version.split()[0],
    }


# ------------------------------------------------------------------ the home


def write_home(
    root: Path,
    *,
    bots: int,
    model_url: str,
    telegram_urls: list[str],
    allowed_users: list[int],
    concurrent_turns: int,
    max_retries: int = 3,
    timeout: float = 30.0,
    routines: dict[str, str] | None = None,
    context_window: int = 128_000,
    workers: int | None = None,
    spread: bool = False,
) -> None:
    """A home whose bots each have a Telegram channel (a fake bot of its own), all on one model.
    `workers`: `[daemon] workers` (None: the daemon's default, one per core); `spread`: every
    bot's conversations spread over the workers (bot.toml `spread = true`)."""
    from atlas.home import init_home

    init_home(root)
    (root / "config.toml").write_text(
        f"""\
main = "atlas"
timezone = "UTC"
model = "fake/test-model"

[providers.fake]
kind = "openai"
base_url = "{model_url}"
timeout = {timeout}
max_retries = {max_retries}

[limits]
concurrent_turns = {concurrent_turns}
context_window = {context_window}
retry_base_delay = 0.05
retry_max_delay = 2.0

[review]
enabled = false

[routines]
poll_seconds = 1.0

[dashboard]
listen = "127.0.0.1:{free_port()}"
"""
        + (f"\n[daemon]\nworkers = {workers}\n" if workers else "")
    )
    users = ", ".join(str(u) for u in allowed_users)
    for index in range(bots):
        folder = root / "bots" / bot_name(index)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "bot.toml").write_text(
            f"""\
title = "Load bot {index}"
mode = "auto"
spread = {"true" if spread else "false"}

[channels.telegram]
token_env = "{token_env(index)}"
api_base = "{telegram_urls[index]}"
allowed_users = [{users}]
poll_timeout = 10
"""
        )
        if not (folder / "MISSION.md").exists():
            (folder / "MISSION.md").write_text("A bot under load. Answer briefly.\n")
        for sub in ("memory", "skills", "workspace"):
            (folder / sub).mkdir(exist_ok=True)
        (folder / "workspace" / "note.txt").write_text("A small file the tool turns read.\n")
    for path in (root / "routines").glob("*.toml"):
        path.unlink()  # the examples: paused, but they would be counted
    for name, text in (routines or {}).items():
        (root / "routines" / f"{name}.toml").write_text(text)


@dataclass
class Fakes:
    """One fake model server and one fake Telegram per bot, all bots behind one Bot API
    address (as Telegram serves them), on 127.0.0.1."""

    bots: int
    latency: float
    fault_rate: float = 0.0  # the share of model and Telegram requests that fail (an outage)
    seed: int = 0
    model: Any = None
    telegrams: list[Any] = field(default_factory=list)
    bot_api: Any = None

    async def __aenter__(self) -> Fakes:
        from tests.fakes.load_fakes import AutoOpenAIServer, FaultMix, TimedTelegram
        from tests.fakes.telegram_server import SharedBotAPI

        def mix(offset: int) -> FaultMix | None:
            return FaultMix(self.fault_rate, seed=self.seed + offset) if self.fault_rate else None

        self.model = AutoOpenAIServer(
            latency=self.latency, random_faults=mix(0), hang_seconds=FAULT_TIMEOUT + 1
        )
        await self.model.__aenter__()
        self.telegrams = [
            TimedTelegram(token=bot_token(index), keep_calls=False, random_faults=mix(index + 1))
            for index in range(self.bots)
        ]
        self.bot_api = SharedBotAPI(self.telegrams)
        await self.bot_api.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.bot_api.stop()
        await self.model.__aexit__(*exc_info)

    def write_home(
        self,
        root: Path,
        *,
        conversations: int,
        concurrent_turns: int | None = None,
        **options: Any,
    ) -> None:
        """A home whose bots talk to these fakes, open to the users of C conversations (chat
        ids FIRST_CHAT, FIRST_CHAT + 1, …), with `concurrent_turns` = C unless given."""
        if self.fault_rate:
            options.setdefault("timeout", FAULT_TIMEOUT)
        write_home(
            root,
            bots=self.bots,
            model_url=self.model.base_url,
            telegram_urls=[t.base_url for t in self.telegrams],
            allowed_users=[FIRST_CHAT + i for i in range(conversations)],
            concurrent_turns=concurrent_turns or conversations,
            **options,
        )

    def env(self, home: Path, *, workers: int | None = None) -> dict[str, str]:
        """The daemon's environment; with `workers`, $ATLAS_WORKERS says the same number as
        the home's `[daemon] workers` (it would override it)."""
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.upper().endswith(("_PROXY", "_KEY", "_TOKEN"))
        }
        if workers:
            env[WORKERS_ENV] = str(workers)
        env.update({token_env(i): bot_token(i) for i in range(self.bots)})
        env["ATLAS_HOME"] = str(home)
        env["NO_PROXY"] = "127.0.0.1,localhost"
        return env

    def end_faults(self) -> None:
        """The outage is over: no more faults from here on."""
        for mix in (self.model.random_faults, *(t.random_faults for t in self.telegrams)):
            if mix:
                mix.rate = 0.0

    def faults_injected(self) -> dict[str, int]:
        """Faults injected so far, by fake and kind: {"model 429": 3, "telegram drop": 5, …}."""
        counts: Counter[str] = Counter()
        fakes = [("model", self.model), *(("telegram", t) for t in self.telegrams)]
        for name, fake in fakes:
            if fake.random_faults:
                counts.update({f"{name} {k}": n for k, n in fake.random_faults.injected.items()})
        return dict(sorted(counts.items()))

    def replies_per_tag(self) -> Counter[str]:
        """How many replies carried each turn's tag (a kept reply sent along with a later one
        carries both): more than one is an answer delivered twice."""
        from tests.fakes.load_fakes import TAG

        replies: Counter[str] = Counter()
        for telegram in self.telegrams:
            for sent in telegram.sent:
                replies.update(set(TAG.findall(sent.text)))
        return replies

    def polls(self) -> list[int]:
        return [telegram.polls for telegram in self.telegrams]

    async def wait_polling(self, before: list[int], timeout: float) -> float:
        """Seconds until every bot made a getUpdates call after `before` was read."""
        started = time.monotonic()
        deadline = started + timeout
        while any(now <= then for now, then in zip(self.polls(), before, strict=True)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"not every bot polled within {timeout:.0f} s")
            await asyncio.sleep(0.005)
        return time.monotonic() - started


# ------------------------------------------------------------------ the child process


@dataclass
class Daemon:
    """`atlas run` with probes, as a child process."""

    home: Path
    env: dict[str, str]
    log_path: Path
    profile: Path | None = None
    process: subprocess.Popen[bytes] | None = None

    @property
    def report_path(self) -> Path:
        return self.log_path.with_suffix(".report.json")

    def start(self) -> None:
        command = [
            sys.executable,
            str(Path(__file__).resolve()),
            "daemon",
            "--home",
            str(self.home),
        ]
        command += ["--report", str(self.report_path)]
        if self.profile:
            command += ["--profile", str(self.profile)]
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            command, env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO
        )
        log.close()

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    async def wait_logged(self, text: str, timeout: float) -> float:
        """Seconds until `text` shows in the daemon's log (read every 5 ms from where it was)."""
        started = time.monotonic()
        size = self.log_path.stat().st_size if self.log_path.exists() else 0
        while True:
            with self.log_path.open("rb") as log:
                log.seek(max(0, size - len(text)))
                if text.encode() in log.read():
                    return time.monotonic() - started
            if time.monotonic() - started > timeout:
                raise TimeoutError(f"{text!r} not in {self.log_path} within {timeout:.0f} s")
            await asyncio.sleep(0.005)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: no handler runs, nothing is flushed but what SQLite already committed."""
        if self.alive():
            assert self.process is not None
            self.process.kill()
            self.process.wait()

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait; SIGKILL when it does not stop in time. The exit code."""
        assert self.process is not None
        if self.alive():
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    async def window_start(self) -> None:
        self.report_path.unlink(missing_ok=True)
        os.kill(self.pid, signal.SIGUSR1)
        await asyncio.sleep(0.05)

    async def window_report(self, timeout: float = 30.0) -> dict[str, Any]:
        os.kill(self.pid, signal.SIGUSR2)
        deadline = time.monotonic() + timeout
        while not self.report_path.exists():
            if time.monotonic() > deadline:
                raise TimeoutError("the daemon wrote no probe report")
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.05)  # written whole: it is small
        return json.loads(self.report_path.read_text())

    def worker_pids(self) -> list[int]:
        """The daemon's live worker processes (atlas/workers/child.py), its direct children."""
        return worker_pids(self.pid)

    def cpu_seconds(self) -> float:
        """User + system CPU of every process of the daemon: the home's process (all its
        threads), the children it has reaped (a worker that died and was restarted, a command
        a tool ran) and its live workers, whose CPU reaches the parent's only once they end."""
        return sum(self.cpu_split())

    def cpu_split(self) -> tuple[float, float]:
        """`cpu_seconds` in two: the home's process (with the children it has reaped), and
        its live workers together."""
        workers = sum(process_cpu_seconds(pid) for pid in self.worker_pids())
        return process_cpu_seconds(self.pid, children=True), workers

    def memory_kb(self, *, every_process: bool = False) -> dict[str, int]:
        """VmRSS (now), VmHWM (peak) and Pss of the home's process in KiB; with
        `every_process`, summed over it and its live workers (the peaks of each, so at most
        the peak of all). Pss shares each page among the processes that map it: forked
        workers share the home's imported modules, which RSS counts once per process."""
        found = {"VmRSS": 0, "VmHWM": 0, "Pss": 0}
        for pid in [self.pid, *(self.worker_pids() if every_process else [])]:
            for name in ("status", "smaps_rollup"):
                with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                    for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
                        key, _, value = line.partition(":")
                        if key in found:
                            found[key] += int(value.split()[0])
        return found


def _stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the command name (which may hold spaces): [0] is the
    state, [1] the parent's pid, [11] utime, [12] stime, [13] cutime, [14] cstime."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def process_cpu_seconds(pid: int, *, children: bool = False) -> float:
    """utime + stime of one process (0 once it is gone); with `children`, plus the CPU of
    the children it has waited for."""
    try:
        fields = _stat_fields(pid)
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / CLOCK_TICKS


def worker_pids(parent: int) -> list[int]:
    """Live children of `parent` that are Atlas workers: named so (a forked worker keeps the
    home's command line) or running atlas.workers.child (a spawned one, while it starts)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = _stat_fields(int(entry.name))
            if int(fields[1]) != parent or fields[0] == "Z":
                continue
            named = (entry / "comm").read_text().startswith(WORKER_NAME_PREFIX)
            if named or b"atlas.workers.child" in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue  # ended while we looked
    return sorted(found)


class LagMonitor:
    """How late the event loop wakes a task that asked to sleep LAG_TICK: the time every other
    callback held the loop. Also how long each garbage collection stopped everything."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self.window_started = time.monotonic()
        self.gc_pauses: list[tuple[int, float]] = []  # (generation, seconds)
        self._gc_started = 0.0
        gc.callbacks.append(self._on_gc)

    def reset(self) -> None:
        self.samples = []
        self.gc_pauses = []
        self.window_started = time.monotonic()

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            self.gc_pauses.append((info["generation"], time.perf_counter() - self._gc_started))

    async def run(self) -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(LAG_TICK)
            self.samples.append(max(0.0, time.monotonic() - before - LAG_TICK))


async def _child(home: Home, start: Start, report: Path, profile: Path | None) -> None:
    import cProfile

    from atlas.daemon import serve

    monitor = LagMonitor()
    profiler = cProfile.Profile() if profile else None
    loop = asyncio.get_running_loop()

    def start_window() -> None:
        monitor.reset()
        if profiler:
            profiler.enable()

    def write_report() -> None:
        if profiler:
            profiler.disable()
            profiler.dump_stats(str(profile))
        lags = monitor.samples
        usage = resource.getrusage(resource.RUSAGE_SELF)
        figures = {
            "seconds": time.monotonic() - monitor.window_started,
            "lag_samples": len(lags),
            "lag_p50_ms": percentile(lags, 0.50) * 1000,
            "lag_p99_ms": percentile(lags, 0.99) * 1000,
            "lag_max_ms": max(lags, default=0.0) * 1000,
            "lag_mean_ms": statistics.fmean(lags) * 1000 if lags else 0.0,
            "peak_rss_mb": usage.ru_maxrss / 1024,
            "gc_collections": len(monitor.gc_pauses),
            "gc_full_collections": sum(1 for gen, _ in monitor.gc_pauses if gen == 2),
            "gc_pause_max_ms": max((s for _, s in monitor.gc_pauses), default=0.0) * 1000,
            "gc_pause_total_ms": sum(s for _, s in monitor.gc_pauses) * 1000,
        }
        report.write_text(json.dumps(figures))

    loop.add_signal_handler(signal.SIGUSR1, start_window)
    loop.add_signal_handler(signal.SIGUSR2, write_report)
    lag_task = asyncio.create_task(monitor.run())
    try:
        await serve(home, start=start)
    finally:
        lag_task.cancel()


def child_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="loadkit.py daemon")
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--report", type=Path, required=True)
    parser.add_argument("--profile", type=Path)
    args = parser.parse_args(argv)
    # As `atlas run` sets it up (atlas/cli.py), so logging costs what it costs there, and
    # garbage collection waits until the daemon is up.
    pause_collection_while_starting()
    setup_logging(logging.INFO)
    from atlas.daemon import prepare
    from atlas.home import Home

    home = Home(args.home)
    start = prepare(home, fork=True)  # as `atlas run` does: its workers forked here
    run(_child(home, start, args.report, args.profile))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["daemon"]:
        sys.exit(child_main(sys.argv[2:]))
    sys.exit("usage: loadkit.py daemon --home HOME --report PATH [--profile PATH]")
