"""An account's login by the harness's own command (`delegate action=account`), only when the
person asks (the gate puts every such call to them: the `workbench:login` rule).

The login runs like a task: in the sandbox, with only the account's config folder writable and
the provider's hosts reachable. It prints a link (and Codex a device code) for the person's
browser; Atlas waits for that, returns it, and lets the login finish in the background; the
conversation gets a notice when it ends.
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
    from atlas.tools.registry import Notifier

log = logging.getLogger(__name__)

URL = re.compile(r"https?://\S+")
LINK_SECONDS = 30.0  # for the link to appear
LOGIN_SECONDS = 900.0  # for the person to finish in the browser


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
) -> str:
    """Start the login; return what it printed up to its link. It goes on in the background
    (kept in `keep`) until it ends; then `notify` says how."""
    executor, account = executors.resolve(target, None)
    executor.check_binary()
    if email:
        await asyncio.to_thread(refuse_known_email, executors, executor, account, email)
    await asyncio.to_thread(account.config_dir.mkdir, parents=True, exist_ok=True)
    shown: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(_run(executors, executor, account, email, notify, shown))
    keep.add(task)
    task.add_done_callback(keep.discard)
    try:
        said = await asyncio.wait_for(asyncio.shield(shown), LINK_SECONDS)
    except TimeoutError:
        task.cancel()
        raise ExecutorError(
            f"{account.target}: the login printed no link within {LINK_SECONDS:.0f} s"
        ) from None
    return (
        f"Login of {account.target} started ({' '.join(executor.login_argv(account, email))}). "
        f"Give the person this, to open in their browser:\n{said}\n"
        "A notice says when the login has ended."
    )


async def _run(
    executors: ExecutorSet,
    executor: Executor,
    account: Account,
    email: str | None,
    notify: Notifier | None,
    shown: asyncio.Future[str],
) -> None:
    argv = executor.login_argv(account, email)
    lines: list[str] = []
    outcome = "failed"
    try:
        async with executors.launcher.launch(
            argv,
            folder=account.config_dir,
            account_paths=[account.config_dir],
            env=executor.account_env(account),
            hosts=(*executor.provider_hosts, *executor.settings.allowed_domains),
        ) as launch:
            process = await asyncio.create_subprocess_exec(
                *launch.argv,
                cwd=launch.cwd,
                env=launch.env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
            assert process.stdout is not None
            try:
                async with asyncio.timeout(LOGIN_SECONDS):
                    async for raw in process.stdout:
                        line = raw.decode("utf-8", errors="replace").rstrip()
                        if line:
                            lines.append(line[:500])
                        if URL.search(line) and not shown.done():
                            shown.set_result("\n".join(lines[-6:]))
                    code = await process.wait()
            finally:
                if process.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        process.kill()
                    await process.wait()
            outcome = "ended: logged in" if code == 0 else f"failed (exit {code})"
    except TimeoutError:
        outcome = f"was not finished within {LOGIN_SECONDS:.0f} s and was stopped"
    except Exception as exc:
        outcome = f"failed: {exc}"
        log.warning("executor login %s failed", account.target, exc_info=True)
    if not shown.done():
        shown.set_exception(
            ExecutorError(f"{account.target}: the login {outcome}: {' | '.join(lines[-5:])}")
        )
        return  # the call itself says so
    if notify is not None:
        with contextlib.suppress(Exception):
            await notify(f"The login of {account.target} {outcome}.")
