"""Command line: parse arguments, call a command function, render its result.

Each subcommand lives in its own module with ``add_parser`` and ``run``;
only this layer prints and picks exit codes (0 ok, 1 findings, 2 could not run).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from envlock import __version__
from envlock.cli.commands import COMMANDS
from envlock.errors import EnvlockError, ExitCode
from envlock.render import envelope


def _chosen(argv: Sequence[str]) -> str | None:
    """The command named in ``argv``: the first word that is not an option."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The full parser of ``command``; without one, just the command list (nothing imported)."""
    parser = argparse.ArgumentParser(
        prog="envlock",
        description="Lock, rebuild and check GPU Python venvs byte for byte.",
        epilog="Exit codes: 0 success, 1 findings, 2 could not run.",
    )
    parser.add_argument("--version", action="version", version=f"envlock {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--root", metavar="DIR", help="workspace holding hosts/ and locks/ (default: .)")
    common.add_argument("--format", choices=("text", "json"), default="text", help="output format")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    if command is None:
        for name, (_module, summary) in COMMANDS.items():
            sub.add_parser(name, help=summary)
    else:
        module = importlib.import_module(f"envlock.cli.{COMMANDS[command][0]}")
        module.add_parser(sub, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_chosen(words))
    args = parser.parse_args(words)
    if not getattr(args, "command", None) or not hasattr(args, "run"):
        parser.print_help()
        return int(ExitCode.COULD_NOT_RUN)
    try:
        return int(args.run(args))
    except EnvlockError as exc:
        if getattr(args, "format", "text") == "json":
            print(envelope(args.command, False, {"error": str(exc)}))
        print(f"envlock: error: {exc}", file=sys.stderr)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        print("envlock: interrupted", file=sys.stderr)
        return 130
