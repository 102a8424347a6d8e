"""An account's login by the harness's own command (`delegate action=account`), only when the
person asks (the gate puts every such call to them: the `workbench:login` rule).

The login runs like a task: in the sandbox, with only the account's config folder writable and
the provider's hosts reachable. It prints a link (and Codex a device code) for the person's
browser; Atlas waits for that, returns it, and lets the login finish in the background; the
conversation gets a notice when it ends.

Claude Code's login then waits for the code the page shows after sign-in, pasted on its stdin
(`Executor.login_code_prompt`): the person is asked for it in the chat, with the question
mechanism of ask_user (the link in the question, a free-text answer), and Atlas writes it to
the login's stdin. The code is never logged nor recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from typing import TYPE_CHECKING

from atlas.executors.base import Account, Executor, ExecutorError

if TYPE_CHECKING:
    from atlas.executors.registry import ExecutorSet
    from atlas.tools.registry import Notifier, QuestionAsker

log = logging.getLogger(__name__)

URL = re.compile(r"https?://\S+")
LINK_SECONDS = 30.0  # for the link to appear
LOGIN_SECONDS = 900.0  # for the person to finish in the browser
CODE_CHARS = 2000  # a pasted code longer than this is not one


def refuse_known_email(executors: ExecutorSet, executor: Executor, account: Account, email: str):  # type: ignore[no-untyped-def]
    """An email another account of this executor is logged in as already: use that one."""
    for status in executors.statuses(executor.name):
        if status.target != account.target and status.logged_in_as.lower() == email.lower():
            raise ExecutorError(
                f"{status.target} is logged in as {email} already: delegate to it by its name "
                "instead of logging another account in as the same person"
            )


async def start_login(
    executors: ExecutorSet,
    target: str,
    email: str | None,
    notify: Notifier | None,
    keep: set[asyncio.Task[None]],
    ask_questions: QuestionAsker | None = None,
) -> str:
    """Start the login; return what it printed up to its link. It goes on in the background
    (kept in `keep`) until it ends, asking the person through `ask_questions` for the code it
    waits for (Claude Code); then `notify` says how it ended."""
    executor, account = executors.resolve(target, None)
    executor.check_binary()
    if email:
        await asyncio.to_thread(refuse_known_email, executors, executor, account, email)
    await asyncio.to_thread(account.config_dir.mkdir, parents=True, exist_ok=True)
    shown: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    login = _Login(executors, executor, account, email, notify, shown, ask_questions)
    task = asyncio.create_task(login.run())
    keep.add(task)
    task.add_done_callback(keep.discard)
    try:
        said = await asyncio.wait_for(asyncio.shield(shown), LINK_SECONDS)
    except TimeoutError:
        task.cancel()
        raise ExecutorError(
            f"{account.target}: the login printed no link within {LINK_SECONDS:.0f} s"
        ) from None
    started = (
        f"Login of {account.target} started ({' '.join(executor.login_argv(account, email))}). "
        f"Give the person this, to open in their browser:\n{said}\n"
    )
    if executor.login_code_prompt is None:
        return started + "A notice says when the login has ended."
    if ask_questions is None:
        return started + (
            "After sign-in the page shows a code, which this chat cannot take (it has no "
            f"questions): the person finishes at a terminal with `{executor.config_env}="
            f"{account.config_dir} {' '.join(executor.login_argv(account, email))}`."
        )
    return started + (
        "After sign-in the page shows a code: the person is asked for it in this chat (a "
        "question with the link), and Atlas gives it to the login. A notice says when it ended."
    )


class _Login:
    """One login process: its output read as it comes (a prompt ends with no newline), the
    link handed to `shown`, the code asked of the person when the harness waits for one."""

    def __init__(
        self,
        executors: ExecutorSet,
        executor: Executor,
        account: Account,
        email: str | None,
        notify: Notifier | None,
        shown: asyncio.Future[str],
        ask_questions: QuestionAsker | None,
    ) -> None:
        self.executors, self.executor, self.account = executors, executor, account
        self.email, self.notify, self.shown = email, notify, shown
        self.ask_questions = ask_questions if executor.login_code_prompt is not None else None
        self.lines: list[str] = []
        self.link = ""
        self.code_asked = False

    async def run(self) -> None:
        outcome = "failed"
        try:
            outcome = await self._launch()
        except TimeoutError:
            outcome = f"was not finished within {LOGIN_SECONDS:.0f} s and was stopped"
        except Exception as exc:
            outcome = f"failed: {exc}"
            log.warning("executor login %s failed", self.account.target, exc_info=True)
        if not self.shown.done():
            self.shown.set_exception(
                ExecutorError(
                    f"{self.account.target}: the login {outcome}: {' | '.join(self.lines[-5:])}"
                )
            )
            return  # the call itself says so
        if self.notify is not None:
            with contextlib.suppress(Exception):
                await self.notify(f"The login of {self.account.target} {outcome}.")

    async def _launch(self) -> str:
        executor, account = self.executor, self.account
        async with self.executors.launcher.launch(
            executor.login_argv(account, self.email),
            folder=account.config_dir,
            account_paths=[account.config_dir],
            env=executor.account_env(account),
            hosts=(*executor.provider_hosts, *executor.settings.allowed_domains),
        ) as launch:
            process = await asyncio.create_subprocess_exec(
                *launch.argv,
                cwd=launch.cwd,
                env=launch.env,
                # Closed unless a code is to be pasted and someone can be asked for it.
                stdin=asyncio.subprocess.PIPE if self.ask_questions else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                async with asyncio.timeout(LOGIN_SECONDS):
                    stopped = await self._read(process)
                    if stopped:  # still waiting for its code: ended here (the finally below)
                        return stopped
                    code = await process.wait()
            finally:
                if process.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        process.kill()
                    await process.wait()
        return "ended: logged in" if code == 0 else f"failed (exit {code})"

    async def _read(self, process: asyncio.subprocess.Process) -> str:
        """Read the login's output to its end; "" then, or why it was stopped early."""
        assert process.stdout is not None
        pending = ""
        while chunk := await process.stdout.read(4096):
            pending += chunk.decode("utf-8", errors="replace")
            *complete, pending = pending.split("\n")
            for line in (line.rstrip() for line in complete):
                if line:
                    self.lines.append(line[:500])
                if (found := URL.search(line)) and not self.shown.done():
                    self.link = found.group(0)
                    self.shown.set_result("\n".join(self.lines[-6:]))
            if self._waits_for_code(pending):
                self.code_asked = True
                stopped = await self._paste_code(process)
                if stopped:
                    return stopped
        return ""

    def _waits_for_code(self, pending: str) -> bool:
        """The harness shows its paste prompt (on the line under way, or the last one) after
        the link, someone can be asked, and no code was asked for yet."""
        prompt = self.executor.login_code_prompt
        if prompt is None or not self.ask_questions or not self.link or self.code_asked:
            return False
        return bool(prompt.search(pending or (self.lines[-1] if self.lines else "")))

    async def _paste_code(self, process: asyncio.subprocess.Process) -> str:
        """Ask the person for the code and write it to the login's stdin; "" when written,
        else why the login is stopped."""
        from atlas.channels.base import Question

        assert self.ask_questions is not None and process.stdin is not None
        question = Question(
            f"Log {self.account.target} in: open this link in your browser, sign in, then "
            f"paste here the code the page shows.\n{self.link}"
        )
        outcome = await self.ask_questions([question])
        if outcome.status != "submitted" or not outcome.answers:
            detail = f": {outcome.detail}" if outcome.detail else ""
            return f"was stopped: no code was pasted ({outcome.status}{detail})"
        answer = outcome.answers[0]
        code = (answer.other or (answer.chosen[0] if answer.chosen else "")).strip()
        if not code or len(code) > CODE_CHARS or any(c.isspace() for c in code):
            return "was stopped: what was pasted is not a code (one word, from the sign-in page)"
        process.stdin.write(code.encode() + b"\n")
        with contextlib.suppress(ConnectionError):
            await process.stdin.drain()
        process.stdin.close()
        log.info("executor login %s: the person's code was given to the login", self.account.target)
        return ""
