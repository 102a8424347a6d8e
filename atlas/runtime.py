"""What a running home shares: model client, tools, gate, per-bot stores, conversation state."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING

from atlas.agent.loop import ToolLoop
from atlas.home import Bot, Home
from atlas.mcp.manager import McpManager
from atlas.providers.base import ModelClient
from atlas.store.conversations import ConversationStore
from atlas.store.engine import ConversationEngine
from atlas.store.home_db import HomeStore
from atlas.store.home_engines import HomeEngines
from atlas.tools.catalog import default_registry
from atlas.tools.registry import ConversationState, ToolRegistry
from atlas.trust.gate import BaseGate
from atlas.trust.guardian import Guardian
from atlas.trust.policy import RuleGate

if TYPE_CHECKING:
    from atlas.providers.router import ModelRouter


class Runtime:
    def __init__(
        self,
        home: Home,
        *,
        model: ModelClient | None = None,
        gate: BaseGate | None = None,
        registry: ToolRegistry | None = None,
        mcp: McpManager | None = None,
        audit: HomeStore | None = None,
        engines: HomeEngines | None = None,
    ) -> None:
        """`engines`: the home's engines (atlas/store/home_engines.py), opened by the daemon
        from `[store] url`; by default atlas.db (`audit`, else the home's file) and a
        conversations.db per bot. The runtime closes them with itself."""
        self._owned_router: ModelRouter | None = None
        if model is None:
            from atlas.providers.router import ModelRouter

            model = self._owned_router = ModelRouter(home.settings)
        self.home = home
        self.model = model
        # atlas.db (a worker process's runs its work in the home's process: atlas/workers/),
        # or the home's PostgreSQL database: every engine of the home's state comes from here.
        self.engines = engines if engines is not None else HomeEngines(home, audit=audit)
        self.audit = self.engines.audit
        self.gate = RuleGate(home, Guardian(model), self.audit) if gate is None else gate
        self._base_registry = default_registry() if registry is None else registry
        self.mcp = mcp
        self._stores: dict[str, ConversationEngine] = {}
        self._store_lock = asyncio.Lock()
        self._states: dict[tuple[str, int], ConversationState] = {}

    @property
    def registry(self) -> ToolRegistry:
        """The built-in tools, then every MCP server's (each bot sees only its own servers')."""
        if self.mcp is None:
            return self._base_registry
        return self.mcp.registry_over(self._base_registry)

    async def store(self, bot: Bot) -> ConversationStore:
        """The bot's conversation store, opened on first use: its conversations.db, or its
        share of the home's PostgreSQL database (the same calls: atlas/store/engine.py)."""
        async with self._store_lock:
            if bot.name not in self._stores:
                bot.ensure_folders()
                store = self.engines.conversations(bot)
                await store.open()
                self._stores[bot.name] = store
            return self._stores[bot.name]  # type: ignore[return-value]

    def state(self, bot: Bot, conversation_id: int) -> ConversationState:
        key = (bot.name, conversation_id)
        state = self._states.get(key)  # not setdefault: that builds a state every turn
        if state is None:
            state = self._states[key] = ConversationState()
        return state

    def conversation_states(self) -> Mapping[tuple[str, int], ConversationState]:
        """Every conversation's state in this process by (bot, conversation id), to read: the
        dashboard shows approvals waiting and modes set with /mode."""
        return self._states

    async def loop(self, bot: Bot, *, gate: BaseGate | None = None) -> ToolLoop:
        return ToolLoop(self.model, self.registry, gate or self.gate, await self.store(bot))

    async def close(self) -> None:
        if self.mcp is not None:
            await self.mcp.stop()
        from atlas.tools.browser import close_browsers
        from atlas.tools.shell import jobs_for

        await jobs_for(self.home).shutdown()
        await close_browsers(self.home)
        for store in self._stores.values():
            await store.close()
        self._stores.clear()
        await self.engines.close()
        if self._owned_router is not None:  # a model handed in is closed by whoever made it
            await self._owned_router.close()
