"""The Chat page: a channel like the console one over the real dispatcher and tool loop (a
scripted model): a message is stored and answered, the reply streams to the tab's event
stream, /stop stops a turn, CSRF is required, and a secret never shows, even half-written."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient, TestServer

from atlas.dashboard.app import build_app
from atlas.dashboard.auth import Signer, issue_login_token, read_secret
from atlas.dashboard.context import Dashboard
from atlas.dispatch import Dispatcher
from atlas.home import Home
from atlas.providers.scripted import Reply, ScriptedModel
from atlas.runtime import Runtime
from atlas.tools.registry import ToolRegistry
from atlas.trust.gate import OpenGate
from tests.helpers import make_home

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


class HeldModel(ScriptedModel):
    """Streams each reply in two halves and waits for `release` after each: a test sees the
    reply half-written."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()

    async def complete(self, request, *, fallback=None, on_text=None):  # type: ignore[no-untyped-def]
        async def held(piece: str) -> None:
            assert on_text is not None
            await on_text(piece)  # type: ignore[misc]
            await self.release.wait()

        return await super().complete(request, fallback=fallback, on_text=held if on_text else None)


@dataclass
class ChatRig:
    home: Home
    model: HeldModel
    dispatcher: Dispatcher
    dashboard: Dashboard
    client: TestClient

    async def log_in(self) -> str:
        token = issue_login_token(self.home.root)
        await self.client.post("/login", data={"token": token}, allow_redirects=False)
        page = await self.client.get("/chat/atlas")
        return CSRF.search(await page.text()).group(1)  # type: ignore[union-attr]


@contextlib.asynccontextmanager
async def chat_rig(home_path: Path, registry: ToolRegistry | None = None) -> AsyncIterator[ChatRig]:
    """A home, its runtime and dispatcher (scripted model, open gate, `registry`'s tools or
    none), and the dashboard attached to them as `atlas run` does."""
    home = make_home(home_path)
    model = HeldModel()
    tools = registry or ToolRegistry([])
    runtime = Runtime(home, model=model, gate=OpenGate(), registry=tools)
    dispatcher = Dispatcher(runtime, {})
    dashboard = Dashboard(home, runtime.store, runtime.audit, Signer(read_secret(home.root)))
    dashboard.attach(dispatcher)
    client = TestClient(TestServer(build_app(dashboard), host="127.0.0.1"))
    await client.start_server()
    try:
        yield ChatRig(home, model, dispatcher, dashboard, client)
    finally:
        assert dashboard.chat is not None
        await dashboard.chat.stop()
        await client.close()
        await dispatcher.shutdown()
        await runtime.close()


@pytest.fixture
async def rig(home_path: Path) -> AsyncIterator[ChatRig]:
    async with chat_rig(home_path) as made:
        yield made


async def next_event(stream: ClientResponse) -> tuple[str, str]:
    """The next Chat event on the browser's `/events` stream: (part, HTML); the other pages'
    events and comments skipped."""
    name, data = "", []
    while True:
        raw = await asyncio.wait_for(stream.content.readline(), 10)
        assert raw, f"the /events stream ended (HTTP {stream.status})"  # EOF: never spin on it
        line = raw.decode().rstrip("\n")
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            data.append(line[6:])
        elif not line and name == "chat":
            said = json.loads("\n".join(data))
            assert said["bot"] == "atlas"
            return said["part"], said["html"]
        elif not line:
            name, data = "", []


async def test_a_message_is_answered_and_the_reply_streams(rig: ChatRig) -> None:
    csrf = await rig.log_in()
    stream = await rig.client.get("/events")
    assert stream.headers["Content-Type"] == "text/event-stream"
    rig.model.add(Reply("The zeppelin leaves at 14:05 from pier three."))
    refused = await rig.client.post("/chat/atlas", data={"text": "When?"})
    assert refused.status == 403  # without the CSRF token nothing is sent
    sent = await rig.client.post(
        "/chat/atlas", data={"text": "When?", "csrf": csrf}, headers={"HX-Request": "true"}
    )
    assert sent.status == 200 and 'id="chat-form"' in await sent.text()
    assert await next_event(stream) == ("message", await _message("user", "When?"))
    name, half = await next_event(stream)
    while "zeppelin" not in half:  # "typing" first, an empty reply
        name, half = await next_event(stream)
    assert name == "reply" and "The zeppelin leaves" in half and "14:05" not in half
    rig.model.release.set()
    name, final = await next_event(stream)
    while name != "message":
        name, final = await next_event(stream)
    assert "The zeppelin leaves at 14:05 from pier three." in final and "assistant" in final
    assert (await next_event(stream))[0] == "reply"  # cleared
    page = await (await rig.client.get("/chat/atlas")).text()
    assert "When?" in page and "pier three" in page  # stored: the next visit shows both
    found = await (await rig.client.get("/conversations?q=zeppelin")).text()
    assert "/conversations/atlas/" in found and "<mark>" in found  # searchable
    stream.close()


