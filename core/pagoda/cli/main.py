"""The ``pagoda`` command: subcommands from the core and from plugins (``register_commands``)."""

from __future__ import annotations

import argparse
import os
import sys

from typing import NoReturn

from pagoda import __version__, envs
from pagoda.errors import ConfigError, IncompatibleChoiceError, UnknownChoiceError
from pagoda.logs import LOG_FORMATS, configure_logging
from pagoda.plugins import manager as plugin_manager
from pagoda.plugins.names import OVERRIDES_FLAG


def common_options() -> argparse.ArgumentParser:
    """Flags every subcommand accepts (a parent parser)."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("plugins and logging")
    group.add_argument(
        "--plugins",
        metavar="NAMES",
        help=f"comma-separated plugins to load; all others stay unloaded (env {plugin_manager.ENV_ALLOW})",
    )
    group.add_argument(
        "--disable-plugins",
        metavar="NAMES",
        help=f"comma-separated plugins not to load, though installed (env {plugin_manager.ENV_BLOCK})",
    )
    group.add_argument(
        OVERRIDES_FLAG,
        metavar="NAMES",
        help="comma-separated registered names (NAME or KIND:NAME, e.g. scheduler:fcfs) that an installed plugin may "
        "take over from the built-in, first-party or first plugin they belong to; without it such a registration is "
        f"refused and shown by `pagoda plugins` (env {plugin_manager.ENV_OVERRIDES})",
    )
    group.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"], help="logging verbosity"
    )
    group.add_argument(
        "--log-format", default=None, choices=LOG_FORMATS,
        help=f"log lines as text (default) or one JSON object a line, in every process of the command (env "
        f"{envs.LOG_FORMAT.name})",
    )
    return parent


class Parser(argparse.ArgumentParser):
    """Usage errors as one line naming the command, the flag and the reason (exit status 2); every
    subcommand's parser, plugins' included, is of this class."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _preparse(argv: list[str]) -> argparse.Namespace:
    """Read the plugin switches before the parser is built: choices come from the loaded plugins."""
    known, _ = common_options().parse_known_args(argv)
    return known


def build_parser(manager: plugin_manager.PluginManager) -> argparse.ArgumentParser:
    from pagoda.cli import plugins_cmd

    parser = Parser(prog="pagoda", description="Pagoda: LLM inference and serving, built from plugins.")
    parser.add_argument("--version", action="version", version=f"pagoda {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    parent = common_options()
    plugins_cmd.add_parser(subparsers, parent)
    for module in _core_command_modules():
        module.add_parser(subparsers, parent)
    manager.extra_commands(subparsers)
    return parser


CORE_COMMANDS = ("generate_cmd", "chat_cmd", "bench_cmd", "serve_cmd", "run_batch_cmd", "router_cmd")


def _core_command_modules() -> list:
    """Core subcommands beyond ``plugins`` (each module exposes ``add_parser(subparsers, parent)``)."""
    import importlib

    return [importlib.import_module(f"pagoda.cli.{name}") for name in CORE_COMMANDS]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    early = _preparse(argv)
    if early.log_format is not None:  # also for the processes this command starts
        os.environ[envs.LOG_FORMAT.name] = early.log_format
    try:
        configure_logging(early.log_level)
    except envs.EnvVarError as exc:
        print(f"pagoda: error: {exc}", file=sys.stderr)
        return 2
    try:
        manager = plugin_manager.configure(early.plugins, early.disable_plugins, early.allow_plugin_overrides)
    except ValueError as exc:  # a malformed --allow-plugin-overrides
        print(f"pagoda: error: {exc}", file=sys.stderr)
        return 2
    parser = build_parser(manager)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (UnknownChoiceError, IncompatibleChoiceError, ConfigError) as exc:  # a choice no command checked first
        print(f"pagoda {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
