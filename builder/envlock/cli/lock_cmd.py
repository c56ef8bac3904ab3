"""``envlock lock HOST`` and ``envlock lock --check HOST``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from envlock.cli.commands import summary
from envlock.cli.fleet_view import add_target_arguments, run_fleet_command, wants_fleet
from envlock.errors import ExitCode
from envlock.fleet import HostReport
from envlock.render import envelope, plural, table
from envlock.reporter import Reporter

if TYPE_CHECKING:
    from envlock.hosts import HostProfile
    from envlock.lock.model import Lock
    from envlock.resolve import LockResult
from envlock.workspace import lock_name, open_workspace


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "lock",
        parents=[common],
        help=summary("lock"),
        description="Write locks/pylock.<host>.toml for HOST from the lock of its reference "
        "(profile `reference`): the reference's bytes wherever they run on HOST, else the same "
        "version from another artifact, else the smallest version change; every deviation "
        "carries its reason. The target is described by the profile's [target] and [gpu] "
        "tables, or probed on the host.",
    )
    add_target_arguments(p, "host name: hosts/<host>.toml (its `reference` names the lock to start from)")
    p.add_argument(
        "--check", action="store_true", help="exit 1 when the lock on disk is stale; write nothing"
    )
    p.set_defaults(run=run)


def _probe(profile: HostProfile, reference: Lock) -> dict[str, Any]:
    # hostpython brings the transports and the agent protocol: only a host without [target] needs them
    from envlock.hostpython import probe_target

    return probe_target(profile, reference)


def run(args: argparse.Namespace) -> int:
    from envlock.resolve import lock_host  # imported late: `envlock --help` stays fast

    workspace = open_workspace(args.root)
    if wants_fleet(args):

        def one(host: str, reporter: Reporter) -> HostReport[dict[str, Any]]:
            return host_report(lock_host(workspace, host, check=args.check, probe=_probe), args.check)

        return run_fleet_command(args, "lock", workspace, one)
    result = lock_host(workspace, args.hosts[0], check=args.check, probe=_probe)
    if args.format == "json":
        print(envelope("lock", not (args.check and result.stale), {"result": result_json(result)}))
    else:
        print(render_text(result, args.check))
    if args.check and result.stale:
        return int(ExitCode.FINDINGS)
    return int(ExitCode.OK)


def host_report(result: LockResult, check: bool) -> HostReport[dict[str, Any]]:
    """One host's line in a fleet lock: written, unchanged, up to date, or stale (--check)."""
    lock = result.lock
    differ = len(result.deviations)
    detail = (
        f"locks/pylock.{lock_name(lock.host)}.toml: {plural(len(lock.packages), 'package')}, "
        f"{differ} differ from the reference's"
    )
    if check and result.stale:
        because = "; ".join(stale_lines(result)[:3])
        return HostReport(
            ExitCode.FINDINGS,
            "stale",
            f"{detail}; stale: {because}",
            result_json(result),
            render_text(result, check),
        )
    state = "up to date" if check else "written" if result.written else "unchanged"
    return HostReport(ExitCode.OK, state, detail, result_json(result), render_text(result, check))


def result_json(result: LockResult) -> dict[str, Any]:
    from envlock.resolve.target import describe

    lock = result.lock
    return {
        "host": lock.host,
        "reference": lock.reference,
        "target": describe(result.env),
        "digest": lock.digest,
        "changed": result.changed,
        "stale": result.stale,
        "written": result.written,
        "stale_because": stale_because(result) if result.stale else None,
        "packages": [
            {
                "name": p.name,
                "version": p.version,
                "wheel": p.wheel,
                "sha256": p.sha256,
                "source": p.source,
                "kept": p.name not in result.deviations,
                "reason": result.deviations.get(p.name),
            }
            for p in lock.packages
        ],
    }


def stale_because(result: LockResult) -> dict[str, Any]:
    """The package and host-fact changes between the lock on disk and the fresh one."""
    diff = result.staleness
    if diff is None:
        return {"unreadable": result.unreadable, "packages": [], "environment": []}
    return {
        "unreadable": None,
        "packages": [
            {
                "name": c.name,
                "kind": c.kind,
                "from": c.from_version,
                "to": c.to_version,
                "change": c.describe(diff.a_label, diff.b_label),
            }
            for c in diff.changes
        ],
        "environment": [{"what": e.what, "from": e.before, "to": e.after} for e in diff.environment],
    }


def stale_lines(result: LockResult) -> list[str]:
    diff = result.staleness
    if diff is None:
        return [result.unreadable or "the lock on disk could not be compared"]
    lines = [c.describe(diff.a_label, diff.b_label) for c in diff.changes]
    lines += [e.describe() for e in diff.environment]
    # Same packages and facts: what differs is the bytes (the manifest, a reason, the layout).
    return lines or ["no package or host fact: the lock's or its manifest's bytes (rewrite to refresh)"]


def render_text(result: LockResult, check: bool) -> str:
    import textwrap

    from envlock.resolve.target import describe

    lock = result.lock
    lines = [f"target: {describe(result.env)}"]
    changed = [p for p in lock.packages if p.name in result.deviations]
    if changed:
        rows = [[p.name, p.version, p.wheel] for p in changed]
        lines += ["", table(["package", "version", "wheel"], rows), ""]
        for p in changed:
            why = textwrap.fill(
                result.deviations[p.name],
                width=96,
                subsequent_indent="    ",
                break_long_words=False,
                break_on_hyphens=False,
            )
            lines.append(f"{p.name}: {why}")
        lines.append("")
    kept = len(lock.packages) - len(changed)
    lines.append(
        f"{plural(len(lock.packages), 'package')}: {kept} keep the reference's bytes, {len(changed)} differ"
    )
    path = f"locks/pylock.{lock_name(lock.host)}.toml"
    if check and result.stale:
        lines.append(f"{path}: stale; a rewrite would change:")
        lines += [f"  {line}" for line in stale_lines(result)]
    elif check:
        lines.append(f"{path}: up to date")
    else:
        lines.append(f"{path}: {'written' if result.written else 'unchanged'}")
    return "\n".join(lines)
