"""``envlock gc``: free what no lock in the workspace needs, in the store and in the user's cache.

Kept: every store object a lock in ``locks/`` names (its wheel and the index
wheel a repacked package was patched from, by sha256 and file name; the
blobs of its entry-point scripts and editable source trees);
``quarantine/`` (corrupt copies kept as evidence, see ``store.py``); the
cache's memos (small; they are what keeps capture, verify and lock quick);
the current agent bundle. Freed: every other store wheel and blob; in the
cache, objects of the local transfer drop (``artifacts/``) that no lock
needs (the next apply pushes them again from the store) and agent bundles
of other envlock versions.

A lock that cannot be read stops gc before anything is deleted: what it
needs would be unknown. A wheel only a lock in git history needs is not
kept; for a repacked package the store holds the only copy, hence
``--dry-run``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path

from envlock.errors import EnvlockError
from envlock.lock.io import read_lock
from envlock.lock.model import Lock
from envlock.store import Store
from envlock.workspace import Workspace, cache_dir

# The local transport's drop (transfer.py): on this machine, under the user's home.
LOCAL_DROP = "~/.cache/envlock/artifacts"
BUNDLE_PREFIX = "envlock-agent-"


@dataclass(frozen=True, slots=True, kw_only=True)
class Freeable:
    path: Path
    size: int
    what: str  # "store wheel", "store blob", "transfer drop", "agent bundle"


@dataclass(frozen=True, slots=True, kw_only=True)
class GcResult:
    store: Path
    cache: Path
    locks: tuple[str, ...]  # the locks whose needs were kept
    freed: tuple[Freeable, ...]  # freed, or (dry run) what would be
    kept_objects: int  # store and drop objects some lock needs
    kept_bytes: int
    memo_bytes: int  # the cache's memos, kept
    dry_run: bool

    @property
    def freed_bytes(self) -> int:
        return sum(f.size for f in self.freed)


@dataclass(frozen=True, slots=True)
class Needs:
    wheels: frozenset[tuple[str, str]]  # (sha256, file name)
    blobs: frozenset[str]

    @property
    def shas(self) -> frozenset[str]:
        return frozenset(sha for sha, _ in self.wheels) | self.blobs


def needs_of(locks: list[Lock]) -> Needs:
    wheels: set[tuple[str, str]] = set()
    blobs: set[str] = set()
    for lock in locks:
        for pkg in lock.packages:
            for art in (pkg.wheel, pkg.origin):
                if art is not None:
                    wheels.add((art.sha256, art.filename))
            blobs.update(pkg.scripts.values())
            if pkg.source_tree is not None:
                blobs.add(pkg.source_tree.sha256)
    return Needs(frozenset(wheels), frozenset(blobs))


def _read_locks(workspace: Workspace) -> tuple[list[str], list[Lock]]:
    paths = sorted(workspace.locks_dir.glob("pylock.*.toml")) if workspace.locks_dir.is_dir() else []
    shown = [workspace.shown(p) for p in paths]
    try:
        return shown, [read_lock(p, shown=s) for p, s in zip(paths, shown, strict=True)]
    except EnvlockError as exc:
        raise EnvlockError(f"{exc}; gc deletes nothing while a lock cannot be read") from exc


def _size(path: Path) -> int:
    if path.is_symlink() or not path.is_dir():
        return path.lstat().st_size
    return sum((Path(d) / f).lstat().st_size for d, _, files in os.walk(path) for f in files)


def _store_objects(store: Store, needs: Needs) -> tuple[list[Freeable], list[Path]]:
    """(unneeded, needed) objects of the store; names starting with "." are writes in progress."""
    free: list[Freeable] = []
    kept: list[Path] = []
    wheels = store.root / "wheels"
    for sha_dir in sorted(wheels.iterdir()) if wheels.is_dir() else []:
        for wheel in sorted(sha_dir.iterdir()):
            if wheel.name.startswith("."):
                continue
            if (sha_dir.name, wheel.name) in needs.wheels:
                kept.append(wheel)
            else:
                free.append(Freeable(path=wheel, size=_size(wheel), what="store wheel"))
    blobs = store.root / "blobs"
    _keep_named(sorted(blobs.glob("*/*")) if blobs.is_dir() else [], needs.blobs, "store blob", free, kept)
    return free, kept


def _drop_objects(drop: Path, needs: Needs) -> tuple[list[Freeable], list[Path]]:
    free: list[Freeable] = []
    kept: list[Path] = []
    _keep_named(sorted(drop.iterdir()) if drop.is_dir() else [], needs.shas, "transfer drop", free, kept)
    return free, kept


def _keep_named(
    paths: list[Path], wanted: AbstractSet[str], what: str, free: list[Freeable], kept: list[Path]
) -> None:
    """Objects named by their sha256: kept when a lock needs that name, else freeable.
    Dot-names are partial writes of a transfer or a store write in progress: left alone."""
    for path in paths:
        if path.name.startswith("."):
            continue
        if path.name in wanted:
            kept.append(path)
        else:
            free.append(Freeable(path=path, size=_size(path), what=what))


def _old_bundles(cache: Path, current_key: str) -> list[Freeable]:
    if not cache.is_dir():
        return []
    return [
        Freeable(path=p, size=_size(p), what="agent bundle")
        for p in sorted(cache.iterdir())
        if p.name.startswith(BUNDLE_PREFIX) and not p.name.startswith(BUNDLE_PREFIX + current_key)
    ]


def _current_bundle_key() -> str:
    from envlock.transport import bundle_key_and_bytes

    key, _ = bundle_key_and_bytes()
    return key


def gc(workspace: Workspace, *, dry_run: bool) -> GcResult:
    shown, locks = _read_locks(workspace)
    needs = needs_of(locks)
    store = Store(workspace.store_dir)
    cache = cache_dir()
    drop = Path(os.path.expanduser(LOCAL_DROP))
    store_free, store_kept = _store_objects(store, needs)
    drop_free, drop_kept = _drop_objects(drop, needs)
    bundles = _old_bundles(cache, _current_bundle_key())
    freed = tuple(store_free + drop_free + bundles)
    kept = store_kept + drop_kept
    counted = {f.path for f in freed} | set(kept) | {drop}
    memos = [p for p in sorted(cache.iterdir()) if p not in counted] if cache.is_dir() else []
    memo_bytes = sum(_size(p) for p in memos if not p.name.startswith(BUNDLE_PREFIX))
    if not dry_run:
        for item in freed:
            try:
                if item.path.is_dir() and not item.path.is_symlink():
                    shutil.rmtree(item.path)
                else:
                    item.path.unlink()
            except OSError as exc:
                raise EnvlockError(f"{item.path}: cannot delete: {exc.strerror}") from exc
            if item.what.startswith("store"):  # wheels/<sha256>/ and blobs/<xx>/ left empty
                with contextlib.suppress(OSError):  # not empty
                    item.path.parent.rmdir()
    return GcResult(
        store=store.root,
        cache=cache,
        locks=tuple(shown),
        freed=freed,
        kept_objects=len(kept),
        kept_bytes=sum(_size(p) for p in kept),
        memo_bytes=memo_bytes,
        dry_run=dry_run,
    )
