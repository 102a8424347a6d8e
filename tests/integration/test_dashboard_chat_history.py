"""The Chat page keeps a reply's tool calls: a turn over the real dispatcher and tool loop (a
scripted model calling a real tool) ends; the finished message pushed live keeps its call
folded and loads the stored result in place; the page loaded afterwards shows the call folded
between the person's message and the reply, its result escaped."""

from __future__ import annotations

import re
from pathlib import Path

from atlas.providers.scripted import Reply
from atlas.tools.registry import RunContext, ToolRegistry, tool
from tests.unit.test_dashboard_chat import chat_rig, next_event

REFETCH = re.compile(r'hx-get="([^"]+)"')


@tool()
async def find_pier(run: RunContext, ship: str) -> str:
    """Which pier a ship leaves from."""
    return f"<b>Pier three</b> for the {ship}, at 14:05"


async def test_a_turns_tool_call_stays_folded_after_the_reply_and_on_the_next_visit(
    home_path: Path,
) -> None:
    async with chat_rig(home_path, ToolRegistry([find_pier])) as rig:
        csrf = await rig.log_in()
        stream = await rig.client.get("/events")
        rig.model.release.set()  # no holding back: the whole turn at once
        rig.model.add(
            Reply(calls=[("find_pier", {"ship": "zeppelin"})]),
            Reply("It leaves from pier three."),
        )
        await rig.client.post("/chat/atlas", data={"text": "Where?", "csrf": csrf})
        part, html = await next_event(stream)
        while part != "message" or "pier three" not in html:
            part, html = await next_event(stream)
        stream.close()
        # Live: the finished reply keeps its call folded, and fetches the stored result.
        assert '<details class="tool-call">' in html and "find_pier" in html
        assert "ship=&#34;zeppelin&#34;" in html
        refetch = REFETCH.search(html)
        assert refetch is not None
        url = refetch.group(1).replace("&amp;", "&")
        assert url.startswith("/chat/atlas/calls?call=")
        loaded = await rig.client.get(url)
        assert loaded.status == 200
        calls = await loaded.text()
        assert "find_pier" in calls and "&lt;b&gt;Pier three&lt;/b&gt; for the zeppelin" in calls
        assert "<b>" not in calls
        unknown = await rig.client.get("/chat/atlas/calls?call=nobody")
        assert unknown.status == 204  # nothing to load: the page keeps what it shows

        # The next visit (a reload): message, folded call with its result, reply, in order.
        page = await (await rig.client.get("/chat/atlas")).text()
        log = page[page.index('id="chat-log"') : page.index('id="chat-reply"')]
        assert log.count('<details class="tool-call">') == 1 and "<details open" not in log
        order = ["Where?", "find_pier", "ship=&#34;zeppelin&#34;", "Pier three", "from pier three"]
        places = [log.index(part) for part in order]
        assert places == sorted(places)
        assert "&lt;b&gt;Pier three&lt;/b&gt;" in log and "<b>Pier three" not in log
        assert "no result stored" not in log
