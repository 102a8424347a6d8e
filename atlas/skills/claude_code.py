"""Skills written for Claude Code: its tool names mapped to Atlas's, and `atlas skills import`.

Claude Code's `allowed-tools` pre-approves tools while a skill runs. Atlas has no per-skill
approvals (every call passes the gate), so the mapping tells the model which of our tools the
skill means; a pattern such as `Bash(git:*)` is shown but not enforced.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from atlas.skills.library import (
    SKILL_FILE,
    SkillError,
    check_skill_name,
    parse_allowed_tools,
    split_frontmatter,
)
from atlas.trust.threats import scan

CLAUDE_CODE_TOOLS: dict[str, str] = {
    "Read": "read_file",
    "NotebookRead": "read_file",
    "Write": "write_file",
    "Edit": "edit_file",
    "MultiEdit": "edit_file",
    "Bash": "run_command",
    "BashOutput": "run_command",
    "KillShell": "run_command",
    "KillBash": "run_command",
    "Glob": "find_files",
    "Grep": "find_files",
    "LS": "find_files",
    "WebFetch": "web_fetch",
    "WebSearch": "web_search",
    "Task": "delegate",
    "Agent": "delegate",
    "TodoWrite": "plan",
    "TodoRead": "plan",
    "Skill": "use_skill",
    "SlashCommand": "use_skill",
    "AskUserQuestion": "ask_user",
}
# Atlas's own names are accepted as they are.
ATLAS_TOOLS = frozenset(CLAUDE_CODE_TOOLS.values()) | {
    "memory",
    "skill_manage",
    "conversation_search",
    "tool_search",
}
_ENTRY = re.compile(r"^([A-Za-z_][\w.-]*)(?:\((.*)\))?$")
SKIPPED_NAMES = {".git", "__pycache__", ".DS_Store", "node_modules"}
MAX_IMPORT_BYTES = 50 * 1024 * 1024


@dataclass
class ToolMapping:
    mapped: dict[str, str] = field(default_factory=dict)  # entry as written → Atlas tool
    unmapped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def tools(self) -> list[str]:
        """The Atlas tools the skill may use, each once, in the order first named."""
        return list(dict.fromkeys(self.mapped.values()))


def map_allowed_tools(entries: list[str]) -> ToolMapping:
    """Claude Code (or Atlas) tool names → Atlas tools; what has no counterpart is unmapped."""
    mapping = ToolMapping()
    for entry in entries:
        match = _ENTRY.match(entry.strip())
        name, pattern = (match.group(1), match.group(2)) if match else (entry, None)
        target = CLAUDE_CODE_TOOLS.get(name) or (name if name in ATLAS_TOOLS else None)
        if target is None:
            mapping.unmapped.append(entry)
            if name.startswith("mcp__"):
                mapping.notes.append(
                    f"{entry}: an MCP tool; add its server to bot.toml's mcp_servers to use it"
                )
            continue
        mapping.mapped[entry] = target
        if pattern:
            mapping.notes.append(
                f"{entry} → {target}: the pattern {pattern!r} is not enforced; the approval "
                "gate judges every call"
            )
    return mapping


def describe_mapping(mapping: ToolMapping) -> str:
    """Lines for use_skill's answer: which of our tools the skill's names mean."""
    if not mapping.mapped and not mapping.unmapped:
        return ""
    renamed = [f"{k} = {v}" for k, v in mapping.mapped.items() if k != v]
    lines = [f"Tools this skill uses: {', '.join(mapping.tools) or 'none of ours'}"]
    if renamed:
        lines.append(f"(written for Claude Code: {'; '.join(renamed)})")
    if mapping.unmapped:
        lines.append(f"Not available here: {', '.join(mapping.unmapped)}")
    return "\n".join(lines)


# ---- import -----------------------------------------------------------------------------------


@dataclass
class ImportReport:
    name: str
    destination: Path
    files: list[str] = field(default_factory=list)  # copied, relative to the skill folder
    mapping: ToolMapping = field(default_factory=ToolMapping)
    skipped: list[str] = field(default_factory=list)  # left out, with the reason
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """The report as a person reads it after `atlas skills import`."""
        lines = [f"Imported skill {self.name!r} into {self.destination} ({len(self.files)} files)."]
        if self.mapping.mapped:
            pairs = ", ".join(f"{k} → {v}" for k, v in self.mapping.mapped.items())
            lines.append(f"Tools mapped: {pairs}")
        if self.mapping.unmapped:
            lines.append(f"Tools that did not map: {', '.join(self.mapping.unmapped)}")
        lines += [f"Note: {n}" for n in self.mapping.notes]
        lines += [f"Skipped: {s}" for s in self.skipped]
        lines += [f"Warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def _plan_copy(src: Path, report: ImportReport) -> list[Path]:
    """The files to copy; symlinks, VCS folders and caches are left out (and reported)."""
    chosen: list[Path] = []
    total = 0
    for path in sorted(src.rglob("*")):
        relative = path.relative_to(src)
        if any(part in SKIPPED_NAMES for part in relative.parts):
            continue
        if path.is_symlink():
            report.skipped.append(f"{relative.as_posix()} (a symbolic link)")
            continue
        if not path.is_file():
            continue
        total += path.stat().st_size
        if total > MAX_IMPORT_BYTES:
            raise SkillError(f"{src}: more than {MAX_IMPORT_BYTES // 2**20} MB; not a skill?")
        chosen.append(relative)
    return chosen


def import_skill(src: Path, dest_root: Path, *, replace: bool = False) -> ImportReport:
    """Copy a skill folder (or the folder of a SKILL.md) into `dest_root/<name>/` and report
    what was copied and which tool names did not map."""
    src = src.expanduser().resolve()
    if src.is_file() and src.name == SKILL_FILE:
        src = src.parent
    skill_file = src / SKILL_FILE
    if not skill_file.is_file():
        raise SkillError(f"{src}: no {SKILL_FILE} here; point at a skill's folder")
    text = skill_file.read_text(encoding="utf-8")
    meta, _ = split_frontmatter(text, skill_file)
    name = check_skill_name(str(meta.get("name") or src.name))
    destination = dest_root / name
    report = ImportReport(name=name, destination=destination)
    if not str(meta.get("description") or "").strip():
        report.warnings.append(
            f"{skill_file} has no description: the model sees only the name when choosing skills"
        )
    if reason := scan(text):
        report.warnings.append(f"{SKILL_FILE}: {reason}; read it before using the skill")
    report.mapping = map_allowed_tools(parse_allowed_tools(meta.get("allowed-tools")))
    files = _plan_copy(src, report)
    if destination.exists():
        if not replace:
            raise SkillError(f"{destination} already exists; remove it or import with replace")
        shutil.rmtree(destination)
    for relative in files:
        target = destination / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / relative, target)
        report.files.append(relative.as_posix())
    return report
