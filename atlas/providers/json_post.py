"""A model call's plain-JSON POST straight through aiohttp, with the SDK client's own URL,
headers and timeout.

The SDK's request path (its option models, httpx2's URL and header objects, the adapter onto
aiohttp) cost about three quarters of a model call's CPU and a quarter of a busy process's
(docs/benchmarks.md). Only the non-streaming call comes here: streaming stays with the SDK's
typed calls. The bytes sent are the SDK's: the same URL, the same headers (read from the client
once: its key, User-Agent, version headers), the same JSON; its errors become the same
ProviderCallErrors (tests/integration/test_providers.py compares both paths' headers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from atlas.providers.base import ProviderCallError
from atlas.providers.wire import status_error, transport_error

if TYPE_CHECKING:
    import aiohttp

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
