"""``envlock verify HOST``."""

from __future__ import annotations

import argparse
import time
from typing import Any

from envlock.cli.commands import summary
from envlock.cli.fleet_view import add_target_arguments, run_fleet_command, wants_fleet
from envlock.cli.progress import ProgressBar
from envlock.drift import VerifyResult
from envlock.errors import ExitCode
from envlock.fleet import HostReport
from envlock.lock.compare import FLAGS, FileDrift
from envlock.render import envelope, plural, table
from envlock.reporter import Reporter
from envlock.verify import verify
from envlock.workspace import open_workspace

FOLD = 10  # files listed per drifted distribution before the rest is counted


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "verify",
        parents=[common],
        help=summary("verify"),
        description="Hash the host's venv (the stat cache skips unchanged files) and compare every "
        "file and distribution with locks/pylock.<host>.toml and its manifest. Flags: S size, "
        "5 sha256, M kind (f/x/l), L symlink target. Exit 0 clean, 1 drift, 2 could not run.",
    )
    add_target_arguments(p, "host name: hosts/<host>.toml and locks/pylock.<host>.toml")
    p.add_argument("--no-cache", action="store_true", help="rehash every file")
    p.add_argument("--jobs", type=int, default=0, help="hashing threads (default: 2 per core)")
    p.add_argument("--all", action="store_true", help="list every file of drifted distributions (as -v does)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    workspace = open_workspace(args.root)
    if wants_fleet(args):
        fold = not (args.all or args.verbose)

        def one(host: str, reporter: Reporter) -> HostReport[dict[str, Any]]:
            started = time.monotonic()
            result = verify(workspace, host, use_cache=not args.no_cache, jobs=args.jobs, reporter=reporter)
            return host_report(result, workspace.shown(result.lock_path), time.monotonic() - started, fold)

        return run_fleet_command(args, "verify", workspace, one)
    reporter = _Reporter(quiet=args.quiet)
    started = time.monotonic()
    try:
        result = verify(
            workspace, args.hosts[0], use_cache=not args.no_cache, jobs=args.jobs, reporter=reporter
        )
    finally:
        reporter.bar.close()
    elapsed = time.monotonic() - started
    shown = workspace.shown(result.lock_path)
    if args.format == "json":
        print(envelope("verify", result.clean, {"result": result_json(result, shown, elapsed)}))
    else:
        print(render_text(result, shown, elapsed, fold=not (args.all or args.verbose)))
    return int(ExitCode.OK if result.clean else ExitCode.FINDINGS)


def host_report(result: VerifyResult, shown: str, elapsed: float, fold: bool) -> HostReport[dict[str, Any]]:
    """One host's line in a fleet verify: clean, or how far it drifted."""
    if result.clean:
        detail = f"{plural(result.files_checked, 'file')} match {shown}"
        text = render_text(result, shown, elapsed, fold=fold)
        return HostReport(ExitCode.OK, "clean", detail, result_json(result, shown, elapsed), text)
    parts = []
    if result.python_locked != result.python_live:
        parts.append(f"python {result.python_locked} -> {result.python_live}")
    if result.files:
        parts.append(plural(len(result.files), "file"))
    if result.dists:
        parts.append(plural(len(result.dists), "distribution"))
    if result.bytecode:
        parts.append(f"{len(result.bytecode)} damaged .pyc")
    return HostReport(
        ExitCode.FINDINGS,
        "drift",
        f"drift from {shown}: " + ", ".join(parts),
        result_json(result, shown, elapsed),
        render_text(result, shown, elapsed, fold=fold),
    )


def _file_json(drift: FileDrift) -> dict[str, Any]:
    out: dict[str, Any] = {"path": drift.path, "owner": drift.owner, "state": drift.state}
    if drift.flags:
        out["flags"] = drift.flags
    for side, row in (("locked", drift.locked), ("live", drift.live)):
        if row is not None:
            out[side] = {"sha256": row.sha256, "size": row.size, "kind": row.kind}
    return out


def result_json(result: VerifyResult, shown: str, elapsed: float) -> dict[str, Any]:
    return {
        "host": result.host,
        "lock": shown,
        "clean": result.clean,
        "files_checked": result.files_checked,
        "python": {"locked": result.python_locked, "live": result.python_live},
        "distributions": [
            {"name": d.name, "state": d.state, "locked": d.locked, "live": d.live} for d in result.dists
        ],
        "files": [_file_json(f) for f in result.files],
        "damaged_bytecode": [{"path": p, "why": why} for p, why in result.bytecode],
        "seconds": round(elapsed, 3),
        "stats": dict(result.stats),
        "warnings": list(result.warnings),
    }


def render_text(result: VerifyResult, shown: str, elapsed: float, fold: bool = True) -> str:
    stats = result.stats
    timing = (
        f"in {elapsed:.1f} s ({stats.get('hashed', 0)} hashed, {stats.get('cached', 0)} from the stat cache)"
    )
    if result.clean:
        return f"{result.host}: {plural(result.files_checked, 'file')} match {shown} {timing}"
    lines: list[str] = []
    if result.python_locked != result.python_live:
        lines.append(f"python {result.python_locked} -> {result.python_live}")
    if result.dists:
        rows = []
        for d in result.dists:
            note = {"version": "version drift", "missing": "not in the venv", "extra": "not in the lock"}[
                d.state
            ]
            rows.append([d.name, d.locked or "-", d.live or "-", note])
        lines += [table(["distribution", "locked", "live", "status"], rows), ""]
    drifted = {d.name for d in result.dists}
    shown_per_owner: dict[str, int] = {}
    folded = 0
    for f in result.files:
        if fold and f.owner in drifted:
            shown_per_owner[f.owner] = shown_per_owner.get(f.owner, 0) + 1
            if shown_per_owner[f.owner] > FOLD:
                folded += 1
                continue
        mark = f.flags if f.state == "changed" else f.state
        lines.append(f"{mark:<8} {f.owner:<20} {f.path}")
    if folded:
        lines.append(
            f"… and {plural(folded, 'more file', 'more files')} of drifted distributions (--all lists them)"
        )
    for path, why in result.bytecode:
        lines.append(f"{'damaged':<8} {'(bytecode)':<20} {path}: {why}")
    counts = {
        state: sum(1 for f in result.files if f.state == state) for state in ("changed", "missing", "extra")
    }
    lines += [
        "",
        f"{result.host}: drift from {shown}: {plural(len(result.files), 'file')} ({counts['changed']} "
        f"changed, {counts['missing']} missing, {counts['extra']} extra); "
        f"{plural(len(result.dists), 'distribution')}"
        + (f"; {len(result.bytecode)} damaged .pyc" if result.bytecode else "")
        + f" {timing}",
        f"flags: {' '.join(FLAGS)} = size, sha256, kind (f/x/l), symlink target",
    ]
    lines += [f"warning: {w}" for w in result.warnings]
    return "\n".join(lines)


class _Reporter(Reporter):
    """The hashing bar."""

    def __init__(self, quiet: bool) -> None:
        self.bar = ProgressBar("hashing", enabled=False if quiet else None)

    def progress(self, phase: str, done: int, total: int, detail: str) -> None:
        self.bar.update(done, total, detail)
