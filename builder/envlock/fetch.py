"""Fetch a lock's artifacts into the store, refusing any wrong byte.

Each artifact is read once: copied (file://) or downloaded (http) into the
store while it is hashed, and only bytes with the locked sha256 take a final
name. Store wheels that a capture repacked are re-hashed too: the store is a
directory anyone can write to, and apply must never install a wheel whose
bytes differ from the lock's.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from envlock.errors import EnvlockError
from envlock.lock.model import Artifact, Package
from envlock.store import Store, blob_key, wheel_key
from envlock.tmpname import create_exclusive, private_sibling

CHUNK = 1 << 20


class ArtifactError(EnvlockError):
    """An artifact is missing or its bytes are not the locked ones."""


@dataclass(frozen=True, slots=True)
class Fetched:
    package: Package
    path: Path  # in the store


def hash_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        while chunk := stream.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _copy_verified(
    read: Callable[[int], bytes], target: Path, art: Artifact | tuple[str, str], where: str
) -> None:
    filename, sha256 = (art.filename, art.sha256) if isinstance(art, Artifact) else art
    # A server (or a file) may answer with endless bytes: stop one byte past what the lock says.
    limit = art.size if isinstance(art, Artifact) and art.size is not None and art.size >= 0 else None
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = private_sibling(target, ".part")
    digest = hashlib.sha256()
    written = 0
    try:
        with create_exclusive(tmp) as out:
            while chunk := read(CHUNK):
                written += len(chunk)
                if limit is not None and written > limit:
                    raise ArtifactError(
                        f"{filename} from {where}: more than the {limit} bytes the lock says; refusing it"
                    )
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != sha256:
            raise ArtifactError(
                f"{filename} from {where}: sha256 {digest.hexdigest()}, the lock says {sha256}; refusing it"
            )
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()


class VerifiedCache:
    """Store files already hashed, by stat key, so a warm apply does not re-read gigabytes.

    Any write, replace or chmod of a store file changes its stat key, and the
    file is hashed again.
    """

    def __init__(self, store: Store) -> None:
        self.path = store.root / ".verified.json"
        try:
            self.entries: dict[str, list[Any]] = json.loads(self.path.read_text())
        except (OSError, ValueError):
            self.entries = {}
        self.dirty = False

    def sha256(self, path: Path) -> str:
        st = path.stat()
        key = [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns]
        hit = self.entries.get(str(path))
        if hit is not None and hit[:4] == key:
            return str(hit[4])
        sha = hash_file(path)
        self.entries[str(path)] = [*key, sha]
        self.dirty = True
        return sha

    def save(self) -> None:
        if self.dirty:
            tmp = private_sibling(self.path)
            tmp.write_text(json.dumps(self.entries))
            os.replace(tmp, self.path)


def fetch_one(store: Store, lock_dir: Path, pkg: Package, verified: VerifiedCache | None = None) -> Fetched:
    art = pkg.wheel
    target = store.wheel_path(art.sha256, art.filename)
    if target.is_file():
        got = verified.sha256(target) if verified is not None else hash_file(target)
        if got != art.sha256:
            moved = store.quarantine(target)
            raise ArtifactError(
                f"{art.filename} in the store is corrupt (sha256 {got[:16]}…, the lock says "
                f"{art.sha256[:16]}…; {pkg.name} needs it); moved to {moved}. {_refetch_hint(art)}"
            )
        return Fetched(pkg, target)
    if art.path is not None:
        source = (lock_dir / art.path).resolve()
        if not source.is_file() and store.remote is not None:
            _download(store.remote + wheel_key(art.sha256, art.filename), target, art, pkg.name)
            return Fetched(pkg, target)
        if not source.is_file():
            raise ArtifactError(
                f"{pkg.name}: {art.path} is not in the store (capture it again, copy the store, "
                "or name a shared store in envlock.toml: docs/store.md)"
            )
        with open(source, "rb") as stream:
            _copy_verified(stream.read, target, art, str(source))
        return Fetched(pkg, target)
    if art.url is None:
        raise ArtifactError(f"{pkg.name}: the lock gives neither url nor path for {art.filename}")
    _download(art.url, target, art, pkg.name)
    return Fetched(pkg, target)


def _download(url: str, target: Path, art: Artifact | tuple[str, str], what: str) -> None:
    """Copy ``url`` (file:// or http(s)://) to ``target``, refusing bytes that hash otherwise."""
    if url.startswith("file://"):
        source = Path(unquote(urlparse(url).path))
        try:
            with open(source, "rb") as stream:
                _copy_verified(stream.read, target, art, url)
        except FileNotFoundError as exc:
            raise ArtifactError(f"{what}: {url} does not exist") from exc
        return
    import requests

    try:
        with requests.get(url, stream=True, timeout=60) as response:
            response.raise_for_status()
            _copy_verified(response.raw.read, target, art, url)
    except requests.RequestException as exc:
        raise ArtifactError(f"{what}: cannot download {url}: {exc}") from exc


def fetch_all(
    store: Store,
    lock_dir: Path,
    packages: tuple[Package, ...],
    on_progress: Callable[[int, int], None] | None = None,
) -> list[Fetched]:
    total = sum(p.wheel.size or 0 for p in packages)
    done = 0
    result = []
    verified = VerifiedCache(store)
    try:
        for pkg in packages:
            result.append(fetch_one(store, lock_dir, pkg, verified))
            done += pkg.wheel.size or 0
            if on_progress is not None:
                on_progress(done, total)
    finally:
        verified.save()
    return result


_RECAPTURE = (
    "capture the host it came from again (`envlock capture --no-cache HOST`; for a target lock, "
    "`envlock lock HOST`)"
)


def _refetch_hint(art: Artifact) -> str:
    if art.url is not None:
        return f"Run the command again to fetch it afresh from {art.url}."
    return f"To get it back, {_RECAPTURE}, or copy it from another store."


def blob(store: Store, sha256: str, what: str) -> Path:
    """A loose file (a bin/ script, a source archive) from the store, its bytes checked against its name."""
    path = store.blob_path(sha256)
    if not path.is_file() and store.remote is not None:
        _download(store.remote + blob_key(sha256), path, ("blob", sha256), what)
        return path  # hashed on the way in
    if not path.is_file():
        raise ArtifactError(f"{what}: blob {sha256} is not in the store {store.root}; {_RECAPTURE}")
    got = hash_file(path)
    if got != sha256:
        moved = store.quarantine(path)
        raise ArtifactError(
            f"{what}: store blob {sha256[:16]}… is corrupt (its bytes hash to {got[:16]}…); "
            f"moved to {moved}. To get it back, {_RECAPTURE}."
        )
    return path
