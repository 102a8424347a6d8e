"""The limits' cost per command: `bash -c true` unsandboxed, sandboxed without limits, and
sandboxed with them (a cgroup created, joined and removed per command, as run_command does).

    uv run python scripts/bench_sandbox_limits.py [--runs 200] [--tree PATH]

p50 and p90 wall time from spawn to exit (for "limits": from taking the cgroup to releasing
it), and the milliseconds each adds over unsandboxed at p50. Runs alternate, so load hits all
alike. The probe and the mechanism's detection (once per process) are not counted.
"bot's policy + limits" is what run_command does per command: a bot's whole policy from its
view (over a hundred hidden paths, in a throwaway home) turned into bwrap's options, the cgroup
taken, the command run, the cgroup released. `--tree` measures another checkout's `atlas`
package (the tree before a change: `git archive COMMIT atlas | tar -x -C /tmp/before`).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--tree", type=Path, help="a checkout whose atlas package to measure")
    args = parser.parse_args()
    runs = args.runs
    sys.path[:0] = [str(args.tree.resolve())] if args.tree else []
    sys.path.insert(1 if args.tree else 0, str(ROOT))  # tests.helpers: this checkout's
    import atlas
    from atlas.home import Home
    from atlas.sandbox import limits
    from atlas.sandbox.launcher import SandboxPolicy, probe, sandbox_argv
    from atlas.sandbox.policy import policy_for
    from tests.helpers import make_home

    print(f"atlas from {Path(atlas.__file__).parent.parent}")
    probe()
    print(f"limits mechanism: {limits.mechanism()}")
    with tempfile.TemporaryDirectory(prefix="bench-limits-") as folder:
        workspace = Path(folder)
        env = {"PATH": "/usr/bin:/bin"}
        policy = SandboxPolicy(workspace=workspace, env=env)
        plain = ["bash", "-c", "true"]
        full = sandbox_argv(plain, policy, group=None)
        bare = full[full.index("--") + 1 :]  # bwrap onward: no limits' wrapper, no cgroup

        def unsandboxed() -> None:
            subprocess.run(plain, env=env, check=True)

        def no_limits() -> None:
            subprocess.run(bare, env=env, check=True)

        def with_limits() -> None:
            group = limits.create_group(policy.limits)
            try:
                subprocess.run(sandbox_argv(plain, policy, group=group), env=env, check=True)
            finally:
                limits.release(group)

        made = make_home(workspace / "home")
        made.main_bot.workspace.mkdir(parents=True, exist_ok=True)
        home = Home(made.root)
        bot = home.main_bot

        def bot_policy() -> None:
            policy = policy_for(home, bot)
            group = limits.create_group(policy.limits)
            try:
                subprocess.run(sandbox_argv(plain, policy, group=group), env=env, check=True)
            finally:
                limits.release(group)

        cases = {"unsandboxed": unsandboxed, "sandbox, no limits": no_limits}
        cases["sandbox + limits"] = with_limits
        cases["bot's policy + limits"] = bot_policy
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(runs):
            for name, case in cases.items():
                started = time.perf_counter()
                case()
                times[name].append((time.perf_counter() - started) * 1000)
    base = statistics.median(times["unsandboxed"])
    print(f"{'case':<22} {'p50 ms':>8} {'p90 ms':>8} {'+ms p50':>8}   ({runs} runs each)")
    for name, values in times.items():
        p50 = statistics.median(values)
        p90 = statistics.quantiles(values, n=10)[-1]
        print(f"{name:<22} {p50:8.2f} {p90:8.2f} {p50 - base:8.2f}")


if __name__ == "__main__":
    main()
