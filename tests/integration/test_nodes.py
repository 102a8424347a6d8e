"""`atlas run --node NAME`: two nodes of one home on PostgreSQL, each bot owned by a lease.

Two `atlas run --node` children (short lease timing) share one home folder and one database on
the tests' throwaway server, with the fake Telegram Bot API and fake model server of the load
runs. The home's two bots split one per node. The node holding a bot is killed with SIGKILL
while a person's message waits on its turn: the other node takes the bot over within the
lease plus a heartbeat (and the start of its channel), answers the message once, and nothing
is answered twice. Then a node is paused with SIGSTOP while its turn waits on the model, past
its lease; the other node takes the bot over and answers; the paused node, resumed with SIGCONT,
finishes its turn late and sends nothing (its answer is not stored, its sends are fenced).
A node whose Chat page follows a bot it then takes over shows the answer once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest

from atlas.channels.health_file import channel_health_checks
from atlas.dashboard.auth import issue_login_token
from atlas.dashboard.server import running_url
from scripts.loadkit import FIRST_CHAT, Fakes, bot_name, free_port
from tests.dashboard_rig import CSRF

REPO = Path(__file__).resolve().parents[2]
PASSWORD = "pw-not-in-any-message"
LEASE, HEARTBEAT = 3.0, 0.5
# A takeover: the lease runs out, the next round takes it, the channel starts and polls.
TAKEOVER = LEASE + HEARTBEAT + 12.0
# The model's latency in a test that kills or pauses a node while its turn waits on the model:
# time for the signal to land before the answer does.
MID_TURN = 1.0


class Node:
    """`atlas run --node NAME` as a child process, its output in a log file."""

    def __init__(self, name: str, env: dict[str, str], log: Path, *, plain: bool = False) -> None:
        self.name, self.env, self.log = name, env, log
        self.plain = plain  # a plain `atlas run`, without --node
        self.process: subprocess.Popen[bytes] | None = None
        self.port = free_port()  # its dashboard's

    def start(self) -> None:
        command = [sys.executable, "-m", "atlas.cli", "run"]
        command += [] if self.plain else ["--node", self.name]
        command += ["--listen", f"127.0.0.1:{self.port}"]
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                command, env=self.env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO
            )

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    async def wait_logged(self, text: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.text():
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"node {self.name} ended:\n{self.text()}")
            assert time.monotonic() < deadline, f"{text!r} not logged:\n{self.text()}"
            await asyncio.sleep(0.05)

    def signal(self, sig: int) -> None:
        assert self.process is not None
        os.kill(self.process.pid, sig)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGCONT)
        self.process.kill()
        self.process.wait()


@pytest.fixture
async def fakes() -> AsyncIterator[Fakes]:
    async with Fakes(bots=2, latency=0.2) as made:  # a test that kills mid-turn sets MID_TURN
        yield made


@pytest.fixture
def nodes() -> AsyncIterator[list[Node]]:
    started: list[Node] = []
    yield started  # type: ignore[misc]
    for node in started:
        node.stop()


def home_with_nodes(fakes: Fakes, home: Path, url: str) -> dict[str, str]:
    fakes.write_home(home, conversations=1)
    config = home / "config.toml"
    config.write_text(
        config.read_text()
        + f'\n[store]\nurl = "{url}"\n'
        + f"\n[cluster]\nlease_seconds = {LEASE}\nheartbeat_seconds = {HEARTBEAT}\n"
    )
    env = fakes.env(home)
    env["ATLAS_STORE_PASSWORD"] = PASSWORD
    return env


async def until(check: Callable[[], Awaitable[bool]], timeout: float, what: str) -> float:
    """Seconds until `check` held."""
    started = time.monotonic()
    while not await check():
        assert time.monotonic() - started < timeout, f"not within {timeout} s: {what}"
        await asyncio.sleep(0.05)
    return time.monotonic() - started


async def holders(db: asyncpg.Connection) -> dict[str, str]:
    rows = await db.fetch(
        "SELECT substr(resource, 5) AS bot, holder FROM leases WHERE holder IS NOT NULL "
        "AND expires_at > clock_timestamp() AND starts_with(resource, 'bot:')"
    )
    return {row["bot"]: row["holder"] for row in rows}


def replied(fakes: Fakes, index: int, tag: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return any(tag in text for text in fakes.telegrams[index].sent_texts(FIRST_CHAT))

    return check


async def split_and_serving(
    fakes: Fakes, nodes: list[Node], db: asyncpg.Connection, round_no: int
) -> dict[str, str]:
    """Both bots held, one per node, and each answering (a message to each, answered once)."""

    async def split() -> bool:
        held = await holders(db)
        return len(held) == 2 and len(set(held.values())) == 2

    await until(split, 60, "the two bots split one per node")
    for index in range(2):
        tag = f"T{index}-0-{round_no}"
        telegram = fakes.telegrams[index]
        await telegram.push(telegram.message(f"{tag} hello", user_id=FIRST_CHAT))
    for index in range(2):
        await until(replied(fakes, index, f"T{index}-0-{round_no}"), 60, "both bots answer")
    return await holders(db)


async def start_nodes(env: dict[str, str], tmp_path: Path, nodes: list[Node]) -> None:
    """Nodes n1 and n2 of the home `env` names, each logging to tmp_path/NAME.log, ready."""
    for name in ("n1", "n2"):
        node = Node(name, env, tmp_path / f"{name}.log")
        nodes.append(node)
        node.start()
    for node in nodes:
        await node.wait_logged("ready; stop with Ctrl-C or SIGTERM")


def no_answer_twice(fakes: Fakes) -> None:
    replies = fakes.replies_per_tag()
    assert replies and all(count == 1 for count in replies.values()), replies


@contextlib.asynccontextmanager
async def logged_in(home: Path, node: Node) -> AsyncIterator[tuple[aiohttp.ClientSession, str]]:
    """A browser's session on `node`'s dashboard, logged in through a login link as a person
    is: the session and the dashboard's address."""
    base = f"http://127.0.0.1:{node.port}"
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as web:
        async with web.post(f"{base}/login", data={"token": issue_login_token(home)}) as login:
            assert login.status == 200, await login.text()
        yield web, base


