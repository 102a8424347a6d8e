"""Executors run in the same view as the bot's commands (issue 32, item 1), for real: the grants of
config.toml and bot.toml reach an executor's sandbox, the secrets stay hidden, and a task's folder
in the person's hidden home is a write outside the view: asked every time with its exact path,
refused with nobody to ask."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from atlas.executors.launch import ExecutorLauncher, executor_policy
from atlas.home import Home
from atlas.providers.base import ToolCall
from atlas.sandbox.launcher import sandbox_argv
from atlas.tools.delegate import delegate
from atlas.trust.gate import ALLOW_ONCE, DENY, Allow, Deny, settle
from atlas.trust.policy import RuleGate
from tests.helpers import BASE_CONFIG, Person, make_home, run_context

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


@pytest.fixture
def person(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Home:
    """A person's home with a secret, a folder granted readable to every bot (config.toml) and
    one granted writable to the main bot (bot.toml)."""
    person = tmp_path / "person"
    monkeypatch.setenv("HOME", str(person))
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1")
    config += '[sandbox]\nreadable = ["~/notes"]\n'
    home = make_home(person / ".atlas", config=config)
    with (home.main_bot.root / "bot.toml").open("a") as bot_toml:
        bot_toml.write('[sandbox]\nwritable = ["~/projects"]\n')
    for name, text in {".ssh/id_rsa": "SECRET-KEY", "notes/plan.txt": "the plan",
                       "projects/app/main.py": "print(1)\n", "work/x.txt": "x"}.items():  # fmt: skip
        (person / name).parent.mkdir(parents=True, exist_ok=True)
        (person / name).write_text(text)
    home = Home(home.root)
    home.main_bot.workspace.mkdir(parents=True, exist_ok=True)
    return home


def run_inside(argv: list[str], policy: object) -> subprocess.CompletedProcess[str]:
    command = sandbox_argv(argv, policy)  # type: ignore[arg-type]
    return subprocess.run(command, capture_output=True, text=True, timeout=30, env={})


def test_an_executor_sees_the_grants_of_its_bot_and_of_the_home(
    person: Home, tmp_path: Path
) -> None:
    home_dir = person.root.parent
    task = tmp_path / "task"
    task.mkdir()
    account = home_dir / ".claude"
    script = (
        f"cat {home_dir}/notes/plan.txt; echo; "
        f"echo ok > {home_dir}/projects/app/out.txt && echo wrote; "
        f"cat {home_dir}/.ssh/id_rsa 2>/dev/null || echo no-secret; "
        f"ls {home_dir}/work 2>/dev/null || echo no-work"
    )
    bot = person.main_bot
    policy = executor_policy(person, bot, task, [account], env={"PATH": "/usr/bin:/bin"},
                             socket=None)  # fmt: skip
    done = run_inside(["sh", "-c", script], policy)
    assert done.stdout.split() == ["the", "plan", "wrote", "no-secret", "no-work"], done
    assert (home_dir / "projects/app/out.txt").read_text() == "ok\n"
    # Started for no bot (the person's own, a login): the home's grants alone.
    alone = executor_policy(person, None, task, [account], env={"PATH": "/usr/bin:/bin"},
                            socket=None)  # fmt: skip
    done = run_inside(["sh", "-c", script], alone)
    assert done.stdout.split()[:2] == ["the", "plan"], done
    assert "wrote" not in done.stdout and "no-secret" in done.stdout


def test_the_launcher_builds_the_delegating_bots_view(person: Home, tmp_path: Path) -> None:
    home_dir = person.root.parent
    task = tmp_path / "task"
    task.mkdir()
    launcher = ExecutorLauncher(person)
    socket_file = tmp_path / "proxy.sock"
    socket_file.touch()
    args = (["true"], task, [home_dir / ".codex"], {"PATH": "/usr/bin"}, socket_file)
    _, policy = launcher._sandboxed(*args, person.main_bot.name)
    assert (home_dir / "projects").resolve() in policy.writable
    assert (home_dir / "notes").resolve() in policy.readable
    assert (home_dir / ".codex").resolve() in policy.writable
    assert home_dir.resolve() in policy.hidden
    _, alone = launcher._sandboxed(*args)
    assert (home_dir / "projects").resolve() not in alone.writable
    assert (home_dir / "notes").resolve() in alone.readable


async def decide(run: object, folder: str) -> object:
    arguments = {"executor": "codex", "tasks": [{"goal": "x", "folder": folder}]}
    call = ToolCall("c1", "delegate", json.dumps(arguments))
    return await settle(RuleGate(run.home, None, None), call, delegate, run)  # type: ignore[attr-defined]


@pytest.mark.parametrize("mode", ["auto", "ask"])
async def test_a_tasks_folder_in_the_hidden_home_is_asked_every_time(
    person: Home, mode: str
) -> None:
    home_dir = person.root.parent
    exact = str((home_dir / "work").resolve())
    run = run_context(person)
    run.state.mode = mode
    asker = Person(DENY)
    run.ask = asker
    for _ in range(2):  # never remembered
        decision = await decide(run, "~/work")
        assert isinstance(decision, Deny) and decision.rule == "sandbox:write-outside", decision
    assert len(asker.asked) == 2
    question, choices = asker.asked[0]
    assert exact in question and choices == [ALLOW_ONCE, DENY]
    run.ask = Person(ALLOW_ONCE)
    assert isinstance(await decide(run, "~/work"), Allow)
    nobody = run_context(person)
    nobody.state.mode = mode
    nobody.ask = None
    decision = await decide(nobody, "~/work")
    assert isinstance(decision, Deny) and decision.answered_by == "nobody"
    # A folder the bot may write (granted in bot.toml) is not asked.
    granted = run_context(person)
    granted.state.mode = mode
    assert isinstance(await decide(granted, "~/projects/app"), Allow)
