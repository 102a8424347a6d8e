"""Load each model SDK the bots of this process use, and the TLS context, before they answer.

Left to the first model call, the SDK's import and the TLS context (every CA certificate read)
cost 0.3-0.7 s on the event loop: the first answer waits, and no bot of the process is served
meanwhile. A home spread over forked workers imports them before forking
(atlas/workers/fork.py); a single-process home, and `atlas chat`, load them here, in a thread,
while the rest of the start goes on (docs/benchmarks.md, "The first answer").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable

from atlas.errors import AtlasError
from atlas.home import Bot, Home

log = logging.getLogger(__name__)


def model_kinds(home: Home, bots: Iterable[Bot]) -> set[str]:
    """The provider kinds (`openai`, `anthropic`) of these bots' models and fallbacks."""
    kinds: set[str] = set()
    for bot in bots:
        for model in filter(None, (bot.model, bot.settings.fallback_model)):
            try:
                kinds.add(home.settings.provider_for(model)[1].kind)
            except AtlasError:
                continue  # a model without a provider: the first call says so
    return kinds


def start_loading_sdks(home: Home, bots: Iterable[Bot]) -> asyncio.Task[None]:
    """Import the SDKs of these bots' providers and make the TLS context in a thread; await
    the task where the first answer must not pay for them. It never raises: an SDK that
    cannot be loaded is left to the first call, which reports it."""
    from atlas.providers.router import provider_class

    # Atlas's own provider modules in this thread (they are light): the worker thread then
    # imports only the SDKs' packages, which nothing else here imports at the same time.
    classes = [provider_class(kind) for kind in sorted(model_kinds(home, bots))]

    def load() -> None:
        started = time.monotonic()
        for cls in classes:
            try:
                cls.import_sdk()
            except (ImportError, OSError) as exc:  # OSError: a CA file that cannot be read
                log.warning("could not load %s ahead of the first call: %s", cls.__name__, exc)
        log.debug("model SDKs loaded in %.3f s", time.monotonic() - started)

    return asyncio.create_task(asyncio.to_thread(load), name="load-model-sdks")
