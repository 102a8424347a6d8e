"""The daemon under steady load for a long while: does its memory grow, does throughput hold?

    uv run python scripts/soak.py [--minutes 10] [--bots 10] [--conversations 50]
        [--latency 0.5] [--every 30] [--context-window 16000] [--faults 0.02] [--workers N]
        [--seed 1] [--json]

The set-up of bench_turns.py (the daemon as a child process, B bots on fake Bot APIs, one fake
model answering after `--latency` seconds with a `read_file` call in half the turns, all on
127.0.0.1). C conversations, started at random moments within one turn's model time, keep
writing (a message, wait for its reply, the next) until the time is up, so every conversation's
history grows all along, as a long-lived chat's does; a small `--context-window` (16,000
tokens) makes compaction summarise each one every few hundred turns, as a long chat's would be
at any window, so what the model sees stays bounded while the store keeps growing. Every `--every` seconds the daemon is
sampled: turns answered so far, RSS, CPU time. `--faults R` makes it a long outage too: a share
R of the model's and Telegram's requests fail at random (as in crash_test.py), so retries and
backoff run all along; a turn whose retries all fail must tell the person so. `--workers N`
runs the bots over N processes (`[daemon] workers = N`, atlas/workers/): RSS and CPU are then
summed over the home's process and its workers, and a worker that died is counted.

Printed: a line per sample, then `name: value` lines (or one JSON object with `--json`):
turns, failed turns (no answer within 120 s), turns that told the person they failed, replies
delivered twice, the faults injected, turns/s and CPU per turn in the first and in the last interval, RSS at
the first sample and at the end, RSS growth per 1,000 turns (least squares over every sample
after the first), and after the daemon stops: inbound messages stored exactly once, and
`PRAGMA integrity_check` on every SQLite file of the home. Exits 1 on a failed turn, a lost or
doubled message, a reply delivered twice, a failed integrity check, or a worker that died.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts.loadkit import (
    FIRST_CHAT,
    Daemon,
    Fakes,
    bot_name,
    integrity_problems,
    machine,
    print_result,
)
from tests.fakes.load_fakes import TAG, TOOL_MARK

TURN_TIMEOUT = 60.0


@dataclass
class Sample:
    seconds: float  # since the soak began
    turns: int  # answered so far
    rss_mb: float
    cpu_seconds: float


@dataclass
class Soak:
    sent: list[str] = field(default_factory=list)  # every tag pushed
    answered: int = 0
    told_failed: int = 0  # the person was told the turn failed (its retries ran out)
    failed: list[str] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)


async def converse(
    fakes: Fakes, index: int, deadline: float, start_after: float, soak: Soak
) -> None:
    bot = index % len(fakes.telegrams)
    chat = FIRST_CHAT + index
    telegram = fakes.telegrams[bot]
    await asyncio.sleep(start_after)
    number = 0
    while time.monotonic() < deadline:
        tag = f"T{bot}-{chat}-{number}"
        text = f"{tag} please {TOOL_MARK if (index + number) % 2 == 0 else 'answer'}"
        reply = telegram.expect(tag)
        soak.sent.append(tag)
        await telegram.push(telegram.message(text, user_id=chat))
        try:
            await asyncio.wait_for(reply, TURN_TIMEOUT)
        except TimeoutError:
            soak.failed.append(tag)
        else:
            if tag in telegram.told_failed:
                soak.told_failed += 1
            else:
                soak.answered += 1
        fakes.model.model_seconds.pop(tag, None)  # kept only for bench_turns' figures
        number += 1


def rss_mb(daemon: Daemon) -> float:
    """The daemon's resident memory: its home's process and every live worker's."""
    return daemon.memory_kb(every_process=True)["VmRSS"] / 1024


