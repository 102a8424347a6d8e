"""No program Atlas runs over a bot's files runs the bot's code (issue 32, item 3).

For each helper a hook is planted the way a bot could plant it (its write_file, `git config`,
`printf >> .git/config`, a config file ripgrep would read, a program markitdown would run); the
hook writes a marker outside the workspace and copies the daemon's environment (its provider key)
there. The tool must still answer right, and the marker must never appear: with the sandbox on
(git inside it, hooks off) and off (git on the host, hooks off, environment scrubbed).
Real git, real rg, real bwrap.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from atlas.executors.handoff import diff_stat, folder_diff
from atlas.home import Home
from atlas.tools import documents
from atlas.tools.catalog import default_registry
from atlas.tools.registry import RunContext, ToolResult
from tests.helpers import BASE_CONFIG, make_home, run_context
from tests.unit.test_file_tools import docx_bytes

pytestmark = pytest.mark.skipif(
    shutil.which("git") is None or shutil.which("bwrap") is None,
    reason="needs git and bubblewrap",
)

KEY_ENV = "ATLAS_HELPERS_TEST_PROVIDER"
SECRET = "sk-helpers-test-5d1e0b7a"
GIT = ["git", "-c", "user.email=bot@example.com", "-c", "user.name=bot"]


@pytest.fixture(params=["sandbox", "no-sandbox"])
def sandbox(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def markers(tmp_path: Path) -> Path:
    """Where a hook that ran leaves its mark: outside the workspace and the person's home."""
    folder = tmp_path / "markers"
    folder.mkdir()
    return folder


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sandbox: str, markers: Path) -> Home:
    person = tmp_path / "person"
    monkeypatch.setenv("HOME", str(person))
    monkeypatch.setenv(KEY_ENV, SECRET)
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1").replace(
        "max_retries = 0", f'max_retries = 0\napi_key_env = "{KEY_ENV}"'
    )
    if sandbox == "no-sandbox":
        config += "\n[sandbox]\nenabled = false\n"
    made = make_home(person / ".atlas", config=config)
    made.main_bot.workspace.mkdir(parents=True, exist_ok=True)
    return Home(made.root)


@pytest.fixture
def run(home: Home) -> RunContext:
    return run_context(home)


def hook(folder: Path, markers: Path, name: str) -> Path:
    """A program that, if it ever runs, leaves `markers/<name>` with the environment it got
    (the daemon's, provider key included, had it run as the daemon) and passes its input on."""
    script = folder / f"{name}.sh"
    script.write_text(f'#!/bin/sh\nenv > "{markers}/{name}"\ncat\n')
    script.chmod(0o755)
    return script


def assert_never_ran(markers: Path) -> None:
    ran = sorted(p.name for p in markers.iterdir())
    assert not ran, f"hooks ran: {ran}"


async def call(run: RunContext, name: str, **arguments: Any) -> ToolResult:
    result = await default_registry().call(run, name, json.dumps(arguments))
    assert not result.is_error, result.text
    return result


def answer(result: ToolResult) -> list[str]:
    return result.text.splitlines()[:-1]  # the last line is the summary


def git_config(ws: Path, key: str, value: str) -> None:
    """`git config KEY VALUE` in the workspace, as a bot's command would set it."""
    subprocess.run(["git", "-C", str(ws), "config", key, value], check=True)


def shell(ws: Path, script: str) -> None:
    subprocess.run(["sh", "-c", script], cwd=ws, check=True)


def repository(ws: Path) -> None:
    """A git repository in the workspace: build/ and *.log ignored, one file committed."""
    subprocess.run([*GIT, "init", "-q", str(ws)], check=True)
    (ws / ".gitignore").write_text("build/\n*.log\n")
    (ws / "notes.txt").write_text("needle one\n")
    subprocess.run([*GIT, "-C", str(ws), "add", "."], check=True)
    subprocess.run([*GIT, "-C", str(ws), "commit", "-qm", "start"], check=True)
    (ws / "build").mkdir()
    (ws / "build/out.txt").write_text("needle built\n")
    (ws / "debug.log").write_text("needle logged\n")


