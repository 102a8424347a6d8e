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
import tempfile
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


AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def test_the_sandbox_starts_for_an_ordinary_user() -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root to become an ordinary user")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    python_ok = subprocess.run([*AS_NOBODY, sys.executable, "-c", "import atlas"], env=env, cwd="/")
    if python_ok.returncode != 0:
        pytest.skip("this Python is not readable by an ordinary user")
    root = Path(tempfile.mkdtemp(prefix="atlas-nobody-", dir="/tmp"))
    try:
        (root / "workspace").mkdir()
        for path in (root, root / "workspace"):
            path.chmod(0o777)
        (root / "helper.py").write_text(HELPER)
        marker = f"100.{secrets.randbelow(10**9):09d}"
        argv = [*AS_NOBODY, sys.executable, str(root / "helper.py"), str(root), marker]
        done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd="/", timeout=60)
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout.splitlines()[-1])
        assert (root / "workspace" / "made").stat().st_uid == 65534
        assert not (root / "outside").exists() and "Read-only file system" in report["out"]
        assert "NETWORK" not in report["out"] and not alive_with(marker)
    finally:
        shutil.rmtree(root)
