"""The workspace: a directory holding hosts/ and locks/, like a git repo of a fleet."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote

from envlock.errors import EnvlockError, LockError

if TYPE_CHECKING:  # the lock modules are imported when a lock is read: start-up stays small
    from envlock.config import WorkspaceConfig
    from envlock.lock.head import LockHead
    from envlock.lock.model import FileEntry, Lock


@dataclass(frozen=True, slots=True)
class LockedVenv:
    """A host's lock and its manifest, both as envlock wrote them (checked when read)."""

    lock: Lock
    manifest: bytes
    shown: str  # the lock's path as the user sees it
    manifest_shown: str

    def rows(self) -> list[FileEntry]:
        """The manifest's rows; each package's rows must give its tree digest."""
        from envlock.lock.digest import tree_digest
        from envlock.lock.manifest import parse_manifest

        rows = parse_manifest(self.manifest, self.manifest_shown)
        by_owner: dict[str, list[FileEntry]] = {}
        for row in rows:
            by_owner.setdefault(row.owner, []).append(row)
        for pkg in self.lock.packages:
            if tree_digest(by_owner.get(pkg.name, [])) != pkg.tree_digest:
                raise LockError(
                    f"{self.shown}: {pkg.name}: tree-digest does not match the manifest (edited by hand?)"
                )
        return rows


@dataclass(frozen=True, slots=True)
class Workspace:
    root: Path
    # where discovery started when no hosts/ was found from there up (None: found, or --root given)
    searched_from: Path | None = None

    @property
    def hosts_dir(self) -> Path:
        return self.root / "hosts"

    @property
    def locks_dir(self) -> Path:
        return self.root / "locks"

    @property
    def store_dir(self) -> Path:
        # ENVLOCK_STORE lets a fleet share one store; the default keeps the
        # workspace self-contained (and git-ignored, see .gitignore).
        env = os.environ.get("ENVLOCK_STORE")
        return Path(env) if env else self.root / "store"

    def config(self) -> WorkspaceConfig:
        """``envlock.toml`` (shared store, publish index); empty when the workspace has none."""
        from envlock.config import load_config

        return load_config(self.root)

    def no_hosts_dir(self) -> str | None:
        """Why there are no host profiles to read, saying where envlock looked; None when hosts/ exists."""
        if self.hosts_dir.is_dir():
            return None
        if self.searched_from is not None:
            return (
                f"not in an envlock workspace: no hosts/ directory in {self.searched_from} or any "
                "directory above it (run envlock from inside a workspace, or pass --root DIR)"
            )
        return f"{self.hosts_dir}: no such directory (is --root {self.root} the workspace?)"

    def lock_path(self, host: str) -> Path:
        """The host's lock to read: ``pylock.<lock_name(host)>.toml``, or the name older
        envlocks wrote (the raw host name) when only that exists."""
        new = self.locks_dir / f"pylock.{lock_name(host)}.toml"
        old = self.locks_dir / f"pylock.{host}.toml"
        return old if old != new and not new.exists() and old.exists() else new

    def manifest_path(self, host: str) -> Path:
        """The manifest beside ``lock_path(host)`` (same name, ``.files.tsv``)."""
        lock = self.lock_path(host)
        return lock.with_name(lock.name.removesuffix(".toml") + ".files.tsv")

    def _written_paths(self, host: str) -> tuple[Path, Path]:
        """Where a lock is written: always the PEP 751 name."""
        name = lock_name(host)
        return self.locks_dir / f"pylock.{name}.toml", self.locks_dir / f"pylock.{name}.files.tsv"

    def legacy_lock_files(self, host: str) -> list[Path]:
        """The files under the names older envlocks wrote (``pylock.gpu01.lab.toml``) that exist;
        the next write removes them, so an unchanged-lock memo must not skip that write."""
        if lock_name(host) == host:
            return []
        old = (self.locks_dir / f"pylock.{host}.toml", self.locks_dir / f"pylock.{host}.files.tsv")
        return [path for path in old if path.exists()]

    def profile_path(self, host: str) -> Path:
        return self.hosts_dir / f"{host}.toml"

    def shown(self, path: Path) -> str:
        """A path as messages show it: relative to the workspace when inside it."""
        return str(path.relative_to(self.root)) if path.is_relative_to(self.root) else str(path)

    def read_lock(self, host: str) -> Lock:
        """``locks/pylock.<host>.toml``, refused when its digest does not cover what it says."""
        from envlock.lock.digest import check_lock_digest
        from envlock.lock.io import read_lock

        path = self.lock_path(host)
        lock = read_lock(path, shown=self.shown(path))
        check_lock_digest(lock, self.shown(path))
        return lock

    def read_lock_head(self, host: str) -> LockHead:
        """What a no-op apply needs of ``read_lock(host)``, remembered per lock content
        (``envlock.lock.head`` says why that is as sound as parsing it again)."""
        from envlock.lock import head
        from envlock.lock.io import read_lock_text

        path = self.lock_path(host)
        shown = self.shown(path)
        text = read_lock_text(path, shown)
        key = head.content_key(text.encode("utf-8"))
        memo = cache_dir() / "lockheads"
        found = head.recall(memo, key)
        if found is None:
            from envlock.lock.digest import check_lock_digest
            from envlock.lock.io import lock_from_text

            lock = lock_from_text(text, shown)  # the very bytes hashed, not a second read
            check_lock_digest(lock, shown)
            found = head.head_of(lock)
            head.remember(memo, key, found)
        return found

    def read_locked(self, host: str, lock: Lock | None = None) -> LockedVenv:
        """The lock (``lock``: already read by ``read_lock``) and its manifest, the manifest's
        sha256 checked against the lock's."""
        from envlock.lock.manifest import manifest_sha256, read_manifest_bytes

        lock = lock or self.read_lock(host)
        shown, manifest_path = self.shown(self.lock_path(host)), self.manifest_path(host)
        manifest_shown = self.shown(manifest_path)
        data = read_manifest_bytes(manifest_path, manifest_shown)
        if manifest_sha256(data) != lock.manifest_sha256:
            raise LockError(
                f"{manifest_shown}: sha256 does not match {shown}'s tool.envlock.manifest.sha256 "
                "(edited by hand? capture again or restore it)"
            )
        return LockedVenv(lock, data, shown, manifest_shown)

    def lock_is_current(self, host: str, lock: Lock, manifest: bytes) -> bool:
        """Would writing ``lock`` and ``manifest`` change nothing on disk?"""
        from envlock.lock.io import render_lock

        path, manifest_path = self._written_paths(host)
        return (
            not self.legacy_lock_files(host)
            and path.is_file()
            and manifest_path.is_file()
            and path.read_bytes() == render_lock(lock)
            and manifest_path.read_bytes() == manifest
        )

    def write_lock_if_changed(self, host: str, lock: Lock, manifest: bytes) -> bool:
        """Write the lock and its manifest (atomically, manifest first) unless identical; True if written."""
        from envlock.lock.io import write_lock

        if self.lock_is_current(host, lock, manifest):
            return False
        write_lock(lock, *self._written_paths(host), manifest)
        for old in self.legacy_lock_files(host):  # renamed: one lock per host, under the PEP 751 name
            old.unlink(missing_ok=True)
        return True


