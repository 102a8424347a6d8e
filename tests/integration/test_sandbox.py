"""The sandbox contains real commands: run through run_command (no gate: the sandbox alone must
hold), then the filesystem, the output and the listeners are checked from outside.

The person's home is a folder of this test (HOME points there), the Atlas home inside it as
`~/.atlas` is by default, with credentials, a vault and a provider key in the daemon's
environment.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import secrets
import shutil
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from atlas.home import Home
from atlas.sandbox.proxy import stop_proxies
from atlas.tools.registry import RunContext
from atlas.tools.shell import jobs_for, run_command
from tests.helpers import BASE_CONFIG, make_home, run_context

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

KEY_ENV = "ATLAS_SANDBOX_TEST_PROVIDER"
SECRET = "sk-sandbox-test-7f3a9c1e5b"
# Made at run time: a checkout under /tmp is visible to commands (read-only), and this file's own
# text must not count as a leak when `grep -r` reaches it.
MARK = "M" + secrets.token_hex(5)
MARKS = {
    ".ssh/id_rsa": f"{MARK}-ssh-private-key",
    ".aws/credentials": f"{MARK}-aws-credentials",
    ".netrc": f"machine example.com password {MARK}-netrc",  # a file: hidden behind an empty one
    "vault/token.txt": f"{MARK}-vault-outside-the-home",
    ".atlas/vault/inside.txt": f"{MARK}-vault-inside-the-home",
    ".atlas/mcp.json": json.dumps({"mcpServers": {}, "x": f"{MARK}-mcp"}),
    ".atlas/atlas.db": f"{MARK}-database",
}


@pytest.fixture
async def person(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Home]:
    """The person's home: credentials, notes, and the Atlas home in ~/.atlas."""
    person = tmp_path / "person"
    monkeypatch.setenv("HOME", str(person))
    monkeypatch.setenv(KEY_ENV, SECRET)
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1").replace(
        "max_retries = 0", f'max_retries = 0\napi_key_env = "{KEY_ENV}"'
    )
    config += f'# {MARK}-config\n[trust]\nvault = "{person}/vault"\n'
    home = make_home(person / ".atlas", config=config)
    with (home.main_bot.root / "bot.toml").open("a") as bot_toml:
        bot_toml.write(f"# {MARK}-bot-toml\n")
    for name, text in MARKS.items():
        (person / name).parent.mkdir(parents=True, exist_ok=True)
        (person / name).write_text(text)
    (person / "notes.txt").write_text("keep me")
    home.main_bot.workspace.mkdir(parents=True, exist_ok=True)
    yield Home(home.root)
    await jobs_for(home).shutdown()
    await stop_proxies()


def snapshot(person: Path, workspace: Path) -> dict[str, str]:
    """Every path under the person's home but the workspace (and the proxy's sockets in
    ~/.atlas/run, Atlas's own), with its content's hash."""
    found = {}
    skip = (workspace, person / ".atlas" / "run")
    for path in sorted(person.rglob("*")):
        if any(path == folder or folder in path.parents for folder in skip):
            continue
        key = str(path.relative_to(person))
        found[key] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
    return found


async def sh(run: RunContext, command: str, **arguments: object) -> str:
    result = await run_command.invoke(run, {"command": command, "timeout": 60, **arguments})
    assert not result.is_error, result.text
    return result.text


RM_HOME = [
    "rm -rf ~",
    'f() { rm -rf "$1"; }; f ~',
    "setsid -w rm -rf ~",
    "rm -rf {~/.atlas,~/.ssh,~/notes.txt,~/vault}",
    "command -v busybox >/dev/null && busybox rm -rf ~ || command rm -rf ~",
    "find ~ -mindepth 1 -maxdepth 2 -exec sh -c 'rm -rf \"$1\"' _ {} \\;",
    'env -S "rm -rf $HOME"',
    "printf 'rm -rf \"$HOME\"\\n' > wipe.sh && bash wipe.sh",
    'awk \'BEGIN { system("rm -rf " ENVIRON["HOME"]) }\'',
    "python3 -c \"import shutil, os; shutil.rmtree(os.path.expanduser('~'))\"",
    "echo > ~/.atlas/config.toml; sed -i s/ask/auto/ ~/.atlas/bots/atlas/bot.toml",
    'echo \'{"mcpServers": {"evil": {}}}\' > ~/.atlas/mcp.json; rm -rf ~/.atlas/vault ~/vault',
    'cd / && rm -rf "./${HOME#/}"',  # every attack aims at HOME, a folder of this test
    "umount -l ~/.atlas ~; mount -o remount,rw / ~; rm -rf ~/.atlas ~",
    "unshare -Urm sh -c 'umount -l ~/.atlas; mount -o remount,rw ~; rm -rf ~'",
]


