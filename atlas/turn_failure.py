"""What a person is told when a turn fails (the model could not answer).

The error itself names the model server's host and port and gives config advice ("check
[providers] in config.toml, the API key variables"): meant for whoever runs the home, not for
the people in a Telegram or Slack chat. Those get a short neutral note; the terminal and the
dashboard (the operator's own surfaces, `shows_errors = True` on their channel) get the
detail, and the log always has it.
"""

from __future__ import annotations

TURN_FAILED = "Sorry, I could not answer"  # what the person gets, then the reason
PEOPLE_NOTE = f"{TURN_FAILED}: the model is unavailable right now. Please try again in a bit."


def failure_text(channel: object, error: Exception) -> str:
    """The message for a failed turn on this channel: the detail for the operator's own
    channels, the neutral note for any other (a third-party channel's too, unless it says)."""
    if getattr(channel, "shows_errors", False):
        return f"{TURN_FAILED}: {error}"
    return PEOPLE_NOTE
