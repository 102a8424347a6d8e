"""Kill the daemon with SIGKILL at random moments under load, restart it, and check nothing is lost.

    uv run python scripts/crash_test.py [--kills 20] [--bots 3] [--conversations 12]
        [--latency 0.2] [--faults 0.05] [--workers N] [--seed N] [--json]
        [--disk-full SECONDS [--disk-size MB]]

The daemon (`atlas run` plus probes, scripts/loadkit.py) serves B Telegram bots, on fake bots
behind one Bot API address (each keeps an update until a later getUpdates confirms it, as
Telegram does), and one fake model (a read_file call in half the turns). C conversations keep
writing. The daemon is killed `--kills` times, each after a random 0.3-2.5 s of life (some
while starting), stays down 0-0.6 s, and is started again; one down time is stretched over a
routine slot whose grace is 1 s. One-off routines fall due every few seconds throughout.
`--faults R` adds an outage on top: a share R of the model's and Telegram's requests fail at
random (tests/fakes/load_fakes.py `FaultMix`: the model's 429 with Retry-After, 500, a hang past
the 3 s timeout, a context-length error, malformed tool arguments; Telegram's 429, 500 and
dropped connections), and a turn whose retries all fail tells the person so. At the end the
faults stop and the daemon starts once more, to send what the outage left owed.
`--workers N` runs the bots over N processes (`[daemon] workers = N`, atlas/workers/): each
kill then picks at random between the home's process (its workers die with it) and a worker
process, which the home's process restarts itself; the 1 s-grace slot's down time is always
the home's (its scheduler runs the routines). The checks are the same.
`--disk-full S` puts the home on a tmpfs of its own (`--disk-size` MB, mounted as root) and,
once after half the kills (the daemon up, the people writing), fills it for S seconds, then
frees it (scripts/disk_fill.py): every store write meanwhile fails with "database or disk is
full". The checks are the same: nothing lost, nothing answered twice, no chat left unanswered.

Checked at the end (after a last clean run lets everything finish):
- every inbound message is stored exactly once (the bots' conversations.db);
- every message is answered after it was sent, or the person was told the turn was cut short
  (or, with faults, that it failed);
- no reply is delivered twice (the fake's sendMessage log); every stored answer was delivered,
  except one the kill caught while the platform had it (it may or may not have arrived, and
  is never sent again): then the person got "it may not have reached you" instead;
- PRAGMA integrity_check is ok on every SQLite file of the home (after each kill and at the end),
  and so is FTS5's check of the messages' indexes; at the end, after the clean stop, every
  message is in them exactly once;
- routines: each due one ran exactly once; one due while the daemon was down ran as a
  catch-up, and the one whose 1 s grace passed while down is recorded `missed`, not run.
Exits 1 on any loss.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from atlas.agent.loop import CONTEXT_NOTE
from atlas.channels.send_errors import MAYBE_LOST as CONNECTION_BROKE
from atlas.dispatch import TURN_FAILED
from atlas.home import Home
from atlas.recovery import MAYBE_LOST, TOLD
from atlas.workers.plan import Placement
from scripts.disk_fill import HomeOnTmpfs
from scripts.loadkit import FIRST_CHAT, Daemon, Fakes, bot_name, integrity_problems, machine
from tests.fakes.load_fakes import TAG, TOOL_MARK

ROUTINE_CHAT = 9000  # routine k reports to chat ROUTINE_CHAT + k
ROUTINE_EVERY = 4.0  # seconds between one-off routine slots
MISSED_AT = 22.0  # seconds after start: the slot of the routine with a 1 s grace
REPLY_WAIT = 3.0
# Sent once per turn they speak for and never stored: a repeat is not a reply sent twice.
PER_TURN_NOTICES = (TURN_FAILED, f"({CONTEXT_NOTE}")


@dataclass
class Run:
    sent: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # tag -> bot, chat, n
    pushed_at: dict[str, float] = field(default_factory=dict)  # tag -> monotonic
    downs: list[tuple[datetime, datetime]] = field(default_factory=list)  # killed, restarted
    integrity: list[str] = field(default_factory=list)  # problems found
    kills: int = 0
    during_start: int = 0  # kills before every bot polled
    kills_by_target: Counter[str] = field(default_factory=Counter)  # "home", "worker"
    during_start_by_target: Counter[str] = field(default_factory=Counter)
    polls_at_start: list[int] = field(default_factory=list)
    routines_from: datetime | None = None  # the start the routines' times count from
    missed_window = False  # the long down time over the 1 s-grace slot happened
    stop_sending = False


def routine_due(start: datetime, k: int) -> datetime:
    """When due-k falls due: in whole seconds, as its file says."""
    return (start + timedelta(seconds=ROUTINE_EVERY * (k + 1))).replace(microsecond=0)


def routine_files(start: datetime, count: int) -> dict[str, str]:
    files = {}
    for k in range(count):
        files[f"due-{k:02d}"] = _routine(routine_due(start, k), ROUTINE_CHAT + k)
    missed_at = start + timedelta(seconds=MISSED_AT)
    files["missed-grace"] = _routine(missed_at, ROUTINE_CHAT + 99, grace="1s")
    return files


def _routine(at: datetime, chat: int, grace: str | None = None) -> str:
    when = at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S+00:00")
    lines = [f'schedule = "{when}"', 'prompt = "Say that the routine ran."']
    if grace:
        lines.append(f'grace = "{grace}"')
    lines += ["", "[target]", 'channel = "telegram:atlas"', f'chat = "{chat}"', ""]
    return "\n".join(lines)


async def converse(fakes: Fakes, run: Run, index: int, rng: random.Random) -> None:
    bot = index % len(fakes.telegrams)
    chat = FIRST_CHAT + index
    telegram = fakes.telegrams[bot]
    number = 0
    while not run.stop_sending:
        tag = f"T{bot}-{chat}-{number}"
        tool = rng.random() < 0.5
        reply = telegram.expect(tag)
        run.sent[tag] = (bot, chat, number)
        run.pushed_at[tag] = time.monotonic()
        await telegram.push(
            telegram.message(f"{tag} please {TOOL_MARK if tool else 'answer'}", user_id=chat)
        )
        # The daemon may be down: write again anyway after a while, as people do.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(reply, REPLY_WAIT)
        await asyncio.sleep(rng.uniform(0.05, 0.4))
        number += 1


def gone(pid: int) -> bool:
    """Ended (a zombie counts: it holds no file any more)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


