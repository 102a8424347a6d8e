"""The `atlas` command, run for real as a subprocess against a temporary home and fake servers.

Starting Python and importing Atlas costs a second or more per run, so the short independent
runs are started together by module-scoped fixtures and each test reads its own result.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import SECRET_NAME
from tests.fakes.model_servers import FakeOpenAIServer
from tests.helpers import make_home

ATLAS = [sys.executable, "-m", "atlas.cli"]
ATLAS_SCRIPT = Path(sys.executable).parent / "atlas"
# Modules `atlas --help` must not import: each costs from a tenth of a second to several.
HEAVY_MODULES = (
    "openai",
    "anthropic",
    "markitdown",
    "sqlite_utils",
    "pandas",
    "numpy",
    "tiktoken",
    "playwright",
    "aiohttp",
)
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy")


def hermetic_env(home: Path | None) -> dict[str, str]:
    """This environment without credentials or proxies, with ATLAS_HOME set to `home` (or unset)."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not SECRET_NAME.search(name) and name not in PROXY_VARIABLES
    }
    env.pop("ATLAS_HOME", None)
    if home is not None:
        env["ATLAS_HOME"] = str(home)
    return env


@dataclass
class Done:
    code: int
    out: str
    err: str
    seconds: float
    survived: bool | None = None  # for a run that should not have deleted a folder

    def lines(self) -> list[str]:
        return self.out.splitlines()


@dataclass
class Case:
    args: list[str]
    home: Path | None
    stdin: int | None = None  # None: an empty pipe, closed at once
    prepare: Callable[[], object] = field(default=lambda: None)


def run_atlas(
    *args: str,
    home: Path | None,
    command: list[str] = ATLAS,
    stdin: int | None = None,
    timeout: float = 60,
) -> Done:
    start = time.monotonic()
    proc = subprocess.run(
        [*command, *args],
        input=None if stdin is not None else b"",
        stdin=stdin,
        capture_output=True,
        env=hermetic_env(home),
        cwd=home.parent if home else None,
        timeout=timeout,
    )
    return Done(
        proc.returncode,
        proc.stdout.decode(errors="replace"),
        proc.stderr.decode(errors="replace"),
        time.monotonic() - start,
    )


def run_together(cases: dict[str, Case]) -> dict[str, Done]:
    """Run every case at once (each in its own process); results by case name."""
    for case in cases.values():
        case.prepare()
    with ThreadPoolExecutor(max_workers=len(cases)) as pool:
        futures = {
            name: pool.submit(run_atlas, *case.args, home=case.home, stdin=case.stdin)
            for name, case in cases.items()
        }
        return {name: future.result() for name, future in futures.items()}


def check_lines(done: Done) -> dict[str, str]:
    """`atlas doctor`'s check lines by check name: "[ok  ] name: detail" → {name: line}."""
    found = {}
    for line in done.lines():
        if line.startswith("["):
            name = line[7:].split(":", 1)[0]
            found[name] = line
    return found


# atlas --help


def test_help_lists_the_commands() -> None:
    done = run_atlas("--help", home=None, command=[str(ATLAS_SCRIPT)])
    assert done.code == 0, done.err
    for command in ("init", "run", "chat", "doctor", "tool"):
        assert f"    {command} " in done.out, f"{command} missing from:\n{done.out}"


def test_help_imports_no_heavy_library() -> None:
    script = (
        "import sys\n"
        "from atlas.cli import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        f"heavy = {HEAVY_MODULES!r}\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & set(heavy)), file=sys.stderr)\n"
    )
    done = run_atlas("-c", script, home=None, command=[sys.executable])
    assert "usage: atlas" in done.out
    assert done.err.strip() == "[]", f"`atlas --help` imported {done.err.strip()}"


# atlas init


