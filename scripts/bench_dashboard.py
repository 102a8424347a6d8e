"""Time the dashboard's pages over a big home: 10 bots, 100,000 stored messages.

    uv run python scripts/bench_dashboard.py [--bots 10] [--messages 100000] [--runs 20] [--json]

Each bot gets an equal share of the messages, in conversations of 50 spread over the last 60
days (so today has some), every other one an assistant answer with token usage, one in ten
calling a tool whose result follows; the main bot also has one long conversation of 5,000
messages, and atlas.db 20,000 gate decisions. The pages are asked for through aiohttp's test
client with a logged-in session (the whole path: middleware, queries on each store's thread,
templates). Prints p50/p95 in milliseconds per page (target: Home and Conversations < 100 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aiohttp.test_utils import TestClient, TestServer

from atlas.dashboard.app import build_app
from atlas.dashboard.auth import SESSION_COOKIE, Signer, read_secret
from atlas.dashboard.context import Dashboard
from atlas.home import Bot, Home, init_home
from atlas.store.conversations import ConversationStore
from atlas.store.home_db import HomeStore
from atlas.store.message_index import index_pending_messages

SEED = 20261204
PER_CONVERSATION = 50
LONG_CONVERSATION = 5_000
DECISIONS = 20_000
DAYS = 60
WORDS = [
    "deploy",
    "invoice",
    "meeting",
    "budget",
    "server",
    "report",
    "draft",
    "review",
    "schedule",
    "client",
    "error",
    "fix",
    "update",
    "build",
    "test",
    "release",
    "backup",
    "database",
    "migration",
    "zeppelin",
    "garden",
    "recipe",
    "travel",
    "ticket",
]
RARE_WORD = "quartzite"
CONFIG = """\
main = "atlas"
timezone = "UTC"
model = "fake/test-model"

[providers.fake]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"

