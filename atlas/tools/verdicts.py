"""A verdict for every tool: offered, deferred or not offered to a run, and why (`atlas tools`).

The reason shown is the one the registry gives the model when it calls a tool it is not
offered (Tool.unavailable_reason): one answer for the person and the model. MCP servers are
judged by name: their tools are known only once a running home has listed them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from atlas.agent.tokens import tool_tokens
from atlas.home import Bot, Home
from atlas.mcp.config import bot_may_use, load_mcp_config, mcp_config_path
from atlas.tools.registry import RunContext, RunKind, ToolRegistry

State = Literal["offered", "deferred", "not offered"]


@dataclass(frozen=True)
class Verdict:
    name: str
    state: State
    why: str  # for deferred and not offered; empty for offered
    tokens: int | None = None  # what an offered tool adds to every request, as sent


def tool_verdicts(home: Home, bot: Bot, kind: RunKind, registry: ToolRegistry) -> list[Verdict]:
    run = RunContext(home=home, bot=bot, conversation_id=0, run_kind=kind)
    verdicts: list[Verdict] = []
    for tool in registry:
        reason = tool.unavailable_reason(run)
        if reason is not None:
            verdicts.append(Verdict(tool.name, "not offered", reason))
        elif tool.deferred:
            verdicts.append(Verdict(tool.name, "deferred", "sent once tool_search loads it"))
        else:
            verdicts.append(Verdict(tool.name, "offered", "", tool_tokens(tool.spec(run))))
    return verdicts + _server_verdicts(home, bot)


def _server_verdicts(home: Home, bot: Bot) -> list[Verdict]:
    path = mcp_config_path(home)
    if not path.is_file():
        return []
    config = load_mcp_config(path)
    verdicts = []
    for name in config.servers:
        shown = f"mcp__{name}__*"
        if not bot_may_use(bot, name):
            why = f"bot {bot.name!r}'s mcp_servers does not name it ({bot.root / 'bot.toml'})"
            verdicts.append(Verdict(shown, "not offered", why))
        else:
            why = (
                "its tools are listed once the server runs (deferred unless alwaysLoad); "
                "`atlas doctor` starts it"
            )
            verdicts.append(Verdict(shown, "deferred", why))
    return verdicts


def render_verdicts(bot: Bot, kind: RunKind, verdicts: list[Verdict]) -> str:
    width = max((len(v.name) for v in verdicts), default=0)
    lines = [f"Tools of bot {bot.name} in a {kind} run:"]
    for v in verdicts:
        detail = f"{v.tokens:,} tokens (cl100k) a request" if v.state == "offered" else v.why
        lines.append(f"  {v.name:<{width}}  {v.state:<11}  {detail}")
    offered = [v for v in verdicts if v.state == "offered"]
    total = sum(v.tokens or 0 for v in offered)
    lines.append(
        f"{len(offered)} offered ({total:,} tokens of tool schemas a request), "
        f"{sum(v.state == 'deferred' for v in verdicts)} deferred, "
        f"{sum(v.state == 'not offered' for v in verdicts)} not offered"
    )
    return "\n".join(lines)


def verdicts_json(verdicts: list[Verdict]) -> list[dict[str, Any]]:
    return [asdict(v) for v in verdicts]
