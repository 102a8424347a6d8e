"""The test kit's own guards: no network but loopback, no credentials."""

from __future__ import annotations

import os
import socket

import pytest


def test_connections_beyond_loopback_fail() -> None:
    with (
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock,
        pytest.raises(RuntimeError, match="only loopback"),
    ):
        sock.connect(("192.0.2.1", 80))  # TEST-NET-1: never routed, and never tried
    with pytest.raises(socket.gaierror):
        socket.getaddrinfo("example.com", 443)


def test_loopback_is_allowed() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        with socket.create_connection(server.getsockname(), timeout=2):
            pass


def test_credentials_are_stripped_and_home_is_temporary(tmp_path) -> None:
    assert not [name for name in os.environ if "API_KEY" in name or "TOKEN" in name]
    assert os.environ["ATLAS_HOME"].startswith(str(tmp_path))
