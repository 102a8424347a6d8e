"""use_skill (load a skill's instructions) and skill_manage (create and change the bot's skills).

skill_manage works on the bot's own skills: the main bot's are the home's library
(`<home>/skills/`), another bot's are in `bots/<name>/skills/`. When another bot changes a library
skill it lists, it gets its own copy first (its own wins on a name clash), so it never rewrites
what other bots use. Each operation names its skill; a call's operations are applied to staged
copies and installed only when all of them succeeded; the previous version is kept
(atlas/skills/versions.py). A change holds the skills folder's lock (atlas/locks.py) from the
existence check to the install, so the dashboard's changes (write_skill_file, delete_skill) and
other processes' calls never interleave with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from pydantic.json_schema import SkipJsonSchema

from atlas.errors import ToolError
from atlas.locks import held
from atlas.skills import versions
from atlas.skills.claude_code import describe_mapping, map_allowed_tools
from atlas.skills.library import (
    SKILL_FILE,
    SUBFOLDERS,
    Library,
    Skill,
    SkillError,
    any_skill,
    check_skill_name,
    count_tokens,
    discover,
    load_skill,
    skill_index,
)
from atlas.tools.registry import RunContext, Tool, tool
from atlas.trust.threats import scan

# Until LimitSettings has `context_window`, budgets assume a common 128k-token model.
DEFAULT_CONTEXT_WINDOW = 128_000
INDEX_SHARE = 0.01  # use_skill's description (the skill list) gets 1% of the context window
CARRIED_SKILL_TOKENS = 5_000
MAX_FILE_CHARS = 200_000
UNSCANNED_FOLDERS = ("scripts", "assets")  # code and binaries: not read as instructions
_DESCRIPTION_KEY = "use_skill.description"
_IN_USE_KEY = "use_skill.in_use"


def library_for(run: RunContext) -> Library:
    return discover(run.home.skills_dir, run.bot.skills_dir, run.bot.listed_skills)


def context_window(run: RunContext) -> int:
    return run.settings.limits.context_window


# ---- use_skill --------------------------------------------------------------------------------


@dataclass
class _SkillCheck:
    """The last answer of `any_skill` for one bot, and the skills folders' times it saw."""

    bot: object  # the Bot itself: kept so that its id is not reused by another while cached
    folders: tuple[str, ...]
    mtimes: tuple[int, ...]
    exists: bool
    checked_at: float = float("-inf")  # time.monotonic() of the last look at the folders


# A skill added or removed while the daemon runs is seen within this long: the folders' times
# are looked at no more often (a stat per folder per model round was ~1.5 % of a turn's CPU).
SKILLS_RECHECK_SECONDS = 1.0


_SKILL_CHECKS: dict[int, _SkillCheck] = {}  # id(bot) -> its last check


def _mtime_ns(folder: str) -> int:
    try:
        return os.stat(folder).st_mtime_ns
    except OSError:
        return 0


@contextlib.contextmanager
def _skills_changing() -> Iterator[None]:
    """Around a change this process makes to a skills folder: use_skill's availability is
    asked afresh at once (SKILLS_RECHECK_SECONDS is for changes made elsewhere)."""
    try:
        yield
    finally:
        _SKILL_CHECKS.clear()


def _when_a_skill_exists(run: RunContext) -> str | None:
    """Asked every model round. `any_skill`'s answer depends only on the bot (a Bot is
    replaced, not changed, when its settings change) and on its skills folders' modification
    times, so it is asked again only when one of those times changes (a skill added or
    removed): a stat per folder at most once a second (SKILLS_RECHECK_SECONDS)."""
    bot = run.bot
    check = _SKILL_CHECKS.get(id(bot))
    if check is None or check.bot is not bot:
        if len(_SKILL_CHECKS) > 256:  # bots replaced over a long run: stay bounded
            _SKILL_CHECKS.clear()
        folders = tuple(dict.fromkeys((str(run.home.skills_dir), str(bot.skills_dir))))
        check = _SKILL_CHECKS[id(bot)] = _SkillCheck(bot, folders, (), False)
    now = time.monotonic()
    if now - check.checked_at >= SKILLS_RECHECK_SECONDS:
        check.checked_at = now
        mtimes = tuple(_mtime_ns(folder) for folder in check.folders)
        if mtimes != check.mtimes:
            check.exists = any_skill(run.home.skills_dir, bot.skills_dir, bot.listed_skills)
            check.mtimes = mtimes
    if check.exists:
        return None
    return "not available: there are no skills yet"


