"""``envlock diff A B``."""

from __future__ import annotations

import argparse
from typing import Any

from envlock.abi import summarize, symbol_names
from envlock.changes import LockDiff, PackageChange
from envlock.cli.commands import summary
from envlock.diff import diff
from envlock.errors import ExitCode
from envlock.loadable import LoadProblem
from envlock.render import envelope, plural
from envlock.workspace import open_workspace


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "diff",
        parents=[common],
        help=summary("diff"),
        description="Each side is a lock file, a host name (its lock), or live:HOST (a fresh capture "
        "that writes nothing). Shows version changes, packages only one side has, same-version "
        "artifact changes, environment changes, and native libraries that load on one side only. "
        "Exit 0 identical, 1 different, 2 could not run.",
    )
    p.add_argument("a", help="lock file, host name, or live:HOST")
    p.add_argument("b", help="lock file, host name, or live:HOST")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    workspace = open_workspace(args.root, need_hosts=False)
    result = diff(workspace, args.a, args.b)
    if args.format == "json":
        print(envelope("diff", result.identical, {"result": result_json(result)}))
    else:
        print(render_text(result))
    return int(ExitCode.OK if result.identical else ExitCode.FINDINGS)


def _change_json(change: PackageChange, result: LockDiff) -> dict[str, Any]:
    out: dict[str, Any] = {
        "package": change.name,
        "kind": change.kind,
        "from": change.from_version,
        "to": change.to_version,
        "detail": change.describe(result.a_label, result.b_label),
    }
    for key, pkg in (("from_wheel", change.before), ("to_wheel", change.after)):
        if pkg is not None:
            out[key] = {"filename": pkg.wheel.filename, "sha256": pkg.wheel.sha256, "source": pkg.source}
    return out


def _problem_json(problem: LoadProblem, side: str) -> dict[str, Any]:
    return {
        "side": side,
        "package": problem.package,
        "library": problem.library,
        "problem": problem.kind,
        "needs": problem.what,
        # needed: does the host's loader find it (the lock's host-libraries facts)?
        **({"host": problem.host} if problem.kind == "needed" else {}),
        "detail": problem.describe(),
    }


def result_json(result: LockDiff) -> dict[str, Any]:
    return {
        "a": result.a_label,
        "b": result.b_label,
        "identical": result.identical,
        "summary": {
            "packages_a": result.packages_a,
            "packages_b": result.packages_b,
            "unchanged": result.unchanged,
            **{kind: sum(1 for c in result.changes if c.kind == kind) for kind in _KINDS},
        },
        "changes": [_change_json(c, result) for c in result.changes],
        "environment": [{"what": e.what, "from": e.before, "to": e.after} for e in result.environment],
        "native": [_problem_json(p, result.a_label) for p in result.load_only_a]
        + [_problem_json(p, result.b_label) for p in result.load_only_b],
        "abi": _abi_json(result),
        "notes": list(result.notes),
    }


def _abi_json(result: LockDiff) -> list[dict[str, Any]]:
    """Symbols libraries kept from a to b take from a provider that changed and lost them."""
    names = symbol_names(result.abi_breaks)
    return [
        {
            "package": item.consumer,
            "library": item.library,
            "provider": item.provider,
            "provider_library": item.provider_library or None,
            "symbol": item.symbol,
            "demangled": names.get(item.symbol, item.symbol),
            "from": item.provider_before,
            "to": item.provider_after,
            "detail": item.describe(names),
        }
        for item in result.abi_breaks
    ]


_KINDS = ("upgrade", "downgrade", "added", "removed", "artifact")


def render_text(result: LockDiff) -> str:
    a, b = result.a_label, result.b_label
    notes = [f"note: {note}" for note in result.notes]
    if result.identical:
        return "\n".join([f"{a} and {b}: identical ({plural(result.packages_a, 'package')})", *notes])
    counts = {kind: sum(1 for c in result.changes if c.kind == kind) for kind in _KINDS}
    names = {
        "upgrade": ("upgrade", "upgrades"),
        "downgrade": ("downgrade", "downgrades"),
        "artifact": ("same-version change", "same-version changes"),
        "added": (f"only on {b}",) * 2,
        "removed": (f"only on {a}",) * 2,
    }
    words = [plural(n, *names[kind]) for kind, n in counts.items() if n]
    lines = [
        f"{a} -> {b}: {', '.join(words) or 'no package changes'}; "
        f"{result.unchanged} identical ({result.packages_a} -> {plural(result.packages_b, 'package')})"
    ]
    order = {"downgrade": 0, "upgrade": 1, "artifact": 2, "removed": 3, "added": 4}
    for change in sorted(result.changes, key=lambda c: (order[c.kind], c.name)):
        lines.append(f"  {change.describe(a, b)}")
    for label, problems in ((a, result.load_only_a), (b, result.load_only_b)):
        if problems:
            lines.append(f"native, on {label} only:")
            lines += [f"  {problem.describe()}" for problem in problems]
    if result.abi_breaks:
        lines.append(f"abi, kept on {b} but its provider lost symbols:")
        lines += [f"  {line}" for line in summarize(result.abi_breaks)]
    if result.environment:
        lines.append("environment:")
        lines += [f"  {change.describe()}" for change in result.environment]
    return "\n".join(lines + notes)
