"""The configured folders' resolved paths are kept for a second (asked on every file call), and
a symlink swapped in for one is seen once that second is over."""

from __future__ import annotations

from pathlib import Path

import pytest

from atlas.tools import fences


def test_a_root_swapped_for_a_symlink_is_seen_within_a_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.25]
    monkeypatch.setattr(fences.time, "monotonic", lambda: now[0])
    fences._resolved_in_second.cache_clear()
    workspace, elsewhere = tmp_path / "workspace", tmp_path / "elsewhere"
    workspace.mkdir()
    elsewhere.mkdir()
    assert fences.resolved_root(workspace) == workspace.resolve()

    workspace.rename(tmp_path / "old-workspace")
    workspace.symlink_to(elsewhere)
    now[0] += 0.5
    assert fences.resolved_root(workspace) == workspace  # kept within the second
    now[0] += 0.5
    assert fences.resolved_root(workspace) == elsewhere.resolve()  # the next second resolves
    fences._resolved_in_second.cache_clear()
