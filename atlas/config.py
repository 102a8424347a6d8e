"""config.toml and bot.toml → typed, validated settings.

Every error names the file, the key (and its line where it can be found) and what was
expected, so a person can fix it without reading code. Secrets never live in these files:
a provider names the environment variable that holds its key.
"""

from __future__ import annotations

import os
import re
import tomllib
import zoneinfo
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from atlas.errors import ConfigError

NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]*$"
MODEL_PATTERN = r"^[A-Za-z0-9_.-]+/.+$"
SKILL_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"  # as atlas/skills/library.py

ModelT = TypeVar("ModelT", bound="Strict")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ProviderSettings(Strict):
    kind: Literal["openai", "anthropic"]
    base_url: str | None = None
    api_key_env: str | None = None
    timeout: float = Field(120.0, gt=0)
    max_retries: int = Field(3, ge=0, le=10)
    supports_images: bool = True

    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) if self.api_key_env else None


class LimitSettings(Strict):
    max_rounds: int = Field(40, ge=1, le=500)
    concurrent_turns: int = Field(8, ge=1, le=1000)
    tool_result_chars: int = Field(30_000, ge=2_000, le=1_000_000)
    max_tokens: int = Field(4096, ge=64)
    context_window: int = Field(128_000, ge=4_096)  # the model's window, in tokens
    compact_at: float = Field(0.75, gt=0.1, le=0.95)  # share of the window that triggers compaction
    retry_base_delay: float = Field(1.0, ge=0)
    retry_max_delay: float = Field(30.0, ge=0)


class ChatSettings(Strict):
    stream: bool = True
    mid_turn: Literal["queue", "interrupt"] = "queue"
    ask_user_timeout: float = Field(600.0, gt=0)  # seconds ask_user waits for answers


class WebSettings(Strict):
    """web_search and web_fetch (docs/tools.md). Keys live in the environment, named here."""

    tavily_url: str = "https://api.tavily.com/search"
    tavily_api_key_env: str = "TAVILY_API_KEY"
    brave_url: str = "https://api.search.brave.com/res/v1/web/search"
    brave_api_key_env: str = "BRAVE_SEARCH_API_KEY"
    search_timeout: float = Field(20.0, gt=0)  # seconds for one engine
    fetch_timeout: float = Field(30.0, gt=0)  # seconds for one page, redirects included
    cache_minutes: float = Field(15.0, ge=0)  # a fetched page is reused this long; 0: never
    max_redirects: int = Field(5, ge=0, le=20)  # same-site hops followed
    # Hosts, addresses or networks (CIDR) web_fetch may reach although they are private.
    allow_private: list[str] = Field(default_factory=list)


class BrowserSettings(Strict):
    """browser_exec's browser (docs/tools.md)."""

    # A path or a command name; empty: Chrome, Edge or Chromium found on PATH or in the usual
    # places (atlas/tools/browser_find.py).
    chrome: str = ""
    extra_args: list[str] = Field(default_factory=list)  # added to Chromium's command line


class AgentSettings(Strict):
    """Subagents (delegate) and bots messaging each other (message_agent); docs/tools.md."""

    subagents_at_once: int = Field(3, ge=1, le=10)  # per conversation; more wait their turn
    subagent_rounds: int = Field(25, ge=1, le=500)  # model calls in one subagent run
    subagent_seconds: float = Field(900.0, gt=0)  # wall time of one subagent, steering included
    summary_chars: int = Field(6000, ge=1000, le=200_000)  # a longer result is spilled to a file
    reply_seconds: float = Field(1800.0, gt=0)  # how long message_agent waits for a reply
    ask_parent_seconds: float = Field(300.0, gt=0)  # how long a subagent's question waits


class McpSettings(Strict):
    """MCP servers from the home's mcp.json (docs/tools.md)."""

    connect_timeout: float = Field(30.0, gt=0)  # starting a server and the MCP handshake
    call_timeout: float = Field(300.0, gt=0)  # one tool call
    retry_max_delay: float = Field(300.0, gt=0)  # the longest wait between reconnection attempts
    startup_wait: float = Field(15.0, ge=0)  # how long start-up waits for servers to connect


