"""Why a call to a chat platform failed, in the three kinds a sender acts on.

Each platform's sender (telegram_delivery.Retrying, slack_delivery.SlackSender) retries what is
worth retrying, then raises one of these; callers decide by kind, never by the platform's own
exception types:

- `RetryLater`: the platform did not act (a 5xx, a 429, an answer no client could read that
  came with an error status, a connection refused or dropped on a call that is safe to repeat).
  Sending the same again later is safe: a reply is kept and resent.
- `NeverRetry`: the platform refused the request (400, 403, 404, 413, ...). Sending the same
  again cannot help.
- `MaybeDelivered`: the request reached the platform but its answer was lost (the connection
  closed or timed out after the request went out, or a 2xx answer nobody could read), so it may
  have been carried out. Sending it again could show it twice: it is not resent, and the person
  is told it may not have reached them (MAYBE_LOST).
"""

from __future__ import annotations

from atlas.errors import AtlasError

# Sent after a reply, part of which may not have arrived (and was not sent again).
MAYBE_LOST = (
    "(The connection broke while I was sending that reply, so part of it may not have "
    "reached you. Ask again if something is missing.)"
)


class SendError(AtlasError):
    """A call to a chat platform that did not certainly do what was asked."""


class RetryLater(SendError):
    """Not carried out; the same call may succeed later and repeating it cannot duplicate."""


class NeverRetry(SendError):
    """Refused by the platform: the same call would be refused again."""


class MaybeDelivered(SendError):
    """Possibly carried out, but its answer was lost: repeating it could duplicate it."""


__all__ = ["MAYBE_LOST", "MaybeDelivered", "NeverRetry", "RetryLater", "SendError"]
