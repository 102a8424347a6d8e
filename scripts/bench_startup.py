"""Start-up figures: `atlas --help`, `atlas run` until a message sent at start is answered, idle RSS.

    uv run python scripts/bench_startup.py [--bots 10] [--runs 5] [--idle-seconds 60]
        [--workers N] [--json]

- help_s: wall time of `atlas --help` (the console script of this environment), median of runs;
- ready_s: `atlas run` (through scripts/loadkit.py's probe child, which adds nothing before
  `serve`) from spawn until a message sent to every bot at that moment has been answered by
  each (the fake model answers at once), median: ready as a person sees it;
- home_cpu_at_ready_s / workers_cpu_at_ready_s: the CPU seconds the home's process and its
  workers (together) had spent when the last bot answered, medians: what being ready costs;
- its phases, medians, each from spawn: forked_s (with workers: the home's process has
  imported what the bots use and forked its workers, atlas/workers/fork.py), polling_s (every
  bot's fake Telegram has received a getUpdates call), daemon_ready_s (the daemon logs
  "ready", after the routine scheduler, the dashboard and the plugin socket have started),
  first_answer_s (the first bot's answer);
- idle_rss_mb: the daemon's RSS after `--idle-seconds` with every bot polling and no traffic
  (measured in the last run), and its peak: the home's process; idle_rss_mb_all: the home's
  process and its workers together (RSS counts the pages forked workers share with the home's
  process once in each); idle_pss_mb_all: the same, each shared page divided among the
  processes that share it, i.e. what they cost the machine together;
- bytecode: Atlas's own modules are byte-compiled first (as any start after the first finds
  them, unless PYTHONDONTWRITEBYTECODE is set, as on the machine these figures come from);
  `packages_bytecode` says whether the installed packages were compiled at install (`uv sync`
  does, [tool.uv] compile-bytecode): without it every start compiles them again;
- `--workers N`: `[daemon] workers = N` in the home (and $ATLAS_WORKERS=N for the daemon);
  without it the daemon's default (one per core). workers_ready_s: the phase at which the home's
  process logs that its workers are ready (with more than one process).
Everything listens on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from atlas.process import run as run_on_uvloop  # the harness too: its fakes cost less
from scripts.loadkit import FIRST_CHAT, Daemon, Fakes, machine, print_result

ATLAS = Path(sys.executable).parent / "atlas"


def compile_bytecode() -> bool:
    """Compile Atlas's own modules; whether the installed packages have their bytecode."""
    import compileall
    import importlib.util

    compileall.compile_dir(str(Path(__file__).resolve().parent.parent / "atlas"), quiet=1)
    spec = importlib.util.find_spec("aiogram.types")  # the largest of them
    assert spec is not None and spec.origin is not None
    return Path(importlib.util.cache_from_source(spec.origin)).exists()


