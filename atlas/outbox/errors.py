"""How a channel says a message did not (certainly) go out: the three kinds the outbox acts on.

A channel's `send` returns the platform's message id, or raises one of these; the outbox decides
by kind, never by a platform's own exception types:

- `RetryLater`: the platform did not take it (an outage, a 429, a 5xx, no connection). Sending
  it again later cannot show it twice. `after`: the platform asked for this many seconds.
  `unsent`: when part of a long reply went out before the failure, the text still to send
  (the row is cut down to it and `unsent_files`, so a retry never repeats what arrived);
  None: all of it.
- `NeverRetry`: the platform refused it (blocked, bad request, too large): it would be
  refused again.
- `MaybeDelivered`: the request reached the platform but its answer was lost, so it may have
  been carried out. Sending it again could show it twice (the platforms take no idempotency
  key): it is resent once, labelled, where the channel asks for that (`resend`: Telegram,
  which cannot check); otherwise the person is told once that it may not have reached them.
"""

from __future__ import annotations

from pathlib import Path

from atlas.errors import AtlasError


class SendError(AtlasError):
    """A message a channel did not certainly deliver."""


class RetryLater(SendError):
    """Not carried out; the same message may go out later and cannot arrive twice."""

    def __init__(
        self,
        message: str,
        *,
        after: float | None = None,
        unsent: str | None = None,
        unsent_files: tuple[Path, ...] = (),
    ) -> None:
        super().__init__(message)
        self.after = after
        self.unsent = unsent
        self.unsent_files = unsent_files  # with `unsent`: the files still to send


class NeverRetry(SendError):
    """Refused by the platform: the same message would be refused again."""


class MaybeDelivered(SendError):
    """Possibly carried out, but its answer was lost: sending it again could duplicate it.

    `resend`: a channel whose person would rather see a part twice than miss it (Telegram)
    gives the part in doubt and what followed it, labelled as possibly repeated; the outbox
    sends that once, as a row of its own (never a resend of a resend)."""

    def __init__(
        self, message: str, *, resend: str | None = None, resend_files: tuple[Path, ...] = ()
    ) -> None:
        super().__init__(message)
        self.resend = resend
        self.resend_files = resend_files


__all__ = ["MaybeDelivered", "NeverRetry", "RetryLater", "SendError"]
