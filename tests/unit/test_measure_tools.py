"""scripts/measure_tools.py's provider mode against the fake model servers, which count the
prompt deterministically (cl100k over the request's JSON) the way a provider's usage would."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from atlas.agent.tokens import count_tokens
from atlas.errors import AtlasError
from atlas.tools.catalog import default_registry
from scripts.measure_tools import MAX_OUTPUT_TOKENS, main, measure_provider
from tests.fakes.model_servers import FakeAnthropicServer, FakeOpenAIServer
from tests.helpers import BASE_CONFIG, make_home

ROOT = Path(__file__).resolve().parents[2]
TOOLS = list(default_registry())
ALWAYS_ON = [t.name for t in TOOLS if not t.deferred]
DEFERRED = [t.name for t in TOOLS if t.deferred]


def count_prompt(body: dict[str, Any]) -> int:
    """Over the JSON as it travels: compact, as Atlas's providers send it."""
    prompt = {k: body.get(k) for k in ("system", "messages", "tools")}
    return count_tokens(json.dumps(prompt, ensure_ascii=False, separators=(",", ":")))


def tool_names(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] if "function" in t else t["name"] for t in body.get("tools", [])]


async def test_each_tool_is_counted_by_the_provider(tmp_path: Path) -> None:
    async with FakeOpenAIServer() as server:
        server.count_prompt = count_prompt
        for _ in range(2 + len(TOOLS)):
            server.reply("OK")
        home = make_home(tmp_path / "home", base_url=server.base_url)
        figures = await measure_provider(home, "fake", each=True)
        server.assert_complete()
    first, roster = server.requests[0], server.requests[1]
    assert "tools" not in first and tool_names(roster) == ALWAYS_ON
    assert all(r["model"] == "test-model" for r in server.requests)
    assert all(r["max_tokens"] == MAX_OUTPUT_TOKENS for r in server.requests)
    assert figures["model"] == "test-model" and figures["requests"] == 2 + len(TOOLS)
    assert figures["without_tools"] == count_prompt(first)
    assert figures["total"] == count_prompt(roster) - count_prompt(first)
    # Each always-on tool: the roster without it; each deferred one: the roster plus it.
    assert [tool_names(r) for r in server.requests[2 : 2 + len(ALWAYS_ON)]] == [
        [n for n in ALWAYS_ON if n != name] for name in ALWAYS_ON
    ]
    assert [tool_names(r)[-1] for r in server.requests[2 + len(ALWAYS_ON) :]] == DEFERRED
    assert list(figures["always_on"]) == ALWAYS_ON and list(figures["deferred"]) == DEFERRED
    for name, f in [*figures["always_on"].items(), *figures["deferred"].items()]:
        assert abs(f["tokens"] - f["estimate"]) <= 3, (name, f)  # the same wire JSON, counted
    shared = figures["total"] - sum(f["tokens"] for f in figures["always_on"].values())
    assert figures["shared"] == shared and abs(shared) < 10


async def test_the_command_line_asks_the_configured_provider(tmp_path: Path) -> None:
    async with FakeOpenAIServer() as server:
        server.count_prompt = count_prompt
        server.reply("OK")
        server.reply("OK")
        home = make_home(tmp_path / "home", base_url=server.base_url)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "scripts/measure_tools.py", "fake", "test-model",
            "--home", str(home.root), "--json",
            cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await proc.communicate()
        server.assert_complete()
    assert proc.returncode == 0, err.decode()
    figures = json.loads(out)
    assert figures["total"] == count_prompt(server.requests[1]) - count_prompt(server.requests[0])
    assert "always_on" not in figures and figures["requests"] == 2


async def test_anthropic_is_asked_its_count_tokens(tmp_path: Path) -> None:
    async with FakeAnthropicServer() as server:
        server.count_prompt = count_prompt
        config = (
            BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1")
            + f'\n[providers.claude]\nkind = "anthropic"\nbase_url = "{server.base_url}"\n'
        )
        home = make_home(tmp_path / "home", config=config)
        figures = await measure_provider(home, "claude", "claude/claude-test", each=True)
    assert server.requests == []  # nothing was completed: counting is free
    assert len(server.count_requests) == figures["requests"] == 2 + len(TOOLS)
    assert all(r["model"] == "claude-test" for r in server.count_requests)
    assert tool_names(server.count_requests[1]) == ALWAYS_ON
    for name, f in figures["always_on"].items():
        assert 0 < f["tokens"] <= f["estimate"], (name, f)  # Anthropic's form is the shorter


