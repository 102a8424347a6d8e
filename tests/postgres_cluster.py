"""A throwaway PostgreSQL cluster for tests: Debian's binaries, `initdb` in a temporary folder,
`pg_ctl` as the `postgres` user (the server refuses to run as root) on a free loopback port.

One cluster per pytest process (an xdist worker), made on first use and removed at the end of the
session; each test that asks gets a database of its own in it (`CREATE DATABASE`, a copy of
template1: milliseconds), so tests never see each other's rows.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from atlas.run_files import pid_alive

SUPERUSER = "atlas"


def find_postgres_bin() -> Path | None:
    """The newest installed PostgreSQL's bin folder (Debian keeps them versioned), or None."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda path: (
            int(Path(path).parent.parent.name) if Path(path).parent.parent.name.isdigit() else 0
        ),
    )
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_postgres(argv: list[str]) -> list[str]:
    """Run as the `postgres` user when we are root (the server will not run as root)."""
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


@dataclass
class Cluster:
    """A running server: `url(db)` is the address of one of its databases."""

    bin_dir: Path
    data_dir: Path
    port: int

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        subprocess.run(
            _as_postgres(
                [
                    str(self.bin_dir / "pg_ctl"),
                    "-D",
                    str(self.data_dir),
                    "-m",
                    "immediate",
                    "-w",
                    "stop",
                ]
            ),
            check=False,
            capture_output=True,
        )
        shutil.rmtree(self.data_dir.parent, ignore_errors=True)


# For tests: no fsync (a crash loses a test's rows, never anything kept), a small cache.
TEST_SETTINGS = (
    "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c shared_buffers=16MB"
)


OWNER_FILE = "owner.pid"  # the pid of the process that made the cluster, beside its data


def sweep_orphans(bin_dir: Path) -> list[Path]:
    """Stop and remove the throwaway clusters whose maker is gone (a pytest or a script killed
    before its cleanup ran), so a killed run leaves no server running for long: the next one
    that starts a cluster takes them down. The folders it removed."""
    removed: list[Path] = []
    for top in Path(tempfile.gettempdir()).glob("atlas-pg-*"):
        try:
            owner = int((top / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue  # being made right now, or not ours
        if pid_alive(owner):
            continue
        Cluster(bin_dir, top / "data", 0).stop()
        removed.append(top)
    return removed


def start_cluster(bin_dir: Path, settings: str = TEST_SETTINGS) -> Cluster:
    """initdb + pg_ctl start; `settings` are the server's `-c name=value` options (the tests'
    by default; scripts/bench_turns.py passes its own)."""
    sweep_orphans(bin_dir)
    top = Path(tempfile.mkdtemp(prefix="atlas-pg-"))
    (top / OWNER_FILE).write_text(str(os.getpid()))
    data_dir = top / "data"
    data_dir.mkdir()
    if os.geteuid() == 0:
        entry = pwd.getpwnam("postgres")
        for path in (top, data_dir):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    subprocess.run(
        _as_postgres(
            [
                str(bin_dir / "initdb"),
                "-D",
                str(data_dir),
                "-A",
                "trust",
                "-U",
                SUPERUSER,
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
                "--no-sync",
            ]
        ),
        check=True,
        capture_output=True,
    )
    options = f"-p {{port}} -k {data_dir} -c listen_addresses=127.0.0.1 {settings}"
    # A port found free can be taken before the server binds it: try a few.
    last_error = ""
    for _ in range(5):
        port = _free_port()
        started = subprocess.run(
            _as_postgres(
                [
                    str(bin_dir / "pg_ctl"),
                    "-D",
                    str(data_dir),
                    "-o",
                    options.format(port=port),
                    "-l",
                    str(top / "server.log"),
                    "-w",
                    "start",
                ]
            ),
            capture_output=True,
            text=True,
        )
        if started.returncode == 0:
            return Cluster(bin_dir, data_dir, port)
        last_error = started.stderr + _tail(top / "server.log")
    shutil.rmtree(top, ignore_errors=True)
    raise RuntimeError(f"could not start a test PostgreSQL server: {last_error}")


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-2000:]
    except OSError:
        return ""


@contextmanager
def database_for_script(url: str | None, name: str | None = None) -> Iterator[str]:
    """A script's database: the url it was given, or a throwaway cluster's (database `name`,
    made first; the default database without one), stopped when the script is done."""
    if url is not None:
        yield url
        return
    bin_dir = find_postgres_bin()
    if bin_dir is None:
        sys.exit("PostgreSQL is not installed: give --url")
    cluster = start_cluster(bin_dir)
    try:
        if name is not None:
            subprocess.run(
                [str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(cluster.port)]
                + ["-U", SUPERUSER, name],
                check=True,
                capture_output=True,
            )
        yield cluster.url(name) if name is not None else cluster.url()
    finally:
        cluster.stop()
