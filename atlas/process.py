"""How an atlas process sets itself up: logging, and the event loop its coroutine runs on."""

from __future__ import annotations

import asyncio
import ctypes
import gc
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

# The HTTP clients log every request at INFO; the SDKs log their retries, which we do ourselves.
CHATTY_LIBRARIES = ("httpx", "httpx2", "httpcore", "httpcore2", "openai", "anthropic")


def setup_logging(level: int, *, prefix: str = "", replace: bool = False) -> None:
    """`prefix` marks a worker process's lines (they share the daemon's terminal); `replace`
    drops the handlers already set up (a worker forked from the home's process has its)."""
    logging.basicConfig(
        level=level,
        format=f"%(asctime)s {prefix}%(levelname)s %(name)s: %(message)s",
        force=replace,
    )
    for name in CHATTY_LIBRARIES:
        logging.getLogger(name).setLevel(max(level, logging.WARNING))


def prctl() -> Callable[..., int] | None:
    """Linux's prctl(2), or None where there is none."""
    try:
        function: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return function


PR_SET_NAME = 15  # linux/prctl.h


def name_this_process(name: str) -> None:
    """The name `ps` and /proc/PID/comm show for this process (the kernel keeps 15 bytes);
    nothing where prctl does not exist."""
    call = prctl()
    if call is not None:
        call(PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]))


def run(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run`, on uvloop where it is installed (everywhere but Windows): under load its
    loop and sockets cost the daemon markedly less CPU per turn (docs/benchmarks.md)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


def freeze_long_lived_objects() -> None:
    """Move every object alive now out of the garbage collector's sight.

    Called once the daemon is up (and once more after a model SDK is first imported): the
    modules, classes and pydantic models made at start live as long as the process, yet every
    full collection walked them all again, stopping the loop for up to ~90 ms under load
    (docs/benchmarks.md). Frozen objects are still freed by reference counting; only cycles
    among them would be kept, and there are few at start.
    """
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)  # young collections: rarer, each still small
    gc.enable()  # paused by pause_collection_while_starting


def pause_collection_while_starting() -> None:
    """No garbage collection until `freeze_long_lived_objects`: a process's start is
    importing aiogram, the model SDK and Atlas, whose hundreds of thousands of new objects
    set off collections that find nothing to free (~2,000 unreachable objects at the end of
    start, measured) and cost ~0.2 s of the ~1.5 s it takes (docs/benchmarks.md, start-up)."""
    gc.disable()