class RoutineSettings(Strict):
    """Routines: prompts run on a schedule (docs/routines.md)."""

    time_limit: float = Field(600.0, gt=0)  # seconds one run may take before it is stopped
    max_grace: float = Field(86_400.0, ge=0)  # the longest default grace for a missed run, seconds
    poll_seconds: float = Field(30.0, gt=0)  # how often the daemon picks up changes from the CLI


ModelNameOrNone = Annotated[str | None, Field(pattern=MODEL_PATTERN)]


class ReviewSettings(Strict):
    """The background review of a conversation gone quiet (docs/ARCHITECTURE.md)."""

    enabled: bool = True
    quiet_minutes: float = Field(10.0, gt=0)  # after the last turn
    min_user_messages: int = Field(3, ge=1)  # less than this is not worth a review


class TrustSettings(Strict):
    """The approval gate (docs/trust.md)."""

    deny: list[str] = Field(default_factory=list)  # fnmatch globs over each normalised command part
    vault: str | None = None  # a folder no file tool may reach; default: the home's vault/
    guardian_model: ModelNameOrNone = None  # default: the bot's own model
    ask_timeout: float = Field(120.0, gt=0)  # seconds a person has to answer; silence denies


# [sandbox] allowed_domains' default (atlas/sandbox/proxy.py): package registries and code
# forges: what builds, installs and clones need.
DEFAULT_ALLOWED_DOMAINS: tuple[str, ...] = (
    "pypi.org",
    "files.pythonhosted.org",
    "registry.npmjs.org",
    "registry.yarnpkg.com",
    "github.com",
    "api.github.com",
    "codeload.github.com",
    "objects.githubusercontent.com",
    "*.githubusercontent.com",
    "gitlab.com",
    "registry.gitlab.com",
    "bitbucket.org",
    "deb.debian.org",
    "security.debian.org",
    "crates.io",
    "static.crates.io",
    "index.crates.io",
    "proxy.golang.org",
    "sum.golang.org",
    "rubygems.org",
    "index.rubygems.org",
    "repo.maven.apache.org",
    "repo1.maven.org",
)


def _default_domains() -> list[str]:
    return list(DEFAULT_ALLOWED_DOMAINS)


class SandboxSettings(Strict):
    """The sandbox every command runs in (docs/sandbox.md). Only the person writes config.toml."""

    enabled: bool = True  # false: commands run unsandboxed, as before the sandbox existed
    allowed_domains: list[str] = Field(default_factory=_default_domains)  # reached via the proxy
    hidden: list[str] = Field(default_factory=list)  # more paths no command may see
    env: dict[str, str] = Field(default_factory=dict)  # variables set inside every sandbox
    # Limits of each sandbox (atlas/sandbox/limits.py, docs/sandbox.md "Limits").
    max_processes: int = Field(1024, ge=16)  # processes and threads
    max_memory_mb: int = Field(2048, ge=64)  # counts its /tmp and /dev/shm
    tmp_max_mb: int = Field(512, ge=1)  # size of its private /tmp (and of /dev/shm)
    cpu_weight: int = Field(50, ge=1, le=10000)  # against the daemon's 100
    workspace_max_mb: int = Field(10240, ge=1)  # a bot's workspace budget
    # The person's home is empty in every bot's view but for these (atlas/sandbox/view.py).
    readable: list[str] = Field(default_factory=list)  # granted read-only to every bot
    writable: list[str] = Field(default_factory=list)  # granted writable to every bot


class BotSandboxSettings(Strict):
    """A bot's own sandbox grants (bot.toml [sandbox])."""

    writable: list[str] = Field(default_factory=list)  # writable besides the workspace
    readable: list[str] = Field(default_factory=list)  # readable in the emptied home
    hidden: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)


