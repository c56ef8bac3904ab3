"""The sdist a build starts from: found on the lock's indexes, fetched by sha256, unpacked safely.

The version is the lock's (its public part: a ``1.0+cu126`` wheel was built
from the ``1.0`` sdist), else ``--version``, else the newest sdist listed.
An sdist the index gives no sha256 for is refused: the build record names
every input by its hash. Members are unpacked with tarfile's ``data`` filter
(no absolute paths, no ``..``, no links out, no device files), the sdist
being as hostile as any other downloaded archive.
"""

from __future__ import annotations

import tarfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import InvalidSdistFilename, canonicalize_name, parse_sdist_filename
from packaging.version import InvalidVersion, Version

from envlock.errors import EnvlockError
from envlock.fetch import fetch_one
from envlock.index import IndexClient, IndexFile
from envlock.lock.model import Artifact, Package
from envlock.store import Store

# PEP 517: a project without [build-system] builds with setuptools' legacy backend.
DEFAULT_REQUIRES = ("setuptools>=40.8.0",)
DEFAULT_BACKEND = "setuptools.build_meta:__legacy__"


class SdistError(EnvlockError):
    """No sdist on the indexes, or one that cannot be unpacked or read."""


@dataclass(frozen=True, slots=True)
class Sdist:
    name: str
    version: str
    filename: str
    sha256: str
    url: str
    path: Path  # in the store


@dataclass(frozen=True, slots=True)
class BuildSystem:
    requires: tuple[str, ...]
    backend: str
    backend_path: tuple[str, ...]
    requires_dist: tuple[str, ...]  # the project's own Requires-Dist (PKG-INFO)


def find_sdist(client: IndexClient, name: str, version: str | None) -> IndexFile:
    """The sdist of ``name`` (at ``version``, compared by public version) on the indexes."""
    project = canonicalize_name(name)
    found: list[tuple[Version, IndexFile]] = []
    for file in client.files(project):
        if not file.filename.endswith(".tar.gz"):
            continue
        try:
            _name, release = parse_sdist_filename(file.filename)
        except (InvalidSdistFilename, InvalidVersion):
            continue
        found.append((release, file))
    where = ", ".join(client.urls + client.find_links) or "no index"
    if not found:
        raise SdistError(f"{project}: no sdist on {where}: envlock builds from an sdist")
    if version is not None:
        wanted = Version(version).public
        found = [(v, f) for v, f in found if v.public == wanted]
        if not found:
            raise SdistError(f"{project}: no sdist of version {wanted} on {where}")
    found.sort(key=lambda item: (item[0], item[1].filename))
    return found[-1][1]


def fetch_sdist(store: Store, lock_dir: Path, file: IndexFile) -> Sdist:
    if not file.sha256:
        raise SdistError(f"{file.url}: the index gives no sha256; envlock will not build from it blind")
    name, version = parse_sdist_filename(file.filename)
    artifact = Artifact(filename=file.filename, sha256=file.sha256, url=file.url)
    # fetch_one reads any artifact by url and sha256 into the store; an sdist is one.
    fetched = fetch_one(
        store, lock_dir, Package(name=name, version=str(version), wheel=artifact, source="index")
    )
    return Sdist(str(name), str(version), file.filename, file.sha256, file.url, fetched.path)


def unpack(sdist: Sdist, into: Path) -> Path:
    """Unpack into ``into`` (once: a resumed build keeps its tree and its object files)."""
    done = into / ".envlock-unpacked"
    if not done.is_file():
        into.mkdir(parents=True, exist_ok=True)
        try:
            with tarfile.open(sdist.path, "r:gz") as archive:
                archive.extractall(into, filter="data")
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise SdistError(f"{sdist.filename}: cannot unpack: {exc}") from exc
        done.write_text(sdist.sha256 + "\n")
    tops = [p for p in into.iterdir() if p.is_dir()]
    if len(tops) != 1:
        raise SdistError(f"{sdist.filename}: expected one top-level directory, found {len(tops)}")
    return tops[0]


def build_system(tree: Path, filename: str) -> BuildSystem:
    requires: tuple[str, ...] = DEFAULT_REQUIRES
    backend: object = DEFAULT_BACKEND
    backend_path: tuple[str, ...] = ()
    pyproject = tree / "pyproject.toml"
    if pyproject.is_file():
        try:
            data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise SdistError(f"{filename}: pyproject.toml: {exc}") from exc
        table = data.get("build-system")
        if isinstance(table, dict):
            requires = _strings(table.get("requires", []), filename, "requires")
            backend = table.get("build-backend") or DEFAULT_BACKEND
            backend_path = _strings(table.get("backend-path", []), filename, "backend-path")
    for entry in backend_path:
        if entry.startswith("/") or ".." in Path(entry).parts:
            raise SdistError(
                f"{filename}: pyproject.toml: build-system.backend-path: {entry!r} leaves the sdist"
            )
    if not isinstance(backend, str):
        raise SdistError(f"{filename}: pyproject.toml: build-system.build-backend: expected a string")
    return BuildSystem(requires, backend, backend_path, _requires_dist(tree))


def _strings(value: object, filename: str, key: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SdistError(f"{filename}: pyproject.toml: build-system.{key}: expected a list of strings")
    return tuple(value)


def _requires_dist(tree: Path) -> tuple[str, ...]:
    from email.parser import HeaderParser

    info = tree / "PKG-INFO"
    if not info.is_file():
        return ()
    message = HeaderParser().parsestr(info.read_text(encoding="utf-8", errors="replace"))
    return tuple(v.strip() for v in message.get_all("Requires-Dist") or [])
