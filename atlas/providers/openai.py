"""Chat Completions through the official `openai` SDK, for any OpenAI-compatible endpoint.

The SDK is imported when the first client is made: `atlas --help` should not pay for it.
"""

from __future__ import annotations

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
    from openai import AsyncOpenAI

# Chat Completions finish reasons → the Anthropic-style names the rest of Atlas uses.
STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}


def _data_url(image: Image) -> dict[str, Any]:
    return {
        "type": "image_url",
        "image_url": {"url": f"data:{image.media_type};base64,{image.data_b64}"},
    }


def _tool_images_message(tool_messages: list[Message]) -> dict[str, Any]:
    """One user message carrying the images of a run of tool results (tool messages cannot)."""
    parts: list[dict[str, Any]] = []
    for message in tool_messages:
        label = message.name or message.tool_call_id or "a tool"
        parts.append({"type": "text", "text": f"Images returned by {label}:"})
        parts.extend(_data_url(image) for image in message.images)
    return {"role": "user", "content": parts}


def _assistant_message(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant", "content": message.content or None}
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
    elif out["content"] is None:
        out["content"] = ""
    return out


def _user_message(message: Message) -> dict[str, Any]:
    if not message.images:
        return {"role": message.role, "content": message.content}
    parts: list[dict[str, Any]] = (
        [{"type": "text", "text": message.content}] if message.content else []
    )
    parts.extend(_data_url(image) for image in message.images)
    return {"role": message.role, "content": parts}


def _openai_form(message: Message) -> dict[str, Any]:
    """One message's own Chat Completions form, made once: the body is only serialised, never
    changed, so the same dict can go out in every call that carries the message."""
    if message.openai_form is None:
        if message.role == "tool":
            form = {
                "role": "tool",
                "tool_call_id": message.tool_call_id,
                "content": message.content,
            }
        elif message.role == "assistant":
            form = _assistant_message(message)
        else:
            form = _user_message(message)
        message.openai_form = form
    return message.openai_form


def to_openai_messages(system: str, messages: list[Message]) -> list[dict[str, Any]]:
    """Our messages → Chat Completions messages, the system prompt first."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    with_images: list[Message] = []  # tool messages of the current run that returned images
    for message in messages:
        if message.role != "tool" and with_images:
            out.append(_tool_images_message(with_images))
            with_images = []
        out.append(_openai_form(message))
        if message.role == "tool" and message.images:
            with_images.append(message)
    if with_images:
        out.append(_tool_images_message(with_images))
    return out


def to_openai_tools(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in tools
    ]


def _usage(raw: dict[str, Any] | None) -> Usage:
    if not raw:  # some compatible servers send no usage at all
        return Usage()
    details = raw.get("prompt_tokens_details") or {}
    return Usage(
        input_tokens=raw.get("prompt_tokens") or 0,
        output_tokens=raw.get("completion_tokens") or 0,
        cache_read_tokens=details.get("cached_tokens") or 0,
    )


def _tool_call(index: int, call_id: str | None, name: str, arguments: str | None) -> ToolCall:
    # Some local servers omit ids or send "" for a call without arguments.
    return ToolCall(call_id or f"call_{index}", name, arguments or "{}")


class OpenAIProvider(SdkProvider):
    """One OpenAI-compatible endpoint, named in config.toml [providers.NAME]."""

    @classmethod
    def _sdk_client_class(cls) -> type[AsyncOpenAI]:
        from openai import AsyncOpenAI

        return AsyncOpenAI

    @classmethod
    def _sdk_http_client_class(cls) -> type[Any]:
        from openai import DefaultAioHttpClient

        return DefaultAioHttpClient

    async def complete(
        self, request: CompletionRequest, on_text: TextSink | None = None
    ) -> CompletionResponse:
        client = self._get_client()
        body: dict[str, Any] = {
            "model": request.model,
            "messages": to_openai_messages(request.system, request.messages),
            "max_tokens": request.max_tokens,
        }
        if request.tools:
            body["tools"] = to_openai_tools(request.tools)
        with self._sdk_errors(request.model):
            if on_text is None:
                message, usage, finish = await self._complete_once(body)
            else:
                message, usage, finish = await self._complete_streaming(client, body, on_text)
        return CompletionResponse(
            message, usage, f"{self.name}/{request.model}", STOP_REASONS.get(finish, finish)
        )

    async def _complete_once(self, body: dict[str, Any]) -> tuple[Message, Usage, str]:
        answer = await self.poster().post("/chat/completions", body, self._where(body["model"]))
        try:
            choice = answer["choices"][0]
            reply = choice["message"]
            calls = [
                _tool_call(i, c.get("id"), c["function"]["name"], c["function"].get("arguments"))
                for i, c in enumerate(reply.get("tool_calls") or [])
                if c.get("type", "function") == "function"
            ]
        except (LookupError, TypeError, AttributeError) as exc:
            raise malformed(self._where(body["model"]), exc) from exc
        message = Message("assistant", reply.get("content") or "", tool_calls=calls)
        return message, _usage(answer.get("usage")), choice.get("finish_reason") or ""

    async def _complete_streaming(
        self, client: AsyncOpenAI, body: dict[str, Any], on_text: TextSink
    ) -> tuple[Message, Usage, str]:
        # The conversation and the tools go in `extra_body`, sent as they are, rather than
        # walked key by key against the SDK's TypedDicts (the empty `messages` only satisfies
        # the signature; extra_body's key replaces it).
        stream = await client.chat.completions.create(
            model=body["model"],
            messages=[],
            max_tokens=body["max_tokens"],
            extra_body={k: v for k, v in body.items() if k in ("messages", "tools")},
            stream=True,
            stream_options={"include_usage": True},
        )
        text: list[str] = []
        calls: dict[int, dict[str, Any]] = {}  # tool calls arrive as deltas keyed by index
        usage, finish = Usage(), ""
        async with stream:
            async for chunk in stream:
                if chunk.usage is not None:
                    usage = _usage(chunk.usage.model_dump())
                for choice in chunk.choices:
                    finish = choice.finish_reason or finish
                    delta = choice.delta
                    if delta.content:
                        text.append(delta.content)
                        await emit_text(on_text, delta.content)
                    for piece in delta.tool_calls or []:
                        slot = calls.setdefault(
                            piece.index, {"id": None, "name": "", "arguments": []}
                        )
                        slot["id"] = piece.id or slot["id"]
                        if piece.function is not None:
                            slot["name"] = slot["name"] or piece.function.name or ""
                            slot["arguments"].append(piece.function.arguments or "")
        tool_calls = [
            _tool_call(i, s["id"], s["name"], "".join(s["arguments"]))
            for i, s in sorted(calls.items())
        ]
        return Message("assistant", "".join(text), tool_calls=tool_calls), usage, finish

    def _translate(self, exc: Exception, model: str) -> ProviderCallError | None:
        """The SDK's exception → ProviderCallError, or None for one it does not know."""
        import httpx2
        import openai

        where = self._where(model)
        if isinstance(exc, openai.APIStatusError):
            return status_error(where, exc.status_code, exc.body, exc.response.headers)
        if isinstance(exc, openai.APIConnectionError | httpx2.TransportError):
            return transport_error(where, exc)
        if isinstance(exc, openai.APIResponseValidationError):
            return ProviderCallError(f"{where}: malformed answer: {exc}", retryable=False)
        if isinstance(exc, openai.APIError):  # an error event in the middle of a stream
            return ProviderCallError(
                f"{where}: the server reported an error: {exc.message}", retryable=True
            )
        return None
