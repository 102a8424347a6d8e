"""The first answer after start-up, in a single-process home: is the model SDK loaded yet?

    uv run python scripts/bench_first_answer.py [--runs 7] [--settle 1.0] [--json]

One bot, one process (`[daemon] workers = 1`), its fake Telegram and fake model server on
127.0.0.1 (the model answers at once; scripts/loadkit.py). Each run starts `atlas run` (through
loadkit's probe child), waits for its "ready" line, waits `--settle` seconds more (a person
writes some time after the start), then sends a message and times it to the answer (first_s),
then a second one (second_s, everything loaded). first_s - second_s is what the first answer
still pays for at the first model call. Medians over the runs; ready_s is spawn to "ready".
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from atlas.process import run as run_on_uvloop
from scripts.bench_startup import READY_LOG, compile_bytecode
from scripts.loadkit import FIRST_CHAT, Daemon, Fakes, machine, print_result


async def one_answer(fakes: Fakes, tag: str) -> float:
    telegram = fakes.telegrams[0]
    answered = telegram.expect(tag)
    sent = time.monotonic()
    await telegram.push(telegram.message(f"{tag} please answer", user_id=FIRST_CHAT))
    return await asyncio.wait_for(answered, 30) - sent


async def measure(runs: int, settle: float) -> dict[str, list[float]]:
    figures: dict[str, list[float]] = {"ready": [], "first": [], "second": []}
    with tempfile.TemporaryDirectory(prefix="atlas-first-") as tmp:
        home = Path(tmp) / "home"
        async with Fakes(1, 0.0) as fakes:
            fakes.write_home(home, conversations=1, workers=1)
            env = fakes.env(home, workers=1)
            for run in range(runs):
                daemon = Daemon(home, env, Path(tmp) / f"daemon-{run}.log")
                started = time.monotonic()
                daemon.start()
                try:
                    await daemon.wait_logged(READY_LOG, 60)
                    figures["ready"].append(time.monotonic() - started)
                    await asyncio.sleep(settle)
                    figures["first"].append(await one_answer(fakes, f"T0-{FIRST_CHAT}-{run}"))
                    figures["second"].append(await one_answer(fakes, f"T0-{FIRST_CHAT}-9{run}"))
                finally:
                    daemon.stop()
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--settle", type=float, default=1.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    compile_bytecode()
    figures = run_on_uvloop(measure(args.runs, args.settle))
    result: dict[str, Any] = {
        "runs": args.runs,
        **{f"{name}_s": round(statistics.median(values), 3) for name, values in figures.items()},
        **{f"{name}_all_s": [round(v, 3) for v in values] for name, values in figures.items()},
        "machine": machine(),
    }
    print_result(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
