"""A fake Telegram Bot API on 127.0.0.1 for tests: the real wire format, recorded calls, injected
updates, and injected faults: 429 with retry_after, a JSON 5xx, a refusal (400), a connection
dropped before or after the request was carried out, answers a proxy spoils (nginx's HTML 502
page, an empty body, truncated JSON; see tests/fakes/http_faults.py) and slow answers."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.http_faults import SPOILED_ANSWERS, carried_out, drop, spoiled_answer

TOKEN = "123456:TEST-token"
BOT_ID = 999
BOT_USERNAME = "atlas_test_bot"
# Fields aiogram sends JSON-encoded inside its form data.
JSON_FIELDS = {"reply_markup", "allowed_updates", "link_preview_options", "reply_parameters"}


@dataclass
class Fault:
    method: str
    # "429" | "500" | "400" (Telegram refuses: e.g. a chat it does not know)
    # | "drop" (alias "drop_before": closed before the API saw the request)
    # | "drop_after" (carried out, then closed without an answer)
    # | "html502" | "empty" | "truncated" (a spoiled answer; see tests/fakes/http_faults.py)
    # | "slow" (answered normally after `delay` seconds)
    kind: str
    retry_after: int = 1
    status: int | None = None  # of a spoiled answer: 2xx means the request was carried out
    delay: float = 0.0


@dataclass
class FakeTelegram:
    token: str = TOKEN
    updates: list[dict[str, Any]] = field(default_factory=list)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    messages: dict[int, dict[str, Any]] = field(default_factory=dict)  # what the bot sent, by id
    files: dict[str, tuple[str, bytes]] = field(default_factory=dict)  # file_id -> (path, bytes)
    faults: list[Fault] = field(default_factory=list)
    base_url: str = ""

    def __post_init__(self) -> None:
        self._update_ids = itertools.count(1)
        self._message_ids = itertools.count(1000)
        self._new_update = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self._history: list[dict[str, Any]] = []  # every update handed out
        self._stopping = False
        self._holds: dict[str, list[asyncio.Event]] = {}  # method -> its next calls' gates

    # ------------------------------------------------------------ lifecycle

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post(f"/bot{self.token}/{{method}}", self._api)
        app.router.add_get(f"/file/bot{self.token}/{{path:.+}}", self._file)

    async def start(self) -> str:
        app = web.Application()
        self.add_routes(app)
        self._runner, self.base_url = await serve_app(app)
        return self.base_url

    async def stop(self) -> None:
        async with self._new_update:  # a waiting getUpdates answers now, not at its timeout
            self._stopping = True
            self._new_update.notify_all()
        if self._runner:
            await self._runner.cleanup()

    # ------------------------------------------------------------ what tests inject

    async def push(self, update: dict[str, Any]) -> int:
        """Queue an update (its update_id is assigned unless given); wake a waiting getUpdates."""
        update.setdefault("update_id", next(self._update_ids))
        async with self._new_update:
            self.updates.append(update)
            self._new_update.notify_all()
        return update["update_id"]

    async def push_again(self, update_id: int) -> None:
        """Deliver an update a second time, as Telegram does after a lost confirmation."""
        original = next(u for u in self._history if u["update_id"] == update_id)
        async with self._new_update:
            self.updates.append({**json.loads(json.dumps(original)), "_again": True})
            self._new_update.notify_all()

    def message(
        self,
        text: str = "",
        *,
        user_id: int = 1,
        first_name: str = "Ann",
        chat_id: int | None = None,
        chat_type: str = "private",
        thread_id: int | None = None,
        reply_to_bot: bool = False,
        entities: list[dict[str, Any]] | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """A `message` update as Telegram would send it."""
        chat: dict[str, Any] = {"id": chat_id if chat_id is not None else user_id}
        chat["type"] = chat_type
        if chat_type == "private":
            chat["first_name"] = first_name
        else:
            chat["title"] = "A group"
            chat["is_forum"] = thread_id is not None
        message: dict[str, Any] = {
            "message_id": next(self._message_ids),
            "date": 1_700_000_000,
            "chat": chat,
            "from": {"id": user_id, "is_bot": False, "first_name": first_name},
        }
        if text:
            message["text"] = text
        if entities:
            message["entities"] = entities
        if thread_id is not None:
            message["message_thread_id"] = thread_id
            message["is_topic_message"] = True
        if reply_to_bot:
            message["reply_to_message"] = {
                "message_id": 1,
                "date": 1_700_000_000,
                "chat": chat,
                "from": {"id": BOT_ID, "is_bot": True, "first_name": "Atlas"},
                "text": "earlier",
            }
        message.update(extra)
        return {"message": message}

    def mention(self, text: str, **kwargs: Any) -> dict[str, Any]:
        """A group message that mentions the bot by @username."""
        full = f"@{BOT_USERNAME} {text}"
        entity = {"type": "mention", "offset": 0, "length": len(BOT_USERNAME) + 1}
        return self.message(full, entities=[entity], **kwargs)

    def add_file(self, data: bytes, path: str = "documents/file_0.pdf") -> str:
        file_id = f"file-{len(self.files) + 1}"
        self.files[file_id] = (path, data)
        return file_id

    def tap(self, message_id: int, data: str, *, user_id: int = 1) -> dict[str, Any]:
        """A `callback_query` update: someone tapped an inline button of a sent message."""
        sent = self.messages[message_id]
        return {
            "callback_query": {
                "id": f"cq-{next(self._update_ids)}",
                "from": {"id": user_id, "is_bot": False, "first_name": f"user{user_id}"},
                "chat_instance": "ci",
                "data": data,
                "message": {
                    "message_id": message_id,
                    "date": 1_700_000_000,
                    "chat": {"id": sent["chat_id"], "type": "private", "first_name": "Ann"},
                    "from": {"id": BOT_ID, "is_bot": True, "first_name": "Atlas"},
                    "text": sent["text"],
                },
            }
        }

    def fail_next(
        self,
        method: str,
        kind: str,
        *,
        retry_after: int = 1,
        times: int = 1,
        status: int | None = None,
        delay: float = 0.0,
    ) -> None:
        """The next `times` calls of `method` meet this fault (the kinds are listed at Fault)."""
        self.faults.extend(Fault(method, kind, retry_after, status, delay) for _ in range(times))

    def hold(self, method: str) -> asyncio.Event:
        """The next call of `method` is carried out (recorded, sent), then its answer waits
        until the test sets the returned event: a call in flight, to act during."""
        gate = asyncio.Event()
        self._holds.setdefault(method, []).append(gate)
        return gate

    # ------------------------------------------------------------ what tests read

    def calls_to(self, method: str) -> list[dict[str, Any]]:
        return [params for name, params in self.calls if name == method]

    def sent_texts(self, chat_id: int | None = None) -> list[str]:
        return [
            m["text"] for m in self.messages.values() if chat_id is None or m["chat_id"] == chat_id
        ]

    def confirmed(self, update_id: int) -> bool:
        """The bot asked for updates past this one: it has handled it."""
        return any(int(p.get("offset") or 0) > update_id for p in self.calls_to("getUpdates"))

    async def wait_for(self, predicate: Any, timeout: float = 20.0) -> None:
        async with asyncio.timeout(timeout):
            # Polls state other tasks change; simpler than an event per kind of record.
            while not predicate():  # noqa: ASYNC110
                await asyncio.sleep(0.01)

    # ------------------------------------------------------------ the API

    async def _params(self, request: web.Request) -> dict[str, Any]:
        if request.content_type == "application/json":
            return await request.json()
        form = await request.post()
        params: dict[str, Any] = {}
        for key, value in form.items():
            if isinstance(value, web.FileField):
                params[key] = {"filename": value.filename, "data": value.file.read()}
            elif key in JSON_FIELDS:
                params[key] = json.loads(value)
            else:
                params[key] = value
        # aiogram names an upload `attach://<part>` and sends its bytes as that form part.
        for key, value in list(params.items()):
            if isinstance(value, str) and value.startswith("attach://"):
                params[key] = params.pop(value.removeprefix("attach://"), value)
        return params

    def _fault_for(self, method: str) -> Fault | None:
        for fault in self.faults:
            if fault.method == method:
                self.faults.remove(fault)
                return fault
        return None

    async def _api(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        params = await self._params(request)
        fault = self._fault_for(method)
        if fault and fault.kind in ("drop", "drop_before"):
            # The request never arrives as far as the API is concerned: no record, no reply.
            assert request.transport is not None
            request.transport.close()
            return web.Response()
        if fault and fault.kind == "slow":
            await asyncio.sleep(fault.delay)
            fault = None
        spoiled = fault.kind if fault and fault.kind in (*SPOILED_ANSWERS, "drop_after") else ""
        if fault and spoiled and not carried_out(spoiled, fault.status):
            return spoiled_answer(spoiled, fault.status, None)  # nginx never reached the API
        if fault and fault.kind == "429":
            return _error(429, "Too Many Requests", {"retry_after": fault.retry_after})
        if fault and fault.kind == "400":
            return _error(400, "Bad Request: chat not found")
        if fault and not spoiled:
            return _error(500, "Internal Server Error")
        self.calls.append((method, params))
        handler = getattr(self, f"_m_{method}", None)
        answer = _ok(True) if handler is None else await handler(params)
        if gates := self._holds.get(method):
            await gates.pop(0).wait()
        if fault and spoiled == "drop_after":
            return drop(request)  # carried out, but the bot never hears so
        if fault and spoiled:
            return spoiled_answer(spoiled, fault.status, answer)
        return answer

    async def _m_getMe(self, params: dict[str, Any]) -> web.Response:
        return _ok({"id": BOT_ID, "is_bot": True, "first_name": "Atlas", "username": BOT_USERNAME})

    async def _m_getUpdates(self, params: dict[str, Any]) -> web.Response:
        offset = int(params.get("offset") or 0)
        timeout = float(params.get("timeout") or 0)

        def ready() -> list[dict[str, Any]]:
            # Below the offset is confirmed, except a re-delivery a test forces.
            return [u for u in self.updates if u["update_id"] >= offset or u.get("_again")]

        async with self._new_update:
            # As Telegram does: an update stays until a later offset confirms it, so one whose
            # answer was lost is handed out again; a forced re-delivery goes once.
            self.updates = [u for u in self.updates if u["update_id"] >= offset or u.get("_again")]
            if not ready() and timeout:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):  # no task per poll, as wait_for makes
                        await self._new_update.wait_for(lambda: bool(ready()) or self._stopping)
            handed = ready()
            self.updates = [u for u in self.updates if not (u.get("_again") and u in handed)]
        clean = [{k: v for k, v in u.items() if k != "_again"} for u in handed]
        self._history.extend(clean)
        return _ok(clean)

    def _record_message(self, params: dict[str, Any], **fields: Any) -> dict[str, Any]:
        message_id = next(self._message_ids)
        chat_id = int(params["chat_id"])
        self.messages[message_id] = {"chat_id": chat_id, "params": params, **fields}
        return {
            "message_id": message_id,
            "date": 1_700_000_000,
            "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "supergroup"},
            "from": {"id": BOT_ID, "is_bot": True, "first_name": "Atlas"},
            **({"text": fields["text"]} if "text" in fields else {}),
        }

    async def _m_sendMessage(self, params: dict[str, Any]) -> web.Response:
        text = params["text"]
        if params.get("parse_mode") == "HTML" and not _balanced(text):
            return _error(400, "Bad Request: can't parse entities: unclosed tag")
        return _ok(self._record_message(params, text=text))

    async def _m_sendDocument(self, params: dict[str, Any]) -> web.Response:
        return _ok(self._record_message(params, text="", document=params.get("document")))

    async def _m_editMessageText(self, params: dict[str, Any]) -> web.Response:
        message_id = int(params["message_id"])
        message = self.messages[message_id]
        current = message.get("edited") or message["params"]
        if (params["text"], params.get("reply_markup")) == (
            message["text"],
            current.get("reply_markup"),
        ):  # as Telegram answers an edit made twice
            return _error(400, "Bad Request: message is not modified")
        self.messages[message_id]["text"] = params["text"]
        self.messages[message_id]["edited"] = params
        return _ok(True)

    async def _m_getFile(self, params: dict[str, Any]) -> web.Response:
        file_id = params["file_id"]
        if file_id not in self.files:
            return _error(400, "Bad Request: invalid file_id")
        path, data = self.files[file_id]
        return _ok(
            {
                "file_id": file_id,
                "file_unique_id": file_id,
                "file_size": len(data),
                "file_path": path,
            }
        )

    async def _file(self, request: web.Request) -> web.Response:
        path = request.match_info["path"]
        for stored_path, data in self.files.values():
            if stored_path == path:
                return web.Response(body=data)
        return web.Response(status=404)


def _ok(result: Any) -> web.Response:
    return web.json_response({"ok": True, "result": result})


def _error(status: int, description: str, parameters: dict[str, Any] | None = None) -> web.Response:
    body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    if parameters:
        body["parameters"] = parameters
    return web.json_response(body, status=status)


def _balanced(html: str) -> bool:
    """A rough check of Telegram's parser: every opened tag is closed in order."""
    import re

    stack: list[str] = []
    for closing, name in re.findall(r"<(/?)([a-z-]+)[^>]*>", html):
        if not closing:
            stack.append(name)
        elif not stack or stack.pop() != name:
            return False
    return not stack


async def serve_app(app: web.Application) -> tuple[web.AppRunner, str]:
    """`app` on a free port of 127.0.0.1: its runner and base URL."""
    runner = web.AppRunner(app, shutdown_timeout=0.5, access_log=None)  # no line per request
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


@dataclass
class SharedBotAPI:
    """Several fake bots behind one address, told apart by token, as Telegram serves every
    bot from api.telegram.org."""

    fakes: list[FakeTelegram]
    base_url: str = ""
    _runner: web.AppRunner | None = None

    async def start(self) -> str:
        app = web.Application()
        for fake in self.fakes:
            fake.add_routes(app)
        self._runner, self.base_url = await serve_app(app)
        for fake in self.fakes:
            fake.base_url = self.base_url
        return self.base_url

    async def stop(self) -> None:
        for fake in self.fakes:
            await fake.stop()  # wakes its waiting getUpdates; it has no server of its own
        if self._runner:
            await self._runner.cleanup()
