"""The ModelClient the tool loop talks to: "provider/model" names, retries, then the fallback."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from collections.abc import Awaitable, Callable

from atlas.config import ProviderSettings, Settings
from atlas.errors import ConfigError, ProviderError
from atlas.providers.base import (
    CompletionRequest,
    CompletionResponse,
    Provider,
    ProviderCallError,
    TextSink,
)
from atlas.providers.wire import SdkProvider, emit_text

log = logging.getLogger(__name__)


@dataclasses.dataclass
class _Failure:
    model: str
    attempts: int
    error: Exception


def provider_class(kind: str) -> type[SdkProvider]:
    """The provider class of a `[providers.*] kind`."""
    # Imported here: the SDK modules behind them are slow to import and only one may be used.
    if kind == "anthropic":
        from atlas.providers.anthropic import AnthropicProvider

        return AnthropicProvider
    from atlas.providers.openai import OpenAIProvider

    return OpenAIProvider


def _make_provider(name: str, settings: ProviderSettings) -> Provider:
    provider: Provider = provider_class(settings.kind)(name, settings)
    return provider


class ModelRouter:
    """Finds each model's provider, retries retryable failures with backoff, then falls back."""

    def __init__(
        self,
        settings: Settings,
        *,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.settings = settings
        self._sleep = sleep
        self._rng = rng
        self._providers: dict[str, Provider] = {}

    def supports_images(self, model: str) -> bool:
        _, provider_settings = self.settings.provider_for(model)
        return provider_settings.supports_images

    def provider(self, name: str) -> Provider:
        """The one instance of the provider named in config.toml, made on first use."""
        if name not in self._providers:
            self._providers[name] = _make_provider(name, self.settings.providers[name])
        return self._providers[name]

    async def close(self) -> None:
        """Close every provider's connections."""
        providers, self._providers = list(self._providers.values()), {}
        for provider in providers:
            await provider.close()

    async def complete(
        self,
        request: CompletionRequest,
        *,
        fallback: str | None = None,
        on_text: TextSink | None = None,
    ) -> CompletionResponse:
        models = [request.model]
        if fallback and fallback != request.model:
            models.append(fallback)
        failures: list[_Failure] = []
        sink = _StreamWatch(on_text) if on_text else None
        for model in models:
            try:
                return await self._complete_with_retries(request, model, sink, failures)
            except (ProviderCallError, ConfigError) as exc:
                if model != models[-1]:
                    log.warning("model %s failed, falling back to %s: %s", model, models[-1], exc)
        tried = [f for f in failures if f.attempts]
        overflow = bool(tried) and all(getattr(f.error, "context_overflow", False) for f in tried)
        statuses = tuple(getattr(f.error, "status", None) for f in tried)
        raise ProviderError(_describe(failures), context_overflow=overflow, statuses=statuses)

    async def _complete_with_retries(
        self,
        request: CompletionRequest,
        model: str,
        sink: _StreamWatch | None,
        failures: list[_Failure],
    ) -> CompletionResponse:
        try:
            provider_name, provider_settings = self.settings.provider_for(model)
        except ConfigError as exc:
            failures.append(_Failure(model, 0, exc))
            raise
        provider = self.provider(provider_name)
        bare_request = dataclasses.replace(request, model=model.partition("/")[2])
        retries = provider_settings.max_retries
        for attempt in range(retries + 1):
            if sink:
                await sink.restart()
            try:
                return await provider.complete(bare_request, sink)
            except ProviderCallError as exc:
                if not exc.retryable or attempt == retries:
                    failures.append(_Failure(model, attempt + 1, exc))
                    raise
                delay = self._backoff(attempt, exc.retry_after)
                log.warning(
                    "model %s failed (%s); retry %d of %d in %.2fs",
                    model,
                    exc,
                    attempt + 1,
                    retries,
                    delay,
                )
                await self._sleep(delay)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        """The server's own wait when it gave one, else full jitter; both capped at retry_max_delay."""
        limits = self.settings.limits
        if retry_after is not None:
            return min(limits.retry_max_delay, retry_after)
        ceiling = min(limits.retry_max_delay, limits.retry_base_delay * 2**attempt)
        return ceiling * self._rng()


class _StreamWatch:
    """Passes streamed text on, and remembers whether any went out: an answer that failed
    midway is answered again from the start, and the reader must be told so."""

    RESTART_NOTE = "\n[the connection failed; answering again]\n"

    def __init__(self, on_text: TextSink) -> None:
        self.on_text = on_text
        self.streamed = False

    async def __call__(self, text: str) -> None:
        self.streamed = True
        await emit_text(self.on_text, text)

    async def restart(self) -> None:
        if self.streamed:
            await emit_text(self.on_text, self.RESTART_NOTE)
            self.streamed = False


def _describe(failures: list[_Failure]) -> str:
    parts = []
    for index, failure in enumerate(failures):
        role = "model" if index == 0 else "then fallback"
        if failure.attempts:
            tries = f"failed ({failure.attempts} attempt{'s' if failure.attempts != 1 else ''})"
        else:
            tries = "could not be tried"
        # The SDKs' own messages end in a period ("Request timed out."): one stop, not two.
        parts.append(f"{role} {failure.model} {tries}: {str(failure.error).rstrip('. ')}")
    return (
        "no model could answer: "
        + "; ".join(parts)
        + ". Check the model names and [providers] in config.toml, the API key variables, "
        "and whether the provider is up."
    )
