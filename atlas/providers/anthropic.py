"""Anthropic Messages through the official `anthropic` SDK, with prompt caching.

Three cache breakpoints: the last tool and the system prompt (the stable prefix), and the last
block of the last message (so each round reads the conversation so far from the cache).
The SDK is imported when the first client is made: importing it costs over a second.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from atlas.providers.base import (
    CompletionRequest,
    CompletionResponse,
    Image,
    Message,
    ProviderCallError,
    TextSink,
    ToolCall,
    ToolSpec,
    Usage,
)
from atlas.providers.wire import (
    SdkProvider,
    emit_text,
    malformed,
    status_error,
    transport_error,
)

if TYPE_CHECKING:
    from anthropic import AsyncAnthropic

EPHEMERAL = {"type": "ephemeral"}
# Error types that arrive inside a 200 stream and are worth another try.
RETRYABLE_ERROR_TYPES = frozenset(
    {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}
)


def _image_block(image: Image) -> dict[str, Any]:
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": image.media_type, "data": image.data_b64},
    }


def _text_and_images(text: str, images: list[Image]) -> list[dict[str, Any]]:
    # The API rejects empty text blocks, so an empty text is left out.
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    blocks.extend(_image_block(image) for image in images)
    return blocks


def _arguments(raw: str) -> dict[str, Any]:
    """A tool call's JSON arguments as the object `tool_use.input` needs; invalid JSON → {}."""
    try:
        value = json.loads(raw) if raw else {}
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _assistant_blocks(message: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = (
        [{"type": "text", "text": message.content}] if message.content else []
    )
    blocks.extend(
        {"type": "tool_use", "id": c.id, "name": c.name, "input": _arguments(c.arguments)}
        for c in message.tool_calls
    )
    return blocks


def _tool_result_block(message: Message) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id}
    content = _text_and_images(message.content, message.images)
    if content:
        block["content"] = content
    return block


def to_anthropic_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """Our messages → Messages API turns: tool results of a run merged into one user turn."""
    out: list[dict[str, Any]] = []
    previous_role = None
    for message in messages:
        if message.role == "tool":
            block = _tool_result_block(message)
            if previous_role == "tool":
                out[-1]["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
        elif message.role == "assistant":
            blocks = _assistant_blocks(message)
            if blocks:  # an empty assistant turn is refused by the API and says nothing
                out.append({"role": "assistant", "content": blocks})
        else:
            # The API has no system role mid-conversation; such a note travels as user text.
            text = f"[system] {message.content}" if message.role == "system" else message.content
            blocks = _text_and_images(text, message.images)
            if blocks:
                out.append({"role": "user", "content": blocks})
        previous_role = message.role
    if out:
        out[-1]["content"][-1]["cache_control"] = EPHEMERAL
    return out


def to_anthropic_tools(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools
    ]
    if out:
        out[-1]["cache_control"] = EPHEMERAL
    return out


def _usage(raw: dict[str, Any]) -> Usage:
    """Anthropic counts cached prompt tokens apart; our input_tokens is the whole prompt."""
    cache_read = raw.get("cache_read_input_tokens") or 0
    cache_write = raw.get("cache_creation_input_tokens") or 0
    return Usage(
        input_tokens=(raw.get("input_tokens") or 0) + cache_read + cache_write,
        output_tokens=raw.get("output_tokens") or 0,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
    )


def _from_anthropic(content: list[dict[str, Any]]) -> Message:
    """The answer's content blocks (as JSON) → one assistant message."""
    text: list[str] = []
    calls: list[ToolCall] = []
    for block in content:
        if block["type"] == "text":
            text.append(block["text"])
        elif block["type"] == "tool_use":
            calls.append(ToolCall(block["id"], block["name"], json.dumps(block["input"])))
    return Message("assistant", "".join(text), tool_calls=calls)


class AnthropicProvider(SdkProvider):
    """One Anthropic Messages endpoint, named in config.toml [providers.NAME]."""

    @classmethod
    def _sdk_client_class(cls) -> type[AsyncAnthropic]:
        from anthropic import AsyncAnthropic

        return AsyncAnthropic

    @classmethod
    def _sdk_http_client_class(cls) -> type[Any]:
        from anthropic import DefaultAioHttpClient

        return DefaultAioHttpClient

    async def complete(
        self, request: CompletionRequest, on_text: TextSink | None = None
    ) -> CompletionResponse:
        client = self._get_client()
        params: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_tokens,
            "messages": to_anthropic_messages(request.messages),
        }
        if request.system:
            params["system"] = [
                {"type": "text", "text": request.system, "cache_control": EPHEMERAL}
            ]
        if request.tools:
            params["tools"] = to_anthropic_tools(request.tools)
        where = self._where(request.model)
        with self._sdk_errors(request.model):
            if on_text is None:
                answer = await self.poster().post("/v1/messages", params, where)
            else:
                async with client.messages.stream(**params) as stream:
                    async for text in stream.text_stream:
                        await emit_text(on_text, text)
                    answer = (await stream.get_final_message()).model_dump()
        try:
            message = _from_anthropic(answer["content"])
            usage = _usage(answer["usage"])
        except (LookupError, TypeError, AttributeError) as exc:
            raise malformed(where, exc) from exc
        return CompletionResponse(
            message, usage, f"{self.name}/{request.model}", answer.get("stop_reason") or ""
        )

    def _translate(self, exc: Exception, model: str) -> ProviderCallError | None:
        """The SDK's exception → ProviderCallError, or None for one it does not know."""
        import anthropic
        import httpx2

        where = self._where(model)
        if isinstance(exc, anthropic.APIStatusError):
            status = exc.status_code
            retryable = None  # decided by the status
            if status < 400:  # an error event inside a stream that began with 200
                error = exc.body.get("error") if isinstance(exc.body, dict) else None
                kind = error.get("type") if isinstance(error, dict) else None
                retryable = kind in RETRYABLE_ERROR_TYPES
            return status_error(where, status, exc.body, exc.response.headers, retryable=retryable)
        if isinstance(exc, anthropic.APIConnectionError | httpx2.TransportError):
            return transport_error(where, exc)
        if isinstance(exc, anthropic.APIResponseValidationError):
            return ProviderCallError(f"{where}: malformed answer: {exc}", retryable=False)
        if isinstance(exc, anthropic.APIError):
            return ProviderCallError(
                f"{where}: the server reported an error: {exc.message}", retryable=True
            )
        return None
