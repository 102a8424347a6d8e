"""The providers through the real SDKs against fake servers on loopback, and the router's retries."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

from atlas.config import LimitSettings, ProviderSettings, Settings
from atlas.errors import ProviderError
from atlas.providers.anthropic import AnthropicProvider
from atlas.providers.base import (
    CompletionRequest,
    CompletionResponse,
    Image,
    Message,
    ProviderCallError,
    ToolCall,
    ToolSpec,
    Usage,
)
from atlas.providers.openai import OpenAIProvider, to_openai_messages
from atlas.providers.router import ModelRouter
from atlas.providers.wire import parse_retry_after
from tests.fakes.model_servers import FakeAnthropicServer, FakeModelServer, FakeOpenAIServer, pieces

PNG = Image("image/png", "iVBORw0KGgo=")
READ_FILE = ToolSpec(
    "read_file", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}}
)
LIST_DIR = ToolSpec("list_dir", "List a folder.", {"type": "object", "properties": {}})


class RecordingSleep:
    """Stands in for asyncio.sleep: records each wait and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def provider_settings(server: FakeModelServer, **overrides: Any) -> ProviderSettings:
    kind = "anthropic" if isinstance(server, FakeAnthropicServer) else "openai"
    values: dict[str, Any] = {
        "kind": kind,
        "base_url": server.base_url,
        "max_retries": 0,
        "timeout": 5.0,
    }
    return ProviderSettings(**(values | overrides))


# Providers and routers a test made, closed after it (aiohttp warns of a session left open).
_MADE: list[OpenAIProvider | AnthropicProvider | ModelRouter] = []


@pytest.fixture(autouse=True)
async def _close_what_tests_made() -> AsyncIterator[None]:
    yield
    while _MADE:
        await _MADE.pop().close()


def make_provider(server: FakeModelServer, **overrides: Any) -> OpenAIProvider | AnthropicProvider:
    settings = provider_settings(server, **overrides)
    cls = AnthropicProvider if settings.kind == "anthropic" else OpenAIProvider
    provider = cls("fake", settings)
    _MADE.append(provider)
    return provider


def make_router(settings: Any, **options: Any) -> ModelRouter:
    router = ModelRouter(settings, **options)
    _MADE.append(router)
    return router


def request(
    *messages: Message, model: str = "test-model", tools: list[ToolSpec] | None = None
) -> CompletionRequest:
    return CompletionRequest(
        model=model,
        system="You are a test.",
        messages=list(messages) or [Message("user", "hello")],
        tools=tools if tools is not None else [READ_FILE, LIST_DIR],
    )


@pytest.fixture(params=["openai", "anthropic"])
async def server(request: pytest.FixtureRequest) -> AsyncIterator[FakeModelServer]:
    fake = FakeOpenAIServer() if request.param == "openai" else FakeAnthropicServer()
    async with fake:
        yield fake


# Both providers: the same behaviour through each wire format.


async def test_text_answer(server: FakeModelServer) -> None:
    server.reply(text="Hello there.")
    response = await make_provider(server).complete(request())
    assert response.message.role == "assistant"
    assert response.message.content == "Hello there."
    assert response.message.tool_calls == []
    assert response.model == "fake/test-model"
    assert response.stop_reason == "end_turn"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (10, 5)
    assert server.requests[0]["model"] == "test-model"
    assert "stream" not in server.requests[0]
    server.assert_complete()


async def test_tool_call_arguments_round_trip(server: FakeModelServer) -> None:
    args = {"path": "notes/ünïcode.txt", "lines": [1, 2], "deep": {"x": None}}
    server.reply(text="Looking.", calls=[("read_file", args), ("list_dir", {})])
    response = await make_provider(server).complete(request())
    calls = response.message.tool_calls
    assert [c.name for c in calls] == ["read_file", "list_dir"]
    assert json.loads(calls[0].arguments) == args
    assert json.loads(calls[1].arguments) == {}
    assert all(c.id for c in calls) and calls[0].id != calls[1].id
    assert response.message.content == "Looking."
    assert response.stop_reason == "tool_use"


