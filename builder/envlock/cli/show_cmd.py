"""``envlock show LOCK [--textconv]``: a lock as text a person (or ``git diff``) can read.

``--textconv`` is git's textconv filter (``envlock git-setup`` installs it):
one sorted line per package with its exact wheel and sha256, so ``git
diff`` of a 300-package lock shows the packages that changed, a hash change
at the same version included, instead of TOML table noise. It never fails:
a file that is not a readable lock is printed as it is, after one comment
line, so git can always show a diff. A file manifest (``*.files.tsv``) is
shown grouped per package: one unindented line per owner (git's default
hunk header then names the package a changed file belongs to), its files
indented below it.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any

from envlock.cli.commands import summary
from envlock.errors import EnvlockError, ExitCode
from envlock.lock.foreign import foreign_note, read_any_lock
from envlock.lock.manifest import parse_manifest, read_manifest_bytes
from envlock.lock.model import FileEntry, Lock, Package
from envlock.lock.summary import gpu_summary, platform_summary
from envlock.render import envelope, human_size, table
from envlock.workspace import open_workspace


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "show",
        parents=[common],
        help=summary("show"),
        description="Print a lock (a file, or a host name for locks/pylock.<host>.toml). "
        "--textconv prints sorted one-line-per-package text for git's textconv "
        "(a .files.tsv manifest: its files grouped per package) "
        "(see `envlock git-setup`).",
    )
    p.add_argument("lock", help="lock file, or host name")
    p.add_argument("--textconv", action="store_true", help="sorted one-line-per-package text (for git diff)")
    p.set_defaults(run=run)


def _package_line(pkg: Package) -> str:
    source = pkg.source + (" editable" if pkg.editable else "")
    extra = []
    if pkg.modified or pkg.missing:
        extra.append(f"patched:{len(pkg.modified)}+{len(pkg.missing)}")
    if pkg.native:
        cuda = any(lib.cuda_sections for lib in pkg.native)
        extra.append(f"native:{len(pkg.native)}{'+cuda' if cuda else ''}")
    where = pkg.index or pkg.wheel.url or pkg.wheel.path or ""
    parts = [f"{pkg.name}=={pkg.version}", source, pkg.wheel.filename, f"sha256:{pkg.wheel.sha256}", *extra]
    if where and pkg.source != "repacked":
        parts.append(f"from {where}")
    if pkg.artifacts:
        parts.append(f"+{len(pkg.artifacts)} artifact(s)")
    if pkg.marker:
        parts.append(f"; {pkg.marker}")
    return "  ".join(parts)


def header(lock: Lock) -> list[str]:
    """Comment lines with the host facts a package line does not show."""
    note = foreign_note(lock, lock.host)
    if note is not None:
        return [f"# {note}"]
    return [
        f"# host {lock.host} ({lock.role}), python {lock.interpreter.version} "
        f"{lock.interpreter.abi}, {platform_summary(lock)}",
        f"# gpu {gpu_summary(lock) or '-'}",
        f"# indexes {' '.join(lock.indexes) or '-'}"
        + (f"; find-links {' '.join(lock.find_links)}" if lock.find_links else ""),
        f"# digest {lock.digest}; manifest sha256:{lock.manifest_sha256} ({lock.manifest_files} files)",
    ]


def textconv(lock: Lock) -> str:
    """Sorted, one line per package, after the header lines."""
    lines = header(lock)
    lines += [_package_line(pkg) for pkg in sorted(lock.packages, key=lambda p: p.name)]
    return "\n".join(lines) + "\n"


def manifest_textconv(entries: list[FileEntry]) -> str:
    """One header line per owner (package), then its files, indented."""
    by_owner: dict[str, list[FileEntry]] = {}
    for entry in entries:
        by_owner.setdefault(entry.owner, []).append(entry)
    lines = [f"# envlock file manifest: {len(entries)} files, {len(by_owner)} owners"]
    for owner in sorted(by_owner):
        files = sorted(by_owner[owner], key=lambda e: e.path)
        lines.append(f"{owner} ({len(files)} files, {human_size(sum(e.size for e in files))})")
        lines += [f"    {e.path}  {e.kind}  {e.size}  {e.sha256}" for e in files]
    return "\n".join(lines) + "\n"


def _textconv_text(path: Path, shown: str) -> str:
    if path.name.endswith(".files.tsv"):
        return manifest_textconv(parse_manifest(read_manifest_bytes(path, shown), shown))
    return textconv(read_any_lock(path, shown=shown))


def _lock_path(root: str | None, spec: str) -> tuple[Path, str]:
    path = Path(spec)
    if path.suffix in (".toml", ".tsv") or "/" in spec or path.is_file():
        return path, spec
    workspace = open_workspace(root, need_hosts=False)
    path = workspace.lock_path(spec)
    return path, workspace.shown(path)


def run(args: argparse.Namespace) -> int:
    path, shown = _lock_path(args.root, args.lock)
    if args.textconv:
        try:
            sys.stdout.write(_textconv_text(path, shown))
        except EnvlockError as exc:
            # git shows whatever textconv prints: never leave it with nothing.
            sys.stdout.write(f"# envlock show --textconv: {exc}; the raw file follows\n")
            sys.stdout.flush()
            with contextlib.suppress(OSError):
                sys.stdout.buffer.write(path.read_bytes())
        return int(ExitCode.OK)
    lock = read_any_lock(path, shown=shown)
    if args.format == "json":
        payload = {
            "lock": shown,
            "host": lock.host,
            "notes": [note] if (note := foreign_note(lock, shown)) else [],
            "packages": [
                {
                    "name": p.name,
                    "version": p.version,
                    "source": p.source,
                    "wheel": p.wheel.filename,
                    "sha256": p.wheel.sha256,
                }
                for p in lock.packages
            ],
        }
        print(envelope("show", True, {"result": payload}))
        return int(ExitCode.OK)
    rows = [
        [p.name, p.version, p.source, p.wheel.filename, human_size(p.size), str(len(p.native) or "")]
        for p in sorted(lock.packages, key=lambda p: p.name)
    ]
    print("\n".join(header(lock)))
    print(table(["package", "version", "source", "wheel", "size", ".so"], rows, right=(4, 5)))
    return int(ExitCode.OK)
