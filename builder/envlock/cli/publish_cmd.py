"""``envlock publish HOST``."""

from __future__ import annotations

import argparse
from typing import Any

from envlock.cli.commands import summary
from envlock.cli.progress import ProgressBar
from envlock.errors import ExitCode
from envlock.publish import PublishOptions, PublishResult, publish
from envlock.render import envelope, human_size, plural, table
from envlock.reporter import Reporter
from envlock.workspace import open_workspace

_SAID = {
    "upload": "would upload",
    "uploaded": "uploaded",
    "present": "on the index",
    "published": "published before",
    "kept": "kept in the store",
}


class _Reporter(Reporter):
    """The upload bar, and each step on a line of its own (as capture's: on a terminal, or -v)."""

    def __init__(self, text: bool, quiet: bool, verbose: bool) -> None:
        self.bar = ProgressBar("upload", enabled=False if quiet or not text else None)
        self.text = text and not quiet
        self.verbose = verbose

    def step(self, message: str) -> None:
        self.bar.close()
        if self.text and (self.bar.enabled or self.verbose):
            print(f"• {message}", flush=True)

    def progress(self, phase: str, done: int, total: int, detail: str) -> None:
        if phase == "upload":
            self.bar.update(done, total, detail)


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "publish",
        parents=[common],
        help=summary("publish"),
        description="Upload the wheels of locks/pylock.<host>.toml that only this workspace has "
        "(repacked, store, and direct file:// wheels) to a private index with the upload API twine "
        'and uv publish speak, then point those lock entries at the index (source = "published", '
        "the original source kept as published-from), so the lock installs with `uv pip sync` "
        "wherever the index is reachable. Files the index already holds are not uploaded again; "
        "other bytes under the same name are refused. Credentials: --username/--password or "
        "--token, else UV_PUBLISH_TOKEN, UV_PUBLISH_USERNAME/UV_PUBLISH_PASSWORD, "
        "TWINE_USERNAME/TWINE_PASSWORD, ~/.pypirc. Exit 0 published (or nothing to do), "
        "2 could not run. See docs/publish.md.",
    )
    p.add_argument("host", help="host name whose lock to publish: locks/pylock.<host>.toml")
    p.add_argument(
        "--index",
        metavar="URL",
        help="upload URL of the index (devpi: http://host/user/index/); default: [publish] index "
        "in envlock.toml",
    )
    p.add_argument(
        "--check-url",
        metavar="URL",
        help="the index's simple URL, when it is neither <index>/+simple/ (devpi) nor <index>/simple/",
    )
    p.add_argument("--username", "-u", help="user name on the index")
    p.add_argument("--password", "-p", help="password (prefer UV_PUBLISH_PASSWORD or TWINE_PASSWORD)")
    p.add_argument("--token", "-t", help="API token, sent as user __token__ (prefer UV_PUBLISH_TOKEN)")
    p.add_argument("--dry-run", action="store_true", help="list what would be uploaded; change nothing")
    p.add_argument(
        "--include-editable",
        action="store_true",
        help="publish editable installs too (their wheel is a .pth pointing at the reference's source tree)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    workspace = open_workspace(args.root)
    options = PublishOptions(
        index=args.index,
        check_url=args.check_url,
        username=args.username,
        password=args.password,
        token=args.token,
        dry_run=args.dry_run,
        include_editable=args.include_editable,
    )
    reporter = _Reporter(text=args.format == "text", quiet=args.quiet, verbose=args.verbose)
    try:
        result = publish(workspace, args.host, options, reporter)
    finally:
        reporter.bar.close()
    shown = workspace.shown(result.lock_path)
    if args.format == "json":
        print(envelope("publish", True, {"result": result_json(result, shown)}))
    else:
        print(render_text(result, shown))
    return int(ExitCode.OK)


def result_json(result: PublishResult, shown: str) -> dict[str, Any]:
    return {
        "host": result.host,
        "lock": shown,
        "index": result.index,
        "simple": result.simple,
        "credentials": result.credentials,
        "dry_run": result.dry_run,
        "written": result.written,
        "uploaded": result.count("uploaded"),
        "would_upload": result.count("upload"),
        "present": result.count("present"),
        "wheels": [
            {
                "name": w.name,
                "version": w.version,
                "filename": w.filename,
                "sha256": w.sha256,
                "size": w.size,
                "source": w.source,
                "action": w.action,
                "url": w.url,
                "reason": w.reason,
            }
            for w in result.wheels
        ],
    }


def render_text(result: PublishResult, shown: str) -> str:
    if not result.wheels:
        return f"{result.host}: nothing to publish ({shown} names no repacked, store or local wheel)"
    rows = [
        [w.name, w.version, w.source, human_size(w.size) if w.size is not None else "-", _SAID[w.action]]
        for w in result.wheels
    ]
    lines = [table(["package", "version", "source", "size", "status"], rows), ""]
    kept = [w for w in result.wheels if w.action == "kept"]
    for w in kept:
        lines.append(f"{w.name}: {w.reason}")
    before = f", {result.count('published')} published before" if result.count("published") else ""
    there = f"{result.count('present')} already on the index{before}"
    if result.dry_run:
        lines.append(
            f"dry run: {plural(result.count('upload'), 'wheel')} would be uploaded to {result.index}, "
            f"{there}; {shown} not changed"
        )
    elif result.written:
        lines.append(
            f"{plural(result.count('uploaded'), 'wheel')} uploaded, {there}; {shown}: written "
            f"(published wheels now come from {result.simple})"
        )
    else:
        lines.append(f"{plural(result.count('uploaded'), 'wheel')} uploaded, {there}; {shown}: unchanged")
    if kept and not result.dry_run:
        left = plural(len(kept), "store wheel")
        lines.append(f"{shown} still names {left}: not installable without the store")
    return "\n".join(lines)
