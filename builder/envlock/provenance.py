"""Where a distribution's bytes came from: the exact wheel on an index.

A wheel *is* the installed distribution when (1) its name, version and tags
match the installed WHEEL, and (2) every file row of its RECORD appears in
the installed RECORD with the same hash. Installers may only add their own
rows (bookkeeping, bytecode, entry-point scripts) and relocate ``.data``
entries; installed bytes are then checked against the installed RECORD by
capture. The chain live bytes -> installed RECORD -> wheel RECORD -> wheel
sha256 is what lets a lock say "these bytes are that file on that index".

Answers are cached by (name, version, installed RECORD sha256, indexes):
a file name on an index never changes its bytes, so a hit stays true.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from packaging.tags import parse_tag
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from envlock.agent.protocol import DistFacts
from envlock.index import IndexClient, IndexFile
from envlock.lock.model import Artifact
from envlock.tmpname import private_sibling

_BOOKKEEPING = {"INSTALLER", "REQUESTED", "RECORD", "direct_url.json", "uv_cache.json"}


@dataclass(frozen=True, slots=True)
class Found:
    artifact: Artifact
    index: str


def _installer_added(path: str) -> bool:
    parts = path.split("/")
    if len(parts) == 2 and parts[0].endswith(".dist-info") and parts[1] in _BOOKKEEPING:
        return True
    return path.endswith(".pyc") or path.startswith("../")


def record_matches(
    wheel_rows: list[list[str]], installed_rows: Sequence[Sequence[Any]], scripts: set[str]
) -> bool:
    """True when the wheel's RECORD is what the installed RECORD says was installed."""
    installed = {row[0]: row[1] for row in installed_rows}
    wheel_paths: set[str] = set()
    for row in wheel_rows:
        path, digest = row[0], row[1] if len(row) > 1 else ""
        head = path.split("/", 1)[0]
        if head.endswith(".data"):
            # Relocated by the installer; scripts also get their shebang
            # rewritten, so only purelib/platlib bytes can be compared.
            scheme, _, rest = path.split("/", 1)[1].partition("/")
            if scheme in ("purelib", "platlib"):
                path = rest
            else:
                continue
        wheel_paths.add(path)
        if not digest:
            continue
        if installed.get(path) != digest:
            return False
    extra = [p for p in installed if p not in wheel_paths and not _installer_added(p)]
    return not extra


def expand_tags(tag_lines: list[str]) -> set[str]:
    """WHEEL ``Tag:`` lines as single tags: maturin writes compressed sets
    (``cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64``) where the
    spec has one line per tag."""
    expanded: set[str] = set()
    for line in tag_lines:
        try:
            expanded.update(str(t) for t in parse_tag(line.strip()))
        except ValueError:
            expanded.add(line.strip())
    return expanded


def tags_match(filename: str, installed_tags: list[str]) -> bool:
    try:
        _name, _version, _build, file_tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return False
    return {str(t) for t in file_tags} == expand_tags(installed_tags)


class ProvenanceCache:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.data: dict[str, Any] = {}
        if path is not None and path.is_file():
            try:
                self.data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                self.data = {}
        self.dirty = False

    @staticmethod
    def key(dist: DistFacts, sources: tuple[str, ...]) -> str:
        text = "|".join([dist["name"], dist["version"], dist["record_sha256"], *sources])
        return hashlib.sha256(text.encode()).hexdigest()

    def get(self, key: str) -> Found | None:
        hit = self.data.get(key)
        if not hit:
            return None
        return Found(Artifact(**hit["artifact"]), hit["index"])

    def put(self, key: str, found: Found) -> None:
        art = found.artifact
        self.data[key] = {
            "artifact": {
                "filename": art.filename,
                "sha256": art.sha256,
                "size": art.size,
                "url": art.url,
            },
            "index": found.index,
        }
        self.dirty = True

    def save(self) -> None:
        if self.path is None or not self.dirty:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = private_sibling(self.path)
        tmp.write_text(json.dumps(self.data, sort_keys=True), encoding="utf-8")
        os.replace(tmp, self.path)


def find_on_index(client: IndexClient, dist: DistFacts) -> Found | None:
    """The index wheel that is byte for byte this installed distribution, if any."""
    name = canonicalize_name(dist["name"])
    installed_tags = dist["wheel"]["tags"]
    scripts = set(dist["console_scripts"])
    for file in client.files(name):
        if not file.filename.endswith(".whl") or not tags_match(file.filename, installed_tags):
            continue
        if parse_wheel_filename(file.filename)[1] != Version(dist["version"]):
            continue
        if record_matches(client.read_record(file), dist["record"], scripts):
            return Found(_artifact(client, file), file.source)
    return None


def _artifact(client: IndexClient, file: IndexFile) -> Artifact:
    size = None
    if file.url.startswith("file://"):
        size = os.path.getsize(unquote(urlparse(file.url).path))
    return Artifact(filename=file.filename, sha256=client.wheel_sha256(file), size=size, url=file.url)
