"""``envlock bundle HOST -o FILE``: one file an air-gapped host is applied from."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from envlock.cli.commands import summary
from envlock.errors import ExitCode
from envlock.render import envelope, human_size, plural
from envlock.workspace import open_workspace


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "bundle",
        parents=[common],
        help=summary("bundle"),
        description="Write one file holding everything `envlock apply HOST` needs: the lock and its "
        "manifest, every artifact (fetched and sha256-checked first), and the uv the host installs "
        "with, listed with their sha256s. `envlock apply HOST --from FILE` installs it with no network.",
    )
    p.add_argument("host", help="host name: hosts/<host>.toml and locks/pylock.<host>.toml")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="the bundle to write (a tar)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from envlock.airgap import write_bundle  # imported late: `envlock --help` stays fast

    workspace = open_workspace(args.root)
    written = write_bundle(workspace, args.host, Path(args.output))
    if args.format == "json":
        result = {
            "host": written.host,
            "output": str(written.path),
            "digest": written.digest,
            "members": written.members,
            "bytes": written.bytes,
        }
        print(envelope("bundle", True, {"result": result}))
    else:
        print(
            f"{written.path}: {plural(written.members, 'member')}, {human_size(written.bytes)}; "
            f"apply it with `envlock apply {written.host} --from {written.path}`"
        )
    return int(ExitCode.OK)
