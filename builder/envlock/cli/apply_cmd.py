"""``envlock apply HOST`` and ``envlock rollback HOST``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envlock.cli.commands import summary
from envlock.cli.fleet_view import add_target_arguments, run_fleet_command, wants_fleet
from envlock.cli.progress import ProgressBar
from envlock.errors import ExitCode
from envlock.fleet import HostReport
from envlock.render import envelope, human_size, plural, table
from envlock.reporter import Reporter

if TYPE_CHECKING:
    from envlock.agent.protocol import RolledSlot
from envlock.workspace import open_workspace

if TYPE_CHECKING:
    from envlock.apply import ApplyResult
    from envlock.drift import VerifyResult

DRIFT_SHOWN = 20  # findings listed in the plan before the rest is counted
PHASE_LABELS = {
    "fetch": "fetch",
    "pull": "pull",
    "push": "push",
    "install": "install",
    "verify": "verify",
    "smoke": "smoke",
}


class _Reporter(Reporter):
    """One bar per phase (the last one drawn stays), each step on a line of its own (text format)."""

    def __init__(self, text: bool, quiet: bool) -> None:
        self.text = text and not quiet  # -q: no bars, no step lines
        self.bars: dict[str, ProgressBar] = {}

    def progress(self, phase: str, done: int, total: int, detail: str) -> None:
        if phase not in PHASE_LABELS or not self.text:
            return
        for other, bar in self.bars.items():
            if other != phase:
                bar.close()
        bar = self.bars.setdefault(phase, ProgressBar(PHASE_LABELS[phase]))
        bar.update(done, total, detail)

    def step(self, message: str) -> None:
        self.close()
        if self.text:
            print(f"• {message}", flush=True)

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "apply",
        parents=[common],
        help=summary("apply"),
        description="Fetch every artifact of locks/pylock.<host>.toml (sha256 checked), push what the "
        "host lacks, build a staging venv beside the live one with uv, put back the exact bin/ bytes, "
        "verify every file against the lock, import-smoke it, and swap it in atomically. The replaced "
        "venv is kept for `envlock rollback`. A host that already matches is left alone. "
        "Exit 0 applied (or nothing to do), 1 refused on a finding (hand edits in the venv, failed "
        "imports in the staged venv: nothing was changed), 2 could not run.",
    )
    add_target_arguments(p, "host name: hosts/<host>.toml and locks/pylock.<host>.toml")
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    p.add_argument("--jobs", type=int, default=0, help="hashing threads on the host")
    p.add_argument("--allow-smoke-failures", action="store_true", help="swap in even if imports fail")
    p.add_argument(
        "--force", action="store_true", help="replace a venv that another tool built (never a non-venv)"
    )
    p.add_argument(
        "--discard-drift",
        action="store_true",
        help="replace a venv whose files were edited since it was applied (the edits stay in the "
        "rollback copy)",
    )
    p.add_argument(
        "--keep-staging",
        action="store_true",
        help="keep the staged venv after any failure (it is kept after a failed verify or smoke anyway)",
    )
    p.add_argument(
        "--from",
        dest="bundle",
        metavar="FILE",
        help="apply from an air-gapped bundle written by `envlock bundle` (no network: every artifact, "
        "uv and the lock come from FILE, each checked against its sha256)",
    )
    p.set_defaults(run=run)
    r = sub.add_parser(
        "rollback",
        parents=[common],
        help=summary("rollback"),
        description="Atomically exchange the live venv with <venv>.envlock/previous, the venv the last "
        "apply replaced (finishing or undoing an interrupted apply first).",
    )
    r.add_argument("host")
    r.add_argument(
        "--again",
        action="store_true",
        help="roll back although the last change was a rollback (swaps the rolled-back venv back in)",
    )
    r.set_defaults(run=run_rollback)


def run(args: argparse.Namespace) -> int:
    from envlock.apply import ApplyOptions, apply  # imported late: `envlock --help` stays fast

    workspace = open_workspace(args.root)
    options = ApplyOptions(
        dry_run=args.dry_run,
        jobs=args.jobs,
        allow_smoke_failures=args.allow_smoke_failures,
        force=args.force,
        discard_drift=args.discard_drift,
        keep_staging=args.keep_staging,
        bundle=Path(args.bundle) if args.bundle else None,
    )
    if wants_fleet(args):

        def one(host: str, reporter: Reporter) -> HostReport[dict[str, Any]]:
            return host_report(apply(workspace, host, options, reporter=reporter))

        return run_fleet_command(args, "apply", workspace, one)
    reporter = _Reporter(text=args.format == "text", quiet=args.quiet)
    try:
        result = apply(workspace, args.hosts[0], options, reporter=reporter)
    finally:
        reporter.close()
    if args.format == "json":
        print(envelope("apply", result.exit_code == ExitCode.OK, {"result": result_json(result)}))
    else:
        print(render_text(result))
    return int(result.exit_code)


def host_report(result: ApplyResult) -> HostReport[dict[str, Any]]:
    """One host's line in a fleet apply: changed, no-op, dry run, or why nothing was swapped in."""
    moved = sum(1 for c in result.changes if c.kind != "rebuilt")
    plan = f"{plural(moved, 'package')} changed, {len(result.changes) - moved} rebuilt"
    if result.noop:
        state, detail = "no-op", "already matches its lock"
    elif result.dry_run:
        state, detail = "dry run", f"would apply: {plan}"
    elif result.drift_refused and result.drift is not None:
        count = len(result.drift.files) + len(result.drift.dists)
        state = "drift"
        detail = (
            f"{plural(count, 'hand edit')} since it matched its lock; nothing was changed "
            "(--discard-drift replaces the venv)"
        )
    elif result.smoke_failure is not None:
        failed = len(result.smoke_failure.failures)
        state = "smoke failed"
        detail = f"{plural(failed, 'import')} failed in the staged venv; the live venv is untouched"
    else:
        state = "changed"
        detail = f"{plan}; pushed {plural(result.pushed_files, 'file')}, {human_size(result.pushed_bytes)}"
    return HostReport(result.exit_code, state, detail, result_json(result), render_text(result))


