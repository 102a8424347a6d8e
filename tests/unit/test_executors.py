"""Executors without processes: the plugin SDK, config, accounts, limits, the harnesses' files
and the parsing of their events."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from atlas import plugins
from atlas.config import ExecutorSettings, Settings
from atlas.executors.accounts import describe, limit_state, observed_windows, parse_target
from atlas.executors.base import (
    Account,
    ExecutorError,
    Failure,
    LimitReached,
    PermissionRequest,
    Question,
    Result,
    TaskSpec,
)
from atlas.executors.claude_code import ClaudeCodeExecutor, ClaudeCodeInstance
from atlas.executors.codex import CodexExecutor, CodexInstance, resets_from
from atlas.executors.launch import _patterns
from atlas.executors.limits import LimitBook
from atlas.executors.registry import ExecutorSet
from atlas.sandbox.proxy_protocol import on_allow_list
from tests.helpers import BASE_CONFIG, make_home

# --- the plugin SDK ---------------------------------------------------------------------------


class OldExecutor(ClaudeCodeExecutor):
    sdk_version = 1


def test_built_in_executors_register_through_entry_points() -> None:
    found = plugins.load_plugins(plugins.EXECUTORS_GROUP)
    assert found["claude-code"].target is ClaudeCodeExecutor
    assert found["codex"].target is CodexExecutor
    assert found["codex"].source.startswith("atlas==")
    assert plugins.SDK_VERSIONS == {"atlas.channels": 1, "atlas.executors": 2}


def test_a_plugin_of_another_sdk_version_or_broken_is_left_out_with_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    points = [
        EntryPoint("old", f"{__name__}:OldExecutor", "atlas.executors"),
        EntryPoint("broken", "no_such_package_xyz:Thing", "atlas.executors"),
        EntryPoint("codex", "atlas.executors.codex:CodexExecutor", "atlas.executors"),
    ]
    monkeypatch.setattr(plugins, "entry_points", lambda group: points)
    found, errors = plugins.load_plugins_with_errors("atlas.executors")
    assert list(found) == ["codex"]
    assert any("old" in e and "SDK version 1" in e and "speaks version 2" in e for e in errors)
    assert any("broken" in e and "did not load" in e for e in errors)


# --- config -----------------------------------------------------------------------------------


def test_a_folder_on_an_unknown_account_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="folders.~/src names account 'work'"):
        Settings.model_validate({"executors": {"codex": {"folders": {"~/src": "work"}}}})


def test_an_unknown_key_under_an_executor_is_refused() -> None:
    with pytest.raises(ValueError, match="extra"):
        Settings.model_validate({"executors": {"codex": {"enable": True}}})


def test_accounts_folders_and_targets(tmp_path: Path) -> None:
    settings = ExecutorSettings(
        enabled=True,
        accounts={"main": str(tmp_path / "a"), "work": str(tmp_path / "b")},
        folders={str(tmp_path / "src"): "work", str(tmp_path / "src" / "lib"): "main"},
    )
    executor = ClaudeCodeExecutor(settings, launcher=None)  # type: ignore[arg-type]
    assert [a.target for a in executor.accounts()] == ["claude-code@main", "claude-code@work"]
    assert executor.account().nickname == "main"
    assert executor.account(folder=tmp_path / "src" / "app").nickname == "work"
    assert executor.account(folder=tmp_path / "src" / "lib" / "x").nickname == "main"  # nearest
    assert executor.account("work").config_dir == (tmp_path / "b").resolve()
    with pytest.raises(ExecutorError, match="no account 'home'.*claude-code@main"):
        executor.account("home")
    assert parse_target("claude-code@work") == ("claude-code", "work")
    assert parse_target("codex") == ("codex", None)


def test_one_default_account_when_none_is_listed() -> None:
    (account,) = CodexExecutor(ExecutorSettings(), launcher=None).accounts()  # type: ignore[arg-type]
    assert account.target == "codex@main" and account.main
    assert account.config_dir == Path("~/.codex").expanduser().resolve()


def test_an_executor_turned_off_or_unknown_says_how_to_turn_it_on(tmp_path: Path) -> None:
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1") + "\n[executors.codex]\n"
    executors = ExecutorSet.for_home(make_home(tmp_path / "home", config=config))
    assert not executors
    with pytest.raises(ExecutorError, match=r"enabled = true under \[executors.codex\]"):
        executors.get("codex")
    with pytest.raises(ExecutorError, match=r"no \[executors.aider\] table"):
        executors.resolve("aider@work")


# --- limits -----------------------------------------------------------------------------------


def test_limit_state_from_what_was_observed() -> None:
    now = datetime(2026, 12, 4, 12, tzinfo=UTC)
    later = (now + timedelta(hours=2)).isoformat()
    earlier = (now - timedelta(hours=2)).isoformat()
    assert limit_state({}, [], now) == (None, None)  # nothing known
    assert limit_state({"limit": {"resets_at": later}}, [], now)[0] is True
    assert limit_state({"limit": {"resets_at": earlier}}, [], now)[0] is False  # reset since
    window = {"windows": {"five_hour": {"status": "rejected", "resets_at": later}}}
    assert limit_state(window, observed_windows(window), now) == (True, now + timedelta(hours=2))
    used = {"windows": {"seven_day": {"used_percent": 40, "status": "allowed"}}}
    assert limit_state(used, observed_windows(used), now) == (False, None)


def test_the_limit_book_keeps_what_it_saw_across_instances(tmp_path: Path) -> None:
    LimitBook.for_home(tmp_path).note_limit("codex@main", "hit", None, "primary")
    observed = LimitBook.for_home(tmp_path).observed("codex@main")
    assert observed["limit"]["message"] == "hit" and observed["limit"]["window"] == "primary"
    (tmp_path / "executors" / "observed.json").write_text("{broken")
    assert LimitBook.for_home(tmp_path).read() == {}  # unreadable: started afresh, not a crash


def test_codex_reset_times_in_its_messages() -> None:
    now = datetime(2026, 12, 4, 12, tzinfo=UTC)
    found = resets_from("You've hit your usage limit. Try again in 3 days 6 hours 57 minutes.", now)
    assert found == now + timedelta(days=3, hours=6, minutes=57)
    at = resets_from("... or try again at 3:28 PM.", now)
    assert at is not None and at > now and at.astimezone().strftime("%H:%M") == "15:28"
    assert resets_from("You've hit your usage limit.", now) is None


def test_codex_reset_on_another_day_is_that_day() -> None:
    """A weekly limit's message names a date: the reset is days away, not the next 3:04 PM."""
    now = datetime(2025, 12, 4, 12, tzinfo=UTC)
    message = "You've hit your usage limit. Upgrade to Pro, or try again at Dec 8th, 2025 3:04 PM."
    found = resets_from(message, now)
    assert found is not None
    assert found.astimezone().strftime("%Y-%m-%d %H:%M") == "2025-12-08 15:04"
    assert resets_from("try again at Feb 30th, 2025 3:04 PM", now) is None  # no such day


