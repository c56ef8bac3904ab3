"""``envlock smoke HOST``."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, TextIO

from envlock.cli.commands import summary
from envlock.cli.fleet_view import add_target_arguments, run_fleet_command, wants_fleet
from envlock.cli.smoke_render import render_text, result_json
from envlock.errors import EnvlockError, ExitCode
from envlock.fleet import HostReport
from envlock.render import envelope, plural
from envlock.reporter import Reporter
from envlock.smoke import SmokeOptions, smoke
from envlock.smokereport import SmokeResult
from envlock.workspace import open_workspace


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "smoke",
        parents=[common],
        help=summary("smoke"),
        description="Import every top-level module of every distribution (from the lock and the live "
        "venv) and the profile's [smoke] checks in parallel worker interpreters of the host's venv. "
        "Each failure is classified (missing module, missing name, undefined symbol, missing "
        "library, crash, timeout) with the line that matters and what the lock knows. A module "
        "that needs the GPU driver on a host without a GPU is skipped. Failures expected on any "
        "healthy venv (platform-only modules, test packages, missing optional extras, vendored "
        "optional imports, the profile's [smoke] exclude patterns) are listed with their reason "
        "and do not gate. Exit 0 no real failure, 1 real failures, 2 could not run.",
    )
    add_target_arguments(p, "host name: hosts/<host>.toml (and locks/pylock.<host>.toml)")
    p.add_argument("--deep", action="store_true", help="also every submodule, found from the files")
    p.add_argument("--fail-fast", action="store_true", help="stop at the first failure")
    p.add_argument("--timeout", type=float, default=60.0, metavar="S", help="seconds per module (default 60)")
    p.add_argument("--jobs", type=int, default=0, metavar="N", help="workers (default: one per core)")
    if not any("-v" in action.option_strings for action in p._actions):  # unless a global -v exists
        p.add_argument(
            "-v", "--verbose", action="count", default=0, help="the line that matters; expected failures"
        )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.timeout <= 0 or args.jobs < 0:
        raise EnvlockError("--timeout must be positive and --jobs not negative")
    workspace = open_workspace(args.root)
    options = SmokeOptions(deep=args.deep, fail_fast=args.fail_fast, timeout=args.timeout, jobs=args.jobs)
    verbose = getattr(args, "verbose", 0) > 0
    if wants_fleet(args):

        def one(host: str, reporter: Reporter) -> HostReport[dict[str, Any]]:
            started = time.monotonic()
            result = smoke(workspace, host, options, reporter=reporter)
            return host_report(result, time.monotonic() - started, verbose)

        return run_fleet_command(args, "smoke", workspace, one)
    counter = _Counter(sys.stderr)
    counter.enabled = counter.enabled and not args.quiet
    started = time.monotonic()
    try:
        result = smoke(workspace, args.hosts[0], options, reporter=counter)
    finally:
        counter.close()
    elapsed = time.monotonic() - started
    if args.format == "json":
        print(envelope("smoke", result.passed, {"result": result_json(result, elapsed)}))
    else:
        print(render_text(result, elapsed, verbose=verbose))
    return int(ExitCode.OK if result.passed else ExitCode.FINDINGS)


def host_report(result: SmokeResult, elapsed: float, verbose: bool) -> HostReport[dict[str, Any]]:
    """One host's line in a fleet smoke: passed, or which imports failed."""
    ran = len(result.results)
    if result.passed:
        detail = f"{plural(ran, 'import')}, {len(result.skipped)} skipped, none failed for real"
        text = render_text(result, elapsed, verbose=verbose)
        return HostReport(ExitCode.OK, "passed", detail, result_json(result, elapsed), text)
    names = ", ".join(r.target for r in result.failures[:3])
    more = f" and {len(result.failures) - 3} more" if len(result.failures) > 3 else ""
    return HostReport(
        ExitCode.FINDINGS,
        "imports failed",
        f"{plural(len(result.failures), 'failure')} of {ran}: {names}{more}",
        result_json(result, elapsed),
        render_text(result, elapsed, verbose=verbose),
    )


class _Counter(Reporter):
    """``smoke 37/120 torch`` on one stderr line, at most 10 times a second; silent when not a TTY."""

    def __init__(self, stream: TextIO) -> None:
        self.stream, self.enabled, self.drawn = stream, stream.isatty(), False

    def progress(self, phase: str, done: int, total: int, detail: str) -> None:
        if self.enabled and phase == "smoke":
            text = f"\rsmoke {done}/{total} {detail}"
            self.stream.write(text[:100].ljust(100))
            self.stream.flush()
            self.drawn = True

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\r" + " " * 100 + "\r")
            self.stream.flush()