def test_init_creates_a_home_then_never_overwrites(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = run_atlas("init", home=home)
    assert first.code == 0, first.err
    assert "created" in first.out
    assert (home / "config.toml").is_file()
    bot = home / "bots" / "atlas"
    assert (bot / "bot.toml").is_file()
    assert (bot / "MISSION.md").is_file()
    for folder in (bot / "memory", bot / "workspace"):
        assert folder.is_dir(), folder
    assert not (bot / "skills").exists()  # the main bot's skills are the home's library
    assert (home / "routines").is_dir()
    assert (home / "skills").is_dir()

    edited = "# mine now\n" + (home / "config.toml").read_text()
    (home / "config.toml").write_text(edited)
    (bot / "MISSION.md").unlink()  # a deleted example comes back; an edited one stays
    second = run_atlas("init", home=home)
    assert second.code == 0, second.err
    assert second.out.count("created ") == 1
    assert f"created {bot / 'MISSION.md'}" in second.out
    assert (home / "config.toml").read_text() == edited
    third = run_atlas("init", home=home)
    assert "created " not in third.out
    assert "nothing to create" in third.out


def test_init_home_option_wins_over_atlas_home(tmp_path: Path) -> None:
    env_home, option_home = tmp_path / "from-env", tmp_path / "from-option"
    done = run_atlas("--home", str(option_home), "init", home=env_home)
    assert done.code == 0, done.err
    assert (option_home / "config.toml").is_file()
    assert not env_home.exists()


def test_home_option_also_after_the_subcommand(tmp_path: Path) -> None:
    """As the README's table writes it: `atlas init --home DIR`, `atlas budget --home DIR`."""
    env_home, option_home = tmp_path / "from-env", tmp_path / "from-option"
    done = run_atlas("init", "--home", str(option_home), home=env_home)
    assert done.code == 0, done.err
    assert (option_home / "config.toml").is_file()
    assert not env_home.exists()
    assert f"in {option_home / 'config.toml'}" in done.out  # where to set the provider
    assert f"`atlas chat --home {option_home}`" in done.out
    listing = run_atlas("routines", "list", "--home", str(option_home), home=env_home)
    assert listing.code == 0, listing.err
    assert not env_home.exists()  # read from the option's home, not ATLAS_HOME's


# atlas tool


def _notes(home: Path) -> Callable[[], object]:
    return lambda: (home / "bots" / "atlas" / "workspace" / "notes.txt").write_text("alpha\nbeta\n")


@pytest.fixture(scope="module")
def tool_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Done]:
    root = tmp_path_factory.mktemp("tool")
    homes = {
        name: root / name
        for name in (
            "read",
            "unknown",
            "bad_json",
            "missing",
            "ghost",
            "echo",
            "danger",
        )
    }
    for home in homes.values():
        make_home(home)
    cases = {
        # stdin from /dev/null, as under cron: epoll cannot watch it, so it must be read whole.
        "read": Case(
            ["tool", "read_file", '{"path": "notes.txt"}'],
            homes["read"],
            stdin=subprocess.DEVNULL,
            prepare=_notes(homes["read"]),
        ),
        "unknown": Case(["tool", "no_such_tool", "{}"], homes["unknown"]),
        "bad_json": Case(["tool", "read_file", '{"path": '], homes["bad_json"]),
        "missing": Case(["tool", "read_file", '{"path": "absent.txt"}'], homes["missing"]),
        "ghost": Case(["tool", "--bot", "ghost", "read_file", "{}"], homes["ghost"]),
        "echo": Case(["tool", "run_command", '{"command": "echo hi"}'], homes["echo"]),
        "danger": Case(
            ["tool", "run_command", json.dumps({"command": f"rm -rf {root / 'keep'}"})],
            homes["danger"],
            prepare=lambda: (root / "keep").mkdir(),
        ),
    }
    runs = run_together(cases)
    # The danger case's verdict is read from the disk too: was the folder deleted?
    runs["danger"].survived = (root / "keep").is_dir()
    return runs


def test_tool_read_file_prints_numbered_lines(tool_runs: dict[str, Done]) -> None:
    done = tool_runs["read"]
    assert done.code == 0, done.err
    assert [line.split() for line in done.lines()[:2]] == [["1", "alpha"], ["2", "beta"]]
    assert "Traceback" not in done.err, done.err


def test_tool_unknown_name_lists_the_tools(tool_runs: dict[str, Done]) -> None:
    done = tool_runs["unknown"]
    assert done.code != 0
    assert "no_such_tool" in done.err
    assert "read_file" in done.err
    assert "run_command" in done.err


def test_tool_bad_json_is_an_error_result(tool_runs: dict[str, Done]) -> None:
    done = tool_runs["bad_json"]
    assert done.code == 1, done.err
    assert done.out.startswith("Error: "), done.out
    assert "JSON" in done.out


def test_tool_failure_is_an_error_result(tool_runs: dict[str, Done]) -> None:
    done = tool_runs["missing"]
    assert done.code == 1, done.err
    assert done.out.startswith("Error: "), done.out
    assert "absent.txt" in done.out


def test_tool_unknown_bot_exits_2_naming_it(tool_runs: dict[str, Done]) -> None:
    done = tool_runs["ghost"]
    assert done.code == 2, done.err
    assert "no bot named 'ghost'" in done.err
    assert "atlas" in done.err  # the bots there are
    assert "Traceback" not in done.err


def test_tool_run_command_prints_output_and_exit_code(tool_runs: dict[str, Done]) -> None:
    done = tool_runs["echo"]
    assert done.code == 0, done.err
    assert done.lines()[0] == "hi"
    assert "exit code 0" in done.out


def test_tool_dangerous_command_with_nobody_to_ask_is_denied(tool_runs: dict[str, Done]) -> None:
    done = tool_runs["danger"]
    assert done.code == 1, done.err
    assert "denied" in done.out
    assert done.survived, "the folder was deleted"


# atlas doctor