async def csrf_of(web: aiohttp.ClientSession, base: str) -> str:
    async with web.get(f"{base}/") as page:
        return CSRF.search(await page.text()).group(1)  # type: ignore[union-attr]


@pytest.mark.postgres
async def test_a_killed_nodes_bot_is_taken_over_and_its_waiting_message_answered_once(
    tmp_path: Path, fakes: Fakes, postgres_url: str, nodes: list[Node]
) -> None:
    fakes.model.latency = MID_TURN
    home = tmp_path / "home"
    env = home_with_nodes(fakes, home, postgres_url)
    await start_nodes(env, tmp_path, nodes)
    db = await asyncpg.connect(postgres_url)
    try:
        held = await split_and_serving(fakes, nodes, db, 1)
        victim_name = held[bot_name(0)]
        victim = next(node for node in nodes if node.name == victim_name)
        survivor = next(node for node in nodes if node.name != victim_name)
        # A message whose turn is with the model when its node dies: stored, not answered.
        telegram = fakes.telegrams[0]
        await telegram.push(telegram.message("T0-0-2 [tool] read note.txt", user_id=FIRST_CHAT))

        async def asked() -> bool:
            return "T0-0-2" in fakes.model.first_request_at

        await until(asked, 30, "the turn reached the model")
        victim.signal(signal.SIGKILL)
        killed_at = time.monotonic()
        took = await until(replied(fakes, 0, "T0-0-2"), TAKEOVER, "the survivor answers")
        assert (await holders(db))[bot_name(0)] == survivor.name
        assert "serving bot " + bot_name(0) in survivor.text()
        # A later message for the moved bot: answered once, by the survivor.
        await telegram.push(telegram.message("T0-0-3 still there?", user_id=FIRST_CHAT))
        await until(replied(fakes, 0, "T0-0-3"), 30, "the moved bot answers")
        await asyncio.sleep(2 * HEARTBEAT)  # a second answer would come about now
        no_answer_twice(fakes)
        # A plain `atlas run` beside the live node would serve its bots a second time.
        plain = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "atlas.cli", "run", "--listen", f"127.0.0.1:{free_port()}"],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert plain.returncode != 0, plain.stdout + plain.stderr
        assert "nodes of this home are running" in plain.stderr + plain.stdout
        assert survivor.name in plain.stderr + plain.stdout
        unsent = await db.fetchval(
            "SELECT COUNT(*) FROM outbox WHERE state NOT IN ('delivered', 'maybe', 'failed')"
        )
        assert unsent == 0
        print(f"takeover after SIGKILL: answered {took:.1f} s after the kill")
        assert time.monotonic() - killed_at < TAKEOVER
    finally:
        await db.close()
    assert all(PASSWORD not in node.text() for node in nodes)


