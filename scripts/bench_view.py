"""What the bot's view adds to a file-tool call (issue 32: target < 1 ms).

    uv run python scripts/bench_view.py [--runs 2000] [--tree PATH]

In a temporary home (the person's home a temporary folder with a few secrets): p50 and p90 of
what a file call now does for its path (the view looked up, the path resolved through it one
name at a time, then checked again at open) against what it did before (`Path.resolve()`), for
a file in the workspace, a deep one, and one the view hides; then a whole read_file call (its
path resolved at the gate and opened through the view), for scale. `--tree` measures another
checkout's `atlas` package (the tree before a change: `git archive COMMIT atlas | tar -x -C
/tmp/before`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def timed(fn: Callable[[], object], runs: int) -> tuple[float, float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    times.sort()
    return statistics.median(times) * 1e6, times[int(len(times) * 0.9)] * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--tree", type=Path, help="a checkout whose atlas package to measure")
    args = parser.parse_args()
    runs = args.runs
    if args.tree:  # its atlas first; tests.helpers stays this checkout's
        sys.path.insert(0, str(args.tree.resolve()))
    folder = Path(tempfile.mkdtemp())
    os.environ["HOME"] = str(folder / "person")
    import atlas
    from atlas.sandbox.view import View
    from atlas.tools.files import read_file
    from tests.helpers import make_home, run_context

    print(f"atlas from {Path(atlas.__file__).parent.parent}")
    home = make_home(folder / "person" / ".atlas")
    bot = home.main_bot
    deep = bot.workspace / "src" / "pkg" / "sub" / "mod.py"
    deep.parent.mkdir(parents=True)
    deep.write_text("x = 1\n")
    (bot.workspace / "a.txt").write_text("hello\n")
    (folder / "person" / ".ssh").mkdir()
    (folder / "person" / ".ssh" / "id_rsa").write_text("KEY")
    cases = {
        "workspace file": bot.workspace / "a.txt",
        "deep file": deep,
        "hidden file": folder / "person" / ".ssh" / "id_rsa",
    }
    print(f"{'path':<16} {'before p50':>11} {'view p50':>9} {'view p90':>9} {'added p50':>10}")
    for name, path in cases.items():

        def through_view(path: Path = path) -> None:
            view = View.of(home, bot)
            view.sees(view.resolve(path))

        before, _ = timed(path.resolve, runs)
        after, after90 = timed(through_view, runs)
        print(
            f"{name:<16} {before:>9.1f}us {after:>7.1f}us {after90:>7.1f}us "
            f"{after - before:>8.1f}us"
        )
    run = run_context(home)

    async def reads() -> tuple[float, float]:
        times = []
        for _ in range(min(runs, 500)):
            started = time.perf_counter()
            await read_file.invoke(run, {"path": "src/pkg/sub/mod.py"})
            times.append(time.perf_counter() - started)
        times.sort()
        return statistics.median(times) * 1e6, times[int(len(times) * 0.9)] * 1e6

    p50, p90 = asyncio.run(reads())
    print(f"whole read_file call (for scale): p50 {p50:.0f}us, p90 {p90:.0f}us")


if __name__ == "__main__":
    main()
