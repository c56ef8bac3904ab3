"""``envlock gc [--dry-run]``: free store and cache objects no lock in the workspace needs."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envlock.cli.commands import summary
from envlock.errors import ExitCode
from envlock.render import envelope, human_size, table
from envlock.workspace import open_workspace

if TYPE_CHECKING:
    from envlock.gc import GcResult

SHOWN = 20  # freed objects listed in text before the rest is counted


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "gc",
        parents=[common],
        help=summary("gc"),
        description="Delete store wheels and blobs that no lock in locks/ names, transfer-drop objects "
        "in ~/.cache/envlock/artifacts no lock needs, and agent bundles of other envlock versions; "
        "print what was (or, with --dry-run, would be) freed and its size.",
    )
    p.add_argument("--dry-run", action="store_true", help="list what would be freed; delete nothing")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from envlock.gc import gc

    result = gc(open_workspace(args.root), dry_run=args.dry_run)
    if args.format == "json":
        print(envelope("gc", True, {"result": result_json(result)}))
    else:
        print(render_text(result))
    return int(ExitCode.OK)


def result_json(result: GcResult) -> dict[str, Any]:
    return {
        "dry_run": result.dry_run,
        "store": str(result.store),
        "cache": str(result.cache),
        "locks": list(result.locks),
        "freed": [{"path": str(f.path), "what": f.what, "size": f.size} for f in result.freed],
        "freed_bytes": result.freed_bytes,
        "kept_objects": result.kept_objects,
        "kept_bytes": result.kept_bytes,
        "memo_bytes": result.memo_bytes,
    }


def _short(path: Path, result: GcResult) -> str:
    """A path under the store or the cache as ``store/...`` / ``cache/...``, sha256 names cut to 12."""
    shown = str(path)
    for base, label in ((result.store, "store"), (result.cache, "cache")):
        if path.is_relative_to(base):
            shown = "/".join([label, *path.relative_to(base).parts])
            break
    return re.sub(r"\b([0-9a-f]{12})[0-9a-f]{52}\b", r"\1…", shown)


def render_text(result: GcResult) -> str:
    verb = "would free" if result.dry_run else "freed"
    lines = []
    if result.freed:
        rows = [[f.what, human_size(f.size), _short(f.path, result)] for f in result.freed[:SHOWN]]
        lines += [table(["what", "size", "path"], rows, right=(1,))]
        if len(result.freed) > SHOWN:
            lines.append(f"… and {len(result.freed) - SHOWN} more (--format json lists them)")
        lines.append(f"store: {result.store}; cache: {result.cache}")
        lines.append("")
    totals: dict[str, tuple[int, int]] = {}
    for f in result.freed:
        count, size = totals.get(f.what, (0, 0))
        totals[f.what] = (count + 1, size + f.size)
    by_kind = ", ".join(f"{what} {n} ({human_size(size)})" for what, (n, size) in totals.items())
    lines.append(f"{verb} {human_size(result.freed_bytes)}" + (f": {by_kind}" if by_kind else ""))
    lines.append(
        f"kept {result.kept_objects} object(s), {human_size(result.kept_bytes)}, that "
        f"{len(result.locks)} lock(s) in locks/ need; "
        f"memos in {result.cache}: {human_size(result.memo_bytes)}"
    )
    if result.dry_run:
        lines.append("dry run: nothing was deleted")
    return "\n".join(lines)
