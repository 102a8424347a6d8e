"""Tools from typed async functions: schema from the signature, description from the docstring.

    @tool(read_only=True, aliases={"file_path": "path"})
    async def read_file(run: RunContext, path: str, offset: int = 1) -> str:
        \"\"\"Read a text file...\"\"\"

The first parameter is always the injected RunContext; the model never sees it.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_type_hints

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from atlas.errors import ToolError
from atlas.providers.base import Image, ToolSpec
from atlas.tools.advertised import advertised_schema

if TYPE_CHECKING:
    from atlas.channels.base import Question, QuestionOutcome
    from atlas.config import Settings
    from atlas.home import Bot, Home
    from atlas.store.conversations import ConversationStore
    from atlas.tools.services import AgentServices

log = logging.getLogger(__name__)

RunKind = Literal["conversation", "bot", "routine", "subagent"]
# Asks a person a question; returns the chosen answer, or None when nobody can answer.
Asker = Callable[[str, list[str]], Awaitable[str | None]]
# Puts a notice into the origin conversation (starts a new turn there).
Notifier = Callable[[str], Awaitable[None]]
# Puts ask_user's questions to the person in the chat; says how the wait ended.
QuestionAsker = Callable[[list["Question"]], Awaitable["QuestionOutcome"]]


@dataclass
class ConversationState:
    """What tools remember within one conversation (lost on restart, by design: a restarted
    conversation must read a file again before overwriting it)."""

    file_hashes: dict[str, str] = field(default_factory=dict)  # resolved path -> sha256 when read
    loaded_tools: list[str] = field(default_factory=list)  # deferred tools, in the order loaded
    system_prompt: str | None = None  # the snapshot taken when the conversation started
    approvals: set[tuple[str, str]] = field(default_factory=set)  # (tool, rule) allowed by the user
    mode: str | None = None  # the gate mode set by /mode; None: the bot's own
    tool_state: dict[str, Any] = field(default_factory=dict)  # what tools keep per conversation
    pending_asks: list[str] = field(default_factory=list)  # approval questions awaiting an answer


@dataclass
class RunContext:
    """Everything a tool may need about the run it serves."""

    home: Home
    bot: Bot
    conversation_id: int
    run_kind: RunKind = "conversation"
    channel: str = "console"
    state: ConversationState = field(default_factory=ConversationState)
    ask: Asker | None = None
    notify: Notifier | None = None
    ask_questions: QuestionAsker | None = None
    supports_images: bool = True
    # Opens a bot's conversation store (the runtime's, shared): for tools that search or record.
    open_store: Callable[[Bot], Awaitable[ConversationStore]] | None = None
    # Subagents, other bots, routines, the run's tool registry (atlas/tools/services.py);
    # None when no dispatcher runs around this call.
    services: AgentServices | None = None

    @property
    def settings(self) -> Settings:
        return self.home.settings


def effective_mode(run: RunContext) -> str:
    """The gate mode of a run: the conversation's (/mode), else the bot's."""
    return run.state.mode or run.bot.settings.mode


@dataclass
class ToolResult:
    text: str
    images: list[Image] = field(default_factory=list)
    is_error: bool = False
    untrusted: bool = False  # text from outside (a document, a page): wrapped as data for the model
    files: list[Path] = field(default_factory=list)  # attached to the turn's reply
    # Not an error, yet the call did not succeed (a command's non-zero exit): the loop guards
    # count it as a failure.
    failed: bool = False


# Says why a tool is unavailable to a run, or None when it is available.
Availability = Callable[[RunContext], str | None]


def only_for(*kinds: RunKind) -> Availability:
    def rule(run: RunContext) -> str | None:
        if run.run_kind in kinds:
            return None
        return f"not available in a {run.run_kind} run (only in: {', '.join(kinds)})"

    return rule


class _Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid")


@functools.cache
def _arguments_schema(
    arguments: type[BaseModel], hidden: frozenset[str] = frozenset(), required: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The JSON schema a tool advertises (atlas/tools/advertised.py), built once per shape:
    pydantic's schema generation costs more than the rest of a turn's own work. Shared by
    every spec, which only read it."""
    return advertised_schema(arguments.model_json_schema(), hidden=hidden, required=required)


