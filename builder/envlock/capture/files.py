"""Which files belong to which distribution, and how they appear in the manifest.

Paths come from the agent relative to the venv root; the lock writes the
site-packages directory as ``site-packages/`` so rows compare across Python
minor versions (see docs/lock-format.md).
"""

from __future__ import annotations

import base64
import posixpath
from dataclasses import dataclass, field
from typing import Any

from packaging.utils import canonicalize_name

from envlock.agent.layout import import_names, is_bookkeeping, is_bytecode, is_scaffold
from envlock.agent.protocol import DistFacts, Inventory, VenvDescription
from envlock.lock.model import CudaImages, FileEntry, NativeLib


@dataclass(frozen=True)
class LiveFiles:
    """A snapshot's files by venv-relative path, for the lookups of every distribution."""

    site: str
    files: dict[str, tuple[str, int, bool]]  # sha256, size, executable
    links: dict[str, str]  # link target
    normalized: dict[str, tuple[str, int]]  # bin/ scripts with ``#!python``: sha256, size
    native: dict[str, dict[str, Any]]  # ELF facts of libraries

    @classmethod
    def of(cls, description: VenvDescription, inventory: Inventory) -> LiveFiles:
        return cls(
            site=description["site"],
            files={rel: (sha, size, executable) for rel, sha, size, executable in inventory["files"]},
            links=dict(inventory["links"]),
            normalized={rel: (sha, size) for rel, (sha, size) in inventory["bin_normalized"].items()},
            native=inventory["native"],
        )


@dataclass
class DistFiles:
    entries: list[FileEntry] = field(default_factory=list)
    modified: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    native: list[NativeLib] = field(default_factory=list)


def lock_path_of(site: str, venv_rel: str) -> str:
    """``lib/python3.11/site-packages/x`` -> ``site-packages/x``: stable across Pythons."""
    if venv_rel.startswith(site + "/"):
        return "site-packages/" + venv_rel[len(site) + 1 :]
    return venv_rel


def b64_sha256(hex_digest: str) -> str:
    return "sha256=" + base64.urlsafe_b64encode(bytes.fromhex(hex_digest)).rstrip(b"=").decode()


def collect_files(live: LiveFiles, dist: DistFacts, owners: dict[str, str], warnings: list[str]) -> DistFiles:
    site = live.site
    files = live.files
    links = live.links
    normalized = live.normalized
    name = canonicalize_name(dist["name"])
    out = DistFiles()
    for path, digest, _size in dist["record"]:
        if "/." in path or path.startswith((".", "/")):
            rel = posixpath.normpath(posixpath.join(site, path))
        else:
            rel = f"{site}/{path}"  # already normal: skip the costly normpath
        if rel.startswith("../"):
            warnings.append(f"{name}: RECORD row {path!r} points outside the venv; not captured")
            continue
        if is_bytecode(rel) or is_bookkeeping(rel):
            continue
        owners[rel] = name
        shown = lock_path_of(site, rel)
        if rel in files:
            sha, size, executable = files[rel]
            if digest.startswith("sha256=") and b64_sha256(sha) != digest:
                out.modified.append(shown)
            if rel in normalized:
                sha, size = normalized[rel]
            out.entries.append(
                FileEntry(owner=name, path=shown, sha256=sha, size=size, kind="x" if executable else "f")
            )
            facts = live.native.get(rel)
            if facts is not None:
                out.native.append(native_lib(shown, files[rel][0], facts))
        elif rel in links:
            out.entries.append(FileEntry(owner=name, path=shown, sha256=links[rel], size=0, kind="l"))
        else:
            out.missing.append(shown)
    return out


def cuda_images(facts: dict[str, Any] | None) -> CudaImages | None:
    """The agent's device-code summary (``envlock.binary.elf.device_code_summary``) as a record."""
    if facts is None:
        return None
    return CudaImages(
        containers=int(facts["containers"]),
        relocatable=int(facts["relocatable"]),
        unreadable=int(facts["unreadable"]),
        images=dict(facts["images"]),
    )


def native_lib(path: str, sha: str, facts: dict[str, Any]) -> NativeLib:
    if "error" in facts:
        return NativeLib(path=path, sha256=sha, error=facts["error"])
    return NativeLib(
        path=path,
        sha256=sha,
        soname=facts.get("soname"),
        needed=tuple(facts.get("needed", [])),
        rpath=tuple(facts.get("rpath", [])),
        runpath=tuple(facts.get("runpath", [])),
        version_needs=facts.get("version_needs", {}),
        cuda_sections=facts.get("cuda_sections", {}),
        cuda_images=cuda_images(facts.get("cuda_images")),
    )


def _importable(name: str) -> str | None:
    """``nvidia/cusparselt`` (old setuptools top_level.txt) -> ``nvidia.cusparselt``."""
    dotted = name.strip().replace("/", ".").strip(".")
    return dotted if dotted and all(part.isidentifier() for part in dotted.split(".")) else None


def top_level_names(top_level: list[str] | None, entries: list[FileEntry]) -> tuple[str, ...]:
    """Import names a distribution provides: top_level.txt's lines, else derived from its files."""
    if top_level:
        listed = {_importable(name) for name in top_level}
        return tuple(sorted(n for n in listed if n))
    prefix = "site-packages/"
    return tuple(import_names(e.path[len(prefix) :] for e in entries if e.path.startswith(prefix)))


def unowned_paths(live: LiveFiles, owners: dict[str, str], rows: list[FileEntry]) -> list[str]:
    site = live.site
    result = []
    for rel in list(live.files) + list(live.links):
        if rel in owners or is_scaffold(rel):
            continue
        if is_bookkeeping(rel):
            continue
        result.append(lock_path_of(site, rel))
    return sorted(result)


def scaffold_rows(live: LiveFiles, owners: dict[str, str]) -> list[FileEntry]:
    """Manifest rows for files no distribution owns: ``:venv`` scaffold or ``:unowned``."""
    site = live.site
    rows = []
    for rel, (sha, size, executable) in live.files.items():
        if rel in owners:
            continue
        if is_bookkeeping(rel):
            continue
        owner = ":venv" if is_scaffold(rel) else ":unowned"
        rows.append(
            FileEntry(
                owner=owner,
                path=lock_path_of(site, rel),
                sha256=sha,
                size=size,
                kind="x" if executable else "f",
            )
        )
    for rel, target in live.links.items():
        if rel not in owners:
            owner = ":venv" if is_scaffold(rel) else ":unowned"
            rows.append(FileEntry(owner=owner, path=lock_path_of(site, rel), sha256=target, size=0, kind="l"))
    return rows
