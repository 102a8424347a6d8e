"""What Atlas observed of each account's plan limits, from the harnesses' own events.

Claude Code tells its limits only in its event stream (`rate_limit_event`, and the result of a
turn that hit one); Atlas keeps the last of each per account here, in
`<home>/executors/observed.json`, so executor_accounts can say it later with no model call.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class LimitBook:
    """target -> {"windows": {name: info}, "limit": {...}, "updated": iso}; one JSON file."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()

    @classmethod
    def for_home(cls, root: Path) -> LimitBook:
        return cls(root / "executors" / "observed.json")

    def read(self) -> dict[str, Any]:
        if self.path is None or not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            log.warning("executors: %s is unreadable (%s); starting afresh", self.path, exc)
            return {}
        return data if isinstance(data, dict) else {}

    def observed(self, target: str) -> dict[str, Any]:
        entry = self.read().get(target)
        return entry if isinstance(entry, dict) else {}

    def note_window(self, target: str, window: str, info: dict[str, Any]) -> None:
        """The harness told this window's state (a rate_limit_event, a token_count)."""
        self._update(
            target, lambda entry: entry.setdefault("windows", {}).__setitem__(window, info)
        )

    def note_limit(
        self, target: str, message: str, resets_at: datetime | None, window: str | None
    ) -> None:
        """The account reached its limit (LimitReached)."""
        limit = {
            "message": message,
            "resets_at": resets_at.isoformat() if resets_at else None,
            "window": window,
            "at": datetime.now(UTC).isoformat(),
        }
        self._update(target, lambda entry: entry.__setitem__("limit", limit))

    def note_overage(self, target: str, allowed: bool) -> None:
        self._update(target, lambda entry: entry.__setitem__("extra_usage", allowed))

    def _update(self, target: str, change: Any) -> None:
        if self.path is None:
            return
        with self._lock:
            data = self.read()
            entry = data.setdefault(target, {})
            change(entry)
            entry["updated"] = datetime.now(UTC).isoformat()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Written whole and renamed: a crash never leaves half a file.
            handle, temporary = tempfile.mkstemp(dir=self.path.parent, suffix=".tmp")
            with os.fdopen(handle, "w", encoding="utf-8") as file:
                json.dump(data, file, indent=1, sort_keys=True)
            os.replace(temporary, self.path)