class ExecutorSettings(Strict):
    """One outside coding harness (docs/executors.md): `[executors.claude-code]`, `[executors.codex]`
    or a plugin's. Accounts are the harness's own config folders, one login each."""

    enabled: bool = False
    binary: str | None = None  # default: the harness's own command name, found on the PATH
    # nickname -> the account's config folder (CLAUDE_CONFIG_DIR, CODEX_HOME). None: one
    # account, `main`, in the harness's default folder (~/.claude, ~/.codex).
    accounts: dict[Annotated[str, Field(pattern=NAME_PATTERN)], str] = Field(default_factory=dict)
    main: str | None = None  # the main account's nickname; default: the first one listed
    folders: dict[str, str] = Field(default_factory=dict)  # folder -> nickname it starts on
    # Target names (`claude-code@work`, `codex`) a task goes on to, in order, when its
    # account reaches its plan's limit; default: this executor's other accounts.
    hand_over: list[str] | None = None
    extra_usage: list[str] = Field(default_factory=list)  # nicknames that bill past the limit
    # Hosts the harness may reach through the sandbox's proxy, besides its provider's own.
    allowed_domains: list[str] = Field(default_factory=list)
    # The Claude Code plugin (atlas/executors/desk_approvals.py): the channel where the person's
    # own sessions' permission prompts are asked (`telegram:atlas`), "off", or None: the main
    # bot's chat channels; and the chat there (default: the person's most recent conversation).
    approvals: str | None = None
    approvals_chat: str | None = None

    @model_validator(mode="after")
    def _accounts_named(self) -> ExecutorSettings:
        known = set(self.accounts) or {"main"}
        named = {"main": self.main, **{f"folders.{f}": n for f, n in self.folders.items()}}
        named |= {f"extra_usage[{i}]": n for i, n in enumerate(self.extra_usage)}
        for key, nickname in named.items():
            if nickname is not None and nickname not in known:
                raise ValueError(
                    f"{key} names account {nickname!r}, which accounts does not list "
                    f"(listed: {', '.join(sorted(known))})"
                )
        return self


class DaemonSettings(Strict):
    """How `atlas run` spreads the home over processes (docs/ARCHITECTURE.md, "Workers")."""

    # Worker processes; each bot lives in exactly one. None: one per core (one on a one-core
    # machine), never more than there are bots.
    workers: int | None = Field(None, ge=1, le=64)


class StoreSettings(Strict):
    """Where the home keeps its state (docs/scaling.md). No url: SQLite files in the home."""

    # postgresql://user@host:port/database; the password never here but in password_env.
    url: str | None = None
    password_env: str = "ATLAS_STORE_PASSWORD"  # the environment variable holding it

    @field_validator("url")
    @classmethod
    def _postgresql_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        from urllib.parse import urlsplit

        parts = urlsplit(value)
        example = "e.g. 'postgresql://atlas@db.internal:5432/atlas'"
        if parts.scheme not in ("postgresql", "postgres"):
            raise ValueError(f"give a postgresql:// address, {example}")
        if parts.password is not None:
            raise ValueError(
                "secrets are never stored in config: remove the password from url and put it "
                "in the environment variable password_env names"
            )
        try:
            parts.port  # noqa: B018 (parsing it is the check)
        except ValueError:
            raise ValueError(f"the port is not a number, {example}") from None
        if not parts.hostname or not parts.username or not parts.path.strip("/"):
            raise ValueError(f"name the user, the host and the database, {example}")
        return value

    def password(self) -> str | None:
        return os.environ.get(self.password_env) or None


class ClusterSettings(Strict):
    """How the nodes of a home on PostgreSQL (`atlas run --node NAME`, docs/scaling.md) hold
    their leases: a lease lasts `lease_seconds` and is renewed every `heartbeat_seconds`; a
    stopped node's bots are taken over within about the sum of the two."""

    lease_seconds: float = Field(10.0, gt=0, le=3600)
    heartbeat_seconds: float = Field(2.0, gt=0, le=1800)

    @model_validator(mode="after")
    def _renewed_in_time(self) -> ClusterSettings:
        if self.heartbeat_seconds * 2 > self.lease_seconds:
            raise ValueError(
                f"heartbeat_seconds ({self.heartbeat_seconds}) must be at most half of "
                f"lease_seconds ({self.lease_seconds}), so a lease is renewed before it ends"
            )
        return self


