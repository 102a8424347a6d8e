"""The one exception family of Atlas: every message says what went wrong and what to do."""


class AtlasError(Exception):
    """Base class for errors a person can act on."""


class ConfigError(AtlasError):
    """A config file is malformed, has an unknown key or a wrong value."""


class ProviderError(AtlasError):
    """A model provider failed after retries and fallbacks."""

    def __init__(self, message: str, *, context_overflow: bool = False) -> None:
        super().__init__(message)
        self.context_overflow = context_overflow  # every model said the prompt was too long


class ToolError(AtlasError):
    """A tool refused or failed; the message goes to the model as `Error: …`."""