def _substitute(body: str, skill: Skill, arguments: str) -> tuple[str, bool]:
    """Claude Code's placeholders: $ARGUMENTS and the skill's folder. True if arguments went in."""
    for placeholder in ("${CLAUDE_SKILL_DIR}", "{baseDir}"):
        body = body.replace(placeholder, str(skill.folder))
    used = "$ARGUMENTS" in body
    return body.replace("$ARGUMENTS", arguments), used


@tool(
    read_only=True,
    carried=True,
    available=_when_a_skill_exists,
    describe=lambda run: describe_use_skill(run),
    aliases={"skill": "name", "args": "arguments"},  # Claude Code's Skill tool
)
async def use_skill(run: RunContext, name: str, arguments: str = "") -> str:
    """Load a skill: its instructions, folder and files. Use one when the task matches it."""
    library = library_for(run)
    skill = library.skills.get(name.strip())
    if skill is None:
        known = ", ".join(library.skills) or "none"
        raise ToolError(f"no skill named {name!r} (skills: {known})")
    try:
        body, used_arguments = _substitute(skill.instructions(), skill, arguments)
    except (SkillError, OSError, UnicodeDecodeError) as exc:
        raise ToolError(f"cannot read skill {name!r}: {exc}") from None
    files = skill.files()
    head = [f"# Skill {skill.name}", f"Folder: {skill.folder} (paths below are relative to it)"]
    if files:
        shown = files[:100]
        more = f" (+{len(files) - 100} more)" if len(files) > 100 else ""
        head.append(f"Files: {', '.join(shown)}{more}")
    if mapping := describe_mapping(map_allowed_tools(list(skill.allowed_tools))):
        head.append(mapping)
    if arguments and not used_arguments:
        head.append(f"Arguments: {arguments}")
    in_use: list[str] = run.state.tool_state.setdefault(_IN_USE_KEY, [])
    if skill.name not in in_use:
        in_use.append(skill.name)
    return "\n".join(head) + "\n\n" + body


def describe_use_skill(run: RunContext) -> str:
    """The docstring plus the skill index, within 1% of the context window. Kept per
    conversation so the tool list (and the provider's cached prefix) does not change midway."""
    state = run.state.tool_state
    if _DESCRIPTION_KEY not in state:
        library = library_for(run)
        base = f"{use_skill.description}\nSkills:\n"
        # A skill that fails to load is named (the log and `atlas doctor` say why), so an
        # empty or short list is not a mystery; within the same budget.
        note = ""
        if library.unreadable:
            note = f"Not loaded (SKILL.md unreadable): {', '.join(library.unreadable)}"
        budget = int(context_window(run) * INDEX_SHARE) - count_tokens(base + note + "\n")
        index = skill_index(library.skills.values(), max(budget, 0))
        state[_DESCRIPTION_KEY] = base + "\n".join(part for part in (index, note) if part)
    return state[_DESCRIPTION_KEY]


def carried_skills(run: RunContext) -> list[tuple[str, str]]:
    """(name, instructions) of each skill used in this conversation, each cut to 5,000 tokens,
    for compaction to carry over."""
    library = library_for(run)
    carried: list[tuple[str, str]] = []
    for name in run.state.tool_state.get(_IN_USE_KEY, []):
        skill = library.skills.get(name)
        if skill is None:
            continue
        text = skill.instructions()
        if count_tokens(text) > CARRIED_SKILL_TOKENS:
            text = text[: CARRIED_SKILL_TOKENS * 3] + "\n… [cut; use_skill loads it whole]"
        carried.append((name, text))
    return carried


# ---- skill_manage -----------------------------------------------------------------------------

SkillAction = Literal["create", "patch", "write_file", "remove_file", "delete", "restore"]


def _name_required(schema: dict[str, Any]) -> None:
    """`name` has a default only so that a call with the older top-level `name` validates;
    the model is told each operation names its skill."""
    schema["required"] = ["name", *[key for key in schema.get("required", []) if key != "name"]]
    schema["properties"]["name"].pop("default", None)


