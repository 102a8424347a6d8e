"""The `atlas` command. Heavy modules are imported inside each command so `--help` is instant."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from atlas.errors import AtlasError
from atlas.process import pause_collection_while_starting, run, setup_logging


def _home_path(args: argparse.Namespace) -> Path:
    from atlas.home import default_home

    return Path(args.home).expanduser() if args.home else default_home()


def _load_home(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from atlas.home import Home

    return Home(_home_path(args))


def cmd_init(args: argparse.Namespace) -> int:
    from atlas.home import init_home

    root = _home_path(args)
    created = init_home(root)
    for path in created:
        print(f"created {path}")
    from atlas.migrate_profile import migrate_home

    for line in migrate_home(root):  # an older home: the shared USER.md, the main's skills
        print(line)
    from atlas.dashboard.auth import ensure_secret, secret_path

    if ensure_secret(root):  # signs the dashboard's sessions; never in config.toml
        print(f"created {secret_path(root)} (the dashboard's secret, readable by you only)")
    print(f"home ready at {root}" + ("" if created else " (nothing to create: every file exists)"))
    config = root / "config.toml"
    home_flag = "" if args.home is None else f" --home {args.home}"
    print(
        f"next: in {config}, pick the model and its [providers] table (uncomment base_url for "
        "a server of your own); put the key in the environment variable its api_key_env "
        f"names (OPENAI_API_KEY by default); then `atlas chat{home_flag}`"
    )
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    pause_collection_while_starting()  # until the daemon is up
    home = _load_home(args)  # first: a broken config fails at once, before the slow imports
    if args.listen is not None:
        from atlas.config import DashboardSettings

        # This process's dashboard address (several nodes of one home on one machine).
        dashboard = home.settings.dashboard.model_dump() | {"listen": args.listen}
        home.settings = home.settings.model_copy(
            update={"dashboard": DashboardSettings.model_validate(dashboard)}
        )
    if args.node is not None:
        from atlas.daemon import check_node

        check_node(home, args.node)  # a home on PostgreSQL, a good name: else stop here
    from atlas.daemon import prepare, serve

    start = prepare(home, fork=True)  # before the event loop: workers are forked here
    run(serve(home, start=start, node=args.node))
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    home = _load_home(args)
    home.bot(args.bot)  # an unknown bot fails here, before the slow imports
    from atlas.chat import chat
    from atlas.start_checks import check_before_chat

    # Damage, a read-only home, an unknown tool name: named before a turn meets them, as
    # `atlas run` and doctor name them.
    check_before_chat(home)

    return run(chat(home, args.bot, chat_name=args.chat, stream=not args.no_stream))


def cmd_doctor(args: argparse.Namespace) -> int:
    from atlas.doctor import doctor

    return asyncio.run(doctor(_home_path(args), offline=args.offline))


def cmd_tool(args: argparse.Namespace) -> int:
    home = _load_home(args)
    home.bot(args.bot)  # an unknown bot fails here, before the slow imports
    from atlas.chat import run_one_tool

    return asyncio.run(run_one_tool(home, args.bot, args.name, args.json_args))


def cmd_trust_check(args: argparse.Namespace) -> int:
    from atlas.home import Home
    from atlas.trust.check import check_main

    # `trust check --home DIR -- CMD`: its own --home (the last before `--`) names the home.
    given = _option_before_dashes(args.check_args, "--home")
    root = Path(given).expanduser() if given else _home_path(args)
    # The home's deny list counts when there is a home; the rules work without one.
    deny = Home(root).settings.trust.deny if (root / "config.toml").exists() else []
    return check_main(["--home", str(root), *args.check_args], deny=deny)


def _option_before_dashes(argv: list[str], option: str) -> str | None:
    """The value of the last `option VALUE` or `option=VALUE` before a `--`, if any."""
    words = argv[: argv.index("--")] if "--" in argv else argv
    found = None
    for index, word in enumerate(words):
        if word == option and index + 1 < len(words):
            found = words[index + 1]
        elif word.startswith(option + "="):
            found = word.split("=", 1)[1]
    return found


def cmd_trust_log(args: argparse.Namespace) -> int:
    from atlas.trust.audit_cli import print_log

    return asyncio.run(print_log(_load_home(args), limit=args.limit, as_json=args.json))


def cmd_skills_import(args: argparse.Namespace) -> int:
    from atlas.skills.claude_code import import_skill
    from atlas.skills.library import SkillError

    home = _load_home(args)
    dest = home.bot(args.bot).skills_dir if args.bot else home.skills_dir
    try:
        report = import_skill(Path(args.path).expanduser(), dest, replace=args.replace)
    except SkillError as exc:
        print(f"atlas: {exc}", file=sys.stderr)
        return 1
    print(report.summary())
    return 0


def cmd_budget(args: argparse.Namespace) -> int:
    from atlas.agent.budget import measure, render
    from atlas.tools.catalog import default_registry
    from atlas.tools.registry import RunContext

    home = _load_home(args)
    run = RunContext(home=home, bot=home.bot(args.bot), conversation_id=0)
    print(render(measure(run, default_registry())))
    return 0


def cmd_tools(args: argparse.Namespace) -> int:
    import json

    from atlas.tools.catalog import default_registry
    from atlas.tools.verdicts import render_verdicts, tool_verdicts, verdicts_json

    home = _load_home(args)
    bot = home.bot(args.bot)
    verdicts = tool_verdicts(home, bot, args.kind, default_registry())
    if args.json:
        print(json.dumps(verdicts_json(verdicts), indent=2))
    else:
        print(render_verdicts(bot, args.kind, verdicts))
    return 0


def cmd_pairing(args: argparse.Namespace) -> int:
    from atlas.channels.pairing_cli import run_pairing

    return run_pairing(_load_home(args), args)


def cmd_dashboard(args: argparse.Namespace) -> int:
    from atlas.dashboard.cli import dashboard_main

    return dashboard_main(_load_home(args), log_out_everyone=args.log_out_everyone)


def cmd_search(args: argparse.Namespace) -> int:
    from atlas.search_cli import search_main
    from atlas.start_checks import check_databases

    home = _load_home(args)
    check_databases(home)
    return asyncio.run(search_main(home, args.query, args.bot, args.json))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="atlas", description="A self-hosted home of agent bots.")
    parser.add_argument("--home", help=HOME_HELP)
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sub.add_parser("init", help="make a home from the examples (never overwrites)").set_defaults(
        func=cmd_init
    )
    run_parser = sub.add_parser("run", help="run the daemon in the foreground")
    run_parser.add_argument(
        "--node",
        metavar="NAME",
        help="run as one node of a home on PostgreSQL ([store] url): serve the bots whose "
        "leases this node holds (docs/scaling.md)",
    )
    run_parser.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="where this process's dashboard listens (overrides [dashboard] listen)",
    )
    run_parser.set_defaults(func=cmd_run)

    chat = sub.add_parser("chat", help="talk to a bot in the terminal")
    chat.add_argument("--bot", help="the bot (default: the main agent)")
    chat.add_argument("--chat", help="resume the named terminal conversation (default: a new one)")
    chat.add_argument("--no-stream", action="store_true", help="print replies whole")
    chat.set_defaults(func=cmd_chat)

    doctor = sub.add_parser(
        "doctor", help="check the home, config, provider, rg, the sandbox and optional parts"
    )
    doctor.add_argument("--offline", action="store_true", help="skip the provider call")
    doctor.set_defaults(func=cmd_doctor)

    tool = sub.add_parser("tool", help="run one tool as a bot would, through the gate")
    tool.add_argument("name", help="the tool's name, e.g. read_file")
    tool.add_argument(
        "json_args", nargs="?", default="{}", help='arguments as JSON, e.g. \'{"path": "x"}\''
    )
    tool.add_argument("--bot", help="the bot (default: the main agent)")
    tool.set_defaults(func=cmd_tool)

    trust = sub.add_parser("trust", help="the approval gate: check a command, read the record")
    trust_sub = trust.add_subparsers(dest="trust_command", required=True, metavar="ACTION")
    check = trust_sub.add_parser(
        "check", add_help=False, help="the verdict on a command, nothing run: trust check -- CMD"
    )
    check.add_argument("check_args", nargs=argparse.REMAINDER)
    check.set_defaults(func=cmd_trust_check)
    log = trust_sub.add_parser("log", help="the latest gate decisions")
    log.add_argument("--limit", type=int, default=20, help="how many (default 20)")
    log.add_argument("--json", action="store_true", help="one JSON object per line")
    log.set_defaults(func=cmd_trust_log)

    budget = sub.add_parser("budget", help="the fixed token cost of every request, by part")
    budget.add_argument("--bot", help="the bot (default: the main agent)")
    budget.set_defaults(func=cmd_budget)

    tools = sub.add_parser("tools", help="every tool: offered, deferred or not offered, and why")
    tools.add_argument("--bot", help="the bot (default: the main agent)")
    tools.add_argument(
        "--kind",
        default="conversation",
        choices=["conversation", "bot", "routine", "subagent"],
        help="the kind of run (default: conversation)",
    )
    tools.add_argument("--json", action="store_true", help="print a JSON list")
    tools.set_defaults(func=cmd_tools)

    dashboard = sub.add_parser(
        "dashboard", help="print a one-time login link to the web dashboard `atlas run` serves"
    )
    dashboard.add_argument(
        "--log-out-everyone", action="store_true", help="end every session first (a new secret)"
    )
    dashboard.set_defaults(func=cmd_dashboard)

    search = sub.add_parser("search", help="search past conversations (every bot's, or one bot's)")
    search.add_argument("query", help="the words to find (all required; accents ignored)")
    search.add_argument("--bot", help="only this bot's conversations")
    search.add_argument("--json", action="store_true", help="print one JSON object")
    search.set_defaults(func=cmd_search)

    from atlas.channels.pairing_cli import add_parser as add_pairing_parser

    add_pairing_parser(sub).set_defaults(func=cmd_pairing)

    from atlas.routines.cli import add_routines_parser

    add_routines_parser(sub)

    from atlas.store_cli import add_store_parser

    add_store_parser(sub, _load_home)  # `atlas store migrate --to postgresql://…`

    from atlas.executors.plugin_install import add_executors_parser

    add_executors_parser(sub)  # `atlas executors install-plugin` (the Claude Code plugin)

    from atlas.plugins_cli import add_plugins_parser

    add_plugins_parser(sub)  # `atlas plugins`: installed plugins, SDK versions, enabled or not

    skills = sub.add_parser("skills", help="the skill library")
    skills_sub = skills.add_subparsers(dest="skills_command", required=True, metavar="ACTION")
    imp = skills_sub.add_parser("import", help="copy a skill folder in (Claude Code skills work)")
    imp.add_argument("path", help="the skill's folder (holding SKILL.md)")
    imp.add_argument("--bot", help="into this bot's own skills (default: the home's library)")
    imp.add_argument("--replace", action="store_true", help="replace a skill of the same name")
    imp.set_defaults(func=cmd_skills_import)
    _accept_home_anywhere(parser)
    return parser


HOME_HELP = "the home folder (default: $ATLAS_HOME or ~/.atlas)"


def _accept_home_anywhere(parser: argparse.ArgumentParser) -> None:
    """`atlas init --home DIR` as well as `atlas --home DIR init`: every subcommand takes
    `--home` too. Its default is SUPPRESS, so when it is not given there the value before the
    subcommand stands. (`trust check` hands its options on untouched: it has its own.)"""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for sub in set(action.choices.values()):
            if sub.get_default("func") is cmd_trust_check:
                continue
            if "--home" not in sub._option_string_actions:
                sub.add_argument("--home", default=argparse.SUPPRESS, help=HOME_HELP)
            _accept_home_anywhere(sub)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # `trust check` passes its own options and a raw command through untouched; argparse
    # would take them for ours, so they arrive as unknown arguments and are handed over.
    args, unknown = parser.parse_known_args(argv)
    if unknown and args.func is not cmd_trust_check:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.func is cmd_trust_check:
        args.check_args = unknown + args.check_args
    level = (
        logging.DEBUG
        if args.verbose
        else (logging.INFO if args.command == "run" else logging.WARNING)
    )
    setup_logging(level)
    try:
        return args.func(args)
    except AtlasError as exc:
        print(f"atlas: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
