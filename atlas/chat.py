"""Terminal use of a home: `atlas chat` (the console channel) and `atlas tool`."""

from __future__ import annotations

import asyncio
import getpass
import logging
import signal
import sys
from datetime import UTC, datetime

from atlas.channels.base import Address
from atlas.channels.console import ConsoleChannel, stdin_reader
from atlas.channels.console_input import ConsoleInput
from atlas.dispatch import STOP_COMMAND, Inbound
from atlas.home import Home
from atlas.mcp.manager import McpManager
from atlas.preload import start_loading_sdks
from atlas.providers.base import ToolCall
from atlas.runtime import Runtime
from atlas.services import start_core, stop_turns
from atlas.store.home_engines import HomeEngines
from atlas.tools.catalog import default_registry
from atlas.tools.registry import RunContext
from atlas.trust.gate import Deny, settle

EXIT_WORDS = {"/exit", "/quit"}


class _ToldOnTheTerminal(logging.Filter):
    """Drops the dispatcher's "turn failed" warning for a console turn: the reply printed just
    before it already says the same thing to the same person."""

    def filter(self, record: logging.LogRecord) -> bool:
        address = record.args[0] if isinstance(record.args, tuple) and record.args else None
        return not (
            str(record.msg).startswith("turn failed in")
            and isinstance(address, Address)
            and address.channel == "console"
        )


async def chat(
    home: Home, bot_name: str | None, *, chat_name: str | None = None, stream: bool = True
) -> int:
    bot = home.bot(bot_name)
    typed = ConsoleInput(await stdin_reader())  # the one reader of stdin (console_input.py)
    console = ConsoleChannel(typed)
    console.streams = stream
    # atlas.db and the bots' files, or the home's PostgreSQL database (`[store] url`).
    engines = await HomeEngines.open(home)
    dispatcher = await start_core(home, {"console": console}, engines=engines)
    chat_id = chat_name or "terminal-" + datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    address = Address(bot.name, "console", chat_id, user=getpass.getuser())
    # /stop typed while a reply runs (streams) stops it, as Ctrl-C does; typed while nothing
    # runs, it goes to the dispatcher like any message ("Nothing is running.").
    typed.intercept(STOP_COMMAND, lambda: dispatcher.stop_turn(address))
    typed.start()
    # The model SDK loads while the person types the first line (atlas/preload.py).
    sdks = start_loading_sdks(home, [bot])

    def on_interrupt() -> None:
        if not dispatcher.stop_turn(address):
            console.write("\n(type /exit or press Ctrl-D to leave)\nyou> ")

    # Piped input is not echoed by a terminal: echo it, so each prompt starts its own line.
    interactive = sys.stdin.isatty()
    told = _ToldOnTheTerminal()
    logging.getLogger("atlas.dispatch").addFilter(told)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, on_interrupt)
    console.write(
        f"Chatting with {bot.name} ({bot.model}) in conversation {chat_id}. "
        "Ctrl-C or /stop stops a reply; /exit leaves.\n"
    )
    try:
        while True:
            console.write("you> ")
            got = await typed.prompt_line()
            line = got.text if got else ""
            # A line typed ahead (during a reply) showed amid the reply: echo it after its prompt.
            if line and (not interactive or got and got.ahead):
                console.write(line if line.endswith("\n") else line + "\n")
            if not line or line.strip() in EXIT_WORDS:
                break
            if not line.strip():
                continue
            await dispatcher.submit(Inbound(address, line.rstrip("\n")))
            await dispatcher.wait_idle(address)
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        logging.getLogger("atlas.dispatch").removeFilter(told)
        await typed.close()
        await sdks  # never raises; a thread cannot be cancelled, so let it end
        await stop_turns(dispatcher)
        await dispatcher.runtime.close()
    console.write("\n")
    # A script piping its questions in learns from the exit code that a turn failed.
    return 1 if console.failed_turns and not interactive else 0


async def _wait_for_its_server(mcp: McpManager, tool: str) -> None:
    """`mcp__<server>__…`: a server still starting after [mcp] startup_wait (a slow machine)
    is waited for up to its connect timeout; one that failed is not (the error says why)."""
    deadline = asyncio.get_running_loop().time() + mcp.timeouts.connect
    while asyncio.get_running_loop().time() < deadline:
        ours = [s for s in mcp.status() if tool.startswith(f"mcp__{s.name}__")]
        if not ours or ours[0].state != "starting":
            return
        await asyncio.sleep(0.05)


async def run_one_tool(home: Home, bot_name: str | None, name: str, json_args: str) -> int:
    """Run one tool as the bot would, through the gate; print its result. Exit 1 on an error."""
    bot = home.bot(bot_name)
    # MCP servers as the daemon loads them (a malformed mcp.json fails here), started only
    # when the tool is not a built-in one: `atlas tool read_file` stays instant.
    mcp = McpManager(home)
    built_in = default_registry()
    runtime = Runtime(home, mcp=mcp, registry=built_in, engines=await HomeEngines.open(home))
    console = ConsoleChannel(await stdin_reader())
    address = Address(bot.name, "console", "atlas-tool")
    try:
        if built_in.get(name) is None:
            await mcp.start()
            await _wait_for_its_server(mcp, name)
        store = await runtime.store(bot)
        conversation = await store.conversation("console", "atlas-tool", bot=bot.name)

        async def ask(question: str, choices: list[str]) -> str | None:
            return await console.ask(address, question, choices)

        run = RunContext(
            home=home,
            bot=bot,
            conversation_id=conversation.id,
            channel="console",
            state=runtime.state(bot, conversation.id),
            ask=ask,
            open_store=runtime.store,
        )
        tool = runtime.registry.get(name)
        if tool is None:
            known = ", ".join(t.name for t in runtime.registry)
            print(f"atlas: no tool named {name!r} (tools: {known})", file=sys.stderr)
            for server in mcp.status():  # why an MCP server's tools may be missing
                if server.state != "ready":
                    why = f": {server.error}" if server.error else ""
                    print(
                        f"atlas: MCP server {server.name} is {server.state}{why}", file=sys.stderr
                    )
            return 2
        call = ToolCall("cli", name, json_args)
        decision = await settle(runtime.gate, call, tool, run)
        if isinstance(decision, Deny):
            print(f"Error: the approval gate denied this call: {decision.reason}")
            return 1
        result = await tool.invoke(run, json_args)
        print(result.text)
        for image in result.images:
            print(f"[image {image.media_type}, {len(image.data_b64) * 3 // 4:,} bytes]")
        return 1 if result.is_error else 0
    finally:
        await runtime.close()