class SkillOperation(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_name_required)

    name: str = ""
    action: SkillAction
    content: str = ""
    file_content: str = ""  # write_file's text (the reference's name); `content` is its alias
    old_string: str = ""
    new_string: str = ""
    replace_all: bool = False
    file_path: str = ""


def _relative(file_path: str, where: str, *, sub_folder_only: bool) -> PurePosixPath:
    path = PurePosixPath(file_path.strip().replace("\\", "/"))
    if not file_path.strip():
        raise ToolError(f"{where}: give file_path, e.g. references/notes.md")
    if path.is_absolute() or any(part in ("..", "") or part.startswith(".") for part in path.parts):
        raise ToolError(f"{where}: file_path {file_path!r} must be a plain path inside the skill")
    if sub_folder_only and (len(path.parts) < 2 or path.parts[0] not in SUBFOLDERS):
        raise ToolError(
            f"{where}: file_path {file_path!r} must be under one of {', '.join(SUBFOLDERS)}/ "
            f"(change {SKILL_FILE} with patch)"
        )
    return path


def _checked_text(text: str, relative: PurePosixPath, where: str) -> str:
    if len(text) > MAX_FILE_CHARS:
        raise ToolError(
            f"{where}: {relative} would be {len(text):,} characters (at most {MAX_FILE_CHARS:,})"
        )
    if relative.parts[0] not in UNSCANNED_FOLDERS and (reason := scan(text)):
        raise ToolError(f"{where}: refused, {reason}; skills are followed as instructions")
    return text


def _folder_threats(folder: Path) -> dict[PurePosixPath, str]:
    """Why each text file of a skill folder would be refused by the scan (scripts/, assets/ and
    dot-folders such as the version history are not read as instructions)."""
    found: dict[PurePosixPath, str] = {}
    for path in sorted(folder.rglob("*")):
        relative = PurePosixPath(path.relative_to(folder).as_posix())
        if relative.parts[0] in UNSCANNED_FOLDERS or relative.parts[0].startswith("."):
            continue
        if path.is_symlink() or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if reason := scan(text):
            found[relative] = reason
    return found


def _refuse_new_threats(work: Path, original: Path | None) -> None:
    """Refuse a change that leaves a file reading as an injection, even when no single piece
    did (a patch that completes a sentence); a file already flagged before stays changeable."""
    before = _folder_threats(original) if original is not None else {}
    for relative, reason in _folder_threats(work).items():
        if relative not in before:
            raise ToolError(
                f"refused, {relative} would read as an injection: {reason}; skills are followed "
                "as instructions; nothing was changed"
            )


def _text(op: SkillOperation, where: str) -> str:
    """An operation's text: `file_content` and `content` are one field under two names (the
    reference's for write_file, and the older one), so either spelling works for any action."""
    if op.content and op.file_content and op.content != op.file_content:
        raise ToolError(f"{where}: content and file_content disagree; give one")
    return op.file_content or op.content


def _patched(original: str, op: SkillOperation, relative: PurePosixPath, where: str) -> str:
    if not op.old_string:
        if not (text := _text(op, where)):
            raise ToolError(f"{where}: give old_string and new_string, or the whole new content")
        return _checked_text(text, relative, where)
    count = original.count(op.old_string)
    if count == 0:
        raise ToolError(f"{where}: old_string not found in {relative}; read the skill again")
    if count > 1 and not op.replace_all:
        raise ToolError(
            f"{where}: old_string occurs {count} times in {relative}; quote more context "
            "or set replace_all"
        )
    _checked_text(op.new_string, relative, where)
    result = original.replace(op.old_string, op.new_string, -1 if op.replace_all else 1)
    return _checked_text(result, relative, where) if len(result) > MAX_FILE_CHARS else result


