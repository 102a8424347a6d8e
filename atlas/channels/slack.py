"""The Slack channel (slack-bolt, async): Socket Mode by default, the HTTP Events API as an option.

People talk to a bot in a direct message or by mentioning it in a channel; the bot answers in
the message's thread, and a thread is one conversation keyed by its root (so the `thread_ts`
replied into and the conversation key come from the same message). `!new` bumps a generation
kept in atlas.db (as Telegram's `/new` does): the chat key becomes `<channel id>#<generation>`,
so the old conversation stays stored and searchable. Only allowed or paired users reach the
model; a stranger gets one reply with a pairing code. slack-bolt is imported here only, and
only when a bot configures Slack.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets as random_ids
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from atlas.channels.access import Access
from atlas.channels.base import Address, Question, QuestionOutcome
from atlas.channels.inbox import FileTooLarge, check_size, name_files, save_stream
from atlas.channels.questions import (
    CANCEL,
    CHOOSE,
    DONE,
    OTHER_TEXT,
    SELECT,
    describe_answer,
    parse_action,
)
from atlas.channels.settings import SlackSettings, channel_settings, secret
from atlas.channels.slack_delivery import SlackDeliveryError, SlackSender, unsendable
from atlas.channels.slack_format import (
    ASK_ACTION_PREFIX,
    SLACK_TEXT_LIMIT,
    answered_blocks,
    escape_mrkdwn,
    markdown_to_mrkdwn,
    parse_ask_value,
    question_blocks,
)
from atlas.channels.slack_questions import (
    QUESTION_ACTION_PREFIX,
    SlackQuestionSet,
    ask_user_blocks,
    choice_numbers,
    question_heading,
    selection_in_state,
)
from atlas.channels.text import split_message
from atlas.errors import AtlasError
from atlas.home import Bot
from atlas.providers.base import ToolCall

if TYPE_CHECKING:
    from slack_bolt.async_app import AsyncApp
    from slack_bolt.authorization import AuthorizeResult

    from atlas.dispatch import Dispatcher

log = logging.getLogger(__name__)

PLATFORM = "slack"
DEFAULT_API = "https://slack.com/api/"
TYPING_REACTION = "eyes"
COMMANDS = ("new", "stop", "status")
# Message subtypes that are people talking; edits, joins and bot posts are not.
_TALK_SUBTYPES = (None, "file_share", "thread_broadcast")
_SEEN_LIMIT = 2048


def create_channel(bot: Bot, dispatcher: Dispatcher) -> SlackChannel:
    """The bot's Slack channel from `[channels.slack]`; ConfigError when a secret is unset."""
    settings = channel_settings(bot, PLATFORM, SlackSettings)
    bot_token = secret(bot, PLATFORM, "bot_token_env", settings.bot_token_env)
    app_token = signing_secret = None
    if settings.mode == "socket":
        app_token = secret(bot, PLATFORM, "app_token_env", settings.app_token_env)
    else:
        signing_secret = secret(bot, PLATFORM, "signing_secret_env", settings.signing_secret_env)
    return SlackChannel(
        bot,
        settings,
        dispatcher,
        bot_token=bot_token,
        app_token=app_token,
        signing_secret=signing_secret,
    )


@dataclass
class PendingAsk:
    """A question with buttons, waiting for an allowed person's click."""

    address: Address
    channel: str
    ts: str
    question: str
    choices: list[str]
    answer: asyncio.Future[str | None]


