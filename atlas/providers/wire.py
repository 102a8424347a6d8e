"""What both SDK providers share at the wire edge: API keys, HTTP failures, streamed text, and
the plain-JSON POST of a whole answer (JsonPoster)."""

from __future__ import annotations

import contextlib
import functools
import inspect
import re
import ssl
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any

from atlas.config import ProviderSettings
from atlas.process import freeze_long_lived_objects
from atlas.providers.base import ProviderCallError, TextSink

if TYPE_CHECKING:
    import aiohttp

# Local servers (Ollama, vLLM, LM Studio) ignore the key, but the SDKs insist on one.
PLACEHOLDER_API_KEY = "no-key-needed"
RETRYABLE_STATUSES = frozenset({408, 409, 429})
# How OpenAI, Anthropic and the common local servers say the prompt does not fit the window.
CONTEXT_OVERFLOW = re.compile(
    r"context_length_exceeded|maximum context length|context window|prompt is too long"
    r"|too many tokens|exceeds the context",
    re.IGNORECASE,
)


def api_key_for(name: str, settings: ProviderSettings) -> str:
    """The provider's API key from its environment variable, or a placeholder when none is named."""
    if not settings.api_key_env:
        return PLACEHOLDER_API_KEY
    key = settings.api_key()
    if not key:
        raise ProviderCallError(
            f"provider {name!r} has no API key: set the environment variable "
            f"{settings.api_key_env} (named in config.toml [providers.{name}] api_key_env)",
            retryable=False,
        )
    return key


def parse_retry_after(headers: Mapping[str, str], now: datetime | None = None) -> float | None:
    """Seconds the server asked us to wait: `retry-after-ms`, or `Retry-After` as seconds or a date."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass  # a malformed header falls through to Retry-After
    value = (headers.get("retry-after") or "").strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass  # not seconds: try an HTTP date below
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def server_message(body: object) -> str:
    """The human part of an error body: `error.message`, `message`, or the body itself, cut short."""
    if isinstance(body, Mapping):
        inner = body.get("error")
        if isinstance(inner, Mapping) and inner.get("message"):
            return str(inner["message"])
        if body.get("message"):
            return str(body["message"])
    if body is None:
        return "(no error message)"
    return str(body)[:500]


def status_error(
    where: str,
    status: int,
    body: object,
    headers: Mapping[str, str],
    *,
    retryable: bool | None = None,
) -> ProviderCallError:
    """A ProviderCallError for an HTTP failure: 408/409/429/5xx are worth retrying, other 4xx not."""
    if retryable is None:
        retryable = status in RETRYABLE_STATUSES or status >= 500
    retry_after = parse_retry_after(headers) if retryable else None
    # Below 400 the error came as an event inside a stream that had begun with 200.
    what = f"HTTP {status}" if status >= 400 else "error in the middle of the answer"
    message = server_message(body)
    return ProviderCallError(
        f"{where}: {what}: {message}",
        retryable=retryable,
        retry_after=retry_after,
        status=status,
        context_overflow=status in (400, 413)
        and bool(CONTEXT_OVERFLOW.search(f"{body} {message}")),
    )


def transport_error(where: str, exc: BaseException) -> ProviderCallError:
    """A retryable ProviderCallError for a timeout or a broken connection."""
    kind = "timed out" if "timeout" in type(exc).__name__.lower() else "connection failed"
    detail = str(exc) or type(exc).__name__
    # The aiohttp transport reports a refused connection or an unknown host as a connect
    # *timeout* ("Request timed out."): the OS error found underneath says what happened.
    if failure := _os_error_under(exc):
        kind, detail = "connection failed", str(failure)
    return ProviderCallError(f"{where}: {kind}: {detail}", retryable=True)


def _os_error_under(exc: BaseException) -> BaseException | None:
    """The first OSError (not a timeout) among `exc` and its causes: a refused connection,
    a host that does not resolve. None when there is none."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, OSError) and not isinstance(cause, TimeoutError):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


