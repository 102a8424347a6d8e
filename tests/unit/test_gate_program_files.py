"""Command files a debugger or database shell runs (issue 33, item 3): read from the workspace
and judged as the same commands given on the line are; a file the gate cannot read is asked."""

from __future__ import annotations

from pathlib import Path

import pytest

from atlas.trust.rules import Verdict, classify

FILES = {
    "evil.gdb": "break main\nrun\nshell rm -rf ~\n",
    "bang.gdb": "# setup\n!rm -rf ~\n",
    "plain.gdb": "break main\nrun\nbt\ninfo registers\n",
    "block.gdb": "python\nimport os\nos.system('rm -rf ~')\nend\n",
    "sources.gdb": "source evil.gdb\n",
    "evil.sql": "select 1;\n.shell rm -rf ~\n",
    "system.sql": ".system rm -rf ~\n",
    "pipe.sql": ".output |rm -rf ~\nselect 1;\n",
    "plain.sql": "create table t (x int);\ninsert into t values (1);\n",
    "nested.sql": ".read evil.sql\n",
    "evil.psql": "select 1;\n\\! rm -rf ~\n",
    "plain.psql": "\\set ON_ERROR_STOP 1\nselect now();\n",
}
ESCAPING = [
    "gdb -x evil.gdb ./a.out",
    "gdb -batch --command=evil.gdb ./a.out",
    "gdb --command evil.gdb ./a.out",
    "gdb -x bang.gdb ./a.out",
    "gdb -ix block.gdb ./a.out",
    "gdb -x sources.gdb ./a.out",
    "sqlite3 app.db '.read evil.sql'",
    "sqlite3 app.db < evil.sql",
    "sqlite3 -init system.sql app.db",
    "sqlite3 app.db < pipe.sql",
    "sqlite3 app.db '.read nested.sql'",
    "sqlite3 app.db <<'EOF'\n.read evil.sql\nEOF",
    "sqlite3 app.db '.read |rm -rf ~'",
    "psql -f evil.psql",
    "psql --file=evil.psql",
    "psql -fevil.psql",
    "psql -c '\\i evil.psql'",
    "psql < evil.psql",
    "mysql app < evil.psql",
]
PLAIN = [
    "gdb -x plain.gdb ./a.out",
    "gdb -batch -ex run ./a.out",
    "sqlite3 app.db < plain.sql",
    "sqlite3 app.db '.read plain.sql'",
    "psql -f plain.psql",
    "psql -c 'select 1'",
]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    folder = tmp_path / "home" / ".atlas" / "bots" / "main" / "workspace"
    folder.mkdir(parents=True)
    for name, text in FILES.items():
        (folder / name).write_text(text)
    return folder


def judge(command: str, workspace: Path, auto: bool = False) -> Verdict:
    home = workspace.parents[2]
    return classify(
        command, auto=auto, home=home, user_home=home.parent, workspace=workspace, cwd=workspace
    )


@pytest.mark.parametrize("command", ESCAPING)
def test_a_command_file_is_judged_as_its_commands_would_be(command: str, workspace: Path) -> None:
    verdict = judge(command, workspace, auto=True)
    assert verdict.verdict == "block", (command, verdict)
    assert verdict.rule == "hardline:rm-root"


@pytest.mark.parametrize("command", PLAIN)
def test_a_plain_command_file_stays_allowed(command: str, workspace: Path) -> None:
    assert judge(command, workspace).verdict == "allow", command


def test_python_in_a_gdb_file_is_read_as_python(workspace: Path) -> None:
    (workspace / "send.gdb").write_text("python\nimport requests\nrequests.post(u, data=d)\nend\n")
    verdict = judge("gdb -x send.gdb ./a.out", workspace, auto=True)
    assert verdict.verdict == "ask" and verdict.rule.startswith("outside:"), verdict


@pytest.mark.parametrize(
    ("command", "why"),
    [
        ("gdb -x missing.gdb ./a.out", "could not be read"),
        ("gdb -x /etc/hostname ./a.out", "outside the workspace"),
        ("sqlite3 app.db < ../../../../outside.sql", "outside the workspace"),
        ("psql -f big.sql", "too large"),
        ("gdb -x folder ./a.out", "a folder"),
        ("printf 'shell rm -rf ~' > new.gdb; gdb -x new.gdb ./a.out", "written by this same"),
    ],
)
def test_a_file_the_gate_cannot_read_is_asked(command: str, why: str, workspace: Path) -> None:
    (workspace / "big.sql").write_text("select 1;\n" * 30_000)
    (workspace / "folder").mkdir()
    verdict = judge(command, workspace)
    assert verdict.verdict == "ask", (command, verdict)
    assert verdict.rule.startswith("opaque:") and why in verdict.reason, verdict


def test_a_link_out_of_the_workspace_is_not_read(workspace: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.gdb"
    outside.write_text("break main\n")
    (workspace / "link.gdb").symlink_to(outside)
    verdict = judge("gdb -x link.gdb ./a.out", workspace)
    assert verdict.verdict == "ask" and "outside the workspace" in verdict.reason, verdict


def test_a_file_that_includes_itself_ends(workspace: Path) -> None:
    (workspace / "loop.sql").write_text(".read loop.sql\n")
    verdict = judge("sqlite3 app.db '.read loop.sql'", workspace)
    assert verdict.verdict == "ask" and "too many" in verdict.reason, verdict
