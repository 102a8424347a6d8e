"""A package registry on a loopback address, for tests of MCP servers that install themselves.

It serves one npm package (packument and tarball, as `npx` asks for them) whose `bin` starts the
fake MCP server of tests/fakes/mcp_server.py with the Python named in FAKE_MCP_PYTHON, and the
server's script itself at `/files/mcp_server.py` (what tests/fakes/launchers/ fetch). Every
request's path is recorded, so a test can tell whether the registry was reached.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import tarfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

FAKE_SERVER = Path(__file__).resolve().parent / "mcp_server.py"
PACKAGE = "@fake/mcp-notes"
VERSION = "1.0.0"
# The package's one program: node starts the Python fake server, which inherits stdin/stdout.
BIN_JS = """#!/usr/bin/env node
const { spawnSync } = require("child_process");
const path = require("path");
const done = spawnSync(process.env.FAKE_MCP_PYTHON, [path.join(__dirname, "server.py")],
                       { stdio: "inherit" });
process.exit(done.status === null ? 1 : done.status);
"""


def _tarball() -> bytes:
    manifest = {"name": PACKAGE, "version": VERSION, "bin": {"mcp-notes": "bin.js"}}
    files = {
        "package/package.json": json.dumps(manifest).encode(),
        "package/bin.js": BIN_JS.encode(),
        "package/server.py": FAKE_SERVER.read_bytes(),
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o755, 0
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@dataclass
class FakeRegistry:
    url: str
    requests: list[str] = field(default_factory=list)


def _app(registry: FakeRegistry) -> web.Application:
    tarball = _tarball()
    tarball_name = f"{PACKAGE.split('/')[1]}-{VERSION}.tgz"
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(tarball).digest()).decode()

    async def packument(request: web.Request) -> web.Response:
        registry.requests.append(request.path)
        if request.match_info["name"].replace("%2f", "/").replace("%2F", "/") != PACKAGE:
            return web.json_response({"error": "not found"}, status=404)
        version = {
            "name": PACKAGE,
            "version": VERSION,
            "bin": {"mcp-notes": "bin.js"},
            "dist": {
                "tarball": f"{registry.url}{PACKAGE}/-/{tarball_name}",
                "integrity": integrity,
                "shasum": hashlib.sha1(tarball).hexdigest(),
            },
        }
        body = {"name": PACKAGE, "dist-tags": {"latest": VERSION}, "versions": {VERSION: version}}
        return web.json_response(body)

    async def download(request: web.Request) -> web.Response:
        registry.requests.append(request.path)
        return web.Response(body=tarball, content_type="application/octet-stream")

    async def script(request: web.Request) -> web.Response:
        registry.requests.append(request.path)
        return web.Response(body=FAKE_SERVER.read_bytes(), content_type="text/x-python")

    app = web.Application()
    app.router.add_get("/files/mcp_server.py", script)
    app.router.add_get("/{scope}/{name}/-/{file}", download)
    app.router.add_get("/{name:[^/]+}", packument)
    return app


@asynccontextmanager
async def serve_registry(host: str = "127.0.0.2") -> AsyncIterator[FakeRegistry]:
    """The registry on `host` (not 127.0.0.1, which NO_PROXY sends around the proxy), on a free
    port; stopped when the block ends."""
    registry = FakeRegistry("")
    runner = web.AppRunner(_app(registry))
    await runner.setup()
    site = web.TCPSite(runner, host, 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    registry.url = f"http://{host}:{port}/"
    try:
        yield registry
    finally:
        await runner.cleanup()
