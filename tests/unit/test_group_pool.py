"""Cgroups made ahead and removed after, by the cgroup worker (atlas/sandbox/group_pool.py), on
this machine's real cgroups: a command takes a group whose limits are already written, its
folders go once released, and whatever is left in one is killed at release, not later."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest

from atlas.sandbox import group_pool, limits
from atlas.sandbox.limits import Limits

pytestmark = pytest.mark.skipif(
    limits.mechanism() == "rlimits", reason="no writable cgroup hierarchy here"
)
LIMITS = replace(Limits(), max_processes=77)  # a value of this test's own


def written_pids_max(group: limits.Group) -> str:
    for folder in group.folders:
        for name in ("pids.max",):
            if (folder / name).exists():
                return (folder / name).read_text().strip()
    raise AssertionError(f"no pids.max in {group}")


def wait_for(check: object, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


def test_a_group_is_ready_before_the_command_asks() -> None:
    first = limits.create_group(LIMITS)  # the first: made now, and the pool filled behind it
    assert first is not None and written_pids_max(first) == "77"
    assert group_pool.wait_idle()
    assert group_pool.ready_count(LIMITS) == group_pool.POOL_SIZE
    second = limits.create_group(LIMITS)
    assert second is not None and second.folders[0].is_dir()
    assert written_pids_max(second) == "77"  # made with its limits written
    assert set(second.folders).isdisjoint(first.folders)
    for group in (first, second):
        limits.release(group)
    assert group_pool.wait_idle()
    assert not any(folder.exists() for g in (first, second) for folder in g.folders)


def test_what_is_left_in_a_group_is_killed_at_release_not_later() -> None:
    group = limits.create_group(LIMITS)
    assert group is not None
    joins = " ".join(f"echo $$ > {procs};" for procs in group.procs())
    sleeper = subprocess.Popen(["sh", "-c", f"{joins} exec sleep 60"])
    try:
        assert wait_for(lambda: str(sleeper.pid) in Path(group.procs()[0]).read_text())
        limits.release(group)
        assert sleeper.wait(timeout=5) == -9  # killed by release itself
    finally:
        sleeper.kill()
        sleeper.wait()
    assert group_pool.wait_idle()
    assert wait_for(lambda: not any(folder.exists() for folder in group.folders))


def test_a_forked_child_never_takes_its_parents_ready_groups() -> None:
    first = limits.create_group(LIMITS)
    assert group_pool.wait_idle() and group_pool.ready_count(LIMITS) == group_pool.POOL_SIZE
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: its own pool, its own lock, its own groups
        ok = False
        try:
            group = limits.create_group(LIMITS)
            ok = group is not None and group.folders[0].name.startswith(f"{os.getpid()}-")
            limits.release(group)
            ok = ok and group_pool.wait_idle()
        finally:
            os.write(write, b"1" if ok else b"0")
            os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.close(read)
    os.waitpid(child, 0)
    assert answer == b"1"
    assert group_pool.ready_count(LIMITS) == group_pool.POOL_SIZE  # the parent's, untouched
    limits.release(first)
