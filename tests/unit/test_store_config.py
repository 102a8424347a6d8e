"""`[store] url`: a PostgreSQL address, checked at load; the password from the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from atlas.config import load_settings
from atlas.errors import ConfigError
from tests.helpers import BASE_CONFIG


def _load(tmp_path: Path, store: str) -> object:
    path = tmp_path / "config.toml"
    path.write_text(BASE_CONFIG + "\n[store]\n" + store, encoding="utf-8")
    return load_settings(path)


def test_no_url_is_the_embedded_default(tmp_path: Path) -> None:
    settings = load_settings(_write(tmp_path, BASE_CONFIG))
    assert settings.store.url is None


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_url_and_its_password_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = _load(
        tmp_path, 'url = "postgresql://atlas@db.internal:5432/atlas"\npassword_env = "PGPW"\n'
    )
    assert settings.store.url == "postgresql://atlas@db.internal:5432/atlas"  # type: ignore[attr-defined]
    assert settings.store.password() is None  # type: ignore[attr-defined]
    monkeypatch.setenv("PGPW", "s3cret")
    assert settings.store.password() == "s3cret"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://atlas:s3cret@db:5432/atlas", "secrets are never stored in config"),
        ("mysql://atlas@db/atlas", "give a postgresql:// address"),
        ("postgresql://atlas@db:5432", "name the user, the host and the database"),
        ("postgresql://db:5432/atlas", "name the user, the host and the database"),
        ("postgresql://atlas@db:port/atlas", "the port is not a number"),
    ],
)
def test_a_bad_url_is_explained(tmp_path: Path, url: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, f'url = "{url}"\n')
    message = str(caught.value)
    assert "store.url (line" in message and expected in message
    assert "s3cret" not in message  # the password is not repeated in the error


def test_cluster_timing_defaults_and_a_heartbeat_too_slow_for_its_lease(tmp_path: Path) -> None:
    settings = load_settings(_write(tmp_path, BASE_CONFIG))
    assert (settings.cluster.lease_seconds, settings.cluster.heartbeat_seconds) == (10.0, 2.0)
    short = load_settings(
        _write(tmp_path, BASE_CONFIG + "\n[cluster]\nlease_seconds = 3\nheartbeat_seconds = 0.5\n")
    )
    assert (short.cluster.lease_seconds, short.cluster.heartbeat_seconds) == (3.0, 0.5)
    with pytest.raises(ConfigError, match="at most half of lease_seconds"):
        load_settings(
            _write(
                tmp_path, BASE_CONFIG + "\n[cluster]\nlease_seconds = 3\nheartbeat_seconds = 2\n"
            )
        )