def result_json(result: ApplyResult) -> dict[str, Any]:
    from envlock.cli.smoke_render import result_json as smoke_json  # a smoke failure only: no-op stays lean

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
        "pulled_files": result.pulled_files,
        "pulled_bytes": result.pulled_bytes,
        "pull_failures": list(result.pull_failures),
        "bytes_sent": result.bytes_sent,
        "host_report": result.host_report,
        "drift": _drift_json(result.drift) if result.drift else None,
        "drift_refused": result.drift_refused,
        "damaged_bytecode": [{"path": p, "why": why} for p, why in result.bytecode],
        "smoke_failure": smoke_json(result.smoke_failure, result.smoke_failure.seconds)
        if result.smoke_failure
        else None,
        "kept_staging": result.kept_staging,
    }


def _drift_json(drift: VerifyResult) -> dict[str, Any]:
    dists = [{"name": d.name, "state": d.state, "locked": d.locked, "live": d.live} for d in drift.dists]
    files = [{"path": f.path, "owner": f.owner, "state": f.state, "flags": f.flags} for f in drift.files]
    return {"dists": dists, "files": files}


def render_drift(drift: VerifyResult, shown: int | None = DRIFT_SHOWN) -> list[str]:
    """Verify's findings, one line each (as ``envlock verify`` prints them); ``shown=None``: all."""
    lines = [f"{d.state:<8} {d.name:<20} locked {d.locked or '-'}, live {d.live or '-'}" for d in drift.dists]
    for f in drift.files[:shown]:
        mark = f.flags if f.state == "changed" else f.state
        lines.append(f"{mark:<8} {f.owner:<20} {f.path}")
    if shown is not None and len(drift.files) > shown:
        lines.append(f"… and {len(drift.files) - shown} more (envlock verify lists them)")
    return lines


