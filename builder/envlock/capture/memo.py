"""Recognise a venv unchanged since the last capture (the warm path)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from envlock.hosts import HostProfile
from envlock.lock.model import Lock
from envlock.tmpname import private_sibling
from envlock.workspace import Workspace, cache_dir


class UnchangedMemo:
    """Recognises a venv that has not changed since the last capture wrote the lock.

    The agent's stdout depends on the venv's content alone (statistics go to
    stderr), so the same stdout, profile, store and envlock version with the
    lock and manifest still as written means the lock would come out the same.
    """

    def __init__(self, workspace: Workspace, profile: HostProfile, raw: bytes) -> None:
        from envlock.codekey import code_key

        self.workspace, self.profile = workspace, profile
        # code_key, not __version__: a development install changes its code
        # without changing its version, and then the lock may come out differently.
        parts = [code_key(), str(workspace.root), str(workspace.store_dir), profile.name]
        key = hashlib.sha256("|".join(parts).encode())
        key.update(profile.path.as_posix().encode())
        key.update(read_or_empty(workspace.root / profile.path))
        key.update(raw)
        self.key = key.hexdigest()
        self.path = (
            cache_dir()
            / "captures"
            / f"{hashlib.sha256(str(workspace.root).encode()).hexdigest()[:16]}-{profile.name}.json"
        )

    def _files_digest(self) -> str:
        digest = hashlib.sha256()
        for path in (
            self.workspace.lock_path(self.profile.name),
            self.workspace.manifest_path(self.profile.name),
        ):
            digest.update(read_or_empty(path))
        return digest.hexdigest()

    def lookup(self) -> Lock | None:
        try:
            memo = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if memo.get("key") != self.key or memo.get("files") != self._files_digest():
            return None
        if self.workspace.legacy_lock_files(self.profile.name):
            return None  # written under an old name: write it again under the PEP 751 one
        from envlock.lock.io import read_lock

        lock = read_lock(self.workspace.lock_path(self.profile.name))
        locks_dir = self.workspace.locks_dir
        if any(p.wheel.path and not (locks_dir / p.wheel.path).is_file() for p in lock.packages):
            return None  # a store wheel went missing: rebuild (and repack) properly
        return lock

    def remember(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = private_sibling(self.path)
        tmp.write_text(json.dumps({"key": self.key, "files": self._files_digest()}), encoding="utf-8")
        os.replace(tmp, self.path)


def read_or_empty(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""
