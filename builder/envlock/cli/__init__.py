"""Command line: parse arguments, call a command function, render its result.

Each subcommand lives in its own module with ``add_parser`` and ``run``;
only this layer prints and picks exit codes (0 ok, 1 findings, 2 could not run).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from envlock import __version__
from envlock.cli import apply_cmd, capture_cmd, export_cmd
from envlock.cli.render import envelope
from envlock.errors import EnvlockError, ExitCode

COMMANDS = (capture_cmd, export_cmd, apply_cmd)


def build_parser() -> argparse.ArgumentParser:
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
    for module in COMMANDS:
        module.add_parser(sub, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
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
