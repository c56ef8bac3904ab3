"""How two locks, or a lock and a live venv, differ: the shared vocabulary.

Change kinds and version direction (``diff``, ``review``, ``apply``'s
plan, the resolver's reasons) and rpm-style row comparison (``verify``,
``review``, apply's drift check) are defined once, here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from packaging.version import InvalidVersion, Version

from envlock.lock.model import FileEntry

ChangeKind = Literal["upgrade", "downgrade", "added", "removed", "artifact"]


def version_kind(before: str, after: str) -> ChangeKind:
    """``artifact`` for the same version; else the direction (not PEP 440: an upgrade, order unknown)."""
    if before == after:
        return "artifact"
    try:
        return "downgrade" if Version(after) < Version(before) else "upgrade"
    except InvalidVersion:
        return "upgrade"


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