# --- parsing ----------------------------------------------------------------------------------


def account(executor: str, tmp_path: Path) -> Account:
    return Account(executor, "main", tmp_path, main=True)


def claude(tmp_path: Path, book: LimitBook | None = None) -> ClaudeCodeInstance:
    task = TaskSpec(tmp_path, "x", account("claude-code", tmp_path))
    return ClaudeCodeInstance(
        task,
        binary="claude",
        env={},
        hosts=(),
        launcher=None,
        book=book,  # type: ignore[arg-type]
    )


def test_claude_old_style_limit_text_carries_its_reset(tmp_path: Path) -> None:
    event = claude(tmp_path).parse(
        {"type": "result", "is_error": True, "result": "Claude AI usage limit reached|1765000000"}
    )[0]
    assert isinstance(event, LimitReached)
    assert event.resets_at == datetime.fromtimestamp(1765000000, UTC)


def test_claude_billing_past_the_limit_is_not_a_limit(tmp_path: Path) -> None:
    instance = claude(tmp_path, LimitBook.for_home(tmp_path))
    info = {"status": "rejected", "rateLimitType": "five_hour", "isUsingOverage": True}
    assert instance.parse({"type": "rate_limit_event", "rate_limit_info": info}) == []
    event = instance.parse({"type": "result", "is_error": False, "result": "done"})[0]
    assert isinstance(event, Result) and event.text == "done"


