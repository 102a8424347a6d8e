"""The same calls and the same search queries on both engines: a bot's SQLite file (the embedded
default) and the home's PostgreSQL database (`[store] url`). Every test here runs twice; the
PostgreSQL run carries the `postgres` marker and a throwaway server (tests/postgres_cluster.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from atlas.errors import AtlasError
from atlas.providers.base import Message, ToolCall, Usage
from atlas.store.conversations import ConversationStore
from atlas.store.engine import ConversationEngine
from atlas.store.pg.conversations import PgConversationStore
from atlas.store.pg.server import PgServer
from atlas.store.search import MessageFilter, TextQuery, has_cjk

BOT = "atlas"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def engine(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[ConversationEngine]:
    if request.param == "sqlite":
        store: ConversationEngine = ConversationStore(tmp_path / "conversations.db")
        async with store:  # type: ignore[attr-defined]
            yield store
        return
    url = request.getfixturevalue("postgres_url")
    async with PgServer(url) as server:
        yield PgConversationStore(server, BOT)


async def _chat(engine: ConversationEngine, chat: str = "c1") -> int:
    return (await engine.conversation("telegram", chat, bot=BOT)).id


async def _say(
    engine: ConversationEngine, conversation_id: int, text: str, role: str = "user"
) -> int:
    message_id = await engine.append(conversation_id, Message(role, text))  # type: ignore[arg-type]
    assert message_id is not None
    return message_id


def test_both_stores_are_engines(tmp_path: Path) -> None:
    assert isinstance(ConversationStore(tmp_path / "c.db"), ConversationEngine)
    assert isinstance(
        PgConversationStore(PgServer("postgresql://x@127.0.0.1/x"), BOT), ConversationEngine
    )


# ---- conversations and history ----------------------------------------------------------------


async def test_a_conversation_is_made_once(engine: ConversationEngine) -> None:
    first = await engine.conversation("slack", "C1", thread="t", user="u", bot=BOT, title="hi")
    again = await engine.conversation("slack", "C1", thread="t", user="u", bot=BOT, kind="bot")
    other = await engine.conversation("slack", "C1", thread="t2", user="u", bot=BOT)
    assert again == first and first.kind == "conversation" and first.title == "hi"
    assert other.id != first.id
    assert await engine.get_conversation(first.id) == first
    assert await engine.get_conversation(first.id + 1000) is None


async def test_history_round_trips_every_field(engine: ConversationEngine) -> None:
    conversation_id = await _chat(engine)
    calls = [ToolCall("call_1", "run_command", '{"command": "ls"}')]
    await _say(engine, conversation_id, "list my files")
    asked = await engine.append(conversation_id, Message("assistant", "", tool_calls=calls))
    await engine.append(
        conversation_id, Message("tool", "a.txt\nb.txt", tool_call_id="call_1", name="run_command")
    )
    answer = await engine.append(
        conversation_id,
        Message("assistant", "Two files: a.txt, b.txt — naïve 東京"),
        usage=Usage(input_tokens=10, output_tokens=3),
        model="openai/x",
        answers_upto=asked,
    )
    history = await engine.history(conversation_id)
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
    assert history[1].tool_calls == calls
    assert history[2].tool_call_id == "call_1" and history[2].name == "run_command"
    assert history[3].content == "Two files: a.txt, b.txt — naïve 東京"
    assert history[3].id == answer and history[3].answers_upto == asked
    assert await engine.usage_totals(conversation_id) == Usage(input_tokens=10, output_tokens=3)


async def test_an_event_is_stored_once_across_conversations(engine: ConversationEngine) -> None:
    first, second = await _chat(engine, "a"), await _chat(engine, "b")
    stored = await engine.append(first, Message("user", "hi"), event_id="ev1")
    assert stored is not None
    assert await engine.append(first, Message("user", "hi"), event_id="ev1") is None
    assert await engine.append(second, Message("user", "hi"), event_id="ev1") is None
    assert [m.id for m in await engine.history(first)] == [stored]
    assert await engine.history(second) == []


async def test_unless_user_after_drops_a_stale_answer(engine: ConversationEngine) -> None:
    conversation_id = await _chat(engine)
    asked = await _say(engine, conversation_id, "question")
    newer = await _say(engine, conversation_id, "and another")
    assert await engine.newest_user_message_id(conversation_id) == newer
    stale = Message("assistant", "answer to the first")
    assert await engine.append(conversation_id, stale, unless_user_after=asked) is None
    assert await engine.append(conversation_id, stale, unless_user_after=newer) is not None


async def test_a_message_moves_its_conversation_forward(engine: ConversationEngine) -> None:
    conversation = await engine.conversation("telegram", "c", bot=BOT)
    await _say(engine, conversation.id, "hello")
    moved = await engine.get_conversation(conversation.id)
    assert moved is not None and moved.updated_at > conversation.updated_at


async def test_appending_to_a_missing_conversation_names_it(engine: ConversationEngine) -> None:
    with pytest.raises(AtlasError, match="no conversation with id 999"):
        await engine.append(999, Message("user", "hello"))


async def test_compactions(engine: ConversationEngine) -> None:
    conversation_id = await _chat(engine)
    assert await engine.last_compaction(conversation_id) is None
    await engine.record_compaction(conversation_id, 5, "old summary")
    await engine.record_compaction(conversation_id, 9, "new summary")
    assert await engine.last_compaction(conversation_id) == (9, "new summary")


async def test_a_turns_history_after_a_compaction_is_the_first_message_and_those_kept(
    engine: ConversationEngine,
) -> None:
    """What the tool loop reads each turn (`history_and_compaction`): the same on both."""
    conversation_id = await _chat(engine)
    ids = [await _say(engine, conversation_id, f"message {n}") for n in range(5)]
    messages, compaction = await engine.history_and_compaction(conversation_id)
    assert [m.content for m in messages] == [f"message {n}" for n in range(5)]
    assert compaction is None
    await engine.record_compaction(conversation_id, ids[3], "the summary")
    await _say(engine, conversation_id, "after it", role="assistant")
    messages, compaction = await engine.history_and_compaction(conversation_id)
    assert [m.content for m in messages] == ["message 0", "message 3", "message 4", "after it"]
    assert [m.id for m in messages][:3] == [ids[0], ids[3], ids[4]]
    assert compaction == (ids[3], "the summary")


async def test_a_thread_is_known_in_any_generation_of_its_chat(engine: ConversationEngine) -> None:
    """What Slack asks after a restart (is this a thread the bot is in?): the same on both."""
    await engine.conversation("slack:atlas", "C1#2", thread="171.5", bot=BOT)
    await engine.conversation("slack:atlas", "C_9", thread="171.6", bot=BOT)
    assert await engine.thread_known("slack:atlas", "C1", "171.5")
    assert not await engine.thread_known("slack:atlas", "C1", "171.6")
    assert not await engine.thread_known("slack:other", "C1", "171.5")
    assert not await engine.thread_known("slack:atlas", "C2", "171.5")
    assert await engine.thread_known("slack:atlas", "C_9", "171.6")


# ---- search: the same queries, the same answers -----------------------------------------------


async def _found(engine: ConversationEngine, query: str) -> set[int]:
    return {hit.message_id for hit in await engine.search(query)}


async def test_words_search_stems_and_ignores_accents_and_case(engine: ConversationEngine) -> None:
    conversation_id = await _chat(engine)
    cafe = await _say(engine, conversation_id, "Rendez-vous au café de la Gare à Zürich")
    naive = await _say(engine, conversation_id, "a naive resume of the facade", "assistant")
    running = await _say(engine, conversation_id, "I was running late")
    await _say(engine, conversation_id, "plain filler about nothing")
    for query in ("cafe zurich", "CAFÉ", "zürich", "rendez-vous", "vous"):
        assert await _found(engine, query) == {cafe}, query
    assert await _found(engine, "naïve résumé façade") == {naive}
    assert await _found(engine, "runs") == {running}
    # Every word must appear; stop words count as words (FTS5 drops none).
    assert await _found(engine, "the") == {naive}
    assert await _found(engine, "cafe running") == set()


async def test_words_search_splits_as_fts5_does(engine: ConversationEngine) -> None:
    """URLs, paths, addresses and dotted names are words apart, as unicode61 splits them."""
    conversation_id = await _chat(engine)
    url = await _say(engine, conversation_id, "see https://example.com/docs/setup_guide.html")
    mail = await _say(engine, conversation_id, "write to ops@atlas.dev about v2.5")
    path = await _say(engine, conversation_id, "the log is in /var/log/atlas/daemon.log")
    assert await _found(engine, "example") == {url}
    assert await _found(engine, "setup guide") == {url}
    assert await _found(engine, "atlas") == {mail, path}
    assert await _found(engine, "ops@atlas.dev") == {mail}  # one phrase: its words in order
    assert await _found(engine, "v2.5") == {mail}
    assert await _found(engine, "2.5") == set()  # the tokens are "v2" and "5"
    assert await _found(engine, "daemon.log") == {path}
    assert await _found(engine, "log.daemon") == set()  # a phrase keeps its order


@pytest.mark.parametrize(
    "query",
    [
        "c++",
        '"',
        '"unbalanced',
        "AND",
        "OR NOT",
        "*",
        "NEAR(",
        "NEAR(a b)",
        "a:b",
        "-x",
        "^",
        "'",
        "!",
        "&",
        "|",
        "<->",
        "\\",
        "%",
        "_",
    ],
)
async def test_syntax_characters_never_error(engine: ConversationEngine, query: str) -> None:
    conversation_id = await _chat(engine)
    await _say(engine, conversation_id, "what's new in c++ AND rust, near home")
    assert len(await engine.search(query)) <= 1
    for index in ("words", "trigram"):
        text_query = TextQuery.build(query, index)  # type: ignore[arg-type]
        if text_query is not None:
            where = MessageFilter(conversation_id=conversation_id)
            assert len(await engine.matching_messages(text_query, where, limit=5)) <= 1


async def test_syntax_characters_still_find_text(engine: ConversationEngine) -> None:
    conversation_id = await _chat(engine)
    target = await _say(engine, conversation_id, "what's new in c++ AND rust*")
    await _say(engine, conversation_id, "nothing to see")
    for query in ("c++", "AND", '"rust', "rust*", "(rust)", "what's"):
        assert await _found(engine, query) == {target}, query


async def test_ranking_and_limit(engine: ConversationEngine) -> None:
    conversation_id = await _chat(engine)
    once = await _say(engine, conversation_id, "deploy the service after lunch with the team")
    thrice = await _say(engine, conversation_id, "deploy deploy deploy")
    hits = await engine.search("deploy")
    assert [hit.message_id for hit in hits] == [thrice, once]
    assert [hit.message_id for hit in await engine.search("deploy", limit=1)] == [thrice]
    assert "**deploy**" in hits[1].snippet
    other = await _chat(engine, "other")
    elsewhere = await _say(engine, other, "deploy it")
    only = await engine.search("deploy", conversation_id=other)
    assert [hit.message_id for hit in only] == [elsewhere]


CJK_MESSAGES = {
    "chinese": "我想知道东京的天气怎么样，还有北京。",
    "japanese": "明日は東京タワーで会議があります",
    "korean": "내일 회의는 서울에서 합니다",
}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("东京的天气", {"chinese"}),  # 5 characters, one run without spaces
        ("北京", {"chinese"}),  # two characters: shorter than a trigram
        ("東京タワー", {"japanese"}),
        ("東京", {"japanese"}),  # simplified 东 and traditional 東 are different characters
        ("회의는", {"korean"}),
        ("회의", {"korean"}),
        ("会議 明日", {"japanese"}),  # two short terms, both required
        ("大阪城", set()),
        ("会議 北京", set()),
    ],
)
async def test_cjk_through_the_substring_index(
    engine: ConversationEngine, query: str, expected: set[str]
) -> None:
    assert has_cjk(query)
    conversation_id = await _chat(engine)
    ids = {name: await _say(engine, conversation_id, text) for name, text in CJK_MESSAGES.items()}
    await _say(engine, conversation_id, "plain english filler", "assistant")
    text_query = TextQuery.build(query, "trigram")
    assert text_query is not None
    where = MessageFilter(conversation_id=conversation_id)
    hits = await engine.matching_messages(text_query, where, limit=10)
    assert {hit.id for hit in hits} == {ids[name] for name in expected}
    for hit in hits:
        assert "**" in (hit.snippet or "")
    matches = await engine.match_conversations(
        text_query, MessageFilter(), sort="relevance", limit=5
    )
    assert [m.conversation.id for m in matches] == ([conversation_id] if expected else [])


async def test_parts_of_words_through_the_substring_index(engine: ConversationEngine) -> None:
    conversation_id = await _chat(engine)
    target = await _say(engine, conversation_id, "the Kubernetes cluster is down")
    await _say(engine, conversation_id, "all good here")
    where = MessageFilter(conversation_id=conversation_id)
    for query, expected in (("bernet", {target}), ("KUBER", {target}), ("bernet xyz", set())):
        text_query = TextQuery.build(query, "trigram")
        assert text_query is not None
        hits = await engine.matching_messages(text_query, where, limit=10)
        assert {hit.id for hit in hits} == expected, query
    # The word index does not find parts of words.
    assert await _found(engine, "bernet") == set()


async def test_match_conversations_filters_and_sorts(engine: ConversationEngine) -> None:
    older, newer = await _chat(engine, "older"), await _chat(engine, "newer")
    await _say(engine, older, "budget review on friday")
    await _say(engine, older, "the budget again, budget budget", "assistant")
    await _say(engine, newer, "budget?")
    await engine.append(newer, Message("tool", "budget.xlsx", tool_call_id="c", name="ls"))
    query = TextQuery.build("budget", "words")
    assert query is not None

    async def ids(where: MessageFilter, sort: str) -> list[tuple[int, int]]:
        found = await engine.match_conversations(query, where, sort=sort, limit=10)  # type: ignore[arg-type]
        return [(m.conversation.id, m.hits) for m in found]

    assert await ids(MessageFilter(), "newest") == [(newer, 1), (older, 2)]
    assert await ids(MessageFilter(), "oldest") == [(older, 2), (newer, 1)]
    assert await ids(MessageFilter(roles=("user", "assistant", "tool")), "newest") == [
        (newer, 2),
        (older, 2),
    ]
    assert await ids(MessageFilter(roles=("assistant",)), "relevance") == [(older, 1)]
    assert await ids(MessageFilter(exclude=(older,)), "relevance") == [(newer, 1)]
    best = await engine.match_conversations(query, MessageFilter(), sort="relevance", limit=10)
    assert best[0].conversation.id == older  # "budget" three times beats once
    assert await ids(MessageFilter(after="2999-01-01T00:00:00"), "newest") == []
    messages = await engine.matching_messages(
        query, MessageFilter(conversation_id=older), limit=10, chars=10
    )
    assert [m.content for m in messages] == ["the budget", "budget rev"]
    assert messages[0].length == len("the budget again, budget budget")


# ---- browsing: reading a conversation, one message, summaries ----------------------------------


async def test_read_messages_pages_and_cuts(engine: ConversationEngine) -> None:
    conversation_id = await _chat(engine)
    ids = [await _say(engine, conversation_id, f"message number {n}") for n in range(5)]
    await engine.append(
        conversation_id, Message("tool", "tool output", tool_call_id="c", name="ls")
    )
    calls = [ToolCall("c2", "read_file", "{}")]
    await engine.append(conversation_id, Message("assistant", "", tool_calls=calls))
    where = MessageFilter(conversation_id=conversation_id)

    async def read(**options: object) -> list[int]:
        return [m.id for m in await engine.read_messages(where, **options)]  # type: ignore[arg-type]

    assert await read(limit=10) == ids  # the tool's and the tools-only messages are left out
    assert await read(limit=2, offset=1) == ids[1:3]
    assert await read(limit=10, after_id=ids[1], before_id=ids[4]) == ids[2:4]
    assert await read(limit=2, newest_first=True) == [ids[4], ids[3]]
    every_role = MessageFilter(("user", "assistant", "tool"), conversation_id=conversation_id)
    shown = await engine.read_messages(every_role, limit=10, chars=7)
    assert [m.content for m in shown[-2:]] == ["tool ou", ""]
    assert shown[-1].tool_names == ("read_file",) and shown[0].length == len("message number 0")
    one = await engine.get_message(ids[2], chars=7)
    assert one is not None and (one.content, one.length, one.role) == ("message", 16, "user")
    assert await engine.get_message(ids[-1] + 100) is None


async def test_summaries_count_what_passes_the_filter(engine: ConversationEngine) -> None:
    first, second, empty = (
        await _chat(engine, "a"),
        await _chat(engine, "b"),
        await _chat(engine, "c"),
    )
    for text in ("one", "two"):
        await _say(engine, first, text)
    await _say(engine, second, "three", "assistant")
    await engine.append(empty, Message("tool", "only a tool", tool_call_id="x", name="ls"))

    async def summary(where: MessageFilter, **options: object) -> list[tuple[int, int]]:
        found = await engine.summarise_conversations(where, limit=10, **options)  # type: ignore[arg-type]
        return [(s.conversation.id, s.messages) for s in found]

    assert await summary(MessageFilter(), sort="newest") == [(second, 1), (first, 2)]
    assert await summary(MessageFilter(), sort="oldest") == [(first, 2), (second, 1)]
    assert await summary(MessageFilter(roles=("user",)), sort="newest") == [(first, 2)]
    assert await summary(MessageFilter(), sort="newest", ids=[first]) == [(first, 2)]
    assert await summary(MessageFilter(), sort="newest", ids=[]) == []
    assert await summary(MessageFilter(after="2999-01-01"), sort="newest") == []
    [whole] = await engine.summarise_conversations(MessageFilter(), sort="oldest", limit=1)
    assert whole.first_at is not None and whole.first_at <= (whole.last_at or "")


# ---- one corpus, many queries, both engines side by side --------------------------------------

CORPUS = [
    "The deployment failed at 03:00; rolling back to v2.4.1",
    "deploy the new build to staging after lunch",
    "Running the migrations took 12 minutes on the replica",
    "I ran them yesterday, it runs faster now",
    "Naïve Bayes résumé for the café project in Zürich",
    "see https://example.com/docs/setup_guide.html and ops@atlas.dev",
    "the log is in /var/log/atlas/daemon.log (rotate_weekly)",
    "what's new in c++20 and rust 1.75?",
    "明日は東京タワーで会議があります",
    "我想知道东京的天气怎么样，还有北京。",
    "내일 회의는 서울에서 합니다",
    "Kubernetes cluster is down, pods CrashLoopBackOff",
    "generalization, generalize, generally, generous",
    "connection connected connecting connections",
    "Ünïcödé ÀÉÎÕÜ accents everywhere",
]
QUERIES = [
    "deploy",
    "deployment",
    "deployed",
    "failed",
    "fail",
    "run",
    "runs",
    "running",
    "ran",
    "migration",
    "naive",
    "resume",
    "cafe",
    "zurich",
    "example",
    "setup_guide",
    "guide",
    "ops@atlas.dev",
    "atlas",
    "daemon.log",
    "rotate",
    "c++20",
    "c",
    "20",
    "rust",
    "1.75",
    "v2.4.1",
    "03:00",
    "generalization",
    "general",
    "generous",
    "connect",
    "connections",
    "unicode",
    "AEIOU",
    "accent",
    "kubernetes",
    "crashloopbackoff",
    "東京タワー",
    "北京",
    "서울에서",
    "the",
    "the log",
    "log the",
    "is",
    "pods down",
    "zzz",
]


@pytest.mark.postgres
async def test_the_same_queries_find_the_same_messages_on_both_engines(
    tmp_path: Path, postgres_url: str
) -> None:
    """Every query on both engines, word index and substring index: the same messages (ids
    match: both number a fresh store's messages from 1, in order)."""
    async with ConversationStore(tmp_path / "c.db") as sqlite, PgServer(postgres_url) as server:
        pg = PgConversationStore(server, BOT)
        for engine in (sqlite, pg):
            conversation_id = await _chat(engine)
            for text in CORPUS:
                await _say(engine, conversation_id, text)
        differences = []
        for text in QUERIES:
            on_sqlite = {hit.message_id for hit in await sqlite.search(text, limit=100)}
            on_pg = {hit.message_id for hit in await pg.search(text, limit=100)}
            if on_sqlite != on_pg:
                differences.append(("words", text, on_sqlite, on_pg))
            query = TextQuery.build(text, "trigram")
            if query is not None:
                where = MessageFilter(conversation_id=1)
                found = [
                    {m.id for m in await engine.matching_messages(query, where, limit=100)}
                    for engine in (sqlite, pg)
                ]
                if found[0] != found[1]:
                    differences.append(("substrings", text, *found))
        assert differences == []
        # The corpus is not trivially empty for the word index: most queries find something.
        finding = [text for text in QUERIES if await sqlite.search(text)]
        assert len(finding) > 35, finding


@pytest.mark.postgres
async def test_the_search_tool_reads_the_same_on_both_engines(
    tmp_path: Path, postgres_url: str
) -> None:
    """The conversation search tool's views (atlas/tools/conversation_views.py), which take any
    ConversationEngine, give the same text on both (times aside: each store stamped its own)."""
    import re

    from atlas.tools.conversation_views import (
        BotStore,
        Search,
        browse,
        discover,
        read_around,
        read_whole,
        render_discovery,
    )

    def same_times(text: str) -> str:
        return re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d", "TIME", text)

    async with ConversationStore(tmp_path / "c.db") as sqlite, PgServer(postgres_url) as server:
        pg = PgConversationStore(server, BOT)
        views: dict[str, list[str]] = {}
        for name, engine in (("sqlite", sqlite), ("postgres", pg)):
            for number, text in enumerate(CORPUS):
                conversation_id = await _chat(engine, f"chat{number % 4}")
                await _say(engine, conversation_id, text, "user" if number % 3 else "assistant")
            where = BotStore(BOT, engine, qualify=False)  # type: ignore[arg-type]
            texts = []
            for query in ("deploy", "run", "東京タワー", "atlas log", "bernet", "zzz"):
                search = Search(query=query, sort="newest", detail="full")
                found, index = await discover([where], search)
                texts.append(f"{index}: {await render_discovery(found, search)}")
            texts.append(await browse([where], Search(query=None, limit=10)))
            conversation = await engine.get_conversation(2)
            assert conversation is not None
            texts.append(await read_whole(where, conversation, 0, Search(query=None)))
            texts.append(await read_around(where, conversation, 6, 1, Search(query=None)))
            views[name] = [same_times(text) for text in texts]
        assert views["postgres"] == views["sqlite"]
        assert "東京タワー" in views["sqlite"][2] and "No conversation" in views["sqlite"][5]


@pytest.mark.postgres
async def test_on_postgres_a_bot_reads_and_writes_only_its_own(postgres_url: str) -> None:
    """One database holds every bot; a bot's store never reaches another's rows."""
    async with PgServer(postgres_url) as server:
        mine, theirs = PgConversationStore(server, BOT), PgConversationStore(server, "other")
        their_chat = (await theirs.conversation("telegram", "c1", bot="other")).id
        await theirs.append(their_chat, Message("user", "secret plans"), event_id="e1")
        with pytest.raises(AtlasError, match=f"conversation {their_chat} belongs to bot 'other'"):
            await mine.append(their_chat, Message("user", "hello"))
        with pytest.raises(ValueError, match="cannot hold bot 'other'"):
            await mine.conversation("telegram", "c1", bot="other")
        my_chat = (await mine.conversation("telegram", "c1", bot=BOT)).id
        assert my_chat != their_chat
        # The same event id is another bot's own business.
        assert await mine.append(my_chat, Message("user", "plans"), event_id="e1") is not None
        assert await mine.get_conversation(their_chat) is None
        assert await mine.history(their_chat) == []
        assert [hit.conversation_id for hit in await mine.search("plans")] == [my_chat]


# ---- a start's recovery reads the same unfinished turns ---------------------------------------


async def test_a_starts_recovery_finds_the_same_unfinished_turns(
    engine: ConversationEngine,
) -> None:
    """atlas/recovery.py `find_unfinished`: the conversations whose last message is not a
    final answer (or one whose turn missed a message), on either engine."""
    from datetime import UTC, datetime, timedelta

    from atlas.channels.base import Address
    from atlas.recovery import find_unfinished

    since = datetime.now(UTC) - timedelta(minutes=5)
    waiting = await engine.conversation("telegram", "1", user="u1", bot=BOT)
    await _say(engine, waiting.id, "a question cut short")
    answered = await engine.conversation("telegram", "2", bot=BOT)
    asked = await _say(engine, answered.id, "hello")
    await engine.append(answered.id, Message("assistant", "hi"), answers_upto=asked)
    mid_tool = await engine.conversation("telegram", "3", bot=BOT)
    await _say(engine, mid_tool.id, "read it")
    call = ToolCall("c1", "read_file", "{}")
    last = await engine.append(mid_tool.id, Message("assistant", "", tool_calls=[call]))
    overtaken = await engine.conversation("telegram", "4", bot=BOT)
    first = await _say(engine, overtaken.id, "one")
    await _say(engine, overtaken.id, "two")  # came in while the turn for "one" ran
    await engine.append(overtaken.id, Message("assistant", "to one"), answers_upto=first)
    inner = await engine.conversation("agents", "x", kind="subagent", bot=BOT)
    await _say(engine, inner.id, "not a person's")

    found = await find_unfinished(engine, BOT, since=since)  # type: ignore[arg-type]
    by_id = {item.conversation_id: item for item in found}
    assert set(by_id) == {waiting.id, mid_tool.id, overtaken.id}
    assert by_id[waiting.id].address == Address(BOT, "telegram", "1", "", "u1")
    assert by_id[mid_tool.id].last_id == last
    assert not any(item.resumed_before for item in found)
    assert await find_unfinished(engine, BOT, since=datetime.now(UTC) + timedelta(1)) == []  # type: ignore[arg-type]
