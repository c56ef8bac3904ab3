"""``envlock smoke HOST``."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict
from typing import Any, TextIO

from envlock.cli.commands import summary
from envlock.cli.render import envelope, table
from envlock.errors import EnvlockError, ExitCode
from envlock.smoke import ModuleResult, SmokeOptions, SmokeResult, smoke
from envlock.workspace import open_workspace

CASCADE_SHOWN = 5  # modules named per cause before the rest is counted


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "smoke",
        parents=[common],
        help=summary("smoke"),
        description="Import every top-level module of every distribution (from the lock and the live "
        "venv) and the profile's [smoke] checks in parallel worker interpreters of the host's venv. "
        "Each failure is classified (missing module, missing name, undefined symbol, missing "
        "library, crash, timeout) with the line that matters and what the lock knows. A module "
        "that needs the GPU driver on a host without a GPU is skipped. "
        "Exit 0 all ok, 1 failures, 2 could not run.",
    )
    p.add_argument("host", help="host name: hosts/<host>.toml (and locks/pylock.<host>.toml)")
    p.add_argument("--deep", action="store_true", help="also every submodule, found from the files")
    p.add_argument("--fail-fast", action="store_true", help="stop at the first failure")
    p.add_argument("--timeout", type=float, default=60.0, metavar="S", help="seconds per module (default 60)")
    p.add_argument("--jobs", type=int, default=0, metavar="N", help="workers (default: one per core)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.timeout <= 0 or args.jobs < 0:
        raise EnvlockError("--timeout must be positive and --jobs not negative")
    workspace = open_workspace(args.root)
    counter = _Counter(sys.stderr)
    options = SmokeOptions(deep=args.deep, fail_fast=args.fail_fast, timeout=args.timeout, jobs=args.jobs)
    started = time.monotonic()
    try:
        result = smoke(workspace, args.host, options, on_progress=counter.update)
    finally:
        counter.close()
    elapsed = time.monotonic() - started
    if args.format == "json":
        print(envelope("smoke", True, {"result": result_json(result, elapsed)}))
    else:
        print(render_text(result, elapsed))
    return int(ExitCode.OK if result.passed else ExitCode.FINDINGS)


class _Counter:
    """``smoke 37/120 torch`` on one stderr line, at most 10 times a second; silent when not a TTY."""

    def __init__(self, stream: TextIO) -> None:
        self.stream, self.enabled, self.drawn = stream, stream.isatty(), False

    def update(self, event: dict[str, Any]) -> None:
        if self.enabled:
            text = f"\rsmoke {event['done']}/{event['total']} {event.get('target', '')}"
            self.stream.write(text[:100].ljust(100))
            self.stream.flush()
            self.drawn = True

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\r" + " " * 100 + "\r")
            self.stream.flush()


def _result_json(r: ModuleResult) -> dict[str, Any]:
    out: dict[str, Any] = {"target": r.target, "check": r.check, "status": r.status, "seconds": r.seconds}
    if r.status != "ok":
        out.update(
            kind=r.kind,
            type=r.error_type,
            message=r.message,
            why=r.why,
            where=asdict(r.where) if r.where else None,
            frames=[asdict(f) for f in r.frames],
            facts=dict(r.facts),
            alone=r.alone,
            same_as=r.same_as,
        )
    if r.order_dependent:
        out["order_dependent"] = r.order_dependent
    return out


def result_json(result: SmokeResult, elapsed: float) -> dict[str, Any]:
    return {
        "host": result.host,
        "venv": result.venv,
        "python": result.python,
        "lock": result.lock,
        "has_gpu": result.has_gpu,
        "jobs": result.jobs,
        "passed": result.passed,
        "counts": {
            "ok": sum(r.status == "ok" for r in result.results),
            "failed": len(result.failures),
            "skipped": len(result.skipped),
            "not_run": len(result.not_run),
        },
        "stopped": result.stopped,
        "not_run": list(result.not_run),
        "seconds": round(elapsed, 3),
        "agent_seconds": result.seconds,
        "warnings": list(result.warnings),
        "results": [_result_json(r) for r in result.results],
    }


def render_text(result: SmokeResult, elapsed: float) -> str:
    """One row per cause of failure, most serious first; what else it takes down below the table."""
    groups = result.by_cause()
    lines = []
    if groups:
        rows = []
        for first, *rest in groups:
            target = f"check: {first.target}" if first.check else first.target
            target += f" (+{len(rest)})" if rest else ""
            rows.append([first.status, first.kind or "", target, str(first.where or ""), first.why or ""])
        lines += [table(["result", "kind", "module", "at", "why"], rows), ""]
    for first, *rest in groups:
        if rest:
            names = [f"check: {r.target}" if r.check else r.target for r in rest]
            more = len(names) - CASCADE_SHOWN
            listed = ", ".join(names[:CASCADE_SHOWN]) + (f" and {more} more" if more > 0 else "")
            lines.append(f"{first.target}: the same cause also {first.status} {listed}")
    for r in result.results:
        if r.order_dependent:
            lines.append(f"note: {r.target} {r.order_dependent}")
    for warning in result.warnings:
        lines.append(f"warning: {warning}")
    lines.append(_summary(result, elapsed))
    return "\n".join(lines)


def _summary(result: SmokeResult, elapsed: float) -> str:
    checks = result.checks
    modules = len(result.results) + len(result.not_run) - checks
    what = f"{modules} modules" + (f" + {checks} checks" if checks else "")
    ok = sum(r.status == "ok" for r in result.results)
    causes = sum(1 for g in result.by_cause() if g[0].status == "failed")
    counts = f"{ok} ok, {len(result.failures)} failed, {len(result.skipped)} skipped"
    counts += f" ({causes} causes)" if causes != len(result.failures) else ""
    if result.stopped:
        counts += f"; stopped at the first failure, {len(result.not_run)} not run"
    source = f", modules from {result.lock} and the venv" if result.lock else ""
    return (
        f"smoke {result.host}: {what} in {elapsed:.1f} s, {result.jobs} workers, "
        f"python {result.python}{source}: {counts}"
    )
