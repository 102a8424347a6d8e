"""A common word: conversation_search ranks only the newest CANDIDATES matching messages (so
that it costs what a rare word does on a million messages, issue 34), and every conversation
past them is still found by paging with the `before` the answer gives. Also sort oldest, with
`after`, and a rare word (under the bound: no paging hint, as before)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from atlas.home import Home
from atlas.store.message_index import index_pending_messages
from atlas.store.search import CANDIDATES
from atlas.tools.conversations import conversation_search
from atlas.tools.registry import RunContext
from tests.helpers import close_test_stores, make_home, open_store_for_tests, run_context

PER_CONVERSATION = 50
CONVERSATIONS = 60  # 3,000 messages with the word: past the bound of 2,000
START = datetime(2025, 1, 1, tzinfo=UTC)


@pytest.fixture
async def home(home_path: Path) -> AsyncIterator[Home]:
    made = make_home(home_path)
    store = await open_store_for_tests(made.bot(None))

    def fill(db) -> None:  # type: ignore[no-untyped-def]
        with db.atomic():
            for c in range(CONVERSATIONS):
                at = (START + timedelta(hours=c)).isoformat(timespec="microseconds")
                db.execute(
                    "INSERT INTO conversations (id, bot, channel, chat, thread, user, kind, "
                    "created_at, updated_at) VALUES (?, 'atlas', 'telegram', ?, '', '', "
                    "'conversation', ?, ?)",
                    [c + 1, f"chat{c}", at, at],
                )
                db.conn.executemany(
                    "INSERT INTO messages (conversation_id, role, content, kind, created_at) "
                    "VALUES (?, 'user', ?, 'message', ?)",
                    [
                        (
                            c + 1,
                            f"the deployment of part {n}" + (" zyxquartzite" if n == 7 else ""),
                            (START + timedelta(hours=c, seconds=n)).isoformat(
                                timespec="microseconds"
                            ),
                        )
                        for n in range(PER_CONVERSATION)
                    ],
                )
        index_pending_messages(db)

    await store.db.call(fill)
    yield made
    await close_test_stores()


def _run(home: Home) -> RunContext:
    run = run_context(home, conversation_id=10_000)
    run.open_store = open_store_for_tests
    return run


async def _search(run: RunContext, **arguments: object) -> str:
    result = await conversation_search.invoke(run, arguments)
    assert not result.is_error, result.text
    return result.text


def _found(text: str) -> set[str]:
    return set(re.findall(r"^## (\S+)", text, flags=re.MULTILINE))


async def _every_page(run: RunContext, **arguments: object) -> set[str]:
    """Page as the answers say: exclude what was found until a page finds nothing."""
    found: set[str] = set()
    for _ in range(100):
        text = await _search(
            run, query="deployment", limit=10, exclude_conversation_ids=sorted(found), **arguments
        )
        page = _found(text)
        if not page:
            return found
        found |= page
    raise AssertionError("paging did not end")


def _bound(text: str, cursor: str) -> str:
    found = re.search(rf"{cursor}=(\S+) searches", text)
    assert found, text
    return found[1]


EVERY = {str(c) for c in range(1, CONVERSATIONS + 1)}


async def test_a_common_word_ranks_the_newest_matches_and_pages_to_every_one(
    home: Home,
) -> None:
    assert CONVERSATIONS * PER_CONVERSATION > CANDIDATES
    run = _run(home)
    first = await _search(run, query="deployment", limit=10)
    assert f"only the newest {CANDIDATES:,} matching messages were ranked: before=" in first
    window = {str(c) for c in range(CONVERSATIONS - CANDIDATES // PER_CONVERSATION + 1, 61)}
    assert _found(first) <= window  # the first page comes from the newest 2,000
    assert await _every_page(run) == EVERY  # excluding what was found slides the window
    # `before` jumps past the window: the conversations older than it (the oldest one of the
    # window holds both sides of the bound).
    older = await _search(run, query="deployment", limit=10, before=_bound(first, "before"))
    edge = min(int(c) for c in window)
    assert len(_found(older)) == 10 and all(int(c) <= edge for c in _found(older))
    assert "were ranked" not in older  # 1,050 matching messages before it: under the bound


async def test_sorted_oldest_first_it_pages_forward_with_after(home: Home) -> None:
    run = _run(home)
    first = await _search(run, query="deployment", limit=5, sort="oldest")
    assert _found(first) == {"1", "2", "3", "4", "5"}
    assert await _every_page(run, sort="oldest") == EVERY
    later = await _search(
        run, query="deployment", limit=10, sort="oldest", after=_bound(first, "after")
    )
    assert "41" in _found(later) and "1" not in _found(later)  # the next 2,000 begin at 41


async def test_a_rare_word_under_the_bound_needs_no_paging(home: Home) -> None:
    text = await _search(_run(home), query="zyxquartzite", limit=10)
    assert len(_found(text)) == 10 and "were ranked" not in text
