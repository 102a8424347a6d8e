"""The sandbox's cost per command: the same commands started sandboxed and unsandboxed, side by side.

    uv run python scripts/bench_sandbox.py [--runs 200] [--json]

For each command (`bash -c true`, a small real one: `git init` + `ls` in a fresh folder, and
`bash -c true` with the socat bridge to the proxy, as run_command starts every command):
p50 and p90 wall time from spawn to exit, unsandboxed (`bash -c`, as run_command did before)
and sandboxed (the same through `sandbox_argv` with a bot's standard policy, no proxy), then
the ratio and the milliseconds added at p50. Runs alternate, so load hits both alike. The probe
(once per process) is not counted: it is paid once, at the first command.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from atlas.sandbox.launcher import SandboxPolicy, probe, sandbox_argv

COMMANDS = {
    "bash -c true": "true",
    "git init + ls": "git init -q repo$RANDOM && ls >/dev/null",
}


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(len(ordered) * share), len(ordered) - 1)]


def measure(
    command: str, runs: int, workspace: Path, env: dict[str, str], proxy: Path | None = None
) -> dict[str, float]:
    plain = ["bash", "-c", command]
    policy = SandboxPolicy(
        workspace=workspace, env=env, hidden=(Path.home() / ".ssh",), proxy_socket=proxy
    )
    boxed = sandbox_argv(plain, policy)
    times: dict[str, list[float]] = {"plain": [], "sandboxed": []}
    for _ in range(runs):
        times["plain"].append(timed(plain, workspace, env))
        times["sandboxed"].append(timed(boxed, Path("/"), env))
    row = {}
    for name, values in times.items():
        row[f"{name}_p50_ms"] = statistics.median(values) * 1000
        row[f"{name}_p90_ms"] = percentile(values, 0.9) * 1000
    row["ratio_p50"] = row["sandboxed_p50_ms"] / row["plain_p50_ms"]
    row["added_p50_ms"] = row["sandboxed_p50_ms"] - row["plain_p50_ms"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    started = time.perf_counter()
    variant = probe()
    probe_ms = (time.perf_counter() - started) * 1000
    env = {"PATH": "/usr/bin:/bin", "HOME": str(Path.home()), "LANG": "C.UTF-8"}
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as folder:
        for label, command in COMMANDS.items():
            results[label] = measure(command, args.runs, Path(folder), env)
        # As run_command starts every command when socat is installed: the bridge to the proxy
        # (a listening socket stands in for the proxy; nothing connects to it).
        with socket.socket(socket.AF_UNIX) as listener:
            listener.bind(str(Path(folder) / "proxy.sock"))
            listener.listen()
            proxy = Path(folder) / "proxy.sock"
            results["true + bridge"] = measure("true", args.runs, Path(folder), env, proxy)
    if args.json:
        print(json.dumps({"variant": str(variant), "probe_ms": probe_ms, "results": results}))
        return
    print(f"variant: {variant}; probe (once per process): {probe_ms:.1f} ms; runs: {args.runs}")
    print(
        f"{'command':16} {'plain p50/p90':>15} {'sandboxed p50/p90':>19} {'ratio':>6} {'added':>8}"
    )
    for label, row in results.items():
        plain = f"{row['plain_p50_ms']:.1f}/{row['plain_p90_ms']:.1f}"
        boxed = f"{row['sandboxed_p50_ms']:.1f}/{row['sandboxed_p90_ms']:.1f}"
        added = f"{row['added_p50_ms']:+.1f} ms"
        print(f"{label:16} {plain:>15} {boxed:>19} {row['ratio_p50']:>5.2f}x {added:>8}")


if __name__ == "__main__":
    main()
