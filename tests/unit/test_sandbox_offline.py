"""Commands that could not use the network start without the proxy bridge (atlas/sandbox/
offline.py); everything else, and whatever is not understood, keeps it."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from atlas.home import Home
from atlas.sandbox import launcher
from atlas.sandbox.commands import launch
from atlas.sandbox.launcher import SandboxPolicy, sandbox_argv
from atlas.sandbox.offline import could_use_network
from atlas.sandbox.proxy import stop_proxies
from tests.helpers import run_context

OFFLINE = [
    "ls -la",
    "cat notes.txt | grep -n needle | head -20",
    "mkdir -p build && touch build/x; wc -l src/*.py",
    "grep -rn 'curl http://x' src > out.txt 2>&1",
    "ls\nwc -l a.txt",
    '[ -f x ] && echo "a;b" || true',
]
ONLINE = [
    "curl https://example.com",
    "ls; python -c 'print(1)'",
    "cat $(which curl)",
    "echo `curl x`",
    "cat < /dev/tcp/127.0.0.1/3128",
    "FOO=1 ls",
    "/bin/ls",
    "(ls)",
    "{ ls; }",
    "ls | xargs curl",
    "find . -exec curl {} ;",
    "sort --compress-program=curl x",
    "rg --pre=./x needle",
    "sed -n 'e curl x' a",
    "git status",
    "cat <<EOF\ncurl x\nEOF",
    "echo 'unclosed",
    "diff <(curl a) b",
    "ls \\\ncurl x",
    "f() { curl x; }; f",
    "for x in a; do ls; done",
]


@pytest.mark.parametrize("command", OFFLINE)
def test_offline_commands(command: str) -> None:
    assert not could_use_network(command)


@pytest.mark.parametrize("command", ONLINE)
def test_commands_that_could_reach_the_network_keep_the_bridge(command: str) -> None:
    assert could_use_network(command)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
async def test_an_offline_command_starts_without_bridge_and_a_networked_one_with(
    home: Home,
) -> None:
    run = run_context(home)
    workdir = Path(run.bot.workspace)
    workdir.mkdir(parents=True, exist_ok=True)
    async with launch(run, "ls -la", workdir) as offline:
        assert offline.sandboxed and "HTTP_PROXY" not in offline.env
        assert "HTTP_PROXY" not in offline.argv  # no proxy socket bound, no proxy variables
        assert offline.argv[offline.argv.index("atlas-sandbox") + 1] == "0"  # no bridge
    if shutil.which("socat") is None:
        return
    try:
        async with launch(run, "curl -s https://example.com", workdir) as online:
            assert online.argv[online.argv.index("atlas-sandbox") + 1] == "1"
            assert "HTTP_PROXY" in online.argv
    finally:
        await stop_proxies()


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_the_offline_init_has_no_bridge_and_runs_the_command_with_no_network(
    tmp_path: Path,
) -> None:
    policy = SandboxPolicy(workspace=tmp_path, env={"PATH": "/usr/bin:/bin"})
    script = (
        "cat /proc/[0-9]*/comm; cat /proc/net/dev; "
        "if (exec 3<>/dev/tcp/127.0.0.1/3128) 2>/dev/null; then echo CONNECTED; fi; echo ran"
    )
    argv = sandbox_argv(["bash", "-c", script], policy)
    bwrap_end = len(argv) - 1 - argv[::-1].index("--")
    assert argv[bwrap_end + 1 : bwrap_end + 4] == ["/bin/sh", "-c", launcher.OFFLINE_INIT]
    assert "socat" not in launcher.OFFLINE_INIT
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split()
    assert lines[-1] == "ran" and "CONNECTED" not in lines
    assert "socat" not in lines and {"sh", "bash"} <= set(lines)  # the init, the command
    devices = [line.split(":")[0].strip() for line in done.stdout.splitlines() if ":" in line]
    assert devices == ["lo"]  # its own network namespace: loopback only, no route out


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_the_offline_init_keeps_the_exit_status_and_the_lifeline(tmp_path: Path) -> None:
    policy = SandboxPolicy(workspace=tmp_path, env={"PATH": "/usr/bin:/bin"})
    done = subprocess.run(sandbox_argv(["bash", "-c", "exit 7"], policy), timeout=30)
    assert done.returncode == 7
    read, write = os.pipe()
    argv = sandbox_argv(["bash", "-c", "sleep 300 & sleep 300"], policy, lifeline=True)
    sandbox = subprocess.Popen(argv, stdin=read)
    os.close(read)
    try:
        time.sleep(0.3)
        assert sandbox.poll() is None  # running while the lifeline is held
        os.close(write)  # Atlas's end closed (the job killed, or Atlas gone)
        sandbox.wait(timeout=10)  # everything inside killed, so bwrap ends
    finally:
        if sandbox.poll() is None:
            sandbox.kill()
            sandbox.wait()


@pytest.mark.parametrize(
    ("shell", "script"), [("bash", launcher.INIT), ("/bin/sh", launcher.OFFLINE_INIT)]
)
def test_the_init_scripts_refuse_to_run_outside_a_pid_namespace_of_their_own(
    tmp_path: Path, shell: str, script: str
) -> None:
    """Run by hand on the host (as a benchmark once did, as root), `kill -1` would signal every
    process on the machine. `kill` is shadowed by a function that only records its call, so a
    broken guard shows in the record, not as a dead machine."""
    record = tmp_path / "kills"
    shadow = f'kill() {{ echo "kill $*" >> {record}; }}\n'
    done = subprocess.run(
        [shell, "-c", shadow + script, "init", "0", "0", "touch", str(tmp_path / "ran")],
        capture_output=True,
        text=True,
        timeout=10,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 125
    assert "not in a pid namespace of its own" in done.stderr
    assert not record.exists()
    assert not (tmp_path / "ran").exists()
