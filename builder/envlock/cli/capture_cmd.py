"""``envlock capture HOST``."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any

from envlock.cli.commands import summary
from envlock.cli.fleet_view import add_target_arguments, run_fleet_command, wants_fleet
from envlock.cli.progress import ProgressBar
from envlock.errors import ExitCode
from envlock.fleet import HostReport
from envlock.render import envelope, human_size, plural, table
from envlock.reporter import Reporter
from envlock.workspace import open_workspace

if TYPE_CHECKING:
    from envlock.capture import CaptureResult


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "capture",
        parents=[common],
        help=summary("capture"),
        description="Hash every file of the host's venv, trace every distribution to its exact "
        "wheel (or repack it into the store), and write locks/pylock.<host>.toml with its "
        "file manifest. Writes nothing when the lock would not change.",
    )
    add_target_arguments(p, "host name: hosts/<host>.toml")
    p.add_argument("--no-cache", action="store_true", help="rehash every file and re-trace every wheel")
    p.add_argument(
        "--allow-unreachable-index",
        action="store_true",
        help="repack packages whose index cannot be reached instead of failing",
    )
    p.add_argument("--jobs", type=int, default=0, help="hashing threads (default: 2 per core)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from envlock.capture import CaptureOptions, capture  # imported late: `envlock --help` stays fast

    workspace = open_workspace(args.root)
    options = CaptureOptions(
        use_cache=not args.no_cache,
        allow_unreachable_index=args.allow_unreachable_index,
        jobs=args.jobs,
    )
    if wants_fleet(args):

        def one(host: str, reporter: Reporter) -> HostReport[dict[str, Any]]:
            started = time.monotonic()
            result = capture(workspace, host, options, reporter=reporter)
            return host_report(result, workspace.root, time.monotonic() - started)

        return run_fleet_command(args, "capture", workspace, one)
    reporter = _Reporter(text=args.format == "text", quiet=args.quiet, verbose=args.verbose)
    started = time.monotonic()
    try:
        result = capture(workspace, args.hosts[0], options, reporter=reporter)
    finally:
        reporter.bar.close()
    elapsed = time.monotonic() - started
    if args.format == "json":
        print(envelope("capture", True, {"result": result_json(result, workspace.root, elapsed)}))
    else:
        print(render_text(result, workspace.root, elapsed))
    return int(ExitCode.OK)


class _Reporter(Reporter):
    """The hashing bar, and each step on a line of its own (on a terminal, in text format)."""

    def __init__(self, text: bool, quiet: bool, verbose: bool) -> None:
        self.bar = ProgressBar("hashing", enabled=False if quiet else None)
        self.text = text and not quiet
        self.verbose = verbose

    def progress(self, phase: str, done: int, total: int, detail: str) -> None:
        self.bar.update(done, total, detail)

    def step(self, message: str) -> None:
        self.bar.close()
        # the steps go with the bar on a terminal; -v shows them anywhere, -q nowhere
        if self.text and (self.bar.enabled or self.verbose):
            print(f"• {message}", flush=True)


def host_report(result: CaptureResult, root: Any, elapsed: float) -> HostReport[dict[str, Any]]:
    """One host's line in a fleet capture: its lock written or unchanged."""
    lock = result.lock
    state = "written" if result.changed else "unchanged"
    detail = (
        f"{result.lock_path.relative_to(root)}: {plural(len(lock.packages), 'package')}, "
        f"python {lock.interpreter.version}"
        + (f"; {plural(len(result.warnings), 'warning')}" if result.warnings else "")
    )
    text = render_text(result, root, elapsed)
    return HostReport(ExitCode.OK, state, detail, result_json(result, root, elapsed), text)


def result_json(result: CaptureResult, root: Any, elapsed: float) -> dict[str, Any]:
    lock = result.lock
    return {
        "host": lock.host,
        "lock": str(result.lock_path.relative_to(root)),
        "manifest": str(result.manifest_path.relative_to(root)),
        "changed": result.changed,
        "digest": lock.digest,
        "seconds": round(elapsed, 3),
        "stats": result.stats,
        "warnings": list(result.warnings),
        "packages": [
            {
                "name": p.name,
                "version": p.version,
                "source": p.source,
                "wheel": p.wheel.filename,
                "sha256": p.wheel.sha256,
                "files": p.file_count,
                "size": p.size,
                "native": len(p.native),
                "modified": list(p.modified),
                "missing": list(p.missing),
                "reason": p.reason,
            }
            for p in lock.packages
        ],
    }


def render_text(result: CaptureResult, root: Any, elapsed: float) -> str:
    lock = result.lock
    rows = []
    for p in lock.packages:
        note = p.reason or ""
        if p.missing:
            note = f"{plural(len(p.missing), 'file')} missing; " + note
        rows.append(
            [
                p.name,
                p.version,
                p.source,
                str(p.file_count),
                human_size(p.size),
                str(len(p.native) or ""),
                note,
            ]
        )
    files = sum(p.file_count for p in lock.packages)
    size = sum(p.size for p in lock.packages)
    stats = result.stats
    state = "written" if result.changed else "unchanged"
    lines = [
        table(["package", "version", "source", "files", "size", ".so", "note"], rows, right=(3, 4, 5)),
        "",
        f"{plural(len(lock.packages), 'package')}, {plural(files, 'file')}, {human_size(size)}; "
        f"python {lock.interpreter.version} on {lock.platform.machine} "
        f"{lock.platform.libc} {lock.platform.libc_version}",
        f"hashed {plural(stats['hashed'], 'file')} ({human_size(stats['bytes_hashed'])}), "
        f"{stats['cached']} from the stat cache, in {elapsed:.1f} s",
        f"digest {lock.digest}",
        f"{result.lock_path.relative_to(root)}: {state}",
    ]
    for warning in result.warnings:
        lines.append(f"warning: {warning}")
    return "\n".join(lines)
