"""`atlas dashboard`: print a one-time login link to the dashboard the daemon serves."""

from __future__ import annotations

import sys
from typing import TextIO

from atlas.dashboard.auth import LINK_MINUTES, ensure_secret, issue_login_token, rotate_secret
from atlas.dashboard.listen import listen_of
from atlas.dashboard.port import taken_by
from atlas.dashboard.server import running_url
from atlas.errors import AtlasError
from atlas.home import Home


def dashboard_main(home: Home, out: TextIO | None = None, *, log_out_everyone: bool = False) -> int:
    out = out or sys.stdout
    settings = home.settings.dashboard
    if not settings.enabled:
        raise AtlasError(
            f"the dashboard is off ([dashboard] enabled = false in {home.config_path})"
        )
    ensure_secret(home.root)  # a home made before the dashboard existed
    if log_out_everyone:
        rotate_secret(home.root)
        print("Every dashboard session has ended, and every link not yet used.", file=out)
    url = running_url(home.root)
    note = ""
    if url is None:
        listen = listen_of(settings, home.config_path)
        taken = taken_by(listen)
        if taken is not None:  # a link there would hand the login token to that program
            raise AtlasError(
                f"the dashboard cannot be served: {taken}. Stop it, or change [dashboard] "
                f"listen in {home.config_path}, then start `atlas run`"
            )
        url = listen.url
        note = f"(the daemon is not running: start `atlas run`; the link waits {LINK_MINUTES} min)"
    token = issue_login_token(home.root)
    print(f"{url}/login?token={token}", file=out)
    print(
        f"Open it in a browser on this machine: it logs in once, within {LINK_MINUTES} minutes.",
        file=out,
    )
    if note:
        print(note, file=out)
    return 0
