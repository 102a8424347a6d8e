"""A small MCP server written with the official SDK, for tests of atlas/mcp.

Run as a script it serves stdio (`python tests/fakes/mcp_server.py`); tests serve
`build_server().streamable_http_app()` over HTTP on 127.0.0.1 themselves.
"""

from __future__ import annotations

import base64
import os

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image
from mcp.types import ToolAnnotations

READ_ONLY = ToolAnnotations(read_only_hint=True)
# The smallest valid PNG: one transparent pixel.
PIXEL_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


def build_server() -> MCPServer:
    server = MCPServer("fake-notes", log_level="WARNING")
    notes: list[str] = []

    @server.tool(annotations=READ_ONLY)
    def echo(text: str, run: str = "") -> str:
        """Answer with the text given (and `run`, an argument whose name Atlas also uses)."""
        return text + (f" run={run}" if run else "")

    @server.tool()
    def add_note(text: str) -> str:
        """Keep a note; answers how many notes there are."""
        notes.append(text)
        return f"{len(notes)} note(s)"

    @server.tool(annotations=READ_ONLY)
    def big(lines: int) -> str:
        """Answer with this many numbered lines."""
        return "\n".join(f"line {i} of the big answer" for i in range(1, lines + 1))

    @server.tool(annotations=READ_ONLY)
    def pid() -> int:
        """The server's process id."""
        return os.getpid()

    @server.tool(annotations=READ_ONLY)
    def fail(message: str) -> str:
        """Always fails with the message given (an anticipated failure: the message is sent)."""
        raise ToolError(message)

    @server.tool(annotations=READ_ONLY)
    def env(name: str) -> str:
        """The value of an environment variable of the server."""
        return os.environ.get(name, "(unset)")

    @server.tool(annotations=READ_ONLY)
    def read(path: str) -> str:
        """The text of a file, or why it cannot be read (for the sandbox's tests)."""
        try:
            with open(path, encoding="utf-8") as file:
                return file.read()
        except OSError as exc:
            return f"cannot read: {exc.strerror}"

    @server.tool()
    def write(path: str, text: str) -> str:
        """Write a file: "written", or why it cannot be written (for the sandbox's tests)."""
        try:
            with open(path, "w", encoding="utf-8") as file:
                file.write(text)
        except OSError as exc:
            return f"cannot write: {exc.strerror}"
        return "written"

    @server.tool(annotations=READ_ONLY)
    def connect(host: str, port: int) -> str:
        """Open a TCP connection: "connected", or why not (for the sandbox's tests)."""
        import socket

        try:
            socket.create_connection((host, port), timeout=3).close()
        except OSError as exc:
            return f"cannot connect: {exc.strerror or exc}"
        return "connected"

    @server.tool(annotations=READ_ONLY)
    def fetch(url: str) -> str:
        """GET a URL (through $HTTP_PROXY when set): the body, or why not (sandbox tests)."""
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                return answer.read().decode()
        except urllib.error.HTTPError as exc:
            return f"cannot fetch: HTTP {exc.code} {exc.read().decode(errors='replace')}"
        except OSError as exc:
            return f"cannot fetch: {exc}"

    @server.tool(annotations=READ_ONLY)
    def picture() -> Image:
        """A one-pixel PNG."""
        return Image(data=PIXEL_PNG, format="png")

    @server.tool()
    async def grow(ctx: Context) -> str:
        """Add a tool named `grown` and tell the client that the tools changed."""

        def grown() -> str:
            """A tool added while the server runs."""
            return "grown"

        server.add_tool(grown)
        await ctx.request_context.session.send_tool_list_changed()
        return "grew"

    return server


if __name__ == "__main__":
    build_server().run()
