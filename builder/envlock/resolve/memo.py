"""Recognise a resolution whose inputs have not changed (the warm ``envlock lock``).

A lock depends on the reference lock and manifest, the target's profile and
environment, the envlock code, and (only when a package's reference artifact
did not do) the indexes. So a resolution that asked no index is reused as
long as those inputs and the written lock are unchanged; one that asked an
index is always redone, since an index can change between runs.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from envlock.hosts import HostProfile
from envlock.resolve.target import TargetEnv
from envlock.tmpname import private_sibling
from envlock.transport.bundle import code_key
from envlock.workspace import Workspace, cache_dir


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


class LockMemo:
    def __init__(self, workspace: Workspace, profile: HostProfile, env: TargetEnv) -> None:
        assert profile.reference is not None
        self.workspace, self.host = workspace, profile.name
        key = hashlib.sha256()
        for part in (code_key(), str(workspace.root), str(workspace.store_dir), repr(env)):
            key.update(part.encode() + b"\0")
        for path in (
            workspace.root / profile.path,
            workspace.lock_path(profile.reference),
            workspace.manifest_path(profile.reference),
        ):
            key.update(hashlib.sha256(_read(path)).digest())
        self.key = key.hexdigest()
        place = hashlib.sha256(str(workspace.root).encode()).hexdigest()[:16]
        self.path = cache_dir() / "locks" / f"{place}-{profile.name}.json"

    def _written(self) -> str:
        digest = hashlib.sha256()
        for path in (self.workspace.lock_path(self.host), self.workspace.manifest_path(self.host)):
            digest.update(hashlib.sha256(_read(path)).digest())
        return digest.hexdigest()

    def lookup(self) -> dict[str, str] | None:
        """The deviations of the unchanged resolution, or None when it must be redone."""
        try:
            memo = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if memo.get("key") != self.key or memo.get("written") != self._written():
            return None
        if self.workspace.legacy_lock_files(self.host):
            return None  # written under an old name: write it again under the PEP 751 one
        deviations: dict[str, str] = memo["deviations"]
        return deviations

    def remember(self, deviations: dict[str, str], asked_an_index: bool) -> None:
        if asked_an_index:
            self.path.unlink(missing_ok=True)
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = private_sibling(self.path)
        tmp.write_text(json.dumps({"key": self.key, "written": self._written(), "deviations": deviations}))
        os.replace(tmp, self.path)