async def emit_text(on_text: TextSink, text: str) -> None:
    """Hand one streamed piece of text to the sink, awaiting it when it is a coroutine."""
    result = on_text(text)
    if inspect.isawaitable(result):
        await result


def malformed(where: str, exc: Exception) -> ProviderCallError:
    """A JSON answer without the shape the API documents."""
    detail = "held no choices" if isinstance(exc, IndexError) else f"is malformed ({exc!r})"
    return ProviderCallError(f"{where}: the answer {detail}", retryable=True)


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS context of every SDK client in this process: the one each client's transport
    would make for itself (httpx2's defaults: the system's CA certificates, or $SSL_CERT_FILE
    or $SSL_CERT_DIR), made once. Making one reads every CA certificate, 30-50 ms each time."""
    import httpx2  # the SDKs' own HTTP library (their transports call the same function)

    return httpx2.create_ssl_context()


# A whole (non-streamed) answer's POST goes straight through aiohttp, with the SDK client's
# own URL, headers and timeouts. The SDK's request path (its option models, httpx2's URL and
# header objects, the adapter onto aiohttp) cost three times a plain aiohttp call's CPU, about
# a quarter of a busy process's (docs/benchmarks.md). Streaming stays with the SDK's typed
# calls. The bytes sent are the SDK's: the same URL, headers (read from the client once: its
# key, User-Agent, version headers) and JSON; its errors become the same ProviderCallErrors
# (tests/integration/test_providers.py compares the headers with the SDK's `client.post`).

# What httpx2's Limits default to in the SDKs (DEFAULT_CONNECTION_LIMITS, keep-alive expiry).
MAX_CONNECTIONS = 1000
KEEPALIVE_SECONDS = 5.0


def sdk_headers(client: Any) -> dict[str, str]:
    """The headers the SDK client sends with every request: its key, then its defaults (the
    SDK's merge order), without the ones it omits; the retry count and read timeout as the
    SDK writes them for a first attempt (the router does the retrying)."""
    merged = {**client.auth_headers, **client.default_headers}
    headers = {name: value for name, value in merged.items() if isinstance(value, str)}
    headers["x-stainless-retry-count"] = "0"
    headers["x-stainless-read-timeout"] = str(read_timeout(client))
    return headers


def read_timeout(client: Any) -> float:
    """The client's read timeout in seconds (a number, or an httpx2 Timeout's read part)."""
    timeout = client.timeout
    return float(getattr(timeout, "read", timeout))


def sdk_url(client: Any, path: str) -> str:
    """The SDK's URL for a relative `path`: its base URL (which always ends in '/') + path."""
    base = str(client.base_url)
    return (base if base.endswith("/") else base + "/") + path.lstrip("/")


def error_body(raw: bytes) -> object:
    """An error answer's body as the SDK hands it to its status error: the JSON's `error`
    member (or the whole JSON), else the text."""
    import orjson

    text = raw.decode("utf-8", errors="replace").strip()
    try:
        body = orjson.loads(text)
    except orjson.JSONDecodeError:
        return text
    return body.get("error", body) if isinstance(body, dict) else body


