"""The executors against fake `claude` and `codex` executables, inside the real sandbox.

Each fake (tests/fakes/fake_claude.py, fake_codex.py) prints its harness's documented event
stream from a scenario written in the account's config folder: success, a question, a
permission request, the plan's limit mid-task, resume, steer, stop (a long run killed) and a
crash.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from atlas.executors.base import (
    AssistantText,
    Decision,
    ExecutorError,
    ExecutorEvent,
    ExecutorInstance,
    Failure,
    LimitReached,
    PermissionRequest,
    Question,
    Result,
    SessionStarted,
    TaskSpec,
    ToolResult,
    ToolUse,
)
from atlas.executors.registry import ExecutorSet
from atlas.home import Home
from atlas.sandbox.proxy import stop_proxies
from tests.helpers import BASE_CONFIG, make_home

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

FAKES = Path(__file__).resolve().parents[1] / "fakes"


@pytest.fixture
def folders(tmp_path: Path) -> dict[str, Path]:
    names = ("project", "claude-main", "claude-work", "codex-main", "codex-work")
    made = {name: tmp_path / name for name in names}
    made["project"].mkdir()
    return made


@pytest.fixture
def home(tmp_path: Path, folders: dict[str, Path]) -> Home:
    config = (
        BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1")
        + f"""
[executors.claude-code]
enabled = true
binary = "{FAKES / "fake_claude.py"}"
accounts = {{ main = "{folders["claude-main"]}", work = "{folders["claude-work"]}" }}
folders = {{ "{folders["project"]}" = "work" }}
allowed_domains = ["localhost"]  # stands in for the provider's hosts (tests: no internet)

[web]
allow_private = ["127.0.0.1/32"]  # lets the proxy's address fence reach the fake provider