async def test_streaming_text_reaches_the_sink_in_order(server: FakeModelServer) -> None:
    text = "The quick brown fox jumps over the lazy dog."
    server.reply(text=text)
    received: list[str] = []

    async def sink(piece: str) -> None:
        received.append(piece)

    response = await make_provider(server).complete(request(), on_text=sink)
    assert received == pieces(text) and len(received) > 1
    assert response.message.content == text
    assert server.requests[0]["stream"] is True
    assert (response.usage.input_tokens, response.usage.output_tokens) == (10, 5)


async def test_streaming_tool_calls_are_assembled(server: FakeModelServer) -> None:
    server.reply(
        calls=[("read_file", {"path": "a/long/path/to/a/file.txt"}), ("list_dir", {"depth": 2})]
    )
    received: list[str] = []
    response = await make_provider(server).complete(
        request(), on_text=received.append
    )  # a plain sink
    calls = response.message.tool_calls
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("read_file", {"path": "a/long/path/to/a/file.txt"}),
        ("list_dir", {"depth": 2}),
    ]
    assert received == []
    assert response.stop_reason == "tool_use"


async def test_missing_api_key_env_names_the_variable(server: FakeModelServer) -> None:
    provider = make_provider(server, api_key_env="FAKE_PROVIDER_API_KEY")
    with pytest.raises(ProviderCallError) as caught:
        await provider.complete(request())
    assert not caught.value.retryable
    assert "set the environment variable FAKE_PROVIDER_API_KEY" in str(caught.value)
    assert "[providers.fake] api_key_env" in str(caught.value)
    assert server.requests == []