async def wait_gone(pids: list[int], timeout: float = 5.0) -> list[int]:
    """The pids still alive after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [pid for pid in pids if not gone(pid)]
        if not alive or time.monotonic() > deadline:
            return alive
        await asyncio.sleep(0.01)


async def a_worker(daemon: Daemon, rng: random.Random, timeout: float) -> int | None:
    """A live worker process of the daemon; one being restarted (after its backoff) or not yet
    started is waited for."""
    deadline = time.monotonic() + timeout
    while daemon.alive() and time.monotonic() < deadline:
        if pids := daemon.worker_pids():
            return rng.choice(pids) if len(pids) > 1 else pids[0]
        await asyncio.sleep(0.01)
    return None


def worker_bots(home: Path, workers: int) -> list[str]:
    """The bots served by worker processes (not by the home's own process)."""
    if workers < 2:
        return []
    placement = Placement.of(Home(home), workers)
    return sorted(name for share in placement.shares[1:] for name in share)


async def kill_loop(
    daemon: Daemon,
    fakes: Fakes,
    run: Run,
    kills: int,
    rng: random.Random,
    start: float,
    workers: int = 1,
    disk: tuple[HomeOnTmpfs, float] | None = None,
) -> None:
    """Most kills come 0-2 s after every bot polls (turns in flight); one in four comes at a
    random moment of start-up (stores opening, channels connecting, recovery, routines). With
    workers, each kill picks the home's process or a worker process at random."""
    missed_done = False
    in_workers = worker_bots(daemon.home, workers)
    for number in range(kills):
        if disk is not None and number >= kills // 2 and missed_done and not disk[0].filled_at:
            # The full disk, once: the daemon up and polling, the people writing.
            with contextlib.suppress(TimeoutError):
                await fakes.wait_polling(run.polls_at_start, 30.0)
            await disk[0].full_for(disk[1])
        during_start = rng.random() < 0.25
        life = rng.uniform(0.0, 1.5) if during_start else rng.uniform(0.2, 2.0)
        down = rng.uniform(0.0, 0.6)
        # Drawn only with workers: a one-process run keeps its seeds' kill times. Until the
        # 1 s-grace slot is covered, the home's process: a worker's restart backoff (up to
        # 30 s) would let the slot pass with no one down over it.
        target = "worker" if workers > 1 and rng.random() < 0.5 else "home"
        if not missed_done and time.monotonic() - start < MISSED_AT - 0.5:
            target = "home"
        if not during_start:
            # Start-up (or faults holding a bot's first poll back) can take longer than what
            # is left before the 1 s-grace slot: never wait past the planned kill before it.
            to_slot = MISSED_AT - 1.5 - (time.monotonic() - start)
            before_slot = not missed_done and to_slot > -1.0  # the kill below still covers it
            wait = min(30.0, max(0.0, to_slot)) if before_slot else 30.0
            with contextlib.suppress(TimeoutError):
                await fakes.wait_polling(run.polls_at_start, wait)
        elapsed = time.monotonic() - start
        if not missed_done and elapsed < MISSED_AT - 0.5 and elapsed + life > MISSED_AT - 1.5:
            # Down from before the 1 s-grace slot until well after it: the home's process,
            # whose scheduler runs the routines.
            life = max(0.1, MISSED_AT - 1.5 - elapsed)
            down = 4.0
            missed_done = run.missed_window = True
        await asyncio.sleep(life)
        if target == "worker":
            # Restarted by the home's process, after a backoff of 0.5 s doubling up to 30 s.
            pid = await a_worker(daemon, rng, 45.0)
            if pid is None:
                run.integrity.append("no worker process to kill within 45 s")
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            await wait_gone([pid])
            for name in in_workers:  # what the kill could have left half written
                problems = integrity_problems(daemon.home / "bots" / name)
                run.integrity += [f"bots/{name}/{problem}" for problem in problems]
        else:
            killed = datetime.now(UTC)
            its_workers = daemon.worker_pids()
            daemon.kill()
            # PDEATHSIG: the workers die with it, as one process's tasks would.
            if outlived := await wait_gone(its_workers):
                run.integrity.append(f"worker(s) {outlived} outlived the home's process")
            run.integrity += integrity_problems(daemon.home)
            await asyncio.sleep(down)
            restarted = datetime.now(UTC)
            run.downs.append((killed, restarted))
        run.kills += 1
        run.during_start += during_start
        run.kills_by_target[target] += 1
        run.during_start_by_target[target] += during_start
        run.polls_at_start = fakes.polls()
        if target == "home":
            daemon.start()


async def outage_over(daemon: Daemon, fakes: Fakes) -> None:
    """The outage ends and Atlas restarts once more: a reply or report that the last life
    could not deliver (its retries all met faults) is owed in the store, and this start must
    send it, once."""
    fakes.end_faults()
    if daemon.stop() != 0:
        return  # reported by the caller's own stop
    before = fakes.polls()
    daemon.start()
    await fakes.wait_polling(before, 60)
    await asyncio.sleep(REPLY_WAIT)


def check(home: Path, fakes: Fakes, run: Run, routine_count: int, end: datetime) -> dict[str, Any]:
    """Every check, with what it found."""
    failures: list[str] = []
    stored: Counter[str] = Counter()
    answers: dict[int, list[str]] = defaultdict(list)  # chat -> stored final answers
    for index in range(len(fakes.telegrams)):
        path = home / "bots" / bot_name(index) / "conversations.db"
        with contextlib.closing(sqlite3.connect(path)) as db:
            rows = db.execute(
                "SELECT c.chat, c.kind, m.role, m.content, m.tool_calls FROM messages m "
                "JOIN conversations c ON c.id = m.conversation_id"
            ).fetchall()
        for chat, kind, role, content, tool_calls in rows:
            if kind != "conversation":
                continue
            if role == "user" and not content.startswith("[notice]"):
                stored.update(TAG.findall(content))
            if role == "assistant" and tool_calls in (None, "", "[]"):
                answers[int(chat.split("#")[0])].append(content)
    not_stored = [tag for tag in run.sent if stored[tag] == 0]
    twice = [tag for tag in run.sent if stored[tag] > 1]
    if not_stored:
        failures.append(f"{len(not_stored)} inbound message(s) never stored: {not_stored[:5]}")
    if twice:
        failures.append(f"{len(twice)} inbound message(s) stored more than once: {twice[:5]}")

    sent_texts: dict[int, list[str]] = defaultdict(list)
    for telegram in fakes.telegrams:
        for sent in telegram.sent:
            sent_texts[sent.chat_id].append(sent.text)
    # The "cut short" and "may not have reached you" notes may rightly go to a chat once per
    # turn they speak for; each is stored before it is sent, so more sent than stored would be
    # one note sent twice.
    notes = (TOLD, MAYBE_LOST, CONNECTION_BROKE)
    duplicates = [
        (chat, text)
        for chat, texts in sent_texts.items()
        for text, n in Counter(texts).items()
        if n > (answers[chat].count(text) if text in notes else 1)
        and not text.startswith(PER_TURN_NOTICES)
    ]
    # A tag in two messages is an answer delivered twice, whatever text went with it.
    duplicates += [tag for tag, n in fakes.replies_per_tag().items() if n > 1]
    if duplicates:
        failures.append(f"{len(duplicates)} reply(ies) delivered more than once: {duplicates[:3]}")
    # An answer killed while the platform had it may or may not have arrived; it is never sent
    # again, and the person is told so (MAYBE_LOST). One that never arrived is excused by that.
    excuses = Counter(
        {
            chat: texts.count(MAYBE_LOST) + texts.count(CONNECTION_BROKE)
            for chat, texts in sent_texts.items()
        }
    )
    # A kept answer goes out inside a later message (after "An earlier reply could not be
    # delivered"): it arrived when some message to that chat holds it.
    never_arrived = [
        (chat, text)
        for chat, texts in answers.items()
        for text in texts
        if not any(text in sent for sent in sent_texts.get(chat, []))
    ]
    undelivered = []
    for chat, text in never_arrived:
        if excuses[chat] > 0:
            excuses[chat] -= 1
        else:
            undelivered.append((chat, text))
    if undelivered:
        failures.append(
            f"{len(undelivered)} stored answer(s) never delivered (killed between storing the "
            f"answer and sending it): {undelivered[:3]}"
        )

    # Answered: a later reply in that chat echoes this turn's tag or a later one, or a notice
    # that the turn was cut short or failed reached the chat after the message was sent.
    answered_upto: dict[int, int] = defaultdict(lambda: -1)
    told_at: dict[int, list[float]] = defaultdict(list)
    failed_told = 0
    for telegram in fakes.telegrams:
        for sent in telegram.sent:
            for tag in TAG.findall(sent.text):
                number = int(tag.rsplit("-", 1)[1])
                answered_upto[sent.chat_id] = max(answered_upto[sent.chat_id], number)
            if sent.text in notes or sent.text.startswith(TURN_FAILED):
                told_at[sent.chat_id].append(sent.at)
            failed_told += sent.text.startswith(TURN_FAILED) and sent.chat_id < ROUTINE_CHAT
    unanswered = [
        tag
        for tag, (_, chat, n) in run.sent.items()
        if n > answered_upto[chat] and not any(at > run.pushed_at[tag] for at in told_at[chat])
    ]
    if unanswered:
        failures.append(
            f"{len(unanswered)} message(s) never answered nor reported: {unanswered[:5]}"
        )

    # Routines.
    with contextlib.closing(sqlite3.connect(home / "atlas.db")) as db:
        db.row_factory = sqlite3.Row
        runs = [dict(r) for r in db.execute("SELECT * FROM routine_runs ORDER BY id")]
    # What each run's target was told goes through the outbox: one row per run, keyed by it.
    told_rows: dict[int, tuple[str, str]] = {}  # run id -> (kind, state)
    with contextlib.closing(
        sqlite3.connect(home / "bots" / bot_name(0) / "conversations.db")
    ) as db:
        for key, kind, state in db.execute(
            "SELECT key, kind, state FROM outbox WHERE key LIKE 'routine-run:%'"
        ):
            told_rows[int(key.split(":")[1])] = (kind, state)
    by_name: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in runs:
        by_name[row["name"]].append(row)
    routine_notes = []
    caught_up = 0
    for k in range(routine_count):
        name = f"due-{k:02d}"
        records = by_name.get(name, [])
        assert run.routines_from is not None
        due = routine_due(run.routines_from, k)
        if due > end:
            continue
        if not records:  # due, yet never run nor recorded missed: lost
            failures.append(f"routine {name}: due at {due:%H:%M:%S} but no run recorded")
            continue
        if len(records) != 1:
            failures.append(f"routine {name}: {len(records)} run records, expected one")
        record = records[-1]
        chat = ROUTINE_CHAT + k
        deliveries = len(sent_texts.get(chat, []))
        kind, state = told_rows.get(record["id"], ("", ""))
        # A kill caught it with Telegram: it may have arrived, and is never sent again; a
        # report is followed by a note saying so (a notice of an interrupted run is not).
        caught = state == "maybe"
        if caught:
            routine_notes.append(f"{name}: {kind} caught while sending ({deliveries} sent)")
            # A report: told at least once (a note caught too is said again), and the report
            # itself at most once. A notice: at most once, nothing after it.
            texts = sent_texts.get(chat, [])
            told = sum("may not have reached you" in text for text in texts)
            if (told < 1 or deliveries - told > 1) if kind == "report" else deliveries > 1:
                failures.append(f"routine {name}: {kind} caught while sending, {deliveries} sent")
        elif record["status"] == "ok" and deliveries == 0 and state in ("pending", "kept"):
            # An outage outlasted its retries: kept in the outbox for later, not lost.
            routine_notes.append(f"{name}: ok, its report still in the outbox ({state})")
        elif record["status"] == "ok" and deliveries != 1:
            failures.append(f"routine {name}: ok but delivered {deliveries} times")
        if record["status"] == "failed":
            routine_notes.append(f"{name}: failed ({record['error']}), reported {deliveries}x")
            if deliveries == 0 and not caught:
                failures.append(f"routine {name}: {record['error']}, never reported")
        down_at_slot = any(killed < due < restarted for killed, restarted in run.downs)
        if down_at_slot:
            caught_up += 1
            if record["trigger"] != "catch-up":
                failures.append(f"routine {name}: due while down but trigger {record['trigger']!r}")
    missed = by_name.get("missed-grace", [])
    if not run.missed_window:
        routine_notes.append("missed-grace: not exercised (too few kills to reach its slot)")
    elif [r["status"] for r in missed] != ["missed"]:
        failures.append(
            "routine missed-grace (1 s grace, due while down): expected one `missed` record, got "
            f"{[(r['status'], r['trigger']) for r in missed]}"
        )
    if run.missed_window and sent_texts.get(ROUTINE_CHAT + 99):
        failures.append("routine missed-grace was delivered although its grace had passed")
    if run.integrity:
        failures += run.integrity
    return {
        "kills": run.kills,
        "kills_during_start_up": run.during_start,
        "kills_by_target": dict(run.kills_by_target),
        "kills_during_start_up_by_target": dict(run.during_start_by_target),
        "messages_sent": len(run.sent),
        "messages_stored_once": sum(1 for tag in run.sent if stored[tag] == 1),
        "replies_delivered": sum(len(t) for c, t in sent_texts.items() if c < ROUTINE_CHAT),
        "duplicate_replies": len(duplicates),
        "stored_answers_undelivered": len(undelivered),
        "answers_in_flight_at_a_kill_told_maybe_lost": sum(
            texts.count(MAYBE_LOST) for texts in sent_texts.values()
        ),
        "in_flight_answers_that_never_arrived": len(never_arrived) - len(undelivered),
        "unanswered_messages": len(unanswered),
        "told_cut_short": sum(len(times) for times in told_at.values()) - failed_told,
        "told_turn_failed": failed_told,
        "faults_injected": fakes.faults_injected(),
        "routine_runs": len(runs),
        "routines_caught_up_after_downtime": caught_up,
        "routine_notes": routine_notes,
        "integrity_checks": "ok" if not run.integrity else f"{len(run.integrity)} problem(s)",
        "failures": failures,
    }


def disk_full_figures(disk: HomeOnTmpfs, run: Run, log: str) -> dict[str, Any]:
    """What the full disk did: how long, the messages people sent meanwhile (checked with the
    others), and the log's lines about it."""
    began, ended = disk.filled_at[0], disk.freed_at[0]
    return {
        "disk_full_seconds": round(ended - began, 1),
        "disk_filled_mb": round(disk.filled_bytes / 1e6, 1),
        "messages_sent_while_full": sum(began <= at <= ended for at in run.pushed_at.values()),
        "disk_full_log_lines": len(re.findall("disk is full", log)),
    }


def keep(args: argparse.Namespace, home: Path, log: str) -> None:
    """The daemon's log and a copy of the home, when asked for (to look into a failure)."""
    if args.keep_log:
        args.keep_log.write_text(log)
    if args.keep_home:
        shutil.copytree(home, args.keep_home, dirs_exist_ok=True)


async def crash_test(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    run = Run()
    with tempfile.TemporaryDirectory(prefix="atlas-crash-") as tmp, contextlib.ExitStack() as disk:
        home = Path(tmp) / "home"
        filling = None
        if args.disk_full:
            filling = (disk.enter_context(HomeOnTmpfs(home, args.disk_size)), args.disk_full)
        async with Fakes(args.bots, args.latency, args.faults, args.seed) as fakes:
            start_at = datetime.now(UTC) + timedelta(seconds=5)  # time to start the first daemon
            routine_count = args.routines
            run.routines_from = start_at
            fakes.write_home(
                home,
                conversations=args.conversations,
                routines=routine_files(start_at, routine_count),
                workers=args.workers,
            )
            env = fakes.env(home, workers=args.workers)
            daemon = Daemon(home, env, Path(tmp) / "daemon.log")
            run.polls_at_start = fakes.polls()
            daemon.start()
            await fakes.wait_polling(run.polls_at_start, 60)
            start = time.monotonic() - (datetime.now(UTC) - start_at).total_seconds()
            talkers = [
                asyncio.create_task(converse(fakes, run, i, random.Random(rng.random())))
                for i in range(args.conversations)
            ]
            try:
                async with asyncio.timeout(args.max_seconds):
                    await kill_loop(
                        daemon, fakes, run, args.kills, rng, start, args.workers or 1, filling
                    )
                    if filling is not None and not filling[0].filled_at:  # too few kills
                        await filling[0].full_for(filling[1])
                    run.stop_sending = True
                    await asyncio.gather(*talkers)
                    # A last life long enough for every slot to pass and every turn to finish.
                    last_slot = start + ROUTINE_EVERY * routine_count + 2
                    settle = max(args.settle, last_slot - time.monotonic())
                    await asyncio.sleep(settle)
                    if args.faults:
                        await outage_over(daemon, fakes)
            finally:
                run.stop_sending = True
                for task in talkers:
                    task.cancel()
                end = datetime.now(UTC)
                code = daemon.stop()
            log = (Path(tmp) / "daemon.log").read_text(errors="replace")
            result = check(home, fakes, run, routine_count, end)
            result["recovery_log_lines"] = len(re.findall("interrupted turns: ", log))
            if filling is not None:
                result.update(disk_full_figures(filling[0], run, log))
            result["final_exit_code"] = code
            if code != 0:
                result["failures"].append(f"the last clean stop exited with {code}")
            run.integrity = integrity_problems(home, stopped_cleanly=code == 0)
            if run.integrity:
                result["failures"] += run.integrity
            keep(args, home, log)
    result.update({f"machine_{k}": v for k, v in machine().items()})
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--bots", type=int, default=3)
    parser.add_argument("--conversations", type=int, default=12)
    parser.add_argument("--latency", type=float, default=0.2, help="fake model seconds per call")
    parser.add_argument(
        "--faults", type=float, default=0.0, help="share of model and Telegram requests that fail"
    )
    parser.add_argument("--routines", type=int, default=12, help="one-off routines, 4 s apart")
    parser.add_argument("--settle", type=float, default=15.0, help="seconds of the last clean run")
    parser.add_argument("--max-seconds", type=float, default=600)
    parser.add_argument(
        "--workers",
        type=int,
        help="[daemon] workers (and $ATLAS_WORKERS) of the home; unset: the daemon's default",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--disk-full",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="fill the home's own tmpfs this long once, then free it (needs root)",
    )
    parser.add_argument("--disk-size", type=int, default=128, help="MB of the home's tmpfs")
    parser.add_argument("--keep-log", type=Path, help="write the daemon's log here")
    parser.add_argument("--keep-home", type=Path, help="copy the home here at the end")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.kills < 1:
        parser.error("--kills must be at least 1")
    result = asyncio.run(crash_test(args))
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    else:
        for key, value in result.items():
            if key == "failures":
                continue
            print(f"{key}: {value}")
        for failure in result["failures"]:
            print(f"FAILED: {failure}")
        print("result: " + ("LOSS" if result["failures"] else "no loss"))
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
