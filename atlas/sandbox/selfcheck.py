"""`atlas doctor`'s sandbox check: start a real sandbox and see that it holds."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from atlas.sandbox.launcher import SandboxPolicy, SandboxUnavailable, probe, sandbox_argv

# Inside: a write in the workspace must work; a write beside it (visible, read-only) and any
# connection out must fail. Each line printed is one finding.
SCRIPT = """
echo ok > inside && echo wrote-inside
touch ../outside 2>/dev/null && echo WROTE-OUTSIDE
(exec 3<>/dev/tcp/1.1.1.1/53) 2>/dev/null && echo REACHED-NETWORK
true
"""


def check_sandbox() -> tuple[bool, str]:
    """(ok, what was found): the sandbox starts, contains a write, and has no network."""
    try:
        variant = probe()
    except SandboxUnavailable as exc:
        return False, str(exc)
    with tempfile.TemporaryDirectory(prefix="atlas-doctor-") as folder:
        root = Path(folder)
        (root / "workspace").mkdir()
        policy = SandboxPolicy(
            workspace=root / "workspace", env={"PATH": "/usr/bin:/bin"}, readable=(root,)
        )
        argv = sandbox_argv(["bash", "-c", SCRIPT], policy)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        found = done.stdout.split()
        if "wrote-inside" not in found or not (root / "workspace" / "inside").exists():
            return False, f"a write in the workspace failed: {done.stderr.strip()[:300]}"
        if "WROTE-OUTSIDE" in found or (root / "outside").exists():
            return False, "a command could write outside its workspace"
        if "REACHED-NETWORK" in found:
            return False, "a command reached the network directly"
    proc = "its own /proc" if variant.proc else "an empty /proc (none could be mounted here)"
    users = "a user namespace" if variant.user_ns else "no user namespace (not needed here)"
    bridge = "" if shutil.which("socat") else "; socat missing: commands get no network at all"
    return True, f"bwrap starts with {users} and {proc}; writes contained, no network{bridge}"
