"""`delegate action=account` for Claude Code, to its end: `claude auth login` prints the link,
then waits for the code the sign-in page shows, pasted on its stdin. The person is asked for it
in the chat (the question mechanism of ask_user) and Atlas writes it to the login's stdin. A
fake `claude` (written here) prints a link and reads a code, inside the real sandbox."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from atlas.agents.services import HomeServices, provide_services
from atlas.channels.base import Answer, Question, QuestionOutcome
from atlas.dispatch import Dispatcher
from atlas.home import Home
from atlas.runtime import Runtime
from atlas.sandbox.proxy import stop_proxies
from atlas.tools.delegate import delegate
from atlas.tools.registry import ToolRegistry
from tests.fakes.agent_fakes import ConversationModel, eventually
from tests.fakes.recording_channel import RecordingChannel
from tests.helpers import BASE_CONFIG, make_home
from tests.integration.test_delegate_executors import Desk, call, chat

pytestmark = [
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
    pytest.mark.skipif(shutil.which("socat") is None, reason="socat bridges the proxy in"),
]

LINK = "https://claude.ai/oauth/authorize?code=true&client_id=fake&state=s1"
CODE = "fakecode-7Hq2#s1"

# What `claude auth login` does with no browser to open (as of Claude Code 2.1): the link, then
# a prompt with no newline, then one line read from stdin.
FAKE_CLAUDE = f"""#!/usr/bin/env python3
import os, sys
from pathlib import Path

if sys.argv[1:3] != ["auth", "login"]:
    sys.exit("this fake only logs in")
print("Browser didn't open? Use the url below to sign in:")
print()
print({LINK!r})
print()
sys.stdout.write("Paste code here if prompted > ")
sys.stdout.flush()
code = sys.stdin.readline().strip()
if not code:
    print("\\nNo code given (stdin closed)")
    sys.exit(1)
if code != {CODE!r}:
    print("\\nOAuth error: Invalid code")
    sys.exit(1)
Path(os.environ["CLAUDE_CONFIG_DIR"], ".credentials.json").write_text('{{"claudeAiOauth": {{}}}}')
print("\\nLogin successful.")
"""


class PastingDesk(Desk):
    """The person: pastes `code` as their own words to the question with the link."""

    def __init__(self, code: str | None) -> None:
        super().__init__()
        self.code = code

    async def ask_questions(self, questions: list[Question]) -> QuestionOutcome:
        self.questions.append(questions)
        if self.code is None:
            return QuestionOutcome("timed out")
        return QuestionOutcome("submitted", (Answer(other=self.code, by="pat"),))


@pytest.fixture
def account(tmp_path: Path) -> Path:
    return tmp_path / "claude-main"


@pytest.fixture
def home(tmp_path: Path, account: Path) -> Home:
    fake = tmp_path / "bin" / "claude"
    fake.parent.mkdir()
    fake.write_text(FAKE_CLAUDE)
    fake.chmod(0o755)
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1") + (
        f"\n[review]\nenabled = false\n\n[executors.claude-code]\nenabled = true\n"
        f'binary = "{fake}"\naccounts = {{ main = "{account}" }}\n'
    )
    return make_home(tmp_path / "home", config=config)


@pytest.fixture
async def services(home: Home) -> AsyncIterator[HomeServices]:
    runtime = Runtime(home, model=ConversationModel({}), registry=ToolRegistry([delegate]))
    dispatcher = Dispatcher(runtime, {"test": RecordingChannel()})
    services = provide_services(dispatcher)
    yield services
    await services.close()
    await dispatcher.shutdown()
    await runtime.close()
    await stop_proxies()


async def test_the_code_is_asked_in_the_chat_and_given_to_the_login(
    home: Home, services: HomeServices, account: Path
) -> None:
    desk = PastingDesk(CODE)
    run = chat(home, services, desk)
    text = await call(run, action="account", executor="claude-code@main")
    assert "Login of claude-code@main started (" in text and LINK in text
    assert "the person is asked for it in this chat" in text
    await eventually(lambda: bool(desk.notices), what="the login's notice")
    assert desk.notices == ["The login of claude-code@main ended: logged in."]
    [[question]] = desk.questions
    assert question.text.startswith("Log claude-code@main in: open this link")
    assert question.text.endswith(LINK) and question.choices == ()
    assert (account / ".credentials.json").exists()


async def test_no_code_stops_the_login_and_says_why(home: Home, services: HomeServices) -> None:
    desk = PastingDesk(None)
    run = chat(home, services, desk)
    await call(run, action="account", executor="claude-code@main")
    await eventually(lambda: bool(desk.notices), what="the login's notice")
    assert desk.notices == [
        "The login of claude-code@main was stopped: no code was pasted (timed out)."
    ]


async def test_a_wrong_code_is_the_harness_failure(home: Home, services: HomeServices) -> None:
    desk = PastingDesk("not-the-code")
    await call(chat(home, services, desk), action="account", executor="claude-code@main")
    await eventually(lambda: bool(desk.notices), what="the login's notice")
    assert desk.notices == ["The login of claude-code@main failed (exit 1)."]