# The availability answers of one pass over a registry's tools for one run (ToolRegistry.offer):
# each tool's rule runs once per pass, though tool_search's own rule and its description ask
# about every deferred tool again. The pass is synchronous and the answers are dropped at its
# end, so nothing is remembered from one model round to the next: a tool that becomes
# (un)available between rounds (a skill added, the mode changed) is seen in the next round.
_PASS: ContextVar[tuple[RunContext, dict[int, str | None]] | None] = ContextVar(
    "atlas_tool_availability_pass", default=None
)


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    fn: Callable[..., Awaitable[str | ToolResult]]
    arguments: type[BaseModel]
    read_only: bool = False
    failure_tolerant: bool = False
    carried: bool = False
    deferred: bool = False
    pages_itself: bool = False  # its output is already paged; never spilled by the loop
    untrusted: bool = False  # every result comes from outside (web, MCP): wrapped as data
    edits_files: bool = False  # withheld in read-only mode
    aliases: dict[str, str] = field(default_factory=dict)
    # Another harness's word for a value (find_files' output_mode "files_with_matches"):
    # parameter -> {their value: ours}. Accepted, never advertised.
    value_aliases: dict[str, dict[str, str]] = field(default_factory=dict)
    available: Availability | None = None
    describe: Callable[[RunContext], str] | None = None  # a description made for the run
    # Accepted, never advertised: parameters the model is not shown (a batch form; see
    # advertised.py), and those a given run is not shown (withheld(run): executor-only ones).
    hidden: frozenset[str] = frozenset()
    withheld: Callable[[RunContext], frozenset[str]] | None = None
    required: tuple[str, ...] = ()  # advertised as required though the model has a default
    # The spec last built, reused while its description stays the same: the tool list is
    # asked for every model round and nearly always comes out the same (ToolSpec is frozen).
    _last_spec: list[ToolSpec] = field(default_factory=list, init=False, repr=False, compare=False)

    def spec(self, run: RunContext | None = None) -> ToolSpec:
        description = self.describe(run) if run is not None and self.describe else self.description
        hidden = self.hidden
        if run is not None and self.withheld is not None:
            hidden = hidden | self.withheld(run)
        parameters = _arguments_schema(self.arguments, hidden, self.required)
        last = self._last_spec
        if last and last[0].description == description and last[0].parameters is parameters:
            return last[0]
        spec = ToolSpec(self.name, description, parameters)
        last[:] = [spec]
        return spec

    def unavailable_reason(self, run: RunContext) -> str | None:
        current = _PASS.get()
        if current is None or current[0] is not run:
            return self._unavailable_reason(run)
        answers = current[1]
        key = id(self)  # the tools outlive the pass: an id is not reused within it
        if key not in answers:
            answers[key] = self._unavailable_reason(run)
        return answers[key]

    def _unavailable_reason(self, run: RunContext) -> str | None:
        allowed = run.bot.settings.tools
        # tool_search stays: it is how a bot reaches the deferred tools its list names.
        if allowed and self.name not in allowed and self.name != "tool_search":
            return f"not in bot {run.bot.name!r}'s tools list ({run.bot.root / 'bot.toml'})"
        if self.edits_files and effective_mode(run) == "read-only":
            return "withheld in read-only mode (change the mode with /mode ask)"
        return self.available(run) if self.available else None

    def parse_arguments(self, raw: str | dict[str, Any]) -> dict[str, Any]:
        """Raw JSON (or a dict) → validated keyword arguments; raises ToolError naming the fault."""
        if isinstance(raw, str):
            try:
                data = json.loads(raw) if raw.strip() else {}
            except json.JSONDecodeError as exc:
                raise ToolError(
                    f"arguments are not valid JSON ({exc.msg} at char {exc.pos})"
                ) from None
        else:
            data = dict(raw)
        if not isinstance(data, dict):
            raise ToolError("arguments must be a JSON object")
        for alias, canonical in self.aliases.items():
            if alias not in data:
                continue
            value = data.pop(alias)
            if canonical in data and data[canonical] != value:
                raise ToolError(
                    f"{alias!r} and {canonical!r} mean the same and disagree "
                    f"({value!r} vs {data[canonical]!r}); give one"
                )
            data[canonical] = value
        for name, ours in self.value_aliases.items():
            value = data.get(name)
            if isinstance(value, str) and value in ours:
                data[name] = ours[value]
        try:
            return self.arguments.model_validate(data).model_dump()
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                for e in exc.errors()
            )
            raise ToolError(f"invalid arguments for {self.name}: {problems}") from None

    async def invoke(self, run: RunContext, raw: str | dict[str, Any]) -> ToolResult:
        """Run the tool. Every failure comes back as an error result the model reads."""
        reason = self.unavailable_reason(run)
        if reason:
            return ToolResult(
                f"Error: {self.name} is not offered to this run: {reason}", is_error=True
            )
        try:
            kwargs = self.parse_arguments(raw)
            result = await self.fn(run, **kwargs)
        except ToolError as exc:
            return ToolResult(f"Error: {exc}", is_error=True)
        except Exception as exc:  # a tool's bug must not end the turn: the model reads it
            log.warning("tool %s failed", self.name, exc_info=True)
            return ToolResult(f"Error: {type(exc).__name__}: {exc}", is_error=True)
        return result if isinstance(result, ToolResult) else ToolResult(str(result))


