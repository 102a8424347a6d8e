"""The web dashboard `atlas run` serves (docs/dashboard.md): server-rendered pages over the home's
stores, behind a one-time login link, a signed session cookie and CSRF tokens.

It lives here rather than under `atlas/channels/` because it is an application over the whole
home (stores, the gate's record, routines, settings), not a thin adapter; the dashboard's chat
is a `Channel` module inside this package (chat_channel.py), registered in the dispatcher as
the console channel is.
"""
