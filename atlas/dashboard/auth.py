"""The dashboard's keys: the home's secret, one-time login links, signed sessions, CSRF tokens.

- The secret (`<home>/dashboard.key`, mode 0600) is made by `atlas init`, or at the first start
  of a home that lacks it; it never appears in config.toml. It signs sessions and CSRF tokens.
- A login link carries a random token. `atlas dashboard` (another process) keeps only its
  SHA-256 and expiry in `<home>/run/dashboard-logins.json`, under a file lock; the daemon
  removes the entry when the link is used, so it works once, and never after `LINK_MINUTES`.
- A session is a signed cookie `<id>.<issued>.<mac>` (no server state); its CSRF token is a MAC
  of the session id, so every form of that session carries the same token and no other
  session's token passes.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from atlas.errors import AtlasError
from atlas.locks import held

SESSION_COOKIE = "atlas_session"
LINK_MINUTES = 10
SESSION_DAYS = 7
SECRET_BYTES = 32


def secret_path(home_root: Path) -> Path:
    return home_root / "dashboard.key"


def logins_path(home_root: Path) -> Path:
    return home_root / "run" / "dashboard-logins.json"


def ensure_secret(home_root: Path) -> bool:
    """Make the home's dashboard secret if it has none; True when one was made."""
    path = secret_path(home_root)
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    value = base64.urlsafe_b64encode(secrets.token_bytes(SECRET_BYTES)).decode()
    # Written whole under a name of its own, then linked into place: a link never replaces an
    # existing file, so of two processes making it at once (nodes starting together on one
    # home folder) the first one's stays, and nobody ever reads it half written.
    draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(value + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.link(draft, path)
    except FileExistsError:
        return False
    finally:
        draft.unlink(missing_ok=True)
    return True


def read_secret(home_root: Path) -> bytes:
    """The secret, made first if missing. Refuses one that others may read."""
    ensure_secret(home_root)
    path = secret_path(home_root)
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        raise AtlasError(
            f"{path} may be read by other users (mode {mode:o}): `chmod 600 {path}`, or delete "
            "it to make a new one (every dashboard session then ends)"
        )
    value = path.read_text(encoding="ascii").strip()
    if len(value) < 32:
        raise AtlasError(f"{path} is too short to be a secret: delete it to make a new one")
    return value.encode()


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _read_logins(path: Path) -> list[dict[str, float | str]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError):
        return []  # torn or edited: its links no longer work, new ones do
    return [d for d in data if isinstance(d, dict)] if isinstance(data, list) else []


def _write_logins(path: Path, entries: list[dict[str, float | str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(entries, out)
    os.replace(partial, path)


def issue_login_token(home_root: Path, *, now: float | None = None) -> str:
    """A new one-time login token, valid for LINK_MINUTES (blocking: file lock)."""
    now = time.time() if now is None else now
    token = secrets.token_urlsafe(32)
    path = logins_path(home_root)
    with held(path):
        live = [e for e in _read_logins(path) if float(e.get("expires", 0)) > now]
        live.append({"sha256": _digest(token), "expires": now + LINK_MINUTES * 60})
        _write_logins(path, live)
    return token


def use_login_token(home_root: Path, token: str, *, now: float | None = None) -> bool:
    """True once for a token issued and not expired; it is gone afterwards (blocking)."""
    now = time.time() if now is None else now
    path = logins_path(home_root)
    wanted = _digest(token)
    with held(path):
        entries = _read_logins(path)
        live = [e for e in entries if float(e.get("expires", 0)) > now]
        found = any(hmac.compare_digest(str(e.get("sha256", "")), wanted) for e in live)
        kept = [e for e in live if e.get("sha256") != wanted]
        if kept != entries:
            _write_logins(path, kept)
    return found


@dataclass(frozen=True)
class Session:
    id: str
    issued: int


def rotate_secret(home_root: Path) -> None:
    """A new secret: every session ends (a running daemon reads it at the next request), and
    login links not yet used stop working (blocking)."""
    path = secret_path(home_root)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as out:
        out.write(base64.urlsafe_b64encode(secrets.token_bytes(SECRET_BYTES)).decode() + "\n")
    os.replace(partial, path)
    links = logins_path(home_root)
    with held(links):
        links.unlink(missing_ok=True)


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    return info.st_mtime_ns, info.st_ino, info.st_size


class Signer:
    """Signs and checks session cookies and CSRF tokens with the home's secret. Made with
    `for_home`, it reads the secret again when its file changes (`rotate_secret`)."""

    def __init__(self, secret: bytes, *, home_root: Path | None = None) -> None:
        self._secret = secret
        self._home_root = home_root
        self._stamp = _stamp(secret_path(home_root)) if home_root else None

    @classmethod
    def for_home(cls, home_root: Path) -> Signer:
        """Blocking: reads (or makes) the secret."""
        return cls(read_secret(home_root), home_root=home_root)

    def _key(self) -> bytes:
        if self._home_root is not None:
            stamp = _stamp(secret_path(self._home_root))  # one stat: a few microseconds
            if stamp != self._stamp:
                self._secret = read_secret(self._home_root)  # a new one if it was deleted
                self._stamp = _stamp(secret_path(self._home_root))
        return self._secret

    @property
    def secret_text(self) -> str:
        """The secret as stored, for the pages' mask (never shown)."""
        return self._key().decode()

    def _mac(self, purpose: str, text: str) -> str:
        mac = hmac.new(self._key(), f"{purpose}:{text}".encode(), hashlib.sha256)
        return base64.urlsafe_b64encode(mac.digest()).decode().rstrip("=")

    def new_session(self, *, now: float | None = None) -> tuple[Session, str]:
        """A new session and its cookie value."""
        session = Session(secrets.token_urlsafe(16), int(time.time() if now is None else now))
        payload = f"{session.id}.{session.issued}"
        return session, f"{payload}.{self._mac('session', payload)}"

    def session(self, cookie: str | None, *, now: float | None = None) -> Session | None:
        """The session a cookie value stands for; None when forged, malformed or expired."""
        if not cookie or cookie.count(".") != 2:
            return None
        session_id, issued, mac = cookie.split(".")
        if not issued.isdigit():
            return None
        if not hmac.compare_digest(mac, self._mac("session", f"{session_id}.{issued}")):
            return None
        now = time.time() if now is None else now
        if not 0 <= now - int(issued) < SESSION_DAYS * 86400:
            return None
        return Session(session_id, int(issued))

    def csrf_token(self, session: Session) -> str:
        return self._mac("csrf", session.id)

    def csrf_ok(self, session: Session, token: str | None) -> bool:
        return bool(token) and hmac.compare_digest(token or "", self.csrf_token(session))
