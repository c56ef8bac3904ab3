"""Air-gapped bundles: one file holding all a host's apply needs, and reading one back.

``envlock bundle HOST -o FILE`` writes an uncompressed tar (wheels are
compressed already): first ``envlock-bundle.json``, which lists every other
member with its sha256 and size, then the lock and its manifest, every
artifact in the store's own layout (``store/wheels/<sha256>/<name>``,
``store/blobs/<xx>/<sha256>``) and the uv the host installs with
(``uv/<sha256>/uv``). ``envlock apply HOST --from FILE`` reads it back with
no network.

A bundle is hostile input until checked, member by member, as it streams:
the listing comes first and is bounded; every member must be a regular file
the listing names, once, under one of the shapes above (no ``..``, no
absolute path, no link or device), exactly the listed size, and hash to the
listed sha256 before it takes a final name (a partial file never does).
Members the listing names but the file lacks are an error too.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tarfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from envlock.agent.pathguard import PathError, safe_join
from envlock.errors import EnvlockError, LockError
from envlock.fetch import VerifiedCache, blob, fetch_one, hash_file
from envlock.lock.digest import check_lock_digest
from envlock.lock.io import read_lock
from envlock.lock.manifest import manifest_sha256, read_manifest_bytes
from envlock.lock.model import Lock
from envlock.store import Store, blob_key, open_store, wheel_key
from envlock.tmpname import create_exclusive, private_sibling
from envlock.transfer import uv_binary
from envlock.workspace import LockedVenv, Workspace

FORMAT = "envlock-bundle-1"
LISTING = "envlock-bundle.json"
MAX_LISTING = 64 << 20  # bytes; a listing of a million artifacts is well under this
CHUNK = 1 << 20
_HEX64 = "[0-9a-f]{64}"
_NAME = r"[A-Za-z0-9_.+-]{1,255}"  # one path component, as wheel and blob names are
_SHAPES = (
    re.compile(r"lock/pylock\.[A-Za-z0-9_%-]{1,200}\.(toml|files\.tsv)"),
    re.compile(rf"store/wheels/{_HEX64}/{_NAME}"),
    re.compile(r"store/blobs/[0-9a-f]{2}/" + _HEX64),
    re.compile(rf"uv/{_HEX64}/uv"),
)


class BundleError(EnvlockError):
    """A bundle file is not one envlock wrote, or was damaged or tampered with."""


@dataclass(frozen=True, slots=True)
class Member:
    path: str  # inside the bundle
    sha256: str
    size: int


@dataclass(frozen=True, slots=True)
class WrittenBundle:
    host: str
    path: Path
    digest: str  # the lock's
    members: int
    bytes: int  # the bundle file's size


def _members_of(workspace: Workspace, store: Store, host: str, lock: Lock) -> list[tuple[str, Path]]:
    lock_path, manifest_path = workspace.lock_path(host), workspace.manifest_path(host)
    found = [(f"lock/{lock_path.name}", lock_path), (f"lock/{manifest_path.name}", manifest_path)]
    verified = VerifiedCache(store)
    try:
        for pkg in lock.packages:
            path = fetch_one(store, workspace.locks_dir, pkg, verified).path
            found.append(("store/" + wheel_key(pkg.wheel.sha256, pkg.wheel.filename), path))
            for rel, sha in pkg.scripts.items():
                found.append(("store/" + blob_key(sha), blob(store, sha, f"{pkg.name} {rel}")))
            if pkg.source_tree is not None:
                sha = pkg.source_tree.sha256
                found.append(("store/" + blob_key(sha), blob(store, sha, f"{pkg.name} source tree")))
    finally:
        verified.save()
    uv = uv_binary()
    found.append((f"uv/{hash_file(uv)}/uv", uv))
    return list(dict(found).items())


def write_bundle(
    workspace: Workspace, host: str, out: Path, on_member: Callable[[str], None] | None = None
) -> WrittenBundle:
    """Everything ``apply HOST`` needs, in one file; the lock is checked first, as apply checks it."""
    lock = workspace.read_lock(host)
    workspace.read_locked(host, lock).rows()  # manifest and tree digests as written
    store = open_store(workspace)
    members = _members_of(workspace, store, host, lock)
    listed = [Member(name, hash_file(path), path.stat().st_size) for name, path in members]
    listing = {
        "format": FORMAT,
        "host": host,
        "digest": lock.digest,
        "members": [{"path": m.path, "sha256": m.sha256, "size": m.size} for m in listed],
    }
    data = json.dumps(listing, indent=1, sort_keys=True).encode()
    out = out.absolute()
    tmp = private_sibling(out, ".part")
    try:
        with (
            create_exclusive(tmp) as raw,
            tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar,
        ):
            _add(tar, LISTING, len(data), _bytes_reader(data))
            for (name, path), member in zip(members, listed, strict=True):
                if on_member is not None:
                    on_member(name)
                with open(path, "rb") as stream:
                    _add(tar, name, member.size, stream)
        with open(tmp, "rb") as written:  # on disk before it has its name (a crash, a power cut)
            os.fsync(written.fileno())
        os.replace(tmp, out)
    except OSError as exc:  # a full disk, most likely: one line naming the file, no partial bundle
        raise BundleError(f"{exc.filename or out}: cannot write the bundle: {exc.strerror or exc}") from exc
    finally:
        tmp.unlink(missing_ok=True)
    return WrittenBundle(host, out, lock.digest, len(listed) + 1, out.stat().st_size)


def _bytes_reader(data: bytes) -> IO[bytes]:
    import io

    return io.BytesIO(data)


def _add(tar: tarfile.TarFile, name: str, size: int, stream: IO[bytes]) -> None:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = 0o644
    tar.addfile(info, stream)


# ------------------------------------------------------------------ reading one back


@dataclass(frozen=True, slots=True)
class ImportedBundle:
    host: str
    locked: LockedVenv  # the bundle's lock and manifest, checked
    uv: Path  # the uv it carries, hash checked
    objects: int  # store objects it filled in


def _listing(tar: tarfile.TarFile, shown: str) -> tuple[str, dict[str, Member]]:
    first = tar.next()
    if first is None or first.name != LISTING or not first.isreg():
        raise BundleError(f"{shown}: not an envlock bundle (its first member is not {LISTING})")
    if first.size > MAX_LISTING:
        raise BundleError(f"{shown}: {LISTING} is {first.size} bytes, over {MAX_LISTING}")
    stream = tar.extractfile(first)
    assert stream is not None  # a regular file
    try:
        table: Any = json.loads(stream.read())
    except ValueError as exc:
        raise BundleError(f"{shown}: {LISTING}: not JSON ({exc})") from exc
    if not isinstance(table, dict) or table.get("format") != FORMAT:
        raise BundleError(f"{shown}: {LISTING}: format is not {FORMAT}")
    entries = table.get("members")
    if not isinstance(entries, list) or not isinstance(table.get("host"), str):
        raise BundleError(f"{shown}: {LISTING}: members and host missing")
    members: dict[str, Member] = {}
    for i, entry in enumerate(entries):
        where = f"{shown}: {LISTING}: members[{i}]"
        if not isinstance(entry, dict):
            raise BundleError(f"{where}: expected a table")
        path, sha, size = entry.get("path"), entry.get("sha256"), entry.get("size")
        if (
            not isinstance(path, str)
            or not any(shape.fullmatch(path) for shape in _SHAPES)
            or any(part in (".", "..") for part in path.split("/"))
        ):
            raise BundleError(f"{where}: refusing member name {path!r}")
        if not isinstance(sha, str) or not re.fullmatch(_HEX64, sha):
            raise BundleError(f"{where}: sha256 must be 64 hex digits, got {sha!r}")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise BundleError(f"{where}: size must be a non-negative integer, got {size!r}")
        if path in members:
            raise BundleError(f"{where}: {path} listed twice")
        if not path.startswith("lock/") and sha not in path.split("/"):
            raise BundleError(f"{where}: {path} is not named by its sha256 {sha}")
        members[path] = Member(path, sha, size)
    return str(table["host"]), members


def import_bundle(workspace: Workspace, bundle: Path, host: str, into: Path) -> ImportedBundle:
    """Check ``bundle`` member by member; store objects go into the workspace's store (a cache),
    the lock, manifest and uv into ``into``. Refused as a whole at the first bad member."""
    shown = str(bundle)
    store = open_store(workspace)
    try:
        tar = tarfile.open(bundle, "r:")  # noqa: SIM115 - closed below; uncompressed only
    except (OSError, tarfile.TarError) as exc:
        raise BundleError(f"{shown}: cannot read as an envlock bundle: {exc}") from exc
    with tar:
        try:
            host_in, listed = _listing(tar, shown)
            if host_in != host:
                raise BundleError(f"{shown}: a bundle for host {host_in}, not {host}")
            seen = _extract_all(tar, shown, listed, store, into)
        except tarfile.TarError as exc:
            raise BundleError(f"{shown}: damaged: {exc}") from exc
    missing = sorted(set(listed) - seen)
    if missing:
        raise BundleError(f"{shown}: {len(missing)} listed member(s) missing, first {missing[0]}")
    locks = [m for m in listed if m.startswith("lock/") and m.endswith(".toml")]
    manifests = [m for m in listed if m.endswith(".files.tsv")]
    uvs = [m for m in listed if m.startswith("uv/")]
    if len(locks) != 1 or len(manifests) != 1 or len(uvs) != 1:
        raise BundleError(f"{shown}: expected one lock, one manifest and one uv")
    locked = _checked_lock(into / locks[0], into / manifests[0], f"{shown}:{locks[0]}")
    objects = sum(1 for m in listed if m.startswith("store/"))
    return ImportedBundle(host, locked, into / uvs[0], objects)


def _extract_all(
    tar: tarfile.TarFile, shown: str, listed: dict[str, Member], store: Store, into: Path
) -> set[str]:
    seen: set[str] = set()
    for info in _rest(tar):
        member = listed.get(info.name)
        if member is None:
            raise BundleError(f"{shown}: refusing member {info.name!r}: not in {LISTING}")
        if not info.isreg():
            raise BundleError(f"{shown}: refusing member {info.name!r}: not a regular file")
        if info.name in seen:
            raise BundleError(f"{shown}: member {info.name!r} twice")
        if info.size != member.size:
            raise BundleError(f"{shown}: {info.name}: {info.size} bytes, the listing says {member.size}")
        seen.add(info.name)
        try:  # the name is checked already; a symlinked directory on the way is refused here
            if info.name.startswith("store/"):
                target = Path(safe_join(str(store.root), info.name.removeprefix("store/"), "bundle member"))
                if target.is_file() and not target.is_symlink() and hash_file(target) == member.sha256:
                    continue  # already in the store
            else:
                target = Path(safe_join(str(into), info.name, "bundle member"))
        except PathError as exc:
            raise BundleError(f"{shown}: {exc}") from exc
        stream = tar.extractfile(info)
        assert stream is not None
        _write_checked(stream, target, member, shown)
    return seen


def _rest(tar: tarfile.TarFile) -> Iterable[tarfile.TarInfo]:
    while (info := tar.next()) is not None:
        yield info


def _write_checked(stream: IO[bytes], target: Path, member: Member, shown: str) -> None:
    tmp = private_sibling(target, ".part")
    digest = hashlib.sha256()
    try:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with create_exclusive(tmp) as out:
                while chunk := stream.read(CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
        except OSError as exc:  # a full disk: the store keeps no partial object
            raise BundleError(f"{shown}: {member.path}: cannot write {tmp}: {exc.strerror or exc}") from exc
        if digest.hexdigest() != member.sha256:
            raise BundleError(
                f"{shown}: {member.path}: sha256 {digest.hexdigest()}, the listing says {member.sha256}; "
                "refusing the bundle"
            )
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def _checked_lock(lock_path: Path, manifest_path: Path, shown: str) -> LockedVenv:
    """The bundle's lock, checked as ``Workspace.read_locked`` checks a workspace's."""
    lock = read_lock(lock_path, shown=shown)
    check_lock_digest(lock, shown)
    data = read_manifest_bytes(manifest_path, f"{shown} manifest")
    if manifest_sha256(data) != lock.manifest_sha256:
        raise LockError(f"{shown}: the bundle's manifest does not match the lock's sha256")
    locked = LockedVenv(lock, data, shown, f"{shown} manifest")
    locked.rows()
    return locked
