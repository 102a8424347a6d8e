"""The sandbox's launcher and policy: the bwrap command line, the probe's choice of variant, the
allow-listed environment, what a bot's policy hides and grants, the hint and the domain asker."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from atlas.home import Home
from atlas.sandbox import launcher
from atlas.sandbox.commands import HINT, Launch, domain_asker, with_hint
from atlas.sandbox.launcher import SandboxPolicy, SandboxUnavailable, Variant, sandbox_argv
from atlas.sandbox.policy import allowed_env, policy_for
from tests.helpers import BASE_CONFIG, make_home, run_context


@pytest.fixture
def fresh_probe() -> Iterator[None]:
    launcher._probe.cache_clear()
    yield
    launcher._probe.cache_clear()


def pairs(argv: list[str], option: str) -> list[str]:
    return [argv[i + 1] for i, word in enumerate(argv) if word == option]


def test_argv_hides_then_binds_back_in_order(tmp_path: Path) -> None:
    home = tmp_path / "person" / ".atlas"
    workspace = home / "bots" / "x" / "workspace"
    workspace.mkdir(parents=True)
    (tmp_path / "person" / ".netrc").write_text("machine x password y")
    policy = SandboxPolicy(
        workspace=workspace,
        hidden=(home, tmp_path / "person" / ".netrc", tmp_path / "missing"),
        env={"PATH": "/usr/bin"},
        readable=(tmp_path / "person",),
    )
    argv = sandbox_argv(["bash", "-c", "true"], policy)
    at = argv.index
    bwrap_end = len(argv) - 1 - argv[::-1].index("--")  # the limits' wrapper has its own "--"
    # No proxy socket: the offline init first (sh, no bridge), then the command.
    assert argv[bwrap_end + 1 : bwrap_end + 4] == ["/bin/sh", "-c", launcher.OFFLINE_INIT]
    assert argv[-6:] == ["atlas-sandbox", "0", "0", "bash", "-c", "true"]
    assert argv[at("--ro-bind") : at("--ro-bind") + 3] == ["--ro-bind", "/", "/"]
    for namespace in ("--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"):
        assert namespace in argv
    assert "--die-with-parent" in argv and "--new-session" in argv
    assert at("/tmp") < at(str(tmp_path / "person"))  # private /tmp, then the person bound in
    assert at(str(home)) < at(str(workspace))  # the home hidden, then the workspace bound back
    assert pairs(argv, "--tmpfs")[-1] == str(home)
    assert pairs(argv, "--bind") == [str(workspace)]
    assert pairs(argv, "--remount-ro") == ["/dev", str(home)]  # /dev read-only: limits.py
    netrc = argv.index(str(tmp_path / "person" / ".netrc"))
    assert argv[netrc - 1] == "/dev/null"  # a file is hidden behind an empty one
    assert str(tmp_path / "missing") not in argv
    assert at("--clearenv") < at("--setenv") and pairs(argv, "--chdir") == [str(workspace)]


def test_read_only_binds_the_workspace_read_only(tmp_path: Path) -> None:
    argv = sandbox_argv(["true"], SandboxPolicy(workspace=tmp_path, read_only=True))
    assert "--bind" not in argv and pairs(argv, "--ro-bind")[-1] == str(tmp_path)


def test_programs_under_tmp_stay_visible_read_only(tmp_path: Path) -> None:
    """A checkout or CI clone under /tmp: the private /tmp must not hide the PATH's programs."""
    tools = tmp_path / "venv" / "bin"
    tools.mkdir(parents=True)
    policy = SandboxPolicy(workspace=tmp_path / "ws", env={"PATH": f"{tools}:/usr/bin"})
    (tmp_path / "ws").mkdir()
    argv = sandbox_argv(["true"], policy)
    assert f"--ro-bind {tools} {tools}" in " ".join(argv)
    assert "--ro-bind /usr/bin" not in " ".join(argv)  # outside /tmp: the read-only root has it


