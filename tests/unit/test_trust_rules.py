"""The command rules: a corpus of dangerous and ordinary commands with the verdict each deserves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from atlas.trust.check import check_main
from atlas.trust.normalise import normalise
from atlas.trust.rules import TrustSettings, Verdict, classify
from tests.unit.trust_corpus import GUARDIAN, HARDLINE, ORDINARY, OUTSIDE

USER_HOME = Path("/home/alice")
ATLAS_HOME = USER_HOME / ".atlas"


def judge(command: str, **options: object) -> Verdict:
    return classify(command, home=ATLAS_HOME, user_home=USER_HOME, **options)  # type: ignore[arg-type]


def test_corpus_is_large_enough() -> None:
    assert len(HARDLINE) + len(OUTSIDE) + len(GUARDIAN) >= 150
    assert len(ORDINARY) >= 150
    everything = HARDLINE + OUTSIDE + GUARDIAN + ORDINARY
    assert len(set(everything)) == len(everything), "a command is listed twice"


@pytest.mark.parametrize("command", HARDLINE)
def test_hardline_blocks_in_every_mode(command: str) -> None:
    for auto in (False, True):
        verdict = judge(command, auto=auto)
        assert verdict.verdict == "block", (auto, verdict)
        assert verdict.rule.startswith("hardline:")


@pytest.mark.parametrize("command", OUTSIDE)
def test_outside_the_machine_asks_in_every_mode(command: str) -> None:
    for auto in (False, True):
        verdict = judge(command, auto=auto)
        assert verdict.verdict == "ask", (auto, verdict)
        assert verdict.rule.startswith("outside:")


@pytest.mark.parametrize("command", GUARDIAN)
def test_dangerous_goes_to_the_guardian_and_auto_allows_it(command: str) -> None:
    verdict = judge(command)
    assert verdict.verdict == "guardian", verdict
    assert verdict.rule.startswith("dangerous:")
    auto = judge(command, auto=True)
    assert auto.verdict == "allow"
    assert auto.rule == verdict.rule and "auto mode" in auto.reason


@pytest.mark.parametrize("command", ORDINARY)
def test_ordinary_commands_are_allowed(command: str) -> None:
    assert judge(command) == Verdict("allow", "ordinary", "no rule matched")


@pytest.mark.parametrize(
    ("command", "parts"),
    [
        ("r\\m -rf '/'", ["rm -rf /"]),
        ("rm${IFS}-rf${IFS}/tmp", ["rm -rf /tmp"]),
        (
            "ls && echo a || echo b; pwd | wc -l\nid",
            ["ls", "echo a", "echo b", "pwd", "wc -l", "id"],
        ),
        ("echo $(whoami) `id`", ["whoami", "id", "echo $SUBSTITUTION $SUBSTITUTION"]),
        ("sudo -u bob env A=1 B=2 nohup timeout 5 nice -n 3 exec ls -l", ["ls -l"]),
        ("find . | xargs -n 1 -I X rm X", ["find .", "rm X"]),
        ("bash -c 'ls; id'", ["bash -c ls; id", "ls", "id"]),
        (
            "python3 -c \"import shutil; shutil.rmtree('x')\"",
            ["python3 -c import shutil; shutil.rmtree('x')", "rm -r x"],
        ),
        ("echo x >>/tmp/log", ["echo x >> /tmp/log"]),
        ("(cd src && { make; })", ["cd src", "make"]),
    ],
)
def test_normalise_sees_through_disguises(command: str, parts: list[str]) -> None:
    assert normalise(command) == parts


def test_most_severe_part_wins() -> None:
    assert judge("git push -f; gh pr create; rm -rf /").verdict == "block"
    assert judge("git push -f; gh pr create").verdict == "ask"
    assert judge("ls; git push -f").verdict == "guardian"


def test_deny_list_globs_block_normalised_parts() -> None:
    deny = ["docker system prune*", "npm publish*"]
    verdict = judge("cd app && 'docker' system prune -af", deny=deny)
    assert verdict == Verdict(
        "block", "deny:docker system prune*", "matches the deny-list entry 'docker system prune*'"
    )
    assert judge("sudo npm publish", deny=deny, auto=True).verdict == "block"
    assert judge("docker ps", deny=deny).verdict == "allow"
    # The deny list outranks asking, and the hardline outranks the deny list.
    assert judge("gh pr create", deny=["gh pr *"]).rule == "deny:gh pr *"
    assert judge("rm -rf /", deny=["rm *"]).rule.startswith("hardline:")


def test_deny_list_reads_from_trust_settings() -> None:
    settings = TrustSettings.model_validate({"deny": ["terraform destroy*"]})
    assert judge("terraform destroy -auto-approve", deny=settings.deny).verdict == "block"
    with pytest.raises(ValueError, match="ask_timeout"):
        TrustSettings.model_validate({"ask_timeout": 0})


def test_home_defaults_to_atlas_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ATLAS_HOME", str(tmp_path))
    assert classify(f"cat {tmp_path}/atlas.db").verdict == "ask"
    assert classify(f"cat {tmp_path}/config.toml").verdict == "allow"


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("command", "file", "body", "expected"),
    [
        ("bash x.sh", "x.sh", "echo hi\nrm -rf /\n", "block"),
        ("sh x.sh", "x.sh", "ls\n", "allow"),
        ("./x.sh", "x.sh", "#!/bin/sh\ngit push --force\n", "guardian"),
        ("source env.sh", "env.sh", "gh auth token\n", "ask"),
        (". ./env.sh", "env.sh", "export A=1\n", "allow"),
        ("python x.py", "x.py", "import shutil\nshutil.rmtree('/')\n", "block"),
        ("python3 x.py", "x.py", "import shutil\nshutil.rmtree('build')\n", "guardian"),
        ("python3 x.py", "x.py", "print('rm -rf /')\n", "allow"),
        ("./tool", "tool", "#!/usr/bin/env python3\nimport os\nos.system('reboot')\n", "block"),
        ("bash outer.sh", "outer.sh", "bash inner.sh\n", "block"),  # inner.sh below
        ("bash missing.sh", None, "", "guardian"),  # cannot be read: cannot be judged
    ],
)
def test_scripts_are_read_through(
    tmp_path: Path, command: str, file: str | None, body: str, expected: str
) -> None:
    if file:
        write(tmp_path / file, body)
    write(tmp_path / "inner.sh", "mkfs.ext4 /dev/sda\n")
    assert judge(command, cwd=tmp_path).verdict == expected


def test_large_scripts_are_not_read(tmp_path: Path) -> None:
    write(tmp_path / "big.sh", "echo hi\n" * 40_000)
    verdict = judge("bash big.sh", cwd=tmp_path)
    assert verdict.verdict == "guardian" and "too large" in verdict.reason


def test_a_script_that_runs_itself_stops(tmp_path: Path) -> None:
    write(tmp_path / "loop.sh", "bash loop.sh\n")
    assert judge("bash loop.sh", cwd=tmp_path).verdict == "allow"


def test_check_prints_the_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    assert check_main(["--", "rm -rf /"]) == 0
    assert capsys.readouterr().out.startswith("block: hardline:rm-root: ")
    assert check_main(["--auto", "--", "git", "push", "-f"]) == 0
    assert capsys.readouterr().out.startswith("allow: dangerous:git: ")


def test_check_json_parses(capsys: pytest.CaptureFixture[str]) -> None:
    assert check_main(["--json", "--", "gh pr create"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["verdict"] == "ask" and printed["rule"] == "outside:gh" and printed["reason"]
    assert check_main(["--json", "--deny", "ls*", "--", "ls -la"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "block"


def test_check_without_a_command_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert check_main(["--json"]) == 2
    assert "no command" in capsys.readouterr().out
