"""``envlock verify HOST``: the live venv against its lock, file by file, like ``rpm -V``.

The locked side is ``locks/pylock.<host>.toml`` and its manifest, whose
sha256 must be the one the lock records (a manifest edited by hand is an
error, not drift). The live side is the agent's snapshot turned into
manifest rows by capture's own functions (``capture.live``), so an
untouched file gives the identical row. When the live manifest's sha256 is
the recorded one, every file matches and no row is compared; otherwise rows
are compared by path and each difference is reported with rpm-style flags:

    S  size differs        5  sha256 differs
    M  kind differs (f regular, x executable, l symlink)
    L  symlink target differs
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from envlock.capture.live import LiveVenv, snapshot_live
from envlock.errors import LockError
from envlock.lock.digest import check_lock_digest
from envlock.lock.io import read_lock
from envlock.lock.manifest import manifest_sha256, parse_manifest, read_manifest_bytes
from envlock.lock.model import FileEntry, Lock
from envlock.reporter import Reporter
from envlock.workspace import Workspace

FLAGS = "S5ML"


@dataclass(frozen=True, slots=True)
class FileDrift:
    """One file that is not as locked."""

    path: str
    owner: str  # the locked owner, else the live one
    state: Literal["changed", "missing", "extra"]
    flags: str = ""  # for "changed": e.g. ".5.." (see FLAGS)
    locked: FileEntry | None = None
    live: FileEntry | None = None


@dataclass(frozen=True, slots=True)
class DistDrift:
    """A distribution whose version differs, or that only one side has."""

    name: str
    state: Literal["version", "missing", "extra"]
    locked: str | None  # version in the lock
    live: str | None  # version in the venv


@dataclass(frozen=True, slots=True)
class VerifyResult:
    host: str
    venv: str
    lock_path: Path
    files_checked: int
    dists: tuple[DistDrift, ...]
    files: tuple[FileDrift, ...]
    python_locked: str
    python_live: str
    stats: Mapping[str, int] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    bytecode: tuple[tuple[str, str], ...] = ()  # damaged .pyc files (path, why): imports would fail

    @property
    def clean(self) -> bool:
        return not (self.dists or self.files or self.bytecode or self.python_locked != self.python_live)


def read_locked(workspace: Workspace, host: str) -> tuple[Lock, bytes]:
    """The lock and its manifest's bytes, the manifest checked against the lock's sha256."""
    lock_path = workspace.lock_path(host)
    shown = str(lock_path.relative_to(workspace.root))
    lock = read_lock(lock_path, shown=shown)
    check_lock_digest(lock, shown)
    manifest_path = workspace.manifest_path(host)
    shown_manifest = str(manifest_path.relative_to(workspace.root))
    data = read_manifest_bytes(manifest_path, shown_manifest)
    if manifest_sha256(data) != lock.manifest_sha256:
        raise LockError(
            f"{shown_manifest}: sha256 does not match {shown}'s tool.envlock.manifest.sha256 "
            "(edited by hand? capture again or restore it)"
        )
    return lock, data


def verify(
    workspace: Workspace,
    host: str,
    *,
    use_cache: bool = True,
    jobs: int = 0,
    reporter: Reporter | None = None,
) -> VerifyResult:
    """Compare ``host``'s live venv with its lock."""
    lock_path = workspace.lock_path(host)
    if not lock_path.is_file():
        read_lock(lock_path, shown=str(lock_path.relative_to(workspace.root)))  # raises the usual message
    # The agent is another process: read and check the lock while it walks the venv.
    with ThreadPoolExecutor(max_workers=1) as pool:
        running = pool.submit(
            snapshot_live, workspace, host, use_cache=use_cache, jobs=jobs, reporter=reporter
        )
        lock, manifest = read_locked(workspace, host)
        live = running.result()
    return compare(lock, manifest, live, lock_path)


def compare(lock: Lock, manifest: bytes, live: LiveVenv, lock_path: Path) -> VerifyResult:
    live_sha, live_dists, live_python = live.digest
    dists = compare_dists({p.name: p.version for p in lock.packages}, live_dists)
    if live_sha == lock.manifest_sha256:
        files: tuple[FileDrift, ...] = ()
        warnings: tuple[str, ...] = ()
    else:
        locked_rows = parse_manifest(manifest, str(lock_path.with_name(lock_path.stem + ".files.tsv")))
        # The venv creator's own files (":venv": pyvenv.cfg, bin/python*,
        # activate scripts) sit outside the digest rules: they differ by
        # creator and host, and a resolved target lock does not record them.
        files = compare_rows(
            [r for r in locked_rows if r.owner != ":venv"], [r for r in live.rows if r.owner != ":venv"]
        )
        warnings = live.warnings
    return VerifyResult(
        host=live.host,
        venv=lock.venv,
        lock_path=lock_path,
        files_checked=lock.manifest_files,
        dists=dists,
        files=files,
        python_locked=lock.interpreter.version,
        python_live=live_python,
        stats=live.stats,
        warnings=warnings,
        bytecode=live.bytecode,
    )


def compare_dists(locked: Mapping[str, str], live: Mapping[str, str]) -> tuple[DistDrift, ...]:
    drift = []
    for name in sorted(set(locked) | set(live)):
        before, now = locked.get(name), live.get(name)
        if before == now:
            continue
        state: Literal["version", "missing", "extra"] = (
            "extra" if before is None else "missing" if now is None else "version"
        )
        drift.append(DistDrift(name=name, state=state, locked=before, live=now))
    return tuple(drift)


def compare_rows(locked: Iterable[FileEntry], live: Iterable[FileEntry]) -> tuple[FileDrift, ...]:
    """Every path whose row differs, sorted by path."""
    want = {row.path: row for row in locked}
    have = {row.path: row for row in live}
    drift = []
    for path in sorted(set(want) | set(have)):
        before, now = want.get(path), have.get(path)
        if before == now:
            continue
        if now is None:
            assert before is not None
            drift.append(FileDrift(path=path, owner=before.owner, state="missing", locked=before))
        elif before is None:
            drift.append(FileDrift(path=path, owner=now.owner, state="extra", live=now))
        else:
            flags = change_flags(before, now)
            if flags.strip("."):
                drift.append(
                    FileDrift(
                        path=path, owner=before.owner, state="changed", flags=flags, locked=before, live=now
                    )
                )
    return tuple(drift)


def change_flags(locked: FileEntry, live: FileEntry) -> str:
    """rpm -V style flags, one position per FLAGS letter, ``.`` where equal."""
    if "l" in (locked.kind, live.kind):
        hit = {"M"} if locked.kind != live.kind else {"L"} if locked.sha256 != live.sha256 else set()
    else:
        hit = set()
        if locked.size != live.size:
            hit.add("S")
        if locked.sha256 != live.sha256:
            hit.add("5")
        if locked.kind != live.kind:
            hit.add("M")
    return "".join(flag if flag in hit else "." for flag in FLAGS)
