"""``envlock apply HOST`` and ``envlock rollback HOST``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from envlock.cli.commands import summary
from envlock.cli.render import ProgressBar, envelope, human_size, table
from envlock.errors import ExitCode
from envlock.workspace import open_workspace

if TYPE_CHECKING:
    from envlock.apply import ApplyResult

PHASE_LABELS = {"fetch": "fetch", "push": "push", "install": "install", "verify": "verify", "smoke": "smoke"}


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "apply",
        parents=[common],
        help=summary("apply"),
        description="Fetch every artifact of locks/pylock.<host>.toml (sha256 checked), push what the "
        "host lacks, build a staging venv beside the live one with uv, put back the exact bin/ bytes, "
        "verify every file against the lock, import-smoke it, and swap it in atomically. The replaced "
        "venv is kept for `envlock rollback`. A host that already matches is left alone.",
    )
    p.add_argument("host", help="host name: hosts/<host>.toml and locks/pylock.<host>.toml")
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    p.add_argument("--jobs", type=int, default=0, help="hashing threads on the host")
    p.add_argument("--allow-smoke-failures", action="store_true", help="swap in even if imports fail")
    p.set_defaults(run=run)
    r = sub.add_parser(
        "rollback",
        parents=[common],
        help=summary("rollback"),
        description="Atomically exchange the live venv with <venv>.envlock-previous.",
    )
    r.add_argument("host")
    r.set_defaults(run=run_rollback)


def run(args: argparse.Namespace) -> int:
    from envlock.apply import ApplyOptions, apply  # imported late: `envlock --help` stays fast

    workspace = open_workspace(args.root)
    bars: dict[str, ProgressBar] = {}

    def on_progress(event: dict[str, Any]) -> None:
        phase = event.get("phase", "")
        if phase not in PHASE_LABELS or args.format == "json":
            return
        for other, bar in bars.items():
            if other != phase:
                bar.close()
        bar = bars.setdefault(phase, ProgressBar(PHASE_LABELS[phase]))
        bar.update(int(event.get("done", 0)), int(event.get("total", 0)), str(event.get("detail", "")))

    def on_step(message: str) -> None:
        for bar in bars.values():
            bar.close()
        if args.format == "text":
            print(f"• {message}", flush=True)

    options = ApplyOptions(
        dry_run=args.dry_run, jobs=args.jobs, allow_smoke_failures=args.allow_smoke_failures
    )
    try:
        result = apply(workspace, args.host, options, on_progress=on_progress, on_step=on_step)
    finally:
        for bar in bars.values():
            bar.close()
    if args.format == "json":
        print(envelope("apply", True, {"result": result_json(result)}))
    else:
        print(render_text(result))
    return int(ExitCode.OK)


def result_json(result: ApplyResult) -> dict[str, Any]:
    return {
        "host": result.host,
        "venv": result.venv,
        "noop": result.noop,
        "dry_run": result.dry_run,
        "changes": [
            {"package": c.name, "kind": c.kind, "from": c.before, "to": c.after} for c in result.changes
        ],
        "pushed_files": result.pushed_files,
        "pushed_bytes": result.pushed_bytes,
        "host_report": result.host_report,
    }


def render_text(result: ApplyResult) -> str:
    if result.noop:
        return f"{result.host}: {result.venv} already matches its lock; nothing to do"
    moved = [c for c in result.changes if c.kind != "rebuilt"]
    lines = []
    if moved:
        rows = [[c.kind, c.name, c.before or "-", c.after or "-"] for c in moved]
        lines += [table(["change", "package", "from", "to"], rows), ""]
    same = len(result.changes) - len(moved)
    lines.append(f"plan: {len(moved)} package(s) change, {same} rebuilt at the same version")
    if result.dry_run:
        lines.append("dry run: nothing was changed")
        return "\n".join(lines)
    report = result.host_report
    smoke = report.get("smoke", {})
    lines += [
        f"pushed {result.pushed_files} file(s), {human_size(result.pushed_bytes)}",
        f"installed {report.get('installed')} wheels, verified {report.get('verified_files')} files, "
        f"smoke: {smoke.get('ok', 0)} ok, {smoke.get('skipped', 0)} skipped, "
        f"{len(smoke.get('failed', []))} failed",
        f"{result.venv} on {result.host}: swapped in"
        + (f"; previous venv kept at {report['previous']}" if report.get("previous") else ""),
    ]
    if report.get("recovered"):
        lines.append(f"note: {report['recovered']}")
    return "\n".join(lines)


def run_rollback(args: argparse.Namespace) -> int:
    from envlock.apply import rollback  # imported late: `envlock --help` stays fast

    workspace = open_workspace(args.root)
    report = rollback(workspace, args.host)
    if args.format == "json":
        print(envelope("rollback", True, {"result": report}))
    else:
        print(f"{args.host}: {report['venv']} restored from {report['restored_from']}")
    return int(ExitCode.OK)