def test_claude_error_results_name_their_errors(tmp_path: Path) -> None:
    event = claude(tmp_path).parse(
        {"type": "result", "subtype": "error_max_turns", "is_error": True, "errors": ["too many"]}
    )[0]
    assert isinstance(event, Result) and event.is_error and event.subtype == "error_max_turns"
    assert event.text == "error_max_turns: too many"
    (empty,) = claude(tmp_path).parse(
        {"type": "result", "subtype": "error_max_turns", "is_error": True, "result": ""}
    )
    assert isinstance(empty, Result) and empty.text == "error_max_turns"


def test_claude_control_requests_become_permission_requests_and_questions(tmp_path: Path) -> None:
    instance = claude(tmp_path)
    (permission,) = instance.parse(
        {
            "type": "control_request",
            "request_id": "r1",
            "request": {
                "subtype": "can_use_tool",
                "tool_name": "Write",
                "input": {"file_path": "/etc/x"},
                "decision_reason": "outside the folder",
            },
        }
    )
    assert isinstance(permission, PermissionRequest) and permission.reason == "outside the folder"
    assert (
        instance.parse(
            {"type": "control_request", "request_id": "r2", "request": {"subtype": "interrupt"}}
        )
        == []
    )
    assert "r1" in instance.requests


def test_codex_question_event(tmp_path: Path) -> None:
    task = TaskSpec(tmp_path, "x", account("codex", tmp_path))
    instance = CodexInstance(task, binary="codex", env={}, hosts=(), launcher=None)  # type: ignore[arg-type]
    (question,) = instance.parse(
        {
            "type": "request_user_input",
            "id": "t",
            "call_id": "c1",
            "questions": [
                {"id": "q", "header": "H", "question": "Go?", "options": [{"label": "yes"}]}
            ],
        }
    )
    assert isinstance(question, Question) and question.request_id == "c1"
    assert question.questions[0].choices == ("yes",)


# --- the harnesses' files ---------------------------------------------------------------------


def test_claude_account_status_from_its_files(tmp_path: Path) -> None:
    folder = tmp_path / "claude-work"
    folder.mkdir()
    (folder / ".claude.json").write_text(
        json.dumps({"oauthAccount": {"emailAddress": "me@work.example"}})
    )
    (folder / ".credentials.json").write_text(
        json.dumps({"claudeAiOauth": {"subscriptionType": "max"}})
    )
    settings = ExecutorSettings(accounts={"work": str(folder)}, extra_usage=["work"])
    executor = ClaudeCodeExecutor(settings, launcher=None)  # type: ignore[arg-type]
    (work,) = executor.accounts()
    status = executor.account_status(work, {})
    assert (status.logged_in_as, status.plan, status.extra_usage) == (
        "me@work.example",
        "max",
        True,
    )
    assert status.at_limit is None and status.windows == ()
    text = describe(status)
    assert "claude-code@work (main)" in text and "usage per window: unknown" in text