def _apply(work: Path, op: SkillOperation, where: str) -> None:
    """One operation on the staged copy of a skill."""
    if op.action == "create":
        (work / SKILL_FILE).write_text(
            _checked_text(_text(op, where), PurePosixPath(SKILL_FILE), where), encoding="utf-8"
        )
    elif op.action == "patch":
        relative = _relative(op.file_path or SKILL_FILE, where, sub_folder_only=False)
        target = work / relative
        if not target.is_file():
            raise ToolError(f"{where}: the skill has no file {relative}")
        target.write_text(
            _patched(target.read_text(encoding="utf-8"), op, relative, where), encoding="utf-8"
        )
    elif op.action == "write_file":
        relative = _relative(op.file_path, where, sub_folder_only=True)
        target = work / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(_checked_text(_text(op, where), relative, where), encoding="utf-8")
    elif op.action == "remove_file":
        relative = _relative(op.file_path, where, sub_folder_only=True)
        if not (work / relative).is_file():
            raise ToolError(f"{where}: the skill has no file {relative}")
        (work / relative).unlink()
    else:
        raise ToolError(f"{where}: {op.action} must be the only operation of its call")


def _validated(work: Path, name: str) -> Skill:
    try:
        skill = load_skill(work, "bot")
    except SkillError as exc:
        raise ToolError(f"the skill would be invalid, nothing was changed: {exc}") from None
    if not skill.description:
        raise ToolError(
            f"{SKILL_FILE} of {name!r} needs a `description` in its frontmatter: it is how the "
            "skill is found later; nothing was changed"
        )
    return skill


def _refuse_threatening_version(root: Path, name: str) -> None:
    """A version kept from before the scan learnt a spelling is scanned again before it returns."""
    folder = root / name
    candidates = (
        versions.history_versions(folder)
        if folder.exists()
        else versions.archived_versions(root, name)
    )
    if candidates and (threats := _folder_threats(candidates[-1])):
        relative, reason = next(iter(threats.items()))
        raise ToolError(
            f"refused to restore {name!r}: its {relative} reads as an injection ({reason}); "
            "write the skill again with patch instead"
        )


def _delete_or_restore(run: RunContext, name: str, op: SkillOperation, library: Library) -> str:
    root = run.bot.skills_dir
    if op.action == "restore":
        _refuse_threatening_version(root, name)
        try:
            message = versions.restore(root, name)
            return message[:1].upper() + message[1:] + "."
        except SkillError as exc:
            raise ToolError(str(exc)) from None
    return _delete(name, library)


def _delete(name: str, library: Library) -> str:
    skill = library.skills.get(name)
    if skill is None or skill.origin == "home":
        where = "is in the home's library; only its owner removes it" if skill else "does not exist"
        raise ToolError(f"skill {name!r} {where}")
    kept = versions.archive(skill.folder)
    return f"Deleted skill {name!r}; archived in {kept} (restore brings it back)."


@dataclass
class _Staged:
    """One skill's changes, made on a copy; installed only once every skill of the call staged."""

    root: Path
    name: str
    skill: Skill | None
    staging: Path
    files: int = 0

    def discard(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)  # a refused call leaves nothing behind

    def install(self) -> str:
        # Not removed if installing fails midway: the staging folder may then hold the old version.
        kept = versions.install(self.root / self.name, self.staging / self.name)
        self.staging.rmdir()
        done = "created" if self.skill is None else "changed"
        note = f"; previous version kept in {kept}" if kept else ""
        if self.skill is not None and self.skill.origin == "home":
            note = f"; the home library's version is untouched ({self.skill.folder})"
        return (
            f"Skill {self.name!r} {done} in {self.root / self.name} "
            f"({SKILL_FILE} and {self.files} other files){note}."
        )


def _stage(
    root: Path, name: str, operations: list[tuple[int, SkillOperation]], skill: Skill | None
) -> _Staged:
    root.mkdir(parents=True, exist_ok=True)
    staged = _Staged(root, name, skill, Path(tempfile.mkdtemp(dir=root, prefix=".staging-")))
    work = staged.staging / name
    try:
        if skill is None:
            work.mkdir()
        else:
            shutil.copytree(skill.folder, work, ignore=shutil.ignore_patterns(versions.HISTORY))
        for number, op in operations:
            _apply(work, op, f"operation {number} ({op.action})")
        _refuse_new_threats(work, skill.folder if skill is not None else None)
        staged.files = len(_validated(work, name).files())
    except BaseException:
        staged.discard()
        raise
    return staged