async def assert_find_still_right(run: RunContext) -> None:
    """Ignored files stay out of a search, and a search inside an ignored folder finds them
    (the ignore rules matched in-process: no git runs for them at all)."""
    everywhere = answer(await call(run, "find_files", pattern="needle"))
    assert everywhere == ["notes.txt:1:needle one"]
    built = answer(await call(run, "find_files", pattern="needle", path="build"))
    assert built == ["build/out.txt:1:needle built"]


async def test_fsmonitor_written_by_write_file_never_runs(run: RunContext, markers: Path) -> None:
    ws = run.bot.workspace
    repository(ws)
    script = hook(ws, markers, "fsmonitor-write-file")
    config = (ws / ".git/config").read_text() + f"[core]\n\tfsmonitor = {script}\n"
    await call(run, "read_file", path=".git/config")  # write_file overwrites only what it read
    await call(run, "write_file", path=".git/config", content=config)
    await assert_find_still_right(run)
    assert_never_ran(markers)


async def test_fsmonitor_set_by_git_config_never_runs(run: RunContext, markers: Path) -> None:
    ws = run.bot.workspace
    repository(ws)
    script = hook(ws, markers, "fsmonitor-git-config")
    git_config(ws, "core.fsmonitor", str(script))
    await assert_find_still_right(run)
    assert_never_ran(markers)


async def test_fsmonitor_appended_with_printf_never_runs(run: RunContext, markers: Path) -> None:
    ws = run.bot.workspace
    repository(ws)
    script = hook(ws, markers, "fsmonitor-printf")
    shell(ws, f"printf '[core]\\n\\tfsmonitor = \"{script}\"\\n' >> .git/config")
    await assert_find_still_right(run)
    assert_never_ran(markers)


def plant_everything(ws: Path, markers: Path) -> None:
    """Every program git's config can name, each its own marker: hooks (by core.hooksPath and
    in .git/hooks), a filter and a diff driver for every file, an external diff, a pager."""
    hooks = ws / "hooks"
    hooks.mkdir()
    for name in ("post-index-change", "reference-transaction", "pre-auto-gc", "post-checkout"):
        hook(hooks, markers, name).rename(hooks / name)
        hook(ws / ".git/hooks", markers, f"git-{name}").rename(ws / ".git/hooks" / name)
    settings = {
        "core.hooksPath": str(hooks),
        "core.fsmonitor": str(hook(ws, markers, "fsmonitor")),
        "core.pager": str(hook(ws, markers, "pager")),
        "diff.external": str(hook(ws, markers, "external-diff")),
        "filter.evil.clean": str(hook(ws, markers, "filter-clean")),
        "filter.evil.smudge": str(hook(ws, markers, "filter-smudge")),
        "filter.evil.required": "true",
        "filter.other.process": str(hook(ws, markers, "filter-process")),
        "diff.evil.textconv": str(hook(ws, markers, "textconv")),
        "diff.evil.command": str(hook(ws, markers, "diff-command")),
    }
    for key, value in settings.items():
        git_config(ws, key, value)
    (ws / ".gitattributes").write_text("*.txt filter=evil diff=evil\n*.md filter=other\n")


async def test_no_hook_filter_or_driver_runs_in_find_files(run: RunContext, markers: Path) -> None:
    ws = run.bot.workspace
    repository(ws)
    plant_everything(ws, markers)
    await assert_find_still_right(run)
    assert_never_ran(markers)


async def test_no_hook_filter_or_driver_runs_in_an_executors_diff(
    run: RunContext, markers: Path
) -> None:
    """The handoff packet's diff and the record's stat (atlas/executors/handoff.py) read a
    folder an executor wrote to: git status and git diff would run the filters."""
    ws = run.bot.workspace
    repository(ws)
    plant_everything(ws, markers)
    (ws / "notes.txt").write_text("needle one\nneedle two\n")
    (ws / "new.md").write_text("fresh\n")
    diff = await folder_diff(run.home, ws)
    assert "+needle two" in diff and "?? new.md" in diff
    stat = await diff_stat(run.home, ws)
    assert "notes.txt | 1 +" in stat and "new.md (new)" in stat
    assert_never_ran(markers)


