"""What a find_files call costs, through the tool registry, in a throwaway home.

    uv run python scripts/bench_find_files.py [--runs 200] [--tree PATH] [--json]

Six cases, each with `[sandbox] enabled` true and false: the workspace a git repository,
searched at its top (`path="."`) and in a folder (`path="src"`: find_files asks
whether the folder is ignored (git check-ignore before issue 32 item 2; in-process .gitignore
matching since), then runs rg), and a workspace outside git.
p50/p90 wall time of one call, in ms; the cases alternate, so load hits them alike. The first
call of each case (the sandbox's probe, the imports) is not counted.

`--tree` runs another checkout's `atlas` package (say the tree before a change, extracted with
`git archive COMMIT atlas | tar -x -C /tmp/before`): the same script measures before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(len(ordered) * share), len(ordered) - 1)]


def project(workspace: Path, git: bool) -> None:
    """A small project: 40 source files, a build folder, a log; a repository when `git`."""
    (workspace / "src").mkdir(parents=True)
    for i in range(40):
        (workspace / "src" / f"m{i}.py").write_text(f"def f{i}():\n    return 'needle {i}'\n")
    (workspace / "build").mkdir()
    (workspace / "build/out.txt").write_text("needle built\n")
    (workspace / "debug.log").write_text("needle logged\n")
    if git:
        (workspace / ".gitignore").write_text("build/\n*.log\n")
        subprocess.run(["git", "init", "-q", str(workspace)], check=True)


def config(base: str, sandbox: bool) -> str:
    return base.format(base_url="http://127.0.0.1:9/v1") + (
        "" if sandbox else "\n[sandbox]\nenabled = false\n"
    )


async def bench(runs: int) -> dict[str, dict[str, float]]:
    from atlas.tools.catalog import default_registry
    from tests.helpers import BASE_CONFIG, make_home, run_context

    registry = default_registry()
    cases = {}
    with tempfile.TemporaryDirectory(prefix="bench-find-") as folder:
        for git in (True, False):
            for sandbox in (True, False):
                name = f"{'repo' if git else 'norepo'}-{'on' if sandbox else 'off'}"
                home = make_home(Path(folder) / name, config=config(BASE_CONFIG, sandbox))
                run = run_context(home)
                project(run.bot.workspace, git)
                where = "git repo" if git else "no repo"
                box = f"sandbox {'on' if sandbox else 'off'}"
                for path in (".", "src") if git else (".",):
                    cases[f"{where}, path {path}, {box}"] = (run, path)
        times: dict[str, list[float]] = {label: [] for label in cases}
        for label, (run, path) in cases.items():  # the probe and first imports: not counted
            arguments = json.dumps({"pattern": "needle", "output_mode": "files_only", "path": path})
            result = await registry.call(run, "find_files", arguments)
            assert not result.is_error, result.text
            assert ("build/" in result.text) == label.startswith("no repo"), result.text
        for _ in range(runs):
            for label, (run, path) in cases.items():
                arguments = json.dumps(
                    {"pattern": "needle", "output_mode": "files_only", "path": path}
                )
                started = time.perf_counter()
                await registry.call(run, "find_files", arguments)
                times[label].append(time.perf_counter() - started)
    return {
        label: {
            "p50_ms": statistics.median(values) * 1000,
            "p90_ms": percentile(values, 0.9) * 1000,
        }
        for label, values in times.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--tree", type=Path, help="a checkout whose atlas package to measure")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sys.path[:0] = [str(args.tree.resolve())] if args.tree else []
    sys.path.insert(1 if args.tree else 0, str(ROOT))  # tests.helpers: this checkout's
    os.environ.pop("RIPGREP_CONFIG_PATH", None)
    results = asyncio.run(bench(args.runs))
    import atlas

    where = str(Path(atlas.__file__).parent.parent)
    if args.json:
        print(json.dumps({"tree": where, "results": results}))
        return
    print(f"atlas from {where}; runs: {args.runs}")
    for label, row in results.items():
        print(f"{label:34} p50 {row['p50_ms']:6.1f} ms   p90 {row['p90_ms']:6.1f} ms")


if __name__ == "__main__":
    main()