def _named(op: SkillOperation, top_level: str, number: int) -> SkillOperation:
    """The operation with its skill's name: its own, or the call's top-level `name` (the
    older shape, still accepted)."""
    name = op.name.strip() or top_level.strip()
    where = f"operation {number} ({op.action})"
    if not name:
        raise ToolError(f"{where}: give `name`, the skill it works on")
    try:
        check_skill_name(name)
    except SkillError as exc:
        raise ToolError(f"{where}: {exc}") from None
    return op.model_copy(update={"name": name})


def _check_order(name: str, group: list[tuple[int, SkillOperation]], library: Library) -> None:
    actions = [op.action for _, op in group]
    skill = library.skills.get(name)
    if "create" in actions[1:]:
        raise ToolError(f"create must be the first operation on skill {name!r}")
    if actions[0] == "create" and skill is not None:
        raise ToolError(f"skill {name!r} already exists ({skill.folder}); change it with patch")
    if actions[0] != "create" and skill is None:
        known = ", ".join(library.skills) or "none"
        raise ToolError(f"no skill named {name!r}; create it first (skills: {known})")


def write_skill_file(root: Path, name: str, text: str, skill: Skill | None) -> str:
    """The person's own edit of a skill's whole SKILL.md (the dashboard), or a new skill in
    `root`: staged, scanned, validated and installed (the previous version kept) as
    skill_manage's create and patch are, under the skills folder's lock; ToolError says why it
    was refused. Blocking (the lock): call it in a thread."""
    op = _named(
        SkillOperation(action="create" if skill is None else "patch", content=text), name, 1
    )
    with held(root), _skills_changing():
        if skill is None:  # a create: refused for a name taken meanwhile, as skill_manage's is
            _check_order(op.name, [(1, op)], discover(root, root))
        return _stage(root, op.name, [(1, op)], skill).install()


def delete_skill(root: Path, name: str) -> str:
    """The person deletes a skill of `root` (the dashboard), as skill_manage's delete does: the
    folder goes to the archive (restore brings it back), under the skills folder's lock.
    Blocking: call it in a thread."""
    with held(root), _skills_changing():
        return _delete(name, discover(root, root))


@tool()
async def skill_manage(
    run: RunContext, operations: list[SkillOperation], name: SkipJsonSchema[str] = ""
) -> str:
    """Create or change your skills (reusable procedures; SKILL.md with frontmatter name,
    description). Operations, each naming its skill (`name`), applied all or none: create
    (content: the whole SKILL.md); patch (old_string/new_string, replace_all, file_path
    default SKILL.md; or content for the whole file); write_file/remove_file (file_path under
    references/, templates/, scripts/ or assets/; file_content); delete or restore (alone:
    restore brings back the previous version or a deleted skill)."""
    if not operations:
        raise ToolError("give at least one operation")
    # The registry hands nested models over as dicts (model_dump): make them models again.
    ops = [
        _named(SkillOperation.model_validate(op), name, number)
        for number, op in enumerate(operations, 1)
    ]
    # Under the skills folder's lock (in a thread: it may wait), so that the person's change on
    # the dashboard, or another process's call, never interleaves with this one.
    return await asyncio.to_thread(_manage_locked, run, ops)


def _manage_locked(run: RunContext, ops: list[SkillOperation]) -> str:
    with held(run.bot.skills_dir), _skills_changing():
        return _manage(run, ops)


def _manage(run: RunContext, ops: list[SkillOperation]) -> str:
    library = library_for(run)
    actions = [op.action for op in ops]
    if {"delete", "restore"} & set(actions):
        if len(ops) > 1:
            raise ToolError(
                f"{actions[0] if len(actions) == 1 else 'delete/restore'} must be alone in its call"
            )
        return _delete_or_restore(run, ops[0].name, ops[0], library)
    groups: dict[str, list[tuple[int, SkillOperation]]] = {}
    for number, op in enumerate(ops, 1):
        groups.setdefault(op.name, []).append((number, op))
    for skill_name, group in groups.items():
        _check_order(skill_name, group, library)
    staged: list[_Staged] = []
    try:
        for skill_name, group in groups.items():
            staged.append(
                _stage(run.bot.skills_dir, skill_name, group, library.skills.get(skill_name))
            )
    except BaseException:
        for each in staged:
            each.discard()
        raise
    return "\n".join(each.install() for each in staged)


SKILL_TOOLS: list[Tool] = [use_skill, skill_manage]
