"""An MCP server's tools as registry tools: `mcp__<server>__<tool>`, the server's own schema,
results as untrusted data, and the gate rule for servers marked untrusted.

This module does not import the `mcp` SDK (0.7 s): the gate and the registry import it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from atlas.agent.untrusted import wrap_untrusted
from atlas.mcp.config import bot_may_use
from atlas.providers.base import Image, ToolCall, ToolSpec
from atlas.tools.registry import RunContext, Tool, ToolRegistry, ToolResult, effective_mode
from atlas.trust.gate import Ask

if TYPE_CHECKING:
    import mcp_types

log = logging.getLogger(__name__)
MAX_NAME = 64  # OpenAI's limit on a function name; Anthropic's is 128
MAX_DESCRIPTION = 2_048  # what Claude Code keeps of a server's tool description
IMAGE_TYPES = {"image/png", "image/jpeg", "image/gif", "image/webp"}
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")

# Calls a server's tool: (server, tool, arguments, run) -> result.
McpCaller = Callable[[str, str, dict[str, Any], RunContext], Awaitable[ToolResult]]


class AnyArguments(BaseModel):
    """Any JSON object: the server validates its own arguments."""

    model_config = ConfigDict(extra="allow")


def tool_name(server: str, remote: str) -> str:
    """`mcp__<server>__<tool>`, made safe for every provider (letters, digits, _ and -; 64 max)."""
    name = f"mcp__{server}__{_NAME_UNSAFE.sub('_', remote)}"
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: MAX_NAME - 9]}_{digest}"


def _strip_titles(schema: Any) -> Any:
    """Pydantic-made schemas title every property; the model does not need them (tokens)."""
    if isinstance(schema, dict):
        return {
            k: _strip_titles(v) for k, v in schema.items() if k != "title" or not isinstance(v, str)
        }
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


def model_schema(input_schema: dict[str, Any]) -> dict[str, Any]:
    """The server's input schema as providers accept it: an object with properties."""
    schema = _strip_titles(dict(input_schema))
    schema.pop("$schema", None)
    schema["type"] = "object"
    schema.setdefault("properties", {})
    return schema


@dataclass(frozen=True)
class McpTool(Tool):
    """A tool of an MCP server; it sends the server's own schema and asks the manager to call."""

    server: str = ""
    remote_name: str = ""  # the tool's name on its server
    input_schema: dict[str, Any] = field(default_factory=dict)
    # The server is marked untrusted and the tool does not declare itself read-only.
    ask_every_call: bool = False

    def spec(self, run: RunContext | None = None) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.input_schema)

    def unavailable_reason(self, run: RunContext) -> str | None:
        # A bot's `tools` list names built-in tools; its MCP tools come with the servers it names.
        if not bot_may_use(run.bot, self.server):
            return (
                f"from MCP server {self.server!r}, which bot {run.bot.name!r}'s mcp_servers "
                f"does not name ({run.bot.root / 'bot.toml'})"
            )
        return self.available(run) if self.available else None


def make_tool(
    server: str, untrusted_server: bool, always_load: bool, listed: mcp_types.Tool, call: McpCaller
) -> McpTool:
    """An McpTool for one tool of a server's listing."""
    read_only = bool(listed.annotations and listed.annotations.read_only_hint)
    remote = listed.name
    description = (listed.description or listed.title or remote).strip()
    if len(description) > MAX_DESCRIPTION:
        description = description[: MAX_DESCRIPTION - 1] + "…"

    async def run_remote(run: RunContext, /, **arguments: Any) -> ToolResult:
        # Positional-only: a server tool may well have an argument named `run`.
        return await call(server, remote, arguments, run)

    return McpTool(
        name=tool_name(server, remote),
        description=f"{description}\n\n(MCP server {server})",
        fn=run_remote,
        arguments=AnyArguments,
        read_only=read_only,
        failure_tolerant=True,
        deferred=not always_load,
        untrusted=True,
        server=server,
        remote_name=remote,
        input_schema=model_schema(listed.input_schema),
        ask_every_call=untrusted_server and not read_only,
    )


def _block_text(block: Any, supports_images: bool, images: list[Image]) -> str | None:
    kind = getattr(block, "type", None)
    if kind == "text":
        return str(block.text)
    if kind == "image":
        if supports_images and block.mime_type in IMAGE_TYPES:
            images.append(Image(block.mime_type, block.data))
            return f"[image {len(images)}: {block.mime_type}, attached]"
        return f"[image: {block.mime_type}, about {len(block.data) * 3 // 4:,} bytes, not shown]"
    if kind == "audio":
        return f"[audio: {block.mime_type}, about {len(block.data) * 3 // 4:,} bytes, not shown]"
    if kind == "resource_link":
        return f"[resource link: {block.uri} ({block.name})]"
    if kind == "resource":
        resource = block.resource
        text = getattr(resource, "text", None)
        if text is not None:
            return f"[resource {resource.uri}]\n{text}"
        mime = resource.mime_type or "binary"
        return f"[resource {resource.uri}: {mime}, about {len(resource.blob) * 3 // 4:,} bytes, not shown]"
    return f"[content of type {kind!r}, not shown]"


def to_tool_result(
    name: str, server: str, result: mcp_types.CallToolResult, supports_images: bool
) -> ToolResult:
    """A server's answer as the model reads it; the loop wraps it as untrusted data."""
    images: list[Image] = []
    parts = [_block_text(b, supports_images, images) for b in result.content]
    text = "\n".join(p for p in parts if p is not None)
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False, indent=1)
    if result.is_error:
        # The loop wraps only successful results; an error's text comes from the server too.
        body = wrap_untrusted(name, text or "(no details)")
        return ToolResult(
            f"Error: MCP server {server!r} reported a failure:\n{body}", is_error=True
        )
    return ToolResult(text or "(the tool returned nothing)", images=images, untrusted=True)


def mcp_gate_rule(call: ToolCall, tool: Tool, run: RunContext) -> Ask | None:
    """The gate's rule for MCP tools: an untrusted server's tools that may change something ask
    every call; in read-only mode so does any MCP tool that does not declare itself read-only."""
    if not isinstance(tool, McpTool):
        return None
    shown = call.arguments if len(call.arguments) <= 300 else call.arguments[:300] + "…"
    if tool.ask_every_call:
        return Ask(
            f"{tool.name}: MCP server {tool.server!r} is marked untrusted in mcp.json, and this "
            f"tool does not declare itself read-only. Call it with {shown}?",
            f"mcp:untrusted:{tool.server}",
        )
    if not tool.read_only and effective_mode(run) == "read-only":
        return Ask(
            f"Read-only mode: {tool.name} (MCP server {tool.server!r}) does not declare itself "
            f"read-only. Call it with {shown}?",
            "mode:read-only",
        )
    return None


def registry_with_mcp(
    base: ToolRegistry,
    tools: Sequence[Tool],
    why_missing: Callable[[str], str | None] | None = None,
) -> ToolRegistry:
    """The built-in tools in their order, then a bot's MCP tools; a name taken is skipped."""
    registry = ToolRegistry(list(base), why_missing=why_missing)
    for t in tools:
        if registry.get(t.name) is None:
            registry.add(t)
        else:
            log.warning("MCP tool %s skipped: a tool of that name is already registered", t.name)
    return registry