@pytest.mark.parametrize("command", RM_HOME)
async def test_rm_home_in_disguise_leaves_the_home_intact(person: Home, command: str) -> None:
    root = person.root.parent
    workspace = person.main_bot.workspace
    before = snapshot(root, workspace)
    await sh(run_context(person), command)
    assert snapshot(root, workspace) == before


async def test_secrets_and_atlas_files_cannot_be_read(person: Home) -> None:
    files = " ".join(f"~/{name}" for name in MARKS)
    command = (
        f"cat {files} ~/.atlas/config.toml ~/.atlas/bots/atlas/bot.toml; ls -la ~/.atlas ~/.ssh; "
        "umount -l ~/.atlas ~/.ssh ~/vault; unshare -Urm sh -c 'umount -l ~/.atlas; cat "
        f"~/.atlas/config.toml'; grep -r {MARK} ~ /tmp 2>/dev/null; env; "
        "cat /proc/$PPID/environ /proc/1/environ; "
        "cat /proc/[0-9]*/environ | tr '\\0' '\\n'"
    )
    output = await sh(run_context(person), command)
    assert MARK not in output
    assert SECRET not in output and KEY_ENV not in output
    assert "notes.txt" not in output  # ls ~/.atlas, ~/.ssh: empty


async def test_no_unix_socket_of_the_machine_is_reachable(person: Home) -> None:
    """The network namespace does not fence Unix sockets: /run (Docker, D-Bus, agents) is empty."""
    output = await sh(run_context(person), "ls -A /run /var/run; echo end")
    assert output == "/run:\n\n/var/run:\nend\n[exit code 0]"


