"""conversation_search through its Tool (argument parsing included), against real stores in a
temporary home; and `atlas search` (search_main)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from atlas.errors import ToolError
from atlas.home import Home
from atlas.providers.base import Message, ToolCall
from atlas.search_cli import search_main
from atlas.store.conversations import ConversationStore, TextQuery
from atlas.tools.conversations import conversation_search, parse_roles, parse_when
from atlas.tools.registry import RunContext
from tests.helpers import (
    BASE_CONFIG,
    close_test_stores,
    make_home,
    open_store_for_tests,
    run_context,
)


@pytest.fixture
async def home(home_path: Path) -> AsyncIterator[Home]:
    made = make_home(home_path)
    research = made.bots_dir / "research"
    research.mkdir()
    (research / "bot.toml").write_text('title = "Research"\n')
    yield Home(home_path)
    await close_test_stores()


def _run(home: Home, bot: str | None = None, conversation_id: int = 10_000) -> RunContext:
    run = run_context(home, bot=bot, conversation_id=conversation_id)
    run.open_store = open_store_for_tests
    return run


async def _store(home: Home, bot: str = "atlas") -> ConversationStore:
    return await open_store_for_tests(home.bot(bot))


async def _conversation(store: ConversationStore, chat: str, bot: str = "atlas") -> int:
    return (await store.conversation("telegram", chat, bot=bot)).id


async def _say(
    store: ConversationStore,
    conversation_id: int,
    text: str,
    role: str = "user",
    at: datetime | None = None,
    **extra: object,
) -> int:
    message_id = await store.append(conversation_id, Message(role, text, **extra))  # type: ignore[arg-type]
    assert message_id is not None
    if at is not None:
        stamp = at.astimezone(UTC).isoformat(timespec="microseconds")

        def backdate(db):  # type: ignore[no-untyped-def]
            db.execute("UPDATE messages SET created_at = ? WHERE id = ?", [stamp, message_id])
            db.execute(
                "UPDATE conversations SET created_at = min(created_at, ?), updated_at = ? "
                "WHERE id = ?",
                [stamp, stamp, conversation_id],
            )

        await store.db.call(backdate)
    return message_id


async def _search(run: RunContext, **arguments: object) -> str:
    result = await conversation_search.invoke(run, arguments)
    assert not result.is_error, result.text
    return result.text


async def _error(run: RunContext, **arguments: object) -> str:
    result = await conversation_search.invoke(run, arguments)
    assert result.is_error, result.text
    return result.text


def _conversation_ids(text: str) -> list[str]:
    return re.findall(r"^## (\S+)", text, flags=re.MULTILINE)


def _message_ids(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"^\[#(\d+) ", text, flags=re.MULTILINE)]


# ---- the tool itself --------------------------------------------------------------------------


def test_flags_and_schema_size() -> None:
    from atlas.agent.tokens import tool_tokens

    assert conversation_search.deferred and conversation_search.read_only
    assert conversation_search.pages_itself
    assert tool_tokens(conversation_search.spec()) <= 500


async def test_without_stores_it_says_so(home: Home) -> None:
    run = run_context(home)
    assert "conversation stores" in await _error(run, query="x")


# ---- query discovery --------------------------------------------------------------------------


async def test_best_conversation_in_full_others_by_matching_messages(home: Home) -> None:
    store = await _store(home)
    best = await _conversation(store, "best")
    other = await _conversation(store, "other")
    await _say(store, best, "we need to plan the kubernetes migration")
    context_id = await _say(store, best, "sure, what cluster size?", role="assistant")
    await _say(store, best, "three nodes; the kubernetes migration is due friday")
    await _say(store, other, "unrelated chatter about lunch")
    other_hit = await _say(store, other, "did the kubernetes thing ever happen? " + "x " * 30)
    text = await _search(_run(home), query="kubernetes migration")
    assert "in full" in text
    assert _conversation_ids(text) == [str(best)]  # every word required: `other` lacks one
    assert context_id in _message_ids(text)  # in full: a message that does not match too

    text = await _search(_run(home), query="kubernetes")
    assert _conversation_ids(text) == [str(best), str(other)]
    best_block, other_block = text.split("\n\n")[1:3]
    assert "in full" in best_block and context_id in _message_ids(best_block)
    assert _message_ids(other_block) == [other_hit]  # only its matching message
    assert "**kubernetes**" in other_block
    assert "lunch" not in other_block


async def test_no_match_says_so(home: Home) -> None:
    store = await _store(home)
    await _say(store, await _conversation(store, "a"), "hello there")
    text = await _search(_run(home), query="zebra")
    assert text.startswith("No conversation matches 'zebra'")


async def test_accents_ignored_both_ways(home: Home) -> None:
    store = await _store(home)
    conversation_id = await _conversation(store, "a")
    cafe = await _say(store, conversation_id, "Rendez-vous au café de la Gare à Zürich")
    naive = await _say(store, conversation_id, "a naive resume of the facade", role="assistant")
    for query in ("cafe zurich", "CAFÉ", "zürich"):
        assert cafe in _message_ids(await _search(_run(home), query=query)), query
    text = await _search(_run(home), query="naïve résumé façade")
    assert naive in _message_ids(text)


async def test_stemming(home: Home) -> None:
    store = await _store(home)
    running = await _say(store, await _conversation(store, "a"), "I was running late")
    assert running in _message_ids(await _search(_run(home), query="runs"))


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("东京的天气", "chinese"),  # 5 characters, one run without spaces
        ("北京", "chinese"),  # two characters: shorter than a trigram
        ("東京タワー", "japanese"),
        ("회의는", "korean"),
        ("会議 明日", "japanese"),  # two short terms, both required
    ],
)
async def test_cjk_text_found(home: Home, query: str, expected: str) -> None:
    store = await _store(home)
    conversation_id = await _conversation(store, "cjk")
    ids = {
        "chinese": await _say(store, conversation_id, "我想知道东京的天气怎么样，还有北京。"),
        "japanese": await _say(store, conversation_id, "明日は東京タワーで会議があります"),
        "korean": await _say(store, conversation_id, "내일 회의는 서울에서 합니다"),
    }
    await _say(store, conversation_id, "plain english filler", role="assistant")
    text = await _search(_run(home), query=query, detail="full")
    assert ids[expected] in _message_ids(text)
    hits = await store.matching_messages(
        TextQuery.build(query, "trigram"),  # type: ignore[arg-type]
        __import__("atlas.store.conversations").store.conversations.MessageFilter(
            conversation_id=conversation_id
        ),
        limit=10,
    )
    assert [h.id for h in hits] == [ids[expected]]


async def test_cjk_no_match(home: Home) -> None:
    store = await _store(home)
    await _say(store, await _conversation(store, "a"), "明日は東京タワーで会議があります")
    assert (await _search(_run(home), query="大阪城")).startswith("No conversation")


@pytest.mark.parametrize(
    "query",
    ["c++", '"', '"unbalanced', "AND", "OR NOT", "*", "NEAR(", "NEAR(a b)", "a:b", "-x", "^", "'"],
)
async def test_fts_syntax_characters_never_error(home: Home, query: str) -> None:
    store = await _store(home)
    await _say(store, await _conversation(store, "a"), "what's new in c++ AND rust, near home")
    text = await _search(_run(home), query=query)
    assert text.startswith(("No conversation", "1 conversation"))


async def test_fts_syntax_characters_still_find_text(home: Home) -> None:
    store = await _store(home)
    target = await _say(store, await _conversation(store, "a"), "what's new in c++ AND rust*")
    for query in ("c++", "AND", '"rust', "rust*", "(rust)", "what's"):
        assert target in _message_ids(await _search(_run(home), query=query)), query


async def test_part_of_a_word_falls_back_to_trigrams(home: Home) -> None:
    store = await _store(home)
    target = await _say(store, await _conversation(store, "a"), "the Kubernetes cluster is down")
    assert target in _message_ids(await _search(_run(home), query="bernet"))
    # Under three characters there is no fallback: too many parts of words would match.
    assert (await _search(_run(home), query="be")).startswith("No conversation")


async def test_limit_default_bounds_and_exclusions(home: Home) -> None:
    store = await _store(home)
    ids = []
    for n in range(12):
        conversation_id = await _conversation(store, f"c{n}")
        await _say(store, conversation_id, f"invoice number {n}")
        ids.append(str(conversation_id))
    run = _run(home)
    first = _conversation_ids(await _search(run, query="invoice"))
    assert len(first) == 3
    text = await _search(run, query="invoice", exclude_conversation_ids=first)
    second = _conversation_ids(text)
    assert len(second) == 3 and not set(second) & set(first)
    assert f"exclude_conversation_ids=[{', '.join(second)}]" in text
    assert len(_conversation_ids(await _search(run, query="invoice", limit=10))) == 10
    assert len(_conversation_ids(await _search(run, query="invoice", limit=1))) == 1
    assert "limit" in await _error(run, query="invoice", limit=11)
    assert "limit" in await _error(run, query="invoice", limit=0)
    everything = set(ids)
    rest = _conversation_ids(await _search(run, query="invoice", exclude_conversation_ids=ids[:10]))
    assert set(rest) == everything - set(ids[:10])


async def test_sort_newest_and_oldest(home: Home) -> None:
    store = await _store(home)
    now = datetime.now(UTC)
    order = []
    for days in (30, 10, 20):
        conversation_id = await _conversation(store, f"d{days}")
        await _say(store, conversation_id, "budget review", at=now - timedelta(days=days))
        order.append((days, str(conversation_id)))
    by_age = [cid for _, cid in sorted(order)]
    run = _run(home)
    assert _conversation_ids(await _search(run, query="budget", sort="newest")) == by_age
    assert _conversation_ids(await _search(run, query="budget", sort="oldest")) == by_age[::-1]


async def test_detail_full_shows_every_conversation_whole(home: Home) -> None:
    store = await _store(home)
    context = []
    for chat in ("a", "b"):
        conversation_id = await _conversation(store, chat)
        await _say(store, conversation_id, "the quarterly report")
        context.append(await _say(store, conversation_id, "noted", role="assistant"))
    adaptive = _message_ids(await _search(_run(home), query="quarterly"))
    full = _message_ids(await _search(_run(home), query="quarterly", detail="full"))
    assert len(set(context) & set(adaptive)) == 1
    assert set(context) <= set(full)


async def test_a_long_best_conversation_is_bounded_around_its_matches(home: Home) -> None:
    store = await _store(home)
    conversation_id = await _conversation(store, "long")
    for n in range(120):
        text = "the needle is here" if n == 60 else f"filler message {n} " + "words " * 60
        await _say(store, conversation_id, text)
    run = _run(home)
    text = await _search(run, query="needle")
    assert len(text) <= run.settings.limits.tool_result_chars
    ids = _message_ids(text)
    assert len(ids) < 120 and any("needle" in line for line in text.splitlines())
    assert f"conversation_id={conversation_id} reads it all" in text
    assert "messages …" in text  # gaps are marked


# ---- dates ------------------------------------------------------------------------------------


async def test_relative_dates(home: Home) -> None:
    store = await _store(home)
    now = datetime.now(UTC)
    ages = {}
    for label, delta in (("hour", timedelta(hours=2)), ("days", timedelta(days=3))):
        conversation_id = await _conversation(store, label)
        await _say(store, conversation_id, "status update", at=now - delta)
        ages[label] = str(conversation_id)
    conversation_id = await _conversation(store, "weeks")
    await _say(store, conversation_id, "status update", at=now - timedelta(weeks=3))
    ages["weeks"] = str(conversation_id)
    run = _run(home)
    assert _conversation_ids(await _search(run, query="status", after="24h")) == [ages["hour"]]
    found = _conversation_ids(await _search(run, query="status", after="7d", sort="newest"))
    assert found == [ages["hour"], ages["days"]]
    assert _conversation_ids(await _search(run, query="status", before="2w")) == [ages["weeks"]]
    assert _conversation_ids(await _search(run, query="status", after="1w", before="1d")) == [
        ages["days"]
    ]
    assert "in that time range" in await _search(run, query="status", after="1h")


async def test_iso_dates_in_the_users_timezone(home_path: Path) -> None:
    make_home(
        home_path,
        config=BASE_CONFIG.replace('"UTC"', '"Asia/Tokyo"').format(
            base_url="http://127.0.0.1:9/v1"
        ),
    )
    tokyo_home = Home(home_path)
    try:
        store = await _store(tokyo_home)
        conversation_id = await _conversation(store, "a")
        # 16:00 UTC on 1 May is 01:00 on 2 May in Tokyo.
        await _say(store, conversation_id, "launch day", at=datetime(2024, 5, 1, 16, tzinfo=UTC))
        run = _run(tokyo_home)
        text = await _search(run, query="launch", after="2024-05-02")
        assert _conversation_ids(text) == [str(conversation_id)]
        assert "2024-05-02 01:00" in text and "Asia/Tokyo" in text
        assert "in that time range" in await _search(run, query="launch", before="2024-05-02")
        assert _conversation_ids(await _search(run, query="launch", before="2024-05-02T02:00"))
        assert _conversation_ids(
            await _search(run, query="launch", after="2024-05-01T16:00:00+00:00")
        )
        assert "in that time range" in await _search(
            run, query="launch", after="2024-05-01T16:00:01Z"
        )
    finally:
        await close_test_stores()


async def test_bad_dates_are_explained(home: Home) -> None:
    run = _run(home)
    assert "after='yesterday' is not a date" in await _error(run, query="x", after="yesterday")
    assert "is not earlier than" in await _error(run, query="x", after="1d", before="2d")


def test_parse_when() -> None:
    zone = ZoneInfo("Europe/Paris")
    now = datetime(2024, 6, 15, 12, tzinfo=zone)
    assert parse_when("7d", zone, now, name="after") == now - timedelta(days=7)
    assert parse_when(" 24H ", zone, now, name="after") == now - timedelta(hours=24)
    assert parse_when("2w", zone, now, name="after") == now - timedelta(weeks=2)
    assert parse_when("2024-05-01", zone, now, name="after") == datetime(2024, 5, 1, tzinfo=zone)
    assert parse_when("2024-05-01T10:00", zone, now, name="after").utcoffset() == timedelta(hours=2)
    assert parse_when("2024-05-01T10:00Z", zone, now, name="after").utcoffset() == timedelta(0)
    with pytest.raises(ToolError, match="before='7x'"):
        parse_when("7x", zone, now, name="before")


# ---- roles ------------------------------------------------------------------------------------


async def test_role_filter(home: Home) -> None:
    store = await _store(home)
    conversation_id = await _conversation(store, "a")
    await _say(store, conversation_id, "look up the weather")
    calling = await _say(
        store,
        conversation_id,
        "",
        role="assistant",
        tool_calls=[ToolCall("c1", "web_search", "{}")],
    )
    output = await _say(
        store,
        conversation_id,
        "sunny, 24 degrees",
        role="tool",
        tool_call_id="c1",
        name="web_search",
    )
    run = _run(home)
    assert (await _search(run, query="sunny")).startswith("No conversation")
    with_tools = await _search(run, query="sunny", role_filter="user,assistant,tool")
    assert output in _message_ids(with_tools) and calling in _message_ids(with_tools)
    assert "(calls web_search)" in with_tools
    # Reading the conversation: tool output and tool-only messages stay out unless asked.
    plain = await _search(run, conversation_id=conversation_id)
    assert output not in _message_ids(plain) and calling not in _message_ids(plain)
    only_tools = await _search(run, query="sunny", role_filter="tool")
    assert output in _message_ids(only_tools)
    assert "role_filter='robot'" in await _error(run, role_filter="robot")
    assert parse_roles("Tool, user") == ("tool", "user")


# ---- reading a conversation -------------------------------------------------------------------


async def test_around_message_window(home: Home) -> None:
    store = await _store(home)
    conversation_id = await _conversation(store, "a")
    ids = [await _say(store, conversation_id, f"line {n}") for n in range(30)]
    run = _run(home)
    text = await _search(run, conversation_id=conversation_id, around_message_id=ids[15], window=2)
    assert _message_ids(text) == ids[13:18]
    assert f"earlier: around_message_id={ids[13]}" in text
    assert f"later: around_message_id={ids[17]}" in text
    default = await _search(run, conversation_id=str(conversation_id), around_message_id=ids[15])
    assert _message_ids(default) == ids[10:21]
    edge = await _search(run, conversation_id=conversation_id, around_message_id=ids[0], window=20)
    assert _message_ids(edge) == ids[:21] and "earlier:" not in edge
    alone = await _search(run, conversation_id=conversation_id, around_message_id=ids[3], window=0)
    assert _message_ids(alone) == [ids[3]]
    assert "window" in await _error(
        run, conversation_id=conversation_id, around_message_id=ids[3], window=21
    )


async def test_around_message_mistakes(home: Home) -> None:
    store = await _store(home)
    first = await _conversation(store, "a")
    second = await _conversation(store, "b")
    message = await _say(store, first, "hi")
    run = _run(home)
    assert "needs the conversation_id" in await _error(run, around_message_id=message)
    assert f"message {message} is not in conversation {second}" in await _error(
        run, conversation_id=second, around_message_id=message
    )
    assert "not both" in await _error(
        run, conversation_id=first, around_message_id=message, query="hi"
    )
    assert "there is no conversation 999" in await _error(run, conversation_id=999)
    assert "not an id" in await _error(run, conversation_id="twelve")


async def test_whole_conversation_paged(home: Home) -> None:
    store = await _store(home)
    conversation_id = await _conversation(store, "a")
    ids = [await _say(store, conversation_id, f"part {n} " + "text " * 400) for n in range(40)]
    run = _run(home)
    seen: list[int] = []
    offset = 0
    for _ in range(40):
        text = await _search(run, conversation_id=conversation_id, offset=offset)
        assert len(text) <= run.settings.limits.tool_result_chars
        seen += _message_ids(text)
        more = re.search(r"next page: offset=(\d+)", text)
        if not more:
            break
        offset = int(more[1])
    assert seen == ids
    newest = await _search(run, conversation_id=conversation_id, sort="newest")
    assert _message_ids(newest) == ids[-len(_message_ids(newest)) :]


async def test_query_within_one_conversation(home: Home) -> None:
    store = await _store(home)
    first = await _conversation(store, "a")
    second = await _conversation(store, "b")
    await _say(store, first, "the deadline moved")
    target = await _say(store, second, "the deadline is today")
    text = await _search(_run(home), query="deadline", conversation_id=second)
    assert _conversation_ids(text) == [str(second)] and target in _message_ids(text)


# ---- browsing ---------------------------------------------------------------------------------


async def test_nothing_browses_the_latest(home: Home) -> None:
    store = await _store(home)
    now = datetime.now(UTC)
    made = []
    for days in (5, 1, 3, 9):
        conversation_id = await _conversation(store, f"d{days}")
        await _say(
            store, conversation_id, f"opening {days}", at=now - timedelta(days=days, hours=1)
        )
        for n in range(4):
            await _say(
                store,
                conversation_id,
                f"reply {days}.{n}",
                role="assistant",
                at=now - timedelta(days=days),
            )
        made.append((days, str(conversation_id)))
    await _conversation(store, "empty")  # no messages: not listed
    run = _run(home)
    text = await _search(run)
    by_age = [cid for _, cid in sorted(made)]
    assert _conversation_ids(text) == by_age[:3]
    assert "opening 1" in text and "reply 1.3" in text and "… 2 messages …" in text
    assert _conversation_ids(await _search(run, sort="oldest", limit=2)) == by_age[::-1][:2]
    assert _conversation_ids(await _search(run, after="4d")) == by_age[:2]
    assert _conversation_ids(await _search(run, exclude_conversation_ids=by_age[:3])) == [by_age[3]]
    full = await _search(run, detail="full", limit=1)
    assert all(f"reply 1.{n}" in full for n in range(4))


async def test_browse_with_nothing_stored(home: Home) -> None:
    assert await _search(_run(home)) == "No conversations yet."


# ---- scope: the main agent and the other bots -------------------------------------------------


async def test_main_agent_searches_every_bot_a_bot_only_its_own(home: Home) -> None:
    main_store = await _store(home, "atlas")
    research_store = await _store(home, "research")
    mine = await _conversation(main_store, "m")
    theirs = await _conversation(research_store, "r", bot="research")
    await _say(main_store, mine, "the solar panel quote")
    their_message = await _say(research_store, theirs, "solar panel efficiency papers")

    main_view = await _search(_run(home), query="solar")
    assert sorted(_conversation_ids(main_view)) == sorted([str(mine), f"research:{theirs}"])
    scrolled = await _search(
        _run(home), conversation_id=f"research:{theirs}", around_message_id=their_message
    )
    assert their_message in _message_ids(scrolled)

    research_run = _run(home, "research")
    research_view = await _search(research_run, query="solar")
    assert _conversation_ids(research_view) == [str(theirs)]  # its own ids are plain
    assert "bot 'research' can search only its own" in await _error(
        research_run, conversation_id=f"atlas:{mine}"
    )
    assert "only its own" in await _error(
        research_run, query="solar", exclude_conversation_ids=[f"atlas:{mine}"]
    )
    assert "there is no bot 'ghost'" in await _error(_run(home), conversation_id="ghost:1")
    browsed = await _search(research_run)
    assert _conversation_ids(browsed) == [str(theirs)]


async def test_main_agent_does_not_create_stores_for_silent_bots(home: Home) -> None:
    await _store(home, "atlas")
    await _search(_run(home), query="anything")
    assert not home.bot("research").db_path.exists()


async def test_current_conversation_is_marked(home: Home) -> None:
    store = await _store(home)
    conversation_id = await _conversation(store, "a")
    await _say(store, conversation_id, "remember the milk")
    text = await _search(_run(home, conversation_id=conversation_id), query="milk")
    assert "(this conversation)" in text


# ---- atlas search -----------------------------------------------------------------------------


async def test_search_cli(home: Home, capsys: pytest.CaptureFixture[str]) -> None:
    main_store = await _store(home, "atlas")
    research_store = await _store(home, "research")
    mine = await _conversation(main_store, "m")
    theirs = await _conversation(research_store, "r", bot="research")
    mine_message = await _say(main_store, mine, "the garden fence")
    await _say(research_store, theirs, "fence posts and concrete")
    await close_test_stores()  # the CLI opens the stores itself

    assert await search_main(home, "fence", None, True) == 0
    data = json.loads(capsys.readouterr().out)
    assert {(c["bot"], c["id"]) for c in data["conversations"]} == {
        ("atlas", mine),
        ("research", theirs),
    }
    assert data["index"] == "words"
    assert await search_main(home, "garden", "atlas", True) == 0
    only = json.loads(capsys.readouterr().out)["conversations"]
    assert [(c["bot"], [m["id"] for m in c["messages"]]) for c in only] == [
        ("atlas", [mine_message])
    ]
    assert "**garden**" in only[0]["messages"][0]["snippet"]

    assert await search_main(home, "fence", None, False) == 0
    out = capsys.readouterr().out
    assert f"## atlas:{mine}" in out and f"## research:{theirs}" in out
    assert await search_main(home, "zebra", None, False) == 1
    assert "no conversation matches" in capsys.readouterr().err
    assert await search_main(home, "  ", None, False) == 2
