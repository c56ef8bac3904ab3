"""The file manifest: ``locks/pylock.<host>.files.tsv``.

One line per file, sorted by path: ``owner<TAB>path<TAB>sha256<TAB>size<TAB>kind``.
Line-based so that git diffs of a rebuilt package read file by file; kept
out of the TOML so a 300-package lock stays quick to parse and review. The
lock records the manifest's sha256, so a manifest cannot drift silently.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from envlock.errors import LockError
from envlock.lock.model import FileEntry

HEADER = "# envlock file manifest v1: owner\tpath\tsha256\tsize\tkind\n"
_KINDS = ("f", "x", "l")


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")


def _unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            out.append({"t": "\t", "n": "\n", "\\": "\\"}.get(text[i + 1], text[i + 1]))
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def render_manifest(entries: Iterable[FileEntry]) -> bytes:
    rows = sorted(entries, key=lambda e: (e.path, e.owner))
    body = "".join(
        f"{_escape(e.owner)}\t{_escape(e.path)}\t{_escape(e.sha256)}\t{e.size}\t{e.kind}\n" for e in rows
    )
    return (HEADER + body).encode("utf-8")


def manifest_sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def parse_manifest(data: bytes, source: str) -> list[FileEntry]:
    try:
        text = data.decode("utf-8", errors="strict")
    except UnicodeDecodeError as exc:
        raise LockError(f"{source}: not UTF-8 text (byte {exc.start})") from exc
    entries: list[FileEntry] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line or line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 5 or parts[4] not in _KINDS or not parts[3].isdigit():
            raise LockError(f"{source}:{lineno}: not a manifest row")
        owner, path, sha, size, kind = parts
        if "\\" in line:  # escapes are rare; skip the slow path for the rest
            owner, path, sha = _unescape(owner), _unescape(path), _unescape(sha)
        entries.append(FileEntry(owner=owner, path=path, sha256=sha, size=int(size), kind=kind))  # type: ignore[arg-type]
    return entries


def read_manifest(path: Path, expected_sha256: str | None = None) -> list[FileEntry]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LockError(f"{path}: cannot read manifest: {exc.strerror}") from exc
    if expected_sha256 is not None and manifest_sha256(data) != expected_sha256:
        raise LockError(f"{path}: sha256 does not match the lock's tool.envlock.manifest.sha256")
    return parse_manifest(data, str(path))
