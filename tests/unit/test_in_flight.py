"""InFlight (atlas/channels/in_flight.py): a question's post runs to its end through a cancel,
and the cancel is raised after, with its reason."""

from __future__ import annotations

import asyncio

import pytest

from atlas.channels.base import AnsweredElsewhere, answered_elsewhere
from atlas.channels.in_flight import InFlight


async def posting(
    release: asyncio.Event, result: str = "ts-1", error: Exception | None = None
) -> str:
    await release.wait()
    if error is not None:
        raise error
    return result


async def test_the_post_finishes_through_two_cancels_and_the_first_is_raised_after() -> None:
    release, recorded = asyncio.Event(), []
    in_flight = InFlight[str]()

    async def ask() -> None:
        recorded.append(await in_flight.finish(posting(release)))
        in_flight.raise_cancel()

    waiting = asyncio.create_task(ask())
    await asyncio.sleep(0)
    waiting.cancel(AnsweredElsewhere(("Deny",)))
    await asyncio.sleep(0)
    waiting.cancel()  # a second cancel (a /stop) keeps the first one's reason
    await asyncio.sleep(0)
    assert not waiting.done()
    release.set()
    with pytest.raises(asyncio.CancelledError) as raised:
        await waiting
    assert recorded == ["ts-1"]
    elsewhere = answered_elsewhere(raised.value)
    assert elsewhere is not None and elsewhere.answers == ("Deny",)


async def test_a_failed_post_raises_its_error_and_the_cancel_stays_to_raise() -> None:
    release = asyncio.Event()
    in_flight = InFlight[str]()
    failed: list[str] = []

    async def ask() -> None:
        try:
            await in_flight.finish(posting(release, error=OSError("refused")))
        except OSError as exc:
            failed.append(str(exc))
            in_flight.raise_cancel()

    waiting = asyncio.create_task(ask())
    await asyncio.sleep(0)
    waiting.cancel()
    await asyncio.sleep(0)
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert failed == ["refused"]


async def test_without_a_cancel_nothing_is_raised() -> None:
    release = asyncio.Event()
    release.set()
    in_flight = InFlight[str]()
    assert await in_flight.finish(posting(release)) == "ts-1"
    in_flight.raise_cancel()