[executors.codex]
enabled = true
binary = "{FAKES / "fake_codex.py"}"
accounts = {{ main = "{folders["codex-main"]}", work = "{folders["codex-work"]}" }}
"""
    )
    return make_home(tmp_path / "home", config=config)


@pytest.fixture
async def executors(home: Home) -> AsyncIterator[ExecutorSet]:
    yield ExecutorSet.for_home(home)
    await stop_proxies()


async def start(
    executors: ExecutorSet,
    target: str,
    folder: Path,
    prompt: str = "fix the test",
    scenario: str = "success",
    session_id: str | None = None,
) -> ExecutorInstance:
    executor, account = executors.resolve(target, folder)
    account.config_dir.mkdir(parents=True, exist_ok=True)
    (account.config_dir / "fake-scenario").write_text(scenario)
    return await executor.start(TaskSpec(folder, prompt, account, session_id=session_id))


async def collect(events: AsyncIterator[ExecutorEvent]) -> list[ExecutorEvent]:
    return [event async for event in events]


# --- Claude Code ------------------------------------------------------------------------------


async def test_claude_code_success_streams_typed_events_and_keeps_its_session(
    executors: ExecutorSet, folders: dict[str, Path]
) -> None:
    instance = await start(executors, "claude-code", folders["project"])
    events = await collect(instance.events())
    assert instance.account.target == "claude-code@work"  # the folder starts on `work`
    assert isinstance(events[0], SessionStarted)
    assert [type(e) for e in events[1:]] == [
        AssistantText,
        ToolUse,
        ToolResult,
        AssistantText,
        Result,
    ]
    result = events[-1]
    assert isinstance(result, Result) and result.text == "Done: fix the test"
    assert result.cost_usd == pytest.approx(0.0123)
    assert (result.usage.input_tokens, result.usage.output_tokens) == (120, 45)
    assert result.session_id == instance.session_id == events[0].session_id
    assert (folders["project"] / "fake-claude-output.txt").read_text() == "fix the test"
    assert not instance.running

    executor, account = executors.resolve("claude-code@work")
    log = executor.session_log(account, instance.session_id, folders["project"])
    assert not log.deleted
    assert [e.role for e in log.head(2)] == ["user", "assistant"]
    assert log.head(1)[0].text == "fix the test"
    assert log.tail(1)[0].text == "Done: fix the test"
    (status,) = executors.statuses("claude-code")[1:]
    assert status.target == "claude-code@work"
    assert status.windows[0].name == "seven_day" and status.windows[0].used_percent == 80
    assert status.at_limit is False
    assert status.folders == (str(folders["project"]),)


async def test_claude_code_runs_inside_the_sandbox(
    executors: ExecutorSet, home: Home, folders: dict[str, Path]
) -> None:
    (folders["claude-main"] / "token").parent.mkdir(parents=True)
    (folders["claude-main"] / "token").write_text("another account's login")
    probe = {
        "read": [str(home.config_path), str(folders["claude-main"] / "token")],
        "write": [
            str(folders["project"] / "ok.txt"),
            str(folders["claude-work"] / "session.txt"),
            str(home.root / "planted.txt"),
            str(folders["project"].parent / "beside.txt"),
        ],
        "env": ["CLAUDE_CONFIG_DIR", "HTTPS_PROXY", "ATLAS_HOME"],
    }
    instance = await start(
        executors, "claude-code@work", folders["project"], json.dumps(probe), "probe"
    )
    result = (await collect(instance.events()))[-1]
    assert isinstance(result, Result), result
    seen = json.loads(result.text)
    assert seen[f"read {home.config_path}"] in ("FileNotFoundError", "empty")  # the home is hidden
    assert seen[f"read {folders['claude-main'] / 'token'}"] != "ok"  # other accounts are hidden
    assert seen[f"write {folders['project'] / 'ok.txt'}"] == "ok"
    assert seen[f"write {folders['claude-work'] / 'session.txt'}"] == "ok"  # its own account
    assert seen[f"write {home.root / 'planted.txt'}"] != "ok"
    # Beside the folder is the sandbox's private /tmp: a write there never reaches the machine.
    assert not (folders["project"].parent / "beside.txt").exists()
    assert (folders["claude-work"] / "session.txt").exists()
    assert seen["env"]["CLAUDE_CONFIG_DIR"] == str(folders["claude-work"].resolve())
    assert seen["env"]["HTTPS_PROXY"] == "http://127.0.0.1:3128"  # the network: the proxy only
    assert seen["env"]["ATLAS_HOME"] is None  # an allow-listed environment


async def test_claude_code_question_is_answered_through_the_control_channel(
    executors: ExecutorSet, folders: dict[str, Path]
) -> None:
    instance = await start(executors, "claude-code", folders["project"], scenario="question")
    seen: list[ExecutorEvent] = []
    async for event in instance.events():
        seen.append(event)
        if isinstance(event, Question):
            assert event.questions[0].question == "Which database?"
            assert event.questions[0].choices == ("sqlite", "postgres")
            await instance.answer(event.request_id, {"Which database?": "postgres"})
    assert isinstance(seen[-1], Result) and seen[-1].text == "Set up postgres."


@pytest.mark.parametrize("allow", [True, False])
async def test_claude_code_permission_request_waits_for_the_decision(
    executors: ExecutorSet, folders: dict[str, Path], allow: bool
) -> None:
    instance = await start(executors, "claude-code", folders["project"], scenario="permission")
    seen: list[ExecutorEvent] = []
    async for event in instance.events():
        seen.append(event)
        if isinstance(event, PermissionRequest):
            assert (event.tool, dict(event.input)) == ("Bash", {"command": "make deploy"})
            await instance.answer(event.request_id, Decision(allow, "not on Fridays"))
    final = seen[-1]
    assert isinstance(final, Result)
    assert final.text == ("Deployed." if allow else "Not deployed: not on Fridays")


async def test_claude_code_plan_limit_mid_task_is_a_limit_reached_with_its_reset(
    executors: ExecutorSet, folders: dict[str, Path]
) -> None:
    instance = await start(executors, "claude-code@work", folders["project"], scenario="limit")
    events = await collect(instance.events())
    limit = events[-1]
    assert isinstance(limit, LimitReached), events
    assert not any(isinstance(e, Result | Failure) for e in events)
    assert limit.window == "five_hour"
    assert limit.resets_at is not None
    assert abs(limit.resets_at - (datetime.now(UTC) + timedelta(hours=1))) < timedelta(minutes=2)
    status = executors.statuses("claude-code")[1]
    assert status.at_limit is True and status.at_limit_until == limit.resets_at
    assert status.extra_usage is False  # overageStatus: rejected
    assert executors.statuses("claude-code")[0].at_limit is None  # the other account: unknown


async def test_claude_code_resume_continues_the_session(
    executors: ExecutorSet, folders: dict[str, Path]
) -> None:
    first = await start(executors, "claude-code", folders["project"])
    await collect(first.events())
    again = await start(
        executors, "claude-code", folders["project"], "and the docs", session_id=first.session_id
    )
    events = await collect(again.events())
    result = events[-1]
    assert isinstance(result, Result)
    assert result.text.startswith(f"resumed {first.session_id} (")
    assert again.session_id == first.session_id


async def test_claude_code_resuming_a_deleted_session_fails_with_the_harness_words(
    executors: ExecutorSet, folders: dict[str, Path]
) -> None:
    instance = await start(
        executors,
        "claude-code",
        folders["project"],
        session_id="0f0f0f0f-dead-beef-0000-000000000000",
    )
    result = (await collect(instance.events()))[-1]
    assert isinstance(result, Result) and result.is_error
    assert "No conversation found" in result.text
    executor, account = executors.resolve("claude-code@work")
    log = executor.session_log(account, "0f0f0f0f-dead-beef-0000-000000000000", folders["project"])
    assert log.deleted and log.entries == ()


async def test_claude_code_steer_goes_into_the_running_turn(
    executors: ExecutorSet, folders: dict[str, Path]
) -> None:
    instance = await start(executors, "claude-code", folders["project"], scenario="steer")
    events: list[ExecutorEvent] = []
    async for event in instance.events():
        events.append(event)
        if isinstance(event, AssistantText) and event.text == "Waiting for a steer.":
            assert await instance.steer("use sqlite") == "sent"
    assert isinstance(events[-1], Result)
    assert events[-1].text == "Done after the steer: use sqlite"
    with pytest.raises(ExecutorError, match="ended; resume its session"):
        await instance.steer("too late")


async def test_a_steer_after_the_turn_resumes_the_session_in_the_same_instance(
    executors: ExecutorSet, folders: dict[str, Path]
) -> None:
    instance = await start(executors, "claude-code", folders["project"])
    results: list[Result] = []
    async for event in instance.events():
        if isinstance(event, Result):
            results.append(event)
            if len(results) == 1:
                assert await instance.steer("now the docs") == "queued"
    assert [r.text.rsplit(": ", 1)[-1] for r in results] == ["fix the test", "now the docs"]
    assert results[1].text.startswith(f"resumed {results[0].session_id}")


async def test_stop_ends_a_long_run_and_everything_in_its_sandbox(
    executors: ExecutorSet, folders: dict[str, Path]
) -> None:
    instance = await start(executors, "claude-code", folders["project"], scenario="slow")
    began = time.monotonic()
    events: list[ExecutorEvent] = []
    async for event in instance.events():
        events.append(event)
        if isinstance(event, AssistantText):
            await instance.stop()
    assert time.monotonic() - began < 10  # the fake would sleep 120 s
    assert isinstance(events[-1], Failure) and events[-1].message == "stopped"
    assert instance.process is not None and instance.process.returncode is not None
    assert not instance.running


async def test_a_crash_is_a_failure_naming_the_exit_code_and_stderr(
    executors: ExecutorSet, folders: dict[str, Path]
) -> None:
    instance = await start(executors, "claude-code", folders["project"], scenario="crash")
    events = await collect(instance.events())
    failure = events[-1]
    assert isinstance(failure, Failure) and failure.exit_code == 3
    assert "the fake crashed" in failure.message


# --- Codex ------------------------------------------------------------------------------------


async def test_codex_success_reads_its_jsonl_and_its_rollout(
    executors: ExecutorSet, folders: dict[str, Path]
) -> None:
    instance = await start(executors, "codex", folders["project"])
    events = await collect(instance.events())
    assert isinstance(events[0], SessionStarted)
    tools = [e.tool for e in events if isinstance(e, ToolUse)]
    assert tools == ["command_execution", "file_change"]
    result = events[-1]
    assert isinstance(result, Result) and result.text == "Done: fix the test"
    assert result.cost_usd is None  # Codex does not tell
    assert (result.usage.input_tokens, result.usage.cache_read_tokens) == (2400, 2000)
    executor, account = executors.resolve("codex")
    assert account.target == "codex@main"
    log = executor.session_log(account, instance.session_id, folders["project"])
    assert log.head(1)[0].text == "fix the test" and log.tail(1)[0].role == "assistant"
    status = executors.statuses("codex")[0]
    names = [w.name for w in status.windows]
    assert names == ["primary (300 min)", "secondary (10080 min)"]
    assert status.windows[0].used_percent == 25 and status.at_limit is False


async def test_codex_usage_limit_is_told_once_with_its_reset(
    executors: ExecutorSet, folders: dict[str, Path]
) -> None:
    instance = await start(executors, "codex@work", folders["project"], scenario="limit")
    events = await collect(instance.events())
    limits = [e for e in events if isinstance(e, LimitReached)]
    assert len(limits) == 1 and events[-1] is limits[0]  # `error` and `turn.failed`: one event
    assert limits[0].resets_at is not None
    expected = datetime.now(UTC) + timedelta(hours=2, minutes=30)
    assert abs(limits[0].resets_at - expected) < timedelta(minutes=2)
    statuses = {s.target: s for s in executors.statuses("codex")}
    assert statuses["codex@work"].at_limit is True
    assert statuses["codex@work"].extra_usage is False  # no credits in its rate limits


async def test_codex_question_is_answered_in_the_resumed_session(
    executors: ExecutorSet, folders: dict[str, Path]
) -> None:
    instance = await start(executors, "codex", folders["project"], scenario="question")
    results: list[Result] = []
    async for event in instance.events():
        if isinstance(event, Question):
            assert event.questions[0].choices == ("sqlite", "postgres")
            await instance.answer(event.request_id, {"Which database?": "sqlite"})
        if isinstance(event, Result):
            results.append(event)
    assert len(results) == 2
    assert results[1].text.startswith(f"resumed {instance.session_id}")
    assert "Which database?: sqlite" in results[1].text


async def test_codex_resume_and_stop(executors: ExecutorSet, folders: dict[str, Path]) -> None:
    first = await start(executors, "codex", folders["project"])
    await collect(first.events())
    again = await start(executors, "codex", folders["project"], "more", session_id=first.session_id)
    result = (await collect(again.events()))[-1]
    assert isinstance(result, Result) and result.text.startswith(f"resumed {first.session_id}")

    slow = await start(executors, "codex@work", folders["project"], scenario="slow")
    began = time.monotonic()
    async for event in slow.events():
        if isinstance(event, AssistantText):
            await slow.stop()
        last = event
    assert isinstance(last, Failure) and last.message == "stopped"
    assert time.monotonic() - began < 10


# --- failing closed -----------------------------------------------------------------------------


async def test_no_sandbox_means_no_start(
    executors: ExecutorSet, folders: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from atlas.sandbox import launcher

    def unavailable() -> None:
        raise launcher.SandboxUnavailable("bwrap cannot start a sandbox here")

    monkeypatch.setattr(launcher, "probe", unavailable)
    monkeypatch.setattr(launcher, "probed", lambda: True)
    instance = await start(executors, "claude-code", folders["project"])
    with pytest.raises(ExecutorError, match="cannot start in the sandbox: bwrap cannot"):
        await collect(instance.events())
    assert not (folders["project"] / "fake-claude-output.txt").exists()


async def test_without_socat_the_start_is_refused(
    executors: ExecutorSet, folders: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    real_which = shutil.which
    monkeypatch.setattr(
        shutil,
        "which",
        lambda name, *a, **k: None if name == "socat" else real_which(name, *a, **k),
    )
    instance = await start(executors, "codex", folders["project"])
    with pytest.raises(ExecutorError, match="socat"):
        await collect(instance.events())


async def test_a_missing_folder_is_named(executors: ExecutorSet, tmp_path: Path) -> None:
    instance = await start(executors, "codex", tmp_path / "nowhere")
    with pytest.raises(ExecutorError, match="nowhere does not exist"):
        await collect(instance.events())


@pytest.mark.parametrize(
    ("limited", "other"), [("claude-code@work", "claude-code@main"), ("codex@work", "codex@main")]
)
async def test_after_the_limit_another_account_goes_on_in_a_copy_of_the_session(
    executors: ExecutorSet, folders: dict[str, Path], limited: str, other: str
) -> None:
    instance = await start(executors, limited, folders["project"], scenario="limit")
    events = await collect(instance.events())
    assert isinstance(events[-1], LimitReached)
    executor, source = executors.resolve(limited)
    _, target = executors.resolve(other)
    executor.copy_session(source, target, instance.session_id, folders["project"])
    again = await start(
        executors, other, folders["project"], "go on", session_id=instance.session_id
    )
    result = (await collect(again.events()))[-1]
    assert isinstance(result, Result), result
    assert result.text.startswith(f"resumed {instance.session_id} (")
    assert not result.text.startswith(f"resumed {instance.session_id} (0 ")
    assert again.account.target == other
    with pytest.raises(ExecutorError, match="is gone"):
        executor.copy_session(source, target, "0000-gone", folders["project"])


async def test_login_commands_point_at_the_account(executors: ExecutorSet) -> None:
    claude, work = executors.resolve("claude-code@work")
    assert claude.login_argv(work, "me@work.example")[-4:] == [
        "login",
        "--claudeai",
        "--email",
        "me@work.example",
    ]
    assert claude.account_env(work) == {"CLAUDE_CONFIG_DIR": str(work.config_dir)}
    codex, main = executors.resolve("codex")
    assert codex.login_argv(main)[1:] == ["login", "--device-auth"]
    assert codex.account_env(main) == {"CODEX_HOME": str(main.config_dir)}


async def test_a_steer_queued_behind_a_failed_run_is_not_sent_into_a_resume(
    executors: ExecutorSet, folders: dict[str, Path]
) -> None:
    instance = await start(executors, "claude-code", folders["project"], scenario="crash")
    assert await instance.steer("and then this") == "queued"  # not started: no stdin yet
    events = await collect(instance.events())
    assert [type(e) for e in events] == [SessionStarted, Failure]
    assert list(instance.queued) == ["and then this"]  # kept for whoever resumes it


@pytest.fixture
async def provider() -> AsyncIterator[int]:
    """A fake provider on 127.0.0.1, reached as `localhost` (the executor's allowed host)."""
    from aiohttp import web

    async def hello(request: web.Request) -> web.Response:
        return web.Response(text=f"provider at {request.host}")

    app = web.Application()
    app.router.add_get("/", hello)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield runner.addresses[0][1]
    await runner.cleanup()


@pytest.mark.skipif(shutil.which("socat") is None, reason="socat bridges the proxy in")
async def test_the_harness_reaches_its_hosts_through_the_proxy_and_nothing_else(
    executors: ExecutorSet, folders: dict[str, Path], provider: int
) -> None:
    allowed, other = f"http://localhost:{provider}/", f"http://127.0.0.1:{provider}/"
    urls = json.dumps([allowed, other])
    instance = await start(executors, "claude-code", folders["project"], urls, "fetch")
    result = (await collect(instance.events()))[-1]
    assert isinstance(result, Result), result
    seen = json.loads(result.text)
    assert seen[allowed] == f"provider at localhost:{provider}"  # its host: no question
    assert "403" in seen[other]  # any other host: asked of nobody here, so refused


async def test_a_binary_not_found_is_refused_at_start_with_the_fix(
    home: Home, folders: dict[str, Path]
) -> None:
    from atlas.config import ExecutorSettings
    from atlas.executors.claude_code import ClaudeCodeExecutor

    executors = ExecutorSet.for_home(home)
    settings = ExecutorSettings(enabled=True, binary=str(folders["project"] / "no-claude"))
    executor = ClaudeCodeExecutor(settings, executors.launcher)
    with pytest.raises(ExecutorError, match=r"no-claude' is not found .*\[executors.claude-code\]"):
        await executor.start(TaskSpec(folders["project"], "x", executor.account()))