@pytest.mark.postgres
async def test_a_node_paused_past_its_lease_sends_nothing_when_it_wakes(
    tmp_path: Path, fakes: Fakes, postgres_url: str, nodes: list[Node]
) -> None:
    fakes.model.latency = MID_TURN
    home = tmp_path / "home"
    env = home_with_nodes(fakes, home, postgres_url)
    await start_nodes(env, tmp_path, nodes)
    db = await asyncpg.connect(postgres_url)
    try:
        held = await split_and_serving(fakes, nodes, db, 1)
        paused = next(node for node in nodes if node.name == held[bot_name(0)])
        other = next(node for node in nodes if node.name != paused.name)
        # Paused while a turn waits on the model: the answer reaches it while it sleeps.
        telegram = fakes.telegrams[0]
        await telegram.push(telegram.message("T0-0-2 [tool] read note.txt", user_id=FIRST_CHAT))

        async def asked() -> bool:
            return "T0-0-2" in fakes.model.first_request_at

        await until(asked, 30, "the turn reached the model")
        paused.signal(signal.SIGSTOP)

        async def moved() -> bool:
            return (await holders(db)).get(bot_name(0)) == other.name

        await until(moved, TAKEOVER, "the paused node's bot moves")
        await until(replied(fakes, 0, "T0-0-2"), TAKEOVER, "the other node answers")
        sent_before = len(telegram.sent_texts())
        paused_log = len(paused.text())
        paused.signal(signal.SIGCONT)
        await paused.wait_logged("stopped bot " + bot_name(0), timeout=30)
        await asyncio.sleep(LEASE)  # what the woken node might still send, it sends by now
        assert len(telegram.sent_texts()) == sent_before, telegram.sent_texts()
        no_answer_twice(fakes)
        woke = paused.text()[paused_log:]
        assert "Traceback" not in woke, woke
        # It rejoins: the two bots split again and both answer.
        await split_and_serving(fakes, nodes, db, 3)
        no_answer_twice(fakes)
    finally:
        await db.close()


TAKEN_OVER = "T1-3-2"
# The answer to it, as the fake model words it: after its tool call, or straight away.
TAKEN_OVER_ANSWER = re.compile(rf"(?:Answer to {TAKEN_OVER}\.|Read it\. {TAKEN_OVER} done\.)")


async def next_event(stream: aiohttp.ClientResponse) -> dict[str, Any] | None:
    """The next JSON event of a page's event stream; None when none came within 0.2 s (or the
    line was not one: a keep-alive, an event's name)."""
    try:
        line = await asyncio.wait_for(stream.content.readline(), 0.2)
    except TimeoutError:
        return None
    text = line.decode()
    if not text.startswith("data:") or not text[5:].strip().startswith("{"):
        return None
    event: dict[str, Any] = json.loads(text[5:])
    return event


async def answers_seen(stream: aiohttp.ClientResponse, bot: str, timeout: float) -> list[str]:
    """The finished messages of `bot` the page's event stream brings that answer TAKEN_OVER,
    until three seconds past the first (a second showing would come by then: a follow reads
    the rows every 0.3 s)."""
    seen: list[str] = []
    ends = time.monotonic() + timeout
    while time.monotonic() < ends:
        event = await next_event(stream)
        if event is None:
            continue
        answer = event.get("part") == "message" and TAKEN_OVER_ANSWER.search(event["html"])
        if event.get("bot") == bot and answer:
            seen.append(event["html"])
            if len(seen) == 1:
                ends = time.monotonic() + 3.0
    return seen


