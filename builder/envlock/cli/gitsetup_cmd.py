"""``envlock git-setup``: keep the store out of git; make ``git diff`` read locks per package.

Appends to the workspace's ``.gitignore`` the artifact store (``/store/``:
tens of MB of wheels a lock names by sha256, fetched again on demand) and
envlock's per-venv state directories (``*.envlock/``, for venvs kept inside
the workspace); appends ``locks/*.toml diff=envlock`` and
``locks/*.files.tsv diff=envlock`` to ``.gitattributes``. A line that is
already there is left alone, so running it twice changes nothing. Sets
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
from pathlib import Path
from typing import Any

from envlock.cli.commands import summary
from envlock.errors import EnvlockError, ExitCode
from envlock.render import envelope
from envlock.workspace import open_workspace

ATTRIBUTES = ("locks/*.toml diff=envlock", "locks/*.files.tsv diff=envlock")
IGNORES = ("/store/", "*.envlock/")


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "git-setup",
        parents=[common],
        help=summary("git-setup"),
        description=f"Add {', '.join(IGNORES)} to .gitignore and {', '.join(ATTRIBUTES)} to "
        ".gitattributes, and set git config diff.envlock.textconv to `envlock show --textconv` "
        "in this repository.",
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


def _append_missing(path: Path, lines: tuple[str, ...]) -> list[str]:
    """Append the lines ``path`` lacks (compared line by line); return those appended."""
    try:
        text = path.read_text(encoding="utf-8") if path.exists() else ""
    except OSError as exc:
        raise EnvlockError(f"{path}: cannot read: {exc.strerror}") from exc
    present = {line.strip() for line in text.splitlines()}
    missing = [line for line in lines if line not in present]
    if missing:
        sep = "" if not text or text.endswith("\n") else "\n"
        try:
            path.write_text(text + sep + "".join(line + "\n" for line in missing), encoding="utf-8")
        except OSError as exc:
            raise EnvlockError(f"{path}: cannot write: {exc.strerror}") from exc
    return missing


def run(args: argparse.Namespace) -> int:
    workspace = open_workspace(args.root)
    root = str(workspace.root)
    inside = subprocess.run(
        ["git", "-C", root, "rev-parse", "--is-inside-work-tree"], capture_output=True, text=True
    )
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        raise EnvlockError(f"{root}: not inside a git work tree (run `git init` first)")
    ignore_added = _append_missing(workspace.root / ".gitignore", IGNORES)
    attributes_added = _append_missing(workspace.root / ".gitattributes", ATTRIBUTES)
    command = args.textconv_command or default_command()
    _git(root, "config", "diff.envlock.textconv", command)
    _git(root, "config", "diff.envlock.cachetextconv", "true")
    if args.format == "json":
        payload = {
            "gitignore": {"path": str(workspace.root / ".gitignore"), "added": ignore_added},
            "gitattributes": {"path": str(workspace.root / ".gitattributes"), "added": attributes_added},
            "textconv": command,
        }
        print(envelope("git-setup", True, {"result": payload}))
    else:
        for name, lines, added in (
            (".gitignore", IGNORES, ignore_added),
            (".gitattributes", ATTRIBUTES, attributes_added),
        ):
            for line in lines:
                print(f"{name}: {line} ({'added' if line in added else 'already there'})")
        print(f"git config diff.envlock.textconv {shlex.quote(command)}")
    return int(ExitCode.OK)
