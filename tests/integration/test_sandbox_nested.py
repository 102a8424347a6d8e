"""The sandbox starts inside another sandbox (as in CI containers and for people who run Atlas
inside one): a helper script runs under an outer `bwrap --unshare-user`, probes there, and
runs a command in its own sandbox; the test checks what it wrote and what it left running."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

HELPER = """
import json, subprocess, sys
from pathlib import Path
from atlas.sandbox.launcher import SandboxPolicy, probe, sandbox_argv

root, marker = Path(sys.argv[1]), sys.argv[2]
variant = probe()
policy = SandboxPolicy(
    workspace=root / "workspace", env={"PATH": "/usr/bin:/bin"}, readable=(root,)
)
command = (
    "echo made > made; touch ../outside; setsid sleep " + marker + " & "
    "(exec 3<>/dev/tcp/1.1.1.1/80) 2>/dev/null && echo NETWORK; ls /proc | head -3; true"
)
done = subprocess.run(sandbox_argv(["bash", "-c", command], policy), capture_output=True, text=True)
print(json.dumps({"variant": [variant.user_ns, variant.proc], "out": done.stdout + done.stderr}))
"""


def outer(uid: int, masked: bool) -> list[str]:
    # masked: /proc/sys bound over itself read-only, as container runtimes do; a nested user
    # namespace may then not mount a fresh /proc (the launcher falls back to an empty one).
    mask = ["--ro-bind", "/proc/sys", "/proc/sys"] if masked else []
    return [
        "bwrap", "--unshare-user", "--uid", str(uid), "--unshare-pid",
        "--dev-bind", "/", "/", "--proc", "/proc", *mask, "--",
    ]  # fmt: skip


def alive_with(marker: str) -> bool:
    for entry in Path("/proc").iterdir():
        try:
            if marker.encode() in (entry / "cmdline").read_bytes().split(b"\0"):
                return True
        except OSError:
            continue
    return False


@pytest.mark.parametrize("masked", [False, True], ids=["plain", "container-like"])
@pytest.mark.parametrize("uid", [0, 1000], ids=["root-in-outer-userns", "user-in-outer-userns"])
def test_the_sandbox_starts_inside_another(tmp_path: Path, uid: int, masked: bool) -> None:
    (tmp_path / "workspace").mkdir()
    helper = tmp_path / "helper.py"
    helper.write_text(HELPER)
    marker = f"100.{secrets.randbelow(10**9):09d}"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [*outer(uid, masked), sys.executable, str(helper), str(tmp_path), marker]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert (tmp_path / "workspace" / "made").read_text() == "made\n"
    assert not (tmp_path / "outside").exists()
    assert "Read-only file system" in report["out"]
    assert "NETWORK" not in report["out"]
    assert not alive_with(marker)
    if not report["variant"][1]:  # no fresh /proc could be mounted: an empty one, not the host's
        assert report["out"].count("\n") <= 2, report["out"]
