"""With the dashboard's port taken by another program, `atlas dashboard` says so and by what,
and prints no link (that program would get the login token); `atlas doctor` reports it."""

from __future__ import annotations

import io
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from atlas.dashboard.cli import dashboard_main
from atlas.dashboard.port import port_owner
from atlas.dashboard.server import doctor_lines
from atlas.errors import AtlasError
from atlas.home import Home
from tests.helpers import BASE_CONFIG, make_home


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port another program listens on (this test process stands for it)."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        yield other.getsockname()[1]


def _home_on(home_path: Path, port: int) -> Home:
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1").replace(
        'listen = "127.0.0.1:0"', f'listen = "127.0.0.1:{port}"'
    )
    return make_home(home_path, config=config)


def test_atlas_dashboard_names_what_holds_the_port_and_prints_no_link(
    home_path: Path, taken_port: int
) -> None:
    home = _home_on(home_path, taken_port)
    out = io.StringIO()
    with pytest.raises(AtlasError) as refused:
        dashboard_main(home, out)
    said = str(refused.value)
    assert f"port {taken_port} on 127.0.0.1 is taken by" in said
    this = Path("/proc/self/comm").read_text().strip()
    assert f"{this} (pid {os.getpid()}:" in said  # the program, found in /proc
    assert "token=" not in out.getvalue() and "http://" not in out.getvalue()


def test_doctor_reports_the_taken_port_instead_of_all_good(
    home_path: Path, taken_port: int
) -> None:
    [(name, ok, detail, fix, optional)] = doctor_lines(_home_on(home_path, taken_port))
    assert name == "dashboard" and not ok and not optional
    assert "is taken by" in detail and f"pid {os.getpid()}" in detail
    assert "[dashboard] listen" in fix


def test_a_free_port_gets_the_link(home_path: Path) -> None:
    with socket.socket() as probe:  # a port free once the probe closes
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out = io.StringIO()
    assert dashboard_main(_home_on(home_path, port), out) == 0
    assert f"http://127.0.0.1:{port}/login?token=" in out.getvalue()
    assert doctor_lines(_home_on(home_path, port))[0][1] is True
    assert port_owner(port) is None
