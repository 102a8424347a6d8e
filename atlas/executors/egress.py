"""Whether a delegated task's harness may reach a host beyond its own: the person is asked, as
for a command's (atlas/sandbox/commands.py `domain_asker`), in the conversation that delegated
the task; a yes holds for the task (its resumes too). Nobody to ask there (a routine with no
chat), or no answer in [trust] ask_timeout: no."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from atlas.executors.task_model import Task
    from atlas.sandbox.proxy import DomainAsker

log = logging.getLogger(__name__)

ALLOW, DENY = "Allow for this task", "Deny"


def task_host_asker(task: Task, timeout: float) -> DomainAsker | None:
    """The task's asker for hosts outside its harness's own; None when nobody can be asked
    (the proxy then refuses, and logs that no one was asked)."""
    ask = task.origin.ask
    if ask is None:
        return None

    async def ask_host(host: str) -> bool:
        if host in task.allowed_hosts:
            return True
        question = (
            f"Executor task {task.id} ({task.account.target}, in {task.folder}) wants to reach "
            f"{host}, which is not one of its provider's hosts. Let this task reach it?"
        )
        try:
            answer = await asyncio.wait_for(ask(question, [ALLOW, DENY]), timeout)
        except TimeoutError:
            log.info("executor %s: no answer in %.0f s about %s; refused", task.id, timeout, host)
            return False
        if answer != ALLOW:
            return False
        task.allowed_hosts.add(host)
        return True

    return ask_host
