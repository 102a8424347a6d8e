"""Where tools find the running Dispatcher of their home (and home-wide services).

The runtime registers its Dispatcher when it starts (`register(home, dispatcher)`); tools that
start runs (delegate, message_agent) look it up by the home they serve. Services are per-home
singletons (the subagent manager) created on first use and closed by `unregister`.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from atlas.errors import AtlasError

if TYPE_CHECKING:
    from atlas.dispatch import Dispatcher
    from atlas.home import Home

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass
class _Entry:
    dispatcher: Dispatcher
    services: dict[str, Any] = field(default_factory=dict)


_ENTRIES: dict[Path, _Entry] = {}


def _key(home: Home | Path) -> Path:
    # A Home's root is resolved once when it loads; tools ask for the hub on every call.
    return home.root if not isinstance(home, Path) else home.expanduser().resolve()


def register(home: Home | Path, dispatcher: Dispatcher) -> None:
    """Make `dispatcher` the one tools of this home use (replaces an earlier one)."""
    _ENTRIES[_key(home)] = _Entry(dispatcher)


def dispatcher_for(home: Home | Path) -> Dispatcher:
    """The home's running Dispatcher; AtlasError when none was registered."""
    entry = _ENTRIES.get(_key(home))
    if entry is None:
        raise AtlasError(
            f"no running dispatcher for the home {_key(home)} (atlas.agents.hub.register "
            "was not called): this needs the daemon or `atlas chat`"
        )
    return entry.dispatcher


def is_registered(home: Home | Path) -> bool:
    return _key(home) in _ENTRIES


def service(home: Home | Path, name: str, factory: Callable[[], T]) -> T:
    """The home's service called `name`, made by `factory` on first use."""
    entry = _ENTRIES.get(_key(home))
    if entry is None:
        dispatcher_for(home)  # raises, naming the home
        raise AssertionError("unreachable")
    if name not in entry.services:
        entry.services[name] = factory()
    return entry.services[name]  # type: ignore[no-any-return]


async def unregister(home: Home | Path) -> None:
    """Forget the home's Dispatcher and close its services (their `close()`): running
    subagents are stopped. Call before Dispatcher.shutdown()."""
    entry = _ENTRIES.pop(_key(home), None)
    if entry is None:
        return
    for name, svc in entry.services.items():
        close = getattr(svc, "close", None)
        if close is None:
            continue
        try:
            result = close()
            if inspect.isawaitable(result):
                await result
        except (AtlasError, OSError):
            log.exception("closing the %s service of %s failed", name, _key(home))
