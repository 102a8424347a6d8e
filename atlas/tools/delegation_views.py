"""What delegation_search shows: instances from the delegation record (atlas/executors/record.py)
and the harness's own session log read back, each sized to the answer's budget."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from atlas.executors.base import LogEntry, SessionLog

ENTRY_CHARS = 1_500  # one entry of a turn, or of the session, in full
SHORT_CHARS = 300  # one entry when the full view does not fit, and in browse
LOG_CHARS = 600  # one session entry in a read's start and end
LOG_ENDS = 5  # session entries shown at each end in a read
HITS_SHOWN = 3  # matching entries shown for an instance that is not the best one
BEST_SHARE = 0.6  # of the answer's budget, for the best instance (or a read's record)


@dataclass(frozen=True)
class View:
    """How to show: the time zone, the budget, tool entries or not."""

    zone: ZoneInfo
    budget: int
    include_tools: bool = False


def when(stamp: str | datetime | None, zone: ZoneInfo) -> str:
    if not stamp:
        return "?"
    moment = datetime.fromisoformat(stamp) if isinstance(stamp, str) else stamp
    return moment.astimezone(zone).strftime("%Y-%m-%d %H:%M")


def cut(text: str, chars: int) -> str:
    text = text.strip()
    if len(text) <= chars:
        return text
    return text[:chars] + f" … [{len(text) - chars} more characters]"


def fits(lines: list[str], budget: int) -> bool:
    return sum(len(line) + 1 for line in lines) <= budget


def instance_header(turns: list[dict[str, Any]], view: View, about: str = "") -> str:
    first, last = turns[0], turns[-1]
    parts = [f"## {first['instance_id']}", last["account"], first["folder"]]
    end = when(last["ended_at"], view.zone) if last["ended_at"] else "now"
    parts.append(f"{when(first['started_at'], view.zone)} → {end}")
    parts.append(f"{len(turns)} turn(s), {last['state']}")
    if first["owner"] == "person":
        parts.append("the person's own")
    elif first["conversation"]:
        parts.append(f"from {first['conversation']}")
    if about:
        parts.append(about)
    return " · ".join(parts)


def _usage(raw: str | None) -> str:
    usage = json.loads(raw) if raw else None
    if not usage:
        return ""
    told = f"{usage.get('input_tokens', 0):,} in, {usage.get('output_tokens', 0):,} out tokens"
    if usage.get("cost_usd") is not None:
        told += f", ${usage['cost_usd']:.4f}"
    return told


def _stat(stat: str, chars: int) -> str:
    """A `git diff --stat`, indented under its label, cut to `chars`."""
    return "\n".join(f"    {line.strip()}" for line in cut(stat, chars).splitlines())


def turn_lines(number: int, turn: dict[str, Any], view: View, chars: int) -> list[str]:
    """One turn: what it was asked, what happened in order, the diff stat before and after."""
    end = when(turn["ended_at"], view.zone) if turn["ended_at"] else "still running"
    head = f"Turn {number} · {turn['account']} · {when(turn['started_at'], view.zone)} → {end}"
    head += f" · {turn['state']}" + (
        f" · session {turn['session_id']}" if turn["session_id"] else ""
    )
    lines = [head]
    for entry in turn["entries"]:
        label = entry["kind"] + (f" by {entry['who']}" if entry["who"] else "")
        lines.append(f"  [{label}] {cut(entry['text'], chars)}")
    if turn["files_before"]:
        lines.append(f"  [git diff --stat before]\n{_stat(turn['files_before'], chars)}")
    if turn["ended_at"]:
        after = _stat(turn["files_after"], chars) if turn["files_after"] else "    (no changes)"
        lines.append(f"  [git diff --stat after]\n{after}")
    if usage := _usage(turn["usage"]):
        lines.append(f"  [usage] {usage}")
    return lines


def record_view(turns: list[dict[str, Any]], view: View, budget: int) -> list[str]:
    """Every turn, entries in full if that fits `budget`, else shorter, else the latest turns."""
    for chars in (ENTRY_CHARS, SHORT_CHARS):
        lines = [line for i, t in enumerate(turns, 1) for line in turn_lines(i, t, view, chars)]
        if fits(lines, budget):
            return lines
    kept: list[str] = []
    for i in range(len(turns), 0, -1):  # the latest turns matter most
        block = turn_lines(i, turns[i - 1], view, SHORT_CHARS)
        if not fits([*block, *kept], budget - 100):
            kept.insert(0, f"(turns 1–{i} left out to stay short)")
            break
        kept = [*block, *kept]
    return kept


def browsed(turns: list[dict[str, Any]], view: View) -> str:
    """One listed instance: its first prompt, and how its last turn ended."""
    lines = [instance_header(turns, view)]
    lines.append(f"[prompt] {cut(turns[0]['prompt'] or '', SHORT_CHARS)}")
    last = turns[-1]
    if last["final_text"]:
        lines.append(
            f"[{'final' if last['state'] == 'done' else last['state']}] "
            f"{cut(last['final_text'], SHORT_CHARS)}"
        )
    changed = [e["text"] for t in turns for e in t["entries"] if e["kind"] == "files"]
    if changed:
        lines.append(f"[files] {cut('; '.join(changed), SHORT_CHARS)}")
    return "\n".join(lines)


def hit_lines(turns: list[dict[str, Any]], hits: list[dict[str, Any]], total: int) -> list[str]:
    """An instance that is not the best match: its best matching entries, marked."""
    numbers = {turn["id"]: i for i, turn in enumerate(turns, 1)}
    lines = [
        f"  [turn {numbers.get(hit['turn'], '?')} {hit['kind']}] {hit['snippet'] or ''}"
        for hit in hits[:HITS_SHOWN]
    ]
    if total > len(lines):
        lines.append(f"  (+{total - len(lines)} more matching)")
    return lines


# ---- the harness's own session log ----------------------------------------------------------


def _log_line(entry: LogEntry, view: View, chars: int) -> str:
    who = f"tool {entry.tool}" if entry.role == "tool" and entry.tool else entry.role
    at = f" {when(entry.at, view.zone)}" if entry.at else ""
    return f"[#{entry.index} {who}{at}] {cut(entry.text, chars)}"


def shown_entries(log: SessionLog, view: View) -> list[LogEntry]:
    return [e for e in log.entries if view.include_tools or e.role != "tool"]


def _log_source(log: SessionLog, harness: str) -> str:
    where = f", {log.path}" if log.path else ""
    return f"{harness}'s own session log (session {log.session_id}{where})"


def gone(log: SessionLog, harness: str) -> str:
    why = log.why_missing or "the harness deleted it, or never wrote it"
    return (
        f"{harness}'s own session log (session {log.session_id}) is gone: {why}. "
        "The record above still stands."
    )


def log_ends(log: SessionLog, harness: str, view: View, budget: int) -> str:
    """A read's look into the session: its start and its end."""
    if log.deleted:
        return gone(log, harness)
    entries = shown_entries(log, view)
    hidden = len(log.entries) - len(entries)
    about = f"{len(log.entries)} entries" + (
        f", {hidden} of tools left out (include_tools=true shows them)" if hidden else ""
    )
    lines = [f"{_log_source(log, harness)}: {about}."]
    for chars in (LOG_CHARS, SHORT_CHARS // 2):
        picked = entries if len(entries) <= 2 * LOG_ENDS else None
        if picked is not None:
            body = [_log_line(e, view, chars) for e in picked]
        else:
            start, end = entries[:LOG_ENDS], entries[-LOG_ENDS:]
            middle = len(entries) - len(start) - len(end)
            body = [_log_line(e, view, chars) for e in start]
            body.append(f"  … {middle} entries …")
            body += [_log_line(e, view, chars) for e in end]
        if fits(body, budget - 300) or chars != LOG_CHARS:
            lines += body
            break
    if entries:
        middle = entries[len(entries) // 2].index
        lines.append(f"Next: instance_id with around=#, e.g. around={middle}, scrolls it.")
    return "\n".join(lines)


def log_around(log: SessionLog, harness: str, index: int, window: int, view: View) -> str:
    """Scroll: `window` shown entries each side of entry #index."""
    if log.deleted:
        return gone(log, harness)
    entries = shown_entries(log, view)
    if not entries:
        return f"{_log_source(log, harness)} has no entries to show."
    if index > entries[-1].index:
        return f"{_log_source(log, harness)} ends at entry #{entries[-1].index}."
    # The anchor: the entry itself, or the next shown one (a tool entry, when tools are hidden).
    at = next(i for i, e in enumerate(entries) if e.index >= index)
    picked = entries[max(0, at - window) : at + window + 1]
    chars = view.budget if window == 0 else ENTRY_CHARS
    lines = [f"{_log_source(log, harness)}, around entry #{entries[at].index}:"]
    for entry in picked:
        line = _log_line(entry, view, chars)
        if not fits([*lines, line], view.budget - 200):
            lines.append("(cut here to stay short: a smaller window shows all of each)")
            break
        lines.append(line)
    hints = []
    if entries.index(picked[0]) > 0:
        hints.append(f"earlier: around={picked[0].index}")
    if entries.index(picked[-1]) < len(entries) - 1:
        hints.append(f"later: around={picked[-1].index}")
    lines.append(f"Next: {'; '.join(hints)}." if hints else "(that is the whole session)")
    return "\n".join(lines)