@pytest.mark.postgres
async def test_a_dashboard_chat_followed_by_the_node_that_takes_the_bot_over_shows_it_once(
    tmp_path: Path, fakes: Fakes, postgres_url: str, nodes: list[Node]
) -> None:
    """Node b's Chat page sends a message to bot 1, held by node a; b follows a's sent rows.
    a is paused past its lease while the turn waits on the model: b takes the bot over and its
    recovery answers. b's page shows that answer once, on its event stream and on reload (its
    own channel shows it as it sends it; the follow skips rows b sent itself)."""
    fakes.model.latency = MID_TURN
    home = tmp_path / "home"
    env = home_with_nodes(fakes, home, postgres_url)
    await start_nodes(env, tmp_path, nodes)
    db = await asyncpg.connect(postgres_url)
    try:
        held = await split_and_serving(fakes, nodes, db, 1)
        paused = next(node for node in nodes if node.name == held[bot_name(1)])
        other = next(node for node in nodes if node.name != paused.name)
        async with logged_in(home, other) as (web, base):
            csrf = await csrf_of(web, base)
            stream = await web.get(f"{base}/events", headers={"Accept": "text/event-stream"})
            said = {"text": f"{TAKEN_OVER} [tool] read note.txt", "csrf": csrf}
            async with web.post(f"{base}/chat/{bot_name(1)}", data=said) as sent:
                assert sent.status == 200, await sent.text()

            async def asked() -> bool:
                return TAKEN_OVER in fakes.model.first_request_at

            await until(asked, 30, "the holder's turn reached the model")
            paused.signal(signal.SIGSTOP)
            seen = await answers_seen(stream, bot_name(1), TAKEOVER + 30)
            stream.close()
            assert (await holders(db)).get(bot_name(1)) == other.name
            assert len(seen) == 1, seen
            async with web.get(f"{base}/chat/{bot_name(1)}") as page:
                reloaded = await page.text()
            assert len(TAKEN_OVER_ANSWER.findall(reloaded)) == 1, reloaded
        sent_rows = await db.fetch(
            "SELECT text FROM outbox WHERE bot = $1 AND channel = 'dashboard' "
            "AND state = 'delivered' ORDER BY id",
            bot_name(1),
        )
        answers = [row["text"] for row in sent_rows if TAKEN_OVER_ANSWER.search(row["text"])]
        assert len(answers) == 1, sent_rows
    finally:
        await db.close()


def routine_for(index: int, at: datetime) -> str:
    return "\n".join(
        [
            f'schedule = "{at.strftime("%Y-%m-%dT%H:%M:%S+00:00")}"',
            f'bot = "{bot_name(index)}"',
            f'prompt = "T{index}-0-9 say that the routine ran."',
            f'precheck = "echo checked-{index}"',  # a sandboxed command, on the bot's holder
            "",
            "[target]",
            f'channel = "telegram:{bot_name(index)}"',
            f'chat = "{FIRST_CHAT}"',
            "",
        ]
    )


LIVE_WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
]
LIVE_ANSWER = "T1-3-1: " + " ".join(LIVE_WORDS) + "."


def words_shown(html: str) -> int:
    """How many of LIVE_WORDS the reply so far shows, from the first."""
    shown = set(re.findall(r"[a-z]+", html))
    return next(
        (index for index, word in enumerate(LIVE_WORDS) if word not in shown), len(LIVE_WORDS)
    )


async def chat_seen(stream: aiohttp.ClientResponse, bot: str) -> list[tuple[str, str]]:
    """The `chat` events of `bot` the page's event stream brings, as (part, HTML), until a
    second past the finished LIVE_ANSWER (a message shown twice would come by then)."""
    seen: list[tuple[str, str]] = []
    until: float | None = None
    while until is None or time.monotonic() < until:
        event = await next_event(stream)
        if event is None or event.get("bot") != bot:
            continue
        seen.append((event["part"], event["html"]))
        if event["part"] == "message" and LIVE_ANSWER in event["html"] and until is None:
            until = time.monotonic() + 1.0
    return seen


