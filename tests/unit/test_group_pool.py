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
    # Empty once released: both given back for the next commands, not removed.
    assert group_pool.ready_count(LIMITS) == group_pool.POOL_SIZE + 2
    assert all(folder.is_dir() for g in (first, second) for folder in g.folders)
    taken = [limits.create_group(LIMITS) for _ in range(group_pool.REUSED_MAX)]
    assert {second, first} <= set(taken)  # the released ones first (last given back, first out)
    assert group_pool.wait_idle()
    for group in taken:
        limits.release(group)
    assert group_pool.wait_idle()
    assert group_pool.ready_count(LIMITS) == group_pool.REUSED_MAX  # the rest removed
    ready = set(group_pool._current().ready[LIMITS])
    gone = [g for g in taken if g not in ready]
    assert gone and not any(folder.exists() for g in gone for folder in g.folders)


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
    # Emptied at release: reused (its folders there, nothing in them) or removed.
    assert wait_for(lambda: all(limits._empty(f) or not f.exists() for f in group.folders))


def test_a_forked_child_never_takes_its_parents_ready_groups() -> None:
    first = limits.create_group(LIMITS)
    assert group_pool.wait_idle()
    ready = group_pool.ready_count(LIMITS)  # made ahead, and given back by earlier tests
    assert ready >= group_pool.POOL_SIZE
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
    assert group_pool.ready_count(LIMITS) == ready  # the parent's, untouched
    limits.release(first)


def all_limit_values(group: limits.Group) -> dict[str, str]:
    values = {}
    for folder in group.folders:
        for name in ("pids.max", "memory.limit_in_bytes", "memory.max", "cpu.shares", "cpu.weight"):
            if (folder / name).exists():
                values[f"{folder.parent.parent.name}/{name}"] = (folder / name).read_text().strip()
    return values


def test_a_reused_group_is_empty_and_holds_the_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    wanted = replace(Limits(), max_processes=91, max_memory_mb=300)  # this test's own
    monkeypatch.setattr(group_pool, "POOL_SIZE", 0)  # none made ahead: what is ready is reused
    group = limits.create_group(wanted)
    assert group is not None
    expected = all_limit_values(group)
    joins = " ".join(f"echo 0 > {procs};" for procs in group.procs())
    done = subprocess.run(["sh", "-c", f"{joins} cat /proc/self/cgroup"], capture_output=True)
    assert done.returncode == 0 and group.folders[0].name in done.stdout.decode()
    (group.folders[0] / "pids.max").write_text("5")  # changed while it was out: set back
    limits.release(group)
    assert group_pool.wait_idle() and group_pool.ready_count(wanted) == 1
    again = limits.create_group(wanted)
    assert again == group  # the same folders, no mkdir
    assert again is not None and all(limits._empty(folder) for folder in again.folders)
    assert written_pids_max(again) == "91" and all_limit_values(again) == expected
    # Limits still in force in the reused group: 91 processes at most.
    joins = " ".join(f"echo 0 > {procs};" for procs in again.procs())
    many = f"{joins} for i in $(seq 120); do sleep 5 & done 2>/dev/null; wait"
    started = subprocess.Popen(["sh", "-c", many], stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: len(limits._members(again.folders[0])) >= 90)
        time.sleep(0.2)
        assert len(limits._members(again.folders[0])) <= 91
    finally:
        limits.release(again)
        started.wait(timeout=10)
    assert group_pool.wait_idle()


def test_a_group_with_a_live_process_is_never_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    wanted = replace(Limits(), max_processes=93)
    monkeypatch.setattr(group_pool, "POOL_SIZE", 0)
    group = limits.create_group(wanted)
    assert group is not None
    joins = " ".join(f"echo 0 > {procs};" for procs in group.procs())
    sleeper = subprocess.Popen(["sh", "-c", f"{joins} exec sleep 60"])
    try:
        assert wait_for(lambda: str(sleeper.pid) in Path(group.procs()[0]).read_text())
        # A process the kill at release did not end (yet): one still exiting, say.
        monkeypatch.setattr(limits, "_kill", lambda folder: None)
        limits.release(group)
        assert group_pool.wait_idle()
        assert group_pool.ready_count(wanted) == 0  # not given back
        assert sleeper.poll() is None and all(folder.exists() for folder in group.folders)
        other = limits.create_group(wanted)
        assert other is not None and set(other.folders).isdisjoint(group.folders)
    finally:
        sleeper.kill()
        sleeper.wait()
    monkeypatch.undo()
    assert wait_for(lambda: not any(folder.exists() for folder in group.folders))  # removed
    limits.release(other)
    assert group_pool.wait_idle()


def test_a_second_release_touches_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A group reused by the next command: a late second release of the first must not kill
    the next command's processes."""
    wanted = replace(Limits(), max_processes=95)
    monkeypatch.setattr(group_pool, "POOL_SIZE", 0)
    first = limits.create_group(wanted)
    assert first is not None
    limits.release(first)
    assert group_pool.wait_idle()
    second = limits.create_group(wanted)
    assert second == first  # reused
    joins = " ".join(f"echo 0 > {procs};" for procs in second.procs())
    sleeper = subprocess.Popen(["sh", "-c", f"{joins} exec sleep 60"])
    try:
        assert wait_for(lambda: str(sleeper.pid) in Path(second.procs()[0]).read_text())
        limits.release(first)  # the first command's release, again
        assert group_pool.wait_idle()
        assert sleeper.poll() is None  # the second command's process lives on
    finally:
        limits.release(second)
        assert sleeper.wait(timeout=5) == -9
    assert group_pool.wait_idle()
