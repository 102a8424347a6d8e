"""A fake Slack on 127.0.0.1: the Web API methods Atlas uses and a Socket Mode websocket.

The real slack-bolt / slack_sdk code talks to it: `AsyncWebClient(base_url=fake.api_url)` and
`apps.connections.open` hands out this server's websocket URL. Tests push Events API and
interactive envelopes, check that each is acknowledged, inject faults (429, a 5xx, a connection
dropped before or after the call was carried out, and answers a proxy spoils: nginx's HTML 502
page, an empty body, truncated JSON; see tests/fakes/http_faults.py), and read what was called.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import WSMsgType, web

from tests.fakes.http_faults import SPOILED_ANSWERS, carried_out, drop, spoiled_answer

Failure = Literal[
    "429", "500", "drop_before", "drop_after", "html502", "empty", "truncated", "missing_scope"
]

BOT_USER_ID = "UBOT"
BOT_ID = "BBOT"
TEAM_ID = "T0001"


@dataclass
class Posted:
    """A message the bot posted (and its edits)."""

    channel: str
    ts: str
    text: str
    thread_ts: str | None = None
    blocks: list[dict[str, Any]] | None = None
    metadata: dict[str, Any] | None = None
    edits: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Shared:
    """A file the bot uploaded and shared (files.completeUploadExternal)."""

    file_id: str
    channel: str
    thread_ts: str | None
    name: str
    title: str
    data: bytes


@dataclass
class Call:
    method: str
    params: dict[str, Any]


class FakeSlack:
    """Start with `await fake.start()`; `api_url` ends in `/api/` as AsyncWebClient wants."""

    def __init__(self, *, bot_token: str = "xoxb-test", app_token: str = "xapp-test") -> None:
        self.bot_token = bot_token
        self.app_token = app_token
        self.calls: list[Call] = []
        self.posted: list[Posted] = []
        self.ephemeral: list[dict[str, Any]] = []
        self.files: dict[str, tuple[dict[str, Any], bytes]] = {}
        # file id -> (filename, declared length, bytes once uploaded) of the bot's uploads
        self.uploads: dict[str, tuple[str, int, bytes | None]] = {}
        self.shared: list[Shared] = []
        self.acks: dict[str, dict[str, Any]] = {}
        self.connections = 0
        self.web_api_peers: set[Any] = (
            set()
        )  # (host, port) of each connection a Web API call came on
        # method -> (failure, Retry-After, status of a spoiled answer) for its next calls
        self._failures: dict[str, list[tuple[Failure, float, int | None]]] = {}
        self._holds: dict[str, list[asyncio.Event]] = {}  # method -> its next calls' gates
        self._ts = itertools.count(1)
        self._ids = itertools.count(1)
        self._socket: web.WebSocketResponse | None = None
        self._socket_ready = asyncio.Event()
        self._ack_events: dict[str, asyncio.Event] = {}
        self._runner: web.AppRunner | None = None
        self.port = 0

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/api/{method}", self._api)
        app.router.add_get("/link/", self._link)
        app.router.add_get("/files/{file_id}/{name}", self._download)
        app.router.add_post("/upload/{file_id}", self._upload)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def close(self) -> None:
        if self._socket is not None:
            await self._socket.close()
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/"

    # --- what tests script -----------------------------------------------------------------

    def fail(
        self,
        method: str,
        failure: Failure,
        *,
        times: int = 1,
        retry_after: float = 1,
        status: int | None = None,
    ) -> None:
        """The next `times` calls of `method` fail this way (a 429 carries Retry-After; a
        spoiled answer with a 2xx `status` is carried out first, see http_faults).
        `upload` is the POST of a file's bytes to the URL files.getUploadURLExternal gave."""
        self._failures.setdefault(method, []).extend([(failure, retry_after, status)] * times)

    def hold(self, method: str) -> asyncio.Event:
        """The next call of `method` is carried out (recorded, posted), then its answer waits
        until the test sets the returned event: a call in flight, to act during."""
        gate = asyncio.Event()
        self._holds.setdefault(method, []).append(gate)
        return gate

    def add_file(self, name: str, content: bytes, mimetype: str = "text/plain") -> dict[str, Any]:
        """A file a user shared; its url_private_download needs the bot token."""
        file_id = f"F{next(self._ids):04d}"
        info = {
            "id": file_id,
            "name": name,
            "title": name,
            "mimetype": mimetype,
            "size": len(content),
            "url_private": f"http://127.0.0.1:{self.port}/files/{file_id}/{name}",
            "url_private_download": f"http://127.0.0.1:{self.port}/files/{file_id}/{name}",
        }
        self.files[file_id] = (info, content)
        return info

    def next_ts(self) -> str:
        return f"1700000000.{next(self._ts):06d}"

    async def wait_connected(self, timeout: float = 20) -> None:
        await asyncio.wait_for(self._socket_ready.wait(), timeout)

    async def push_event(
        self, event: dict[str, Any], *, event_id: str | None = None, retry_attempt: int = 0
    ) -> str:
        """Send an Events API envelope over the socket; returns the envelope id."""
        event_id = event_id or f"Ev{next(self._ids):06d}"
        payload = {
            "token": "verification-token",
            "team_id": TEAM_ID,
            "api_app_id": "A0001",
            "event": event,
            "type": "event_callback",
            "event_id": event_id,
            "event_time": 1700000000,
            "authorizations": [
                {
                    "team_id": TEAM_ID,
                    "user_id": BOT_USER_ID,
                    "is_bot": True,
                    "is_enterprise_install": False,
                }
            ],
        }
        return await self._push("events_api", payload, retry_attempt=retry_attempt)

    async def push_interactive(self, payload: dict[str, Any]) -> str:
        return await self._push("interactive", payload)

    async def push_slash_command(
        self, command: str, *, user: str, channel: str, text: str = ""
    ) -> str:
        payload = {
            "command": command,
            "text": text,
            "user_id": user,
            "channel_id": channel,
            "team_id": TEAM_ID,
            "api_app_id": "A0001",
            "response_url": f"http://127.0.0.1:{self.port}/api/response_url",
            "trigger_id": "trigger",
        }
        return await self._push("slash_commands", payload)

    async def _push(self, kind: str, payload: dict[str, Any], *, retry_attempt: int = 0) -> str:
        await self.wait_connected()
        envelope_id = f"env-{next(self._ids)}"
        self._ack_events[envelope_id] = asyncio.Event()
        envelope = {
            "envelope_id": envelope_id,
            "type": kind,
            "payload": payload,
            "accepts_response_payload": kind != "events_api",
            "retry_attempt": retry_attempt,
            "retry_reason": "timeout" if retry_attempt else "",
        }
        assert self._socket is not None
        await self._socket.send_str(json.dumps(envelope))
        return envelope_id

    async def wait_ack(self, envelope_id: str, timeout: float = 20) -> dict[str, Any]:
        await asyncio.wait_for(self._ack_events[envelope_id].wait(), timeout)
        return self.acks[envelope_id]

    async def drop_socket(self) -> None:
        """Close the websocket as Slack does on a refresh; the client must reconnect."""
        self._socket_ready.clear()
        if self._socket is not None:
            await self._socket.close()

    def calls_of(self, method: str) -> list[dict[str, Any]]:
        return [call.params for call in self.calls if call.method == method]

    def replies(self, channel: str | None = None) -> list[Posted]:
        return [p for p in self.posted if channel is None or p.channel == channel]

    async def wait_for(self, predicate: Any, timeout: float = 20) -> None:
        """Poll until `predicate()` is true; fail after `timeout` seconds."""
        deadline = asyncio.get_running_loop().time() + timeout
        while not predicate():
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(
                    f"timed out waiting; calls so far: {[c.method for c in self.calls]}"
                )
            await asyncio.sleep(0.01)

    # --- the Web API -----------------------------------------------------------------------

    async def _api(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        if request.transport is not None:
            self.web_api_peers.add(request.transport.get_extra_info("peername"))
        params = await _params(request)
        token = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not token:
            token = str(params.get("token", ""))
        expected = self.app_token if method == "apps.connections.open" else self.bot_token
        if token != expected:
            return web.json_response({"ok": False, "error": "invalid_auth"})
        queued = self._failures.get(method)
        failure = queued.pop(0) if queued else None
        if failure and failure[0] == "429":
            self.calls.append(Call(method + " (429)", params))
            return web.json_response(
                {"ok": False, "error": "ratelimited"},
                status=429,
                headers={"Retry-After": str(failure[1])},
            )
        if failure and failure[0] == "500":
            self.calls.append(Call(method + " (500)", params))
            return web.Response(status=503, text="upstream unavailable", content_type="text/plain")
        if failure and failure[0] == "drop_before":
            self.calls.append(Call(method + " (dropped)", params))
            return drop(request)
        if failure and failure[0] == "missing_scope":  # the app was not granted what it needs
            self.calls.append(Call(method + " (missing_scope)", params))
            return web.json_response({"ok": False, "error": "missing_scope"})
        spoiled = failure[0] if failure and failure[0] in SPOILED_ANSWERS else ""
        if failure and spoiled and not carried_out(spoiled, failure[2]):
            self.calls.append(Call(f"{method} ({spoiled})", params))
            return spoiled_answer(spoiled, failure[2], None)  # nginx never reached the API
        self.calls.append(Call(method, params))
        answer = web.json_response(self._handle(method, params))
        if gates := self._holds.get(method):
            await gates.pop(0).wait()
        if failure and failure[0] == "drop_after":
            return drop(request)  # done, but the client never hears so
        if failure and spoiled:
            return spoiled_answer(spoiled, failure[2], answer)
        return answer

    def _handle(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "auth.test":
            return {
                "ok": True,
                "url": "https://fake.slack.com/",
                "team": "Fake",
                "user": "atlas",
                "team_id": TEAM_ID,
                "user_id": BOT_USER_ID,
                "bot_id": BOT_ID,
            }
        if method == "apps.connections.open":
            return {"ok": True, "url": f"ws://127.0.0.1:{self.port}/link/?ticket={next(self._ids)}"}
        if method == "chat.postMessage":
            return self._post(params)
        if method == "chat.update" and _too_long(params.get("blocks")):
            return {"ok": False, "error": "invalid_blocks"}
        if method == "chat.update":
            for posted in self.posted:
                if posted.channel == params.get("channel") and posted.ts == params.get("ts"):
                    posted.edits.append(params)
                    posted.text = str(params.get("text", posted.text))
                    posted.blocks = _json_field(params.get("blocks"))
                    return {"ok": True, "channel": posted.channel, "ts": posted.ts}
            return {"ok": False, "error": "message_not_found"}
        if method == "chat.postEphemeral":
            self.ephemeral.append(params)
            return {"ok": True, "message_ts": self.next_ts()}
        if method in ("reactions.add", "reactions.remove", "assistant.threads.setStatus"):
            return {"ok": True}
        if method == "files.info":
            file_id = str(params.get("file"))
            if file_id in self.uploads:
                return {"ok": True, "file": self._uploaded_info(file_id)}
            found = self.files.get(file_id)
            return (
                {"ok": True, "file": found[0]}
                if found
                else {"ok": False, "error": "file_not_found"}
            )
        if method == "files.getUploadURLExternal":
            return self._upload_url(params)
        if method == "files.completeUploadExternal":
            return self._complete_upload(params)
        if method in ("conversations.history", "conversations.replies"):
            return self._history(method, params)
        return {"ok": False, "error": "unknown_method"}

    def _post(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = str(params.get("channel", ""))
        if not channel:
            return {"ok": False, "error": "channel_not_found"}
        if _too_long(params.get("blocks")):
            return {"ok": False, "error": "invalid_blocks"}
        posted = Posted(
            channel=channel,
            ts=self.next_ts(),
            text=str(params.get("text", "")),
            thread_ts=params.get("thread_ts") or None,
            blocks=_json_field(params.get("blocks")),
            metadata=_json_field(params.get("metadata")),
        )
        self.posted.append(posted)
        return {
            "ok": True,
            "channel": channel,
            "ts": posted.ts,
            "message": {"text": posted.text, "ts": posted.ts, "user": BOT_USER_ID},
        }

    def _history(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        channel = params.get("channel")
        thread = params.get("ts")
        found = [
            p
            for p in self.posted
            if p.channel == channel and (method == "conversations.history" or p.thread_ts == thread)
        ]
        messages = [
            {"ts": p.ts, "text": p.text, "user": BOT_USER_ID, "thread_ts": p.thread_ts}
            | ({"metadata": p.metadata} if p.metadata else {})
            for p in reversed(found)
        ]
        return {"ok": True, "messages": messages, "has_more": False}

    def _upload_url(self, params: dict[str, Any]) -> dict[str, Any]:
        filename, length = params.get("filename"), params.get("length")
        if not filename or not str(length or "").isdigit():
            return {"ok": False, "error": "invalid_arguments"}
        file_id = f"F{next(self._ids):04d}"
        self.uploads[file_id] = (str(filename), int(str(length)), None)
        return {
            "ok": True,
            "upload_url": f"http://127.0.0.1:{self.port}/upload/{file_id}",
            "file_id": file_id,
        }

    async def _upload(self, request: web.Request) -> web.StreamResponse:
        """The upload URL: raw bytes, as slack_sdk sends them; no token needed."""
        file_id = request.match_info["file_id"]
        data = await request.read()
        queued = self._failures.get("upload")
        failure = queued.pop(0) if queued else None
        if failure and failure[0] in ("drop_before", "drop_after"):
            self.calls.append(Call("upload (dropped)", {"file": file_id}))
            return drop(request)
        if failure:
            self.calls.append(Call(f"upload ({failure[0]})", {"file": file_id}))
            status = 429 if failure[0] == "429" else 503
            return web.Response(status=status, text="try again later")
        self.calls.append(Call("upload", {"file": file_id, "bytes": len(data)}))
        if file_id not in self.uploads:
            return web.Response(status=404, text="no such upload")
        name, length, _ = self.uploads[file_id]
        if len(data) != length:
            return web.Response(status=400, text=f"expected {length} bytes, got {len(data)}")
        self.uploads[file_id] = (name, length, data)
        return web.Response(text=f"OK - {len(data)}")

    def _complete_upload(self, params: dict[str, Any]) -> dict[str, Any]:
        # Completing a file twice shares it twice here: the worst Slack could do.
        files = _json_field(params.get("files")) or []
        channel = str(params.get("channel_id") or "")
        done = []
        for item in files:
            file_id = str(item.get("id"))
            found = self.uploads.get(file_id)
            if found is None or found[2] is None:
                return {"ok": False, "error": "file_upload_not_found"}
            name, _, data = found
            if channel:
                self.shared.append(
                    Shared(
                        file_id,
                        channel,
                        params.get("thread_ts") or None,
                        name,
                        str(item.get("title") or name),
                        data,
                    )
                )
            done.append({"id": file_id, "name": name, "title": item.get("title") or name})
        return {"ok": True, "files": done}

    def _uploaded_info(self, file_id: str) -> dict[str, Any]:
        name, length, _ = self.uploads[file_id]
        shares: dict[str, dict[str, list[dict[str, Any]]]] = {}
        for share in self.shared:
            if share.file_id == file_id:
                kind = "private" if share.channel.startswith(("D", "G")) else "public"
                places = shares.setdefault(kind, {}).setdefault(share.channel, [])
                places.append({"ts": self.next_ts(), "thread_ts": share.thread_ts})
        info: dict[str, Any] = {"id": file_id, "name": name, "size": length}
        return info | ({"shares": shares} if shares else {})

    async def _download(self, request: web.Request) -> web.StreamResponse:
        self.calls.append(Call("download", {"file": request.match_info["file_id"]}))
        if request.headers.get("Authorization") != f"Bearer {self.bot_token}":
            # Slack answers an unauthenticated download with its HTML login page.
            return web.Response(text="<html>login</html>", content_type="text/html")
        found = self.files.get(request.match_info["file_id"])
        if found is None:
            return web.Response(status=404)
        info, content = found
        return web.Response(body=content, content_type=info["mimetype"])

    # --- Socket Mode -----------------------------------------------------------------------

    async def _link(self, request: web.Request) -> web.StreamResponse:
        socket = web.WebSocketResponse(autoping=True)
        await socket.prepare(request)
        self.connections += 1
        self._socket = socket
        await socket.send_str(
            json.dumps(
                {
                    "type": "hello",
                    "num_connections": 1,
                    "debug_info": {"host": "fake", "approximate_connection_time": 3600},
                    "connection_info": {"app_id": "A0001"},
                }
            )
        )
        self._socket_ready.set()
        async for message in socket:
            if message.type != WSMsgType.TEXT:
                continue
            data = json.loads(message.data)
            envelope_id = data.get("envelope_id")
            if envelope_id:
                self.acks[envelope_id] = data
                if envelope_id in self._ack_events:
                    self._ack_events[envelope_id].set()
        if self._socket is socket:
            self._socket_ready.clear()
        return socket


async def _params(request: web.Request) -> dict[str, Any]:
    params: dict[str, Any] = dict(request.query)
    if request.content_type == "application/json":
        params.update(await request.json())
    else:
        params.update(dict(await request.post()))
    return params


def _json_field(value: Any) -> Any:
    """Form-encoded calls send blocks and metadata as JSON strings; JSON calls as objects."""
    if isinstance(value, str) and value:
        return json.loads(value)
    return value or None


SECTION_TEXT_LIMIT = 3000  # Slack refuses a section block with more text (invalid_blocks)


def _too_long(blocks: Any) -> bool:
    """Whether a section block's text is over Slack's limit, as Slack checks it."""
    for block in _json_field(blocks) or []:
        text = (block.get("text") or {}).get("text", "") if block.get("type") == "section" else ""
        if len(text) > SECTION_TEXT_LIMIT:
            return True
    return False
