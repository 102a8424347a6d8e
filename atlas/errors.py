"""The one exception family of Atlas: every message says what went wrong and what to do."""


class AtlasError(Exception):
    """Base class for errors a person can act on."""


class ConfigError(AtlasError):
    """A config file is malformed, has an unknown key or a wrong value."""


class ProviderError(AtlasError):
    """A model provider failed after retries and fallbacks."""

    def __init__(
        self,
        message: str,
        *,
        context_overflow: bool = False,
        statuses: tuple[int | None, ...] = (),
    ) -> None:
        super().__init__(message)
        self.context_overflow = context_overflow  # every model said the prompt was too long
        self.statuses = statuses  # each tried model's last HTTP status (None: no answer)

    @property
    def key_rejected(self) -> bool:
        """Every model tried answered 401: the key was sent and refused (not missing)."""
        return bool(self.statuses) and all(status == 401 for status in self.statuses)


class ToolError(AtlasError):
    """A tool refused or failed; the message goes to the model as `Error: …`."""


class NotOnPostgres(AtlasError):
    """Something of atlas.db's own SQL was reached on a home whose store is PostgreSQL: refused,
    never written to the home's SQLite files (docs/scaling.md lists what is not there yet)."""

    def __init__(self, what: str, where: str) -> None:
        super().__init__(
            f"{what} is not on PostgreSQL yet (this home's store is {where}); docs/scaling.md "
            "lists what is not. Nothing was written to the home's SQLite files."
        )
