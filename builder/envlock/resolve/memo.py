"""Recognise a resolution whose inputs have not changed (the warm ``envlock lock``).

A lock depends on the reference lock and manifest, the target's profile and
environment, the envlock code, and (only when a package's reference artifact
did not do) the indexes. So a resolution that asked no index is reused as
long as those inputs and the written lock are unchanged; one that asked an
index is always redone, since an index can change between runs.

A reused resolution reads neither lock: the memo keeps what the command
reports (each package's name, version, wheel and sha256, the lock's digest)
and the reference's glibc (the one fact of the reference that the target's
environment may take), each valid only while the bytes it came from are
unchanged. Parsing the two 300-package locks was most of a warm run.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envlock.codekey import code_key
from envlock.hosts import HostProfile
from envlock.resolve.target import TargetEnv
from envlock.tmpname import private_sibling
from envlock.workspace import Workspace, cache_dir

if TYPE_CHECKING:
    from envlock.lock.model import Lock


@dataclass(frozen=True, slots=True)
class LockedPackage:
    """What ``envlock lock`` reports of one package of the lock it wrote."""

    name: str
    version: str
    wheel: str
    sha256: str
    source: str


@dataclass(frozen=True, slots=True)
class LockSummary:
    host: str
    reference: str | None
    digest: str
    packages: tuple[LockedPackage, ...]

    @classmethod
    def of(cls, lock: Lock) -> LockSummary:
        rows = tuple(
            LockedPackage(p.name, p.version, p.wheel.filename, p.wheel.sha256, p.source)
            for p in lock.packages
        )
        return cls(host=lock.host, reference=lock.reference, digest=lock.digest, packages=rows)

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "reference": self.reference,
            "digest": self.digest,
            "packages": [[p.name, p.version, p.wheel, p.sha256, p.source] for p in self.packages],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LockSummary:
        rows = tuple(LockedPackage(*(str(v) for v in row)) for row in data["packages"])
        return cls(host=data["host"], reference=data["reference"], digest=data["digest"], packages=rows)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


class LockMemo:
    def __init__(self, workspace: Workspace, profile: HostProfile) -> None:
        assert profile.reference is not None
        self.workspace, self.host = workspace, profile.name
        inputs = hashlib.sha256()
        for part in (code_key(), str(workspace.root), str(workspace.store_dir)):
            inputs.update(part.encode() + b"\0")
        for path in (
            workspace.root / profile.path,
            workspace.root / "envlock.toml",  # where the store is: a shared store can hold other wheels
            workspace.lock_path(profile.reference),
            workspace.manifest_path(profile.reference),
        ):
            inputs.update(hashlib.sha256(_read(path)).digest())
        # everything but the target's environment, which may come from the reference (its glibc)
        self.inputs = inputs.hexdigest()
        place = hashlib.sha256(str(workspace.root).encode()).hexdigest()[:16]
        self.path = cache_dir() / "locks" / f"{place}-{profile.name}.json"
        self._memo: dict[str, Any] | None = None

    def _load(self) -> dict[str, Any]:
        if self._memo is None:
            try:
                loaded = json.loads(self.path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                loaded = {}
            self._memo = loaded if isinstance(loaded, dict) else {}
        return self._memo

    def _key(self, env: TargetEnv) -> str:
        return hashlib.sha256(f"{self.inputs}\0{env!r}".encode()).hexdigest()

    def _written(self) -> str:
        digest = hashlib.sha256()
        for path in (self.workspace.lock_path(self.host), self.workspace.manifest_path(self.host)):
            digest.update(hashlib.sha256(_read(path)).digest())
        return digest.hexdigest()

    def reference_libc(self) -> str | None:
        """The reference lock's glibc as last read, while the reference's bytes are unchanged."""
        memo = self._load()
        libc = memo.get("reference_libc")
        return libc if memo.get("inputs") == self.inputs and isinstance(libc, str) else None

    def lookup(self, env: TargetEnv) -> tuple[dict[str, str], LockSummary] | None:
        """The deviations and report of the unchanged resolution, or None when it must be redone."""
        memo = self._load()
        if memo.get("key") != self._key(env) or memo.get("written") != self._written():
            return None
        if self.workspace.legacy_lock_files(self.host):
            return None  # written under an old name: write it again under the PEP 751 one
        try:
            summary = LockSummary.from_json(memo["summary"])
        except (KeyError, TypeError, ValueError):
            return None  # a memo from before summaries, or not one this code wrote
        deviations: dict[str, str] = memo["deviations"]
        return deviations, summary

    def remember(
        self, env: TargetEnv, reference: Lock, lock: Lock, deviations: dict[str, str], asked_an_index: bool
    ) -> None:
        if asked_an_index:
            self.path.unlink(missing_ok=True)
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = private_sibling(self.path)
        memo = {
            "key": self._key(env),
            "inputs": self.inputs,
            "reference_libc": reference.platform.libc_version,
            "written": self._written(),
            "deviations": deviations,
            "summary": LockSummary.of(lock).to_json(),
        }
        tmp.write_text(json.dumps(memo))
        os.replace(tmp, self.path)