@pytest.mark.postgres
async def test_routines_and_message_agent_between_nodes(
    tmp_path: Path, fakes: Fakes, postgres_url: str, nodes: list[Node]
) -> None:
    """One node runs the scheduler; a routine of each bot fires once, its report sent by the
    bot's own node (one of them held by the other node: handed over as a node message). Then
    a bot asks the bot on the other node with message_agent: the turn runs there, the reply
    comes back to the asking conversation."""
    home = tmp_path / "home"
    due = (datetime.now(UTC) + timedelta(seconds=15)).replace(microsecond=0)
    env = home_with_nodes(fakes, home, postgres_url)
    fakes.model.keep_requests = True  # the pre-checks' output shows in the runs' prompts
    for index in range(2):
        (home / "routines" / f"r{index}.toml").write_text(routine_for(index, due))
    await start_nodes(env, tmp_path, nodes)
    db = await asyncpg.connect(postgres_url)
    try:
        held = await split_and_serving(fakes, nodes, db, 1)
        # `atlas doctor` on this machine: each node's channels, from its own run folder, the
        # channel of the bot it gained among them.
        named = {name for name, _ok, _detail, _fix in channel_health_checks(home)}
        assert {f"node {node}: channel telegram:{bot}" for bot, node in held.items()} <= named
        assert running_url(home) == f"http://127.0.0.1:{nodes[0].port}"
        scheduler = await db.fetchval(
            "SELECT holder FROM leases WHERE resource = 'scheduler' "
            "AND expires_at > clock_timestamp()"
        )
        assert scheduler in ("n1", "n2")
        for index in range(2):
            await until(replied(fakes, index, f"T{index}-0-9"), 40, "each routine reports")
        for _ in range(100):  # a run's record says "delivered" once its report's row does
            runs = await db.fetch("SELECT status, delivery FROM routine_runs ORDER BY id")
            if len(runs) == 2 and all(
                (run["delivery"] or "").startswith("delivered") for run in runs
            ):
                break
            await asyncio.sleep(0.1)
        assert sorted((run["status"], run["delivery"]) for run in runs) == sorted(
            ("ok", f"delivered to telegram:{bot_name(index)}:{FIRST_CHAT}") for index in range(2)
        ), runs
        # The run of the bot the scheduler's node does not hold went to its holder as a node
        # message, taken once there: its pre-check, its turn and its report ran there.
        elsewhere = next(bot for bot, holder in held.items() if holder != scheduler)
        handed = await db.fetch("SELECT kind, to_bot, taken_by FROM node_messages")
        assert [(row["kind"], row["to_bot"], row["taken_by"]) for row in handed] == [
            ("routine_run", elsewhere, held[elsewhere])
        ]
        by_name = {node.name: node for node in nodes}
        for index in range(2):
            ran = f"routine r{index} run "
            holder, other = by_name[held[bot_name(index)]], by_name[held[bot_name(1 - index)]]
            assert ran in holder.text() and ran not in other.text(), index
        # Each node runs the routine of the bot it holds on its own run path (so losing the bot
        # stops it), the scheduler's node included; never the other node's.
        for index in range(2):
            runs_it = f"runs routine r{index} "
            holder, other = by_name[held[bot_name(index)]], by_name[held[bot_name(1 - index)]]
            assert runs_it in holder.text() and runs_it not in other.text(), index
        assert "handed to bot" in by_name[scheduler].text()
        checked = sorted(
            found
            for body in fakes.model.requests
            for found in ("checked-0", "checked-1")
            if found in str(body["messages"][-1])
        )
        assert checked == ["checked-0", "checked-1"]  # each pre-check ran once, in the prompt

        # message_agent from bot 0 to bot 1, held by the other node.
        from tests.fakes.model_servers import Scripted

        ask = {"target": bot_name(1), "message": "T1-0-7 please say hello"}
        fakes.model.script.append(Scripted(calls=[("message_agent", ask)]))
        telegram = fakes.telegrams[0]
        await telegram.push(telegram.message("T0-0-7 ask the other bot", user_id=FIRST_CHAT))
        # bot 1's answer ("Answer to T1-0-7.") comes back to bot 0's chat in its next turn.
        await until(replied(fakes, 0, "T1-0-7"), 60, "the reply comes back across nodes")
        assert not any("T1-0-7" in text for text in fakes.telegrams[1].sent_texts())
        taken = await db.fetch("SELECT kind, to_bot, taken_by FROM node_messages ORDER BY id")
        kinds = [(row["kind"], row["to_bot"]) for row in taken]
        assert ("agent_message", bot_name(1)) in kinds and ("agent_reply", bot_name(0)) in kinds
        assert all(row["taken_by"] == held[row["to_bot"]] for row in taken), taken
        no_answer_twice(fakes)

        # The dashboard's chat of the node that does not hold bot 1: the turn runs on the
        # holder; this node's Chat page shows the reply as it is written (relayed by the
        # holder, word by word), then the finished message once, from the conversation's rows.
        other = next(node for node in nodes if node.name != held[bot_name(1)])
        fakes.model.script.append(Scripted(text=LIVE_ANSWER, pace=0.25))
        async with logged_in(home, other) as (web, base):
            csrf = await csrf_of(web, base)
            stream = await web.get(f"{base}/events", headers={"Accept": "text/event-stream"})
            said = {"text": "T1-3-1 hello from the dashboard", "csrf": csrf}
            async with web.post(f"{base}/chat/{bot_name(1)}", data=said) as sent:
                assert sent.status == 200, await sent.text()
            seen = await asyncio.wait_for(chat_seen(stream, bot_name(1)), 30)
            stream.close()
            # The reply so far, word by word and in order (each shown without the word still
            # being written), then the finished message, shown once.
            finished = [
                index
                for index, (part, html) in enumerate(seen)
                if part == "message" and LIVE_ANSWER in html
            ]
            assert len(finished) == 1, seen
            written = [words_shown(html) for part, html in seen[: finished[0]] if part == "reply"]
            assert written == sorted(written), written
            assert len({count for count in written if 0 < count < len(LIVE_WORDS)}) >= 3, seen

            async def on_page() -> bool:
                async with web.get(f"{base}/chat/{bot_name(1)}") as page:
                    return LIVE_ANSWER in await page.text()

            await until(on_page, 30, "the answer shows on the sending node's Chat page")
        inbound = await db.fetchrow(
            "SELECT taken_by FROM node_messages WHERE kind = 'inbound' AND to_bot = $1",
            bot_name(1),
        )
        assert inbound is not None and inbound["taken_by"] == held[bot_name(1)]
    finally:
        await db.close()