class SlackChannel:
    streams = False

    def __init__(
        self,
        bot: Bot,
        settings: SlackSettings,
        dispatcher: Dispatcher,
        *,
        bot_token: str,
        app_token: str | None = None,
        signing_secret: str | None = None,
        retry_base_delay: float = 0.5,
    ) -> None:
        self.bot = bot
        self.settings = settings
        self.dispatcher = dispatcher
        self.name = f"{PLATFORM}:{bot.name}"
        self.access = Access(dispatcher.runtime.audit, bot.name, PLATFORM, settings.allowed_users)
        self._bot_token = bot_token
        self._app_token = app_token
        self._signing_secret = signing_secret
        self._retry_base_delay = retry_base_delay
        self.bot_user_id = ""
        self._bot_id = ""
        self._team_id: str | None = None
        self._sender: SlackSender | None = None
        self._handler: Any = None  # AsyncSocketModeHandler, when in Socket Mode
        self._http: Any = None  # aiohttp AppRunner, when serving the Events API
        self._seen: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._threads: set[tuple[str, str]] = set()  # (channel, root) the bot talks in
        self._last_message: dict[Address, tuple[str, str]] = {}  # where the typing mark goes
        self._reacting: dict[Address, tuple[str, str]] = {}
        self._asks: dict[str, PendingAsk] = {}
        self._question_sets: dict[str, SlackQuestionSet] = {}
        self.undelivered: dict[Address, list[str]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._generations: dict[tuple[str, str], int] = {}

    # --- lifecycle -------------------------------------------------------------------------

    @property
    def sender(self) -> SlackSender:
        if self._sender is None:
            raise AtlasError(f"channel {self.name} is not started")
        return self._sender

    async def start(self) -> None:
        """Connect: learn who the bot is, then open Socket Mode or the Events API endpoint."""
        from slack_sdk.web.async_client import AsyncWebClient

        await self._close_transport()  # a retried start must not leave a second socket
        base_url = self.settings.api_base or DEFAULT_API
        client = AsyncWebClient(
            token=self._bot_token,
            base_url=base_url if base_url.endswith("/") else base_url + "/",
            retry_handlers=[],  # SlackSender retries, without posting anything twice
        )
        self._sender = SlackSender(client, base_delay=self._retry_base_delay)
        try:
            identity = await self.sender.call("auth.test")
        except SlackDeliveryError as exc:
            raise AtlasError(f"{self.name}: the bot token was refused: {exc}") from exc
        self.bot_user_id = str(identity.get("user_id", ""))
        self._bot_id = str(identity.get("bot_id", ""))
        self._team_id = identity.get("team_id")
        app = self._build_app(client)
        if self.settings.mode == "socket":
            from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

            self._handler = AsyncSocketModeHandler(app, self._app_token, web_client=client)
            await self._handler.connect_async()
        else:
            await self._serve_http(app)
        log.info("%s: connected as %s (%s mode)", self.name, self.bot_user_id, self.settings.mode)

    async def stop(self) -> None:
        for pending in list(self._asks.values()):
            if not pending.answer.done():
                pending.answer.set_result(None)
        for asked in list(self._question_sets.values()):
            asked.cancel("the Slack channel stopped")
        await self._close_transport()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _close_transport(self) -> None:
        if self._handler is not None:
            await self._handler.close_async()
            self._handler = None
        if self._http is not None:
            await self._http.cleanup()
            self._http = None

    def _build_app(self, client: Any) -> AsyncApp:
        from slack_bolt.async_app import AsyncApp

        # Bolt passes arguments by parameter name and counts `self` as one: plain closures.
        async def authorize(team_id: str | None = None) -> AuthorizeResult:
            return self._authorize(team_id)

        async def on_message(event: dict[str, Any], body: dict[str, Any]) -> None:
            await self._on_message(event, body)

        async def on_button(ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
            await self._on_button(ack, body, action)

        async def on_question(ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
            await self._on_question_action(ack, body, action)

        async def on_command(ack: Any, command: dict[str, Any]) -> None:
            await self._on_slash_command(ack, command)

        app = AsyncApp(
            client=client,
            authorize=authorize,
            signing_secret=self._signing_secret or "",
            request_verification_enabled=self.settings.mode == "http",
        )
        app.event("message")(on_message)
        app.event("app_mention")(on_message)
        app.action(re.compile(f"^{ASK_ACTION_PREFIX}:"))(on_button)
        app.action(re.compile(f"^{QUESTION_ACTION_PREFIX}:"))(on_question)
        for command in COMMANDS:
            app.command(f"/{command}")(on_command)
        return app

    def _authorize(self, team_id: str | None) -> AuthorizeResult:
        """Who we are, known from auth.test at start: no auth.test per event."""
        from slack_bolt.authorization import AuthorizeResult

        return AuthorizeResult(
            enterprise_id=None,
            team_id=team_id or self._team_id,
            bot_token=self._bot_token,
            bot_id=self._bot_id,
            bot_user_id=self.bot_user_id,
        )

    async def _serve_http(self, app: AsyncApp) -> None:
        """The Events API: Slack posts signed requests here; bolt checks the signature."""
        from aiohttp import web
        from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request

        async def events(request: web.Request) -> web.Response:
            return await to_aiohttp_response(
                await app.async_dispatch(await to_bolt_request(request))
            )

        web_app = web.Application()
        web_app.router.add_post(self.settings.http_path, events)
        runner = web.AppRunner(web_app, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self.settings.http_listen, self.settings.http_port)
        try:
            await site.start()
        except OSError:
            await runner.cleanup()
            raise
        self._http = runner

    # --- inbound ---------------------------------------------------------------------------

    async def _on_message(self, event: dict[str, Any], body: dict[str, Any]) -> None:
        """A message or a mention: filter, check who it is, then hand it to the dispatcher."""
        if not self._is_talk(event):
            return
        channel, ts = str(event.get("channel", "")), str(event.get("ts", ""))
        if not self._first_sight(channel, ts):
            return  # a redelivery, or the app_mention twin of a message event
        is_dm = event.get("channel_type") == "im"
        root = str(event.get("thread_ts") or "")
        if not is_dm and not await self._addressed_to_us(event, channel, root):
            return
        user = str(event.get("user", ""))
        thread = root if is_dm else (root or ts)
        address = Address(self.bot.name, self.name, await self._chat_key(channel, thread), thread)
        if not await self.access.is_allowed(user):
            reply = await self.access.stranger(user, chat=channel)
            if reply and is_dm:
                await self._send_quietly(address, reply)
            elif reply:  # in a channel only the stranger sees their code
                await self._safe_call(
                    "chat.postEphemeral", channel=channel, user=user, text=reply, thread_ts=thread
                )
            return
        if not is_dm:
            self._threads.add((channel, address.thread))
        text = self._strip_mention(str(event.get("text") or ""))
        if (command := _command(text)) is not None:
            await self._run_command(command, address)
            return
        try:
            files = await self._download_files(event)
        except (FileTooLarge, SlackDeliveryError, aiohttp.ClientError) as exc:
            await self._send_quietly(address, f"I could not take that file: {exc}")
            return
        from atlas.dispatch import Inbound

        self._last_message[address] = (channel, ts)
        event_id = str(event.get("client_msg_id") or body.get("event_id") or f"{channel}:{ts}")
        await self.dispatcher.submit(
            Inbound(
                address,
                name_files(text, files, self.bot.workspace),
                event_id=event_id,
                files=tuple(files),
            )
        )

    def _is_talk(self, event: dict[str, Any]) -> bool:
        if event.get("subtype") not in _TALK_SUBTYPES or event.get("bot_id"):
            return False
        return bool(event.get("user")) and event.get("user") != self.bot_user_id

    def _first_sight(self, channel: str, ts: str) -> bool:
        key = (channel, ts)
        if key in self._seen:
            return False
        self._seen[key] = None
        if len(self._seen) > _SEEN_LIMIT:
            self._seen.popitem(last=False)
        return True

    async def _addressed_to_us(self, event: dict[str, Any], channel: str, root: str) -> bool:
        """In a channel: a mention, a reply in a thread we talk in, or `groups = "all"`."""
        if event.get("type") == "app_mention" or f"<@{self.bot_user_id}>" in str(event.get("text")):
            return True
        if self.settings.groups == "all":
            return True
        return bool(root) and (
            (channel, root) in self._threads or await self._known_thread(channel, root)
        )

    async def _known_thread(self, channel: str, root: str) -> bool:
        """A thread with a stored conversation (so replies keep working after a restart)."""
        store = await self.dispatcher.runtime.store(self.bot)

        def find(db: Any) -> bool:
            rows = db.query(
                "SELECT 1 FROM conversations WHERE channel = ? AND thread = ? "
                "AND (chat = ? OR chat LIKE ? || '#%')",
                [self.name, root, channel, channel],
            )
            return next(iter(rows), None) is not None

        if await store.db.call(find):
            self._threads.add((channel, root))
            return True
        return False

    def _strip_mention(self, text: str) -> str:
        return text.replace(f"<@{self.bot_user_id}>", "").strip() if self.bot_user_id else text

    async def _download_files(self, event: dict[str, Any]) -> list[Path]:
        """Every file of the message, into the bot's inbox; FileTooLarge past the size limit."""
        paths = []
        for shared in event.get("files") or []:
            info = shared
            if not info.get("url_private_download") and not info.get("url_private"):
                info = (await self.sender.call("files.info", file=shared["id"]))["file"]
            name = str(info.get("name") or info.get("id") or "file")
            limit = self.settings.inbox_max_bytes
            check_size(info.get("size"), limit, name)
            url = info.get("url_private_download") or info["url_private"]
            paths.append(await save_stream(self.bot, name, self._fetch(url), limit))
        return paths

    async def _fetch(self, url: str) -> AsyncIterator[bytes]:
        headers = {"Authorization": f"Bearer {self._bot_token}"}
        async with (
            aiohttp.ClientSession() as session,
            session.get(url, headers=headers) as response,
        ):
            response.raise_for_status()
            if response.content_type == "text/html":
                # Slack answers a download it will not give with its login page, status 200.
                raise SlackDeliveryError(
                    f"Slack would not hand over {url} (is files:read granted?)"
                )
            async for chunk in response.content.iter_chunked(64 * 1024):
                yield chunk

    # --- commands --------------------------------------------------------------------------

    async def _run_command(self, command: str, address: Address) -> None:
        """`!new`, `!stop`, `!status` (and the same slash commands)."""
        from atlas.dispatch import Inbound

        if command == "new":
            await self._start_new(address)
        else:
            await self.dispatcher.submit(Inbound(address, f"/{command}"))

    async def _chat_key(self, channel: str, thread: str) -> str:
        """The conversation's chat key: the channel id, with its `!new` generation if any."""
        key = (channel, thread)
        if key not in self._generations:

            def find(db: Any) -> int:
                rows = db.query(
                    "SELECT generation FROM chat_generations "
                    "WHERE channel = ? AND chat = ? AND thread = ? AND user = ''",
                    [self.name, channel, thread],
                )
                row = next(iter(rows), None)
                return int(row["generation"]) if row else 0

            self._generations[key] = await self.access.store.call(find)
        generation = self._generations[key]
        return f"{channel}#{generation}" if generation else channel

    async def _start_new(self, address: Address) -> None:
        """`!new`: the next message here starts a fresh conversation; this one stays stored."""
        self.dispatcher.stop_turn(address)
        channel = slack_channel(address)
        generation = self._generations.get((channel, address.thread), 0) + 1
        row = {
            "channel": self.name,
            "chat": channel,
            "thread": address.thread,
            "user": "",
            "generation": generation,
        }
        pk = ("channel", "chat", "thread", "user")
        await self.access.store.call(lambda db: db["chat_generations"].upsert(row, pk=pk))
        self._generations[(channel, address.thread)] = generation
        await self._send_quietly(
            address, "Started a new conversation. The earlier one is kept and searchable."
        )

    async def _on_slash_command(self, ack: Any, command: dict[str, Any]) -> None:
        """Slash commands reach channels and DMs, never threads: they act on the top level."""
        user = str(command.get("user_id", ""))
        if not await self.access.is_allowed(user):
            await ack("Only people this bot's owner approved can use its commands.")
            return
        await ack()
        channel = str(command.get("channel_id", ""))
        address = Address(self.bot.name, self.name, await self._chat_key(channel, ""))
        await self._run_command(str(command.get("command", "")).lstrip("/"), address)

    # --- questions with buttons ------------------------------------------------------------

    async def ask(self, address: Address, question: str, choices: list[str]) -> str | None:
        """Put the question with one button per choice; the first allowed click answers it.
        None when the question could not be delivered."""
        request_id = random_ids.token_hex(6)
        try:
            ts = await self.sender.post(
                slack_channel(address),
                question,
                thread_ts=address.thread or None,
                blocks=question_blocks(request_id, question, choices),
            )
        except SlackDeliveryError as exc:
            log.error("%s: could not ask %r in %s: %s", self.name, question, address, exc)
            return None
        pending = PendingAsk(
            address,
            slack_channel(address),
            ts,
            question,
            choices,
            asyncio.get_running_loop().create_future(),
        )
        self._asks[request_id] = pending
        try:
            return await pending.answer
        finally:
            self._asks.pop(request_id, None)
            # Cancelling the wait (a timeout, /stop) cancels the future too.
            if pending.answer.cancelled() or not pending.answer.done():
                pending.answer.cancel()
                self._keep(self._close_question(pending, "_No answer in time._"))

    async def _on_button(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        await ack()
        parsed = parse_ask_value(str(action.get("value", "")))
        user = str((body.get("user") or {}).get("id", ""))
        if parsed is None:
            return
        request_id, index = parsed
        pending = self._asks.get(request_id)
        if pending is None or pending.answer.done():
            return  # answered or expired already; its message says so
        if not await self.access.is_allowed(user):
            await self._safe_call(
                "chat.postEphemeral",
                channel=pending.channel,
                user=user,
                text="Only people this bot's owner approved can answer its questions.",
            )
            return
        if not 0 <= index < len(pending.choices):
            return
        choice = pending.choices[index]
        pending.answer.set_result(choice)
        await self._close_question(pending, f"*{choice}* — answered by <@{user}>")

    async def _close_question(self, pending: PendingAsk, outcome: str) -> None:
        await self._safe_call(
            "chat.update",
            channel=pending.channel,
            ts=pending.ts,
            text=f"{pending.question}\n{outcome}",
            blocks=answered_blocks(pending.question, outcome),
        )

    # --- ask_user's questions ---------------------------------------------------------------

    async def ask_questions(self, address: Address, questions: list[Question]) -> QuestionOutcome:
        """Each question as a message with its own Block Kit elements; submitted once every
        question has an allowed person's answer. Undelivered when a question cannot be posted;
        a cancelled wait (a timeout) edits the open questions to say nobody answered."""
        channel = slack_channel(address)
        asked = SlackQuestionSet(random_ids.token_hex(6), questions, channel)
        self._question_sets[asked.request_id] = asked
        try:
            for index, question in enumerate(questions):
                try:
                    ts = await self.sender.post(
                        channel,
                        question.text,
                        thread_ts=address.thread or None,
                        blocks=ask_user_blocks(asked, index),
                    )
                except SlackDeliveryError as exc:
                    log.error("%s: could not put questions to %s: %s", self.name, address, exc)
                    asked.cancel("undelivered")
                    await self._close_questions(asked, "_Could not be delivered._")
                    return QuestionOutcome("undelivered", detail=str(exc))
                asked.message_ts.append(ts)
            outcome = await asked.outcome
        except asyncio.CancelledError:
            self._keep(self._close_questions(asked, "_No answer in time._"))
            raise
        finally:
            self._question_sets.pop(asked.request_id, None)
        if outcome.status == "cancelled":
            await self._close_questions(asked, f"_{escape_mrkdwn(outcome.detail or 'Cancelled')}._")
        return outcome

    async def _on_question_action(
        self, ack: Any, body: dict[str, Any], action: dict[str, Any]
    ) -> None:
        """A click, a tick or an Enter in a question's message; only allowed people count."""
        await ack()
        key = str(action.get("action_id", "")).removeprefix(f"{QUESTION_ACTION_PREFIX}:")
        parsed = parse_action(key)
        asked = self._question_sets.get(parsed.request_id) if parsed else None
        if parsed is None or asked is None or not asked.is_open(parsed.question):
            return  # answered or expired already; its message says so
        user = str((body.get("user") or {}).get("id", ""))
        if not await self.access.is_allowed(user):
            await self._safe_call(
                "chat.postEphemeral",
                channel=asked.channel,
                user=user,
                text="Only people this bot's owner approved can answer its questions.",
            )
            return
        index = parsed.question
        if parsed.action == CANCEL:
            asked.cancel(f"cancelled by {user}")
            return
        if parsed.action == SELECT:
            asked.selected[index] = choice_numbers(action.get("selected_options"), asked, index)
            return
        selection = selection_in_state(body, asked, index)
        if parsed.action == CHOOSE:
            if not asked.valid_choice(index, parsed.choice):
                return
            answer = asked.choose(index, parsed.choice, user)
        elif parsed.action == OTHER_TEXT:
            text = str(action.get("value") or "").strip()
            if not text:
                return
            if selection is not None:
                asked.selected[index] = selection
            answer = asked.write(index, text, user)
        elif parsed.action == DONE:
            found = asked.done(index, user, selection)
            if found is None:
                await self._safe_call(
                    "chat.postEphemeral",
                    channel=asked.channel,
                    user=user,
                    text="Tick at least one choice first, or type an answer under Other.",
                )
                return
            answer = found
        else:
            return
        shown = f"*{escape_mrkdwn(describe_answer(answer))}* — answered by <@{user}>"
        await self._close_question_message(asked, index, shown)

    async def _close_questions(self, asked: SlackQuestionSet, outcome: str) -> None:
        """Every unanswered question's message shows how the wait ended; its elements go."""
        for index in asked.open_questions():
            await self._close_question_message(asked, index, outcome)

    async def _close_question_message(
        self, asked: SlackQuestionSet, index: int, outcome: str
    ) -> None:
        if index >= len(asked.message_ts):
            return  # never posted
        heading = question_heading(asked, index)
        await self._safe_call(
            "chat.update",
            channel=asked.channel,
            ts=asked.message_ts[index],
            text=f"{asked.questions[index].text}\n{outcome}",
            blocks=[
                {"type": "section", "text": {"type": "mrkdwn", "text": heading}},
                {"type": "context", "elements": [{"type": "mrkdwn", "text": outcome}]},
            ],
        )

    # --- outbound --------------------------------------------------------------------------

    async def typing(self, address: Address) -> None:
        """A reaction on the message being answered; it stays until the reply is sent."""
        target = self._last_message.get(address)
        if target is None or address in self._reacting:
            return
        self._reacting[address] = target
        channel, ts = target
        await self._safe_call("reactions.add", channel=channel, timestamp=ts, name=TYPING_REACTION)

    async def stream(self, address: Address, text: str) -> None:
        return None  # chat platforms get the whole reply at the end

    async def show_tool_call(self, address: Address, call: ToolCall) -> None:
        return None

    async def send(self, address: Address, text: str, files: list[Path] | None = None) -> None:
        """Render, split and post, each chunk exactly once, then upload its files into the same
        channel and thread. A reply that cannot be delivered is kept (and sent with the next
        reply that gets through) and the error is raised; a file that cannot be sent is named
        in the reply with the reason."""
        await self._stop_typing(address)
        sendable, refused = await asyncio.to_thread(self._check_files, files or [])
        body = text if text.strip() else ("" if sendable and not refused else "(no answer)")
        if refused:
            body = "\n\n".join(part for part in (body, "\n".join(refused)) if part)
        if self.undelivered.get(address):
            kept = "\n\n".join(self.undelivered.pop(address))
            body = (
                f"(An earlier reply could not be delivered; here it is.)\n\n{kept}\n\n---\n\n{body}"
            )
        chunks = split_message(markdown_to_mrkdwn(body), SLACK_TEXT_LIMIT) if body else []
        for number, chunk in enumerate(chunks):
            try:
                await self.sender.post(
                    slack_channel(address), chunk, thread_ts=address.thread or None
                )
            except SlackDeliveryError as exc:
                kept_parts = "\n".join(chunks[number:])
                if sendable:
                    kept_parts += f"\n\n(Not sent with it: {', '.join(p.name for p in sendable)}.)"
                self.undelivered.setdefault(address, []).append(kept_parts)
                log.error(
                    "%s: reply to %s undelivered (%d of %d parts kept): %s",
                    self.name,
                    address,
                    len(chunks) - number,
                    len(chunks),
                    exc,
                )
                raise
        failed = []
        for path in sendable:
            try:
                await self.sender.upload(
                    slack_channel(address), path, thread_ts=address.thread or None
                )
            except (SlackDeliveryError, OSError) as exc:
                log.warning("%s: file %s not sent to %s: %s", self.name, path, address, exc)
                why = exc if isinstance(exc, SlackDeliveryError) else exc.strerror or exc
                failed.append(f"(I could not send the file {path.name}: {why})")
        if failed:
            await self.send(address, "\n".join(failed))

    def _check_files(self, files: list[Path]) -> tuple[list[Path], list[str]]:
        """The files that can go out, and a line for each that cannot, saying why."""
        sendable: list[Path] = []
        refused: list[str] = []
        for path in files:
            problem = unsendable(path)
            if problem is None:
                sendable.append(path)
            else:
                log.warning("%s: file %s not sent: %s", self.name, path, problem)
                refused.append(f"(I could not send the file {path.name}: {problem}.)")
        return sendable, refused

    async def _stop_typing(self, address: Address) -> None:
        target = self._reacting.pop(address, None)
        if target is not None:
            channel, ts = target
            await self._safe_call(
                "reactions.remove", channel=channel, timestamp=ts, name=TYPING_REACTION
            )

    async def _send_quietly(self, address: Address, text: str) -> None:
        try:
            await self.send(address, text)
        except AtlasError as exc:
            log.warning("%s: %s", self.name, exc)

    async def _safe_call(self, method: str, **params: Any) -> None:
        """A call whose failure must not end what it decorates (a reaction, an edit)."""
        try:
            await self.sender.call(method, **params)
        except SlackDeliveryError as exc:
            log.warning("%s: %s", self.name, exc)

    def _keep(self, work: Any) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _command(text: str) -> str | None:
    """`!new` / `/new` and the like → "new"; None for anything else."""
    word = text.strip().lower()
    if len(word) > 1 and word[0] in "!/" and word[1:] in COMMANDS:
        return word[1:]
    return None


def slack_channel(address: Address) -> str:
    """The Slack channel id of a conversation (its chat key without the `!new` generation)."""
    return address.chat.split("#", 1)[0]


__all__ = ["PendingAsk", "SlackChannel", "create_channel", "slack_channel"]