def render_text(result: ApplyResult) -> str:
    if result.noop:
        return f"{result.host}: {result.venv} already matches its lock; nothing to do"
    moved = [c for c in result.changes if c.kind != "rebuilt"]
    lines = []
    if moved:
        rows = [[c.kind, c.name, c.before or "-", c.after or "-"] for c in moved]
        lines += [table(["change", "package", "from", "to"], rows), ""]
    same = len(result.changes) - len(moved)
    lines.append(f"plan: {plural(len(moved), 'package')} change, {same} rebuilt at the same version")
    if result.bytecode:
        done = "apply would rebuild them" if result.dry_run else "rebuilt"
        lines.append(f"damaged bytecode in {result.venv} ({plural(len(result.bytecode), 'file')}), {done}:")
        listed = result.bytecode if result.dry_run else result.bytecode[:DRIFT_SHOWN]
        lines += [f"  {path}: {why}" for path, why in listed]
    if result.drift is not None and result.dry_run:
        # The plan's point: every file the apply would put back, none elided.
        count = len(result.drift.files) + len(result.drift.dists)
        lines.append(
            f"files apply would repair in {result.venv} (hand edits since it matched its lock, {count}):"
        )
        lines += ["  " + line for line in render_drift(result.drift, shown=None)]
        lines.append(
            "a real apply refuses to discard them without --discard-drift "
            "(with it, the swap keeps the edits in the rollback copy)"
        )
    elif result.drift is not None:
        lines.append(f"hand edits in {result.venv} since it matched its lock (verify's findings):")
        lines += ["  " + line for line in render_drift(result.drift)]
        if result.drift_refused:
            lines.append(
                f"refusing to discard them: nothing was changed; `envlock apply {result.host} "
                "--discard-drift` replaces the venv (the edits stay in the rollback copy)"
            )
            return "\n".join(lines)
        lines.append("--discard-drift: a swap keeps them in the rollback copy")
    if result.dry_run:
        lines.append("dry run: nothing was changed")
        return "\n".join(lines)
    if result.smoke_failure is not None:
        from envlock.cli.smoke_render import render_text as smoke_text

        lines += [
            "",
            smoke_text(result.smoke_failure, result.smoke_failure.seconds),
            "",
            f"{result.venv} on {result.host}: not swapped in, imports failed in the staged venv; "
            "the live venv is untouched",
        ]
        if result.kept_staging:
            lines.append(f"the staged venv is kept at {result.kept_staging} until the next apply")
        return "\n".join(lines)
    report = result.host_report
    if report.get("finished"):
        lines += [
            f"note: {report['recovered']}",
            f"{result.venv} on {result.host}: the interrupted apply of this lock had swapped it in; "
            f"previous venv kept at {report['previous']}",
        ]
        return "\n".join(lines)
    smoke = report.get("smoke", {})
    lines += [
        f"pushed {plural(result.pushed_files, 'file')}, {human_size(result.pushed_bytes)}"
        + (
            f"; {result.host} fetched {plural(result.pulled_files, 'file')} itself, "
            f"{human_size(result.pulled_bytes)}"
            if result.pulled_files
            else ""
        ),
        f"installed {plural(int(report.get('installed') or 0), 'wheel')}, "
        f"verified {plural(int(report.get('verified_files') or 0), 'file')}, "
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
    report = rollback(workspace, args.host, again=args.again)
    if args.format == "json":
        print(envelope("rollback", True, {"result": report}))
    else:
        if report.get("recovered"):
            print(f"note: {report['recovered']}")
        print(f"{args.host}: {report['venv']} restored from {report['restored_from']}")
        print(f"  now live:      {_slot_text(report.get('restored'))}")
        print(f"  rollback copy: {_slot_text(report.get('replaced'))}")
        print(f"  `envlock rollback {args.host} --again` swaps them back")
    return int(ExitCode.OK)


def _slot_text(slot: RolledSlot | None) -> str:
    if not slot or not slot["digest"]:
        return "a venv envlock has no lock for"
    return f"lock {slot['digest'][:19]}, applied {slot['at'] or 'at an unknown time'}"