@pytest.mark.postgres
async def test_an_approval_is_answered_on_the_other_nodes_dashboard(
    tmp_path: Path, fakes: Fakes, postgres_url: str, nodes: list[Node]
) -> None:
    """A turn on the node holding bot 1 waits on an approval (a write outside its folder);
    the other node's Waiting page lists it and answers it; the turn goes on where it runs."""
    import re

    from tests.fakes.model_servers import Scripted

    home = tmp_path / "home"
    env = home_with_nodes(fakes, home, postgres_url)
    await start_nodes(env, tmp_path, nodes)
    db = await asyncpg.connect(postgres_url)
    try:
        held = await split_and_serving(fakes, nodes, db, 1)
        other = next(node for node in nodes if node.name != held[bot_name(1)])
        outside = tmp_path / "outside" / "approved.txt"
        write = {"path": str(outside), "content": "written after an approval elsewhere"}
        fakes.model.script.append(Scripted(calls=[("write_file", write)]))
        telegram = fakes.telegrams[1]
        await telegram.push(telegram.message("T1-0-5 write it", user_id=FIRST_CHAT))
        form = re.compile(r'action="/waiting/([0-9a-f]+)/approval"')
        async with logged_in(home, other) as (web, base):
            found: list[str] = []

            async def listed() -> bool:
                async with web.get(f"{base}/waiting") as page:
                    text = await page.text()
                found[:] = [*form.findall(text), *CSRF.findall(text)]
                return len(found) >= 2

            await until(listed, 30, "the other node's Waiting page lists the approval")
            ask_id, csrf = found[0], found[-1]
            answer = {"choice": "allow once", "csrf": csrf}
            async with web.post(f"{base}/waiting/{ask_id}/approval", data=answer) as sent:
                assert sent.status == 200, await sent.text()
        await until(replied(fakes, 1, "T1-0-5"), 30, "the turn goes on and answers")
        assert outside.read_text() == "written after an approval elsewhere"
        taken = await db.fetchrow(
            "SELECT taken_by FROM node_messages WHERE kind = 'ask_answer' AND to_bot = $1",
            bot_name(1),
        )
        assert taken is not None and taken["taken_by"] == held[bot_name(1)]
        outcome = await db.fetchval("SELECT outcome FROM node_asks WHERE id = $1", ask_id)
        assert outcome is not None and "allow once" in outcome
        no_answer_twice(fakes)
    finally:
        await db.close()


