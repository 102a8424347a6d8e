"""Nodes under kills: three `atlas run --node` processes of one home, one killed at random
every few seconds and restarted, while people write and routines fire.

    uv run python scripts/crash_nodes.py [--duration 150] [--nodes 3] [--bots 3]
        [--kill-every 8] [--lease 10] [--heartbeat 2] [--seed 36] [--url URL] [--json]

One PostgreSQL server (a throwaway one unless --url), one home folder shared by the nodes (on
one machine), the fake Telegram Bot API (one fake bot per Atlas bot) and the fake Slack (bot 0
also on Slack, Socket Mode) and the fake model of the tests (tests/fakes/). Each bot has one
Telegram person and bot 0 a Slack one; each person sends a tagged message, waits for its
answer (up to --answer-wait s), then sends the next. One-off routines fall due every
--routine-every seconds, each reporting to its bot's Telegram chat. Every --kill-every s
(±50 %) a node chosen at random is killed with SIGKILL and started again 1-3 s later. Fake
Slack delivers an envelope again while it is not acknowledged (as Slack does).

Then the SIGSTOP check: the node holding bot 0 is paused past its lease, a message sent to
bot 0 (taken over and answered by another node), the node resumed: it must send nothing.

Printed: messages sent, stored once, answered once, answered twice (must be 0), unanswered;
routine fires run twice (must be 0) and missed (no run at all; must be 0); the takeover time
per kill (until every bot the killed node held is held again under a newer epoch): p50, max;
the SIGSTOP check. Exits 1 when a message is stored twice or answered twice, a fire is run
twice or missed, or the paused node sent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from scripts.loadkit import FIRST_CHAT, Fakes, bot_name, free_port  # noqa: E402
from tests.fakes.load_fakes import TAG  # noqa: E402
from tests.fakes.slack_server import FakeSlack  # noqa: E402
from tests.postgres_cluster import database_for_script  # noqa: E402

PASSWORD = "crash-nodes-password"
SLACK_USER = "UALICE"
SLACK_DM = "D0001"
ROUTINE_CHAT = 9  # the tag's middle number of routine prompts: T<bot>-9-<n>


class Node:
    def __init__(self, name: str, env: dict[str, str], logs: Path) -> None:
        self.name, self.env, self.log = name, env, logs / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.paused = False

    def start(self) -> None:
        command = [sys.executable, "-m", "atlas.cli", "run", "--node", self.name]
        command += ["--listen", f"127.0.0.1:{free_port()}"]
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                command, env=self.env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO
            )

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.kill()
            self.process.wait()

    def signal(self, sig: int) -> None:
        assert self.process is not None
        os.kill(self.process.pid, sig)


async def leases(db: asyncpg.Connection) -> dict[str, tuple[str | None, int]]:
    """bot -> (live holder or None, epoch); none before a node made the tables."""
    try:
        rows = await db.fetch(
            "SELECT substr(resource, 5) AS bot, CASE WHEN expires_at > clock_timestamp() "
            "THEN holder END AS holder, epoch FROM leases WHERE starts_with(resource, 'bot:')"
        )
    except asyncpg.UndefinedTableError:
        return {}
    return {row["bot"]: (row["holder"], int(row["epoch"])) for row in rows}


def routine_file(bot: int, tag: str, at: datetime) -> str:
    return "\n".join(
        [
            f'schedule = "{at.strftime("%Y-%m-%dT%H:%M:%S+00:00")}"',
            f'bot = "{bot_name(bot)}"',
            f'prompt = "{tag} say that the routine ran."',
            "grace = 3600",
            "",
            "[target]",
            f'channel = "telegram:{bot_name(bot)}"',
            f'chat = "{FIRST_CHAT}"',
            "",
        ]
    )


class Run:
    """The home, the nodes and the people."""

    def __init__(self, args: argparse.Namespace, url: str, folder: Path, fakes: Fakes) -> None:
        self.args, self.url, self.folder, self.fakes = args, url, folder, fakes
        self.random = random.Random(args.seed)
        self.home = folder / "home"
        self.slack = FakeSlack()
        self.nodes: list[Node] = []
        self.sent: list[str] = []  # tags, as sent
        self.slack_tags: list[str] = []
        self.routine_tags: list[str] = []
        self.takeovers: list[float] = []
        self.untaken: int = 0
        self.stop_driving = asyncio.Event()
        self.drive_paused = asyncio.Event()
        self.drive_paused.set()
        self.started = time.monotonic()

    # -- setup ------------------------------------------------------------------------------

    async def prepare(self) -> None:
        await self.slack.start()
        args = self.args
        self.fakes.write_home(self.home, conversations=1)
        config = self.home / "config.toml"
        config.write_text(
            config.read_text()
            + f'\n[store]\nurl = "{self.url}"\n'
            + f"\n[cluster]\nlease_seconds = {args.lease}\nheartbeat_seconds = {args.heartbeat}\n"
        )
        bot_toml = self.home / "bots" / bot_name(0) / "bot.toml"
        bot_toml.write_text(
            bot_toml.read_text()
            + f'\n[channels.slack]\nallowed_users = ["{SLACK_USER}"]\n'
            + f'api_base = "{self.slack.api_url}"\n'
        )
        first = datetime.now(UTC) + timedelta(seconds=25)  # the nodes are up by then
        count = int((args.duration - 30) / args.routine_every)
        for n in range(max(count, 1)):
            bot = n % args.bots
            tag = f"T{bot}-{ROUTINE_CHAT}-{n + 1}"
            at = (first + timedelta(seconds=n * args.routine_every)).replace(microsecond=0)
            (self.home / "routines" / f"r{n + 1}.toml").write_text(routine_file(bot, tag, at))
            self.routine_tags.append(tag)
        env = self.fakes.env(self.home)
        env["ATLAS_STORE_PASSWORD"] = PASSWORD
        env["SLACK_BOT_TOKEN"] = self.slack.bot_token
        env["SLACK_APP_TOKEN"] = self.slack.app_token
        env["SLACK_SIGNING_SECRET"] = "signing-secret"
        for index in range(args.nodes):
            self.nodes.append(Node(f"n{index + 1}", env, self.folder))

    # -- the people -------------------------------------------------------------------------

    def replies(self) -> Counter[str]:
        counts = self.fakes.replies_per_tag()
        for posted in self.slack.posted:
            counts.update(set(TAG.findall(posted.text)))
        return counts

    async def answered(self, tag: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.replies()[tag]:
                return True
            await asyncio.sleep(0.1)
        return False

    async def telegram_person(self, bot: int) -> None:
        telegram = self.fakes.telegrams[bot]
        n = 0
        while not self.stop_driving.is_set():
            await self.drive_paused.wait()
            n += 1
            tag = f"T{bot}-0-{n}"
            self.sent.append(tag)
            await telegram.push(telegram.message(f"{tag} hello", user_id=FIRST_CHAT))
            await self.answered(tag, self.args.answer_wait)
            await asyncio.sleep(self.random.uniform(0.2, 1.0))

    async def slack_person(self) -> None:
        n = 0
        while not self.stop_driving.is_set():
            await self.drive_paused.wait()
            n += 1
            tag = f"T0-1-{n}"
            self.sent.append(tag)
            self.slack_tags.append(tag)
            event_id = f"Ev{uuid.uuid4().hex[:12]}"
            ts = self.slack.next_ts()
            event = {
                "type": "message",
                "channel": SLACK_DM,
                "channel_type": "im",
                "user": SLACK_USER,
                "text": f"{tag} hello",
                "ts": ts,
                "event_ts": ts,
                "client_msg_id": str(uuid.uuid4()),
            }
            attempt = 0
            while not self.stop_driving.is_set():  # Slack sends again until acknowledged
                try:
                    envelope = await self.slack.push_event(
                        event, event_id=event_id, retry_attempt=attempt
                    )
                    await self.slack.wait_ack(envelope, timeout=5)
                    break
                except (TimeoutError, ConnectionError, RuntimeError, AssertionError):
                    attempt += 1
            await self.answered(tag, self.args.answer_wait)
            await asyncio.sleep(self.random.uniform(0.2, 1.0))

    # -- the kills --------------------------------------------------------------------------

    async def killer(self, db: asyncpg.Connection) -> None:
        args = self.args
        while not self.stop_driving.is_set():
            await asyncio.sleep(args.kill_every * self.random.uniform(0.5, 1.5))
            if self.stop_driving.is_set():
                return
            node = self.random.choice(self.nodes)
            before = await leases(db)
            mine = {bot: epoch for bot, (holder, epoch) in before.items() if holder == node.name}
            node.kill()
            killed_at = time.monotonic()
            asyncio.get_running_loop().call_later(
                self.random.uniform(1.0, 3.0), node.start
            )  # started again
            if not mine:
                continue
            limit = killed_at + 4 * (args.lease + args.heartbeat) + 30
            while time.monotonic() < limit:
                now = await leases(db)
                if all(now[bot][0] is not None and now[bot][1] > e for bot, e in mine.items()):
                    self.takeovers.append(time.monotonic() - killed_at)
                    break
                await asyncio.sleep(0.1)
            else:
                self.untaken += 1

    # -- the SIGSTOP check ------------------------------------------------------------------

    async def pause_check(self, db: asyncpg.Connection) -> dict[str, Any]:
        args = self.args
        self.drive_paused.clear()
        await asyncio.sleep(args.answer_wait / 2)  # what is in flight settles
        held = await leases(db)
        holder = held[bot_name(0)][0]
        node = next((n for n in self.nodes if n.name == holder), None)
        if node is None or not node.alive():
            return {"done": False, "why": f"bot 0 held by {holder!r}"}
        node.signal(signal.SIGSTOP)
        paused_at = time.monotonic()
        moved = False
        while time.monotonic() - paused_at < 4 * (args.lease + args.heartbeat) + 30:
            now = await leases(db)
            if now[bot_name(0)][0] not in (None, holder):
                moved = True
                break
            await asyncio.sleep(0.1)
        took = time.monotonic() - paused_at
        tag = "T0-0-999"
        telegram = self.fakes.telegrams[0]
        await telegram.push(telegram.message(f"{tag} while it sleeps", user_id=FIRST_CHAT))
        self.sent.append(tag)
        answered = await self.answered(tag, args.answer_wait)
        before = sum(len(t.sent_texts()) for t in self.fakes.telegrams) + len(self.slack.posted)
        node.signal(signal.SIGCONT)
        await asyncio.sleep(args.lease + 2 * args.heartbeat)
        after = sum(len(t.sent_texts()) for t in self.fakes.telegrams) + len(self.slack.posted)
        self.drive_paused.set()
        return {
            "done": True,
            "node": holder,
            "moved_after_s": round(took, 1) if moved else None,
            "answered_by_another": answered,
            "sent_after_sigcont": after - before,
        }

    # -- the run ----------------------------------------------------------------------------

    async def go(self) -> dict[str, Any]:
        await self.prepare()
        db = await asyncpg.connect(self.url, password=PASSWORD)
        try:
            for node in self.nodes:
                node.start()
            while len({h for h, _ in (await leases(db)).values() if h}) < len(self.nodes):
                await asyncio.sleep(0.2)
                if time.monotonic() - self.started > 120:
                    raise SystemExit("the nodes did not come up: see their logs")
            people = [asyncio.create_task(self.telegram_person(b)) for b in range(self.args.bots)]
            people.append(asyncio.create_task(self.slack_person()))
            killer = asyncio.create_task(self.killer(db))
            await asyncio.sleep(self.args.duration)
            self.stop_driving.set()
            await killer
            await asyncio.sleep(5)  # the last restarted node is up
            for node in self.nodes:
                if not node.alive():
                    node.start()
            self.stop_driving.clear()
            pause = await self.pause_check(db)
            self.stop_driving.set()
            await asyncio.gather(*people, return_exceptions=True)
            # Let the last answers and reports out: the nodes are all up now.
            await asyncio.sleep(self.args.answer_wait)
            return await self.figures(db, pause)
        finally:
            await db.close()
            for node in self.nodes:
                node.kill()
            await self.slack.close()

    async def figures(self, db: asyncpg.Connection, pause: dict[str, Any]) -> dict[str, Any]:
        replies = self.replies()
        stored = Counter(
            tag
            for row in await db.fetch(
                "SELECT content FROM messages WHERE role = 'user' AND content ~ 'T[0-9]+-[01]-'"
            )
            for tag in set(TAG.findall(row["content"]))
        )
        people = [tag for tag in self.sent]
        runs = await db.fetch(
            "SELECT r.name, rr.scheduled_for, rr.status, rr.error FROM routine_runs rr "
            "JOIN routines r ON r.id = rr.routine_id"
        )
        per_slot = Counter((row["name"], row["scheduled_for"]) for row in runs)
        per_routine = Counter(row["name"] for row in runs)
        due = [
            f"r{n + 1}"
            for n, tag in enumerate(self.routine_tags)
            if (self.home / "routines" / f"r{n + 1}.toml").exists()
        ]
        now = datetime.now(UTC)
        due_by_now = [
            name
            for name in due
            if datetime.fromisoformat(
                (self.home / "routines" / f"{name}.toml").read_text().split('"')[1]
            )
            < now - timedelta(seconds=5)
        ]
        takeovers = sorted(self.takeovers)
        return {
            "nodes": self.args.nodes,
            "bots": self.args.bots,
            "duration_s": self.args.duration,
            "kills_with_bots": len(takeovers) + self.untaken,
            "messages_sent": len(people),
            "stored_once": sum(1 for tag in people if stored[tag] == 1),
            "stored_twice": sum(1 for tag in people if stored[tag] > 1),
            "answered_once": sum(1 for tag in people if replies[tag] == 1),
            "answered_twice": sum(1 for tag in people if replies[tag] > 1),
            "unanswered": sum(1 for tag in people if replies[tag] == 0),
            "routine_fires_due": len(due_by_now),
            "routine_fires_run_twice": sum(1 for n in per_slot.values() if n > 1)
            + sum(1 for n in per_routine.values() if n > 1),
            "routine_fires_missed": sum(1 for name in due_by_now if per_routine[name] == 0),
            "routine_runs_by_status": dict(Counter(row["status"] for row in runs)),
            # A run a kill cut short is not run again (its slot was taken): its person is told.
            "routine_runs_not_ok": sorted(
                {f"{row['status']}: {(row['error'] or '')[:60]}" for row in runs} - {"ok: "}
            ),
            "routine_reports_twice": sum(1 for tag in self.routine_tags if replies[tag] > 1),
            "takeover_p50_s": round(statistics.median(takeovers), 1) if takeovers else None,
            "takeover_max_s": round(max(takeovers), 1) if takeovers else None,
            "kills_not_taken_over": self.untaken,
            "sigstop": pause,
        }


def failed(figures: dict[str, Any]) -> list[str]:
    bad = [
        key
        for key in (
            "stored_twice",
            "answered_twice",
            "routine_fires_run_twice",
            "routine_fires_missed",
            "routine_reports_twice",
            "kills_not_taken_over",
        )
        if figures[key]
    ]
    if figures["sigstop"].get("sent_after_sigcont"):
        bad.append("sigstop")
    return bad


async def main_async(args: argparse.Namespace, url: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        async with Fakes(bots=args.bots, latency=args.latency) as fakes:
            return await Run(args, url, Path(folder), fakes).go()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an empty PostgreSQL database (default: a throwaway one)")
    parser.add_argument("--duration", type=float, default=150.0, help="seconds of kills")
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--bots", type=int, default=3)
    parser.add_argument("--kill-every", type=float, default=8.0)
    parser.add_argument("--lease", type=float, default=10.0)
    parser.add_argument("--heartbeat", type=float, default=2.0)
    parser.add_argument("--routine-every", type=float, default=5.0)
    parser.add_argument("--latency", type=float, default=0.3, help="the fake model's, seconds")
    parser.add_argument("--answer-wait", type=float, default=40.0)
    parser.add_argument("--seed", type=int, default=36)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with database_for_script(args.url, "crash_nodes") as url:
        figures = asyncio.run(main_async(args, url))
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        for key, value in figures.items():
            print(f"{key}: {value}")
    bad = failed(figures)
    if bad:
        print("FAILED: " + ", ".join(bad))
        sys.exit(1)


if __name__ == "__main__":
    main()
