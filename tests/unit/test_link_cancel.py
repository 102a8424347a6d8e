"""A request given up on one side is cancelled on the other, with its reason: a channel's
question asked from another process is closed, showing the answer given elsewhere."""

from __future__ import annotations

import asyncio

from atlas.channels.base import AnsweredElsewhere, answered_elsewhere
from atlas.workers.link import Link, socket_pair


async def linked() -> tuple[Link, Link]:
    one_end, other_end = socket_pair()
    asker, answerer = Link("asker"), Link("answerer")
    await asker.open(one_end)
    await answerer.open(other_end)
    return asker, answerer


async def test_a_cancelled_ask_cancels_the_handler_with_the_same_reason() -> None:
    asker, answerer = await linked()
    seen: asyncio.Future[object] = asyncio.get_running_loop().create_future()

    async def wait_for_a_click() -> str:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError as cancel:
            seen.set_result(answered_elsewhere(cancel) or "plain cancel")
            raise
        return "never"

    answerer.on("ask", wait_for_a_click)
    try:
        for reason, expected in (
            (AnsweredElsewhere(("allow once",)), AnsweredElsewhere(("allow once",))),
            (None, "plain cancel"),
        ):
            asking = asyncio.create_task(asker.ask("ask"))
            await asyncio.sleep(0.05)  # the handler is waiting
            asking.cancel(reason)
            await asyncio.gather(asking, return_exceptions=True)
            assert await asyncio.wait_for(seen, 2) == expected
            seen = asyncio.get_running_loop().create_future()
        assert answerer._handling == {}  # nothing left running there
    finally:
        await asker.close()
        await answerer.close()


async def test_an_unpicklable_reason_still_cancels() -> None:
    asker, answerer = await linked()
    stopped = asyncio.Event()

    async def wait() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            stopped.set()

    answerer.on("wait", wait)
    try:
        asking = asyncio.create_task(asker.ask("wait"))
        await asyncio.sleep(0.05)
        asking.cancel(lambda: None)  # type: ignore[arg-type]
        await asyncio.gather(asking, return_exceptions=True)
        await asyncio.wait_for(stopped.wait(), 2)
    finally:
        await asker.close()
        await answerer.close()
