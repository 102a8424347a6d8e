"""Provider-neutral messages, requests and responses, and the Provider protocol.

Messages follow the shape of OpenAI's Chat Completions (system/user/assistant/tool roles,
tool calls with JSON-string arguments) because it round-trips losslessly to both wire
formats; each provider module translates at its edge.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True)
class Image:
    """An image for a model that sees images: base64 data and its media type."""

    media_type: str  # image/png, image/jpeg, image/gif, image/webp
    data_b64: str


@dataclass(frozen=True)
class ToolCall:
    """One call the model asked for. `arguments` is the raw JSON text, kept raw so that
    malformed JSON can be answered to the model as an error instead of crashing the turn."""

    id: str
    name: str
    arguments: str


@dataclass
class Message:
    role: Role
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None  # for role == "tool"
    name: str | None = None  # the tool's name, for role == "tool"
    images: list[Image] = field(default_factory=list)
    # The store's row id, when the message came from a store; never sent to a provider.
    id: int | None = field(default=None, compare=False)
    # A stored final answer: the newest person's message its turn saw (the store's column of
    # that name); a person's message stored after it was sent while the turn ran.
    answers_upto: int | None = field(default=None, compare=False, repr=False)
    # Filled in by atlas.agent.tokens on first count; a Message is never changed after it is made.
    token_estimate: int | None = field(default=None, compare=False, repr=False)
    # Its tokenizer-free bound, by atlas.agent.tokens on first use: asked every model round for
    # every message of the history (until the exact count above is known).
    token_bound: int | None = field(default=None, compare=False, repr=False)
    # Its Chat Completions form, made by atlas.providers.openai on first use: a history kept
    # between turns is sent whole on every call.
    openai_form: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in self.tool_calls
            ]
        if self.tool_call_id:
            out["tool_call_id"] = self.tool_call_id
        if self.name:
            out["name"] = self.name
        if self.images:
            out["images"] = [
                {"media_type": i.media_type, "data_b64": i.data_b64} for i in self.images
            ]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Message:
        return cls(
            role=data["role"],
            content=data.get("content") or "",
            tool_calls=[ToolCall(**c) for c in data.get("tool_calls") or []],
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name"),
            images=[Image(**i) for i in data.get("images") or []],
        )


@dataclass(frozen=True)
class ToolSpec:
    """What the model is told about one tool: name, description, JSON schema of arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def to_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
        }


@dataclass
class CompletionRequest:
    model: str  # the provider's own model name, without the "provider/" prefix
    system: str
    messages: list[Message]
    tools: list[ToolSpec] = field(default_factory=list)
    max_tokens: int = 4096


@dataclass
class CompletionResponse:
    message: Message  # role "assistant", text and/or tool calls
    usage: Usage
    model: str  # "provider/model" that actually answered (a fallback may have)
    stop_reason: str = ""


# Called with each piece of text as it streams in; providers stream only when one is given.
TextSink = Callable[[str], Awaitable[None] | None]


class Provider(Protocol):
    """One model endpoint. Implementations raise `ProviderCallError` on failure."""

    name: str
    supports_images: bool

    async def complete(
        self, request: CompletionRequest, on_text: TextSink | None = None
    ) -> CompletionResponse: ...

    async def close(self) -> None: ...


class ProviderCallError(Exception):
    """One failed call. `retryable` says whether backing off and trying again can help;
    `retry_after` is the server's own wait in seconds, when it gave one."""

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        retry_after: float | None = None,
        status: int | None = None,
        context_overflow: bool = False,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after
        self.status = status
        self.context_overflow = context_overflow  # the prompt is longer than the model's window


class ModelClient(Protocol):
    """What the tool loop talks to: "provider/model" names, retries and fallback inside.
    Implemented by `providers.router.ModelRouter` and, in tests, `ScriptedModel`."""

    def supports_images(self, model: str) -> bool: ...

    async def complete(
        self,
        request: CompletionRequest,  # request.model is "provider/model"
        *,
        fallback: str | None = None,
        on_text: TextSink | None = None,
    ) -> CompletionResponse: ...
