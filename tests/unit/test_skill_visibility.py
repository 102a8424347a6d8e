"""Skills, seen (issue #24 item 3): a skill that fails to load is named with its reason in the
log and in `atlas doctor`; the skill list keeps the part of each description that tells it
apart from the others, within the same 1 % of the context window."""

from __future__ import annotations

import logging
import os

import pytest

from atlas.doctor import _skills_check
from atlas.home import Home
from atlas.skills.library import count_tokens, discover
from atlas.tools.skills import use_skill
from tests.helpers import run_context
from tests.unit.test_skills import skill_md, write_skill

SHARED = "Use this skill when the person asks about the quarterly figures of"
CLIENTS = [f"client{n:02d}" for n in range(20)]


def test_twenty_skills_sharing_an_opening_are_told_apart(home: Home) -> None:
    for client in CLIENTS:
        write_skill(
            home.skills_dir, client, skill_md(client, f"{SHARED} {client.upper()} and its board")
        )
    run = run_context(home)
    description = use_skill.spec(run).description  # what the registry hands the model
    for client in CLIENTS:
        assert f"- {client}: …{client.upper()} and its board" in description
    assert "more" not in description  # all twenty listed
    assert count_tokens(description) <= 1_280  # still within 1 % of the 128k window


def test_a_unique_description_keeps_its_opening(home: Home) -> None:
    write_skill(home.skills_dir, "alpha", skill_md("alpha", f"{SHARED} ALPHA"))
    write_skill(home.skills_dir, "beta", skill_md("beta", f"{SHARED} BETA"))
    write_skill(home.skills_dir, "tea", skill_md("tea", "Brew green tea the slow way."))
    description = use_skill.spec(run_context(home)).description
    assert "- tea: Brew green tea the slow way." in description
    assert "- alpha: …ALPHA" in description


def test_a_broken_skill_is_logged_once_per_change_and_named_by_doctor(
    home: Home, caplog: pytest.LogCaptureFixture
) -> None:
    write_skill(home.skills_dir, "good")
    broken = write_skill(home.skills_dir, "broken", "---\nname: broken\ndescription: [oops\n---\n")
    caplog.set_level(logging.WARNING, logger="atlas.skills.library")
    for _ in range(3):  # the library is read every round
        discover(home.skills_dir, home.skills_dir)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert str(broken) in warnings[0] and "not valid YAML" in warnings[0]

    (broken / "SKILL.md").write_text("no frontmatter at all\n")
    stat = (broken / "SKILL.md").stat()
    os.utime(broken / "SKILL.md", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    discover(home.skills_dir, home.skills_dir)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and "must start with YAML frontmatter" in warnings[1]

    check = _skills_check(home)
    assert not check.ok and check.optional  # a warning: the other skills work
    assert "broken" in check.detail and "must start with YAML frontmatter" in check.detail
    assert "good" not in check.detail


def test_doctor_says_the_skills_load(home: Home) -> None:
    write_skill(home.skills_dir, "good")
    check = _skills_check(home)
    assert check.ok and "1 skill(s) load" in check.detail


def test_use_skill_names_a_skill_that_did_not_load(home: Home) -> None:
    write_skill(home.skills_dir, "broken", "no frontmatter\n")
    description = use_skill.spec(run_context(home)).description
    assert description.endswith("Skills:\nNot loaded (SKILL.md unreadable): broken")
    other = run_context(home, conversation_id=2)
    write_skill(home.skills_dir, "good")
    assert "- good: Does a thing.\nNot loaded (SKILL.md unreadable): broken" in (
        use_skill.spec(other).description
    )