class DashboardSettings(Strict):
    """The web dashboard `atlas run` serves (docs/dashboard.md)."""

    enabled: bool = True
    listen: str = "127.0.0.1:8765"  # host:port; beyond loopback only with allow_remote
    allow_remote: bool = False  # true: listen may name an address other machines reach
    # USD per million tokens, [input, output] or [input, output, cached input], by
    # "provider/model": the Usage page's cost. A model without a price shows tokens only.
    prices: dict[str, list[float]] = Field(default_factory=dict)

    @field_validator("listen")
    @classmethod
    def _host_and_port(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
            raise ValueError(
                "give host:port, e.g. '127.0.0.1:8765' or '[::1]:8765' (port 0: any free one)"
            )
        return value

    @field_validator("prices")
    @classmethod
    def _price_lists(cls, prices: dict[str, list[float]]) -> dict[str, list[float]]:
        for model, price in prices.items():
            if len(price) not in (2, 3) or any(p < 0 for p in price):
                raise ValueError(
                    f"prices[{model!r}]: give [input, output] or [input, output, cached input] "
                    "in USD per million tokens, none negative"
                )
        return prices


ModelName = Annotated[str, Field(pattern=MODEL_PATTERN)]


class Settings(Strict):
    main: Annotated[str, Field(pattern=NAME_PATTERN)] = "atlas"
    timezone: str = "UTC"
    model: ModelName = "openai/gpt-4o-mini"
    fallback_model: ModelName | None = None
    providers: dict[str, ProviderSettings] = Field(default_factory=dict)
    limits: LimitSettings = LimitSettings()
    chat: ChatSettings = ChatSettings()
    trust: TrustSettings = TrustSettings()
    review: ReviewSettings = ReviewSettings()
    web: WebSettings = WebSettings()
    browser: BrowserSettings = BrowserSettings()
    routines: RoutineSettings = RoutineSettings()
    agents: AgentSettings = AgentSettings()
    mcp: McpSettings = McpSettings()
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    dashboard: DashboardSettings = DashboardSettings()
    daemon: DaemonSettings = DaemonSettings()
    store: StoreSettings = StoreSettings()
    cluster: ClusterSettings = ClusterSettings()
    # Outside coding harnesses by executor name (docs/executors.md).
    executors: dict[Annotated[str, Field(pattern=NAME_PATTERN)], ExecutorSettings] = Field(
        default_factory=dict
    )

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            zoneinfo.ZoneInfo(value)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"unknown time zone {value!r} (use an IANA name like 'Europe/Paris')"
            ) from None
        return value

    def provider_for(self, model: str) -> tuple[str, ProviderSettings]:
        """Split "provider/model" and find the provider's settings."""
        provider, _, _ = model.partition("/")
        if provider not in self.providers:
            known = ", ".join(sorted(self.providers)) or "none"
            raise ConfigError(
                f"model {model!r} names provider {provider!r}, which config.toml does not define "
                f"(defined: {known}); add a [providers.{provider}] table"
            )
        return provider, self.providers[provider]


class BotSettings(Strict):
    title: str = ""
    description: str = ""
    model: ModelName | None = None  # default: config.toml's model
    fallback_model: ModelName | None = None
    tools: list[str] | None = None  # None or empty: every tool
    # The home library's skills this bot sees besides its own: None (absent) all, [] none.
    # Names are checked at home load; one not in the library is a warning, as the main bot
    # may create it later (atlas/home.py).
    skills: list[str] | None = None
    # The home's mcp.json servers this bot uses (none named: all of them). A list of names, as
    # the shipped bot.toml shows; a table's keys are read as the names too.
    mcp_servers: list[str] = Field(default_factory=list)
    channels: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # ask: the gate asks the guardian and the person; auto: skips the guardian only;
    # read-only: no write_file/edit_file, and commands that are not clearly read-only ask.
    mode: Literal["ask", "auto", "read-only"] = "ask"
    sandbox: BotSandboxSettings = Field(default_factory=BotSandboxSettings)
    # A busy bot (a team's Slack): its conversations are spread over every worker process by
    # a hash of their address; its channels stay in one (docs/ARCHITECTURE.md, "Workers").
    spread: bool = False

    @field_validator("mcp_servers", mode="before")
    @classmethod
    def _server_names(cls, value: Any) -> Any:
        return list(value) if isinstance(value, dict) else value

    @field_validator("skills")
    @classmethod
    def _skill_names(cls, names: list[str] | None) -> list[str] | None:
        for name in names or []:
            if not re.fullmatch(SKILL_NAME_PATTERN, name):
                raise ValueError(
                    f"{name!r} is not a skill name (1-64 lowercase letters, digits, '-' and '_', "
                    "starting with a letter or digit)"
                )
        return names


