"""Shared test helpers: homes, run contexts."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from atlas.home import Home, init_home
from atlas.tools.registry import RunContext, RunKind
from atlas.tools.services import AgentServices

if TYPE_CHECKING:
    from scripts.loadkit import Fakes

# Points every provider at a closed loopback port unless a test says otherwise.
BASE_CONFIG = """\
main = "atlas"
timezone = "UTC"
model = "fake/test-model"

[providers.fake]
kind = "openai"
base_url = "{base_url}"
max_retries = 0

[limits]
retry_base_delay = 0.0

[dashboard]
listen = "127.0.0.1:0"  # any free port: daemons of tests running at once never collide
"""


def make_home(
    root: Path, *, base_url: str = "http://127.0.0.1:9/v1", config: str | None = None
) -> Home:
    """Initialise a home from the repo's examples, then replace config.toml for tests."""
    init_home(root)
    (root / "config.toml").write_text(config or BASE_CONFIG.format(base_url=base_url))
    return Home(root)


def give_telegram_channel(root: Path, bot: str = "atlas") -> None:
    """A `[channels.telegram]` table in the bot's bot.toml (its token variable unset: enough
    for what reads the configured channels, not to start one); reload the Home after."""
    with (root / "bots" / bot / "bot.toml").open("a") as toml:
        toml.write('\n[channels.telegram]\ntoken_env = "ATLAS_TEST_TELEGRAM_TOKEN"\n')


def run_context(
    home: Home,
    *,
    bot: str | None = None,
    kind: RunKind = "conversation",
    conversation_id: int = 1,
    services: AgentServices | None = None,
) -> RunContext:
    return RunContext(
        home=home,
        bot=home.bot(bot),
        conversation_id=conversation_id,
        run_kind=kind,
        services=services,
    )


async def open_store_for_tests(bot):  # type: ignore[no-untyped-def]
    """A store opener for RunContext.open_store in tests; close with close_test_stores()."""
    from atlas.store.conversations import ConversationStore

    # Keyed by file, not by bot name: a test that forgets close_test_stores() must not hand
    # the next test (another temporary home, the same bot name) a store of the old home.
    if bot.db_path not in _STORES:
        store = ConversationStore(bot.db_path)
        await store.open()
        _STORES[bot.db_path] = store
    return _STORES[bot.db_path]


async def close_test_stores() -> None:
    for store in _STORES.values():
        await store.close()
    _STORES.clear()


_STORES: dict = {}


class Person:
    """Answers every question the same way and keeps what it was asked, with the choices."""

    def __init__(self, answer: str | None) -> None:
        self.answer = answer
        self.asked: list[tuple[str, list[str]]] = []

    async def __call__(self, question: str, choices: list[str]) -> str | None:
        self.asked.append((question, choices))
        return self.answer


@contextlib.asynccontextmanager
async def worker_fakes(monkeypatch: pytest.MonkeyPatch, bots: int) -> AsyncIterator[Fakes]:
    """The load fakes (scripts/loadkit.py) for a daemon that really starts worker processes:
    $ATLAS_WORKERS unset (tests/conftest.py sets it to 1 for every other test) and each fake
    bot's token in the environment."""
    from scripts.loadkit import Fakes, bot_token, token_env

    monkeypatch.delenv("ATLAS_WORKERS")
    for index in range(bots):
        monkeypatch.setenv(token_env(index), bot_token(index))
    async with Fakes(bots=bots, latency=0.0) as fakes:
        yield fakes
