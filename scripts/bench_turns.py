"""Turns per second and the daemon's own overhead per turn, under many concurrent chats.

    uv run python scripts/bench_turns.py [--bots 10] [--conversations 200] [--turns 5]
        [--latency 0.5] [--concurrent-turns N] [--profile out.prof] [--json]

The daemon runs as a child process (`atlas run` plus probes, see scripts/loadkit.py) with B
Telegram bots, each on its own fake Bot API, all on one fake OpenAI-compatible model that
answers after `--latency` seconds and makes a `read_file` call in half the turns (so those
turns take two model calls). C conversations each send a message, wait for its reply and send
the next, `--turns` times after `--warmup` turns that are not counted (the first model call
imports the SDK). Everything listens on 127.0.0.1 only.

Printed as `name: value` lines (or one JSON object with `--json`):
- turns_per_s, and its ratio to C/L and to the set-up's real limit C/(L x model calls per turn);
- overhead per turn p50/p95/p99: from the update being handed to the bot by getUpdates to the
  reply arriving at sendMessage, minus the time the fake model spent on that turn's calls;
- event-loop lag p99 (a task sleeping 20 ms: how late it wakes), peak RSS, and the daemon's
  CPU time per turn, all over the measured window.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts.loadkit import Daemon, Fakes, machine, percentile, write_home
from tests.fakes.load_fakes import TOOL_MARK

FIRST_CHAT = 5000
TURN_TIMEOUT = 120.0


@dataclass
class Turn:
    tool: bool
    overhead: float  # seconds: served -> replied, minus the model's time
    end_to_end: float  # pushed -> replied
    model: float


async def converse(
    fakes: Fakes, index: int, first: int, count: int, turns: list[Turn], failures: list[str]
) -> None:
    """One conversation: `count` turns, each waiting for its reply."""
    bots = len(fakes.telegrams)
    bot = index % bots
    chat = FIRST_CHAT + index
    telegram = fakes.telegrams[bot]
    for number in range(first, first + count):
        tag = f"T{bot}-{chat}-{number}"
        tool = (index + number) % 2 == 0
        text = f"{tag} please {TOOL_MARK if tool else 'answer'}"
        reply = telegram.expect(tag)
        pushed = time.monotonic()
        update_id = await telegram.push(telegram.message(text, user_id=chat))
        try:
            replied = await asyncio.wait_for(reply, TURN_TIMEOUT)
        except TimeoutError:
            failures.append(f"{tag}: no reply within {TURN_TIMEOUT:.0f} s")
            return
        served = telegram.served_at.get(update_id, pushed)
        model = fakes.model.model_seconds.pop(tag, 0.0)
        turns.append(Turn(tool, replied - served - model, replied - pushed, model))


async def drive(
    fakes: Fakes, conversations: int, first: int, count: int
) -> tuple[list[Turn], list[str]]:
    turns: list[Turn] = []
    failures: list[str] = []
    await asyncio.gather(
        *(converse(fakes, i, first, count, turns, failures) for i in range(conversations))
    )
    return turns, failures


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    concurrent = args.concurrent_turns or args.conversations
    with tempfile.TemporaryDirectory(prefix="atlas-bench-") as tmp:
        home = Path(tmp) / "home"
        async with Fakes(args.bots, args.latency) as fakes:
            users = [FIRST_CHAT + i for i in range(args.conversations)]
            write_home(
                home,
                bots=args.bots,
                model_url=fakes.model.base_url,
                telegram_urls=[t.base_url for t in fakes.telegrams],
                allowed_users=users,
                concurrent_turns=concurrent,
            )
            daemon = Daemon(
                home,
                fakes.env(home),
                Path(tmp) / "daemon.log",
                profile=args.profile,
            )
            before = fakes.polls()
            daemon.start()
            try:
                await fakes.wait_polling(before, 60)
                async with asyncio.timeout(args.max_seconds):
                    _, warm_failures = await drive(fakes, args.conversations, 0, args.warmup)
                    if warm_failures:
                        raise RuntimeError(f"warm-up failed: {warm_failures[:3]}")
                    await daemon.window_start()
                    cpu_before = daemon.cpu_seconds()
                    harness_before = time.process_time()
                    started = time.monotonic()
                    turns, failures = await drive(
                        fakes, args.conversations, args.warmup, args.turns
                    )
                    seconds = time.monotonic() - started
                    cpu = daemon.cpu_seconds() - cpu_before
                    harness_cpu = time.process_time() - harness_before
                    probe = await daemon.window_report()
                    memory = daemon.memory_kb()
            finally:
                code = daemon.stop()
                log_tail = (Path(tmp) / "daemon.log").read_text(errors="replace")[-3000:]
            if code not in (0, None) or not turns:
                print(log_tail, file=sys.stderr)
    overheads = [t.overhead for t in turns]
    tool_turns = sum(t.tool for t in turns)
    calls_per_turn = (len(turns) + tool_turns) / len(turns)
    rate = len(turns) / seconds
    result: dict[str, Any] = {
        "bots": args.bots,
        "conversations": args.conversations,
        "concurrent_turns": concurrent,
        "latency_ms": args.latency * 1000,
        "turns": len(turns),
        "failed_turns": len(failures),
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
        "end_to_end_p50_ms": round(percentile([t.end_to_end for t in turns], 0.5) * 1000, 1),
        "daemon_cpu_ms_per_turn": round(cpu / len(turns) * 1000, 2),
        "daemon_cpu_share": round(cpu / seconds, 2),
        # The fakes and the drivers share this process: near 1.0, their own delays are in
        # the overhead figures too.
        "harness_cpu_share": round(harness_cpu / seconds, 2),
        "lag_p99_ms": round(probe["lag_p99_ms"], 2),
        "lag_max_ms": round(probe["lag_max_ms"], 2),
        "gc_collections": probe["gc_collections"],
        "gc_full_collections": probe["gc_full_collections"],
        "gc_pause_max_ms": round(probe["gc_pause_max_ms"], 2),
        "gc_pause_total_ms": round(probe["gc_pause_total_ms"], 1),
        "peak_rss_mb": round(memory["VmHWM"] / 1024, 1),
        "rss_after_mb": round(memory["VmRSS"] / 1024, 1),
        **{f"machine_{key}": value for key, value in machine().items()},
    }
    if failures:
        result["failures"] = failures[:10]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bots", type=int, default=10)
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--turns", type=int, default=5, help="measured turns per conversation")
    parser.add_argument("--warmup", type=int, default=1, help="uncounted turns first")
    parser.add_argument("--latency", type=float, default=0.5, help="fake model seconds per call")
    parser.add_argument(
        "--concurrent-turns", type=int, default=0, help="[limits] concurrent_turns (default: C)"
    )
    parser.add_argument("--max-seconds", type=float, default=600, help="give up after this long")
    parser.add_argument("--profile", type=Path, help="cProfile the daemon's loop over the window")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.conversations < args.bots:
        parser.error("--conversations must be at least --bots")
    result = asyncio.run(bench(args))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    return 1 if result.get("failed_turns") else 0


if __name__ == "__main__":
    sys.exit(main())