def test_codex_account_status_from_its_auth_file(tmp_path: Path) -> None:
    claims = {
        "email": "me@home.example",
        "https://api.openai.com/auth": {"chatgpt_plan_type": "pro"},
    }
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    (tmp_path / "auth.json").write_text(json.dumps({"tokens": {"id_token": f"h.{body}.s"}}))
    executor = CodexExecutor(ExecutorSettings(accounts={"main": str(tmp_path)}), launcher=None)  # type: ignore[arg-type]
    status = executor.account_status(executor.accounts()[0], {})
    assert (status.logged_in_as, status.plan) == ("me@home.example", "pro")
    (tmp_path / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": "sk-test"}))
    status = executor.account_status(executor.accounts()[0], {})
    assert status.logged_in_as == "API key" and status.extra_usage is True


def test_a_deleted_session_log_is_said_deleted(tmp_path: Path) -> None:
    for executor_class in (ClaudeCodeExecutor, CodexExecutor):
        executor = executor_class(ExecutorSettings(accounts={"main": str(tmp_path)}), launcher=None)  # type: ignore[arg-type]
        log = executor.session_log(executor.accounts()[0], "1234-abcd", tmp_path)
        assert log.deleted and log.path is None
        assert executor.session_log(executor.accounts()[0], "../*", tmp_path).deleted  # no glob


# --- the network ------------------------------------------------------------------------------


def test_the_provider_hosts_are_the_channels_own_allow_list() -> None:
    """They pass without a question; any other host is the person's (tests/integration/
    test_executor_egress.py)."""
    claude = _patterns(ClaudeCodeExecutor.provider_hosts)
    assert on_allow_list("api.anthropic.com", claude)
    assert on_allow_list("statsig.anthropic.com", claude)
    assert not on_allow_list("anthropic.com.evil.example", claude)
    assert not on_allow_list("pypi.org", claude)
    assert on_allow_list("chatgpt.com", _patterns(CodexExecutor.provider_hosts))


def test_claude_not_logged_in_is_a_failure_saying_how_to_log_in(tmp_path: Path) -> None:
    # What the real claude 2.1.197 answers with an empty CLAUDE_CONFIG_DIR.
    line = {
        "type": "result",
        "subtype": "success",
        "is_error": True,
        "result": "Not logged in · Please run /login",
    }
    (event,) = claude(tmp_path).parse(line)
    assert isinstance(event, Failure)
    assert "claude-code@main: Not logged in" in event.message and "/login" in event.message


def test_codex_reconnecting_errors_are_not_failures(tmp_path: Path) -> None:
    # What the real codex 0.171.0 prints when its proxy cannot reach the provider: it retries.
    task = TaskSpec(tmp_path, "x", account("codex", tmp_path))
    instance = CodexInstance(task, binary="codex", env={}, hosts=(), launcher=None)  # type: ignore[arg-type]
    message = "Reconnecting... 2/5 (stream disconnected before completion: HTTP CONNECT failed with status 502)"
    assert instance.parse({"type": "error", "message": message}) == []
    assert instance.last_error == message
    (failed,) = instance.parse({"type": "turn.failed", "error": {"message": "stream disconnected"}})
    assert isinstance(failed, Failure) and failed.message == "stream disconnected"


def test_a_harness_installed_by_npm_under_tmp_stays_visible(tmp_path: Path) -> None:
    from atlas.executors.launch import _install_folders

    modules = tmp_path / "node_modules"
    (modules / ".bin").mkdir(parents=True)
    (modules / "@openai" / "codex" / "bin").mkdir(parents=True)
    (modules / "@openai" / "codex" / "bin" / "codex.js").write_text("")
    (modules / ".bin" / "codex").symlink_to("../@openai/codex/bin/codex.js")
    assert _install_folders(modules / ".bin" / "codex") == [modules.resolve()]
    assert _install_folders(Path("/usr/local/bin/claude")) == [Path("/usr/local/bin")]


def test_claude_argv_resumes_and_takes_the_permission_mode(tmp_path: Path) -> None:
    task = TaskSpec(tmp_path, "x", account("claude-code", tmp_path), permission_mode="acceptEdits")
    instance = ClaudeCodeInstance(task, binary="claude", env={}, hosts=(), launcher=None)  # type: ignore[arg-type]
    argv = instance.run_argv("x", "sess-1")
    assert argv[:2] == ["claude", "-p"]
    at = argv.index("--permission-prompt-tool")
    assert argv[at : at + 2] == ["--permission-prompt-tool", "stdio"]
    assert argv[argv.index("--permission-mode") + 1] == "acceptEdits"
    assert argv[-2:] == ["--resume", "sess-1"]
    codex = CodexInstance(
        TaskSpec(tmp_path, "x", account("codex", tmp_path)),
        binary="codex",
        env={},
        hosts=(),
        launcher=None,
    )  # type: ignore[arg-type]
    assert codex.run_argv("x", "t-1")[:3] == ["codex", "exec", "resume"]
    assert codex.run_argv("x", "t-1")[-2:] == ["t-1", "-"]


def test_session_logs_as_the_real_harnesses_write_them(tmp_path: Path) -> None:
    """Lines shaped as claude 2.1.197 and codex 0.171.0 wrote them (shortened): only what the
    person, Atlas and the model said is read back, not the harness's own additions."""
    from atlas.executors import claude_files, codex_files

    folder = Path("/tmp/proj")
    claude_lines = [
        {"type": "queue-operation", "operation": "enqueue", "content": "say hi"},
        {
            "type": "user",
            "message": {"role": "user", "content": "say hi"},
            "timestamp": "2026-12-04T09:23:09.097Z",
        },
        {
            "type": "attachment",
            "attachment": {"type": "skill_listing", "content": "- deep-research"},
        },
        {
            "type": "user",
            "isMeta": True,
            "message": {"role": "user", "content": "<local-command-caveat>"},
        },
        {
            "type": "assistant",
            "message": {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "hi"},
                    {"type": "tool_use", "name": "Bash", "input": {"command": "ls"}},
                ],
            },
        },
        {"type": "last-prompt", "lastPrompt": "say hi"},
    ]
    log_file = tmp_path / "claude" / "projects" / "-tmp-proj" / "s-1.jsonl"
    log_file.parent.mkdir(parents=True)
    log_file.write_text("\n".join(json.dumps(line) for line in claude_lines) + "\n")
    log = claude_files.session_log(tmp_path / "claude", "s-1", folder)
    assert [(e.role, e.tool, e.text) for e in log.entries] == [
        ("user", None, "say hi"),
        ("assistant", None, "hi"),
        ("tool", "Bash", '{"command": "ls"}'),
    ]
    assert log.entries[0].at == datetime(2026, 12, 4, 9, 23, 9, 97000, tzinfo=UTC)

    def item(payload: dict) -> str:
        return json.dumps(
            {"timestamp": "2026-12-04T09:20:56.080Z", "type": "response_item", "payload": payload}
        )

    codex_lines = [
        json.dumps({"type": "session_meta", "payload": {"id": "t-1", "cwd": "/tmp/proj"}}),
        item(
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "You are Codex"}],
            }
        ),
        item(
            {
                "type": "message",
                "role": "user",
                "content": [
                    {
                        "type": "input_text",
                        "text": "<environment_context>\n  <cwd>/tmp/proj</cwd>\n</environment_context>",
                    }
                ],
            }
        ),
        item(
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "say hi"}],
            }
        ),
        json.dumps({"type": "event_msg", "payload": {"type": "task_started"}}),
    ]
    rollout = (
        tmp_path
        / "codex"
        / "sessions"
        / "2026"
        / "12"
        / "04"
        / "rollout-2026-12-04T09-20-55-t-1.jsonl"
    )
    rollout.parent.mkdir(parents=True)
    rollout.write_text("\n".join(codex_lines) + "\n")
    log = codex_files.session_log(tmp_path / "codex", "t-1")
    assert [(e.role, e.text) for e in log.entries] == [("user", "say hi")]