@pytest.mark.postgres
async def test_a_question_set_is_answered_once_on_the_other_nodes_dashboard(
    tmp_path: Path, fakes: Fakes, postgres_url: str, nodes: list[Node]
) -> None:
    """A turn on the node holding bot 1 waits on ask_user's two questions; the other node's
    Waiting page lists them, checks an answer as the holder's page would (every question
    answered), and sends the answer to the turn, which gets it once; a second answer, on
    either page, is refused as already answered."""
    import re

    from tests.fakes.model_servers import Scripted

    home = tmp_path / "home"
    env = home_with_nodes(fakes, home, postgres_url)
    await start_nodes(env, tmp_path, nodes)
    db = await asyncpg.connect(postgres_url)
    try:
        held = await split_and_serving(fakes, nodes, db, 1)
        holder = next(node for node in nodes if node.name == held[bot_name(1)])
        other = next(node for node in nodes if node.name != held[bot_name(1)])
        questions = [
            {"question": "Which database?", "choices": ["Postgres", "SQLite"]},
            {"question": "Which days?", "choices": ["Mon", "Tue", "Wed"], "multi_select": True},
        ]
        fakes.model.script.append(Scripted(calls=[("ask_user", {"questions": questions})]))
        telegram = fakes.telegrams[1]
        await telegram.push(telegram.message("T1-0-6 ask me", user_id=FIRST_CHAT))
        form = re.compile(r'action="/waiting/([0-9a-f]+)/questions"')
        htmx = {"HX-Request": "true"}
        async with (
            logged_in(home, other) as (web, base),
            logged_in(home, holder) as (web_holder, holder_base),
        ):
            found: list[str] = []

            async def listed() -> bool:
                async with web.get(f"{base}/waiting") as page:
                    text = await page.text()
                found[:] = [*form.findall(text), *CSRF.findall(text)]
                return len(found) >= 2 and "Which days?" in text

            await until(listed, 30, "the other node's Waiting page lists the question set")
            ask_id, csrf = found[0], found[-1]
            half = [("csrf", csrf), ("q0", "SQLite")]  # the second question left unanswered
            async with web.post(f"{base}/waiting/{ask_id}/questions", data=half) as refused:
                assert refused.status == 400
                assert "every question needs a choice" in await refused.text()
            answer = [*half, ("q1", "Mon"), ("q1", "Wed"), ("q1-other", "Fri")]
            url = f"{base}/waiting/{ask_id}/questions"
            async with web.post(url, data=answer, headers=htmx) as sent:
                body = await sent.text()
                assert sent.status == 200 and "Answered." in body, body
                assert f"/waiting/{ask_id}/questions" not in body  # closed on this page at once
            again = [("csrf", csrf), ("q0", "Postgres"), ("q1", "Tue")]
            async with web.post(url, data=again, headers=htmx) as second:
                assert "Those questions were already answered" in await second.text()
            await until(replied(fakes, 1, "T1-0-6"), 30, "the turn goes on and answers")
            async with web_holder.get(f"{holder_base}/waiting") as page:
                holder_csrf = CSRF.findall(await page.text())[-1]
            again[0] = ("csrf", holder_csrf)
            holder_url = f"{holder_base}/waiting/{ask_id}/questions"
            async with web_holder.post(holder_url, data=again, headers=htmx) as second:
                assert "Those questions were already answered" in await second.text()

            async def settled_here() -> bool:
                async with web.get(f"{base}/waiting/live", headers=htmx) as page:
                    text = await page.text()
                return "Answered lately" in text and "SQLite" in text

            await until(settled_here, 10, "the other node's page shows the set answered")
        received = [
            row["content"]
            for row in await db.fetch(
                "SELECT content FROM messages WHERE bot = $1 AND role = 'tool' "
                "AND content LIKE '%The user answered%'",
                bot_name(1),
            )
        ]
        assert len(received) == 1, received  # the turn got one answer, the first
        assert "1. Which database?\n   → SQLite" in received[0], received
        assert "2. Which days?\n   → Mon; Wed; in their own words: Fri" in received[0], received
        assert "Postgres" not in received[0] and "Tue" not in received[0]
        taken = await db.fetch(
            "SELECT taken_by FROM node_messages WHERE kind = 'ask_answer' AND to_bot = $1",
            bot_name(1),
        )
        assert [row["taken_by"] for row in taken] == [holder.name]
        row = await db.fetchrow("SELECT kind, outcome FROM node_asks WHERE id = $1", ask_id)
        assert row is not None and row["kind"] == "questions"
        assert row["outcome"] is not None and "SQLite" in row["outcome"]
        no_answer_twice(fakes)
    finally:
        await db.close()