def time_help(runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([str(ATLAS), "--help"], check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    return times


READY_LOG = "ready; stop with"  # atlas/daemon.py's line once everything has started
FORKED_LOG = "workers forked ("  # atlas/daemon.py's, once the shared imports are done
WORKERS_LOG = "workers ready:"  # atlas/daemon.py's, once each worker has started its bots
PHASES = ("forked", "polling", "workers_ready", "daemon_ready", "first_answer", "ready")
CPU_AT_READY = ("home_cpu", "workers_cpu")  # CPU seconds each side had spent by then


async def one_start(fakes: Fakes, daemon: Daemon, run: int, workers: int) -> dict[str, float]:
    """Seconds from spawn to each phase of one start. A message is pushed to every bot's fake
    Bot API right after the spawn, as a person writing at that moment would."""
    before = fakes.polls()
    started = time.monotonic()
    daemon.start()
    answers = []
    for bot, telegram in enumerate(fakes.telegrams):
        tag = f"T{bot}-{FIRST_CHAT}-{run}"
        answers.append(telegram.expect(tag))
        await telegram.push(telegram.message(f"{tag} please answer", user_id=FIRST_CHAT))

    async def answered() -> tuple[list[float], tuple[float, float]]:
        arrived = await asyncio.gather(*answers)
        return arrived, daemon.cpu_split()  # read the moment the last bot has answered

    answering = asyncio.create_task(answered())

    def logged_if_workers(text: str) -> Awaitable[float]:
        return daemon.wait_logged(text, 60) if workers > 1 else asyncio.sleep(0, float("nan"))

    forked, polling, workers_ready, logged = await asyncio.gather(
        logged_if_workers(FORKED_LOG),
        fakes.wait_polling(before, 60),
        logged_if_workers(WORKERS_LOG),
        daemon.wait_logged(READY_LOG, 60),
    )
    arrived, (home_cpu, workers_cpu) = await asyncio.wait_for(answering, 60)
    return {
        "forked": forked,
        "polling": polling,
        "workers_ready": workers_ready,
        "daemon_ready": logged,
        "first_answer": min(arrived) - started,
        "ready": max(arrived) - started,
        "home_cpu": home_cpu,
        "workers_cpu": workers_cpu if workers > 1 else float("nan"),
    }


async def time_ready(args: argparse.Namespace) -> dict[str, Any]:
    phases: dict[str, list[float]] = {phase: [] for phase in PHASES + CPU_AT_READY}
    idle: dict[str, int] = {}
    idle_all: dict[str, int] = {}
    processes = 0
    with tempfile.TemporaryDirectory(prefix="atlas-start-") as tmp:
        home = Path(tmp) / "home"
        async with Fakes(args.bots, 0.0) as fakes:
            fakes.write_home(home, conversations=1, concurrent_turns=8, workers=args.workers)
            env = fakes.env(home, workers=args.workers)
            workers = min(args.workers or os.cpu_count() or 1, args.bots)
            for run in range(args.runs):
                daemon = Daemon(home, env, Path(tmp) / f"daemon-{run}.log")
                try:
                    for phase, seconds in (await one_start(fakes, daemon, run, workers)).items():
                        phases[phase].append(seconds)
                    if run == args.runs - 1:
                        await asyncio.sleep(args.idle_seconds)
                        idle = daemon.memory_kb()
                        idle_all = daemon.memory_kb(every_process=True)
                        processes = 1 + len(daemon.worker_pids())
                finally:
                    daemon.stop()
    return {"phases": phases, "idle": idle, "idle_all": idle_all, "workers": processes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bots", type=int, default=10)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument(
        "--workers", type=int, help="[daemon] workers (default: the daemon's, one per core)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    packages_bytecode = compile_bytecode()
    helps = time_help(args.runs)
    measured = run_on_uvloop(time_ready(args))
    result: dict[str, Any] = {
        "bots": args.bots,
        "workers": measured["workers"],
        "runs": args.runs,
        "help_s": round(statistics.median(helps), 3),
        "help_min_s": round(min(helps), 3),
        "ready_s": round(statistics.median(measured["phases"]["ready"]), 3),
        "ready_min_s": round(min(measured["phases"]["ready"]), 3),
        **{
            f"{phase}_s": round(statistics.median(measured["phases"][phase]), 3)
            for phase in PHASES[:-1]
            if not any(math.isnan(seconds) for seconds in measured["phases"][phase])
        },
        **{
            f"{figure}_at_ready_s": round(statistics.median(measured["phases"][figure]), 2)
            for figure in CPU_AT_READY
            if not any(math.isnan(seconds) for seconds in measured["phases"][figure])
        },
        "packages_bytecode": packages_bytecode,
        "idle_seconds": args.idle_seconds,
        "idle_rss_mb": round(measured["idle"].get("VmRSS", 0) / 1024, 1),
        "idle_peak_rss_mb": round(measured["idle"].get("VmHWM", 0) / 1024, 1),
        "idle_rss_mb_all": round(measured["idle_all"].get("VmRSS", 0) / 1024, 1),
        "idle_pss_mb_all": round(measured["idle_all"].get("Pss", 0) / 1024, 1),
        **{f"machine_{key}": value for key, value in machine().items()},
    }
    print_result(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