def test_tmp_itself_on_the_path_does_not_bring_back_the_machines_tmp(tmp_path: Path) -> None:
    """The machine's /tmp holds the person's tmux, screen and ssh-agent sockets: a tmux socket
    is a shell outside the sandbox. `/tmp` on the PATH must not bind it back."""
    (tmp_path / "ws").mkdir()
    policy = SandboxPolicy(workspace=tmp_path / "ws", env={"PATH": "/tmp:/tmp/.:/usr/bin"})
    argv = " ".join(sandbox_argv(["true"], policy))
    assert "--ro-bind /tmp /tmp" not in argv


def test_a_proxy_socket_is_bridged_and_named_in_the_environment(tmp_path: Path) -> None:
    socket = tmp_path / "proxy.sock"
    socket.touch()
    argv = sandbox_argv(["true"], SandboxPolicy(workspace=tmp_path, proxy_socket=socket))
    assert argv[argv.index(str(socket)) + 1] == launcher.PROXY_SOCKET_INSIDE
    names = pairs(argv, "--setenv")
    assert {"HTTP_PROXY", "https_proxy", "ALL_PROXY"} <= set(names)
    bwrap_end = len(argv) - 1 - argv[::-1].index("--")
    assert argv[bwrap_end + 1 : bwrap_end + 3] == ["bash", "-c"]
    bridge = argv[bwrap_end + 3]
    assert argv[-3:] == ["1", "0", "true"] and "TCP-LISTEN:3128,bind=127.0.0.1" in bridge
    assert f"UNIX-CONNECT:{launcher.PROXY_SOCKET_INSIDE}" in bridge


