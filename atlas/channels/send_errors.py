"""Why a call to a chat platform failed, in the three kinds the outbox acts on.

Each platform's sender (telegram/delivery.py's Retrying, slack/delivery.py's SlackSender) retries what is
worth retrying within one call, then raises one of these; the channel's `send` lets them reach
the outbox (atlas/outbox/sender.py), which decides by kind, never by the platform's own
exception types. The classes are the outbox's own (atlas/outbox/errors.py):

- `RetryLater`: the platform did not act (a 5xx, a 429, an answer no client could read that
  came with an error status, a connection refused or dropped on a call that is safe to repeat).
  Sending the same again later is safe: the outbox keeps the row and resends it.
- `NeverRetry`: the platform refused the request (400, 403, 404, 413, ...). Sending the same
  again cannot help.
- `MaybeDelivered`: the request reached the platform but its answer was lost (the connection
  closed or timed out after the request went out, or a 2xx answer nobody could read), so it may
  have been carried out. Sending it again could show it twice: it is not resent, and the person
  is told it may not have reached them (MAYBE_LOST, queued by the outbox).
"""

from __future__ import annotations

from atlas.outbox.errors import MaybeDelivered, NeverRetry, RetryLater, SendError
from atlas.outbox.notes import CONNECTION_BROKE

# Sent after a reply, part of which may not have arrived (and was not sent again).
MAYBE_LOST = CONNECTION_BROKE

__all__ = ["MAYBE_LOST", "MaybeDelivered", "NeverRetry", "RetryLater", "SendError"]
