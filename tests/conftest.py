"""Hermetic tests: a temporary home, no credentials, no network but loopback."""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import make_home

# PostgreSQL's throwaway cluster and a database per test (tests/postgres_fixtures.py).
pytest_plugins = ["tests.postgres_fixtures"]

SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL|AUTH", re.IGNORECASE)
_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex
_real_getaddrinfo = socket.getaddrinfo


def _is_local(host: object) -> bool:
    if not isinstance(host, str):
        return False
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def _check(sock: socket.socket, address: object) -> None:
    if sock.family == socket.AF_UNIX:
        return
    host = address[0] if isinstance(address, tuple) else address
    if not _is_local(host):
        raise RuntimeError(f"test tried to reach {address!r}: only loopback is allowed in tests")


def _guarded_connect(self: socket.socket, address: object) -> None:
    _check(self, address)
    return _real_connect(self, address)


def _guarded_connect_ex(self: socket.socket, address: object) -> int:
    _check(self, address)
    return _real_connect_ex(self, address)


def _guarded_getaddrinfo(host, *args, **kwargs):  # type: ignore[no-untyped-def]
    if host is not None and not _is_local(host.decode() if isinstance(host, bytes) else host):
        raise socket.gaierror(socket.EAI_NONAME, f"{host}: name lookups are blocked in tests")
    return _real_getaddrinfo(host, *args, **kwargs)


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket.socket, "connect", _guarded_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", _guarded_connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", _guarded_getaddrinfo)


@pytest.fixture(autouse=True)
def _hermetic_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if SECRET_NAME.search(name):
            monkeypatch.delenv(name)
    for name in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("ATLAS_HOME", str(tmp_path / "home"))
    # One process per daemon unless a test is about worker processes (it unsets this).
    monkeypatch.setenv("ATLAS_WORKERS", "1")


@pytest.fixture
def home_path(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def home(home_path: Path) -> Iterator[object]:
    """A fresh home made by `init_home`, its provider pointing at an unused loopback port."""
    yield make_home(home_path)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The run left no sandbox behind (issue 38): no bwrap, bridge or process inside one whose
    command line names this run's temporary folders. In the controller only (with xdist, the
    workers' folders are inside the controller's), once every worker has finished."""
    if hasattr(session.config, "workerinput"):
        return
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is None:
        return
    from tests.sandbox_leftovers import wait_until_gone

    left = wait_until_gone(str(factory.getbasetemp()))
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        text = "the test run left sandbox processes behind:\n" + "\n".join(left)
        if reporter is not None:
            reporter.write_line(text, red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