async def _message(role: str, text: str) -> str:
    from atlas.dashboard.render import environment

    template = environment().get_template("chat_message.html")
    return template.render(role=role, text=text, calls=())


async def test_stop_stops_the_running_turn(rig: ChatRig) -> None:
    csrf = await rig.log_in()
    never = asyncio.Event()
    rig.model.add(Reply("never said", wait_for=never))
    stream = await rig.client.get("/events")
    await rig.client.post("/chat/atlas", data={"text": "Think hard", "csrf": csrf})
    for _ in range(200):
        if rig.model.requests:
            break
        await asyncio.sleep(0.01)
    await rig.client.post("/chat/atlas", data={"text": "/stop", "csrf": csrf})
    said = []
    while "Stopped." not in "".join(said):
        said.append((await next_event(stream))[1])
    assert "never said" not in "".join(said)
    stream.close()


async def test_a_secret_in_a_reply_is_masked_and_never_half_shown(
    rig: ChatRig, monkeypatch: pytest.MonkeyPatch
) -> None:
    from atlas.dashboard.chat_channel import web_address

    secret = rig.dashboard.signer.secret_text  # the dashboard's own secret is always masked
    await rig.log_in()
    stream = await rig.client.get("/events")
    assert rig.dashboard.chat is not None
    address = web_address("atlas")
    await rig.dashboard.chat.stream(address, "the key is " + secret[:10])
    name, half = await next_event(stream)
    assert name == "reply" and "the key is" in half and secret[:10] not in half
    await rig.dashboard.chat.stream(address, secret[10:] + " ok")
    name, whole = await next_event(stream)
    assert "[secret]" in whole and secret not in whole
    stream.close()


async def test_a_tab_opened_mid_reply_sees_it_so_far(rig: ChatRig) -> None:
    from atlas.dashboard.chat_channel import web_address

    await rig.log_in()
    assert rig.dashboard.chat is not None
    await rig.dashboard.chat.stream(web_address("atlas"), "Half of the answer ")
    page = await (await rig.client.get("/chat/atlas")).text()
    draft = page[page.index('id="chat-reply"') :]
    assert "Half of the answer" in draft[: draft.index("</section>")]


async def test_without_a_dispatcher_the_chat_says_so_and_sends_nothing(home_path: Path) -> None:
    from tests.dashboard_rig import dashboard_rig

    async with dashboard_rig(home_path) as plain:
        csrf = await plain.log_in()
        page = await (await plain.client.get("/chat/atlas")).text()
        assert "needs the running daemon" in page and 'id="chat-form"' not in page
        sent = await plain.client.post("/chat/atlas", data={"text": "hi", "csrf": csrf})
        assert sent.status == 503
        missing = await plain.client.get("/chat/nobody")
        assert missing.status == 404


async def test_a_tab_opened_mid_turn_shows_its_calls_once_in_the_draft(rig: ChatRig) -> None:
    from atlas.dashboard.chat_channel import WEB_CHANNEL, WEB_CHAT, web_address
    from atlas.providers.base import Message, ToolCall

    await rig.log_in()
    assert rig.dashboard.chat is not None
    store = await rig.dashboard.open_store(rig.home.main_bot)
    chat = await store.conversation(WEB_CHANNEL, WEB_CHAT, bot="atlas")
    call = ToolCall("c1", "find_pier", '{"ship": "zeppelin"}')
    await store.append(chat.id, Message("user", "Where?"))
    await store.append(chat.id, Message("assistant", "", tool_calls=[call]))  # running
    await rig.dashboard.chat.show_tool_call(web_address("atlas"), call)
    page = await (await rig.client.get("/chat/atlas")).text()
    log = page[page.index('id="chat-log"') : page.index('id="chat-reply"')]
    draft = page[page.index('id="chat-reply"') : page.index("</section>")]
    assert "Where?" in log and "find_pier" not in log
    assert draft.count("find_pier") == 1 and "(running)" in draft
