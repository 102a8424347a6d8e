"""The cgroup v2 code of atlas/sandbox/limits.py, run for real where this machine allows it.

This machine is a cgroup v1 hybrid: pids, memory and cpu are bound to v1 hierarchies, so no
cgroup2 mount can enable them (a controller is in one hierarchy at a time); the v2 hierarchy
offers `hugetlb` alone at its root, and the root's subtree_control (machine-wide, shared with
everything else here) enables nothing below it. What runs here, in a child process with a
private mount namespace and a cgroup2 mount of its own (the hybrid's /sys/fs/cgroup/unified
unmounted in it): finding the mount and the process's own v2 cgroup (`_mounts`, `_own_cgroups`),
`_v2_parent` refusing v2 without pids, memory and cpu, and, asked for the controllers this
cgroup is offered (none here), making the sandboxes' folder and a trial group; a sandbox's group
joined through the limits' wrapper; `cgroup.kill` killing everything in it at release, and the
group removed. What cannot run here: the move into the `atlas-daemon` leaf and the controllers
enabled in subtree_control (nothing to enable without changing the machine's root), the limits
themselves (`pids.max`, `memory.max`, `cpu.weight` written and enforced) and `_detect` choosing
cgroup2, since those controllers are v1's here. The move into the leaf runs where a cgroup is
offered a controller (the test checks it then).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from atlas.sandbox import limits

V2_ROOT = Path("/sys/fs/cgroup/unified")
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None or not V2_ROOT.is_dir(),
    reason="needs root, unshare and a cgroup2 hierarchy",
)

CHILD = r"""
import json, os, subprocess, sys, time
from pathlib import Path
from atlas.sandbox import limits

mount_point, base_name = Path(sys.argv[1]), sys.argv[2]
subprocess.run(["umount", "-l", "/sys/fs/cgroup/unified"], check=False)  # this namespace only
subprocess.run(["mount", "-t", "cgroup2", "none", str(mount_point)], check=True)
base = mount_point / base_name
base.mkdir()
(base / "cgroup.procs").write_text(str(os.getpid()))
report = {"mounts": {k: str(v) for k, v in limits._mounts().items()},
          "own": limits._own_cgroups().get("")}
free = sorted(set((base / "cgroup.controllers").read_text().split()))
report["controllers"] = free
try:
    report["refused_v2"] = limits._v2_parent(limits._mounts(), limits._own_cgroups()) is None
    parent = limits._v2_parent(limits._mounts(), limits._own_cgroups(), tuple(free))
    report["parent"] = str(parent)
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    report["self_in"] = next(line for line in lines if line.startswith("0::"))
    report["subtree"] = (base / "cgroup.subtree_control").read_text().split()
    group = limits.Group((parent / "sandbox-1",))
    group.folders[0].mkdir()
    wrapper = limits.wrapper(limits.Limits(), group)
    sleeper = subprocess.Popen([*wrapper, "sleep", "60"])
    deadline = time.monotonic() + 5
    while str(sleeper.pid) not in (group.folders[0] / "cgroup.procs").read_text():
        assert time.monotonic() < deadline, "the wrapper never joined"
        time.sleep(0.02)
    report["joined"] = True
    report["has_kill"] = (group.folders[0] / "cgroup.kill").exists()
    removed = False
    while not removed and time.monotonic() < deadline:
        removed = limits._kill_and_remove(group.folders[0])
        time.sleep(0.02)
    report["killed"] = sleeper.wait(timeout=5)
    report["removed"] = removed and not group.folders[0].exists()
finally:
    (mount_point / "cgroup.procs").write_text(str(os.getpid()))  # back to the root, then clean
    for folder in sorted(base.rglob("*"), key=lambda p: -len(p.parts)):
        if folder.is_dir():
            folder.rmdir()
    base.rmdir()
    print(json.dumps(report))
"""


def test_the_v2_code_runs_in_a_private_cgroup2_mount(tmp_path: Path) -> None:
    mount_point = tmp_path / "cgroup2"
    mount_point.mkdir()
    base = f"atlas-v2-test-{os.getpid()}"
    argv = ["unshare", "--mount", "--propagation", "private", sys.executable, "-c", CHILD]
    done = subprocess.run(
        [*argv, str(mount_point), base], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["mounts"][""] == str(mount_point)  # found its own mount, not the machine's
    assert report["own"] == f"/{base}"
    assert report["refused_v2"]  # pids, memory, cpu are not offered: v2 is not chosen
    assert report["parent"] == str(mount_point / base / limits.GROUPS_FOLDER)
    if report["controllers"]:  # something to enable: the process moved into its leaf first
        assert report["self_in"] == f"0::/{base}/atlas-daemon"
        assert set(report["controllers"]) <= set(report["subtree"])
    else:  # nothing offered below the machine's root (its subtree_control is not ours to set)
        assert report["self_in"] == f"0::/{base}"
    assert report["joined"] and report["has_kill"]
    assert report["killed"] == -9 and report["removed"]
    assert not (V2_ROOT / base).exists()


def test_detection_says_why_v2_is_not_chosen_here() -> None:
    offered = set((V2_ROOT / "cgroup.controllers").read_text().split())
    if set(limits.CONTROLLERS) <= offered:
        pytest.skip("this machine's cgroup2 offers pids, memory and cpu")
    assert limits.mechanism() != "cgroup2"
    assert limits._v2_parent(limits._mounts(), limits._own_cgroups()) is None