# PEP 751: a lock file is ``pylock.toml`` or ``pylock.<name>.toml`` where the
# name holds no dot. Host names may (``gpu01.lab``), so every character
# outside [A-Za-z0-9_-] is percent-encoded (UTF-8): ``gpu01%2Elab``. The
# mapping is reversible (``host_of_lock_name``) and ``%`` is never in a host name.
_PLAIN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def lock_name(host: str) -> str:
    """The name part of ``pylock.<name>.toml`` for a host: ``gpu01.lab`` -> ``gpu01%2Elab``."""
    return "".join(ch if ch in _PLAIN else "".join(f"%{b:02X}" for b in ch.encode()) for ch in host)


def host_of_lock_name(name: str) -> str:
    """``lock_name`` reversed: ``gpu01%2Elab`` -> ``gpu01.lab``."""
    return unquote(name, errors="strict")


def find_root(start: Path) -> Path | None:
    """The nearest directory holding ``hosts/``, from ``start`` up (as git finds its repository)."""
    for candidate in (start, *start.parents):
        if (candidate / "hosts").is_dir():
            return candidate
    return None


def open_workspace(root: str | os.PathLike[str] | None, need_hosts: bool = True) -> Workspace:
    """``--root`` as given, else the nearest directory holding hosts/ from the current one up.

    Found nowhere: an error saying where envlock looked, unless ``need_hosts`` is
    False (diff, show, review: lock files named by path work anywhere), where the
    current directory stands in and reading a host profile says where it looked.
    """
    if root is not None:
        path = Path(root)
        if not path.is_dir():
            raise EnvlockError(f"{path}: workspace directory does not exist")
        return Workspace(root=path.resolve())
    cwd = Path.cwd().resolve()
    found = find_root(cwd)
    if found:
        return Workspace(root=found)
    workspace = Workspace(root=cwd, searched_from=cwd)
    if need_hosts:
        raise EnvlockError(workspace.no_hosts_dir() or "")
    return workspace


def cache_dir() -> Path:
    """Per-user cache on the controller (index answers, agent bundles)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "envlock"