class JsonPoster:
    """POSTs JSON for one SDK client; its own aiohttp session, made in the running loop."""

    def __init__(self, client: Any, ssl_context: Any) -> None:
        import aiohttp
        from aiohttp.helpers import get_env_proxy_for_url
        from yarl import URL

        self._base = sdk_url(client, "")
        self._ssl = ssl_context
        self._headers = sdk_headers(client)
        seconds = read_timeout(client)
        # The SDK's aiohttp adapter's timeouts: connect, read, and the wait for a pooled one.
        self._timeout = aiohttp.ClientTimeout(
            sock_connect=seconds, sock_read=seconds, connect=seconds
        )
        # A proxy from the environment ($HTTPS_PROXY, $NO_PROXY), found once for the base URL,
        # as the SDK's client would (aiohttp's trust_env would look again on every request).
        try:
            self._proxy, self._proxy_auth = get_env_proxy_for_url(URL(str(client.base_url)))
        except LookupError:
            self._proxy, self._proxy_auth = None, None
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        import aiohttp

        connector = aiohttp.TCPConnector(
            limit=MAX_CONNECTIONS, keepalive_timeout=KEEPALIVE_SECONDS, ssl=self._ssl
        )
        self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    async def post(self, path: str, body: dict[str, Any], where: str) -> Any:
        import aiohttp
        import orjson

        session = self._session or self._open()
        try:
            async with session.post(
                self._base + path.lstrip("/"),
                data=orjson.dumps(body),
                headers=self._headers,
                timeout=self._timeout,
                proxy=self._proxy,
                proxy_auth=self._proxy_auth,
            ) as response:
                raw = await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise transport_error(where, exc) from exc
        if response.status >= 400:
            raise status_error(where, response.status, error_body(raw), response.headers)
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ProviderCallError(
                f"{where}: the answer is not JSON ({exc})", retryable=True
            ) from exc

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()


_SDKS_IN_USE: set[type] = set()  # SDK client classes a provider of this process has made


class SdkProvider:
    """What both SDK-backed providers share: settings, and one client made on first use
    (so importing a provider module never imports its SDK)."""

    def __init__(self, name: str, settings: ProviderSettings) -> None:
        self.name = name
        self.settings = settings
        self.supports_images = settings.supports_images
        self._client: Any = None
        self._poster: JsonPoster | None = None

    @classmethod
    def import_sdk(cls) -> None:
        """Import the SDK, and make the TLS context, now rather than at the first call (the
        home's process does, before forking its workers: atlas/workers/fork.py)."""
        cls._sdk_client_class()
        cls._sdk_http_client_class()
        tls_context()

    @classmethod
    def _sdk_client_class(cls) -> Any:
        raise NotImplementedError

    @classmethod
    def _sdk_http_client_class(cls) -> Any:
        """The SDK's own aiohttp-backed client: with hundreds of calls in flight, httpx's
        connection pool scans every pooled connection per request and cost more CPU than
        the rest of a turn (docs/benchmarks.md); aiohttp's does not."""
        raise NotImplementedError

    def _translate(self, exc: Exception, model: str) -> ProviderCallError | None:
        """The SDK's exception → ProviderCallError, or None for one it does not know."""
        raise NotImplementedError

    def _where(self, model: str) -> str:
        return f"provider {self.name!r} model {model!r}"

    @contextlib.contextmanager
    def _sdk_errors(self, model: str) -> Iterator[None]:
        """The SDK's and the transport's errors become ProviderCallErrors; ours and any
        other exception pass unchanged."""
        try:
            yield
        except ProviderCallError:
            raise
        except Exception as exc:
            translated = self._translate(exc, model)
            if translated is None:
                raise
            raise translated from exc

    def _get_client(self) -> Any:
        if self._client is None:
            api_key = api_key_for(self.name, self.settings)  # raises before anything is cached
            sdk = self._sdk_client_class()
            self._client = sdk(
                base_url=self.settings.base_url,
                api_key=api_key,
                max_retries=0,  # the router retries, with our backoff and logging
                timeout=self.settings.timeout,
                http_client=self._sdk_http_client_class()(
                    timeout=self.settings.timeout, verify=tls_context()
                ),
            )
            # A whole answer's POST skips the SDK's request path (JsonPoster, above).
            self._poster = JsonPoster(self._client, tls_context())
            if sdk not in _SDKS_IN_USE:  # its modules just imported: long-lived, like the rest
                _SDKS_IN_USE.add(sdk)
                freeze_long_lived_objects()
        return self._client

    def poster(self) -> JsonPoster:
        """The plain-JSON POST of this provider's client (made with it on first use)."""
        if self._poster is None:
            self._get_client()
        assert self._poster is not None
        return self._poster

    async def close(self) -> None:
        """Close the client's connections (aiohttp warns about a session left open)."""
        if self._poster is not None:
            poster, self._poster = self._poster, None
            await poster.close()
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()
