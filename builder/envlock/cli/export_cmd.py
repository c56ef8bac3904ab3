"""``envlock export HOST --format requirements``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from envlock.cli.commands import summary
from envlock.errors import ExitCode
from envlock.export import to_requirements
from envlock.lock.io import atomic_write, read_lock
from envlock.render import envelope
from envlock.workspace import open_workspace

# text and requirements are the same thing: the requirements file (requirements is
# the name export took first); json wraps it in the envelope every command prints.
FORMATS = ("text", "requirements", "json")


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "export",
        parents=[common],
        help=summary("export"),
        description="Write the pins of locks/pylock.<host>.toml as a hash-pinned requirements "
        "file for pip --require-hashes and pip-sync (pip-tools). --format json prints the "
        "same text inside the JSON envelope.",
    )
    p.add_argument("host", help="host name whose lock to export")
    p.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    workspace = open_workspace(args.root)
    path = workspace.lock_path(args.host)
    lock = read_lock(path, shown=workspace.shown(path))
    text = to_requirements(lock, path.parent)
    if args.output:
        from pathlib import Path

        atomic_write(Path(args.output), text.encode("utf-8"))
    if args.format == "json":
        result = {
            "host": lock.host,
            "lock": workspace.shown(path),
            "format": "requirements",
            "packages": len(lock.packages),
            "output": args.output,
            "text": text,
        }
        print(envelope("export", True, {"result": result}))
    elif not args.output:
        sys.stdout.write(text)
    return int(ExitCode.OK)
