"""Compaction through the fake OpenAI-compatible server and the real store."""

from __future__ import annotations

from pathlib import Path

from atlas.agent.compaction import SUMMARY_HEADER, SUMMARY_PROMPT
from atlas.agent.loop import ToolLoop
from atlas.providers.base import Message, ToolCall
from atlas.providers.router import ModelRouter
from atlas.store.conversations import ConversationStore
from atlas.tools.catalog import default_registry
from atlas.trust.gate import OpenGate
from tests.fakes.model_servers import FakeOpenAIServer
from tests.helpers import BASE_CONFIG, make_home, run_context

SMALL_WINDOW = "\ncontext_window = 4096\ncompact_at = 0.5\n"
WORDS = "lorem ipsum dolor sit amet consectetur adipiscing elit "


async def long_conversation(store: ConversationStore) -> int:
    """Ten old exchanges, each with a bulky tool result: well past half of a 4,096 window."""
    conversation = await store.conversation("console", "long", bot="atlas")
    await store.append(conversation.id, Message("user", "Help me audit the project."))
    for i in range(10):
        call = ToolCall(f"c{i}", "read_file", f'{{"path": "f{i}.txt"}}')
        await store.append(
            conversation.id, Message("assistant", f"Reading f{i}", tool_calls=[call])
        )
        await store.append(
            conversation.id, Message("tool", WORDS * 40, tool_call_id=f"c{i}", name="read_file")
        )
        await store.append(conversation.id, Message("assistant", f"f{i} looks fine"))
        await store.append(conversation.id, Message("user", f"next, question {i}"))
    return conversation.id


async def test_compaction_summarises_the_middle_and_keeps_head_and_tail(home_path: Path) -> None:
    async with FakeOpenAIServer() as server:
        config = BASE_CONFIG.format(base_url=server.base_url).replace(
            "[limits]\n", "[limits]" + SMALL_WINDOW
        )
        home = make_home(home_path, config=config)
        run = run_context(home)
        async with ConversationStore(run.bot.db_path) as store:
            run.conversation_id = await long_conversation(store)
            server.reply(text="The user asked for an audit; files f0-f8 were read and fine.")
            server.reply(text="All good so far.")
            server.reply(text="Still good.")
            loop = ToolLoop(ModelRouter(home.settings), default_registry(), OpenGate(), store)
            outcome = await loop.run(run)
            assert outcome.text == "All good so far." and not outcome.notes
            await store.append(run.conversation_id, Message("user", "and now?"))
            run.state.system_prompt = None
            await loop.run(run)  # a later turn starts from the stored compaction
            stored = await store.history(run.conversation_id)
    server.assert_complete()
    summarise, answer, later = server.requests
    assert summarise["messages"][0] == {"role": "system", "content": SUMMARY_PROMPT}
    assert "f0 looks fine" in summarise["messages"][1]["content"]
    sent = answer["messages"]
    assert sent[1]["content"] == "Help me audit the project."  # the first message is kept
    assert sent[2]["content"].startswith(SUMMARY_HEADER) and "f0-f8" in sent[2]["content"]
    assert sent[-1]["content"] == "next, question 9"  # the latest turn is kept
    assert not any(m.get("content") == "f0 looks fine" for m in sent)
    assert later["messages"][2]["content"].startswith(SUMMARY_HEADER)
    assert later["messages"][-1]["content"] == "and now?"
    assert len(stored) == 41 + 3  # nothing was deleted from the store


async def test_a_failed_summary_cuts_old_tool_outputs_and_tells_the_user(home_path: Path) -> None:
    async with FakeOpenAIServer() as server:
        config = BASE_CONFIG.format(base_url=server.base_url).replace(
            "[limits]\n", "[limits]" + SMALL_WINDOW
        )
        home = make_home(home_path, config=config)
        run = run_context(home)
        async with ConversationStore(run.bot.db_path) as store:
            run.conversation_id = await long_conversation(store)
            server.fail(500)
            server.reply(text="Carrying on.")
            loop = ToolLoop(ModelRouter(home.settings), default_registry(), OpenGate(), store)
            outcome = await loop.run(run)
            assert await store.last_compaction(run.conversation_id) is None
    assert outcome.text == "Carrying on."
    assert len(outcome.notes) == 1 and "summarising it failed" in outcome.notes[0]
    tool_texts = [m["content"] for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert "cut to save context" in tool_texts[0]
    assert tool_texts[-1] == WORDS * 40  # the latest outputs are kept whole


async def test_a_context_length_error_compacts_and_tries_again(home_path: Path) -> None:
    async with FakeOpenAIServer() as server:
        # A window the estimate thinks is roomy, so only the provider's error triggers compaction.
        config = BASE_CONFIG.format(base_url=server.base_url)
        home = make_home(home_path, config=config)
        run = run_context(home)
        async with ConversationStore(run.bot.db_path) as store:
            run.conversation_id = await long_conversation(store)
            server.fail(
                400,
                body={
                    "error": {
                        "message": "This model's maximum context length is 8192 tokens",
                        "code": "context_length_exceeded",
                    }
                },
            )
            server.reply(text="Summary: an audit of f0-f8, all fine.")
            server.reply(text="Answered after compaction.")
            loop = ToolLoop(ModelRouter(home.settings), default_registry(), OpenGate(), store)
            outcome = await loop.run(run)
            assert await store.last_compaction(run.conversation_id) is not None
    server.assert_complete()
    assert outcome.text == "Answered after compaction."
    assert server.requests[1]["messages"][0]["content"] == SUMMARY_PROMPT
    assert server.requests[2]["messages"][2]["content"].startswith(SUMMARY_HEADER)


async def test_other_client_errors_are_not_taken_for_a_full_context(home_path: Path) -> None:
    from atlas.errors import ProviderError

    async with FakeOpenAIServer() as server:
        home = make_home(home_path, config=BASE_CONFIG.format(base_url=server.base_url))
        run = run_context(home)
        async with ConversationStore(run.bot.db_path) as store:
            run.conversation_id = await long_conversation(store)
            server.fail(400, body={"error": {"message": "Invalid value for 'temperature'"}})
            loop = ToolLoop(ModelRouter(home.settings), default_registry(), OpenGate(), store)
            try:
                await loop.run(run)
            except ProviderError as exc:
                assert not exc.context_overflow and "temperature" in str(exc)
            else:
                raise AssertionError("a 400 must reach the caller")
    assert len(server.requests) == 1
