"""Content-addressed artifact store, keyed by sha256.

Layout: ``wheels/<sha256>/<file name>`` (the file name is kept because
installers read tags from it) and ``blobs/<sha256>`` for loose files such as
entry-point scripts. Writes go to a temp name and are renamed only after
the bytes hashed right, so a partial file never takes a final name.

An object whose bytes no longer hash to its name (a disk error, a hand
edit) is moved to ``quarantine/`` rather than deleted or reused: it is
evidence, and the next fetch or capture writes a good copy in its place.

With a shared store (``envlock.toml`` ``[store] url``, docs/store.md) this
directory is a cache: an object missing here is fetched from ``remote`` (same
layout, relative URLs ``wheels/<sha256>/<name>`` and ``blobs/<xx>/<sha256>``)
and checked against its sha256 before it takes its name here.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

from envlock.errors import EnvlockError
from envlock.tmpname import create_exclusive, private_sibling
from envlock.workspace import Workspace


def wheel_key(sha256: str, filename: str) -> str:
    """An object's path inside any store, local directory or URL: the one layout."""
    return f"wheels/{sha256}/{filename}"


def blob_key(sha256: str) -> str:
    return f"blobs/{sha256[:2]}/{sha256}"


@dataclass(frozen=True)
class Store:
    root: Path
    remote: str | None = None  # the shared store's URL (ends in "/"), read when an object is not here

    def wheel_path(self, sha256: str, filename: str) -> Path:
        return self.root / wheel_key(sha256, filename)

    def blob_path(self, sha256: str) -> Path:
        return self.root / blob_key(sha256)

    def has_wheel(self, sha256: str, filename: str) -> bool:
        return self.wheel_path(sha256, filename).is_file()

    def put_wheel(self, data: bytes, filename: str, expected_sha256: str | None = None) -> tuple[Path, str]:
        sha = hashlib.sha256(data).hexdigest()
        if expected_sha256 is not None and sha != expected_sha256:
            raise EnvlockError(f"{filename}: sha256 {sha} does not match expected {expected_sha256}")
        path = self.wheel_path(sha, filename)
        self._write(path, data)
        return path, sha

    def put_blob(self, data: bytes) -> str:
        sha = hashlib.sha256(data).hexdigest()
        self._write(self.blob_path(sha), data)
        return sha

    def quarantine(self, path: Path) -> Path:
        """Move a corrupt object out of the way, into ``quarantine/``; return where it went."""
        rel = path.relative_to(self.root).as_posix().replace("/", "_")
        target = self.root / "quarantine" / f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{rel}"
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, target)
        return target

    def _write(self, path: Path, data: bytes) -> None:
        if path.is_file():
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = private_sibling(path, ".part")
        with create_exclusive(tmp) as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(tmp, path)


def open_store(workspace: Workspace) -> Store:
    """The workspace's store: its directory (``store/`` or ``ENVLOCK_STORE``), backed by
    ``[store] url`` from ``envlock.toml`` when there is one."""
    return Store(workspace.store_dir, workspace.config().store.url)