def tool(
    *,
    read_only: bool = False,
    failure_tolerant: bool = False,
    carried: bool = False,
    deferred: bool = False,
    pages_itself: bool = False,
    untrusted: bool = False,
    edits_files: bool = False,
    aliases: dict[str, str] | None = None,
    value_aliases: dict[str, dict[str, str]] | None = None,
    available: Availability | None = None,
    describe: Callable[[RunContext], str] | None = None,
    hidden: Iterable[str] = (),
    withheld: Callable[[RunContext], frozenset[str]] | None = None,
    required: Iterable[str] = (),
) -> Callable[[Callable[..., Awaitable[Any]]], Tool]:
    def wrap(fn: Callable[..., Awaitable[Any]]) -> Tool:
        hints = get_type_hints(fn, include_extras=True)
        params = list(inspect.signature(fn).parameters.values())[1:]  # drop the RunContext
        fields: dict[str, Any] = {}
        for p in params:
            default = ... if p.default is inspect.Parameter.empty else p.default
            fields[p.name] = (hints[p.name], default)
        arguments = create_model(f"{fn.__name__}_arguments", __base__=_Arguments, **fields)
        doc = inspect.cleandoc(fn.__doc__ or "")
        if not doc:
            raise TypeError(f"tool {fn.__name__} needs a docstring: it is the model's description")
        return Tool(
            name=fn.__name__,
            description=doc,
            fn=fn,
            arguments=arguments,
            read_only=read_only,
            failure_tolerant=failure_tolerant,
            carried=carried,
            deferred=deferred,
            pages_itself=pages_itself,
            untrusted=untrusted,
            edits_files=edits_files,
            aliases=dict(aliases or {}),
            value_aliases=dict(value_aliases or {}),
            available=available,
            describe=describe,
            hidden=frozenset(hidden),
            withheld=withheld,
            required=tuple(required),
        )

    return wrap


class ToolRegistry:
    """Tools in a fixed order, so the tool list (and the prompt prefix) is byte-identical
    from one turn to the next."""

    def __init__(
        self, tools: Sequence[Tool] = (), *, why_missing: Callable[[str], str | None] | None = None
    ) -> None:
        self._tools: dict[str, Tool] = {}
        # Why a name that is not here is still one the model may know (an MCP server's tool
        # while the server is down): said instead of "no such tool".
        self.why_missing = why_missing
        self._always_on: list[Tool] | None = None  # in registry order; rebuilt after an add
        for t in tools:
            self.add(t)

    def add(self, t: Tool) -> None:
        if t.name in self._tools:
            raise ValueError(f"tool {t.name!r} registered twice")
        self._tools[t.name] = t
        self._always_on = None

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def for_run(self, run: RunContext) -> list[Tool]:
        """The tools this run offers the model: the available always-on tools in registry
        order, then deferred tools in the order they were loaded. A loaded tool joins at the
        end so the tools before it (and the provider's cached prefix) stay byte-identical."""
        return self.offer(run)[0]

    def specs_for_run(self, run: RunContext) -> list[ToolSpec]:
        """What the model is told about for_run's tools: asked before every model call."""
        return self.offer(run)[1]

    def offer(self, run: RunContext) -> tuple[list[Tool], list[ToolSpec]]:
        """for_run's tools and their specs, in one pass: each tool's availability is decided
        once in it (see _PASS), however many descriptions ask about it."""
        outer = _PASS.get()
        token = _PASS.set((run, {})) if outer is None or outer[0] is not run else None
        try:
            if self._always_on is None:
                self._always_on = [t for t in self._tools.values() if not t.deferred]
            loaded = [self._tools[name] for name in run.state.loaded_tools if name in self._tools]
            tools = [t for t in self._always_on + loaded if t.unavailable_reason(run) is None]
            return tools, [t.spec(run) for t in tools]
        finally:
            if token is not None:
                _PASS.reset(token)

    async def call(self, run: RunContext, name: str, raw: str | dict[str, Any]) -> ToolResult:
        t = self._tools.get(name)
        if t is None and self.why_missing is not None and (why := self.why_missing(name)):
            return ToolResult(f"Error: {name} is not offered to this run: {why}", is_error=True)
        if t is None:
            near = ", ".join(x.name for x in self.for_run(run))
            return ToolResult(
                f"Error: there is no tool named {name!r}; tools: {near}", is_error=True
            )
        if t.deferred and name not in run.state.loaded_tools and t.unavailable_reason(run) is None:
            run.state.loaded_tools.append(name)  # calling a deferred tool by name loads it
        return await t.invoke(run, raw)