async def test_find_files_outside_git_still_skips_and_runs_nothing(
    run: RunContext, markers: Path
) -> None:
    ws = run.bot.workspace
    (ws / "node_modules/x").mkdir(parents=True)
    (ws / "node_modules/x/a.txt").write_text("needle dep\n")
    (ws / "main.txt").write_text("needle main\n")
    assert answer(await call(run, "find_files", pattern="needle")) == ["main.txt:1:needle main"]
    assert_never_ran(markers)


async def test_ripgrep_reads_no_config_and_runs_no_preprocessor(
    run: RunContext, markers: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ripgrep config the bot wrote, named by RIPGREP_CONFIG_PATH (set for the person's own
    shell, say), with a preprocessor for every file: rg must neither read nor run it."""
    ws = run.bot.workspace
    pre = hook(ws, markers, "rg-pre")
    (ws / ".ripgreprc").write_text(f"--pre={pre}\n--search-zip\n--no-ignore\n")
    monkeypatch.setenv("RIPGREP_CONFIG_PATH", str(ws / ".ripgreprc"))
    (ws / ".ignore").write_text("skipped.txt\n")  # rg's own ignore file, honoured outside git
    (ws / "main.txt").write_text("needle main\n")
    (ws / "skipped.txt").write_text("needle skipped\n")
    found = answer(await call(run, "find_files", pattern="needle"))
    assert found == ["main.txt:1:needle main"]  # the config's --no-ignore: never read
    assert_never_ran(markers)


def png_bytes() -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (8, 8), "red").save(buf, format="PNG")
    return buf.getvalue()


async def test_document_conversion_runs_no_program(
    run: RunContext, markers: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """markitdown runs exiftool ($EXIFTOOL_PATH, or found in /usr/bin) over whatever its sniffer
    takes for an image: a `.pdf` that is a PNG reaches it. It must not run, and documents must
    still convert."""
    ws = run.bot.workspace
    exiftool = ws / "exiftool"
    exiftool.write_text(
        f'#!/bin/sh\nenv > "{markers}/exiftool"\n'
        'if [ "$1" = -ver ]; then echo 12.70; else echo \'[{"Comment": "ran"}]\'; fi\n'
    )
    exiftool.chmod(0o755)
    monkeypatch.setenv("EXIFTOOL_PATH", str(exiftool))
    monkeypatch.setattr(documents, "_markitdown", None)  # built again, as at a fresh start
    (ws / "scan.pdf").write_bytes(png_bytes())
    (ws / "memo.docx").write_bytes(docx_bytes("Quarterly giraffe report"))
    await default_registry().call(run, "read_file", json.dumps({"path": "scan.pdf"}))
    memo = await call(run, "read_file", path="memo.docx")
    assert "Quarterly giraffe report" in memo.text
    found = answer(await call(run, "find_files", pattern="giraffe"))
    assert found == ["memo.docx:1:Quarterly giraffe report"]
    assert_never_ran(markers)


def test_helpers_get_no_secret_and_no_program_naming_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from atlas.sandbox.helpers import helper_env

    monkeypatch.setenv(KEY_ENV, SECRET)
    monkeypatch.setenv("RIPGREP_CONFIG_PATH", "/x")
    monkeypatch.setenv("GIT_DIR", "/x")
    monkeypatch.setenv("LD_PRELOAD", "/x.so")
    env = helper_env()
    assert SECRET not in env.values()
    assert not {"RIPGREP_CONFIG_PATH", "GIT_DIR", "LD_PRELOAD"} & env.keys()
    assert env["GIT_CONFIG_GLOBAL"] == "/dev/null" and env["GIT_CONFIG_NOSYSTEM"] == "1"
    assert env["PATH"] == os.environ["PATH"]
