"""The chats' `/new` generations on PostgreSQL: atlas.db's `chat_generations` rows
(atlas/channels/chat_common.py `GenerationRows`)."""

from __future__ import annotations

from atlas.store.pg.server import PgServer


class PgGenerations:
    """How often `/new` restarted each chat, on a shared, open PgServer."""

    def __init__(self, server: PgServer) -> None:
        self.server = server

    async def generation(self, channel: str, chat: str, thread: str, user: str) -> int:
        found = await self.server.pool.fetchval(
            "SELECT generation FROM chat_generations "
            'WHERE channel = $1 AND chat = $2 AND thread = $3 AND "user" = $4',
            channel,
            chat,
            thread,
            user,
        )
        return int(found) if found is not None else 0

    async def set_generation(
        self, channel: str, chat: str, thread: str, user: str, generation: int
    ) -> None:
        await self.server.pool.execute(
            'INSERT INTO chat_generations (channel, chat, thread, "user", generation) '
            'VALUES ($1, $2, $3, $4, $5) ON CONFLICT (channel, chat, thread, "user") '
            "DO UPDATE SET generation = EXCLUDED.generation",
            channel,
            chat,
            thread,
            user,
            generation,
        )
