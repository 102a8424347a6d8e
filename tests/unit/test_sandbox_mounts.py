"""The sandbox's mounts are computed with each folder resolved once (launcher._Facts): the same
answers as os.path.realpath, links of every shape included, and the same mounts as resolving
every path on its own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from atlas.sandbox import launcher
from atlas.sandbox.launcher import SandboxPolicy, _Facts, _mounts, sandbox_argv


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


def test_a_loop_of_links_resolves_as_realpath_does(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    (tmp_path / "self").symlink_to("self/x")
    facts = _Facts()
    for path in (tmp_path / "a", tmp_path / "a/below", tmp_path / "self", tmp_path / "b/.."):
        assert facts.real(path) == Path(os.path.realpath(path)), path
    assert not facts.exact  # such answers are not reused


def mount_options_counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    worked_out: list[int] = []
    real_mounts = launcher._mounts

    def counted(policy: SandboxPolicy, facts: _Facts | None = None) -> object:
        worked_out.append(1)
        return real_mounts(policy, facts)

    monkeypatch.setattr(launcher, "_mounts", counted)
    monkeypatch.setattr(launcher, "_built_mounts", {})
    return worked_out


def test_the_same_policy_reuses_its_mounts_until_a_path_they_rest_on_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    worked_out = mount_options_counted(monkeypatch)
    person, workspace = tmp_path / "person", tmp_path / "person" / "ws"
    (person / ".config").mkdir(parents=True)
    workspace.mkdir()
    secret = person / ".config" / "gh"
    policy = SandboxPolicy(
        workspace=workspace, hidden=(secret, person / ".netrc"), readable=(person,)
    )
    first = sandbox_argv(["true"], policy, group=None)
    assert sandbox_argv(["true"], policy, group=None) == first and len(worked_out) == 1
    assert str(secret) not in first  # nothing there: nothing to hide yet

    secret.mkdir()  # the person logs in to a tool: its token folder appears
    (secret / "hosts.yml").write_text("token")
    second = sandbox_argv(["true"], policy, group=None)
    assert len(worked_out) == 2 and pairs(second, "--tmpfs")[-1] == str(secret)

    (person / ".netrc").write_text("machine x password y")  # a hidden file appears
    third = sandbox_argv(["true"], policy, group=None)
    assert len(worked_out) == 3 and third[third.index(str(person / ".netrc")) - 1] == "/dev/null"

    # .config becomes a link elsewhere: what is hidden is where it now leads.
    elsewhere = person / "elsewhere"
    (elsewhere / "gh").mkdir(parents=True)
    (person / ".config").rename(tmp_path / "old-config")
    (person / ".config").symlink_to(elsewhere)
    fourth = sandbox_argv(["true"], policy, group=None)
    assert len(worked_out) == 4 and pairs(fourth, "--tmpfs")[-1] == str(elsewhere / "gh")

    # A link turned to another target (a new link in its place): worked out anew too.
    (person / "other" / "gh").mkdir(parents=True)
    (person / ".config").unlink()
    (person / ".config").symlink_to(person / "other")
    fifth = sandbox_argv(["true"], policy, group=None)
    assert len(worked_out) == 5 and pairs(fifth, "--tmpfs")[-1] == str(person / "other" / "gh")
    assert sandbox_argv(["true"], policy, group=None) == fifth and len(worked_out) == 5

    # The same mounts as working them out afresh, whatever was reused.
    fresh, _ = launcher._mounts(policy)
    assert [o for _, mount in fresh for o in mount] == list(launcher._mount_options(policy))[
        : sum(len(m) for _, m in fresh)
    ]


def test_a_relative_path_is_never_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    worked_out = mount_options_counted(monkeypatch)
    monkeypatch.chdir(tmp_path)
    policy = SandboxPolicy(workspace=tmp_path, hidden=(Path("relative"),))
    sandbox_argv(["true"], policy, group=None)
    sandbox_argv(["true"], policy, group=None)
    assert len(worked_out) == 2  # it depends on the working folder: worked out each time


def pairs(argv: list[str], option: str) -> list[str]:
    return [argv[i + 1] for i, word in enumerate(argv) if word == option]
