"""Plain PEP 751 locks that another tool wrote (uv, pip, PDM), for diff, review and show.

Such a lock holds packages with versions, artifacts (wheels, an sdist, a
VCS or directory source), their hashes, markers and an index, validated by
``packaging.pylock``; it has none of envlock's facts: no interpreter,
platform or GPU, no installed files or manifest, no native-library facts,
no payload digest. ``parse_any_lock`` reads it into the same ``Lock`` model
(``foreign`` set to its ``created-by``, packages with ``source =
"foreign"``) so the diff engine compares what it holds; ``FOREIGN_MISSING``
names what it cannot. Apply, verify and lock never read one
(``workspace.read_lock`` goes through ``parse_lock``, which refuses it).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from packaging.pylock import Pylock, PylockValidationError

from envlock.errors import LockError
from envlock.lock.io import parse_lock, read_lock_text
from envlock.lock.model import Artifact, Interpreter, Lock, Package, Platform

FOREIGN_MISSING = (
    "interpreter, platform and GPU",
    "installed files (no manifest)",
    "native-library facts (load and GPU checks)",
    "payload digest",
)


def foreign_note(lock: Lock, shown: str) -> str | None:
    """One line saying which envlock facts a foreign lock lacks; None for envlock's own."""
    if lock.foreign is None:
        return None
    return (
        f"{shown}: a plain PEP 751 lock (created by {lock.foreign}): compared on versions, artifacts, "
        f"hashes and markers; not available: {'; '.join(FOREIGN_MISSING)}"
    )


def read_any_lock(path: Path, shown: str | None = None) -> Lock:
    """A lock file, envlock's or any other valid PEP 751 lock (``LockError`` naming the file)."""
    source = shown or str(path)
    try:
        document = tomllib.loads(read_lock_text(path, source))
    except tomllib.TOMLDecodeError as exc:
        raise LockError(f"{source}: not valid TOML: {exc}") from exc
    return parse_any_lock(document, source)


def parse_any_lock(document: Mapping[str, Any], source: str) -> Lock:
    """An envlock lock (``parse_lock``), or any other valid PEP 751 lock read as a foreign one."""
    tool = document.get("tool")
    if isinstance(tool, Mapping) and "envlock" in tool:
        return parse_lock(document, source)
    try:
        pylock = Pylock.from_dict(dict(document))
    except PylockValidationError as exc:
        raise LockError(f"{source}: not a valid PEP 751 lock: {exc}") from exc
    packages = _unique([_package(pkg) for pkg in pylock.packages])
    return Lock(
        host=source,
        role="reference",
        venv="",
        site="",
        digest="",
        interpreter=Interpreter(implementation="", version=""),
        platform=Platform(machine=""),
        pyvenv={},
        indexes=tuple(sorted({p.index for p in packages if p.index})),
        find_links=(),
        packages=tuple(sorted(packages, key=lambda p: (p.name, p.marker or ""))),
        manifest_sha256="",
        manifest_files=0,
        foreign=pylock.created_by or "an unnamed tool",
    )


def _unique(packages: list[Package]) -> list[Package]:
    """PEP 751 allows one name twice under other markers; the diff keys packages by name."""
    seen: dict[str, int] = {}
    for pkg in packages:
        seen[pkg.name] = seen.get(pkg.name, 0) + 1
    return [
        replace(pkg, name=f"{pkg.name} ({pkg.marker or pkg.version})") if seen[pkg.name] > 1 else pkg
        for pkg in packages
    ]


def _hash(hashes: Mapping[str, str] | None) -> str:
    hashes = hashes or {}
    if "sha256" in hashes:
        return hashes["sha256"]
    return next((f"{algo}:{value}" for algo, value in sorted(hashes.items())), "")


def _name_of(name: str | None, url: str | None, path: str | None) -> str:
    where = url or path or ""
    return name or where.rstrip("/").rsplit("/", 1)[-1] or "?"


def _package(pkg: Any) -> Package:
    # Wheels, the sdist and an archive carry the same fields: one Artifact each.
    files = [*(pkg.wheels or ()), *(f for f in (pkg.sdist, pkg.archive) if f is not None)]
    artifacts = [
        Artifact(
            filename=_name_of(getattr(f, "name", None), f.url, f.path),
            sha256=_hash(f.hashes),
            size=f.size,
            url=f.url,
            path=f.path,
        )
        for f in files
    ]
    if pkg.vcs is not None:
        vcs = pkg.vcs
        where = vcs.url or vcs.path or "?"
        artifacts.append(Artifact(filename=f"{vcs.type}+{where}", sha256=vcs.commit_id, url=vcs.url))
    if pkg.directory is not None:
        artifacts.append(Artifact(filename=pkg.directory.path, sha256="", path=pkg.directory.path))
    artifacts.sort(key=lambda a: (a.filename, a.sha256))
    first = artifacts[0] if artifacts else Artifact(filename="(no artifact)", sha256="")
    return Package(
        name=str(pkg.name),
        version=str(pkg.version) if pkg.version is not None else "",
        wheel=first,
        source="foreign",
        index=pkg.index,
        requires_python=str(pkg.requires_python) if pkg.requires_python is not None else None,
        artifacts=tuple(artifacts[1:]),
        marker=str(pkg.marker) if pkg.marker is not None else None,
    )
