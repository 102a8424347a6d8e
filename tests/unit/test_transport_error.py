"""A transport failure is named for what happened underneath, not for the adapter's guess:
aiohttp's adapter turns a refused connection or an unknown host into a *connect timeout*."""

from __future__ import annotations

import socket

from atlas.providers.wire import transport_error


class ConnectTimeout(Exception):  # named like httpx2's: "timeout" in the class name
    pass


def chained(outer: BaseException, inner: BaseException) -> BaseException:
    try:
        try:
            raise inner
        except BaseException as exc:
            raise outer from exc
    except BaseException as exc:
        return exc


def test_an_unknown_host_is_a_connection_failure_not_a_timeout() -> None:
    exc = chained(ConnectTimeout("Request timed out."), socket.gaierror(-2, "Name not known"))
    error = transport_error("provider 'openai'", exc)
    assert "connection failed: [Errno -2] Name not known" in str(error)
    assert "timed out" not in str(error)
    assert error.retryable


def test_a_refused_connection_is_a_connection_failure() -> None:
    exc = chained(ConnectTimeout("Request timed out."), ConnectionRefusedError(111, "refused"))
    assert "connection failed: [Errno 111] refused" in str(transport_error("p", exc))


def test_a_real_timeout_stays_a_timeout() -> None:
    exc = chained(ConnectTimeout("Request timed out."), TimeoutError())
    assert "timed out: Request timed out." in str(transport_error("p", exc))