async def test_a_loopback_listener_gets_no_connection(person: Home) -> None:
    accepted: list[int] = []

    async def count(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        writer.close()

    server = await asyncio.start_server(count, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    command = (
        f"(exec 3<>/dev/tcp/127.0.0.1/{port}); curl -s -m 3 http://127.0.0.1:{port}/; "
        f"curl -s -m 3 --noproxy '*' http://127.0.0.1:{port}/; "
        f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 3)\"; "
        "curl -sS -m 3 --noproxy '*' http://1.1.1.1/"
    )
    async with server:
        output = await sh(run_context(person), command)
    assert accepted == []
    assert "the sandbox stopped this" in output  # the hint for a network refusal


async def test_read_only_mode_writes_nothing_not_even_the_workspace(person: Home) -> None:
    run = run_context(person)
    run.state.mode = "read-only"
    output = await sh(run, "touch made; echo x > ~/.atlas/bots/atlas/workspace/made2; ls")
    assert "Read-only file system" in output and "read-only mode" in output
    assert list(person.main_bot.workspace.iterdir()) == []
    assert "made" not in await sh(run_context(person), "ls")


async def test_granted_paths_writable_and_hidden_paths_gone(person: Home) -> None:
    root = person.root.parent
    (root / "projects").mkdir()
    (root / "private").mkdir()
    (root / "private" / "diary").write_text(f"{MARK}-diary")
    with (person.main_bot.root / "bot.toml").open("a") as bot_toml:
        bot_toml.write('[sandbox]\nwritable = ["~/projects"]\nhidden = ["~/private"]\n')
    home = Home(person.root)
    output = await sh(run_context(home), "echo made > ~/projects/new; cat ~/private/diary")
    assert (root / "projects" / "new").read_text() == "made\n"
    assert MARK not in output


def small_wheel(folder: Path) -> Path:
    """A wheel made by hand (no build backend needed, nothing from the network)."""
    wheel = folder / "atlasdemo-0.1-py3-none-any.whl"
    info = "atlasdemo-0.1.dist-info"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("atlasdemo/__init__.py", "ANSWER = 42\n")
        archive.writestr(
            f"{info}/METADATA", "Metadata-Version: 2.1\nName: atlasdemo\nVersion: 0.1\n"
        )
        archive.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        archive.writestr(f"{info}/RECORD", "")
    return wheel


async def test_ordinary_work_runs(person: Home) -> None:
    """A venv with a package, git, make and a test: all in the workspace, all offline."""
    workspace = person.main_bot.workspace
    wheel = small_wheel(workspace)
    (workspace / "Makefile").write_text("out.txt:\n\techo built > out.txt\n")
    (workspace / "test_demo.py").write_text("import atlasdemo\nassert atlasdemo.ANSWER == 42\n")
    command = (
        "set -e; python3 -m venv .venv && .venv/bin/python -m pip install -q --no-index "
        f"{wheel.name} && .venv/bin/python test_demo.py && echo venv-ok; make -s && "
        "git init -q repo && cd repo && echo hi > f && git add f && "
        "git -c user.name=bot -c user.email=bot@example.invalid commit -qm first && "
        "git log --oneline | wc -l"
    )
    output = await sh(run_context(person), command, timeout=120)
    assert "venv-ok" in output and output.endswith("1\n[exit code 0]"), output
    assert (workspace / "out.txt").read_text() == "built\n"
    assert (workspace / "repo" / ".git").is_dir()


# Red team, issue 17: secrets beyond the first list, each read by a real command.
MORE_SECRETS = [
    ".bash_history",
    ".python_history",
    ".mozilla/firefox/abc.default/cookies.sqlite",
    ".config/chromium/Default/Cookies",
    ".config/google-chrome/Default/Login Data",
    ".codex/auth.json",
    ".claude/.credentials.json",
    ".azure/accessTokens.json",
    ".config/rclone/rclone.conf",
    ".pgpass",
    ".cargo/credentials.toml",
    ".local/share/TelegramDesktop/tdata/key",
    ".ethereum/keystore/key",
]


async def test_browser_profiles_histories_and_tool_tokens_cannot_be_read(person: Home) -> None:
    root = person.root.parent
    for name in MORE_SECRETS:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"{MARK}:{name}")
    output = await sh(run_context(person), f"grep -r {MARK} ~ 2>/dev/null; true")
    assert MARK not in output, output


@pytest.mark.skipif(
    not Path("/etc/shadow").exists() or not os.access("/etc/shadow", os.R_OK),
    reason="only a root sandbox could read /etc/shadow",
)
async def test_root_only_secrets_are_hidden_from_a_root_sandbox(person: Home) -> None:
    output = await sh(run_context(person), "cat /etc/shadow /etc/gshadow; echo end")
    assert "root:" not in output and "end" in output, output


async def test_a_link_in_the_workspace_does_not_turn_a_grant_elsewhere(person: Home) -> None:
    """A grant written inside the workspace is not followed out of it by a link the bot made:
    else the bot would choose where it may write (~/.config/autostart, ~/.local/bin...)."""
    root = person.root.parent
    (root / ".config" / "autostart").mkdir(parents=True)
    await sh(run_context(person), f"ln -s {root}/.config/autostart out; ls -l out")
    with (person.main_bot.root / "bot.toml").open("a") as bot_toml:
        bot_toml.write('[sandbox]\nwritable = ["out"]\n')
    output = await sh(run_context(Home(person.root)), "echo '[Desktop Entry]' > out/evil.desktop")
    assert list((root / ".config" / "autostart").iterdir()) == []
    # Where the link leads is not in the view at all: the home is empty but for grants.
    assert "No such file or directory" in output