async def sample_every(daemon: Daemon, every: float, started: float, soak: Soak) -> None:
    while True:
        await asyncio.sleep(every)
        soak.samples.append(
            Sample(
                time.monotonic() - started,
                soak.answered,
                rss_mb(daemon),
                daemon.cpu_seconds(),
            )
        )
        last = soak.samples[-1]
        print(
            f"  {last.seconds:7.0f} s  {last.turns:7d} turns  {last.rss_mb:7.1f} MB",
            file=sys.stderr,
        )


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y over x (0 when there are fewer than two distinct x)."""
    if len({x for x, _ in points}) < 2:
        return 0.0
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    covariance = sum((x - mean_x) * (y - mean_y) for x, y in points)
    variance = sum((x - mean_x) ** 2 for x, _ in points)
    return covariance / variance


def stored_tags(home: Path, bots: int) -> Counter[str]:
    """How many times each inbound message's tag is stored, over every bot's store."""
    stored: Counter[str] = Counter()
    for index in range(bots):
        path = home / "bots" / bot_name(index) / "conversations.db"
        with contextlib.closing(sqlite3.connect(path)) as db:
            for (content,) in db.execute(
                "SELECT content FROM messages WHERE role = 'user' AND kind = 'message'"
            ):
                stored.update(TAG.findall(content))
    return stored


def interval(first: Sample, second: Sample) -> tuple[float, float]:
    """Turns per second and CPU ms per turn between two samples."""
    turns = second.turns - first.turns
    rate = turns / (second.seconds - first.seconds)
    cpu = (second.cpu_seconds - first.cpu_seconds) / turns * 1000 if turns else 0.0
    return rate, cpu


async def soak(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    record = Soak()
    with tempfile.TemporaryDirectory(prefix="atlas-soak-") as tmp:
        home = Path(tmp) / "home"
        async with Fakes(args.bots, args.latency, args.faults, args.seed) as fakes:
            fakes.write_home(
                home,
                conversations=args.conversations,
                context_window=args.context_window,
                workers=args.workers,
            )
            env = fakes.env(home, workers=args.workers)
            daemon = Daemon(home, env, Path(tmp) / "daemon.log")
            before = fakes.polls()
            daemon.start()
            try:
                await fakes.wait_polling(before, 60)
                started = time.monotonic()
                start_cpu = daemon.cpu_seconds()
                record.samples.append(Sample(0.0, 0, rss_mb(daemon), start_cpu))
                sampler = asyncio.create_task(sample_every(daemon, args.every, started, record))
                deadline = started + args.minutes * 60
                spread = args.latency * 1.5
                await asyncio.gather(
                    *(
                        converse(fakes, i, deadline, rng.uniform(0, spread), record)
                        for i in range(args.conversations)
                    )
                )
                sampler.cancel()
                end_rss = rss_mb(daemon)
                processes = 1 + len(daemon.worker_pids())
            finally:
                code = daemon.stop()
            log = (Path(tmp) / "daemon.log").read_text(errors="replace")
            if code not in (0, None):
                print(log[-3000:], file=sys.stderr)
            worker_deaths = log.count("ended with exit code")  # atlas/workers/pool.py
            stored = stored_tags(home, args.bots)
            problems = integrity_problems(home)
            replies = fakes.replies_per_tag()
            faults = fakes.faults_injected()
    samples = record.samples
    lost = [tag for tag in record.sent if stored[tag] == 0]
    doubled = [tag for tag in record.sent if stored[tag] > 1]
    after_warmup = samples[1:]
    growth = slope([(s.turns / 1000, s.rss_mb) for s in after_warmup])
    first_rate, first_cpu = interval(samples[0], samples[1]) if len(samples) > 1 else (0, 0)
    last_rate, last_cpu = interval(samples[-2], samples[-1]) if len(samples) > 2 else (0, 0)
    return {
        "minutes": args.minutes,
        "bots": args.bots,
        "conversations": args.conversations,
        "latency_ms": args.latency * 1000,
        "context_window": args.context_window,
        "processes": processes,
        "worker_deaths": worker_deaths,
        "turns": record.answered,
        "failed_turns": len(record.failed),
        "turns_told_failed": record.told_failed,
        "replies_delivered_twice": sum(1 for n in replies.values() if n > 1),
        "faults_injected": faults,
        "turns_per_conversation": round(record.answered / args.conversations, 1),
        "turns_per_s_first_interval": round(first_rate, 1),
        "turns_per_s_last_interval": round(last_rate, 1),
        "cpu_ms_per_turn_first_interval": round(first_cpu, 2),
        "cpu_ms_per_turn_last_interval": round(last_cpu, 2),
        "rss_mb_first_sample": round(samples[1].rss_mb if len(samples) > 1 else 0, 1),
        "rss_mb_end": round(end_rss, 1),
        "rss_growth_mb_per_1k_turns": round(growth, 3),
        "messages_sent": len(record.sent),
        "messages_lost": len(lost),
        "messages_stored_twice": len(doubled),
        "integrity": problems or "ok",
        "daemon_exit_code": code,
        **{f"machine_{key}": value for key, value in machine().items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--bots", type=int, default=10)
    parser.add_argument("--conversations", type=int, default=50)
    parser.add_argument("--latency", type=float, default=0.5, help="fake model seconds per call")
    parser.add_argument("--every", type=float, default=30.0, help="seconds between samples")
    parser.add_argument(
        "--context-window",
        type=int,
        default=16_000,
        help="[limits] context_window: small, so compaction keeps each history bounded",
    )
    parser.add_argument(
        "--faults", type=float, default=0.0, help="share of model and Telegram requests that fail"
    )
    parser.add_argument(
        "--workers",
        type=int,
        help="[daemon] workers (and $ATLAS_WORKERS) of the home; unset: the daemon's default",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.conversations < args.bots:
        parser.error("--conversations must be at least --bots")
    result = asyncio.run(soak(args))
    print_result(result, args.json)
    healthy = (
        not result["failed_turns"]
        and not result["replies_delivered_twice"]
        and not result["messages_lost"]
        and not result["messages_stored_twice"]
        and result["integrity"] == "ok"
        and not result["worker_deaths"]
    )
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
