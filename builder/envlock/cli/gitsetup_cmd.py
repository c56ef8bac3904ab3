"""``envlock git-setup``: make ``git diff`` show locks one line per package.

Writes ``locks/*.toml diff=envlock`` to the workspace's ``.gitattributes``
(a line that is already there is left alone) and sets
``diff.envlock.textconv`` in the repository's own config (not the user's,
so other repositories are untouched). ``cachetextconv`` lets git keep the
converted text per blob, so a long log with ``-p`` converts each lock once.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
from typing import Any

from envlock.cli.commands import summary
from envlock.errors import EnvlockError, ExitCode
from envlock.render import envelope
from envlock.workspace import open_workspace

ATTRIBUTE = "locks/*.toml diff=envlock"


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "git-setup",
        parents=[common],
        help=summary("git-setup"),
        description=f"Add `{ATTRIBUTE}` to .gitattributes and set git config diff.envlock.textconv "
        "to `envlock show --textconv` in this repository.",
    )
    p.add_argument("--command", dest="textconv_command", metavar="CMD", help="textconv command to configure")
    p.set_defaults(run=run)


def default_command() -> str:
    if shutil.which("envlock"):
        return "envlock show --textconv"
    return f"{shlex.quote(sys.executable)} -m envlock show --textconv"


def _git(root: str, *args: str) -> None:
    proc = subprocess.run(["git", "-C", root, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise EnvlockError(f"git {' '.join(args)}: {proc.stderr.strip() or f'exit {proc.returncode}'}")


def run(args: argparse.Namespace) -> int:
    workspace = open_workspace(args.root)
    root = str(workspace.root)
    inside = subprocess.run(
        ["git", "-C", root, "rev-parse", "--is-inside-work-tree"], capture_output=True, text=True
    )
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        raise EnvlockError(f"{root}: not inside a git work tree (run `git init` first)")
    attributes = workspace.root / ".gitattributes"
    try:
        text = attributes.read_text(encoding="utf-8") if attributes.exists() else ""
    except OSError as exc:
        raise EnvlockError(f"{attributes}: cannot read: {exc.strerror}") from exc
    added = ATTRIBUTE not in text.splitlines()
    if added:
        attributes.write_text(
            text + ("" if not text or text.endswith("\n") else "\n") + ATTRIBUTE + "\n", encoding="utf-8"
        )
    command = args.textconv_command or default_command()
    _git(root, "config", "diff.envlock.textconv", command)
    _git(root, "config", "diff.envlock.cachetextconv", "true")
    if args.format == "json":
        payload = {"gitattributes": str(attributes), "added": added, "textconv": command}
        print(envelope("git-setup", True, {"result": payload}))
    else:
        state = "added" if added else "already there"
        print(f".gitattributes: {ATTRIBUTE} ({state})")
        print(f"git config diff.envlock.textconv {shlex.quote(command)}")
    return int(ExitCode.OK)