async def test_api_key_from_env_is_sent(
    server: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_PROVIDER_API_KEY", "sk-test-123")
    server.reply(text="ok")
    await make_provider(server, api_key_env="FAKE_PROVIDER_API_KEY").complete(request())
    headers = {k.lower(): v for k, v in server.request_headers[0].items()}
    assert "sk-test-123" in (headers.get("authorization", "") + headers.get("x-api-key", ""))


async def test_client_error_is_not_retryable_and_carries_the_server_message(
    server: FakeModelServer,
) -> None:
    server.fail(
        400, body={"error": {"type": "invalid_request_error", "message": "max_tokens is too large"}}
    )
    with pytest.raises(ProviderCallError) as caught:
        await make_provider(server).complete(request())
    assert not caught.value.retryable
    assert caught.value.status == 400
    assert "HTTP 400" in str(caught.value) and "max_tokens is too large" in str(caught.value)


async def test_empty_script_answers_500_and_counts_it(server: FakeModelServer) -> None:
    with pytest.raises(ProviderCallError) as caught:
        await make_provider(server).complete(request())
    assert caught.value.retryable
    assert "script ran out" in str(caught.value)
    assert server.overruns == 1


# Headers the SDK writes per request kind or per connection, not per client.
NOT_THE_CLIENTS = {"content-length", "connection", "x-stainless-timeout"}


async def test_a_whole_answer_is_asked_for_with_the_sdks_own_url_and_headers(
    server: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The non-streaming call skips the SDK's request path (wire.JsonPoster) but
    must send what the SDK's own `client.post` sends: an SDK upgrade that adds a header
    (a version, the key in a new form) fails here."""
    monkeypatch.setenv("FAKE_PROVIDER_API_KEY", "sk-test-123")
    server.reply(text="direct")
    server.reply(text="through the SDK")
    provider = make_provider(server, api_key_env="FAKE_PROVIDER_API_KEY")
    assert (await provider.complete(request())).message.content == "direct"
    path = "/v1/messages" if isinstance(server, FakeAnthropicServer) else "/chat/completions"
    await provider._get_client().post(
        path, cast_to=bytes, content=json.dumps(server.requests[0]).encode()
    )
    direct, sdk = (
        {k.lower(): v for k, v in headers.items() if k.lower() not in NOT_THE_CLIENTS}
        for headers in server.request_headers
    )
    assert direct == sdk
    assert "sk-test-123" in direct["authorization"]
    assert server.requests[0] == server.requests[1]


async def test_a_refused_connection_is_a_retryable_connection_failure() -> None:
    with socket.socket() as probe:  # a port nobody listens on once it is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = ProviderSettings(kind="openai", base_url=f"http://127.0.0.1:{port}/v1", timeout=5)
    provider = OpenAIProvider("fake", settings)
    _MADE.append(provider)
    with pytest.raises(ProviderCallError) as caught:
        await provider.complete(request())
    assert caught.value.retryable
    assert "connection failed" in str(caught.value) and "timed out" not in str(caught.value)


# OpenAI: translation and usage.


def history() -> list[Message]:
    """A conversation with an image from the user, two tool calls, and a tool result with an image."""
    return [
        Message("user", "What is in this picture?", images=[PNG]),
        Message(
            "assistant",
            "Let me look.",
            tool_calls=[
                ToolCall("call_a", "read_file", '{"path": "a.png"}'),
                ToolCall("call_b", "list_dir", "not json"),
            ],
        ),
        Message(
            "tool", "a picture of a cat", tool_call_id="call_a", name="read_file", images=[PNG]
        ),
        Message("tool", "a.png b.png", tool_call_id="call_b", name="list_dir"),
        Message("user", "And now?"),
    ]


async def test_openai_translates_history_with_tool_results_and_images() -> None:
    async with FakeOpenAIServer() as server:
        server.reply(text="A cat.")
        await make_provider(server).complete(request(*history()))
    sent = server.requests[0]["messages"]
    assert [m["role"] for m in sent] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "user",
        "user",
    ]
    assert sent[0]["content"] == "You are a test."
    assert sent[1]["content"][0] == {"type": "text", "text": "What is in this picture?"}
    assert sent[1]["content"][1]["image_url"]["url"] == "data:image/png;base64,iVBORw0KGgo="
    assert sent[2]["tool_calls"][0] == {
        "id": "call_a",
        "type": "function",
        "function": {"name": "read_file", "arguments": '{"path": "a.png"}'},
    }
    assert (
        sent[2]["tool_calls"][1]["function"]["arguments"] == "not json"
    )  # raw, as the model wrote it
    assert sent[3] == {"role": "tool", "tool_call_id": "call_a", "content": "a picture of a cat"}
    assert sent[4]["tool_call_id"] == "call_b"
    image_parts = [p for p in sent[5]["content"] if p["type"] == "image_url"]
    assert [p["image_url"]["url"] for p in image_parts] == ["data:image/png;base64,iVBORw0KGgo="]
    assert "read_file" in sent[5]["content"][0]["text"]
    assert sent[6] == {"role": "user", "content": "And now?"}
    tools = server.requests[0]["tools"]
    assert tools[0] == {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": READ_FILE.parameters,
        },
    }


def test_openai_form_of_a_message_is_made_once_and_sent_again() -> None:
    """A history kept between turns is sent whole on every call: each message's form is
    made on its first call and reused, and the body is the same as if made afresh."""
    messages = history()
    first = to_openai_messages("You are a test.", messages)
    later = to_openai_messages("You are a test.", [*messages, Message("user", "More?")])
    assert later[: len(first)] == first
    assert later[2] is first[2] and later[3] is first[3]  # the assistant's, a tool's: reused
    fresh = to_openai_messages("You are a test.", history())
    assert fresh == first and fresh[2] is not first[2]


async def test_openai_usage_with_cached_tokens() -> None:
    usage = {
        "prompt_tokens": 1200,
        "completion_tokens": 30,
        "total_tokens": 1230,
        "prompt_tokens_details": {"cached_tokens": 1024},
    }
    async with FakeOpenAIServer() as server:
        server.reply(text="ok", usage=usage)
        server.reply(text="ok", usage=usage)
        provider = make_provider(server)
        plain = await provider.complete(request())
        streamed = await provider.complete(request(), on_text=lambda _: None)
    for response in (plain, streamed):
        assert response.usage.to_dict() == {
            "input_tokens": 1200,
            "output_tokens": 30,
            "cache_read_tokens": 1024,
            "cache_write_tokens": 0,
        }
    assert server.requests[1]["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(
    ("kind", "body", "says"),
    [
        ("openai", {"id": "x", "choices": []}, "held no choices"),
        ("openai", {"id": "x"}, "is malformed"),
        ("openai", "<html>gateway</html>", "is not JSON"),
        ("anthropic", {"id": "x", "type": "message"}, "is malformed"),
        ("anthropic", {"content": [{"type": "text"}], "usage": {}}, "is malformed"),
        ("anthropic", "<html>gateway</html>", "is not JSON"),
    ],
)
async def test_a_malformed_answer_is_a_retryable_error_naming_the_model(
    kind: str, body: dict[str, Any] | str, says: str
) -> None:
    fake = FakeOpenAIServer() if kind == "openai" else FakeAnthropicServer()
    async with fake as server:
        server.answer_raw(body)
        with pytest.raises(ProviderCallError) as caught:
            await make_provider(server).complete(request())
    assert caught.value.retryable
    assert "model 'test-model'" in str(caught.value)
    assert says in str(caught.value)


async def test_openai_fake_lists_models() -> None:
    from openai import AsyncOpenAI

    async with FakeOpenAIServer(models=("a", "b")) as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        listed = [m.id async for m in client.models.list()]
    assert listed == ["a", "b"]


# Anthropic: translation, prompt caching and usage.


async def test_anthropic_translates_history_and_marks_cache_breakpoints() -> None:
    async with FakeAnthropicServer() as server:
        server.reply(text="A cat.")
        await make_provider(server).complete(request(*history()))
    body = server.requests[0]
    assert body["system"] == [
        {"type": "text", "text": "You are a test.", "cache_control": {"type": "ephemeral"}}
    ]
    assert "cache_control" not in body["tools"][0]
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert body["tools"][0]["input_schema"] == READ_FILE.parameters
    sent = body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user", "user"]
    assert sent[0]["content"][1]["source"] == {
        "type": "base64",
        "media_type": "image/png",
        "data": "iVBORw0KGgo=",
    }
    assert sent[1]["content"][1:] == [
        {"type": "tool_use", "id": "call_a", "name": "read_file", "input": {"path": "a.png"}},
        {"type": "tool_use", "id": "call_b", "name": "list_dir", "input": {}},  # invalid JSON → {}
    ]
    results = sent[2]["content"]  # both tool results in one user turn
    assert [r["tool_use_id"] for r in results] == ["call_a", "call_b"]
    assert results[0]["content"][0] == {"type": "text", "text": "a picture of a cat"}
    assert results[0]["content"][1]["type"] == "image"
    assert sent[3]["content"] == [
        {"type": "text", "text": "And now?", "cache_control": {"type": "ephemeral"}}
    ]
    cached = [b for m in sent for b in m["content"] if "cache_control" in b]
    assert len(cached) == 1  # three breakpoints in all: tools, system, last block


async def test_anthropic_usage_counts_cache_reads_and_writes() -> None:
    usage = {
        "input_tokens": 50,
        "output_tokens": 20,
        "cache_read_input_tokens": 900,
        "cache_creation_input_tokens": 100,
    }
    async with FakeAnthropicServer() as server:
        server.reply(text="ok", usage=usage)
        server.reply(text="ok", usage=usage)
        provider = make_provider(server)
        plain = await provider.complete(request())
        streamed = await provider.complete(request(), on_text=lambda _: None)
    for response in (plain, streamed):
        assert response.usage.to_dict() == {
            "input_tokens": 1050,
            "output_tokens": 20,
            "cache_read_tokens": 900,
            "cache_write_tokens": 100,
        }


# The router: retries, backoff, fallback.


def router_settings(*servers: FakeModelServer, retries: int = 0, timeout: float = 5.0) -> Settings:
    providers = {
        f"p{i}": provider_settings(s, max_retries=retries, timeout=timeout, supports_images=i == 0)
        for i, s in enumerate(servers)
    }
    limits = LimitSettings(retry_base_delay=0.01, retry_max_delay=5.0)
    return Settings(model="p0/test-model", providers=providers, limits=limits)


async def test_router_waits_as_retry_after_says_then_succeeds() -> None:
    sleep = RecordingSleep()
    async with FakeOpenAIServer() as server:
        server.fail(429, headers={"Retry-After": "2"})
        server.fail(429, headers={"retry-after-ms": "1500"})
        server.fail(429, headers={"Retry-After": "600"})  # capped at retry_max_delay
        server.reply(text="finally")
        router = make_router(router_settings(server, retries=3), sleep=sleep)
        response = await router.complete(request(model="p0/test-model"))
    assert response.message.content == "finally"
    assert response.model == "p0/test-model"
    assert sleep.delays == [2.0, 1.5, 5.0]
    assert [r["model"] for r in server.requests] == ["test-model"] * 4


async def test_router_exhausts_retries_then_the_fallback_answers() -> None:
    sleep = RecordingSleep()
    async with FakeOpenAIServer() as primary, FakeAnthropicServer() as backup:
        for _ in range(3):
            primary.fail(500)
        backup.fail(529)  # Anthropic's "overloaded" is retried too
        backup.reply(text="from the fallback")
        router = make_router(
            router_settings(primary, backup, retries=2), sleep=sleep, rng=lambda: 0.5
        )
        response = await router.complete(request(model="p0/test-model"), fallback="p1/backup-model")
        primary.assert_complete()
        backup.assert_complete()
    assert response.message.content == "from the fallback"
    assert response.model == "p1/backup-model"
    assert backup.requests[0]["model"] == "backup-model"
    # full jitter with rng 0.5: half of 0.01 * 2**attempt, per model
    assert sleep.delays == pytest.approx([0.005, 0.01, 0.005])


async def test_router_raises_provider_error_naming_every_model_tried() -> None:
    async with FakeOpenAIServer() as primary, FakeOpenAIServer() as backup:
        primary.fail(503, body={"error": {"message": "primary is down"}})
        primary.fail(503, body={"error": {"message": "primary is still down"}})
        backup.fail(502, body={"error": {"message": "backup is down"}})
        backup.fail(502, body={"error": {"message": "backup is still down"}})
        router = make_router(router_settings(primary, backup, retries=1), sleep=RecordingSleep())
        with pytest.raises(ProviderError) as caught:
            await router.complete(request(model="p0/test-model"), fallback="p1/other-model")
    message = str(caught.value)
    assert "p0/test-model failed (2 attempts)" in message and "primary is still down" in message
    assert (
        "fallback p1/other-model failed (2 attempts)" in message
        and "backup is still down" in message
    )
    assert "config.toml" in message


async def test_router_skips_retries_on_a_client_error_but_still_falls_back() -> None:
    sleep = RecordingSleep()
    async with FakeOpenAIServer() as primary, FakeOpenAIServer() as backup:
        primary.fail(400, body={"error": {"message": "unknown parameter"}})
        backup.reply(text="fallback ok")
        router = make_router(router_settings(primary, backup, retries=3), sleep=sleep)
        response = await router.complete(request(model="p0/test-model"), fallback="p1/test-model")
    assert response.message.content == "fallback ok"
    assert len(primary.requests) == 1
    assert sleep.delays == []


async def test_router_reports_a_missing_api_key_without_retrying(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sleep = RecordingSleep()
    async with FakeAnthropicServer() as server:
        settings = Settings(
            model="claude/test-model",
            providers={
                "claude": provider_settings(server, api_key_env="MY_ANTHROPIC_KEY", max_retries=3)
            },
        )
        with pytest.raises(ProviderError) as caught:
            await make_router(settings, sleep=sleep).complete(request(model="claude/test-model"))
    assert "set the environment variable MY_ANTHROPIC_KEY" in str(caught.value)
    assert "[providers.claude]" in str(caught.value)
    assert sleep.delays == [] and server.requests == []


async def test_router_retries_a_request_that_hangs_past_the_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sleep = RecordingSleep()
    async with FakeOpenAIServer() as server:
        server.hang(5)
        server.reply(text="awake")
        router = make_router(router_settings(server, retries=1, timeout=0.3), sleep=sleep)
        response = await router.complete(request(model="p0/test-model"))
    assert response.message.content == "awake"
    assert len(sleep.delays) == 1
    assert len(server.requests) == 2
    assert "timed out" in caplog.text  # the client gave up; the fake did not answer


async def test_router_streams_through_the_provider() -> None:
    received: list[str] = []
    async with FakeAnthropicServer() as server:
        server.reply(text="streamed through the router")
        router = make_router(router_settings(server))
        response = await router.complete(request(model="p0/test-model"), on_text=received.append)
    assert "".join(received) == response.message.content == "streamed through the router"


async def test_router_makes_one_provider_per_name_and_knows_image_support() -> None:
    async with FakeOpenAIServer() as first, FakeAnthropicServer() as second:
        router = make_router(router_settings(first, second))
        assert router.provider("p0") is router.provider("p0")
        assert isinstance(router.provider("p1"), AnthropicProvider)
        assert router.supports_images("p0/anything") is True
        assert router.supports_images("p1/anything") is False


async def test_router_unknown_provider_in_fallback_is_reported() -> None:
    async with FakeOpenAIServer() as server:
        server.fail(401, body={"error": {"message": "bad key"}})
        router = make_router(router_settings(server))
        with pytest.raises(ProviderError) as caught:
            await router.complete(request(model="p0/test-model"), fallback="nowhere/model")
    assert "bad key" in str(caught.value)
    assert "nowhere/model could not be tried" in str(caught.value)
    assert "[providers.nowhere]" in str(caught.value)


# Retry-After parsing.


def test_parse_retry_after_forms() -> None:
    now = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
    in_ten = format_datetime(now + timedelta(seconds=10), usegmt=True)
    assert parse_retry_after({"retry-after": in_ten}, now=now) == 10.0
    assert parse_retry_after({"retry-after": "3"}) == 3.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


class BreaksMidStream:
    """A provider whose first answer dies after some text went out (a dropped stream)."""

    name = "p0"
    supports_images = False

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, request, on_text=None):  # type: ignore[no-untyped-def]
        self.calls += 1
        await on_text("Hello wor")
        if self.calls == 1:
            raise ProviderCallError("connection dropped", retryable=True)
        await on_text("ld")
        return CompletionResponse(Message("assistant", "Hello world"), Usage(), request.model)

    async def close(self) -> None:
        return None


async def test_router_tells_the_reader_when_a_broken_stream_starts_again() -> None:
    async with FakeOpenAIServer() as server:
        router = make_router(router_settings(server, retries=1), sleep=RecordingSleep())
        router._providers["p0"] = BreaksMidStream()
        received: list[str] = []
        response = await router.complete(request(model="p0/test-model"), on_text=received.append)
    assert response.message.content == "Hello world"
    assert "".join(received) == "Hello wor\n[the connection failed; answering again]\nHello world"