@pytest.mark.parametrize("place", [".colima/default/docker.sock", ".lima/vm/sock/ssh.sock"])
async def test_a_container_socket_in_the_home_is_not_reachable(person: Home, place: str) -> None:
    """Colima, Lima, Rancher Desktop keep their Docker socket in the home: the network namespace
    does not fence Unix sockets, and the Docker socket is root on the machine."""
    accepted: list[int] = []

    async def count(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        writer.close()

    path = person.root.parent / place
    path.parent.mkdir(parents=True)
    server = await asyncio.start_unix_server(count, path)
    command = (
        f"python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('{path}')\" "
        f"; curl -s -m 3 --unix-socket {path} http://docker/version; true"
    )
    async with server:
        await sh(run_context(person), command)
    assert accepted == []


async def test_a_hidden_file_replaced_while_a_command_runs_stays_hidden(person: Home) -> None:
    root, ready = person.root.parent, person.main_bot.workspace / "ready"
    command = "touch ready; while [ ! -e go ]; do sleep 0.05; done; cat ~/.netrc; true"
    task = asyncio.create_task(sh(run_context(person), command))
    for _ in range(200):  # until the sandbox stands: its mounts are made
        if ready.exists():
            break
        await asyncio.sleep(0.05)
    (root / ".netrc.new").write_text(f"{MARK}-new-netrc")
    os.replace(root / ".netrc.new", root / ".netrc")  # as git credential-store, npm, gh write
    (person.main_bot.workspace / "go").touch()
    assert MARK not in await task


async def test_no_user_namespace_inside_where_bwrap_can_forbid_it(person: Home) -> None:
    """A user namespace inside gives back every capability (in it), and with them the parts of
    the kernel most local exploits go through; bwrap >= 0.8 can forbid one."""
    from atlas.sandbox.launcher import probe

    if not probe().no_nested_userns:
        pytest.skip("this bwrap, or this machine, cannot forbid a user namespace inside")
    output = await sh(
        run_context(person),
        'unshare -U true && echo NESTED-USERNS; python3 -c "import os; os.unshare(0x10000000)'
        '" && echo NESTED-USERNS; true',
    )
    assert "NESTED-USERNS" not in output, output


async def test_a_link_in_a_granted_folder_does_not_turn_a_grant_inside_it_elsewhere(
    person: Home,
) -> None:
    """`~/projects/app` granted but missing: a command makes it a link, and the next launch
    would bind where it leads writable. A grant inside another is writable already: dropped."""
    root = person.root.parent
    (root / "projects").mkdir()
    (root / ".config" / "autostart").mkdir(parents=True)
    with (person.main_bot.root / "bot.toml").open("a") as bot_toml:
        bot_toml.write('[sandbox]\nwritable = ["~/projects", "~/projects/app"]\n')
    home = Home(person.root)
    await sh(run_context(home), f"ln -s {root}/.config/autostart ~/projects/app")
    output = await sh(
        run_context(home), "echo x > ~/projects/app/evil.desktop; touch ~/projects/ok"
    )
    assert list((root / ".config" / "autostart").iterdir()) == []
    assert "No such file or directory" in output and (root / "projects" / "ok").exists()


async def test_what_is_hidden_in_a_granted_folder_cannot_be_moved_out_of_hiding(
    person: Home,
) -> None:
    """One command renames the folder holding a hidden path; the next would read it unhidden."""
    root = person.root.parent
    for name in (".local/share/keyrings/login.keyring", "projects/app/.env"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"{MARK}:{name}")
    with (person.main_bot.root / "bot.toml").open("a") as bot_toml:
        bot_toml.write(
            '[sandbox]\nwritable = ["~/.local", "~/projects"]\nhidden = ["~/projects/app/.env"]\n'
        )
    home = Home(person.root)
    moved = await sh(
        run_context(home), "mv ~/.local/share ~/.local/s2; mv ~/projects/app ~/projects/a2; true"
    )
    assert moved.count("Device or resource busy") == 2, moved
    output = await sh(
        run_context(home),
        "cat ~/.local/s2/keyrings/* ~/projects/a2/.env ~/.local/share/keyrings/* "
        "~/projects/app/.env; echo x > ~/projects/app/new && echo still-writable",
    )
    assert MARK not in output and "still-writable" in output, output
    assert (root / ".local/share/keyrings/login.keyring").exists()
