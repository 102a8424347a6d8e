"""The sandbox's mounts are computed with each folder resolved once (launcher._Facts): the same
answers as os.path.realpath, links of every shape included, and the same mounts as resolving
every path on its own."""

from __future__ import annotations

import os
from pathlib import Path

from atlas.sandbox.launcher import SandboxPolicy, _Facts, _mounts


def tree(root: Path) -> list[Path]:
    (root / "real/deep/er").mkdir(parents=True)
    (root / "real/file").write_text("x")
    (root / "abs").symlink_to(root / "real")
    (root / "rel").symlink_to("real/deep")
    (root / "chain").symlink_to("abs")
    (root / "dangling").symlink_to(root / "nowhere/at/all")
    (root / "real/deep/up").symlink_to("..")
    return [
        root / "real/file",
        root / "abs/file",
        root / "rel/er",
        root / "chain/deep/er/missing/more",
        root / "dangling",
        root / "dangling/below",
        root / "real/deep/up/file",
        root / "missing/x",
        root / "abs/../real/file",
    ]


def test_each_path_resolves_as_realpath_does(tmp_path: Path) -> None:
    facts = _Facts()
    for path in tree(tmp_path):
        assert facts.real(path) == Path(os.path.realpath(path)), path


def test_the_mounts_hide_what_links_lead_to(tmp_path: Path) -> None:
    paths = tree(tmp_path)
    # The tree is in the workspace: under the private /tmp, only what is visible needs hiding.
    policy = SandboxPolicy(workspace=tmp_path, hidden=(tmp_path / "chain/deep", paths[1]))
    mounts, hidden_dirs = _mounts(policy)
    targets = {str(path): options for path, options in mounts}
    assert targets[str(tmp_path / "real/deep")] == ["--tmpfs", str(tmp_path / "real/deep")]
    assert targets[str(tmp_path / "real/file")][:2] == ["--ro-bind", "/dev/null"]
    assert hidden_dirs == [tmp_path / "real/deep"]
