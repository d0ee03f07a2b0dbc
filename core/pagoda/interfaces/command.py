"""Command: a ``pagoda`` subcommand that a plugin adds (hook ``register_commands``).

The hook receives argparse's subparsers of the ``pagoda`` command. A :class:`Command` subclass
declares its name and arguments and what it does; :meth:`Command.add_to` adds it::

    @hookimpl
    def register_commands(subparsers):
        MyCommand.add_to(subparsers)   # `pagoda my-command ...` now runs MyCommand().run(args)
"""

from __future__ import annotations

import argparse
from abc import ABC, abstractmethod
from typing import Any, ClassVar


class Command(ABC):
    """One subcommand: ``pagoda <name> ...`` parses its arguments, then calls :meth:`run`."""

    name: ClassVar[str]  # the subcommand, e.g. "my-command": lowercase words joined by dashes
    help: ClassVar[str] = ""  # one line, shown by `pagoda --help`
    description: ClassVar[str] = ""  # shown by `pagoda <name> --help` (default: help)

    @abstractmethod
    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Declare the subcommand's arguments on ``parser``."""

    @abstractmethod
    def run(self, args: argparse.Namespace) -> int:
        """Do the work; return the exit status (0: success; 2: bad arguments, after a one-line
        reason on stderr)."""

    @classmethod
    def add_to(cls, subparsers: Any) -> argparse.ArgumentParser:
        """Add the subcommand to ``subparsers`` (what ``register_commands`` receives); returns its parser."""
        command = cls()
        parser = subparsers.add_parser(cls.name, help=cls.help, description=cls.description or cls.help)
        command.add_arguments(parser)
        parser.set_defaults(func=command.run)
        return parser