[dashboard]
listen = "127.0.0.1:0"
"""


def make_big_home(root: Path, bots: int) -> Home:
    init_home(root)
    (root / "config.toml").write_text(CONFIG)
    example = root / "bots" / "atlas" / "bot.toml"
    for n in range(1, bots):
        folder = root / "bots" / f"bot{n}"
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(example, folder / "bot.toml")
    return Home(root)


def _rows(count: int, rng: random.Random, first_conversation: int) -> list[tuple[Any, ...]]:
    """(conversation id, role, content, tool_calls, tool_call_id, usage, model, created_at)."""
    now = datetime.now(UTC)
    start = now - timedelta(days=DAYS)
    step = (now - start) / max(count, 1)
    rows = []
    for n in range(count):
        conversation = first_conversation + n // PER_CONVERSATION
        at = (start + step * n).isoformat(timespec="microseconds")
        text = " ".join(rng.choices(WORDS, k=rng.randint(5, 40)))
        if n % 1000 == 500:  # a rare word: in one message of a thousand
            text += f" {RARE_WORD}"
        if n % 20 == 1:  # a tool call, its result next
            call = json.dumps([{"id": f"c{n}", "name": "read_file", "arguments": '{"path": "x"}'}])
            usage = json.dumps({"input_tokens": 900, "output_tokens": 20})
            rows.append((conversation, "assistant", "", call, None, usage, "fake/test-model", at))
        elif n % 20 == 2:
            rows.append((conversation, "tool", text, None, f"c{n - 1}", None, None, at))
        elif n % 2:
            usage = json.dumps({"input_tokens": 1000 + n % 500, "output_tokens": 80})
            rows.append((conversation, "assistant", text, None, None, usage, "fake/test-model", at))
        else:
            rows.append((conversation, "user", text, None, None, None, None, at))
    return rows


async def fill_store(bot: Bot, messages: int, rng: random.Random, long: int) -> ConversationStore:
    store = ConversationStore(bot.db_path)
    await store.open()
    conversations = -(-messages // PER_CONVERSATION) + (1 if long else 0)
    rows = _rows(messages, rng, 1)
    if long:  # one conversation with many messages, the newest
        rows += [(conversations, *row[1:]) for row in _rows(long, rng, conversations)]

    def insert(db: Any) -> None:
        with db.atomic():
            db.conn.executemany(
                "INSERT INTO conversations (id, bot, channel, chat, thread, user, kind, title, "
                "created_at, updated_at) VALUES (?, ?, 'telegram', ?, '', '', 'conversation', "
                "?, '', '')",
                [(c, bot.name, f"chat{c}", f"Talk {c}") for c in range(1, conversations + 1)],
            )
            db.conn.executemany(
                "INSERT INTO messages (conversation_id, role, content, tool_calls, tool_call_id, "
                "usage, model, kind, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, 'message', ?)",
                rows,
            )
            db.execute(
                "UPDATE conversations SET created_at = (SELECT MIN(created_at) FROM messages "
                "WHERE conversation_id = conversations.id), updated_at = (SELECT "
                "MAX(created_at) FROM messages WHERE conversation_id = conversations.id)"
            )
        index_pending_messages(db)

    await store.db.call(insert)
    return store


async def fill_decisions(audit: HomeStore, bots: list[str], rng: random.Random) -> None:
    rows = [
        {
            "at": (datetime.now(UTC) - timedelta(minutes=n)).isoformat(),
            "bot": rng.choice(bots),
            "conversation_id": rng.randint(1, 100),
            "run_kind": "conversation",
            "tool": rng.choice(["run_command", "write_file", "web_fetch"]),
            "arguments_digest": "",
            "summary": f"make target{n}",
            "verdict": rng.choice(["allow", "deny"]),
            "rule": "guardian",
            "reason": "bench",
            "answered_by": rng.choice(["rule", "guardian", "user"]),
        }
        for n in range(DECISIONS)
    ]
    await audit.call(lambda db: db["gate_decisions"].insert_all(rows))


async def time_pages(client: TestClient, pages: dict[str, str], runs: int) -> dict[str, Any]:
    results = {}
    for name, path in pages.items():
        answer = await client.get(path)  # warm: first opening, templates compiled
        assert answer.status == 200, (path, answer.status, await answer.text())
        timings = []
        for _ in range(runs):
            began = time.perf_counter()
            answer = await client.get(path)
            await answer.read()
            timings.append((time.perf_counter() - began) * 1000)
        timings.sort()
        results[name] = {
            "p50_ms": round(statistics.median(timings), 1),
            "p95_ms": round(timings[min(len(timings) - 1, int(len(timings) * 0.95))], 1),
        }
    return results


async def bench(bots: int, messages: int, runs: int, root: Path) -> dict[str, Any]:
    home = make_big_home(root, bots)
    rng = random.Random(SEED)
    began = time.perf_counter()
    stores: dict[str, ConversationStore] = {}
    for name, bot in home.bots.items():
        long = LONG_CONVERSATION if bot.is_main else 0
        stores[name] = await fill_store(bot, messages // bots, rng, long)
    audit = HomeStore(home.db_path)
    await fill_decisions(audit, list(home.bots), rng)
    filled = time.perf_counter() - began

    async def open_store(bot: Bot) -> ConversationStore:
        return stores[bot.name]

    signer = Signer(read_secret(home.root))
    dashboard = Dashboard(home, open_store, audit, signer)
    _, cookie = signer.new_session()
    client = TestClient(TestServer(build_app(dashboard), host="127.0.0.1"))
    await client.start_server()
    client.session.cookie_jar.update_cookies({SESSION_COOKIE: cookie})
    long_id = -(-(messages // bots) // PER_CONVERSATION) + 1
    pages = {
        "home": "/",
        "conversations": "/conversations?bot=atlas",
        "conversations_page_4": f"/conversations?bot=atlas&offset={3 * 50}",
        "search_rare_word_all_bots": f"/conversations?q={RARE_WORD}",
        # Both words are in most messages: every match is ranked (the worst case).
        "search_common_words_all_bots": "/conversations?q=zeppelin+budget",
        "read_long_conversation": f"/conversations/atlas/{long_id}",
        "read_long_conversation_late": f"/conversations/atlas/{long_id}?after="
        f"{(messages // bots) + LONG_CONVERSATION - 100}",
        "trust": "/trust",
        "usage_30_days": "/usage?days=30",
    }
    try:
        timings = await time_pages(client, pages, runs)
    finally:
        await client.close()
        for store in stores.values():
            await store.close()
        await audit.close()
    total = sum(bot.db_path.stat().st_size for bot in home.bots.values())
    return {
        "bots": bots,
        "messages": messages + LONG_CONVERSATION,
        "fill_seconds": round(filled, 1),
        "stores_mb": round(total / 1e6, 1),
        **{f"{name}_{key}": value for name, t in timings.items() for key, value in t.items()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bots", type=int, default=10)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="atlas-bench-dashboard-") as folder:
        result = asyncio.run(bench(args.bots, args.messages, args.runs, Path(folder) / "home"))
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
