"""Command line: parse arguments, call a command function, render its result.

Each subcommand lives in its own module with ``add_parser`` and ``run``;
only this layer prints and picks exit codes (0 ok, 1 findings, 2 could not run).

The global options (``--root``, ``--format``, ``-v``/``-q``, ``--no-color``) are
accepted before the subcommand and after it, as git's and uv's are: the main
parser holds their defaults, each subcommand repeats them with no default, so
a value given after the subcommand wins and one given before it is kept.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import threading
from collections.abc import Sequence
from typing import Any, NoReturn

from envlock import __version__
from envlock.cli.commands import COMMANDS
from envlock.errors import EnvlockError, ExitCode
from envlock.render import color_wanted, envelope, error_code, set_color

# --format's choices unless a command module says otherwise (its FORMATS)
DEFAULT_FORMATS = ("text", "json")
# global options that take a value: the word after them is not the command
_VALUED = ("--root", "--format")


class UsageError(EnvlockError):
    """The command line itself is wrong (argparse's complaint), exit 2."""

    def __init__(self, message: str, usage: str) -> None:
        super().__init__(message)
        self.usage = usage


def _terminal_width() -> int:
    """What ``shutil.get_terminal_size`` answers (COLUMNS, the terminal, else 80), without shutil.

    argparse imports shutil (and with it bz2 and lzma) for this number on
    every ``add_argument``; every command's start-up paid for it.
    """
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 80
    return (columns or 80) - 2


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is raised, so ``main`` can answer it in JSON too."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{self.prog} --help`)", usage=self.format_usage())

    def _get_formatter(self) -> argparse.HelpFormatter:
        return self.formatter_class(prog=self.prog, width=_terminal_width())  # type: ignore[call-arg]


def _chosen(argv: Sequence[str]) -> str | None:
    """The command named in ``argv``: the first word that is neither an option nor an option's value."""
    words = iter(argv)
    for word in words:
        if word in _VALUED:
            next(words, None)
        elif not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def _wants_json(argv: Sequence[str]) -> bool:
    """Was ``--format json`` asked for (read before parsing, for errors parsing itself raises)?"""
    words = list(argv)
    for i, word in enumerate(words):
        if word == "--format=json" or (word == "--format" and words[i + 1 : i + 2] == ["json"]):
            return True
    return False


def _global_options(parser: argparse.ArgumentParser, formats: Sequence[str], defaults: bool) -> None:
    """The options every command takes; ``defaults=False`` leaves unset what was not given."""

    def default(value: Any) -> Any:
        return value if defaults else argparse.SUPPRESS

    parser.add_argument(
        "--root",
        metavar="DIR",
        default=default(None),
        help="workspace holding hosts/ and locks/ (default: the nearest directory holding hosts/, "
        "from the current one up)",
    )
    parser.add_argument(
        "--format", choices=formats, default=default("text"), help="output format (default: text)"
    )
    parser.add_argument(
        "-v", "--verbose", action="count", default=default(0), help="say more (list everything)"
    )
    parser.add_argument(
        "-q", "--quiet", action="count", default=default(0), help="say less (no progress, no steps)"
    )
    parser.add_argument(
        "--no-color",
        action="store_true",
        default=default(False),
        help="no terminal styling (also: NO_COLOR set, or output not a terminal)",
    )


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The full parser of ``command``; without one, just the command list (nothing imported)."""
    module = importlib.import_module(f"envlock.cli.{COMMANDS[command][0]}") if command else None
    formats = tuple(getattr(module, "FORMATS", DEFAULT_FORMATS))
    parser = _Parser(
        prog="envlock",
        description="Lock, rebuild and check GPU Python venvs byte for byte.",
        epilog="Exit codes: 0 success, 1 findings, 2 could not run. "
        "--format json prints one versioned envelope (docs/json.md).",
    )
    parser.add_argument("--version", action="version", version=f"envlock {__version__}")
    _global_options(parser, formats, defaults=True)
    common = _Parser(add_help=False)
    _global_options(common, formats, defaults=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    if module is None:
        for name, (_module, summary) in COMMANDS.items():
            sub.add_parser(name, help=summary)
    else:
        module.add_parser(sub, common)
    return parser


def command_names() -> list[str]:
    """Every command, as the parser lists them (the JSON contract test walks this)."""
    parser = build_parser()
    for action in parser._actions:  # argparse keeps its subcommands here and nowhere public
        if isinstance(action, argparse._SubParsersAction):
            return list(action.choices)
    return []


# C0 controls but tab and newline, DEL and C1: an error can quote a server's words (an HTTP
# reason phrase, a host's stderr), and ESC sequences there would drive the user's terminal.
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0))}


def _fail(command: str, exc: EnvlockError, json_out: bool) -> int:
    if json_out:
        error = {"message": str(exc), "code": error_code(exc)}
        print(envelope(command, False, {"error": error}))  # JSON escapes control characters itself
    print(f"envlock: error: {str(exc).translate(_CONTROLS)}", file=sys.stderr)
    return int(exc.exit_code)


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    command = _chosen(words)
    try:
        parser = build_parser(command)
        args = parser.parse_args(words)
    except UsageError as exc:
        print(exc.usage, end="", file=sys.stderr)
        return _fail(command or "envlock", exc, _wants_json(words))
    if not getattr(args, "command", None) or not hasattr(args, "run"):
        if args.format == "json":
            return _fail("envlock", UsageError("no command given (see `envlock --help`)", ""), True)
        parser.print_help()
        return int(ExitCode.COULD_NOT_RUN)
    set_color(color_wanted(sys.stdout, args.no_color))
    try:
        return int(args.run(args))
    except EnvlockError as exc:
        return _fail(args.command, exc, args.format == "json")
    except KeyboardInterrupt as exc:
        detail = str(exc)  # a fleet run says which hosts were running (envlock.fleet.FleetInterrupted)
        print(f"envlock: interrupted{'; ' + detail if detail else ''}", file=sys.stderr)
        if threading.active_count() > 1:
            # Hosts' threads may wait on agents that go on without us: leave now, not when they end.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(130)
        return 130
