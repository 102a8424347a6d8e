"""Every message out: rows, states, the sender, resume at start.

`rows.py` (the `outbox` table of each bot's conversations.db, and every change of a row's
state), `engine.py` (`OutboxRows`: the seam to the engine keeping the rows, SQLite or
PostgreSQL, with claims and an epoch fence on PostgreSQL), `errors.py` (what a channel raises: RetryLater, NeverRetry, MaybeDelivered),
`sender.py` (`Outbox`: a queue and a worker per address), `resume.py` (at start), `notes.py`
(what the outbox itself says).
"""