_KEY_PART = r"""(?:"[^"]*"|'[^']*'|[A-Za-z0-9_-]+)"""
_DOTTED_KEY = rf"{_KEY_PART}(?:\s*\.\s*{_KEY_PART})*"
_TABLE_HEADER = re.compile(rf"^\s*\[\[?\s*({_DOTTED_KEY})\s*\]\]?")
_ASSIGNMENT = re.compile(rf"^\s*({_DOTTED_KEY})\s*=")


def _key_parts(dotted: str) -> tuple[str, ...]:
    return tuple(part.strip("\"'") for part in re.findall(_KEY_PART, dotted))


def find_line(text: str, loc: tuple[Any, ...]) -> int | None:
    """Best-effort line of the key at `loc`, following [table] headers so that the same key in
    two tables is told apart; else the line of the nearest enclosing table or key."""
    keys = tuple(str(part) for part in loc if isinstance(part, str))
    if not keys:
        return None
    table: tuple[str, ...] = ()
    nearest, nearest_depth = None, 0
    for number, line in enumerate(text.splitlines(), start=1):
        if header := _TABLE_HEADER.match(line):
            table = path = _key_parts(header.group(1))
        elif assignment := _ASSIGNMENT.match(line):
            path = table + _key_parts(assignment.group(1))
        else:
            continue
        if path == keys:
            return number
        if keys[: len(path)] == path and len(path) > nearest_depth:
            nearest, nearest_depth = number, len(path)
    return nearest


_URL_PASSWORD = re.compile(r"(://[^/@:\s]*:)[^/@\s]*@")


def _without_password(value: object) -> object:
    """An address's password (scheme://user:password@host) is not repeated in an error."""
    return _URL_PASSWORD.sub(r"\1***@", value) if isinstance(value, str) else value


def _describe(path: Path, text: str, error: ValidationError) -> str:
    lines = [f"{path}: invalid settings"]
    for item in error.errors():
        loc = tuple(item["loc"])
        key = ".".join(str(p) for p in loc) or "(top level)"
        line = find_line(text, loc)
        where = f" (line {line})" if line else ""
        if item["type"] == "extra_forbidden":
            what = "unknown key"
            if loc and loc[-1] in ("api_key", "token", "secret"):
                what += "; secrets are never stored in config: name an environment variable in api_key_env"
        elif item["type"] == "missing":
            what = "required key is missing"
        else:
            message = item["msg"].removeprefix("Value error, ")  # pydantic's wrapper, not ours
            what = f"{message} (got {_without_password(item.get('input'))!r})"
        lines.append(f"  {key}{where}: {what}")
    return "\n".join(lines)


def read_toml(path: Path) -> tuple[dict[str, Any], str]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: malformed TOML: {exc}") from None


def _validate(model: type[ModelT], path: Path) -> tuple[ModelT, str]:
    data, text = read_toml(path)
    try:
        return model.model_validate(data), text
    except ValidationError as exc:
        raise ConfigError(_describe(path, text, exc)) from None


def _check_providers(
    settings: Settings, path: Path, text: str, models: dict[str, str | None]
) -> None:
    """Every model named must have its provider defined: fail now, not on the first message."""
    for key, model in models.items():
        if not model:
            continue
        try:
            settings.provider_for(model)
        except ConfigError as exc:
            line = find_line(text, tuple(key.split(".")))
            where = f" (line {line})" if line else ""
            raise ConfigError(f"{path}: {key}{where}: {exc}") from None


def load_settings(path: Path) -> Settings:
    settings, text = _validate(Settings, path)
    models = {
        "model": settings.model,
        "fallback_model": settings.fallback_model,
        "trust.guardian_model": settings.trust.guardian_model,
    }
    _check_providers(settings, path, text, models)
    return settings


def load_bot_settings(path: Path, settings: Settings | None = None) -> BotSettings:
    """A bot.toml; with the home's settings, its models' providers are checked too."""
    bot, text = _validate(BotSettings, path)
    if settings is not None:
        models = {"model": bot.model, "fallback_model": bot.fallback_model}
        _check_providers(settings, path, text, models)
    return bot