def test_the_probe_takes_the_strongest_variant_that_starts(
    fresh_probe: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    tried: list[Variant] = []

    def starts(bwrap: str, variant: Variant) -> str | None:
        tried.append(variant)
        return None if not variant.proc else "Can't mount proc on /newroot/proc"

    monkeypatch.setattr(launcher, "_starts", starts)
    assert launcher.probe() == Variant(user_ns=True, proc=False, no_nested_userns=True)
    assert launcher.probe() == Variant(user_ns=True, proc=False, no_nested_userns=True)
    assert len(tried) == 4  # once per process: the second call asked nobody
    assert "--disable-userns" in tried[-1].options()  # tried last, on the variant that starts
    assert Variant(True, False).options()[-2:] == ["--tmpfs", "/proc"]  # empty, not the host's


def test_no_variant_fails_closed_naming_the_fix(
    fresh_probe: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(launcher, "_starts", lambda bwrap, variant: "No permissions")
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap") as caught:
        sandbox_argv(["true"], SandboxPolicy(workspace=tmp_path))
    assert "[sandbox] enabled = false" in str(caught.value)


@pytest.mark.parametrize("problem", ["no-bwrap", "macos"])
def test_no_bwrap_or_no_linux_fails_closed(
    fresh_probe: None, monkeypatch: pytest.MonkeyPatch, problem: str
) -> None:
    if problem == "macos":
        monkeypatch.setattr(launcher.sys, "platform", "darwin")
    else:
        monkeypatch.setattr(launcher.shutil, "which", lambda name: None)
    with pytest.raises(SandboxUnavailable, match="enabled = false"):
        launcher.probe()


def test_allowed_env_passes_only_the_list_and_never_a_secret(home_path: Path) -> None:
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1").replace(
        "max_retries = 0", 'max_retries = 0\napi_key_env = "MY_PROVIDER"'
    )
    config += '[sandbox]\nenv = { PIP_INDEX_URL = "https://mirror.example", MY_PROVIDER = "x" }\n'
    home = make_home(home_path, config=config)
    environ = {
        "PATH": "/bin",
        "HOME": "/home/p",
        "LC_ALL": "C",
        "MY_PROVIDER": "sk-secret",
        "AWS_SECRET_ACCESS_KEY": "s",
        "SSH_AUTH_SOCK": "/run/agent",
        "LD_PRELOAD": "/evil.so",
    }
    env = allowed_env(home, home.main_bot, environ)
    assert env == {
        "PATH": "/bin",
        "HOME": "/home/p",
        "LC_ALL": "C",
        "PIP_INDEX_URL": "https://mirror.example",
    }


def test_policy_hides_the_home_vault_and_credentials_and_grants_bot_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    person = tmp_path / "person"
    monkeypatch.setenv("HOME", str(person))
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1")
    config += f'[trust]\nvault = "{tmp_path}/vault"\n[sandbox]\nhidden = ["~/private"]\n'
    home = make_home(person / ".atlas", config=config)
    with (home.main_bot.root / "bot.toml").open("a") as bot_toml:
        bot_toml.write('[sandbox]\nwritable = ["~/projects", "~/.atlas", "build"]\n')
    home = Home(home.root)
    policy = policy_for(home, home.main_bot, read_only=True)
    hidden = set(policy.hidden)
    assert {home.root.resolve(), (tmp_path / "vault").resolve(), person / ".ssh"} <= hidden
    assert {person / ".aws", person / ".config/gcloud", person / "private"} <= hidden
    # ~/.atlas holds Atlas's files; "build" lies in the workspace, writable already.
    assert policy.writable == ((person / "projects").resolve(),)
    # The person's home is emptied (only grants and Atlas's own programs come back).
    assert policy.read_only and person.resolve() in hidden


def test_the_hint_only_when_the_sandbox_stopped_it() -> None:
    inside = Launch("x", [], {}, Path("/"), sandboxed=True)
    outside = Launch("x", [], {}, Path("/"), sandboxed=False)
    blocked = "touch: cannot touch '/etc/x': Read-only file system\n[exit code 1]"
    assert with_hint(blocked, inside) == blocked + HINT
    assert with_hint(blocked, outside) == blocked
    assert with_hint("curl: (6) Could not resolve host: example.com", inside).endswith(HINT)
    assert with_hint("fine\n[exit code 0]", inside) == "fine\n[exit code 0]"
    hiding = Launch("x", [], {}, Path("/"), sandboxed=True, hidden=("/home/p/.ssh",))
    missing = "cat: /home/p/.ssh/id_rsa: No such file or directory\n[exit code 1]"
    assert with_hint(missing, hiding).endswith(HINT)
    run = Launch("x", [], {}, Path("/"), sandboxed=True, hidden=("/run", "/home/p/.history"))
    for own in ("/work/run.sh", "/home/p/.history_old", "/runner/x"):
        output = f"bash: {own}: No such file or directory\n[exit code 127]"
        assert with_hint(output, run) == output
    assert with_hint("ls: cannot access '/run/user': No such file or directory", run).endswith(HINT)
    assert with_hint("cat: nope: No such file or directory", hiding).endswith("directory")


async def test_domain_answers_are_kept_for_the_conversation(home: Home) -> None:
    run = run_context(home)
    questions: list[str] = []

    async def person(question: str, options: list[str]) -> str:
        questions.append(question)
        return options[0] if "yes.example" in question else options[1]

    assert await domain_asker(run)("nobody.example") is False  # nobody to ask: no
    run.ask = person
    ask = domain_asker(run)
    assert await ask("yes.example") and await ask("yes.example")
    assert not await ask("no.example") and not await ask("no.example")
    assert await domain_asker(run)("yes.example")  # a new command, the same conversation
    assert len(questions) == 3  # a yes is remembered; a no is asked again next time


def test_doctor_check_starts_a_real_sandbox() -> None:
    from atlas.sandbox.selfcheck import check_sandbox

    ok, detail = check_sandbox()
    assert ok, detail
    assert "writes contained, no network" in detail


def test_doctor_check_fails_where_no_sandbox_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    from atlas.sandbox import selfcheck

    def unavailable() -> Variant:
        raise SandboxUnavailable("bwrap (bubblewrap) is not installed; install it")

    monkeypatch.setattr(selfcheck, "probe", unavailable)
    assert selfcheck.check_sandbox() == (False, "bwrap (bubblewrap) is not installed; install it")


async def test_an_unanswered_domain_question_is_a_no(home_path: Path) -> None:
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1") + "[trust]\nask_timeout = 0.05\n"
    run = run_context(make_home(home_path, config=config))

    async def silent(question: str, options: list[str]) -> str:
        await asyncio.sleep(10)
        return options[0]

    run.ask = silent
    assert await domain_asker(run)("slow.example") is False