@pytest.mark.postgres
async def test_a_node_serves_the_claude_code_plugin_and_records_the_persons_session(
    tmp_path: Path, postgres_url: str, nodes: list[Node]
) -> None:
    """With no plain daemon, the plugin's hook (run as Claude Code runs it) reaches the node's
    socket in its own run folder; the person's turn goes into the home's PostgreSQL record."""
    import shutil
    import stat
    import tempfile

    hook = REPO / "atlas/executors/claude_plugin/hooks/atlas_hook.py"
    root = Path(tempfile.mkdtemp(prefix="atlas-np-", dir="/tmp"))  # a socket's path: 108 bytes
    try:
        home = root / "home"
        async with Fakes(bots=1, latency=0.0) as fakes:
            env = home_with_nodes(fakes, home, postgres_url)
            with (home / "config.toml").open("a") as config:
                config.write("\n[executors.claude-code]\nenabled = true\n")
            node = Node("n1", env, tmp_path / "n1.log")
            nodes.append(node)
            node.start()
            await node.wait_logged("ready; stop with Ctrl-C or SIGTERM")
            path = home / "run/nodes/n1/executors.sock"
            assert stat.S_ISSOCK(path.stat().st_mode)
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
            assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
            assert not (home / "run/executors.sock").exists()
            desk = root / "project"
            desk.mkdir()
            hook_env = {"PATH": env["PATH"], "HOME": str(root), "ATLAS_HOME": str(home)}
            for name, fields in (
                ("SessionStart", {"source": "startup"}),
                ("UserPromptSubmit", {"prompt": "tidy the README"}),
            ):
                sent = {"session_id": "desk-1", "cwd": str(desk), "hook_event_name": name}
                done = await asyncio.to_thread(
                    subprocess.run,
                    [sys.executable, str(hook)],
                    input=json.dumps(sent | fields).encode(),
                    env=hook_env,
                    capture_output=True,
                    timeout=30,
                )
                assert (done.returncode, done.stdout) == (0, b""), done.stderr
            db = await asyncpg.connect(postgres_url)
            try:

                async def recorded() -> bool:
                    return bool(
                        await db.fetchval(
                            "SELECT COUNT(*) FROM executor_turns WHERE session_id = 'desk-1'"
                        )
                    )

                await until(recorded, 30, "the person's turn in PostgreSQL's record")
                turn = await db.fetchrow(
                    "SELECT owner, executor, prompt, folder FROM executor_turns "
                    "WHERE session_id = 'desk-1'"
                )
            finally:
                await db.close()
            assert dict(turn) == {
                "owner": "person",
                "executor": "claude-code",
                "prompt": "tidy the README",
                "folder": str(desk),
            }
            assert "the Claude Code plugin's socket: " + str(path) in node.text()
            node.signal(signal.SIGTERM)
            assert node.process is not None
            await asyncio.to_thread(node.process.wait, 60)
            assert not path.exists()  # gone with the node: the hooks fall back to the desk
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def refused_start(env: dict[str, str], *args: str) -> str:
    """`atlas run ARGS` that must stop before it serves: its output."""
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "atlas.cli", "run", *args, "--listen", f"127.0.0.1:{free_port()}"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    said = done.stdout + done.stderr
    assert done.returncode != 0, said
    assert "ready; stop with" not in said, said
    return said


@pytest.mark.postgres
async def test_a_plain_atlas_run_keeps_nodes_and_other_plain_runs_away_until_it_dies(
    tmp_path: Path, fakes: Fakes, postgres_url: str, nodes: list[Node]
) -> None:
    env = home_with_nodes(fakes, tmp_path / "home", postgres_url)
    plain = Node("plain", env, tmp_path / "plain.log", plain=True)
    nodes.append(plain)
    plain.start()
    await plain.wait_logged("ready; stop with Ctrl-C or SIGTERM")
    running = "a plain `atlas run` (without --node) of this home is running on its PostgreSQL"
    # A node started beside it would answer the bots it serves a second time.
    said = await refused_start(env, "--node", "n1")
    assert running in said and "atlas run --node n1" in said, said
    # So would a second plain daemon, here or on another machine with the same url.
    said = await refused_start(env)
    assert running in said, said
    assert PASSWORD not in said
    # Killed, it holds nothing any more: its session's lock went with its connection.
    plain.signal(signal.SIGKILL)
    assert plain.process is not None
    plain.process.wait()
    node = Node("n1", env, tmp_path / "n1.log")
    nodes.append(node)
    node.start()
    await node.wait_logged("ready; stop with Ctrl-C or SIGTERM")
    # And now a plain daemon is the one refused, the node named.
    said = await refused_start(env)
    assert "nodes of this home are running" in said and "n1" in said, said


def test_atlas_run_node_needs_a_postgresql_store(tmp_path: Path) -> None:
    from scripts.loadkit import write_home

    home = tmp_path / "home"
    write_home(
        home,
        bots=1,
        model_url="http://127.0.0.1:9/v1",
        telegram_urls=["http://127.0.0.1:9"],
        allowed_users=[FIRST_CHAT],
        concurrent_turns=1,
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "ATLAS_HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-m", "atlas.cli", "run", "--node", "n1"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    said = done.stdout + done.stderr
    assert done.returncode != 0, said
    assert "atlas run --node n1" in said and "[store] url" in said, said
    assert "ready" not in said