async def test_doctor_against_a_fake_provider(home_path: Path) -> None:
    async with FakeOpenAIServer() as server:
        server.reply(text="pong")
        make_home(home_path, base_url=server.base_url)
        proc = await asyncio.create_subprocess_exec(
            *ATLAS,
            "doctor",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=hermetic_env(home_path),
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    done = Done(proc.returncode, out.decode(), err.decode(), 0)
    checks = check_lines(done)
    assert checks["home and config"].startswith("[ok  ]"), done.out
    assert checks["provider"].startswith("[ok  ]"), done.out
    assert "test-model" in checks["provider"]
    assert checks["ripgrep"].startswith("[ok  ]"), done.out
    assert not checks["browser"].startswith("[FAIL]"), done.out  # optional: ok or warn
    sandbox_ok = checks["sandbox"].startswith("[ok  ]")
    assert done.code == (0 if sandbox_ok else 1), done.out + done.err
    assert server.requests[0]["model"] == "test-model"
    server.assert_complete()


@pytest.fixture(scope="module")
def doctor_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Done]:
    root = tmp_path_factory.mktemp("doctor")
    make_home(root / "closed")  # the provider on a closed loopback port
    make_home(root / "offline")
    make_home(root / "broken")
    (root / "broken" / "config.toml").write_text('main = "atlas"\ntimezone = "Nowhere/Else"\n')
    cases = {
        "broken": Case(["doctor"], root / "broken"),
        "closed": Case(["doctor"], root / "closed"),
        "offline": Case(["doctor", "--offline"], root / "offline"),
        "no_home": Case(["doctor"], root / "nowhere"),
    }
    return run_together(cases)


def test_doctor_provider_down_fails_with_a_fix(doctor_runs: dict[str, Done]) -> None:
    done = doctor_runs["closed"]
    assert done.code == 1
    lines = done.lines()
    provider = next(i for i, line in enumerate(lines) if line.startswith("[FAIL] provider:"))
    assert lines[provider + 1].strip().startswith("fix: "), done.out
    assert check_lines(done)["home and config"].startswith("[ok  ]")


def test_doctor_offline_skips_the_provider(doctor_runs: dict[str, Done]) -> None:
    done = doctor_runs["offline"]
    checks = check_lines(done)
    assert checks["provider"] == "[ok  ] provider: skipped (--offline)"
    sandbox_ok = checks["sandbox"].startswith("[ok  ]")
    assert done.code == (0 if sandbox_ok else 1), done.out  # a missing browser only warns


def test_doctor_without_a_home_says_atlas_init(doctor_runs: dict[str, Done]) -> None:
    done = doctor_runs["no_home"]
    assert done.code == 1
    home_line = check_lines(done)["home and config"]
    assert home_line.startswith("[FAIL]")
    assert "atlas init" in done.out
    assert "provider" not in check_lines(done)  # nothing to call without a home


def test_doctor_broken_config_names_the_file(doctor_runs: dict[str, Done]) -> None:
    done = doctor_runs["broken"]
    assert done.code == 1
    home_line = check_lines(done)["home and config"]
    assert home_line.startswith("[FAIL]")
    assert "config.toml" in home_line
    assert "timezone (line 2)" in done.out
    assert "fix: fix the file named above" in done.out
    assert "atlas init" not in done.out  # the home is there; its config is wrong


# atlas run


async def _read_until(stream: asyncio.StreamReader, marker: str, seen: list[str]) -> None:
    while line := (await stream.readline()).decode():
        seen.append(line)
        if marker in line:
            return
    raise AssertionError(f"the daemon ended before logging {marker!r}:\n{''.join(seen)}")


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
async def test_run_serves_until_a_signal_then_stops_cleanly(
    home_path: Path, stop_signal: signal.Signals
) -> None:
    make_home(home_path)
    helper = home_path / "bots" / "helper"
    helper.mkdir()
    shutil.copy(home_path / "bots" / "atlas" / "bot.toml", helper / "bot.toml")
    proc = await asyncio.create_subprocess_exec(
        *ATLAS,
        "run",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=hermetic_env(home_path),
    )
    seen: list[str] = []
    try:
        assert proc.stderr is not None
        await asyncio.wait_for(_read_until(proc.stderr, "ready", seen), 60)
        stopping = time.monotonic()
        proc.send_signal(stop_signal)
        _, rest = await asyncio.wait_for(proc.communicate(), 10)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    log = "".join(seen) + rest.decode()
    assert proc.returncode == 0, log
    assert time.monotonic() - stopping < 5
    assert "stopped cleanly" in log
    assert "Traceback" not in log
    for bot in ("atlas", "helper"):
        assert f"serving bot {bot}" in log
        assert (home_path / "bots" / bot / "conversations.db").is_file()


def test_run_with_a_broken_config_exits_at_once(home_path: Path) -> None:
    make_home(home_path)
    config = home_path / "config.toml"
    config.write_text(config.read_text() + '\n[chat]\nmid_turn = "shout"\n')
    done = run_atlas("run", home=home_path)
    assert done.code == 2, done.err
    assert str(config) in done.err
    assert "chat.mid_turn" in done.err
    assert "ready" not in done.err
    assert done.seconds < 10
    assert not (home_path / "bots" / "atlas" / "conversations.db").exists()
