"""Keep aiogram's `Response[T]` models alive for the API methods the channel calls.

aiogram validates every API answer with `Response[method.__returning__]`, a pydantic generic
model. Pydantic caches parametrised generics only weakly, so after each garbage collection the
next call builds the model again: about 5 ms of CPU on the event loop per API call under load
(measured in docs/benchmarks.md). Holding one strong reference to each keeps the cache warm.

The types those answers carry are completed first, innermost first: aiogram's models are
left to build on first use (atlas/channels/telegram/aiogram_import.py), and a generic built over an
incomplete model generates that model's whole schema inside itself, so `Response[Message]`,
`Response[Message | bool]` and `Response[list[Update]]` would each build Message again
(0.69 s of start-up on the benchmark VM; 0.29 s with Message built once). The methods
themselves are built here too (aiogram's are deferred as well): in the home's process, once,
rather than in each worker on its first call.
"""

from __future__ import annotations

from typing import Any

_PINNED: list[Any] = []


def pin_response_models() -> int:
    """Build the methods a running channel calls and hold `Response[T]` for each; idempotent.
    Returns how many models are held."""
    if _PINNED:
        return len(_PINNED)
    from aiogram.methods import (
        AnswerCallbackQuery,
        DeleteWebhook,
        EditMessageText,
        GetFile,
        GetMe,
        GetUpdates,
        Response,
        SendChatAction,
        SendDocument,
        SendMessage,
        SetWebhook,
    )
    from aiogram.types import File, Message, Update, User

    for carried in (Message, Update, User, File):  # Message is inside Update: first
        carried.model_rebuild()
    methods = (
        AnswerCallbackQuery,
        DeleteWebhook,
        EditMessageText,
        GetFile,
        GetMe,
        GetUpdates,
        SendChatAction,
        SendDocument,
        SendMessage,
        SetWebhook,
    )
    for method in methods:
        method.model_rebuild()
    _PINNED.extend(Response[method.__returning__] for method in methods)  # type: ignore[misc]
    return len(_PINNED)


__all__ = ["pin_response_models"]