def test_a_provider_or_model_that_does_not_fit_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = make_home(tmp_path / "home")
    assert main(["nowhere", "--home", str(home.root)]) == 1
    assert "has no [providers.nowhere] (defined: fake)" in capsys.readouterr().err
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1").replace(
        'model = "fake/test-model"', 'model = "other/x"\n\n[providers.other]\nkind = "openai"'
    )
    other = make_home(tmp_path / "other", config=config)
    with pytest.raises(AtlasError, match="is not on provider 'fake': name the model"):
        asyncio.run(measure_provider(other, "fake"))


def test_the_per_bot_report_counts_what_the_request_carries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from atlas.agent.context import build_system_prompt
    from atlas.tools.registry import RunContext
    from scripts.request_report import request_report

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "cache"))  # no o200k file: said so
    home = make_home(tmp_path / "home")
    for number in range(20):
        folder = home.skills_dir / f"client{number:02d}"
        folder.mkdir(parents=True)
        (folder / "SKILL.md").write_text(
            f"---\nname: client{number:02d}\ndescription: Use this skill for the figures of "
            f"client {number:02d}\n---\nBody.\n"
        )
    report = request_report(home, home.settings.main)
    run = RunContext(home=home, bot=home.main_bot, conversation_id=0, channel="telegram")
    offered = {t.name: t.spec(run) for t in default_registry().for_run(run)}
    assert list(report["tools"]) == list(offered)  # the run's tools, not every built-in
    assert {"use_skill", "tool_search"} <= set(report["run_time_descriptions"])
    description = offered["use_skill"].description
    listed = description.split("\nSkills:\n", 1)[1]
    assert report["skill_list"] == {"skills": 20, "tokens": {"cl100k": count_tokens(listed)}}
    assert report["run_time_descriptions"]["use_skill"] == {"cl100k": count_tokens(description)}
    assert report["system_prompt_total"] == {"cl100k": count_tokens(build_system_prompt(run))}
    # Counted on the bytes the provider receives: compact JSON as the provider code encodes it,
    # not a spaced re-serialisation of the spec.
    for name, spec in offered.items():
        function = {"name": name, "description": spec.description, "parameters": spec.parameters}
        as_sent = orjson.dumps({"type": "function", "function": function}).decode()
        assert report["tools"][name] == {"cl100k": count_tokens(as_sent)}, name
    assert report["wire"] == "openai"
    system = orjson.dumps({"role": "system", "content": build_system_prompt(run)}).decode()
    assert report["system_prompt_as_sent"] == {"cl100k": count_tokens(system)}
    assert report["total"]["cl100k"] == (
        report["tools_total"]["cl100k"] + report["system_prompt_as_sent"]["cl100k"]
    )
    assert "not available offline" in report["encodings"]["o200k"]
    assert main(["--bot", home.settings.main, "--home", str(home.root)]) == 0
    out = capsys.readouterr().out
    assert "o200k: not available offline" in out and "skill list (20 lines" in out
    assert main(["--bot", "nobody", "--home", str(home.root)]) == 1
    assert "no bot named 'nobody'" in capsys.readouterr().err


@pytest.mark.parametrize(("skills", "target"), [(0, 3_000), (20, 3_400)])
def test_the_fixed_prefix_stays_under_its_target(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    skills: int,
    target: int,
) -> None:
    """Issue 37's targets are o200k tokens as sent; o200k is not available offline, and on this
    text it counts about 4 % more than cl100k (docs/benchmarks.md): cl100k with that margin."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "cache"))
    home = make_home(tmp_path / "home")
    argv = ["--bot", "atlas", "--home", str(home.root), "--json"]
    assert main([*argv, "--example-skills", str(skills)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["skill_list"]["skills"] == skills
    assert report["total"]["cl100k"] <= target / 1.04, report["total"]
